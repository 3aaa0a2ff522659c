//! Feeds given in code: `feed` replaces a file, `append_feed` adds to it (Scrapy's `-O` and
//! `-o`), appending to a JSON array is refused before the crawl, placeholders in feed paths,
//! and feed names checked before the crawl.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

use std::time::Duration;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placeholders_in_a_feed_path_become_the_spider_name_and_start_time() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let before = std::time::SystemTime::now();
    let template = dir.path().join("%(name)s-%(time)s.jsonl");
    let scraped = crawl_into(&lab, &template, false).await;
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let name = &names[0];
    // books-2024-05-21T12-33-41.jsonl: the time is the crawl's start, to the second.
    let stamp = name
        .strip_prefix("books-")
        .and_then(|n| n.strip_suffix(".jsonl"))
        .unwrap_or_else(|| panic!("{name}"));
    let secs =
        |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let earliest =
        crawler::core::feed_time(std::time::UNIX_EPOCH + Duration::from_secs(secs(before)));
    assert!(stamp >= earliest.as_str(), "{stamp} < {earliest}");
    assert_eq!(stamp.len(), "2024-05-21T12-33-41".len(), "{stamp}");
    assert!(!stamp.contains(':'), "{stamp}");
    assert_eq!(lines(&dir.path().join(name)), scraped as usize);
    lab.shutdown().await;
}

#[test]
fn feed_names_are_checked_before_the_crawl() {
    let crawl = || {
        Crawl::new(books::Books {
            start: "http://127.0.0.1:9/".into(),
        })
    };
    let e = crawl().feed("items.txt").err().expect("refused");
    assert!(e.is_settings(), "{e:?}");
    assert!(e.to_string().contains("'items.txt:jsonl'"), "{e}");
    // Standard output takes one feed: two would interleave their records.
    let e = crawl()
        .feed("-")
        .unwrap()
        .append_feed("-:csv")
        .err()
        .expect("refused");
    assert!(e.to_string().contains("one feed only"), "{e}");
    let e = crawl().feed("%(spider)s.jsonl").err().expect("refused");
    assert!(
        e.to_string().contains("unknown placeholder %(spider)s"),
        "{e}"
    );
    // A JSON array on standard output is fine: it is written once, not appended to.
    assert!(crawl().append_feed("-:json").is_ok());
}
