//! `shell URL`: fetch one page politely, then explore it with CSS selectors, Scrapy's
//! `shell` for this framework. The `crawler` binary and a project's [`Runner`](crate::Runner)
//! both have the verb; in a project the page is fetched with the project's settings and
//! downloader middlewares, as its crawl would fetch it.
//!
//! - `command.rs`: what a typed line means, and how results are cut to size.
//! - `input.rs`: the terminal prompt (line editing, history file) and the piped reader.
//! - `session.rs`: the current page, the fetches and what each command prints.
//!
//! Modes: with `--css SEL` (repeatable) the selections are printed and the shell exits;
//! otherwise commands come from the terminal (a prompt) or, when stdin is not one, line by
//! line from stdin. Results go to stdout, fetch summaries and errors to stderr.

mod command;
mod input;
mod session;

use std::io::{IsTerminal, Write};

use crawler::core::{Request, Settings};

use crate::common::{Failure, failed, usage};
use command::{Command, Limits};
use crawler::{Error, ErrorKind};
use input::{Line, Prompt};
use session::Flow;

pub(crate) use session::Session;

/// A session that only fetches (no printing limits apply): what `parse` fetches pages with,
/// so they go out as the shell's and a crawl's do (robots.txt, downloader middlewares).
pub(crate) fn fetcher(settings: &Settings) -> Result<Session, Error> {
    Session::new(
        settings,
        Limits {
            max_matches: 0,
            max_chars: 0,
            numbered: false,
        },
    )
}

/// Options of `shell`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ShellArgs {
    /// The page to start from (robots.txt is checked).
    pub url: String,
    /// Print what this selector selects and exit (repeatable; `SEL::text` and
    /// `SEL::attr(NAME)` as in Scrapy; an XPath such as `//h1/text()` is read as XPath).
    #[arg(long, value_name = "SELECTOR")]
    pub css: Vec<String>,
    /// Most entries printed per command (0: all).
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub max_matches: usize,
    /// Most characters printed per entry (0: all).
    #[arg(long, default_value_t = 2000, value_name = "N")]
    pub max_chars: usize,
    /// Keep no history file (by default the prompt's history is kept in
    /// $XDG_STATE_HOME/crawler/shell_history).
    #[arg(long)]
    pub no_history: bool,
}

/// Run the shell with resolved settings: the initial fetch, then `--css`, the prompt, or
/// stdin's commands. A failed initial fetch, and in the non-interactive modes a failed
/// command, make it exit 1.
pub(crate) async fn run(settings: &Settings, args: &ShellArgs) -> Result<(), Failure> {
    // Checked before anything is sent: a typo should not cost the site a request.
    let queries = args
        .css
        .iter()
        .map(|css| command::query(css, None, command::Pick::Text))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| usage(Error::new(ErrorKind::Other, e)))?;
    let request = Request::get(&args.url).map_err(usage)?;
    crawler::warn_unchecked_proxy(settings);
    let interactive = args.css.is_empty() && std::io::stdin().is_terminal();
    let limits = Limits {
        max_matches: args.max_matches,
        max_chars: args.max_chars,
        numbered: interactive,
    };
    let mut session = Session::new(settings, limits).map_err(failed)?;
    let summary = session
        .load(request)
        .await
        .map_err(|e| failed(Error::new(ErrorKind::Other, e)))?;
    if !queries.is_empty() {
        let mut out = std::io::stdout().lock();
        for query in queries {
            let mut buf = Vec::new();
            session
                .run(Command::Select(query), &mut buf)
                .await
                .map_err(|e| failed(Error::new(ErrorKind::Other, e)))?;
            out.write_all(&buf).map_err(out_err)?;
        }
        return out.flush().map_err(out_err);
    }
    let failures = if interactive {
        eprintln!("{summary}");
        eprintln!("Type a CSS selector or an XPath, or `help` for the commands; Ctrl-D leaves.");
        prompt(&mut session, args).await?;
        0
    } else {
        eprintln!("{summary}");
        piped(&mut session).await?
    };
    if failures > 0 {
        return Err(failed(Error::new(
            ErrorKind::Other,
            format!("{failures} shell command(s) failed"),
        )));
    }
    Ok(())
}

fn out_err(e: std::io::Error) -> Failure {
    failed(Error::new(
        ErrorKind::Other,
        format!("cannot write to stdout: {e}"),
    ))
}

/// One command line run: its output to stdout, its error to stderr. `Ok(true)` when it
/// succeeded, `Err` only when stdout is gone.
async fn step(session: &mut Session, line: &str) -> Result<(Flow, bool), Failure> {
    let cmd = match command::parse(line) {
        Ok(cmd) => cmd,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok((Flow::Continue, false));
        }
    };
    // Buffered, so a fetch's summary on stderr never lands inside a half-written result.
    let mut buf = Vec::new();
    let result = session.run(cmd, &mut buf).await;
    let mut out = std::io::stdout().lock();
    out.write_all(&buf)
        .and_then(|()| out.flush())
        .map_err(out_err)?;
    match result {
        Ok(flow) => Ok((flow, true)),
        Err(e) => {
            eprintln!("error: {}", crawler::core::redact::scrub(&e));
            Ok((Flow::Continue, false))
        }
    }
}

/// The interactive session: a prompt until `quit` or Ctrl-D.
async fn prompt(session: &mut Session, args: &ShellArgs) -> Result<(), Failure> {
    let history = if args.no_history {
        None
    } else {
        input::history_path()
    };
    let mut prompt = Prompt::new(history).map_err(|e| failed(Error::new(ErrorKind::Other, e)))?;
    let outcome = loop {
        let line = match prompt.read("crawler> ").await {
            Line::Text(line) => line,
            Line::Interrupted | Line::TooLong => continue,
            Line::End => break Ok(()),
        };
        match step(session, &line).await {
            Ok((Flow::Quit, _)) => break Ok(()),
            Ok((Flow::Continue, _)) => {}
            Err(e) => break Err(e),
        }
    };
    prompt.save();
    outcome
}

/// Commands from stdin, one a line, until its end or `quit`; returns how many failed.
async fn piped(session: &mut Session) -> Result<usize, Failure> {
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin());
    let mut failures = 0usize;
    loop {
        let line = match input::read_piped(&mut stdin).await {
            Ok(Line::Text(line)) => line,
            Ok(Line::TooLong) => {
                eprintln!(
                    "error: a command line longer than {} bytes was skipped",
                    input::MAX_LINE
                );
                failures += 1;
                continue;
            }
            Ok(Line::Interrupted) => continue,
            Ok(Line::End) => return Ok(failures),
            Err(e) => {
                return Err(failed(Error::new(
                    ErrorKind::Other,
                    format!("cannot read commands from stdin: {e}"),
                )));
            }
        };
        let (flow, ok) = step(session, &line).await?;
        failures += usize::from(!ok);
        if flow == Flow::Quit {
            return Ok(failures);
        }
    }
}
