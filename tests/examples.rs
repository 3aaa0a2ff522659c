//! One test per example of the gallery: each runs the example's spider against the lab and
//! checks its output.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../examples/api_quota.rs"]
mod api_quota;
#[allow(dead_code)]
#[path = "../examples/custom_middleware.rs"]
mod custom_middleware;
#[allow(dead_code)]
#[path = "../examples/login.rs"]
mod login;
#[allow(dead_code)]
#[path = "../examples/pipeline_dedup.rs"]
mod pipeline_dedup;

use std::collections::HashSet;
use std::time::Duration;

use crawler::prelude::*;
use crawler_lab::{Dialect, Lab, Scenario};

fn fast<S: Spider>(crawl: Crawl<S>) -> Crawl<S> {
    // Our own loopback server: lift the per-host budget so tests run in seconds.
    crawl
        .set("concurrency_per_host", "16")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .progress(false)
}

fn read_jsonl<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Vec<T> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_quota_adapts_to_the_ratelimit_headers_without_a_429() {
    // The named scenario's quota (50 per 10 s, 5/s) scaled to 16 per 2 s (8/s), so the test
    // is quick while the quota, not our own ceiling (max_rate, 10/s), binds.
    let scenario =
        Scenario::quota(16, Duration::from_secs(2)).ratelimit_headers(Dialect::IetfWithPolicy);
    let lab = Lab::builder()
        .books(1000)
        .scenario(scenario)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let feed = dir.path().join("api.jsonl");
    let started = std::time::Instant::now();
    let stats = Crawl::new(api_quota::ApiBooks {
        start: lab.url_for("/api/books?page=1"),
    })
    .progress(false)
    .feed(&feed)
    .unwrap()
    .run()
    .await
    .unwrap();
    let took = started.elapsed();

    let books: Vec<api_quota::Book> = read_jsonl(&feed);
    assert_eq!(books.len(), 1000, "{stats}");
    let ids: HashSet<u32> = books.iter().map(|b| b.id).collect();
    assert_eq!(ids.len(), 1000);
    assert_eq!(
        books.iter().find(|b| b.id == 7).unwrap().title,
        lab.book(7).unwrap().title
    );
    let report = lab.recorder().report();
    let refused: u64 = report.clients.values().map(|c| c.status_429).sum();
    assert_eq!(refused, 0, "{report:?}");
    assert_eq!(report.total_violations(), 0);
    assert_eq!(stats.status.get(&429), None);
    // The pace left the start (1/s) for what the quota allows: the last reading steers it
    // (so near a window's end it may read higher), while over the crawl the server saw at
    // most the quota's 8/s.
    let rates = api_quota::rates(&stats);
    assert_eq!(rates.len(), 1, "{rates:?}");
    let rate = rates[0].1.expect("the adaptive throttle reports a rate");
    assert!(rate > 1.5, "rate {rate}");
    let client = report.clients.values().next().unwrap();
    assert!(
        client.mean_rate > 2.0 && client.mean_rate <= 8.5,
        "mean rate {:.2}/s",
        client.mean_rate
    );
    // 51 requests at 1/s would take 51 s; adapting makes it far quicker.
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert!(stats.reconciles(), "{stats:?}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_posts_the_form_and_keeps_the_session() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let feed = dir.path().join("login.jsonl");
    let spider = login::Login {
        base: lab.url(),
        username: crawler_lab::USERNAME.into(),
        password: crawler_lab::PASSWORD.into(),
    };
    let stats = fast(Crawl::new(spider))
        .feed(&feed)
        .unwrap()
        .run()
        .await
        .unwrap();
    let books: Vec<login::Book> = read_jsonl(&feed);
    let mut titles: Vec<String> = books.iter().map(|b| b.title.clone()).collect();
    titles.sort();
    let mut expected: Vec<String> = lab
        .account_books()
        .iter()
        .map(|id| lab.book(*id).unwrap().title)
        .collect();
    expected.sort();
    assert_eq!(titles, expected, "{stats}");
    assert!(books.iter().all(|b| b.account == crawler_lab::USERNAME));
    assert_eq!(stats.spider_errors, 0);

    let recorded = lab.recorder().requests();
    let post = recorded
        .iter()
        .find(|r| r.method == "POST")
        .expect("the form was posted");
    assert_eq!(post.status, 303, "credentials and CSRF cookie accepted");
    assert!(
        post.cookie
            .as_deref()
            .is_some_and(|c| c.starts_with("csrftoken="))
    );
    let account = recorded
        .iter()
        .find(|r| r.path.starts_with("/account?"))
        .expect("the account page was reached");
    assert_eq!(account.status, 200);
    let book_pages: Vec<_> = recorded
        .iter()
        .filter(|r| r.path.starts_with("/account/books/"))
        .collect();
    assert_eq!(book_pages.len(), crawler_lab::ACCOUNT_BOOKS as usize);
    // Every one carried the session from the jar, and the csrftoken (Path=/login) stayed home.
    for r in &book_pages {
        assert_eq!(r.status, 200, "{r:?}");
        let cookie = r.cookie.as_deref().unwrap_or("");
        assert!(
            cookie.contains("session=") && !cookie.contains("csrftoken"),
            "{cookie}"
        );
    }
    let jar = &stats.middlewares["downloader:cookies"];
    assert!(jar["cookies_stored"] >= 2, "{jar:?}");
    assert!(stats.reconciles());
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_middleware_tags_requests_and_drops_pricey_books() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let feed = dir.path().join("cheap.jsonl");
    let limit = 3000;
    let stats = fast(custom_middleware::crawl(lab.url(), "test-tag", limit))
        .feed(&feed)
        .unwrap()
        .run()
        .await
        .unwrap();
    let books: Vec<custom_middleware::Book> = read_jsonl(&feed);
    let cheap: HashSet<String> = (1..=100)
        .map(|id| lab.book(id).unwrap())
        .filter(|b| custom_middleware::pence(&b.price).unwrap() <= limit)
        .map(|b| b.title)
        .collect();
    assert!(
        !cheap.is_empty() && cheap.len() < 100,
        "the limit splits the shop"
    );
    let got: HashSet<String> = books.iter().map(|b| b.title.clone()).collect();
    assert_eq!(got, cheap, "{stats}");
    assert!(books.iter().all(|b| b.pence <= limit));

    // Every request the middleware stack sent carried the tag (robots.txt is fetched by the
    // downloader's robots cache, outside the stack).
    let recorded = lab.recorder().requests();
    let pages: Vec<_> = recorded
        .iter()
        .filter(|r| r.path != "/robots.txt")
        .collect();
    assert_eq!(pages.len(), 100 + 5);
    assert!(pages.iter().all(|r| r.tag.as_deref() == Some("test-tag")));
    let tag = &stats.middlewares["downloader:tag"];
    assert_eq!(tag["responses_2xx"], 105);
    let dropped = &stats.middlewares["spider:max_price"];
    assert_eq!(dropped["items_dropped"], (100 - cheap.len()) as u64);
    assert!(stats.reconciles());
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_dedup_stores_each_book_once() {
    use pipeline_dedup::{Book, SledStore};

    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = SledStore::open(&dir.path().join("store")).unwrap();
    // Validation, checked directly: nothing on the lab site is invalid.
    let bad = Book {
        title: "  ".into(),
        price: "£1.00".into(),
        url: "http://x/".into(),
    };
    assert!(matches!(store.process(bad).await.unwrap(), Processed::Drop(r) if r == "no title"));
    let bad = Book {
        title: "A".into(),
        price: "free".into(),
        url: "http://x/".into(),
    };
    assert!(matches!(
        store.process(bad).await.unwrap(),
        Processed::Drop(_)
    ));
    assert_eq!(store.stored(), 0);

    let tree_dir = dir.path().join("store");
    let feed = dir.path().join("items.jsonl");
    let stats = fast(Crawl::new(pipeline_dedup::Shop { start: lab.url() }))
        .pipeline(store)
        .feed(&feed)
        .unwrap()
        .run()
        .await
        .unwrap();
    // Each book is on the catalogue listing, its category listing and its own page.
    assert_eq!(stats.items_scraped, 100, "{stats}");
    assert_eq!(stats.items_dropped, 200);
    let written: Vec<Book> = read_jsonl(&feed);
    assert_eq!(written.len(), 100);

    let store = SledStore::open(&tree_dir).unwrap();
    let stored = store.books();
    assert_eq!(stored.len(), 100);
    for id in [1, 50, 100] {
        let book = lab.book(id).unwrap();
        let s = stored.iter().find(|b| b.title == book.title).unwrap();
        assert_eq!(s.price, book.price);
    }
    assert!(stats.reconciles());
    lab.shutdown().await;
}
