//! Nothing lost, anywhere: a feed cut by `kill -9` is repaired before a resume appends to
//! it, a full disk stops the crawl without acknowledging the pages whose items were lost,
//! SIGTERM pauses a crawl like Ctrl-C, and a second stop request is honoured even while the
//! crawl drains at its end.
//!
//! Crawls that must be killed run in a child process (this test binary re-run on the
//! ignored `child_crawl` test) against the lab served by this process.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crawler::prelude::*;
use crawler_lab::Lab;

/// The crawl the child runs: the lab's books into a feed, with a job directory, and any
/// `key=value` settings in `CHILD_SET` (separated by `;`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper: run as a child process by the durability tests"]
async fn child_crawl() {
    let url = std::env::var("CHILD_LAB_URL").expect("CHILD_LAB_URL");
    let job = std::env::var("CHILD_JOB_DIR").expect("CHILD_JOB_DIR");
    let feed = std::env::var("CHILD_FEED").expect("CHILD_FEED");
    let mut crawl = Crawl::new(books::Books { start: url })
        .set("throttle", "fixed")
        .set("download_delay", "3ms")
        .set("randomize_delay", "false")
        .set("concurrency_per_host", "4")
        .set("job_dir", job)
        .feed(feed)
        .unwrap()
        .progress(false);
    for pair in std::env::var("CHILD_SET").unwrap_or_default().split(';') {
        if let Some((k, v)) = pair.split_once('=') {
            crawl = crawl.set(k, v);
        }
    }
    match crawl.run().await {
        Ok(stats) => println!(
            "CHILD_STATS pending={} items={}",
            stats.pending, stats.items_scraped
        ),
        Err(e) => {
            println!("CHILD_ERROR {e}");
            std::process::exit(3);
        }
    }
}

fn spawn_child(lab: &Lab, job: &Path, feed: &Path, set: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &crate::test_path(module_path!(), "child_crawl"),
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CHILD_LAB_URL", lab.url())
        .env("CHILD_JOB_DIR", job)
        .env("CHILD_FEED", feed)
        .env("CHILD_SET", set)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

async fn finish(child: Child) -> (bool, String) {
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Requests leased but never acknowledged when the last run stopped.
fn requeued(job: &Path) -> usize {
    crawler::store::SledStore::open(job, crawler::store::StoreOptions::default())
        .unwrap()
        .requeued_on_open()
}

/// Titles per book URL in a finished JSON Lines feed; every line must parse.
fn feed_counts(feed: &Path) -> HashMap<String, usize> {
    let text = std::fs::read_to_string(feed).unwrap_or_default();
    let mut counts = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let book: books::Book = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("line {} of the feed does not parse ({e}): {line}", n + 1));
        *counts.entry(book.url).or_insert(0) += 1;
    }
    counts
}

/// Complete lines so far in a feed that is still being written.
fn lines_so_far(feed: &Path) -> usize {
    std::fs::read(feed)
        .map(|b| b.iter().filter(|&&c| c == b'\n').count())
        .unwrap_or(0)
}

async fn wait_for_lines(feed: &Path, at_least: usize) {
    for _ in 0..1500 {
        if lines_so_far(feed) >= at_least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the child made no progress");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_feed_torn_by_kill_nine_is_repaired_before_the_resume_appends() {
    let lab = Lab::builder().books(1000).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (job, feed) = (dir.path().join("job"), dir.path().join("books.jsonl"));
    // With validators (the default): they are stored only once a page's request is
    // acknowledged, so a page whose item the kill lost is fetched in full again, not
    // answered 304 without items.
    let set = "conditional_requests=true";
    let mut child = spawn_child(&lab, &job, &feed, set);
    wait_for_lines(&feed, 200).await;
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // A kill in the middle of a 64 KiB buffer write leaves the last line cut short; make
    // sure this run has one whatever the timing of the kill was.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&feed)
        .unwrap();
    f.write_all(b"{\"url\":\"http://127.0.0.1/catalogue/book-torn")
        .unwrap();
    drop(f);

    let (ok, stdout) = finish(spawn_child(&lab, &job, &feed, set)).await;
    assert!(ok, "the resumed crawl failed: {stdout}");
    assert!(stdout.contains("CHILD_STATS pending=0"), "{stdout}");
    let counts = feed_counts(&feed);
    assert_eq!(counts.len(), 1000, "every book is in the feed");
    assert!(!counts.keys().any(|u| u.contains("book-torn")));
    lab.shutdown().await;
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_the_crawl_and_the_resumed_job_writes_every_item() {
    let lab = Lab::builder().books(400).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (job, feed) = (dir.path().join("job"), dir.path().join("books.jsonl"));
    // /dev/full answers every write with ENOSPC, exactly like a full disk.
    std::os::unix::fs::symlink("/dev/full", &feed).unwrap();
    // With validators: a page whose item was lost must not come back as a 304 with no item
    // (validators are stored only once the page's request is acknowledged).
    // Many pages in flight when the disk fills: their items are the ones at risk.
    let set = "conditional_requests=true;download_delay=0s;concurrency_per_host=16";
    let (ok, stdout) = finish(spawn_child(&lab, &job, &feed, set)).await;
    assert!(
        !ok,
        "a crawl whose feed cannot be written must fail: {stdout}"
    );
    assert!(
        stdout.contains("CHILD_ERROR") && stdout.contains("books.jsonl"),
        "the error names the feed: {stdout}"
    );
    let fetched_before = lab
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.path.contains("/book-"))
        .count();
    assert!(fetched_before < 400, "the crawl stopped early");

    // Space again: the same command resumes into a real file.
    std::fs::remove_file(&feed).unwrap();
    let (ok, stdout) = finish(spawn_child(&lab, &job, &feed, set)).await;
    assert!(ok, "the resumed crawl failed: {stdout}");
    let counts = feed_counts(&feed);
    assert_eq!(
        counts.len(),
        400,
        "every book whose item was lost to the full disk is fetched again"
    );
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_pauses_like_ctrl_c_and_the_same_command_resumes() {
    let lab = Lab::builder().books(1000).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (job, feed) = (dir.path().join("job"), dir.path().join("books.jsonl"));
    let child = spawn_child(&lab, &job, &feed, "");
    wait_for_lines(&feed, 200).await;
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let (ok, stdout) = finish(child).await;
    assert!(ok, "SIGTERM stops the crawl cleanly: {stdout}");
    assert!(
        stdout.contains("CHILD_STATS") && !stdout.contains("CHILD_STATS pending=0 "),
        "it stopped before the end: {stdout}"
    );
    assert!(feed_counts(&feed).len() < 1000);
    assert_eq!(
        requeued(&job),
        0,
        "a graceful stop leaves nothing in flight"
    );

    let (ok, stdout) = finish(spawn_child(&lab, &job, &feed, "")).await;
    assert!(ok, "{stdout}");
    let counts = feed_counts(&feed);
    assert_eq!(counts.len(), 1000, "every book after the resume");
    assert!(
        counts.values().all(|&n| n == 1),
        "a graceful pause duplicates nothing"
    );
    lab.shutdown().await;
}

/// A pipeline whose `close` never finishes, standing for a sink stuck on a dead database.
struct StuckOnClose(Arc<AtomicBool>);

impl Pipeline<books::Book> for StuckOnClose {
    async fn process(&self, item: books::Book) -> Result<Processed<books::Book>> {
        Ok(Processed::Keep(item))
    }

    async fn close(&self) -> Result<()> {
        self.0.store(true, Ordering::SeqCst);
        std::future::pending().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_stop_is_honoured_during_the_final_drain() {
    let lab = Lab::builder().books(100).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let closing = Arc::new(AtomicBool::new(false));
    let engine = Crawl::new(books::Books { start: lab.url() })
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .feed(dir.path().join("books.jsonl"))
        .unwrap()
        .pipeline(StuckOnClose(Arc::clone(&closing)))
        .progress(false)
        .build()
        .unwrap();
    let stop = engine.shutdown_handle();
    let run = tokio::spawn(engine.run());
    for _ in 0..1000 {
        if closing.load(Ordering::SeqCst) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        closing.load(Ordering::SeqCst),
        "the crawl reached its final drain"
    );
    stop.request();
    stop.request();
    let stats = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("a second stop request ends the drain")
        .unwrap()
        .unwrap();
    assert_eq!(stats.items_scraped, 100);
    lab.shutdown().await;
}
