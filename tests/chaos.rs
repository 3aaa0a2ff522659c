//! The chaos site: 2,000 books, about 20% of them answering with faults (resets, trickling
//! and endless bodies, compression bombs, redirect loops and chains, redirects to ftp://,
//! bad charsets, wrong content types, 500s). The crawl must finish, account for every
//! request exactly once, and list exactly the failed URLs in the failures file.

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use books::Books;
use crawler::prelude::*;
use crawler_lab::{FaultKind, Lab, Scenario};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_crawl_accounts_for_every_url() {
    let lab = Lab::builder()
        .scenario(Scenario::chaos())
        .seed(3)
        .start()
        .await
        .expect("lab");
    let dir = tempfile::tempdir().expect("tempdir");
    let failures = dir.path().join("failures.jsonl");
    let feed = dir.path().join("books.jsonl");
    let stats = tokio::time::timeout(
        Duration::from_secs(240),
        Crawl::new(Books { start: lab.url() })
            .set("throttle", "fixed")
            .set("download_delay", "0s")
            .set("concurrency_per_host", "32")
            .set("concurrency", "32")
            .set("download_timeout", "1500ms")
            .set("max_body_size", "2097152")
            .set("retry_times", "1")
            .set("retry_backoff_base", "100ms")
            .set("failures_file", failures.to_string_lossy().to_string())
            .feed(&feed)
            .expect("feed")
            .progress(false)
            .run(),
    )
    .await
    .expect("the chaos crawl finishes")
    .expect("crawl runs");

    assert!(stats.reconciles(), "{stats:?}");
    assert_eq!(stats.pending, 0);
    let failed_total: u64 = stats.failed.values().sum();

    // The failures file lists exactly the failed requests, one line each.
    let text = std::fs::read_to_string(&failures).expect("failures file");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.len() as u64, failed_total, "{stats}");
    let mut by_reason: BTreeMap<String, u64> = BTreeMap::new();
    let mut failed_paths = HashSet::new();
    for l in &lines {
        *by_reason
            .entry(l["reason"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
        let url = l["url"].as_str().expect("url");
        failed_paths.insert(
            url.trim_start_matches(lab.url().trim_end_matches('/'))
                .to_owned(),
        );
        assert!(l["attempts"].as_u64().unwrap_or(0) >= 1);
    }
    assert_eq!(by_reason, stats.failed, "the file and the stats agree");

    // Every page whose fault cannot yield a usable response failed; no healthy page did.
    let must_fail = |k: FaultKind| {
        matches!(
            k,
            FaultKind::ResetMidBody
                | FaultKind::SlowBody
                | FaultKind::EndlessBody
                | FaultKind::GzipBomb
                | FaultKind::RedirectLoop
                | FaultKind::RedirectChain
                | FaultKind::RedirectToNonHttp
                | FaultKind::ServerError
        )
    };
    let faulty = lab.faulty_paths();
    assert!(
        faulty.len() > 300,
        "about 20% of 2,000 books are faults: {}",
        faulty.len()
    );
    for (path, kind) in &faulty {
        if must_fail(*kind) {
            assert!(
                failed_paths.contains(path),
                "{path} ({kind:?}) is not in the failures file"
            );
        }
    }
    for path in &failed_paths {
        let kind = lab.expected_fault(path);
        assert!(
            kind.is_some_and(|k| must_fail(k) || k == FaultKind::LongerThanDeclared),
            "{path} failed but its fault is {kind:?}"
        );
    }
    // Decodable faults still produce their item, decoded from the declared charset.
    let items = std::fs::read_to_string(&feed).expect("feed");
    let healthy = 2000 - faulty.iter().filter(|(_, k)| must_fail(*k)).count();
    let scraped = items.lines().count();
    assert!(
        scraped + 50 >= healthy && scraped <= healthy,
        "{scraped} items for {healthy} healthy books"
    );
    // Shift_JIS pages declare their charset only in <meta>; their "£" is Shift_JIS 81 92,
    // which decodes to U+FFE1. Seeing it proves the meta declaration was honoured.
    assert!(
        items.contains('\u{FFE1}'),
        "Shift_JIS page decoded from its meta charset"
    );
    assert!(stats.retries > 0);
    lab.shutdown().await;
}
