//! Close conditions against the lab's book catalogue: the `close_*` settings and a spider's
//! own `out.close_spider(reason)` stop the crawl near their limit the way a stop request
//! does, and the final stats say why.

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use books::{Book, Books};
use crawler::prelude::*;
use crawler_lab::Lab;

/// Requests in flight at once in these crawls: the most a limit can be overshot by, since
/// the requests in flight when it is reached still finish.
const CONCURRENCY: u64 = 8;

fn fast<S: Spider>(crawl: Crawl<S>) -> Crawl<S> {
    // Our own loopback server: lift the per-host budget so tests run in seconds.
    crawl
        .set("concurrency", CONCURRENCY.to_string())
        .set("concurrency_per_host", CONCURRENCY.to_string())
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .progress(false)
}

/// The lab's book catalogue, 1,000 books.
async fn catalogue() -> Lab {
    Lab::builder()
        .books(1000)
        .start()
        .await
        .expect("lab starts")
}

fn books_in(feed: &Path) -> Vec<Book> {
    std::fs::read_to_string(feed)
        .expect("feed written")
        .lines()
        .map(|l| serde_json::from_str(l).expect("valid JSON line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_item_count_stops_near_the_limit_with_the_rest_pending() {
    let lab = catalogue().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let feed = dir.path().join("books.jsonl");
    let stats = fast(Crawl::new(Books { start: lab.url() }))
        .set("close_item_count", "50")
        .feed(&feed)
        .expect("feed")
        .run()
        .await
        .expect("crawl runs");
    let items = books_in(&feed);
    assert!(
        (50..=50 + CONCURRENCY as usize).contains(&items.len()),
        "{} items: {stats}",
        items.len()
    );
    assert_eq!(stats.items_scraped, items.len() as u64);
    assert_eq!(stats.close_reason, "close_item_count");
    assert!(
        stats
            .to_string()
            .contains("close reason       close_item_count")
    );
    assert!(stats.pending > 0, "the rest of the catalogue stays pending");
    assert!(stats.reconciles(), "{stats:?}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_page_count_stops_near_the_limit() {
    let lab = catalogue().await;
    // Built and run the way a project's `Runner` runs a crawl.
    let engine = fast(Crawl::new(Books { start: lab.url() }))
        .set("close_page_count", "80")
        .build()
        .expect("engine builds");
    let stats = crawler::run_engine(engine).await.expect("crawl runs");
    let pages: u64 = stats.status.values().sum();
    assert!((80..=80 + CONCURRENCY).contains(&pages), "{stats}");
    assert_eq!(stats.close_reason, "close_page_count");
    assert!(stats.pending > 0, "{stats}");
    assert!(stats.reconciles(), "{stats:?}");
    // Every request the lab saw was answered and counted (robots.txt aside): nothing was
    // sent after the limit but the requests already in flight.
    let sent = lab.recorder().requests().len() as u64;
    assert!(
        sent <= pages + 1,
        "{sent} requests sent, {pages} pages counted"
    );
    lab.shutdown().await;
}

/// The books spider, but every book page fails to parse.
struct Broken {
    inner: Books,
}

impl Spider for Broken {
    type Item = Book;
    fn name(&self) -> &str {
        "broken"
    }
    fn start_urls(&self) -> Vec<String> {
        self.inner.start_urls()
    }
    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        if page.callback() == Some("book") {
            return Err(crawler::Error::msg("this book page is broken"));
        }
        self.inner.parse(page, out).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_error_count_stops_near_the_limit() {
    let lab = catalogue().await;
    let stats = fast(Crawl::new(Broken {
        inner: Books { start: lab.url() },
    }))
    .set("close_error_count", "20")
    .run()
    .await
    .expect("crawl runs");
    assert!(
        (20..=20 + CONCURRENCY).contains(&stats.spider_errors),
        "{stats}"
    );
    assert_eq!(stats.close_reason, "close_error_count");
    assert!(stats.pending > 0, "{stats}");
    assert!(stats.reconciles(), "{stats:?}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_timeout_stops_a_crawl_that_would_run_for_minutes() {
    let lab = catalogue().await;
    // The polite defaults: one request a second to the lab, so 1,000 books take minutes.
    let stats = Crawl::new(Books { start: lab.url() })
        .set("close_timeout", "2s")
        .progress(false)
        .run()
        .await
        .expect("crawl runs");
    assert_eq!(stats.close_reason, "close_timeout");
    assert!(stats.items_scraped < 100, "{stats}");
    assert!(stats.pending > 0, "{stats}");
    assert!(stats.elapsed.as_secs_f64() >= 2.0, "{stats}");
    assert!(stats.reconciles(), "{stats:?}");
    lab.shutdown().await;
}

/// The books spider, closing the crawl itself once it has seen `limit` book pages.
struct Enough {
    inner: Books,
    seen: AtomicU64,
    limit: u64,
}

impl Spider for Enough {
    type Item = Book;
    fn name(&self) -> &str {
        "enough"
    }
    fn start_urls(&self) -> Vec<String> {
        self.inner.start_urls()
    }
    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        if page.callback() == Some("book")
            && self.seen.fetch_add(1, Ordering::SeqCst) + 1 >= self.limit
        {
            out.close_spider("enough books");
        }
        self.inner.parse(page, out).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spider_closes_the_crawl_with_its_reason() {
    let lab = catalogue().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let feed = dir.path().join("books.jsonl");
    let stats = fast(Crawl::new(Enough {
        inner: Books { start: lab.url() },
        seen: AtomicU64::new(0),
        limit: 30,
    }))
    .feed(&feed)
    .expect("feed")
    .run()
    .await
    .expect("crawl runs");
    let items = books_in(&feed);
    assert!(
        (30..=30 + CONCURRENCY as usize).contains(&items.len()),
        "{} items: {stats}",
        items.len()
    );
    assert_eq!(stats.close_reason, "enough books");
    assert!(
        stats
            .to_string()
            .contains("close reason       enough books")
    );
    assert!(stats.pending > 0, "{stats}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_closed_by_a_limit_resumes_and_finishes_the_catalogue() {
    let lab = Lab::builder().books(300).start().await.expect("lab starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let feed = dir.path().join("books.jsonl");
    let job = dir.path().join("job").to_string_lossy().to_string();
    let first = fast(Crawl::new(Books { start: lab.url() }))
        .set("job_dir", job.clone())
        .set("close_item_count", "40")
        .feed(&feed)
        .expect("feed")
        .run()
        .await
        .expect("first run");
    assert_eq!(first.close_reason, "close_item_count");
    assert!(first.pending > 0, "{first}");
    // The limit counts from where a run starts, so the same setting lets the resumed run
    // go on: it closes again after another 40 items, not at once.
    let second = fast(Crawl::new(Books { start: lab.url() }))
        .set("job_dir", job.clone())
        .set("close_item_count", "40")
        .feed(&feed)
        .expect("feed")
        .run()
        .await
        .expect("second run");
    assert_eq!(second.close_reason, "close_item_count");
    let run_items = second.items_scraped - first.items_scraped;
    assert!(
        (40..=40 + CONCURRENCY).contains(&run_items),
        "{run_items} items in the second run: {second}"
    );
    // Without a limit the job finishes: every book exactly once across the three runs.
    let last = fast(Crawl::new(Books { start: lab.url() }))
        .set("job_dir", job)
        .feed(&feed)
        .expect("feed")
        .run()
        .await
        .expect("last run");
    assert_eq!(last.close_reason, "finished");
    assert_eq!(last.pending, 0);
    let items = books_in(&feed);
    let urls: HashSet<&str> = items.iter().map(|b| b.url.as_str()).collect();
    assert_eq!(urls.len(), 300, "{last}");
    assert_eq!(items.len(), 300, "no book written twice");
    lab.shutdown().await;
}

#[test]
fn bad_close_settings_are_refused_by_name() {
    let mut s = Settings::default();
    let e = s.set("close_item_count", "-1").unwrap_err().to_string();
    assert!(e.contains("close_item_count"), "{e}");
    let e = s.set("close_timeout", "soon").unwrap_err().to_string();
    assert!(e.contains("close_timeout") && e.contains("\"2s\""), "{e}");
    s.set("close_timeout", "1m").expect("a duration");
    assert_eq!(s.close_timeout, std::time::Duration::from_secs(60));
    assert_eq!(crawler::core::section_of("close_page_count"), "close");
}
