//! Feeds given in code: `feed` replaces a file, `append_feed` adds to it (Scrapy's `-O` and
//! `-o`), and appending to a JSON array is refused before the crawl.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

use crawler::prelude::*;
use crawler_lab::Lab;

async fn crawl_into(lab: &Lab, path: &std::path::Path, append: bool) -> u64 {
    let crawl = Crawl::new(books::Books { start: lab.url() })
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("concurrency_per_host", "8")
        .progress(false);
    let crawl = if append {
        crawl.append_feed(path).unwrap()
    } else {
        crawl.feed(path).unwrap()
    };
    crawl.run().await.unwrap().items_scraped
}

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path).unwrap().lines().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_keeps_earlier_items_and_feed_replaces_them() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("books.jsonl");

    let first = crawl_into(&lab, &path, false).await;
    assert_eq!(first, 100);
    assert_eq!(lines(&path), 100);
    let second = crawl_into(&lab, &path, true).await;
    assert_eq!(lines(&path), (first + second) as usize, "appended");
    let third = crawl_into(&lab, &path, false).await;
    assert_eq!(lines(&path), third as usize, "replaced");
    lab.shutdown().await;
}

#[test]
fn appending_to_a_json_array_is_refused_before_the_crawl() {
    let e = Crawl::new(books::Books {
        start: "http://127.0.0.1:9/".into(),
    })
    .append_feed("books.json")
    .err()
    .expect("refused");
    assert!(e.is_settings(), "{e:?}");
    assert!(e.to_string().contains(".jsonl"), "{e}");
}
