//! Feeds given in code: `feed` replaces a file, `append_feed` adds to it (Scrapy's `-O` and
//! `-o`), appending to a JSON array is refused before the crawl, placeholders in feed paths,
//! feed names checked before the crawl, and Parquet feeds read back with pyarrow.

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

/// The books as typed items: a string, a float, an integer, a boolean, a list (nested:
/// JSON text in Parquet) and a null, for the Parquet feed's column types. With `changing`,
/// every item after the first has a field the first lacks.
struct TypedBooks {
    start: String,
    changing: bool,
    emitted: std::sync::atomic::AtomicUsize,
}

impl Spider for TypedBooks {
    type Item = serde_json::Value;

    fn name(&self) -> &str {
        "typed_books"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }

    async fn parse(&self, page: Response, out: &mut Output<serde_json::Value>) -> Result<()> {
        if page.callback() == Some("book") {
            let book = books::Book::from_page(&page)?;
            let n = self
                .emitted
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            // "In stock (19 available)"
            let available: i64 = book
                .stock
                .split(|c: char| !c.is_ascii_digit())
                .find(|d| !d.is_empty())
                .and_then(|d| d.parse().ok())
                .unwrap_or(0);
            let price: f64 = book.price.trim_start_matches('£').parse().unwrap_or(0.0);
            let mut item = serde_json::json!({
                "url": book.url,
                "title": book.title,
                "price": price,
                "available": available,
                "in_stock": book.stock.starts_with("In stock"),
                "words": book.title.split_whitespace().collect::<Vec<_>>(),
                "note": null,
            });
            if self.changing && n > 0 {
                item["isbn"] = serde_json::json!("978-0");
            }
            out.item(item);
            return Ok(());
        }
        for href in page.select("a").attrs("href") {
            if href.contains("/book-") || href.starts_with("book-") {
                out.follow(href).callback("book");
            } else {
                out.follow(href);
            }
        }
        Ok(())
    }
}

fn typed_crawl(lab: &Lab, changing: bool) -> Crawl<TypedBooks> {
    Crawl::new(TypedBooks {
        start: lab.url(),
        changing,
        emitted: Default::default(),
    })
    .set("throttle", "fixed")
    .set("download_delay", "0s")
    .set("concurrency_per_host", "8")
    .progress(false)
}

/// The rows of a Parquet file as pyarrow reads them, one JSON object per row.
fn parquet_rows(path: &std::path::Path) -> Vec<serde_json::Value> {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import json, sys, pyarrow.parquet as pq\n\
             t = pq.read_table(sys.argv[1])\n\
             print(json.dumps([str(f.type) for f in t.schema]))\n\
             for row in t.to_pylist(): print(json.dumps(row))",
        )
        .arg(path)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "pyarrow cannot read {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parquet_feed_holds_the_same_rows_as_json_lines_with_typed_columns() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let jsonl = dir.path().join("books.jsonl");
    let parquet = dir.path().join("books.parquet");
    let stats = typed_crawl(&lab, false)
        .feed(&jsonl)
        .unwrap()
        .feed(&parquet)
        .unwrap()
        .run()
        .await
        .unwrap();
    assert_eq!(stats.items_scraped, 100);
    let mut expected: Vec<serde_json::Value> = std::fs::read_to_string(&jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut rows = parquet_rows(&parquet);
    let types = rows.remove(0);
    // Columns in the item's field order (serde_json's map sorts them), each typed.
    assert_eq!(
        types,
        serde_json::json!([
            "int64", "bool", "string", "double", "string", "string", "string"
        ]),
        "available, in_stock, note, price, title, url, words"
    );
    for row in &mut rows {
        // Nested values are JSON text.
        let words = row["words"].as_str().unwrap().to_owned();
        row["words"] = serde_json::from_str(&words).unwrap();
    }
    let by_url = |v: &serde_json::Value| v["url"].as_str().unwrap().to_owned();
    expected.sort_by_key(by_url);
    rows.sort_by_key(by_url);
    assert_eq!(rows.len(), 100);
    assert_eq!(rows, expected);
    assert!(
        rows.iter()
            .all(|r| r["note"].is_null() && r["price"].as_f64().unwrap() > 0.0)
    );
    // Nothing else in the directory: the file was renamed into place whole.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_whose_fields_change_stops_a_parquet_feed_and_leaves_no_file() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let parquet = dir.path().join("books.parquet");
    let e = typed_crawl(&lab, true)
        .feed(&parquet)
        .unwrap()
        .run()
        .await
        .expect_err("the feed stops the crawl");
    let text = format!("{e:#}");
    assert!(
        text.contains("item 2 has the field 'isbn'"),
        "the error names the item and the field: {text}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "no file left behind: {left:?}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parquet_batches_are_files_of_their_own() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let stats = typed_crawl(&lab, false)
        .set("feed_batch_items", "40")
        .feed(dir.path().join("b-%(batch_id)d.parquet"))
        .unwrap()
        .run()
        .await
        .unwrap();
    assert_eq!(stats.items_scraped, 100);
    let mut sizes: Vec<(String, usize)> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                parquet_rows(&e.path()).len() - 1,
            )
        })
        .collect();
    sizes.sort();
    assert_eq!(
        sizes,
        [
            ("b-1.parquet".to_owned(), 40),
            ("b-2.parquet".to_owned(), 40),
            ("b-3.parquet".to_owned(), 20)
        ]
    );
    lab.shutdown().await;
}

/// The row group sizes of a Parquet file, as pyarrow reads its footer.
fn parquet_row_groups(path: &std::path::Path) -> Vec<u64> {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, pyarrow.parquet as pq\n\
             m = pq.ParquetFile(sys.argv[1]).metadata\n\
             print(' '.join(str(m.row_group(i).num_rows) for i in range(m.num_row_groups)))",
        )
        .arg(path)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "pyarrow cannot read {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_parquet_row_group_size_is_a_setting() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("small.parquet");
    let stats = typed_crawl(&lab, false)
        .set("feed_parquet_row_group_items", "30")
        .feed(&small)
        .unwrap()
        .run()
        .await
        .unwrap();
    assert_eq!(stats.items_scraped, 100);
    assert_eq!(parquet_row_groups(&small), [30, 30, 30, 10]);
    // Every row is there, in whichever group.
    assert_eq!(parquet_rows(&small).len() - 1, 100);
    // The default: one group for a crawl this size.
    let default = dir.path().join("default.parquet");
    typed_crawl(&lab, false)
        .feed(&default)
        .unwrap()
        .run()
        .await
        .unwrap();
    assert_eq!(parquet_row_groups(&default), [100]);
    lab.shutdown().await;
}

#[test]
fn a_row_group_of_no_items_is_refused_with_the_setting_named() {
    let mut s = Settings::default();
    let e = s
        .set("feed_parquet_row_group_items", "0")
        .expect_err("0 is refused");
    let text = e.to_string();
    assert!(
        text.contains("feed_parquet_row_group_items") && text.contains("at least 1"),
        "{text}"
    );
}
