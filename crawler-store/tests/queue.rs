//! SledStore as a QueueStore: order, dedup, leases, reopen.

// Helpers outside #[test] functions panic on failure too; that is what a test helper is for.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use crawler_core::Request;
use crawler_sched::{Entry, QueueStore, fingerprint};
use crawler_store::{SledStore, StoreOptions};

/// Small buffers, chunks and memtable, so a few hundred requests cross every boundary:
/// several chunks per host, buffer syncs, memtable merges, the seen log.
fn tiny() -> StoreOptions {
    StoreOptions {
        cache_capacity_bytes: 4 << 20,
        write_buffer_bytes: 2 << 10,
        chunk_bytes: 300,
        seen_memtable_len: 50,
        expected_urls: 1_000,
        ..StoreOptions::default()
    }
}

fn open(dir: &Path) -> SledStore {
    SledStore::open(dir, tiny()).expect("open store")
}

fn req(host: &str, n: u64) -> Request {
    Request::get(format!("http://{host}/{n}")).unwrap()
}

/// Record the request as seen and queue it, as the frontier does.
fn offer(store: &mut SledStore, host: &str, priority: i32, seq: u64, n: u64) -> bool {
    let r = req(host, n);
    if !store.insert_seen(fingerprint(&r)).unwrap() {
        return false;
    }
    store
        .push(
            host,
            Entry {
                priority,
                seq,
                request: r,
            },
        )
        .unwrap();
    true
}

fn path_of(r: &Request) -> u64 {
    r.url.path()[1..].parse().unwrap()
}

#[test]
fn serves_highest_priority_first_then_oldest_per_host() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    // 300 requests per host, priorities cycling over -1, 0, 2: n's priority is known.
    let prio = |n: u64| [0, 2, -1][(n % 3) as usize];
    let mut seq = s.next_seq();
    for n in 0..300 {
        for host in ["a.test", "b.test"] {
            assert!(offer(&mut s, host, prio(n), seq, n));
            seq += 1;
        }
    }
    assert_eq!(s.queued(), 600);
    assert_eq!(s.host_len("a.test"), 300);
    let mut hosts = s.hosts();
    hosts.sort();
    assert_eq!(hosts, ["a.test", "b.test"]);

    let mut expected: Vec<u64> = (0..300).collect();
    expected.sort_by_key(|&n| (-prio(n), n));
    for host in ["a.test", "b.test"] {
        let mut got = Vec::new();
        // Bounded: one request per round.
        for _ in 0..301 {
            let Some((lease, r)) = s.lease(host).unwrap() else {
                break;
            };
            assert_eq!(r.url.host_str(), Some(host));
            got.push(path_of(&r));
            s.ack(lease).unwrap();
        }
        assert_eq!(got, expected, "{host}");
        assert_eq!(s.host_len(host), 0);
    }
    assert_eq!(s.queued(), 0);
    assert!(s.hosts().is_empty());
    assert!(s.lease("a.test").unwrap().is_none());
    assert!(s.lease("unknown.test").unwrap().is_none());
}

#[test]
fn order_and_counts_survive_a_reopen_mid_queue() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    for n in 0..200 {
        offer(&mut s, "a.test", i32::from(n % 2 == 0), n + 1, n);
    }
    // Consume part of a chunk, so the reopen must cut consumed entries off it.
    let mut first = Vec::new();
    for _ in 0..7 {
        let (lease, r) = s.lease("a.test").unwrap().unwrap();
        first.push(path_of(&r));
        s.ack(lease).unwrap();
    }
    assert_eq!(first, [0, 2, 4, 6, 8, 10, 12]);
    drop(s);

    let mut s = open(dir.path());
    assert_eq!(s.requeued_on_open(), 0);
    assert_eq!(s.queued(), 193);
    assert_eq!(s.host_len("a.test"), 193);
    assert!(s.next_seq() > 200);
    let mut rest = Vec::new();
    for _ in 0..194 {
        let Some((lease, r)) = s.lease("a.test").unwrap() else {
            break;
        };
        rest.push(path_of(&r));
        s.ack(lease).unwrap();
    }
    let evens = (14..200).step_by(2);
    let odds = (1..200).step_by(2);
    assert_eq!(rest, evens.chain(odds).collect::<Vec<u64>>());
}

#[test]
fn seen_fingerprints_survive_reopen_whatever_became_of_their_requests() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    // 500 URLs with a 50-entry memtable: several merges into the on-disk buckets.
    for n in 0..500 {
        assert!(offer(&mut s, "a.test", 0, n + 1, n));
    }
    // A duplicate within the run, from memtable and from disk.
    assert!(!offer(&mut s, "a.test", 0, 1000, 499));
    assert!(!offer(&mut s, "a.test", 0, 1001, 3));
    // Lease and acknowledge the newest entries too: their fingerprints may only be in the
    // memtable, and the queue no longer holds them.
    for _ in 0..500 {
        let Some((lease, _)) = s.lease("a.test").unwrap() else {
            break;
        };
        s.ack(lease).unwrap();
    }
    assert_eq!(s.queued(), 0);
    drop(s);

    let mut s = open(dir.path());
    for n in 0..500 {
        assert!(
            !offer(&mut s, "a.test", 0, 2000 + n, n),
            "URL {n} was admitted again after reopen"
        );
    }
    assert!(offer(&mut s, "a.test", 0, 3000, 500));
    assert_eq!(s.queued(), 1);
}

#[test]
fn unacknowledged_leases_return_to_their_queue_on_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    for n in 0..20 {
        offer(&mut s, "a.test", 0, n + 1, n);
        offer(&mut s, "b.test", 0, n + 101, n);
    }
    let (a0, r) = s.lease("a.test").unwrap().unwrap();
    assert_eq!(path_of(&r), 0);
    let (_a1, r) = s.lease("a.test").unwrap().unwrap();
    assert_eq!(path_of(&r), 1);
    let (_b0, r) = s.lease("b.test").unwrap().unwrap();
    assert_eq!(path_of(&r), 0);
    s.ack(a0).unwrap();
    assert_eq!(s.queued(), 37);
    // A crash: the store is dropped with two leases outstanding.
    drop(s);

    let mut s = open(dir.path());
    assert_eq!(s.requeued_on_open(), 2);
    assert_eq!(s.queued(), 39);
    assert_eq!(s.host_len("a.test"), 19);
    assert_eq!(s.host_len("b.test"), 20);
    // The returned requests keep their place: first again.
    let (_, r) = s.lease("a.test").unwrap().unwrap();
    assert_eq!(path_of(&r), 1);
    let (_, r) = s.lease("b.test").unwrap().unwrap();
    assert_eq!(path_of(&r), 0);
    drop(s);

    // Returned once, not again and again.
    let s = open(dir.path());
    assert_eq!(s.requeued_on_open(), 2);
    assert_eq!(s.queued(), 39);
}

#[test]
fn requests_skipping_the_filter_are_queued_but_not_recorded_as_seen() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = open(dir.path());
    let r = req("a.test", 1);
    for seq in 1..=2 {
        s.push(
            "a.test",
            Entry {
                priority: 0,
                seq,
                request: r.clone(),
            },
        )
        .unwrap();
    }
    assert_eq!(s.queued(), 2);
    drop(s);
    let mut s = open(dir.path());
    assert_eq!(s.queued(), 2);
    assert!(s.insert_seen(fingerprint(&r)).unwrap());
}
