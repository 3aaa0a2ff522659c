//! An unreachable host costs seconds, not `robots_outage_max` (issue 34): a start URL where
//! nothing listens ends as `host_skipped`, with the reason in the stats and the failures
//! file, after a few robots.txt tries.

use std::time::{Duration, Instant};

use crawler::prelude::*;

struct One {
    start: String,
}

impl Spider for One {
    type Item = String;
    fn name(&self) -> &str {
        "one"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![format!("{}/a", self.start), format!("{}/b", self.start)]
    }
    async fn parse(&self, _page: Response, _out: &mut Output<String>) -> Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_refusing_connections_is_skipped_in_seconds() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let dir = tempfile::tempdir().expect("tempdir");
    let failures = dir.path().join("failures.jsonl");
    let started = Instant::now();
    let stats = Crawl::new(One {
        start: format!("http://{addr}"),
    })
    // The default robots_outage_max (10 minutes) stays: it is not what ends this crawl.
    .set("failures_file", failures.to_string_lossy())
    .progress(false)
    .run()
    .await
    .expect("crawl runs");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(60),
        "an unreachable host cost {took:?}: {stats}"
    );
    assert_eq!(
        stats.failed.get("host_skipped").copied(),
        Some(2),
        "both pages counted where failures are: {stats}"
    );
    assert!(stats.reconciles(), "{stats:?}");
    let text = std::fs::read_to_string(&failures).expect("failures file");
    assert_eq!(text.lines().count(), 2, "{text}");
    for line in text.lines() {
        let record: serde_json::Value = serde_json::from_str(line).expect("JSON line");
        assert_eq!(record["reason"], "host_skipped", "{line}");
        let message = record["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("unreachable") && message.to_ascii_lowercase().contains("refused"),
            "{line}"
        );
    }
}
