//! A crawl's progress as text, and a follower that logs it.
//!
//! [`display`] is one summary line (pages, items, queue, requests/s) and the busiest hosts
//! (their current rate, holds and queue). [`follow`] turns the engine's progress snapshots
//! into figures with a requests/s meter; [`spawn_log_lines`] logs a `progress:` line every
//! `progress_interval`, which is what [`Crawl::run`](crate::Crawl::run) shows. [`spawn`]
//! draws the same figures as a live display when stderr is a terminal (the `crawler`
//! command's, and a crawl's with [`Crawl::live_progress`](crate::Crawl::live_progress));
//! log lines written through [`RedactingWriter`] are printed above that display instead of
//! through it.

#[cfg(feature = "live-progress")]
use std::io::IsTerminal;
use std::io::Write;
#[cfg(feature = "live-progress")]
use std::sync::Mutex;
use std::time::Duration;

use crawler_core::HostStats;
use crawler_engine::Progress;
#[cfg(feature = "live-progress")]
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How many hosts [`display`] lists.
pub const BUSIEST_HOSTS: usize = 3;

/// One line: pages, items, queue, in flight, failures and requests/s.
pub fn summary(p: &Progress, rate: f64) -> String {
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

/// The summary line, then the busiest hosts (most queued, then most requested), when the
/// engine publishes per-host figures.
pub fn display(p: &Progress, rate: f64) -> String {
    let mut hosts: Vec<&HostStats> = p.stats.hosts.iter().collect();
    hosts.sort_by(|a, b| b.queued.cmp(&a.queued).then(b.requests.cmp(&a.requests)));
    let mut text = summary(p, rate);
    for h in hosts.iter().take(BUSIEST_HOSTS) {
        text.push('\n');
        text.push_str(&host_line(h));
    }
    text
}

/// Follow progress snapshots until the crawl finishes, calling `update` with each snapshot
/// and the current requests/s (measured over whole seconds; the crawl's average before the
/// first second and at the end).
pub async fn follow(mut rx: watch::Receiver<Progress>, mut update: impl FnMut(&Progress, f64)) {
    let start = tokio::time::Instant::now();
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
            rate = p.stats.pages_per_sec();
        }
        update(&p, rate);
        if p.finished {
            break;
        }
    }
}

/// Log one `progress:` line every `interval` (and one at the end) until the crawl finishes.
pub fn spawn_log_lines(rx: watch::Receiver<Progress>, interval: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut last_log: Option<tokio::time::Instant> = None;
        follow(rx, |p, rate| {
            let now = tokio::time::Instant::now();
            if last_log.is_none_or(|t| now - t >= interval) || p.finished {
                tracing::info!("progress: {}", summary(p, rate));
                last_log = Some(now);
            }
        })
        .await;
    })
}

/// The live display, if one is drawn, so log lines can be printed around it.
#[cfg(feature = "live-progress")]
static ACTIVE_BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// Follow progress snapshots until the crawl finishes. On a terminal (stderr) this draws a
/// live display of [`display`]'s figures (with the `live-progress` feature, which the
/// `crawler` command turns on); otherwise it logs one `progress:` line every `interval`
/// (and one at the end), as [`spawn_log_lines`] does.
pub fn spawn(rx: watch::Receiver<Progress>, interval: Duration) -> JoinHandle<()> {
    #[cfg(feature = "live-progress")]
    if std::io::stderr().is_terminal() {
        return spawn_live(rx);
    }
    spawn_log_lines(rx, interval)
}

/// The live display of [`spawn`], on a terminal.
#[cfg(feature = "live-progress")]
fn spawn_live(rx: watch::Receiver<Progress>) -> JoinHandle<()> {
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
/// [`crawler_core::redact`]) and prints above the live display of [`spawn`] rather than
/// through it: use with `tracing_subscriber::fmt().with_writer(...)`.
#[derive(Debug, Default)]
pub struct RedactingWriter;

impl Write for RedactingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        #[cfg(feature = "live-progress")]
        if let Some(bar) = ACTIVE_BAR.lock().ok().and_then(|b| b.clone()) {
            return bar.suspend(|| write_redacted(buf));
        }
        write_redacted(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Write `buf` to stderr through the one redaction rule (crawler_core::redact): URL
/// passwords and the crawl's configured secrets never reach the logs.
fn write_redacted(buf: &[u8]) -> std::io::Result<usize> {
    let text = String::from_utf8_lossy(buf);
    std::io::stderr().write_all(crawler_core::redact::scrub(&text).as_bytes())?;
    Ok(buf.len())
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
