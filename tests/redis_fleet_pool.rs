//! A limiter group paced as one slot across a fleet: the names of one site behind one
//! server-side limiter, crawled by several worker processes through Redis, share one pace
//! once the limiter has refused (docs/politeness.md, "Limiter groups").
//!
//! The lab serves every name from this process and sees every worker as one client (all
//! connect from 127.0.0.1), so its per-client limit is the one limiter behind all the
//! names; the names reach it through the `resolve` setting. The second test puts a real
//! nginx `limit_req` in front of the lab instead, and judges the crawl by nginx's own access
//! log. Each test starts its own `redis-server` on a free loopback port and runs the workers
//! as child processes (this test binary re-run on its ignored `child_worker` test).

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

#[path = "support/fleet.rs"]
mod fleet;

#[allow(dead_code)]
#[path = "../benches/support/real.rs"]
mod real;

use std::path::PathBuf;
use std::process::Child;

use crawler_lab::{Lab, RetryAfter, Scenario};
use fleet::{Redis, feeds, finish_all, union};

// The fleet tests share two cores; running them one at a time (with the other fleet
// tests too: each runs three or four worker processes) keeps their timing honest.
use crate::redis_fleet::SERIAL;

/// One worker of the fleet: crawls the lab's books into its own feed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper: run as a child process by the Redis fleet tests"]
async fn child_worker() {
    fleet::child_worker_main().await;
}

/// The limiter's rate (requests/s, per client: the whole fleet) and its burst: one, so two
/// names paced apart send closer than the interval and are refused.
const RATE: f64 = 10.0;
const BURST: u32 = 1;
/// Books per name: three names, about 30 s of crawling at the limiter's rate.
const BOOKS: usize = 100;
/// The site's names, all reaching the lab.
const NAMES: [&str; 3] = ["a.shop.test", "b.shop.test", "c.shop.test"];

/// The workers' feeds together hold every book under every name, each once (`lines`: the
/// workers' last lines, for the message).
fn assert_every_book_once(feeds: &[PathBuf], lines: &[String]) {
    let items = union(feeds);
    assert_eq!(
        items.len(),
        NAMES.len() * BOOKS,
        "every book under every name: {lines:?}"
    );
    assert!(items.values().all(|&n| n == 1), "no item twice");
}

/// One worker per feed, each starting on every name of the site at `port` (all resolved
/// to 127.0.0.1). Each name alone may go at the limiter's whole rate: only pacing the
/// names as one keeps their sum under it.
fn start_workers(lab: &Lab, redis: &Redis, job: &str, port: u16, feeds: &[PathBuf]) -> Vec<Child> {
    let resolve: Vec<String> = NAMES.iter().map(|n| format!("{n}:127.0.0.1")).collect();
    let starts: Vec<String> = NAMES
        .iter()
        .map(|n| format!("http://{n}:{port}/"))
        .collect();
    let settings = format!(
        "resolve={};start_rate=4;max_rate={RATE};concurrency_per_host=2",
        resolve.join(",")
    );
    feeds
        .iter()
        .map(|f| {
            fleet::worker_command(lab, redis, job, f, &settings)
                .env("CHILD_STARTS", starts.join(","))
                .spawn()
                .unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_of_one_site_behind_one_limiter_are_paced_as_one_slot_across_the_fleet() {
    let _serial = SERIAL.lock().await;
    let scenario = Scenario::rate_limited(RATE, BURST).retry_after(RetryAfter::Seconds(1));
    let lab = Lab::builder()
        .books(BOOKS)
        .scenario(scenario)
        .start()
        .await
        .unwrap();
    let redis = Redis::start();
    let dir = tempfile::tempdir().unwrap();
    let feeds = feeds(dir.path(), 3);
    let workers = start_workers(&lab, &redis, "pool", lab.addr().port(), &feeds);
    let lines = finish_all(workers).await;
    let report = lab.recorder().report();
    assert_eq!(report.clients.len(), 1, "one client to the limiter");
    let fleet = report.clients.values().next().unwrap();
    assert_every_book_once(&feeds, &lines);
    eprintln!(
        "pooled fleet: {} requests, {:.2} r/s of {RATE} allowed, {} refused, {} inside holds",
        fleet.requests, fleet.mean_rate, fleet.status_429, fleet.violations
    );
    assert!(
        fleet.status_429 >= 1,
        "the shared limiter never refused: nothing was tested"
    );
    assert_eq!(
        fleet.violations, 0,
        "requests inside holds across the names and the workers: {:?}",
        fleet.violation_samples
    );
    // The pool kept 5.2 to 8.6 r/s on a quiet machine; each name paced alone (no pool), the
    // workers had not finished after 120 s (under 3 r/s).
    assert!(
        fleet.mean_rate >= 0.4 * RATE,
        "{:.2} r/s for a limit of {RATE} ({} refused)",
        fleet.mean_rate,
        fleet.status_429
    );
    lab.shutdown().await;
}

/// nginx's `limit_req` for the real-server test: 10 r/s per client (the whole fleet), a burst
/// of one, refusals answered at once (`nodelay`) with `Retry-After: 1`.
const NGINX_LIMIT: real::NginxLimit = real::NginxLimit {
    rate: 10,
    burst: 1,
    nodelay: true,
    retry_after: Some(1),
};

/// The same fleet and names behind a real nginx (Debian's package): nginx's own access log
/// shows no request inside the wait any refusal announced (after the grace the lab gives
/// requests already in flight), and the fleet kept most of the rate nginx allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_of_one_site_behind_a_real_nginx_limit_are_paced_as_one_slot_across_the_fleet() {
    let _serial = SERIAL.lock().await;
    let lab = Lab::builder().books(BOOKS).start().await.unwrap();
    let nginx = real::RealServer::nginx(NGINX_LIMIT, &real::Content::Proxy(lab.addr()))
        .expect("nginx must be installed (apt-get install nginx)");
    let redis = Redis::start();
    let dir = tempfile::tempdir().unwrap();
    let feeds = feeds(dir.path(), 3);
    let started = std::time::Instant::now();
    let workers = start_workers(&lab, &redis, "pool-nginx", nginx.addr.port(), &feeds);
    let lines = finish_all(workers).await;
    let secs = started.elapsed().as_secs_f64();
    // Let the last log lines reach the file.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let log = nginx.log();
    assert_every_book_once(&feeds, &lines);
    let wait_ms = NGINX_LIMIT.retry_after.unwrap_or(0) * 1_000;
    let waits: Vec<(u64, u64)> = log
        .iter()
        .filter(|l| l.status == 429)
        .map(|l| {
            (
                l.at_ms + crawler_lab::DEFAULT_GRACE.as_millis() as u64,
                l.at_ms + wait_ms,
            )
        })
        .collect();
    let inside: Vec<u64> = log
        .iter()
        .filter(|l| {
            waits
                .iter()
                .any(|&(from, to)| l.at_ms > from && l.at_ms < to)
        })
        .map(|l| l.at_ms)
        .collect();
    let accepted = log.iter().filter(|l| l.status < 400).count();
    let rate = accepted as f64 / secs;
    eprintln!(
        "pooled fleet behind nginx: {} requests, {accepted} accepted in {secs:.1} s ({rate:.2} r/s of {RATE}), {} refused, {} inside waits",
        log.len(),
        waits.len(),
        inside.len()
    );
    assert!(
        !waits.is_empty(),
        "nginx never refused: nothing was tested ({} requests)",
        log.len()
    );
    assert!(
        inside.is_empty(),
        "requests inside an announced wait (arrival ms): {inside:?}; refusals (wait from, to): {waits:?}"
    );
    // The crawl's whole time counts here (the workers' start and end included). Each name
    // paced alone (no pool) was refused more and held longer: 4.7 to 4.8 r/s, 5 refusals,
    // where the pool kept 8.7 to 8.9 r/s with 2 (quiet machine).
    assert!(
        rate >= 0.55 * RATE,
        "{rate:.2} r/s accepted for a limit of {RATE} ({} refused)",
        waits.len()
    );
    lab.shutdown().await;
}
