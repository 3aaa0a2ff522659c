//! Pushes N distinct URLs (default 1,000,000; pass a count to change it) over 1,000 hosts,
//! with one duplicate offered for every nine new URLs, through `Frontier::with_store` over a
//! `SledStore`; then drains the frontier with `next` / `complete`. Prints enqueue and dequeue
//! throughput and the process's peak RSS.
//!
//! `cargo bench -p crawler-store --bench frontier -- 10000000`

use std::time::{Duration, Instant};

use crawler_core::{Feedback, Next, Request, Scheduler, Settings};
use crawler_sched::{Frontier, FrontierConfig};
use crawler_store::{SledStore, StoreOptions};

const HOSTS: u64 = 1_000;

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn url(i: u64) -> String {
    format!("http://host{}.test/page/{}", i % HOSTS, i / HOSTS)
}

fn main() {
    let n: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.replace('_', "").parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::Builder::new()
        .prefix("frontier-bench")
        .tempdir_in(std::env::var_os("BENCH_DIR").unwrap_or_else(|| std::env::temp_dir().into()))
        .expect("temp dir");
    let settings = Settings {
        throttle: crawler_core::ThrottleMode::Fixed,
        download_delay: Duration::ZERO,
        randomize_delay: false,
        concurrency_per_host: 1,
        // The queue is measured, not DNS: limiter groups would resolve each host name.
        limiter_groups: false,
        ..Settings::default()
    };
    let store = SledStore::open(dir.path(), StoreOptions::default()).expect("open store");
    let mut frontier =
        Frontier::with_store(FrontierConfig::from_settings(&settings, vec![]), store);
    let now = tokio::time::Instant::now();

    // Cheap deterministic pseudo-random source for picking duplicates.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let (mut offered, mut queued) = (0u64, 0u64);
    let start = Instant::now();
    for i in 0..n {
        let req = Request::get(url(i)).expect("url");
        offered += 1;
        if frontier.enqueue(req, now) == crawler_core::Admission::Queued {
            queued += 1;
        }
        if i % 9 == 8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let dup = Request::get(url(x % (i + 1))).expect("url");
            offered += 1;
            assert_ne!(frontier.enqueue(dup, now), crawler_core::Admission::Queued);
        }
        if (i + 1) % 1_000_000 == 0 {
            eprintln!(
                "  {:>10} distinct, {:>9.0} offers/s, peak RSS {:.0} MiB",
                i + 1,
                offered as f64 / start.elapsed().as_secs_f64(),
                peak_rss_mib()
            );
        }
    }
    frontier.store().flush().expect("flush");
    let enqueue_secs = start.elapsed().as_secs_f64();
    assert_eq!(queued, n);
    assert_eq!(frontier.queued() as u64, n);

    let start = Instant::now();
    let feedback = Feedback {
        sent: true,
        status: Some(200),
        ..Feedback::default()
    };
    let mut served = 0u64;
    // Hosts are paced by their throttles; the clock is virtual, so jump to the next ready
    // time instead of sleeping. Bounded: a round serves a request or moves the clock.
    let mut now = now;
    for _ in 0..=3 * n + 10 {
        match frontier.next(now) {
            Next::Ready(lease, _) => {
                frontier.complete(lease, &feedback, now);
                frontier.acknowledge(lease);
                served += 1;
            }
            Next::NotBefore(at) => {
                now = at;
                continue;
            }
            _ => break,
        }
        if served.is_multiple_of(1_000_000) {
            eprintln!(
                "  {:>10} served, {:>9.0} dequeues/s, peak RSS {:.0} MiB",
                served,
                served as f64 / start.elapsed().as_secs_f64(),
                peak_rss_mib()
            );
        }
    }
    let dequeue_secs = start.elapsed().as_secs_f64();
    assert_eq!(served, n, "every queued URL is served once");
    if let Some(e) = frontier.take_error() {
        panic!("store error: {e}");
    }
    println!("distinct URLs        {n}");
    println!("offers (incl. dups)  {offered}");
    println!(
        "enqueue with dedup   {:.1} s, {:.0} offers/s, {:.0} admitted/s",
        enqueue_secs,
        offered as f64 / enqueue_secs,
        n as f64 / enqueue_secs
    );
    println!(
        "dequeue + complete   {:.1} s, {:.0} /s",
        dequeue_secs,
        n as f64 / dequeue_secs
    );
    println!("peak RSS             {:.0} MiB", peak_rss_mib());
}
