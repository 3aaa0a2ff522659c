//! Generates the sample politeness report kept in `docs/sample-report.html`: a real crawl of
//! three lab hosts on 127.0.0.1, each behind a different limiter, with a job directory, then
//! `crawler report` on it.
//!
//! ```text
//! cargo run -p crawler-cli --example sample_report -- docs/sample-report.html
//! ```
//!
//! - `limited`: a token bucket of 10 requests/s (burst 20) answering refusals with
//!   `Retry-After: 3`; the crawl starts at 30/s, is refused, held, and learns the limit.
//! - `quota`: 30 requests per 5-second window, announced in RateLimit headers (with a
//!   policy); the crawl follows the quota.
//! - `chaos`: no limit, but a tenth of the book pages fail (server errors, resets, slow
//!   bodies, redirect loops...): retries and failures.

use std::time::Duration;

use crawler::prelude::*;
use crawler_lab::{Dialect, Lab, RetryAfter, Scenario};

/// Follows every link from its start pages.
struct Sites(Vec<String>);

impl Spider for Sites {
    type Item = String;

    fn name(&self) -> &str {
        "sample"
    }

    fn start_urls(&self) -> Vec<String> {
        self.0.clone()
    }

    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        for href in page.select("a").attrs("href") {
            out.follow(href);
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sample-report.html".to_owned());
    crawler::init_logging();
    let lab = |scenario: Scenario| Lab::builder().books(100).scenario(scenario).start();
    let limited = lab(Scenario::rate_limited(10.0, 20).retry_after(RetryAfter::Seconds(3))).await?;
    let quota =
        lab(Scenario::quota(30, Duration::from_secs(5)).ratelimit_headers(Dialect::IetfWithPolicy))
            .await?;
    let chaos = lab(Scenario::chaos().chaos_rate(0.1)).await?;
    // A relative job directory, so the page names a path that means something to a reader.
    let job = std::path::PathBuf::from("target").join("sample-report-job");
    let _ = std::fs::remove_dir_all(&job);
    let stats = Crawl::new(Sites(vec![limited.url(), quota.url(), chaos.url()]))
        .progress(false)
        .set("job_dir", job.to_string_lossy())
        .set("start_rate", "30")
        .set("max_rate", "60")
        .set("concurrency_per_host", "4")
        .set("download_timeout", "5s")
        .set("user_agent", "sample-report/1.0 (+https://example.com/bot)")
        .run()
        .await?;
    println!("{stats}");
    let record = crawler_cli::report::record_path(&job)?;
    let summary = crawler_cli::report::write_report(&record, std::path::Path::new(&out))?;
    println!("wrote {out}: {} hosts", summary.hosts);
    let _ = std::fs::remove_dir_all(&job);
    for lab in [limited, quota, chaos] {
        lab.shutdown().await;
    }
    Ok(())
}
