//! Politeness benchmark: the unscaled scenarios of the adaptive-politeness work, measured
//! from the lab's side.
//!
//! ```text
//! cargo bench --bench politeness             # all scenarios (about 4 minutes)
//! cargo bench --bench politeness -- practice # only the 5 r/s, Retry-After 30 s scenario
//! cargo bench --bench politeness -- headers  # only the RateLimit-header dialects
//! ```
//!
//! Efficiency is pages/s over the rate the server allows; refusals are 429 responses;
//! violations are requests that arrived inside a Retry-After window the server announced.

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

use std::time::Duration;

use crawler::prelude::*;
use crawler_lab::{Dialect, Lab, RetryAfter, Scenario};

struct Row {
    name: String,
    allowed: f64,
    pages: u64,
    secs: f64,
    refusals: u64,
    violations: u64,
    items: u64,
    /// Requests/s after the last refusal's wait ended (the whole crawl when none).
    steady: f64,
}

impl Row {
    fn print(&self) {
        let rate = self.pages as f64 / self.secs;
        println!(
            "| {} | {:.2} | {} | {:.1} | {:.2} | {:.0}% | {:.2} ({:.0}%) | {} | {} | {} |",
            self.name,
            self.allowed,
            self.pages,
            self.secs,
            rate,
            100.0 * rate / self.allowed,
            self.steady,
            100.0 * self.steady / self.allowed,
            self.refusals,
            self.violations,
            self.items
        );
    }
}

async fn run(
    name: &str,
    scenario: Scenario,
    books: usize,
    allowed: f64,
    sets: &[(&str, &str)],
) -> Row {
    let lab = Lab::builder()
        .books(books)
        .scenario(scenario)
        .start()
        .await
        .expect("lab starts");
    let mut crawl = Crawl::new(books::Books { start: lab.url() }).progress(false);
    for (k, v) in sets {
        crawl = crawl.set(k, *v);
    }
    let stats = crawl.run().await.expect("crawl runs");
    let report = lab.recorder().report();
    let me = report.clients.values().next().cloned().unwrap_or_default();
    let requests = lab.recorder().requests();
    let resume = requests
        .iter()
        .filter(|r| r.status == 429 || r.status == 503)
        .filter_map(|r| r.wait_until)
        .max()
        .unwrap_or_default()
        .as_secs_f64();
    let after: Vec<f64> = requests
        .iter()
        .map(|r| r.at.as_secs_f64())
        .filter(|&t| t >= resume)
        .collect();
    let steady = match (after.first(), after.last()) {
        (Some(a), Some(b)) if b > a => (after.len() - 1) as f64 / (b - a),
        _ => 0.0,
    };
    let row = Row {
        name: name.to_owned(),
        allowed,
        pages: me.requests,
        secs: (me.last_at - me.first_at).max(0.001),
        refusals: me.status_429 + me.status_503,
        violations: me.violations,
        items: stats.items_scraped,
        steady,
    };
    lab.shutdown().await;
    row
}

#[tokio::main]
async fn main() {
    let which: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let want = |k: &str| which.is_empty() || which.iter().any(|w| w == k);
    println!(
        "| scenario | allowed r/s | requests | seconds | r/s | efficiency | steady r/s (efficiency) | refusals | violations | items |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    if want("practice") {
        // The issue's practice test, unscaled: 5 r/s, burst 20, Retry-After 30; start at 10/s.
        let s = Scenario::rate_limited(5.0, 20).retry_after(RetryAfter::Seconds(30));
        run(
            "rate-limited 5 r/s, burst 20, Retry-After 30 (start 10 r/s)",
            s,
            550,
            5.0,
            &[
                ("start_rate", "10"),
                ("max_rate", "20"),
                ("concurrency_per_host", "4"),
            ],
        )
        .await
        .print();
    }
    if want("headers") {
        let dialects = [
            ("IETF trio", Dialect::Ietf),
            ("IETF + policy", Dialect::IetfWithPolicy),
            (
                "structured (RateLimit / RateLimit-Policy)",
                Dialect::Structured,
            ),
            ("X-RateLimit, Unix reset", Dialect::XUnix),
            ("X-RateLimit, delta reset", Dialect::XDelta),
        ];
        let runs = dialects.map(|(name, d)| {
            let s = Scenario::quota(50, Duration::from_secs(10)).ratelimit_headers(d);
            tokio::spawn(async move {
                run(
                    &format!("quota 50 per 10 s, {name}"),
                    s,
                    250,
                    5.0,
                    &[("max_rate", "50"), ("concurrency_per_host", "4")],
                )
                .await
            })
        });
        for r in runs {
            r.await.expect("run").print();
        }
    }
}
