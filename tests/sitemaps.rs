//! Sitemap spider mode against the lab: the index of gzipped sitemaps, malformed sitemaps,
//! robots.txt in sitemap mode, and the lastmod skip on re-crawls.
#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../examples/sitemap.rs"]
mod sitemap;

use std::collections::{BTreeSet, HashMap};

use crawler::prelude::*;
use crawler::spiders::SitemapSpider;
use crawler_lab::{FaultKind, Lab, Robots, Scenario};
use sitemap::{Book, BookSitemap, crawl};

fn fast(crawl: Crawl<BookSitemap>) -> Crawl<BookSitemap> {
    // Our own loopback server: lift the per-host budget so tests run in seconds.
    crawl
        .set("concurrency", "32")
        .set("concurrency_per_host", "32")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .progress(false)
}

/// How often each path was requested.
fn counts(lab: &Lab) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for r in lab.recorder().requests() {
        *n.entry(r.path).or_default() += 1;
    }
    n
}

fn book_paths(n: &HashMap<String, usize>) -> BTreeSet<String> {
    n.keys()
        .filter(|p| p.starts_with("/catalogue/book-"))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_book_once_from_the_index_then_only_what_lastmod_says_changed() {
    let books = 10_000;
    let lab = Lab::builder().books(books).start().await.unwrap();
    let cache = tempfile::tempdir().unwrap();

    // First run: robots.txt names the index, the index two gzipped urlsets of 5,000 books.
    let (stats, sm) = crawl(&lab.url(), cache.path(), fast).await.unwrap();
    let n = counts(&lab);
    assert_eq!(stats.items_scraped, books as u64, "{stats}\n{sm:?}");
    assert_eq!(book_paths(&n).len(), books);
    assert!(
        n.iter()
            .filter(|(p, _)| p.starts_with("/catalogue/book-"))
            .all(|(_, &c)| c == 1),
        "every book exactly once"
    );
    for path in [
        "/robots.txt",
        "/sitemap.xml",
        "/sitemaps/books-1.xml.gz",
        "/sitemaps/books-2.xml.gz",
    ] {
        assert_eq!(n.get(path), Some(&1), "{path}: {n:?}");
    }
    assert_eq!(
        n.len(),
        books + 4,
        "nothing else: no listing pages, no links followed"
    );
    assert_eq!((sm.robots, sm.sitemaps, sm.entries), (1, 3, books as u64));
    assert_eq!(
        (sm.requested, sm.skipped_unchanged, sm.error_count),
        (books as u64, 0, 0)
    );
    assert!(stats.reconciles(), "{stats:?}");

    // Second run, site unchanged: every entry is skipped by lastmod without a request.
    lab.recorder().clear();
    let (stats, sm) = crawl(&lab.url(), cache.path(), fast).await.unwrap();
    let n = counts(&lab);
    assert!(book_paths(&n).is_empty(), "no book requested: {n:?}");
    assert_eq!(sm.skipped_unchanged, books as u64, "{sm:?}");
    assert_eq!(sm.requested, 0);
    assert_eq!(stats.items_scraped, 0);
    assert_eq!(n.len(), 4, "robots.txt and the three sitemaps: {n:?}");

    // Third run after 5% of the books changed: exactly those are fetched.
    let changed: BTreeSet<String> = lab
        .mutate(0.05)
        .into_iter()
        .map(|id| format!("/catalogue/book-{id}.html"))
        .collect();
    lab.recorder().clear();
    let dir = tempfile::tempdir().unwrap();
    let feed = dir.path().join("changed.jsonl");
    let (stats, sm) = crawl(&lab.url(), cache.path(), |c| fast(c).feed(&feed).unwrap())
        .await
        .unwrap();
    let n = counts(&lab);
    assert_eq!(book_paths(&n), changed);
    assert_eq!(sm.skipped_unchanged, (books - changed.len()) as u64);
    assert_eq!(stats.items_scraped, changed.len() as u64);
    // The items show the new prices and carry the sitemap's new lastmod.
    for line in std::fs::read_to_string(&feed).unwrap().lines().take(20) {
        let item: Book = serde_json::from_str(line).unwrap();
        let id: u32 = item
            .url
            .rsplit_once("book-")
            .and_then(|(_, rest)| rest.strip_suffix(".html"))
            .and_then(|id| id.parse().ok())
            .unwrap();
        assert_eq!(item.price, lab.book(id).unwrap().price);
        assert!(item.lastmod.unwrap() >= 1_735_689_600, "a 2025 lastmod");
    }
    lab.shutdown().await;
}

/// How many books the chaos-sitemap lab has; the 60,000-URL sitemap lists ids far past it.
const CHAOS_BOOKS: u32 = 2000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_sitemaps_are_counted_errors_and_the_crawl_goes_on() {
    // The chaos scenario's sitemap index (good sitemaps, then the four malformed ones),
    // without its page faults, which are not what this test is about.
    let lab = Lab::builder()
        .books(CHAOS_BOOKS as usize)
        .scenario(Scenario::open().bad_sitemaps(true))
        .start()
        .await
        .unwrap();
    let spider = BookSitemap {
        sitemaps: SitemapSpider::builder()
            .sitemap(lab.url_for("/sitemap.xml"))
            .rule(r"/catalogue/book-\d+\.html$", "book")
            // The entry filter: the 60,000-URL file lists books the site does not have.
            .filter(|entry| {
                entry
                    .loc
                    .rsplit_once("book-")
                    .and_then(|(_, rest)| rest.strip_suffix(".html"))
                    .and_then(|id| id.parse::<u32>().ok())
                    .is_some_and(|id| id <= CHAOS_BOOKS)
            })
            .build()
            .unwrap(),
    };
    let handle = spider.sitemaps.stats_handle();
    let stats = fast(Crawl::new(spider)).run().await.unwrap();
    let sm = handle.get();
    let n = counts(&lab);

    // The crawl went on: every book once, despite the four bad files.
    assert_eq!(
        stats.items_scraped,
        u64::from(CHAOS_BOOKS),
        "{stats}\n{sm:#?}"
    );
    assert_eq!(book_paths(&n).len(), CHAOS_BOOKS as usize);
    for kind in FaultKind::SITEMAP_FAULTS {
        assert_eq!(
            n.get(&kind.path()),
            Some(&1),
            "{} fetched once",
            kind.name()
        );
    }
    // Three are errors naming the sitemap: broken XML with its byte position, the gzip bomb
    // cut at 50 MB, the 60,000-URL file cut at 50,000.
    assert_eq!(sm.error_count, 3, "{:#?}", sm.errors);
    assert_eq!(
        stats.spider_errors, 3,
        "each error is counted in the crawl's stats too"
    );
    let error_of = |kind: FaultKind| {
        sm.errors
            .iter()
            .find(|e| e.contains(&lab.url_for(&kind.path())))
            .cloned()
            .unwrap_or_else(|| panic!("no error names {}: {:#?}", kind.name(), sm.errors))
    };
    assert!(error_of(FaultKind::BrokenSitemap).contains("malformed XML at byte "));
    assert!(error_of(FaultKind::SitemapGzipBomb).contains("larger than 52428800 bytes"));
    assert!(error_of(FaultKind::HugeSitemap).contains("10000 entries past the 50000-URL limit"));
    assert_eq!(sm.dropped, 10_000);
    // The billion-laughs file expands nothing: its only entry is refused as invalid.
    assert!(sm.invalid >= 1, "{sm:?}");
    assert!(
        n.keys().all(|p| !p.contains("lol")),
        "no expanded entity reached the lab"
    );
    // Of the 50,000 entries kept from the huge file, the filter let only real books through.
    assert_eq!(sm.filtered, 50_000 - u64::from(CHAOS_BOOKS));
    assert!(stats.reconciles(), "{stats:?}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_disallowed_sitemap_entries_are_never_requested() {
    // Books 1, 10-19, 100-199 and 1000-1999 are off limits; the sitemap lists them all.
    let robots = "User-agent: *\nDisallow: /catalogue/book-1\n".to_owned();
    let lab = Lab::builder()
        .books(CHAOS_BOOKS as usize)
        .scenario(Scenario::open().robots(Robots::Custom(robots)))
        .start()
        .await
        .unwrap();
    let spider = BookSitemap {
        sitemaps: SitemapSpider::builder()
            .sitemap(lab.url_for("/sitemap.xml"))
            .rule(r"/catalogue/book-\d+\.html$", "book")
            .build()
            .unwrap(),
    };
    let stats = fast(Crawl::new(spider)).run().await.unwrap();
    let disallowed = 1 + 10 + 100 + 1000;
    assert_eq!(lab.recorder().count_prefix("/catalogue/book-1"), 0);
    assert_eq!(stats.disallowed, disallowed, "{stats}");
    assert_eq!(stats.items_scraped, u64::from(CHAOS_BOOKS) - disallowed);
    assert_eq!(lab.recorder().count_path("/robots.txt"), 1);
    lab.shutdown().await;
}
