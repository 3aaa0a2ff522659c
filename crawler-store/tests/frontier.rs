//! The scheduler of crawler-sched over a SledStore, end to end.

// Helpers outside #[test] functions panic on failure too; that is what a test helper is for.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::Duration;

use crawler_core::{
    Admission, Feedback, FilterReason, Next, Request, Scheduler, Settings, ThrottleMode,
};
use crawler_sched::{Frontier, FrontierConfig};
use crawler_store::{SledStore, StoreOptions};
use tokio::time::Instant;

fn config() -> FrontierConfig {
    let settings = Settings {
        throttle: ThrottleMode::Fixed,
        download_delay: Duration::ZERO,
        randomize_delay: false,
        concurrency_per_host: 2,
        ..Settings::default()
    };
    FrontierConfig::from_settings(&settings, vec![])
}

fn options() -> StoreOptions {
    StoreOptions {
        cache_capacity_bytes: 4 << 20,
        write_buffer_bytes: 16 << 10,
        chunk_bytes: 1 << 10,
        seen_memtable_len: 700,
        expected_urls: 10_000,
        ..StoreOptions::default()
    }
}

const HOSTS: [&str; 3] = ["a.test", "b.test:8080", "c.test"];

fn priority(n: u64) -> i32 {
    [0, 0, 1, -2][(n % 4) as usize]
}

fn request(n: u64) -> Request {
    Request::get(format!("http://{}/{n}", HOSTS[(n % 3) as usize]))
        .unwrap()
        .priority(priority(n))
}

/// Serve everything; returns the served ids per host in serving order.
fn drain<S: crawler_sched::QueueStore>(
    f: &mut Frontier<S>,
    limit: usize,
) -> HashMap<String, Vec<u64>> {
    let mut served: HashMap<String, Vec<u64>> = HashMap::new();
    let mut now = Instant::now();
    let fb = Feedback {
        sent: true,
        status: Some(200),
        ..Feedback::default()
    };
    // Bounded: each round serves a request or moves the virtual clock.
    for _ in 0..3 * limit + 10 {
        match f.next(now) {
            Next::Ready(lease, r) => {
                let host = crawler_sched::host_key(&r.url);
                served
                    .entry(host)
                    .or_default()
                    .push(r.url.path()[1..].parse().unwrap());
                f.complete(lease, &fb, now);
                f.acknowledge(lease);
                if served.values().map(Vec::len).sum::<usize>() == limit {
                    break;
                }
            }
            Next::NotBefore(at) => now = at,
            _ => break,
        }
    }
    served
}

#[test]
fn every_request_is_served_once_in_order_per_host_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    const N: u64 = 3_000;
    let now = Instant::now();
    let mut f = Frontier::with_store(config(), SledStore::open(dir.path(), options()).unwrap());
    for n in 0..N {
        assert_eq!(f.enqueue(request(n), now), Admission::Queued);
    }
    for n in (0..N).step_by(7) {
        assert_eq!(
            f.enqueue(request(n), now),
            Admission::Filtered(FilterReason::Duplicate)
        );
    }
    assert_eq!(f.queued(), N as usize);

    // Serve a third, then stop without completing two leases (a crash) and resume.
    let first = drain(&mut f, 1_000);
    let (_l1, r1) = match f.next(Instant::now() + Duration::from_secs(1)) {
        Next::Ready(l, r) => (l, r),
        other => panic!("expected a request, got {other:?}"),
    };
    drop(f);

    let store = SledStore::open(dir.path(), options()).unwrap();
    assert_eq!(store.requeued_on_open(), 1);
    let mut f = Frontier::with_store(config(), store);
    assert_eq!(f.queued(), (N - 1_000) as usize);
    // Still deduplicated after the restart, whether served or not.
    assert_eq!(
        f.enqueue(request(1), now),
        Admission::Filtered(FilterReason::Duplicate)
    );
    assert_eq!(
        f.enqueue(request(N - 1), now),
        Admission::Filtered(FilterReason::Duplicate)
    );
    let second = drain(&mut f, (N - 1_000) as usize);
    assert_eq!(f.queued(), 0);
    assert!(f.take_error().is_none());

    let r1_id: u64 = r1.url.path()[1..].parse().unwrap();
    let mut all = Vec::new();
    for (h, host) in HOSTS.iter().enumerate() {
        let mut ids: Vec<u64> = first.get(*host).cloned().unwrap_or_default();
        let resumed = second.get(*host).cloned().unwrap_or_default();
        if crawler_sched::host_key(&r1.url) == *host {
            // The interrupted lease comes back first, ahead of the rest of its host.
            assert_eq!(resumed.first(), Some(&r1_id));
        }
        ids.extend(resumed);
        // Within a host: highest priority first, then first in, first out; across the
        // restart the order just continues.
        let mut expected: Vec<u64> = (0..N).filter(|n| n % 3 == h as u64).collect();
        expected.sort_by_key(|&n| (-priority(n), n));
        assert_eq!(ids, expected, "{host}");
        all.extend(ids);
    }
    all.sort_unstable();
    assert_eq!(
        all,
        (0..N).collect::<Vec<_>>(),
        "every request served exactly once"
    );
}
