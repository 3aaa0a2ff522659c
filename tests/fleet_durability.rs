//! Nothing lost in a fleet, however Redis is configured: workers killed and started again
//! append to their feeds, a Redis that forgets the job (restarted without persistence) stops
//! the fleet with an error naming the lost state instead of a partial crawl that looks
//! complete, and a stop request during a Redis outage is obeyed within seconds.
//!
//! Each test starts its own `redis-server` (no persistence) on a free loopback port and the
//! lab on another; the workers are this test binary re-run on its ignored `child_worker`.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;
#[path = "support/fleet.rs"]
mod fleet;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crawler_lab::Lab;
use fleet::{
    Ended, Redis, ended, feeds, signal, spawn_worker, stderr_lines, union, wait_for_items,
    wait_for_line, whole_lines, worker_command,
};

/// The tests share two cores; running them one at a time keeps their timing honest.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One worker of the fleet: crawls the lab's books into its own feed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper: run as a child process by the fleet durability tests"]
async fn child_worker() {
    fleet::child_worker_main().await;
}

/// Wait (bounded) until a feed has at least `n` whole lines.
async fn wait_for_lines(feed: &Path, n: usize) {
    for _ in 0..1500 {
        if whole_lines(feed).len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{} never reached {n} lines", feed.display());
}

/// Kill a worker with SIGKILL (no goodbye: its leases stay open, a line may be cut).
fn kill_hard(child: &mut Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Every line of every feed is a whole JSON record.
fn assert_every_line_parses(feeds: &[std::path::PathBuf]) {
    for feed in feeds {
        let text = std::fs::read_to_string(feed).unwrap_or_default();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "{} ends in a torn line",
            feed.display()
        );
        for (i, line) in text.lines().enumerate() {
            assert!(
                serde_json::from_str::<serde_json::Value>(line).is_ok(),
                "{} line {} is not JSON: {line:?}",
                feed.display(),
                i + 1
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_worker_appends_to_its_feed() {
    let _serial = SERIAL.lock().await;
    let redis = Redis::start();
    const BOOKS: usize = 150;
    let lab = Lab::builder().books(BOOKS).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let feed = dir.path().join("worker.jsonl");
    let settings = "throttle=fixed;download_delay=20ms;concurrency_per_host=2;lease_timeout=1s";
    let mut worker = spawn_worker(&lab, &redis, "append", &feed, settings);
    wait_for_items(&feed, 20).await;
    kill_hard(&mut worker);
    let first_run = whole_lines(&feed);
    assert!(first_run.len() >= 20);

    // The same command again: the fleet already acknowledged the pages behind those items,
    // so they must stay in the feed.
    let worker = spawn_worker(&lab, &redis, "append", &feed, settings);
    let end = ended(worker).await;
    assert!(end.success, "the worker failed: {}", end.stdout);
    let all = whole_lines(&feed);
    assert_eq!(
        all[..first_run.len()],
        first_run[..],
        "the restarted worker truncated its feed"
    );
    assert_every_line_parses(std::slice::from_ref(&feed));
    assert_eq!(
        union(std::slice::from_ref(&feed)).len(),
        BOOKS,
        "every book is in the feed"
    );
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_and_a_forgetful_redis_never_end_in_a_silent_partial_crawl() {
    let _serial = SERIAL.lock().await;
    // No persistence at all: a restart forgets the job.
    let mut redis = Redis::start();
    const BOOKS: usize = 400;
    let lab = Lab::builder().books(BOOKS).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let feeds = feeds(dir.path(), 3);
    // About 25 pages/s for the whole fleet, so the crawl outlasts the kills below.
    let settings = "throttle=fixed;download_delay=40ms;concurrency_per_host=3;lease_timeout=2s;\
                    redis_retry_for=20s";
    let job = "forgetful";
    let mut workers: Vec<Child> = feeds
        .iter()
        .map(|f| spawn_worker(&lab, &redis, job, f, settings))
        .collect();

    // Worker 0 is killed three times and started again with the same feed; each time the
    // lines its earlier runs wrote stay.
    for round in 0..3 {
        let had = whole_lines(&feeds[0]).len();
        wait_for_lines(&feeds[0], had + 5).await;
        kill_hard(&mut workers[0]);
        let kept = whole_lines(&feeds[0]);
        workers[0] = spawn_worker(&lab, &redis, job, &feeds[0], settings);
        wait_for_lines(&feeds[0], kept.len() + 1).await;
        assert_eq!(
            whole_lines(&feeds[0])[..kept.len()],
            kept[..],
            "round {round}: the restarted worker truncated its feed"
        );
    }

    // Mid-crawl, Redis restarts without persistence: the queue, seen set and leases vanish.
    let got = union(&feeds).len();
    assert!(
        got < BOOKS,
        "the crawl ended before Redis restarted ({got} books)"
    );
    redis.restart(Duration::from_millis(300));

    let mut ends: Vec<Ended> = Vec::new();
    for w in workers {
        ends.push(ended(w).await);
    }
    assert_every_line_parses(&feeds);
    let books = union(&feeds).len();
    println!(
        "{books} of {BOOKS} books in the feeds when Redis forgot the job; exits: {:?}",
        ends.iter().map(|e| e.success).collect::<Vec<_>>()
    );
    for (i, end) in ends.iter().enumerate() {
        assert!(
            !end.success || books == BOOKS,
            "worker {i} exited 0 with {books} of {BOOKS} books in the feeds: {}",
            end.stdout
        );
    }
    if books < BOOKS {
        assert!(
            ends.iter()
                .any(|e| !e.success && e.error().is_some_and(|m| m.contains("lost the state"))),
            "pages are missing and no worker said Redis lost the job: {:?}",
            ends.iter().map(|e| &e.stdout).collect::<Vec<_>>()
        );
    }
    // Every worker running when Redis forgot noticed it: none went on as if the job were
    // whole (a fresh Redis reads as "nothing queued, nothing leased").
    for (i, end) in ends.iter().enumerate() {
        let error = end.error().unwrap_or_default();
        assert!(
            !end.success && error.contains("lost the state of job \"forgetful\""),
            "worker {i} did not stop on the lost job: {}",
            end.stdout
        );
    }

    // Run again, the job starts over under a new epoch; the feed keeps the earlier runs'
    // items, and a success now means every book is there.
    let kept = whole_lines(&feeds[0]);
    let again = spawn_worker(
        &lab,
        &redis,
        job,
        &feeds[0],
        "throttle=fixed;download_delay=5ms;concurrency_per_host=4",
    );
    let end = ended(again).await;
    assert!(end.success, "the job run again failed: {}", end.stdout);
    assert_eq!(whole_lines(&feeds[0])[..kept.len()], kept[..]);
    assert_every_line_parses(&feeds);
    assert_eq!(union(&feeds).len(), BOOKS, "every book after the run again");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_request_during_a_redis_outage_is_obeyed_within_seconds() {
    let _serial = SERIAL.lock().await;
    let mut redis = Redis::start();
    let lab = Lab::builder().books(2000).start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let feeds = feeds(dir.path(), 2);
    // Workers would retry for a minute before giving up on their own.
    let settings = "throttle=fixed;download_delay=20ms;concurrency_per_host=2;redis_retry_for=60s";
    let mut workers: Vec<Child> = feeds
        .iter()
        .map(|f| {
            worker_command(&lab, &redis, "outage", f, settings)
                .env("RUST_LOG", "warn")
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let logs: Vec<_> = workers.iter_mut().map(stderr_lines).collect();
    for f in &feeds {
        wait_for_items(f, 5).await;
    }
    redis.kill();
    for log in &logs {
        wait_for_line(log, "Redis unreachable", Duration::from_secs(30));
    }

    // Ctrl-C to one, SIGTERM (how service managers stop) to the other.
    for (worker, sig) in workers.iter_mut().zip(["INT", "TERM"]) {
        let asked = Instant::now();
        signal(worker.id(), sig);
        let mut status = None;
        while asked.elapsed() < Duration::from_secs(20) {
            if let Some(s) = worker.try_wait().unwrap() {
                status = Some(s);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = asked.elapsed();
        println!("SIG{sig} during the Redis outage stopped the worker in {took:?}");
        if status.is_none() {
            kill_hard(worker);
        }
        assert!(
            took < Duration::from_secs(5),
            "SIG{sig} during the outage took {took:?} to stop the worker"
        );
        // Stopped without the fleet's word that its work was saved: not a success.
        assert!(status.is_some_and(|s| !s.success()), "SIG{sig}: {status:?}");
    }
    for w in workers {
        let end = ended(w).await;
        let error = end.error().unwrap_or_default();
        assert!(
            error.contains("stopped on request while Redis"),
            "{}",
            end.stdout
        );
    }
    lab.shutdown().await;
}
