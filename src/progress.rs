//! Showing a crawl's progress: a live line on a terminal, periodic log lines elsewhere.

use std::io::IsTerminal;
use std::time::Duration;

use crawler_core::Progress;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::sync::watch;
use tokio::task::JoinHandle;

fn line(p: &Progress, rate: f64) -> String {
    let s = &p.stats;
    let failed: u64 = s.failed.values().sum();
    format!(
        "{} pages, {} items, {} queued, {} in flight, {} failed, {:.0} pages/s{}",
        s.fetched + s.not_modified,
        s.items_scraped,
        p.queued,
        p.in_flight,
        failed,
        rate,
        if p.stopping { " (stopping)" } else { "" }
    )
}

/// Follow progress snapshots until the crawl finishes. On a terminal (stderr) this draws a
/// spinner line; otherwise it logs one line every `interval`.
pub fn spawn(mut rx: watch::Receiver<Progress>, interval: Duration) -> JoinHandle<()> {
    let live = std::io::stderr().is_terminal();
    tokio::spawn(async move {
        let bar = live.then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        let mut last_log = tokio::time::Instant::now();
        let mut last_pages = 0u64;
        let mut last_at = tokio::time::Instant::now();
        let mut rate = 0.0;
        while rx.changed().await.is_ok() {
            let p = rx.borrow_and_update().clone();
            let pages: u64 = p.stats.status.values().sum();
            let now = tokio::time::Instant::now();
            let dt = (now - last_at).as_secs_f64();
            if dt >= 1.0 {
                rate = (pages - last_pages.min(pages)) as f64 / dt;
                last_pages = pages;
                last_at = now;
            }
            if let Some(bar) = &bar {
                bar.set_message(line(&p, rate));
            } else if now - last_log >= interval || p.finished {
                tracing::info!("{}", line(&p, rate));
                last_log = now;
            }
            if p.finished {
                break;
            }
        }
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
    })
}
