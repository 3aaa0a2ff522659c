//! Coordination cost of a Redis-shared crawl: pages/s of 1 and of 4 worker processes on an
//! open lab with many hosts, and Redis round trips per fetched page.
//!
//! ```text
//! cargo bench --bench redis                    # 50 hosts x 100 books
//! REDIS_BENCH_HOSTS=20 REDIS_BENCH_BOOKS=50 cargo bench --bench redis
//! ```
//!
//! Needs `redis-server` on the PATH; starts its own on a free loopback port. Workers are
//! this binary re-run as child processes. Prints a markdown table.

#![allow(clippy::unwrap_used)]

// The one redis-server helper of the workspace's tests.
#[path = "../crawler-store/tests/support/redis.rs"]
mod redis_server;
use redis_server::Redis;

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crawler::prelude::*;
use crawler_lab::Lab;

/// Crawls every lab host from its front page.
struct Many(Vec<String>);

impl Spider for Many {
    type Item = books::Book;
    fn name(&self) -> &str {
        "redis-bench"
    }
    fn start_urls(&self) -> Vec<String> {
        self.0.clone()
    }
    async fn parse(&self, page: Response, out: &mut Output<books::Book>) -> Result<()> {
        books::Books {
            start: String::new(),
        }
        .parse(page, out)
        .await
    }
}

fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if std::env::var_os("REDIS_BENCH_CHILD").is_some() {
        child();
        return;
    }
    let hosts = env_or("REDIS_BENCH_HOSTS", 50);
    let books = env_or("REDIS_BENCH_BOOKS", 100);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let labs: Vec<Lab> = rt.block_on(async {
        let mut labs = Vec::new();
        for _ in 0..hosts {
            labs.push(Lab::builder().books(books).start().await.unwrap());
        }
        labs
    });
    let urls: Vec<String> = labs.iter().map(Lab::url).collect();
    let redis = Redis::start();
    println!("Redis-shared crawl, open lab: {hosts} hosts x {books} books, workers as processes\n");
    println!("| workers | pages | seconds | pages/s | Redis round trips | round trips/page |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for (run, workers) in [1usize, 4].into_iter().enumerate() {
        for lab in &labs {
            lab.reset();
        }
        let job = format!("bench-{run}");
        let started = Instant::now();
        let children: Vec<Child> = (0..workers).map(|_| spawn(&redis, &job, &urls)).collect();
        let mut pages = 0u64;
        let mut trips = 0u64;
        for c in children {
            let out = c.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "a worker failed: {text}");
            let line = text.lines().find(|l| l.starts_with("BENCH")).unwrap();
            let field = |name: &str| -> u64 {
                line.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                    .and_then(|v| v.parse().ok())
                    .unwrap()
            };
            pages += field("pages");
            trips += field("trips");
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "| {workers} | {pages} | {secs:.1} | {:.0} | {trips} | {:.2} |",
            pages as f64 / secs,
            trips as f64 / pages.max(1) as f64
        );
    }
    drop(redis);
    rt.block_on(async {
        for lab in labs {
            lab.shutdown().await;
        }
    });
}

fn spawn(redis: &Redis, job: &str, urls: &[String]) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .env("REDIS_BENCH_CHILD", "1")
        .env(
            "REDIS_BENCH_URL",
            format!("redis://127.0.0.1:{}/", redis.port),
        )
        .env("REDIS_BENCH_JOB", job)
        .env("REDIS_BENCH_STARTS", urls.join(" "))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn child() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let starts: Vec<String> = std::env::var("REDIS_BENCH_STARTS")
        .unwrap()
        .split(' ')
        .map(str::to_owned)
        .collect();
    let stats = rt
        .block_on(
            Crawl::new(Many(starts))
                .set("redis_url", std::env::var("REDIS_BENCH_URL").unwrap())
                .set("job_name", std::env::var("REDIS_BENCH_JOB").unwrap())
                // Open hosts: pacing out of the way, so coordination is what is measured.
                .set("throttle", "fixed")
                .set("download_delay", "0s")
                .set("max_rate", "1000")
                .set("concurrency", "32")
                .set("concurrency_per_host", "4")
                .progress(false)
                .run(),
        )
        .unwrap();
    println!(
        "BENCH pages={} trips={}",
        stats.fetched,
        crawler::store::redis_round_trips()
    );
}
