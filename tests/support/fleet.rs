//! What the Redis fleet tests share: a `redis-server` of their own on a free loopback port,
//! worker processes (the test binary re-run on its ignored `child_worker` test), and readers
//! of the workers' feeds and of the lab's record.
//!
//! A test binary using this declares `mod books` (the example spider) and a
//! `child_worker` test that calls [`child_worker_main`].

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crawler::prelude::*;
use crawler_lab::Lab;

use super::books;

/// The books of several catalogues (several labs: several hosts).
struct Catalogues(Vec<String>);

impl Spider for Catalogues {
    type Item = books::Book;
    fn name(&self) -> &str {
        "books"
    }
    fn start_urls(&self) -> Vec<String> {
        self.0.clone()
    }
    async fn parse(&self, page: Response, out: &mut Output<books::Book>) -> Result<()> {
        // A counter of the spider's own, for the fleet's merged stats.
        out.stats().inc("fleet/pages");
        books::Books {
            start: String::new(),
        }
        .parse(page, out)
        .await
    }
}

/// The body of a worker process: crawls the lab's books into its own feed, then prints
/// `CHILD_STATS ...` on success, or `CHILD_ERROR message` and exits with status 1.
pub(super) async fn child_worker_main() {
    crawler::init_logging();
    let env = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k}"));
    // A worker may start on another name of the lab (`CHILD_START`), or on several labs
    // (`CHILD_STARTS`, comma-separated).
    let starts: Vec<String> = match std::env::var("CHILD_STARTS") {
        Ok(list) => list.split(',').map(str::to_owned).collect(),
        Err(_) => vec![std::env::var("CHILD_START").unwrap_or_else(|_| env("CHILD_LAB_URL"))],
    };
    let mut crawl = Crawl::new(Catalogues(starts))
        .set("redis_url", env("CHILD_REDIS_URL"))
        .set("job_name", env("CHILD_JOB"))
        .feed(env("CHILD_FEED"))
        .unwrap()
        .progress(false);
    // Extra settings as "key=value;key=value".
    for kv in env("CHILD_SETTINGS").split(';').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap();
        crawl = crawl.set(k, v);
    }
    match crawl.run().await {
        Ok(stats) => println!(
            "CHILD_STATS fetched={} spider_pages={} items={} pending={} round_trips={} commands={} {} {} {}",
            stats.fetched,
            stats.spider.get("fleet/pages").copied().unwrap_or(0),
            stats.items_scraped,
            stats.pending,
            crawler::store::redis_round_trips(),
            crawler::store::redis_commands(),
            crawler::store::redis_round_trips_by_purpose()
                .iter()
                .map(|(what, n)| format!("trips_{}={n}", what.replace(' ', "_")))
                .collect::<Vec<_>>()
                .join(" "),
            crawler::store::redis_lease_answers()
                .iter()
                .map(|(what, n)| format!("lease_{}={n}", what.replace(' ', "_")))
                .collect::<Vec<_>>()
                .join(" "),
            {
                let (leases, sent, received) = crawler::store::redis_lease_bytes();
                format!("leases={leases} lease_sent={sent} lease_received={received}")
            }
        ),
        Err(e) => {
            println!("CHILD_ERROR {e}");
            std::process::exit(1);
        }
    }
}

// The one redis-server helper of the workspace's tests.
#[path = "../../crawler-store/tests/support/redis.rs"]
mod redis_server;
#[allow(unused_imports)] // not every test binary that includes this needs both
pub(crate) use redis_server::{Redis, free_port};

/// Send a signal (`INT`, `TERM`, `KILL`) to a process.
pub(super) fn signal(pid: u32, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}");
}

/// The worker command: this test binary on its `child_worker` test.
pub(super) fn worker_command(
    lab: &Lab,
    redis: &Redis,
    job: &str,
    feed: &Path,
    settings: &str,
) -> Command {
    worker_command_on(lab, &redis.url(), job, feed, settings)
}

/// The worker command, with Redis at `redis_url` (a server, or a cluster).
pub(super) fn worker_command_on(
    lab: &Lab,
    redis_url: &str,
    job: &str,
    feed: &Path,
    settings: &str,
) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        // The test lives in the module that includes this file.
        &crate::test_path(module_path!().trim_end_matches("::fleet"), "child_worker"),
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("CHILD_LAB_URL", lab.url())
    .env("CHILD_REDIS_URL", redis_url)
    .env("CHILD_JOB", job)
    .env("CHILD_FEED", feed)
    .env("CHILD_SETTINGS", settings)
    .env(
        "RUST_LOG",
        std::env::var("FLEET_LOG").unwrap_or_else(|_| "warn".into()),
    )
    .stdout(Stdio::piped())
    .stderr(if std::env::var_os("FLEET_DEBUG").is_some() {
        Stdio::inherit()
    } else {
        Stdio::null()
    });
    cmd
}

pub(super) fn spawn_worker(
    lab: &Lab,
    redis: &Redis,
    job: &str,
    feed: &Path,
    settings: &str,
) -> Child {
    worker_command(lab, redis, job, feed, settings)
        .spawn()
        .unwrap()
}

/// How a worker ended: whether it succeeded, and its stdout.
pub(super) struct Ended {
    pub success: bool,
    pub stdout: String,
}

impl Ended {
    /// The `CHILD_STATS ...` line of a worker that succeeded.
    pub(super) fn stats(&self) -> Option<String> {
        self.stdout
            .lines()
            .find_map(|l| l.find("CHILD_STATS").map(|i| l[i..].to_owned()))
    }

    /// The error a worker that failed printed.
    pub(super) fn error(&self) -> Option<String> {
        self.stdout
            .lines()
            .find_map(|l| l.find("CHILD_ERROR").map(|i| l[i..].to_owned()))
    }
}

/// Wait for a worker to end (bounded).
pub(super) async fn ended(child: Child) -> Ended {
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    .expect("a worker did not finish within 120 s")
    .unwrap()
    .unwrap();
    Ended {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// Wait for a worker to finish successfully (bounded), returning its CHILD_STATS line.
pub(super) async fn finish(child: Child) -> String {
    let end = ended(child).await;
    assert!(end.success, "a worker failed: {}", end.stdout);
    end.stats()
        .unwrap_or_else(|| panic!("no stats line in: {}", end.stdout))
}

/// Wait for every worker to finish successfully, in order, returning their CHILD_STATS
/// lines.
pub(super) async fn finish_all(workers: Vec<Child>) -> Vec<String> {
    let mut lines = Vec::with_capacity(workers.len());
    for w in workers {
        lines.push(finish(w).await);
    }
    lines
}

pub(super) fn field(stats: &str, name: &str) -> u64 {
    stats
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {stats}"))
}

/// Round trips per page by purpose, summed over the workers' stats lines.
pub(super) fn trips_by_purpose(lines: &[String]) -> String {
    let pages: u64 = lines.iter().map(|l| field(l, "fetched")).sum();
    ["lease", "fleet_read", "host_read", "write", "other"]
        .iter()
        .map(|p| {
            let n: u64 = lines.iter().map(|l| field(l, &format!("trips_{p}"))).sum();
            format!("{p} {:.2}", n as f64 / pages.max(1) as f64)
        })
        .collect::<Vec<_>>()
        .join(", ")
        + &lease_costs(lines)
}

/// What the leases cost, summed over the workers' stats lines: answers by kind per page, and
/// the politeness and lease bytes each lease sent and received (the request it hands out
/// aside).
fn lease_costs(lines: &[String]) -> String {
    let sum = |name: &str| -> u64 { lines.iter().map(|l| field(l, name)).sum() };
    let pages = sum("fetched").max(1) as f64;
    let leases = sum("leases").max(1) as f64;
    format!(
        "; lease answers per page: granted {:.2}, not yet {:.2}, full {:.2}, empty {:.2}; \
         bytes per lease: {:.0} sent, {:.0} received",
        sum("lease_granted") as f64 / pages,
        sum("lease_not_yet") as f64 / pages,
        sum("lease_full") as f64 / pages,
        sum("lease_empty") as f64 / pages,
        sum("lease_sent") as f64 / leases,
        sum("lease_received") as f64 / leases,
    )
}

/// Items per book URL across every worker's feed.
pub(super) fn union(feeds: &[PathBuf]) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for feed in feeds {
        let text = std::fs::read_to_string(feed).unwrap_or_default();
        for line in text.lines() {
            // A line cut by a kill mid-write is not an item.
            if let Ok(book) = serde_json::from_str::<books::Book>(line) {
                *counts.entry(book.url).or_insert(0) += 1;
            }
        }
    }
    counts
}

/// The complete (newline-terminated) lines of a feed.
pub(super) fn whole_lines(feed: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(feed).unwrap_or_default();
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_owned).collect();
    if lines.last().is_some_and(|l| !l.ends_with('\n')) {
        lines.pop();
    }
    lines
}

pub(super) fn feeds(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| dir.join(format!("worker-{i}.jsonl")))
        .collect()
}

pub(super) async fn wait_for_items(feed: &Path, at_least: usize) {
    for _ in 0..1500 {
        if union(&[feed.to_owned()]).len() >= at_least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the worker made no progress");
}

/// Wait until the fleet as a whole has written `at_least` items (which worker gets the
/// fleet-wide slots is not specified, so one worker may have written none yet).
pub(super) async fn wait_for_fleet_items(feeds: &[PathBuf], at_least: usize) {
    for _ in 0..1500 {
        if union(feeds).len() >= at_least {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the fleet made no progress");
}

/// Successful fetches per path, from the lab's side.
pub(super) fn fetches(lab: &Lab) -> HashMap<String, usize> {
    let mut by_path = HashMap::new();
    for r in lab.recorder().requests() {
        if r.status == 200 {
            *by_path.entry(r.path).or_insert(0) += 1;
        }
    }
    by_path
}

/// A counter of the job's shards' `meta` hashes, summed.
pub(super) fn redis_meta(redis: &Redis, job: &str, field: &str) -> u64 {
    redis.shard_counter(job, field)
}

/// The lines a child writes to stderr, as they come (the child's stderr must be piped).
pub(super) fn stderr_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().expect("stderr piped");
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Wait (bounded) for a line containing `needle`.
pub(super) fn wait_for_line(lines: &mpsc::Receiver<String>, needle: &str, within: Duration) {
    let until = Instant::now() + within;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    panic!("no log line with {needle:?} within {within:?}");
}
