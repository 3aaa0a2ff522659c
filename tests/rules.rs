//! Rules-driven crawls of the lab: crawl rules must request exactly the pages they describe.

#[allow(dead_code)]
#[path = "../examples/books_rules.rs"]
mod books_rules;

use std::collections::{BTreeSet, HashMap};

use books_rules::{Book, BooksRules};
use crawler::prelude::*;
use crawler::spiders::{LinkExtractor, Rule, Rules};
use crawler_lab::Lab;

fn fast<S: Spider>(crawl: Crawl<S>) -> Crawl<S> {
    // Our own loopback server: lift the per-host budget so tests run in seconds.
    crawl
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("concurrency_per_host", "16")
        .progress(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_requests_exactly_listings_and_books() {
    let lab = Lab::builder().books(200).start().await.expect("lab starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let jsonl = dir.path().join("books_rules.jsonl");
    let spider = BooksRules::new(lab.url()).expect("rules build");
    let stats = fast(Crawl::new(spider))
        .feed(&jsonl)
        .expect("feed")
        .run()
        .await
        .expect("crawl runs");

    // 200 books, 20 per listing page.
    let mut want: BTreeSet<String> = ["/", "/robots.txt"].map(String::from).into();
    want.extend((1..=10).map(|n| format!("/catalogue/page-{n}.html")));
    want.extend((1..=200).map(|id| format!("/catalogue/book-{id}.html")));

    let recorded = lab.recorder().requests();
    let mut hits: HashMap<&str, usize> = HashMap::new();
    for r in &recorded {
        *hits.entry(r.path.as_str()).or_default() += 1;
    }
    let got: BTreeSet<String> = hits.keys().map(|p| (*p).to_owned()).collect();
    let extra: Vec<&String> = got.difference(&want).collect();
    let missing: Vec<&String> = want.difference(&got).collect();
    assert!(
        extra.is_empty() && missing.is_empty(),
        "extra: {extra:?}, missing: {missing:?}"
    );
    let repeated: Vec<_> = hits.iter().filter(|(_, n)| **n > 1).collect();
    assert!(repeated.is_empty(), "fetched more than once: {repeated:?}");

    let lines = std::fs::read_to_string(&jsonl).expect("jsonl written");
    let items: Vec<Book> = lines
        .lines()
        .map(|l| serde_json::from_str(l).expect("valid JSON line"))
        .collect();
    assert_eq!(items.len(), 200, "{stats}");
    let urls: BTreeSet<&str> = items.iter().map(|b| b.url.as_str()).collect();
    assert_eq!(urls.len(), 200, "every book scraped exactly once");
    for b in &items {
        let id: u32 = b
            .url
            .rsplit("book-")
            .next()
            .and_then(|s| s.strip_suffix(".html"))
            .and_then(|s| s.parse().ok())
            .expect("book URL");
        let truth = lab.book(id).expect("a lab book");
        assert_eq!(b.title, truth.title);
        assert_eq!(b.price, truth.price);
        assert!(
            b.price.starts_with('£') && b.stock.contains("stock"),
            "{b:?}"
        );
    }
    assert_eq!(stats.items_scraped, 200);
    assert!(stats.reconciles(), "{stats:?}");
    lab.shutdown().await;
}

/// A rules spider that records which book pages it parsed.
struct Related {
    start: String,
    rules: Rules,
}

impl Spider for Related {
    type Item = String;
    fn name(&self) -> &str {
        "related"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }
    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        if page.callback() == Some("book") {
            out.item(page.url().path().to_owned());
        }
        self.rules.apply(&page, out);
        Ok(())
    }
}

fn books_rule() -> Rule {
    let books = LinkExtractor::builder()
        .allow([r"/catalogue/book-\d+\.html$"])
        .build()
        .expect("extractor builds");
    Rule::new(books).callback("book")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_rule_follows_only_when_asked() {
    let lab = Lab::builder().books(200).start().await.expect("lab starts");
    let start = format!("{}catalogue/page-1.html", lab.url());

    // Default: a rule with a callback does not follow, so only the 20 books listed on the
    // start page are parsed, though each book page links to other books.
    let spider = Related {
        start: start.clone(),
        rules: Rules::new([books_rule()]),
    };
    let stats = fast(Crawl::new(spider)).run().await.expect("crawl runs");
    assert_eq!(stats.items_scraped, 20, "{stats}");
    assert_eq!(lab.recorder().count_prefix("/catalogue/book-"), 20);
    assert_eq!(lab.recorder().count_prefix("/catalogue/page-"), 1);

    // follow(true): book pages run the rules too, and their related-book links are taken.
    lab.recorder().clear();
    let spider = Related {
        start,
        rules: Rules::new([books_rule().follow(true)]),
    };
    let stats = fast(Crawl::new(spider)).run().await.expect("crawl runs");
    let books = lab.recorder().count_prefix("/catalogue/book-");
    assert!(books > 20, "related books followed: {books}, {stats}");
    assert_eq!(stats.items_scraped as usize, books, "each parsed once");
    assert_eq!(lab.recorder().count_prefix("/catalogue/page-"), 1);
    assert_eq!(lab.recorder().count_prefix("/category/"), 0);
    lab.shutdown().await;
}
