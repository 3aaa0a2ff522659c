//! Showing a crawl's progress: a live display on a terminal, periodic log lines elsewhere.
//!
//! On a terminal (stderr), [`spawn`] draws a spinner with pages, items, queue, requests/s and
//! the busiest hosts (their current rate, holds and queue). Log lines written through
//! [`LogWriter`] are printed above the display instead of through it. When stderr is not a
//! terminal (a pipe, a file, CI), the same figures are logged as one `progress:` line every
//! `progress_interval`.

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::Duration;

use crawler_core::{HostStats, Progress};
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How many hosts the live display lists.
const BUSIEST_HOSTS: usize = 3;

/// The live display, if one is drawn, so log lines can be printed around it.
static ACTIVE_BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

fn line(p: &Progress, rate: f64) -> String {
    let s = &p.stats;
    let failed: u64 = s.failed.values().sum();
    format!(
        "{} pages, {} items, {} queued, {} in flight, {} failed, {:.1} requests/s{}",
        s.fetched + s.not_modified,
        s.items_scraped,
        p.queued,
        p.in_flight,
        failed,
        rate,
        if p.stopping { " (stopping)" } else { "" }
    )
}

fn host_line(h: &HostStats) -> String {
    let rate = h
        .rate
        .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}/s"));
    let mut text = format!(
        "  {}: rate {rate}, {} requests, {} queued",
        h.host, h.requests, h.queued
    );
    if h.holds > 0 {
        text.push_str(&format!(", {} holds ({:.0}s held)", h.holds, h.hold_secs));
    }
    if let Some(why) = &h.skipped {
        text.push_str(&format!(", skipped: {why}"));
    }
    text
}

/// The display's text: the summary line, then the busiest hosts (most queued, then most
/// requested), when the engine publishes per-host figures.
fn display(p: &Progress, rate: f64) -> String {
    let mut hosts: Vec<&HostStats> = p.stats.hosts.iter().collect();
    hosts.sort_by(|a, b| b.queued.cmp(&a.queued).then(b.requests.cmp(&a.requests)));
    let mut text = line(p, rate);
    for h in hosts.iter().take(BUSIEST_HOSTS) {
        text.push('\n');
        text.push_str(&host_line(h));
    }
    text
}

/// Follow progress snapshots until the crawl finishes. On a terminal (stderr) this draws a
/// live display; otherwise it logs one `progress:` line every `interval` (and one at the end).
pub fn spawn(rx: watch::Receiver<Progress>, interval: Duration) -> JoinHandle<()> {
    spawn_with(rx, interval, std::io::stderr().is_terminal())
}

/// [`spawn`], choosing the live display (`live`) or log lines explicitly.
pub fn spawn_with(
    mut rx: watch::Receiver<Progress>,
    interval: Duration,
    live: bool,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let bar = live.then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            if let Ok(mut active) = ACTIVE_BAR.lock() {
                *active = Some(bar.clone());
            }
            bar
        });
        let start = tokio::time::Instant::now();
        let mut last_log = start;
        let mut last_pages = 0u64;
        let mut last_at = start;
        let mut rate = 0.0;
        while rx.changed().await.is_ok() {
            let p = rx.borrow_and_update().clone();
            let pages: u64 = p.stats.status.values().sum();
            let now = tokio::time::Instant::now();
            let dt = (now - last_at).as_secs_f64();
            if dt >= 1.0 {
                rate = pages.saturating_sub(last_pages) as f64 / dt;
                last_pages = pages;
                last_at = now;
            }
            if p.finished || last_at == start {
                // No full second measured yet, or the end: the average over the crawl.
                rate = p.stats.pages_per_sec();
            }
            if let Some(bar) = &bar {
                bar.set_message(display(&p, rate));
            } else if now - last_log >= interval || p.finished {
                tracing::info!("progress: {}", line(&p, rate));
                last_log = now;
            }
            if p.finished {
                break;
            }
        }
        if let Some(bar) = bar {
            if let Ok(mut active) = ACTIVE_BAR.lock() {
                *active = None;
            }
            bar.finish_and_clear();
        }
    })
}

/// A `tracing-subscriber` writer to stderr that redacts secrets (see
/// [`crawler_core::redact`]) and prints above the live display rather than through it (use with `tracing_subscriber::fmt().with_writer(LogWriter::default)`).
#[derive(Debug, Default)]
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // Every log line passes the one redaction rule (crawler_core::redact): URL
        // passwords and the crawl's configured secrets never reach the logs.
        let text = String::from_utf8_lossy(buf);
        let clean = crawler_core::redact::scrub(&text);
        let bytes = clean.as_bytes();
        let bar = ACTIVE_BAR.lock().ok().and_then(|b| b.clone());
        match bar {
            Some(bar) => bar.suspend(|| std::io::stderr().write_all(bytes))?,
            None => std::io::stderr().write_all(bytes)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_lists_the_busiest_hosts_with_rate_and_holds() {
        let mut p = Progress::default();
        for (host, queued, holds) in [("a", 1, 0), ("b", 9, 2), ("c", 5, 0), ("d", 0, 0)] {
            p.stats.hosts.push(HostStats {
                host: host.into(),
                queued,
                holds,
                hold_secs: 30.0,
                rate: Some(1.5),
                ..Default::default()
            });
        }
        let text = display(&p, 2.0);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1 + BUSIEST_HOSTS);
        assert!(lines[1].starts_with("  b: rate 1.50/s"), "{text}");
        assert!(lines[1].contains("2 holds (30s held)"), "{text}");
        assert!(lines[2].starts_with("  c:"), "{text}");
        assert!(!text.contains("  d:"), "{text}");
    }
}
