//! The live progress display of the command lines: on a terminal (stderr), a spinner with
//! the figures of [`crawler::progress::display`]; elsewhere (a pipe, a file, CI) the
//! library's periodic `progress:` log lines. Log lines written through [`LogWriter`] are
//! printed above the display instead of through it.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use crawler::progress::{display, follow, spawn_log_lines};
use crawler::core::Progress;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The live display, if one is drawn, so log lines can be printed around it.
static ACTIVE_BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Follow progress snapshots until the crawl finishes. On a terminal (stderr) this draws a
/// live display; otherwise it logs one `progress:` line every `interval` (and one at the end).
pub fn spawn(rx: watch::Receiver<Progress>, interval: Duration) -> JoinHandle<()> {
    if !std::io::stderr().is_terminal() {
        return spawn_log_lines(rx, interval);
    }
    tokio::spawn(async move {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(120));
        if let Ok(mut active) = ACTIVE_BAR.lock() {
            *active = Some(bar.clone());
        }
        follow(rx, |p, rate| bar.set_message(display(p, rate))).await;
        if let Ok(mut active) = ACTIVE_BAR.lock() {
            *active = None;
        }
        bar.finish_and_clear();
    })
}

/// A `tracing-subscriber` writer to stderr that redacts secrets (see
/// [`crawler::core::redact`]) and prints above the live display rather than through it (use
/// with `tracing_subscriber::fmt().with_writer(LogWriter::default)`).
#[derive(Debug, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let bar = ACTIVE_BAR.lock().ok().and_then(|b| b.clone());
        match bar {
            Some(bar) => bar.suspend(|| crawler::progress::RedactingWriter.write(buf)),
            None => crawler::progress::RedactingWriter.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}
