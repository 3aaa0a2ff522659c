//! The crawl's other outputs in object storage, against a real S3-compatible server
//! (`moto_server`, see `support/moto.rs`), each checked against the same crawl's local
//! output:
//!
//! - the failures file (`failures_file = "s3://..."`): the object holds, byte for byte, the
//!   local copy the crawl wrote, and the same failures as a crawl to a local file; an upload
//!   the server refuses fails the crawl, keeps the lines locally and says where;
//! - the files and images stores (`files_store = "s3://..."`): every item's files are
//!   objects named by their content's hash, as locally, with their checksums; the same
//!   bytes are uploaded once (moto's request log counts the uploads of each key); a second
//!   crawl finds everything fresh through the index object: no download, no upload; with
//!   the index lost, a third downloads again and finds each content by its HEAD: no upload;
//! - Parquet feeds on `s3://`: the objects, read back with pyarrow, hold the rows of the
//!   same crawl's local Parquet feed, in the row groups `feed_parquet_row_group_items` asks.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

#[path = "support/moto.rs"]
mod moto;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use crawler::files::{FileRecord, FilesPipeline};
use crawler::prelude::*;
use crawler_lab::{FaultKind, Lab, Scenario};
use moto::{BUCKET, Moto, PART_SIZE};
use sha2::{Digest, Sha256};

/// `crawl`, its objects on `endpoint` with moto's credentials.
fn on_moto<S: Spider>(crawl: Crawl<S>, endpoint: &str) -> Crawl<S> {
    crawl
        .set("feed_s3_endpoint", endpoint)
        .set("feed_s3_access_key_id", "moto-test-id")
        .set("feed_s3_secret_access_key", "moto-test-secret")
        .set("feed_upload_part_size", PART_SIZE)
}

/// How many times each key was uploaded, from moto's request log: a PUT of the whole
/// object (not of a part) or the start of a multipart upload.
fn uploads(log: &Path) -> HashMap<String, usize> {
    let text = std::fs::read_to_string(log).unwrap();
    let mut out: HashMap<String, usize> = HashMap::new();
    for line in text.lines() {
        let Some(request) = line.split('"').nth(1) else {
            continue;
        };
        let mut parts = request.split(' ');
        let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
            continue;
        };
        let Some(key) = target.strip_prefix(&format!("/{BUCKET}/")) else {
            continue;
        };
        let (key, query) = key.split_once('?').unwrap_or((key, ""));
        let whole = method == "PUT" && query.is_empty();
        // `?uploads` (object_store sends `?uploads=`).
        let multipart = method == "POST" && query.trim_end_matches('=') == "uploads";
        if whole || multipart {
            *out.entry(key.to_owned()).or_default() += 1;
        }
    }
    out
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The chaos site's crawl: about a fifth of its pages fail.
fn chaos_crawl(lab: &Lab) -> Crawl<books::Books> {
    Crawl::new(books::Books { start: lab.url() })
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("concurrency_per_host", "32")
        .set("concurrency", "32")
        .set("download_timeout", "1500ms")
        .set("max_body_size", "2097152")
        .set("retry_times", "1")
        .set("retry_backoff_base", "100ms")
        .progress(false)
}

/// The (URL, reason) of each line of a failures file, but for pages whose failure depends
/// on timing (a body longer than declared may arrive whole or cut).
fn failures(lab: &Lab, text: &[u8]) -> BTreeSet<(String, String)> {
    let base = lab.url();
    String::from_utf8(text.to_vec())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| {
            (
                v["url"].as_str().unwrap().to_owned(),
                v["reason"].as_str().unwrap().to_owned(),
            )
        })
        .filter(|(url, _)| {
            let path = url.trim_start_matches(base.trim_end_matches('/'));
            lab.expected_fault(path) != Some(FaultKind::LongerThanDeclared)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failures_object_holds_what_the_local_failures_file_does() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("moto.log");
    let moto = Moto::start_logged(Some(&log)).await;
    let lab = Lab::builder()
        // About 160 bytes a failure: 4,000 books' failures take two parts.
        .books(4000)
        .scenario(Scenario::chaos())
        .seed(3)
        .start()
        .await
        .unwrap();

    let local = dir.path().join("failures.jsonl");
    let here = chaos_crawl(&lab)
        .set("failures_file", local.to_str().unwrap())
        .run()
        .await
        .unwrap();
    // With a job directory: the local copy is kept there, and the object must be it.
    let job = dir.path().join("job");
    let key = "logs/failures.jsonl";
    let there = on_moto(chaos_crawl(&lab), &moto.endpoint)
        .set("failures_file", format!("s3://{BUCKET}/{key}"))
        .set("job_dir", job.to_str().unwrap())
        .run()
        .await
        .unwrap();
    let object = moto.object(key).await;
    let copy = std::fs::read(job.join("failures.jsonl")).unwrap();
    assert!(object == copy, "the object is not the crawl's local copy");
    let failed: u64 = there.failed.values().sum();
    assert_eq!(
        object.iter().filter(|b| **b == b'\n').count() as u64,
        failed
    );
    assert!(failed > 400, "{there}");
    // The same failures as the crawl to a local file.
    let local_text = std::fs::read(&local).unwrap();
    assert_eq!(failures(&lab, &object), failures(&lab, &local_text));
    assert_eq!(
        local_text.iter().filter(|b| **b == b'\n').count() as u64,
        here.failed.values().sum::<u64>()
    );
    // Larger than a part: it went up as a multipart upload, completed once.
    assert!(object.len() > 64 * 1024, "{} bytes", object.len());
    let log_text = std::fs::read_to_string(&log).unwrap();
    assert!(
        log_text.contains(&format!("POST /{BUCKET}/{key}?uploads")),
        "no multipart upload in moto's log"
    );
    assert_eq!(uploads(&log).get(key), Some(&1));
    assert!(moto.uploads_in_progress().await.is_empty());

    // Without a job directory the copy is temporary: the object again, nothing left over.
    let temp_before = temp_copies();
    let key2 = "logs/again.jsonl";
    on_moto(chaos_crawl(&lab), &moto.endpoint)
        .set("failures_file", format!("s3://{BUCKET}/{key2}"))
        .run()
        .await
        .unwrap();
    let again = moto.object(key2).await;
    assert_eq!(failures(&lab, &again), failures(&lab, &local_text));
    assert_eq!(temp_copies(), temp_before, "the temporary copy was removed");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failures_upload_that_fails_keeps_the_lines_and_says_where_without_the_secret() {
    let moto = Moto::start().await;
    let lab = Lab::builder()
        .books(300)
        .scenario(Scenario::chaos())
        .seed(3)
        .start()
        .await
        .unwrap();
    // A bucket the server does not have: the upload is refused (404), not retried.
    let e = on_moto(chaos_crawl(&lab), &moto.endpoint)
        .set("failures_file", "s3://no-such-bucket/failures.jsonl")
        .run()
        .await
        .expect_err("the upload fails the crawl");
    let text = format!("{e:#}");
    assert!(!text.contains("moto-test-secret"), "{text}");
    let path = text
        .split("its lines are in '")
        .nth(1)
        .and_then(|rest| rest.split_once('\''))
        .map(|(path, _)| path.to_owned())
        .unwrap_or_else(|| panic!("the error names no local copy: {text}"));
    let kept = std::fs::read(&path).unwrap();
    let lines = kept.iter().filter(|b| **b == b'\n').count();
    assert!(lines > 20, "{lines} failures kept in {path}");
    assert!(
        failures(&lab, &kept)
            .iter()
            .all(|(url, _)| url.starts_with(&lab.url()))
    );
    std::fs::remove_file(&path).unwrap();
    assert!(moto.keys().await.is_empty());
    lab.shutdown().await;
}

/// The temporary failures copies of this process in the temporary directory.
fn temp_copies() -> Vec<String> {
    let prefix = format!("crawler-failures-{}-", std::process::id());
    let mut names: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    names.sort();
    names
}

#[derive(Debug, Serialize, serde::Deserialize)]
struct Product {
    url: String,
    file_urls: Vec<String>,
    image_urls: Vec<String>,
    #[serde(default)]
    files: Vec<FileRecord>,
    #[serde(default)]
    images: Vec<FileRecord>,
}

/// Book pages of one lab; each book's item names a document and an image on the media lab,
/// the first twelve the same image under a second URL too.
struct Products {
    start: String,
    media: String,
}

fn book_number(url: &str) -> u32 {
    url.rsplit("book-")
        .next()
        .and_then(|s| s.strip_suffix(".html"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

impl Spider for Products {
    type Item = Product;

    fn name(&self) -> &str {
        "products"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }

    async fn parse(&self, page: Response, out: &mut Output<Product>) -> Result<()> {
        if page.callback() == Some("book") {
            let n = book_number(page.url().as_str());
            let m = &self.media;
            let image = format!("{m}media/img-{}x60-{}.png", 60 + (n % 6) * 10, n % 6);
            let mut image_urls = vec![image.clone()];
            if n <= 12 {
                image_urls.push(format!("{image}?copy={n}"));
            }
            out.item(Product {
                url: page.url().to_string(),
                file_urls: vec![format!("{m}media/doc-{}.pdf", n % 4)],
                image_urls,
                files: Vec::new(),
                images: Vec::new(),
            });
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

fn products_crawl(site: &Lab, media: &Lab, files: &str, images: &str) -> Crawl<Products> {
    Crawl::new(Products {
        start: site.url(),
        media: media.url(),
    })
    .set("concurrency", "8")
    .set("concurrency_per_host", "4")
    .set("throttle", "fixed")
    .set("download_delay", "0s")
    .set("files_store", files)
    .set("images_store", images)
    .set("images_thumbs", r#"{"small": [32, 32]}"#)
    .pipeline(FilesPipeline::files())
    .pipeline(FilesPipeline::images())
    .progress(false)
}

fn products(feed: &Path) -> Vec<Product> {
    std::fs::read_to_string(feed)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every (URL, path, checksum) the items carry.
fn records(items: &[Product]) -> BTreeSet<(String, String, String)> {
    items
        .iter()
        .flat_map(|p| p.files.iter().chain(&p.images))
        .map(|f| (f.url.clone(), f.path.clone(), f.checksum.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_and_images_stored_in_a_bucket_once_by_content_as_locally() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("moto.log");
    let moto = Moto::start_logged(Some(&log)).await;
    let site = Lab::builder().books(100).start().await.unwrap();
    let media = Lab::builder().books(100).start().await.unwrap();

    // The same crawl to local stores, then to the bucket.
    let local_feed = dir.path().join("local.jsonl");
    let files_dir = dir.path().join("files");
    let images_dir = dir.path().join("images");
    products_crawl(
        &site,
        &media,
        files_dir.to_str().unwrap(),
        images_dir.to_str().unwrap(),
    )
    .feed(&local_feed)
    .unwrap()
    .run()
    .await
    .unwrap();
    let feed = dir.path().join("s3.jsonl");
    let files = format!("s3://{BUCKET}/files");
    let images = format!("s3://{BUCKET}/images/");
    media.recorder().clear();
    let stats = on_moto(
        products_crawl(&site, &media, &files, &images),
        &moto.endpoint,
    )
    .feed(&feed)
    .unwrap()
    .run()
    .await
    .unwrap();
    let items = products(&feed);
    assert_eq!(items.len(), 100, "{stats}");
    // Named by content as locally: the same paths and checksums for the same URLs.
    assert_eq!(records(&items), records(&products(&local_feed)));

    let objects = moto.objects().await;
    let mut image_sums = BTreeSet::new();
    for p in &items {
        assert_eq!(p.files.len(), 1, "{p:?}");
        assert_eq!(p.images.len(), p.image_urls.len(), "{p:?}");
        for (prefix, f) in p
            .files
            .iter()
            .map(|f| ("files", f))
            .chain(p.images.iter().map(|f| ("images", f)))
        {
            assert_eq!(f.status, "downloaded", "{f:?}");
            let key = format!("{prefix}/{}", f.path);
            let body = objects
                .get(&key)
                .unwrap_or_else(|| panic!("{key} is not in the bucket ({f:?})"));
            assert_eq!(sha256(body), f.checksum, "{key}");
            assert!(
                f.path.starts_with(&format!("full/{}.", f.checksum)),
                "{f:?}"
            );
            if prefix == "images" {
                image_sums.insert(f.checksum.clone());
            }
        }
    }
    assert_eq!(image_sums.len(), 6, "six images, whatever their URLs");
    for sum in &image_sums {
        let key = format!("images/thumbs/small/{sum}.jpg");
        let thumb = objects.get(&key).unwrap_or_else(|| panic!("{key} missing"));
        let img = image::load_from_memory(thumb).unwrap();
        assert!(img.width() <= 32 && img.height() <= 32, "{key}");
    }
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for key in objects.keys() {
        let kind = key.rsplit_once('/').map_or("", |(d, _)| d);
        *kinds.entry(kind).or_default() += 1;
    }
    assert_eq!(
        kinds,
        BTreeMap::from([
            ("files", 1),
            ("files/full", 4),
            ("images", 1),
            ("images/full", 6),
            ("images/thumbs/small", 6),
        ]),
        "four documents, six images and their thumbnails, and the two indexes"
    );
    // Each object uploaded once: 100 documents and 112 image URLs, 10 contents.
    let uploaded = uploads(&log);
    let twice: Vec<_> = uploaded.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "uploaded more than once: {twice:?}");
    assert_eq!(uploaded.len(), objects.len(), "{uploaded:?}");

    // Again: the index object says every file is fresh: nothing downloaded, nothing
    // uploaded but the indexes.
    media.recorder().clear();
    std::fs::write(&log, "").unwrap();
    let again = dir.path().join("again.jsonl");
    on_moto(
        products_crawl(&site, &media, &files, &images),
        &moto.endpoint,
    )
    .feed(&again)
    .unwrap()
    .run()
    .await
    .unwrap();
    let items = products(&again);
    assert_eq!(items.len(), 100);
    assert!(
        items
            .iter()
            .flat_map(|p| p.files.iter().chain(&p.images))
            .all(|f| f.status == "uptodate"),
        "{items:?}"
    );
    let asked: Vec<String> = media
        .recorder()
        .requests()
        .into_iter()
        .map(|r| r.path)
        .filter(|p| p.starts_with("/media/"))
        .collect();
    assert!(asked.is_empty(), "stored files asked for again: {asked:?}");
    let uploaded: BTreeSet<String> = uploads(&log).into_keys().collect();
    assert_eq!(
        uploaded,
        BTreeSet::from([
            "files/index.jsonl".to_owned(),
            "images/index.jsonl".to_owned()
        ])
    );

    // The indexes lost (a crawl killed before it wrote them): every file is downloaded
    // again, and found in the bucket by its HEAD: not one upload but the indexes.
    moto.delete("files/index.jsonl").await;
    moto.delete("images/index.jsonl").await;
    std::fs::write(&log, "").unwrap();
    let lost = dir.path().join("lost.jsonl");
    on_moto(
        products_crawl(&site, &media, &files, &images),
        &moto.endpoint,
    )
    .feed(&lost)
    .unwrap()
    .run()
    .await
    .unwrap();
    let items = products(&lost);
    assert_eq!(items.len(), 100);
    assert!(
        items
            .iter()
            .flat_map(|p| p.files.iter().chain(&p.images))
            .all(|f| f.status == "downloaded"),
        "{items:?}"
    );
    assert_eq!(records(&items), records(&products(&local_feed)));
    let uploaded: BTreeSet<String> = uploads(&log).into_keys().collect();
    assert_eq!(
        uploaded,
        BTreeSet::from([
            "files/index.jsonl".to_owned(),
            "images/index.jsonl".to_owned()
        ])
    );
    site.shutdown().await;
    media.shutdown().await;
}

/// A Parquet file's rows and row group sizes as pyarrow reads them: the sizes on the first
/// line, then one JSON object per row.
fn pyarrow_read(path: &Path) -> (Vec<u64>, Vec<serde_json::Value>) {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import json, sys, pyarrow.parquet as pq\n\
             f = pq.ParquetFile(sys.argv[1])\n\
             m = f.metadata\n\
             print(json.dumps([m.row_group(i).num_rows for i in range(m.num_row_groups)]))\n\
             for row in f.read().to_pylist(): print(json.dumps(row))",
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
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let groups = serde_json::from_str(lines.next().unwrap()).unwrap();
    let rows = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    (groups, rows)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parquet_feed_on_s3_holds_the_rows_of_the_same_crawls_local_parquet_feed() {
    let moto = Moto::start().await;
    let lab = Lab::builder().books(1000).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let crawl = Crawl::new(books::Books { start: lab.url() })
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("concurrency_per_host", "16")
        .set("feed_batch_items", "400")
        .set("feed_parquet_row_group_items", "150")
        .progress(false);
    let stats = on_moto(crawl, &moto.endpoint)
        .feed(dir.path().join("books-%(batch_id)d.parquet"))
        .unwrap()
        .feed(format!("s3://{BUCKET}/parquet/books-%(batch_id)d.parquet"))
        .unwrap()
        .run()
        .await
        .unwrap();
    assert_eq!(stats.items_scraped, 1000);
    let objects = moto.objects().await;
    let keys: Vec<&String> = objects.keys().collect();
    assert_eq!(
        keys,
        [
            "parquet/books-1.parquet",
            "parquet/books-2.parquet",
            "parquet/books-3.parquet"
        ]
    );
    let mut urls = BTreeSet::new();
    for (i, (key, body)) in objects.iter().enumerate() {
        let fetched = dir.path().join(format!("fetched-{}.parquet", i + 1));
        std::fs::write(&fetched, body).unwrap();
        let (groups, rows) = pyarrow_read(&fetched);
        let (local_groups, local_rows) =
            pyarrow_read(&dir.path().join(format!("books-{}.parquet", i + 1)));
        assert_eq!(rows, local_rows, "{key}");
        assert_eq!(groups, local_groups, "{key}");
        let expected: &[u64] = if i < 2 { &[150, 150, 100] } else { &[150, 50] };
        assert_eq!(groups, expected, "{key}");
        for r in &rows {
            urls.insert(r["url"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(urls.len(), 1000, "every book once");
    assert!(moto.uploads_in_progress().await.is_empty());
    lab.shutdown().await;
}

#[test]
fn object_locations_are_checked_when_the_settings_load() {
    let check = |key: &str, value: &str, more: &[(&str, &str)]| {
        let mut s = Settings::default();
        for (k, v) in more {
            s.set(k, v).unwrap();
        }
        s.set(key, value)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    for ok in [
        "s3://bucket/logs/failures.jsonl",
        "gs://bucket/failures.jsonl",
        "file:///tmp/failures.jsonl",
        "failures.jsonl",
    ] {
        assert_eq!(check("failures_file", ok, &[]), "", "{ok}");
    }
    let e = check("failures_file", "s3://bucket", &[]);
    assert!(e.contains("names a bucket but no object"), "{e}");
    let e = check("failures_file", "ftp://host/failures.jsonl", &[]);
    assert!(e.contains("'ftp://'"), "{e}");
    let e = check("failures_file", "file://failures.jsonl", &[]);
    assert!(e.contains("absolute path"), "{e}");
    let e = check(
        "failures_file",
        "s3://bucket/failures.jsonl",
        &[("redis_url", "redis://127.0.0.1:1")],
    );
    assert!(
        e.contains("fleets write their failures files locally"),
        "{e}"
    );
    // A store is a prefix: the bucket alone is one.
    assert_eq!(check("files_store", "s3://bucket", &[]), "");
    assert_eq!(check("images_store", "az://container/images", &[]), "");
    let e = check("images_store", "sftp://host/images", &[]);
    assert!(e.contains("images_store") && e.contains("'sftp://'"), "{e}");
}
