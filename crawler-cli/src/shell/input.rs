//! Where the shell's commands come from: a terminal, with line editing and a history file
//! (the `line-editing` feature; without it, plain lines), or a pipe, read line by line
//! within a bound.

use std::path::PathBuf;

#[cfg(feature = "line-editing")]
use rustyline::error::ReadlineError;
#[cfg(feature = "line-editing")]
use rustyline::history::{FileHistory, History};
#[cfg(feature = "line-editing")]
use rustyline::{Config, Editor};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// The longest command line read from a pipe, and the longest kept in the history: a
/// selector is a line, not a file, and a stray binary on stdin must not fill the memory.
pub(crate) const MAX_LINE: usize = 16 * 1024;

/// Entries the history file keeps (the oldest go first).
#[cfg(feature = "line-editing")]
const HISTORY_SIZE: usize = 1000;

/// One line read, or why none was.
pub(crate) enum Line {
    /// A line, without its end of line.
    Text(String),
    /// A line longer than [`MAX_LINE`]: skipped whole.
    TooLong,
    /// Ctrl-C at the prompt: the line is abandoned, the session goes on.
    #[cfg_attr(not(feature = "line-editing"), allow(dead_code))]
    Interrupted,
    /// End of input (Ctrl-D, or the pipe's end).
    End,
}

/// Where the history is kept: `$XDG_STATE_HOME/crawler/shell_history`, else
/// `~/.local/state/crawler/shell_history` (the XDG place for history), or
/// `%LOCALAPPDATA%\crawler\shell_history` on Windows. `None` when no such directory is known.
pub(crate) fn history_path() -> Option<PathBuf> {
    let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    let base = if cfg!(windows) {
        std::env::var_os("LOCALAPPDATA").and_then(absolute)?
    } else {
        std::env::var_os("XDG_STATE_HOME")
            .and_then(absolute)
            .or_else(|| {
                std::env::var_os("HOME")
                    .and_then(absolute)
                    .map(|h| h.join(".local").join("state"))
            })?
    };
    Some(base.join("crawler").join("shell_history"))
}

/// A terminal prompt with line editing and a bounded, persistent history.
#[cfg(feature = "line-editing")]
pub(crate) struct Prompt {
    editor: Option<Editor<(), FileHistory>>,
    history: Option<PathBuf>,
}

#[cfg(feature = "line-editing")]
impl Prompt {
    /// A prompt keeping its history in `history` (none: nothing is kept).
    pub(crate) fn new(history: Option<PathBuf>) -> Result<Self, String> {
        let config = Config::builder()
            .max_history_size(HISTORY_SIZE)
            .map_err(|e| format!("cannot set up the prompt: {e}"))?
            .history_ignore_dups(true)
            .map_err(|e| format!("cannot set up the prompt: {e}"))?
            .history_ignore_space(true)
            .auto_add_history(false)
            .build();
        let mut editor = Editor::<(), FileHistory>::with_config(config)
            .map_err(|e| format!("cannot set up the prompt: {e}"))?;
        // A missing file is a first session; an unreadable one only costs the history.
        if let Some(path) = &history
            && path.exists()
            && let Err(e) = editor.load_history(path)
        {
            eprintln!("warning: cannot read the history {}: {e}", path.display());
        }
        Ok(Self {
            editor: Some(editor),
            history,
        })
    }

    /// Read one line at `prompt`. The editor blocks on the terminal, so it runs on a
    /// blocking thread: the runtime's own threads keep serving the HTTP client's
    /// connections meanwhile.
    pub(crate) async fn read(&mut self, prompt: &str) -> Line {
        let Some(mut editor) = self.editor.take() else {
            return Line::End;
        };
        let prompt = prompt.to_owned();
        let joined = tokio::task::spawn_blocking(move || {
            let got = editor.readline(&prompt);
            (editor, got)
        })
        .await;
        let Ok((mut editor, got)) = joined else {
            return Line::End;
        };
        let line = match got {
            Ok(line) => {
                if line.len() <= MAX_LINE && !line.trim().is_empty() {
                    let _ = editor.add_history_entry(line.as_str());
                }
                Line::Text(line)
            }
            Err(ReadlineError::Interrupted) => Line::Interrupted,
            Err(ReadlineError::Eof) => Line::End,
            Err(e) => {
                eprintln!("error: cannot read from the terminal: {e}");
                Line::End
            }
        };
        self.editor = Some(editor);
        line
    }

    /// Write this session's lines to the history file (appended, so two shells open at
    /// once both keep theirs; the file is cut to the history size as it is written).
    pub(crate) fn save(&mut self) {
        let (Some(editor), Some(path)) = (self.editor.as_mut(), &self.history) else {
            return;
        };
        if editor.history().is_empty() {
            return;
        }
        if let Some(dir) = path.parent()
            && let Err(e) = std::fs::create_dir_all(dir)
        {
            eprintln!("warning: cannot create {}: {e}", dir.display());
            return;
        }
        if let Err(e) = editor.append_history(path) {
            eprintln!("warning: cannot write the history {}: {e}", path.display());
        }
    }
}

/// A plain terminal prompt, built without the `line-editing` feature (a project's runner,
/// which compiles less): lines as the terminal gives them, no history.
#[cfg(not(feature = "line-editing"))]
pub(crate) struct Prompt {
    stdin: tokio::io::BufReader<tokio::io::Stdin>,
}

#[cfg(not(feature = "line-editing"))]
impl Prompt {
    /// A prompt; `history` is not kept without line editing.
    pub(crate) fn new(history: Option<PathBuf>) -> Result<Self, String> {
        let _ = history;
        Ok(Self {
            stdin: tokio::io::BufReader::new(tokio::io::stdin()),
        })
    }

    /// Print `prompt` and read one line within [`MAX_LINE`].
    pub(crate) async fn read(&mut self, prompt: &str) -> Line {
        use std::io::Write;
        print!("{prompt}");
        let _ = std::io::stdout().flush();
        match read_piped(&mut self.stdin).await {
            Ok(line) => line,
            Err(e) => {
                eprintln!("error: cannot read from the terminal: {e}");
                Line::End
            }
        }
    }

    /// Nothing to keep.
    pub(crate) fn save(&mut self) {}
}

/// Read one line of at most [`MAX_LINE`] bytes from `reader`; a longer one is read to its
/// end and dropped, in bounded pieces.
pub(crate) async fn read_piped<R: AsyncBufRead + Unpin>(reader: &mut R) -> std::io::Result<Line> {
    let mut buf = Vec::new();
    let limit = u64::try_from(MAX_LINE).unwrap_or(u64::MAX) + 1;
    let n = (&mut *reader)
        .take(limit)
        .read_until(b'\n', &mut buf)
        .await?;
    if n == 0 {
        return Ok(Line::End);
    }
    if buf.last() != Some(&b'\n') && buf.len() > MAX_LINE {
        // The rest of the line, dropped piece by piece.
        loop {
            buf.clear();
            let n = (&mut *reader)
                .take(limit)
                .read_until(b'\n', &mut buf)
                .await?;
            if n == 0 || buf.last() == Some(&b'\n') {
                return Ok(Line::TooLong);
            }
        }
    }
    while matches!(buf.last(), Some(b'\n' | b'\r')) {
        buf.pop();
    }
    Ok(Line::Text(String::from_utf8_lossy(&buf).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn piped_lines_are_bounded() {
        let long = "x".repeat(MAX_LINE + 10);
        let input = format!("h1\r\n{long}\nstatus\nlast");
        let mut reader = tokio::io::BufReader::new(input.as_bytes());
        let mut got = Vec::new();
        for _ in 0..10 {
            match read_piped(&mut reader).await.unwrap_or(Line::End) {
                Line::Text(t) => got.push(t),
                Line::TooLong => got.push("<too long>".to_owned()),
                Line::Interrupted => got.push("<interrupted>".to_owned()),
                Line::End => break,
            }
        }
        assert_eq!(got, ["h1", "<too long>", "status", "last"]);
    }
}
