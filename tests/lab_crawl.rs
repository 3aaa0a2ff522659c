//! End-to-end crawls of the lab's book site through the real HTTP stack.

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

use std::collections::HashSet;
use std::time::Duration;

use books::{Book, Books};
use crawler::prelude::*;
use crawler_lab::Lab;

fn fast(crawl: Crawl<Books>) -> Crawl<Books> {
    // Our own loopback server: lift the per-host budget so tests run in seconds.
    crawl
        .set("concurrency_per_host", "16")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .progress(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawls_every_book_exactly_once_and_never_private() {
    let lab = Lab::builder()
        .books(1000)
        .start()
        .await
        .expect("lab starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let jsonl = dir.path().join("books.jsonl");
    let csv_path = dir.path().join("books.csv");
    let json = dir.path().join("books.json");
    let stats = fast(Crawl::new(Books { start: lab.url() }))
        .feed(&jsonl)
        .and_then(|c| c.feed(&csv_path))
        .and_then(|c| c.feed(&json))
        .expect("feeds")
        .run()
        .await
        .expect("crawl runs");

    let lines = std::fs::read_to_string(&jsonl).expect("jsonl written");
    let items: Vec<Book> = lines
        .lines()
        .map(|l| serde_json::from_str(l).expect("valid JSON line"))
        .collect();
    assert_eq!(items.len(), 1000, "{stats}");
    let urls: HashSet<&str> = items.iter().map(|b| b.url.as_str()).collect();
    let titles: HashSet<&str> = items.iter().map(|b| b.title.as_str()).collect();
    assert_eq!(urls.len(), 1000, "every book exactly once");
    assert_eq!(titles.len(), 1000);
    for id in [1, 500, 1000] {
        assert!(urls.contains(format!("{}catalogue/book-{id}.html", lab.url()).as_str()));
    }
    assert!(
        items
            .iter()
            .all(|b| b.price.starts_with('£') && !b.stock.is_empty())
    );

    let mut reader = csv::Reader::from_path(&csv_path).expect("csv written");
    assert_eq!(
        reader.headers().expect("header").iter().collect::<Vec<_>>(),
        ["url", "title", "price", "stock"]
    );
    let rows: Vec<csv::StringRecord> = reader
        .records()
        .map(|r| r.expect("valid csv row"))
        .collect();
    assert_eq!(rows.len(), 1000);
    let array: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
            .expect("valid JSON");
    assert_eq!(array.len(), 1000);

    let recorded = lab.recorder().requests();
    assert_eq!(
        lab.recorder().count_prefix("/private/"),
        0,
        "robots.txt must keep us out"
    );
    // robots.txt is read before anything else on the host, and once: the second request for
    // it is the spider following the index page's link to it.
    assert_eq!(recorded[0].path, "/robots.txt");
    assert_eq!(lab.recorder().count_path("/robots.txt"), 2);
    let book_fetches = recorded
        .iter()
        .filter(|r| r.path.contains("/book-"))
        .count();
    assert_eq!(book_fetches, 1000, "no book page fetched twice");
    assert!(recorded.iter().all(|r| {
        r.user_agent
            .as_deref()
            .is_some_and(|ua| ua.starts_with("crawler/"))
    }));

    assert!(
        stats.disallowed >= 1,
        "the /private/ link is refused by robots: {stats}"
    );
    assert!(stats.filtered.get("duplicate").copied().unwrap_or(0) > 0);
    assert_eq!(stats.items_scraped, 1000);
    assert!(stats.reconciles(), "{stats:?}");
    assert_eq!(stats.pending, 0);
    lab.shutdown().await;
}

/// A spider that asks for one oversized body.
struct Blob {
    url: String,
}

impl Spider for Blob {
    type Item = usize;
    fn name(&self) -> &str {
        "blob"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![self.url.clone()]
    }
    async fn parse(&self, page: Response, out: &mut Output<usize>) -> Result<()> {
        out.item(page.body().len());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_cap_are_refused_while_streaming() {
    let lab = Lab::builder().books(100).start().await.expect("lab starts");
    // 256 MiB against a 1 MiB cap, with and without a declared length: both are cut off.
    for query in ["", "?chunked=1"] {
        let url = format!("{}blob/{}{query}", lab.url(), 256 * 1024 * 1024);
        let stats = Crawl::new(Blob { url })
            .set("max_body_size", "1048576")
            .progress(false)
            .run()
            .await
            .expect("crawl runs");
        assert_eq!(stats.failed.get("too_large"), Some(&1), "{query}: {stats}");
        assert_eq!(stats.items_scraped, 0);
        assert!(stats.response_bytes < 2 * 1024 * 1024, "{stats:?}");
        assert!(stats.reconciles());
    }
    // A body under the cap is handed to the spider whole.
    let url = format!("{}blob/1000", lab.url());
    let stats = Crawl::new(Blob { url })
        .set("max_body_size", "1048576")
        .progress(false)
        .run()
        .await
        .expect("crawl runs");
    assert_eq!(stats.fetched, 1);
    assert_eq!(stats.items_scraped, 1);
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_mid_crawl_leaves_complete_feeds_and_accounts_for_the_rest() {
    let lab = Lab::builder()
        .books(5000)
        .start()
        .await
        .expect("lab starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("books.json");
    let jsonl = dir.path().join("books.jsonl");
    let engine = Crawl::new(Books { start: lab.url() })
        .set("concurrency_per_host", "4")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .progress(false)
        .feed(&json)
        .and_then(|c| c.feed(&jsonl))
        .expect("feeds")
        .build()
        .expect("engine builds");
    let stop = engine.shutdown_handle();
    let mut progress = engine.progress();
    let run = tokio::spawn(engine.run());
    // Ask for a stop (as Ctrl-C does) once the crawl is well under way.
    tokio::time::timeout(Duration::from_secs(60), async {
        while progress.borrow().stats.items_scraped < 50 {
            if progress.changed().await.is_err() {
                break;
            }
        }
    })
    .await
    .expect("the crawl makes progress");
    stop.request();
    let stats = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("stops promptly")
        .expect("no panic")
        .expect("crawl ends cleanly");

    let array: Vec<Book> = serde_json::from_str(&std::fs::read_to_string(&json).expect("json"))
        .expect("the JSON feed is a complete array");
    let lines = std::fs::read_to_string(&jsonl).expect("jsonl");
    assert_eq!(array.len() as u64, stats.items_scraped);
    assert_eq!(lines.lines().count() as u64, stats.items_scraped);
    assert!(
        stats.items_scraped >= 50 && stats.items_scraped < 5000,
        "{stats}"
    );
    assert!(
        stats.pending > 0,
        "queued requests are reported as pending: {stats}"
    );
    assert!(stats.reconciles(), "{stats:?}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_setting_routes_every_request_through_the_proxy() {
    // The lab stands in for a forward proxy: books.invalid does not resolve, so every request
    // that reaches the lab (robots.txt included) went through the proxy.
    let proxy = Lab::builder().books(100).start().await.expect("lab starts");
    let stats = Crawl::new(Books {
        start: "http://books.invalid/".into(),
    })
    .set("proxy", proxy.url())
    .set("throttle", "fixed")
    .progress(false)
    .run()
    .await
    .expect("crawl runs");
    let seen = proxy.recorder().requests();
    assert_eq!(seen.first().map(|r| r.path.as_str()), Some("/robots.txt"));
    assert!(
        seen.iter()
            .any(|r| r.referer.as_deref() == Some("http://books.invalid/"))
    );
    assert_eq!(stats.items_scraped, 100, "{stats}");
    assert!(stats.reconciles());
    let e = Crawl::new(Books { start: proxy.url() })
        .set("proxy", "not a url")
        .progress(false)
        .build()
        .err()
        .expect("a bad proxy is refused");
    assert!(e.to_string().contains("invalid proxy URL"), "{e}");
    proxy.shutdown().await;
}
