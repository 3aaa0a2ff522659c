//! Incremental re-crawls against the lab: conditional requests from stored validators, the
//! HTTP cache replaying bodies on 304, offline replay, and the spider's not-modified hook.
#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use books::{Book, Books};
use crawler::prelude::*;
use crawler_lab::{Lab, RecordedRequest};

/// 2,000 books (about 2,300 pages): enough listings and changed books (5%: about 100) for
/// every page kind to be revalidated, refetched and replayed; the whole 10,000-book site is
/// the recrawl benchmark's (`cargo bench --bench recrawl`).
const BOOKS: usize = 2_000;

fn fast<S: Spider>(crawl: Crawl<S>, cache_dir: &Path) -> Crawl<S> {
    // Our own loopback server: lift the per-host budget so the test runs in seconds.
    crawl
        .set("concurrency", "32")
        .set("concurrency_per_host", "32")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("cache_dir", cache_dir.to_string_lossy().into_owned())
        .progress(false)
}

/// One crawl of the lab with the HTTP cache on: stats, the items' URLs, and what the lab saw.
async fn crawl_cached(
    lab: &Lab,
    cache_dir: &Path,
    extra: &[(&str, &str)],
) -> (Stats, HashSet<String>, Vec<RecordedRequest>) {
    lab.recorder().clear();
    let out = tempfile::tempdir().unwrap();
    let feed = out.path().join("books.jsonl");
    let mut crawl = fast(Crawl::new(Books { start: lab.url() }), cache_dir)
        .set("http_cache", "true")
        .feed(&feed)
        .unwrap();
    for (k, v) in extra {
        crawl = crawl.set(k, *v);
    }
    let stats = crawl.run().await.unwrap();
    let urls = std::fs::read_to_string(&feed)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Book>(l).unwrap().url)
        .collect();
    (stats, urls, lab.recorder().requests())
}

fn body_bytes(recorded: &[RecordedRequest]) -> u64 {
    recorded.iter().map(|r| r.bytes).sum()
}

/// Paths the lab answered with `status`, among book and listing pages.
fn pages_with(recorded: &[RecordedRequest], status: u16) -> BTreeSet<String> {
    recorded
        .iter()
        .filter(|r| r.status == status && (r.path.contains("/book-") || r.path.contains("/page-")))
        .map(|r| r.path.clone())
        .collect()
}

/// The book and listing pages whose content shows one of `changed`: the book pages, the
/// catalogue pages (20 books each, in id order) and the category pages (20 books each, in id
/// order within the category) that list them.
fn pages_showing(lab: &Lab, changed: &[u32]) -> BTreeSet<String> {
    let changed: HashSet<u32> = changed.iter().copied().collect();
    let mut pages = BTreeSet::new();
    let mut per_category: std::collections::HashMap<&str, Vec<u32>> = Default::default();
    for id in 1..=lab.books() as u32 {
        let book = lab.book(id).unwrap();
        per_category.entry(book.category).or_default().push(id);
        if changed.contains(&id) {
            pages.insert(book.path.clone());
            pages.insert(format!("/catalogue/page-{}.html", (id - 1) / 20 + 1));
        }
    }
    for (slug, ids) in per_category {
        for (i, chunk) in ids.chunks(20).enumerate() {
            if chunk.iter().any(|id| changed.contains(id)) {
                pages.insert(format!("/category/{slug}/page-{}.html", i + 1));
            }
        }
    }
    pages
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recrawl_downloads_only_what_changed_and_still_produces_every_item() {
    let lab = Lab::builder().books(BOOKS).start().await.unwrap();
    let cache = tempfile::tempdir().unwrap();

    // First crawl: everything is new.
    let (first, items, seen) = crawl_cached(&lab, cache.path(), &[]).await;
    assert_eq!(items.len(), BOOKS, "{first}");
    assert_eq!(first.not_modified, 0);
    assert!(seen.iter().all(|r| r.if_none_match.is_none()));
    let first_bytes = body_bytes(&seen);
    let pages = pages_with(&seen, 200);
    assert!(pages.len() > BOOKS, "listings and books: {}", pages.len());

    // Second crawl of the unchanged site: every page revalidates with a 304, and the cached
    // bodies still give every item.
    let (second, items, seen) = crawl_cached(&lab, cache.path(), &[]).await;
    assert_eq!(items.len(), BOOKS, "{second}");
    assert_eq!(second.items_scraped, BOOKS as u64);
    let second_bytes = body_bytes(&seen);
    assert!(
        second_bytes * 50 <= first_bytes,
        "re-crawl downloaded {second_bytes} body bytes, more than 2% of {first_bytes}"
    );
    assert_eq!(pages_with(&seen, 304), pages, "every page answered 304");
    assert!(pages_with(&seen, 200).is_empty());
    assert_eq!(
        second.not_modified,
        pages.len() as u64 + 1,
        "pages and the index"
    );
    let report = lab.recorder().report();
    let client = report.clients.values().next().unwrap();
    assert_eq!(client.not_modified, second.not_modified);
    assert!(second.reconciles(), "{second:?}");

    // The site changes 5% of its books: exactly the changed books and the listings that
    // show them come back with 200; everything else is a 304.
    let changed = lab.mutate(0.05);
    assert!(changed.len() > BOOKS / 40, "{} changed", changed.len());
    let (third, items, seen) = crawl_cached(&lab, cache.path(), &[]).await;
    assert_eq!(items.len(), BOOKS, "{third}");
    let expected = pages_showing(&lab, &changed);
    let refetched = pages_with(&seen, 200);
    assert_eq!(
        refetched.len(),
        expected.len(),
        "refetched {} pages, expected {}",
        refetched.len(),
        expected.len()
    );
    assert_eq!(refetched, expected);
    assert_eq!(
        pages_with(&seen, 304),
        &pages - &expected,
        "the rest revalidated"
    );
    let book_fetches: Vec<&RecordedRequest> =
        seen.iter().filter(|r| r.path.contains("/book-")).collect();
    assert_eq!(book_fetches.len(), BOOKS, "each book asked for once");
    assert!(
        book_fetches.iter().all(|r| r.if_none_match.is_some()),
        "every book was asked conditionally"
    );
    // The changed books' items carry the new prices.
    let id = changed[0];
    let book = lab.book(id).unwrap();
    assert!(items.contains(&lab.url_for(&book.path)));

    // Offline replay: the cache answers every page; the lab sees nothing at all.
    let (offline, items, seen) =
        crawl_cached(&lab, cache.path(), &[("http_cache_offline", "true")]).await;
    assert_eq!(items.len(), BOOKS, "{offline}");
    // Only the robots-disallowed /private/ link is not in the cache: it takes the normal
    // path, whose robots check reads robots.txt, and is refused.
    let sent: Vec<&str> = seen.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(
        sent,
        ["/robots.txt"],
        "offline replay asked the lab for pages"
    );
    assert_eq!(offline.disallowed, 1);
    assert_eq!(offline.response_bytes, 0);
    lab.shutdown().await;
}

/// The books spider, counting the 304s handed to its not-modified hook.
struct CountingBooks {
    inner: Books,
    unchanged: Arc<AtomicU64>,
}

impl Spider for CountingBooks {
    type Item = Book;
    fn name(&self) -> &str {
        "books"
    }
    fn start_urls(&self) -> Vec<String> {
        self.inner.start_urls()
    }
    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        assert!(!page.is_cached(), "no HTTP cache in this crawl");
        self.inner.parse(page, out).await
    }
    async fn not_modified(&self, page: Response, _out: &mut Output<Book>) -> Result<()> {
        assert_eq!(page.status(), 304);
        assert!(page.body().is_empty());
        self.unchanged.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_cache_a_304_calls_the_not_modified_hook() {
    let lab = Lab::builder().books(1000).start().await.unwrap();
    let cache = tempfile::tempdir().unwrap();
    let unchanged = Arc::new(AtomicU64::new(0));
    let run = || {
        fast(
            Crawl::new(CountingBooks {
                inner: Books { start: lab.url() },
                unchanged: Arc::clone(&unchanged),
            }),
            cache.path(),
        )
        .run()
    };
    let first = run().await.unwrap();
    assert_eq!(first.items_scraped, 1000);
    assert_eq!(unchanged.load(Ordering::Relaxed), 0);
    lab.recorder().clear();

    // Without a cache a 304 has no body to follow links from, so the crawl reaches only what
    // hangs off changed pages: change 1% of the books (which also changes the index) and
    // check that every 304 went to the hook and only re-downloaded books gave items.
    let changed = lab.mutate(0.01);
    let second = run().await.unwrap();
    let recorded = lab.recorder().requests();
    let refetched_books = recorded
        .iter()
        .filter(|r| r.status == 200 && r.path.contains("/book-"))
        .count();
    assert_eq!(second.items_scraped, refetched_books as u64);
    assert!(refetched_books <= changed.len());
    assert_eq!(unchanged.load(Ordering::Relaxed), second.not_modified);
    assert!(second.not_modified > 0, "{second}");
    assert_eq!(
        second.not_modified,
        recorded.iter().filter(|r| r.status == 304).count() as u64
    );
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_cache_needs_somewhere_to_live() {
    let err = Crawl::new(Books {
        start: "http://127.0.0.1:9/".into(),
    })
    .set("http_cache", "true")
    .progress(false)
    .build()
    .err()
    .expect("no cache_dir or job_dir");
    assert!(err.to_string().contains("cache_dir"), "{err}");
}
