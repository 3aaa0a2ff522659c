//! A broad crawl's memory follows the hosts it is working on, not every host it touched:
//! one page on each of tens of thousands of distinct host names, and RSS stays flat once
//! those hosts are done. The crawl runs in a child process (this test binary, re-run on the
//! child test alone), so the RSS it samples is this crawl's and not that of the tests
//! running beside it in the binary.
//!
//! No DNS is involved: the lab is the crawl's HTTP proxy, so every name reaches it.
//! `cargo bench --bench crawl -- hosts 100000 64` runs the same crawl in release, with
//! robots.txt too (figures in BENCHMARKS.md, "Many hosts: memory once hosts go idle").

use std::process::Command;
use std::time::Instant;

#[path = "../benches/support/many_hosts.rs"]
mod many_hosts;

use crawler::prelude::*;
use crawler_lab::Lab;
use many_hosts::{ManyHosts, rss_mib};

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// The parent: runs [`crawl_many_hosts`] in a process of its own and passes when it does.
#[cfg(target_os = "linux")]
#[test]
fn memory_stays_flat_once_hosts_go_idle() {
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            &crate::test_path(module_path!(), "crawl_many_hosts"),
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .output()
        .expect("the child test runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the child crawl failed:\n{stdout}\n{stderr}"
    );
}

/// The child: the crawl and its samples.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper: run in a child process by memory_stays_flat_once_hosts_go_idle"]
async fn crawl_many_hosts() {
    // Enough hosts that a leak would show: 20,000 idle after the first third, each of
    // which kept ~21 KiB and a descriptor before idle hosts were dropped (over 400 MiB and
    // 20,000 descriptors against the bounds below). The release benchmark runs 100,000.
    const HOSTS: usize = 30_000;
    // The lab keeps no per-request record here, so its memory does not grow with the crawl.
    let lab = Lab::builder()
        .books(100)
        .record_limit(0)
        .start()
        .await
        .expect("lab starts");
    let engine = Crawl::new(ManyHosts { hosts: HOSTS })
        .set("concurrency", "64")
        .set("proxy", lab.url())
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("obey_robots", "false")
        .set("log_level", "warn")
        .progress(false)
        .build()
        .expect("engine");
    let mut progress = engine.progress();
    let run = tokio::spawn(engine.run());
    let started = Instant::now();
    // (hosts done, RSS MiB, open descriptors) at each tenth of the crawl.
    let mut samples: Vec<(u64, f64, usize)> = Vec::new();
    let step = (HOSTS / 10) as u64;
    let mut next = step;
    while progress.changed().await.is_ok() {
        let p = progress.borrow_and_update().clone();
        let done = p.stats.fetched + p.stats.failed.values().sum::<u64>();
        if done >= next {
            samples.push((done, rss_mib(), open_fds()));
            next += step;
        }
        if p.finished {
            break;
        }
        assert!(
            started.elapsed().as_secs() < 600,
            "the crawl took too long: {samples:?}"
        );
    }
    let stats = run.await.expect("join").expect("crawl");
    assert_eq!(stats.fetched, HOSTS as u64, "{:?}", stats.failed);
    println!("{samples:?}");
    // From a third of the way on, every host done is idle for good: memory and descriptors
    // must not grow with them. Before hosts were dropped and connections closed, each idle
    // host kept ~21 KiB and a descriptor (100,000 hosts: out of descriptors at 20,000).
    let at = |frac: u64| {
        samples
            .iter()
            .find(|s| s.0 >= HOSTS as u64 * frac / 10)
            .copied()
            .expect("sampled")
    };
    let (third, last) = (at(3), at(10));
    assert!(
        last.1 - third.1 < 40.0,
        "RSS grew by {:.1} MiB over {} idle hosts: {samples:?}",
        last.1 - third.1,
        last.0 - third.0
    );
    assert!(
        samples.iter().all(|s| s.2 < 2_000),
        "descriptors pile up: {samples:?}"
    );
    lab.shutdown().await;
}
