//! Feeds to object storage, against a real S3-compatible server: moto's `moto_server`
//! (PyPI `moto[server]`), started by each test on a free port of 127.0.0.1. A test whose
//! machine lacks `moto_server` says so and passes without running (CI installs it).
//!
//! - A crawl's batched feed to `s3://` is byte-identical to the same crawl's local feed:
//!   10 batches of 1,000 items, each object sent as a multipart upload.
//! - `kill -9` while a batch is being uploaded leaves no partial object; the resumed job
//!   keeps the complete batches and writes every one after them.
//! - XML feeds: Scrapy's shape, the same bytes locally and in the bucket.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

use std::collections::HashSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crawler::prelude::*;
use crawler_lab::Lab;

#[path = "support/moto.rs"]
mod moto;
use moto::{BUCKET, Moto, PART_SIZE};

/// A crawl of the lab's books to `feeds`, objects on `moto`.
fn crawl(lab_url: String, endpoint: &str, batch_items: u64) -> Crawl<books::Books> {
    Crawl::new(books::Books { start: lab_url })
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("concurrency_per_host", "16")
        .set("feed_batch_items", batch_items.to_string())
        .set("feed_s3_endpoint", endpoint)
        .set("feed_s3_access_key_id", "moto-test-id")
        .set("feed_s3_secret_access_key", "moto-test-secret")
        .set("feed_upload_part_size", PART_SIZE)
        .progress(false)
}

/// The books of a JSON Lines batch, every line parsed.
fn batch_urls(key: &str, body: &[u8]) -> Vec<String> {
    String::from_utf8(body.to_vec())
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<books::Book>(l)
                .unwrap_or_else(|e| panic!("{key}: a line does not parse ({e}): {l}"))
                .url
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_batches_are_byte_identical_to_the_same_crawls_local_batches() {
    let moto = Moto::start().await;
    let lab = Lab::builder().books(10_000).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("%(name)s-%(batch_id)02d.jsonl");
    let stats = crawl(lab.url(), &moto.endpoint, 1000)
        .feed(&local)
        .unwrap()
        .feed(format!("s3://{BUCKET}/%(name)s/%(batch_id)02d.jsonl"))
        .unwrap()
        .run()
        .await
        .unwrap();
    assert_eq!(stats.items_scraped, 10_000);
    let objects = moto.objects().await;
    let keys: Vec<&String> = objects.keys().collect();
    let expected: Vec<String> = (1..=10).map(|i| format!("books/{i:02}.jsonl")).collect();
    assert_eq!(keys, expected.iter().collect::<Vec<_>>());
    let mut all = HashSet::new();
    for (i, (key, body)) in objects.iter().enumerate() {
        let file = dir.path().join(format!("books-{:02}.jsonl", i + 1));
        let local = std::fs::read(&file).unwrap();
        assert!(local == *body, "{key} differs from {}", file.display());
        // Each batch spans parts: it went up as a multipart upload.
        assert!(body.len() > 2 * 64 * 1024, "{key}: {} bytes", body.len());
        let urls = batch_urls(key, body);
        assert_eq!(urls.len(), 1000, "{key}");
        all.extend(urls);
    }
    assert_eq!(all.len(), 10_000, "every book once");
    assert!(
        moto.uploads_in_progress().await.is_empty(),
        "every upload was completed"
    );
    // No .part file is left beside the local batches.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 10);
    lab.shutdown().await;
}

/// The crawl the kill test runs (and kills) in a child process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper: run as a child process by the object feed kill test"]
async fn child_object_crawl() {
    let url = std::env::var("CHILD_LAB_URL").expect("CHILD_LAB_URL");
    let job = std::env::var("CHILD_JOB_DIR").expect("CHILD_JOB_DIR");
    let endpoint = std::env::var("CHILD_S3_ENDPOINT").expect("CHILD_S3_ENDPOINT");
    let stats = crawl(url, &endpoint, 1000)
        .set("download_delay", "2ms")
        .set("randomize_delay", "false")
        .set("concurrency_per_host", "2")
        .set("job_dir", job)
        .feed(format!("s3://{BUCKET}/books-%(batch_id)d.jsonl"))
        .unwrap()
        .run()
        .await
        .unwrap();
    println!(
        "CHILD_STATS pending={} items={}",
        stats.pending, stats.items_scraped
    );
}

fn spawn_child(lab: &Lab, job: &Path, endpoint: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &crate::test_path(module_path!(), "child_object_crawl"),
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CHILD_LAB_URL", lab.url())
        .env("CHILD_JOB_DIR", job)
        .env("CHILD_S3_ENDPOINT", endpoint)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_mid_upload_shows_no_partial_object_and_the_resumed_job_writes_every_batch() {
    let moto = Moto::start().await;
    let lab = Lab::builder().books(5000).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    let mut child = spawn_child(&lab, &job, &moto.endpoint);
    // Kill once a batch is complete and the next one's multipart upload has begun: its
    // first parts are on the server, the object is not.
    let mut killed = false;
    for _ in 0..3000 {
        let keys = moto.keys().await;
        let uploading = moto.uploads_in_progress().await;
        if !keys.is_empty() && uploading.iter().any(|k| !keys.contains(k)) {
            child.kill().unwrap(); // SIGKILL
            killed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    child.wait().unwrap();
    assert!(killed, "the child never uploaded a second batch");
    // The uploads the kill cut short (one, unless a batch completed in the instant before
    // the kill: then the kill landed between batches, and the test says so).
    let cut = moto.uploads_in_progress().await;
    let before = moto.objects().await;
    assert!(
        !cut.is_empty(),
        "the kill found no upload in progress: {before:?}"
    );
    for key in &cut {
        assert!(
            !before.contains_key(key),
            "the batch being uploaded at the kill ({key}) is visible"
        );
    }
    for (key, body) in &before {
        assert_eq!(batch_urls(key, body).len(), 1000, "{key} is partial");
    }

    let child = spawn_child(&lab, &job, &moto.endpoint);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the resumed crawl failed: {stdout}");
    assert!(stdout.contains("CHILD_STATS pending=0"), "{stdout}");

    let after = moto.objects().await;
    // The batches complete before the kill are kept as they were.
    for (key, body) in &before {
        assert!(after.get(key) == Some(body), "{key} was rewritten");
    }
    // Batches 1..=n, all complete: every one but the last holds 1,000 items.
    let n = after.len();
    let mut all = HashSet::new();
    for id in 1..=n {
        let key = format!("books-{id}.jsonl");
        let body = after
            .get(&key)
            .unwrap_or_else(|| panic!("batch {key} is missing: {:?}", after.keys()));
        let urls = batch_urls(&key, body);
        if id < n {
            assert_eq!(urls.len(), 1000, "{key}");
        } else {
            assert!((1..=1000).contains(&urls.len()), "{key}: {}", urls.len());
        }
        all.extend(urls);
    }
    assert_eq!(all.len(), 5000, "every book is in a batch");
    // At least once: a kill repeats the items of the requests whose batch was not complete,
    // never more than one batch of them.
    assert!(n <= 6, "{n} batches for 5,000 items");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_xml_feed_is_scrapys_shape_and_the_same_in_the_bucket() {
    let moto = Moto::start().await;
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("books.xml");
    crawl(lab.url(), &moto.endpoint, 0)
        .feed(&local)
        .unwrap()
        .feed(format!("s3://{BUCKET}/books.xml"))
        .unwrap()
        .run()
        .await
        .unwrap();
    let text = std::fs::read(&local).unwrap();
    assert!(moto.object("books.xml").await == text, "the object differs");

    // Parsed: <items> holds one <item> per book, its fields in the item's order.
    let mut reader = quick_xml::Reader::from_reader(text.as_slice());
    let mut path: Vec<String> = Vec::new();
    let mut items = Vec::new();
    let mut buf = Vec::new();
    loop {
        match reader.read_event_into(&mut buf).unwrap() {
            quick_xml::events::Event::Start(e) => {
                let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                if name == "item" {
                    assert_eq!(path, ["items"]);
                    items.push(Vec::<(String, String)>::new());
                }
                path.push(name);
                if path.len() == 3 {
                    items
                        .last_mut()
                        .unwrap()
                        .push((path[2].clone(), String::new()));
                }
            }
            // A field's text comes in pieces: text, and each escape on its own.
            quick_xml::events::Event::Text(t) if path.len() == 3 => {
                let value = &mut items.last_mut().unwrap().last_mut().unwrap().1;
                value.push_str(&t.decode().unwrap());
            }
            quick_xml::events::Event::GeneralRef(r) if path.len() == 3 => {
                let value = &mut items.last_mut().unwrap().last_mut().unwrap().1;
                match r.resolve_char_ref().unwrap() {
                    Some(c) => value.push(c),
                    None => value.push_str(match r.decode().unwrap().as_ref() {
                        "amp" => "&",
                        "lt" => "<",
                        "gt" => ">",
                        "quot" => "\"",
                        "apos" => "'",
                        other => panic!("unexpected entity &{other};"),
                    }),
                }
            }
            quick_xml::events::Event::End(_) => {
                path.pop();
            }
            quick_xml::events::Event::Eof => break,
            _ => {}
        }
        buf.clear();
    }
    assert!(path.is_empty(), "every element is closed");
    assert_eq!(items.len(), 100);
    let urls: HashSet<&str> = items
        .iter()
        .map(|fields| {
            let names: Vec<&str> = fields.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["url", "title", "price", "stock"]);
            fields[0].1.as_str()
        })
        .collect();
    assert_eq!(urls.len(), 100);
    assert!(items.iter().all(|f| f[2].1.starts_with('£')), "{items:?}");
    lab.shutdown().await;
}

#[test]
fn batch_and_object_settings_are_checked_and_the_secret_key_is_never_shown() {
    use crawler::core::redact::{redact_setting, redact_text};
    let check = |feeds: &[&str], set: &[(&str, &str)]| {
        let mut s = Settings::default();
        for (k, v) in set {
            s.set(k, v).unwrap();
        }
        s.feeds = feeds.iter().map(|f| f.to_string()).collect();
        s.validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let e = check(&["items.jsonl"], &[("feed_batch_items", "100")]);
    assert!(e.contains("must name its batches with %(batch_id)d"), "{e}");
    assert_eq!(
        check(
            &["b-%(batch_id)d.jsonl", "-"],
            &[("feed_batch_items", "100")]
        ),
        ""
    );
    let e = check(&["ftp://host/items.jsonl"], &[]);
    assert!(e.contains("'ftp://'"), "{e}");
    let e = check(&["s3://b/x.jsonl"], &[("redis_url", "redis://127.0.0.1:1")]);
    assert!(e.contains("fleets write their feeds to local files"), "{e}");
    let e = check(&["b-%(batch_id)s.jsonl"], &[]);
    assert!(e.contains("must end with )d"), "{e}");
    let mut s = Settings::default();
    let e = s.set("feed_s3_endpoint", "127.0.0.1:9000").unwrap_err();
    assert!(
        e.to_string().contains("not an http:// or https:// URL"),
        "{e}"
    );
    let e = s.set("feed_upload_part_size", "1KiB").unwrap_err();
    assert!(e.to_string().contains("at least 64KiB"), "{e}");
    // The secret key: `***` in every listing, and scrubbed from any text once registered.
    s.set("feed_s3_secret_access_key", "wJalrXUtnFEMI-test-key")
        .unwrap();
    assert_eq!(
        redact_setting("feed_s3_secret_access_key", "wJalrXUtnFEMI-test-key"),
        "***"
    );
    s.validate().unwrap();
    let scrubbed = crawler::core::redact::scrub("signing with wJalrXUtnFEMI-test-key failed");
    assert_eq!(scrubbed, "signing with *** failed");
    assert_eq!(
        redact_text("http://id:pw123@127.0.0.1:9000"),
        "http://id:***@127.0.0.1:9000"
    );
}
