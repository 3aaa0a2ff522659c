//! Persistent frontier: a crawl with a job directory survives `kill -9` and Ctrl-C, and a
//! resumed crawl finishes the job with every item in the feed.
//!
//! The crawler runs in a child process (this test binary re-run on the ignored
//! `child_crawl` test), so it can be killed while the lab keeps serving from this process.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crawler::prelude::*;
use crawler_lab::Lab;

/// The crawl the child runs: the lab's books into a JSON Lines feed, with a job directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper: run as a child process by the resume tests"]
async fn child_crawl() {
    let url = std::env::var("CHILD_LAB_URL").expect("CHILD_LAB_URL");
    let job = std::env::var("CHILD_JOB_DIR").expect("CHILD_JOB_DIR");
    let feed = std::env::var("CHILD_FEED").expect("CHILD_FEED");
    let stats = Crawl::new(books::Books { start: url })
        .set("throttle", "fixed")
        .set("download_delay", "3ms")
        .set("randomize_delay", "false")
        .set("concurrency_per_host", "2")
        .set("job_dir", job)
        .feed(feed)
        .unwrap()
        .progress(false)
        .run()
        .await
        .unwrap();
    println!(
        "CHILD_STATS pending={} items={}",
        stats.pending, stats.items_scraped
    );
}

fn spawn_child(lab: &Lab, job: &Path, feed: &Path) -> Child {
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
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Requests leased but not durably acknowledged when the last run stopped: opening the job
/// returns them to their queues (and reports how many).
fn requeued(job: &Path) -> usize {
    let store =
        crawler::store::SledStore::open(job, crawler::store::StoreOptions::default()).unwrap();
    store.requeued_on_open()
}

/// Titles per book URL in a JSON Lines feed no process is writing: every line must parse
/// (a line torn by a kill is cut off when the crawl resumes, never left in the file).
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

/// Complete lines in a feed a child is still writing (its last line may be half written).
fn lines_so_far(feed: &Path) -> usize {
    std::fs::read(feed)
        .map(|b| b.iter().filter(|&&c| c == b'\n').count())
        .unwrap_or(0)
}

async fn wait_for_items(feed: &Path, at_least: usize) {
    for _ in 0..600 {
        // Lines, not distinct books: a resumed run repeats a few, which only waits less.
        if lines_so_far(feed) >= at_least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the child made no progress");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_nine_at_random_points_loses_nothing() {
    let lab = Lab::builder().books(3000).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    let feed = dir.path().join("books.jsonl");
    let mut requeued_at_kills = 0;
    // Kill after a pseudo-random amount of progress each time (seeded for reproducibility).
    let mut seed = 0x9e37_79b9_u32;
    for round in 0..3 {
        let mut child = spawn_child(&lab, &job, &feed);
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        let target = 300 * (round + 1) + (seed % 400) as usize;
        wait_for_items(&feed, target).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        requeued_at_kills += requeued(&job);
    }
    let child = spawn_child(&lab, &job, &feed);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the resumed crawl failed: {stdout}");
    assert!(stdout.contains("CHILD_STATS pending=0"), "{stdout}");

    let counts = feed_counts(&feed);
    assert_eq!(counts.len(), 3000, "every book is in the feed");
    // A kill repeats the requests in flight (2 per host here) plus those finished in the
    // last 100 ms at most (up to 50 ms waiting for the feed's group commit, then up to 50 ms
    // in sled's write buffer): at this pace (about 300 pages/s) some 15 to 30. Allow 32 per
    // kill.
    let duplicates: usize = counts.values().map(|n| n - 1).sum();
    let bound = 3 * 32;
    assert!(
        duplicates <= bound,
        "{duplicates} duplicate items after 3 kills ({requeued_at_kills} leases requeued); bound {bound}"
    );
    let fetched: std::collections::HashSet<String> = lab
        .recorder()
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/book-"))
        .map(|r| r.path)
        .collect();
    assert_eq!(fetched.len(), 3000, "every book page was fetched");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_pauses_and_the_same_command_resumes() {
    let lab = Lab::builder().books(1000).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    let feed = dir.path().join("books.jsonl");
    let child = spawn_child(&lab, &job, &feed);
    wait_for_items(&feed, 200).await;
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "a paused crawl exits cleanly: {stdout}"
    );
    assert!(
        !stdout.contains("CHILD_STATS pending=0 "),
        "it stopped before the end: {stdout}"
    );
    let paused = feed_counts(&feed);
    assert!(paused.len() < 1000);
    assert_eq!(
        requeued(&job),
        0,
        "a graceful stop leaves nothing in flight"
    );

    let child = spawn_child(&lab, &job, &feed);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(out.status.success());
    let counts = feed_counts(&feed);
    assert_eq!(counts.len(), 1000, "every book after the resume");
    assert!(
        counts.values().all(|&n| n == 1),
        "a graceful pause duplicates nothing"
    );
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_directory_refuses_another_spider_and_a_second_process() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    let lab = Lab::builder().books(100).start().await.unwrap();
    let first = Crawl::new(books::Books { start: lab.url() })
        .set("throttle", "fixed")
        .set("job_dir", job.to_string_lossy().to_string())
        .progress(false)
        .build()
        .unwrap();
    // While the first engine holds the directory, a second crawl cannot open it.
    let e = Crawl::new(books::Books { start: lab.url() })
        .set("job_dir", job.to_string_lossy().to_string())
        .progress(false)
        .build()
        .err()
        .unwrap();
    assert!(e.to_string().contains("in use"), "{e}");
    drop(first);

    struct Other;
    impl Spider for Other {
        type Item = ();
        fn name(&self) -> &str {
            "other"
        }
        async fn parse(&self, _: Response, _: &mut Output<()>) -> Result<()> {
            Ok(())
        }
    }
    let e = Crawl::new(Other)
        .set("job_dir", job.to_string_lossy().to_string())
        .progress(false)
        .build()
        .err()
        .unwrap();
    let msg = e.to_string();
    assert!(msg.contains("books") && msg.contains("other"), "{msg}");
    lab.shutdown().await;
}

#[tokio::test]
async fn a_running_hold_and_a_learned_rate_survive_a_restart() {
    use crawler::core::{Feedback, Next, Scheduler, Settings};
    use crawler::sched::{Frontier, FrontierConfig, QueueStore};
    use crawler::store::{SledStore, StoreOptions};

    let dir = tempfile::tempdir().unwrap();
    let open = || {
        let store =
            SledStore::open_job(dir.path(), "books", "v1", StoreOptions::default()).unwrap();
        let settings = Settings {
            start_rate: 8.0,
            ..Default::default()
        };
        Frontier::with_store(
            FrontierConfig::from_settings(&settings, vec![]),
            Box::new(store) as Box<dyn QueueStore>,
        )
    };
    let now = tokio::time::Instant::now();
    let mut f = open();
    for i in 0..3 {
        f.enqueue(Request::get(format!("http://a.test/{i}")).unwrap(), now);
    }
    let Next::Ready(lease, _) = f.next(now) else {
        panic!("nothing ready")
    };
    let refused = Feedback {
        sent: true,
        status: Some(429),
        retry_after: Some(Duration::from_secs(120)),
        ..Default::default()
    };
    f.complete(lease, &refused, now);
    f.acknowledge(lease);
    f.checkpoint(&crawler::core::Stats::default());
    drop(f);

    // A new process: the hold is still running, and the rate stays at what the refusal taught.
    let mut f = open();
    let now = tokio::time::Instant::now();
    match f.next(now) {
        Next::NotBefore(at) => assert!(at - now > Duration::from_secs(100), "{:?}", at - now),
        other => panic!("the hold from the last run was forgotten: {other:?}"),
    }
    let rate = f.host_stats()[0].rate.unwrap();
    // One refusal episode: at most `decrease` (0.8) of the refused pace.
    assert!(
        rate <= 8.0 * 0.8 + 1e-6,
        "the learned rate was forgotten: {rate}"
    );
}
