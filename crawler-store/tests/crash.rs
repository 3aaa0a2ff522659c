//! A real crash: a child process queues, leases and acknowledges requests in a loop and is
//! killed with SIGKILL; the reopened store must hold every request that was pushed and not
//! acknowledged, exactly once, and must still reject every URL it had seen.
//!
//! The child is this test binary itself, re-run on the ignored `crash_child` test with the
//! job directory in an environment variable: no extra binary to build or find.

// Helpers outside #[test] functions panic on failure too; that is what a test helper is for.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crawler_core::Request;
use crawler_sched::{Entry, QueueStore, fingerprint};
use crawler_store::{SledStore, StoreOptions};

const DIR_VAR: &str = "CRAWLER_STORE_CRASH_DIR";
const PUSH: u64 = 50;
const LEASE: u64 = 30;
const ACK: u64 = 20;
const HOSTS: [&str; 3] = ["a.test", "b.test", "c.test"];

fn options() -> StoreOptions {
    StoreOptions {
        cache_capacity_bytes: 8 << 20,
        // Background flushes as in production, plus small buffers and memtable so every
        // kind of write is happening when the kill lands.
        flush_every_ms: Some(20),
        write_buffer_bytes: 4 << 10,
        chunk_bytes: 512,
        seen_memtable_len: 300,
        expected_urls: 10_000,
        ..StoreOptions::default()
    }
}

fn req(n: u64) -> Request {
    Request::get(format!("http://{}/{n}", HOSTS[(n % 3) as usize])).unwrap()
}

/// Round r pushes ids [50r, 50r+50), leases the 30 oldest unleased ids and acknowledges the
/// 20 oldest unacknowledged leases, then flushes and reports "checkpoint r". Leasing walks
/// the hosts in id order, so the leased ids are exactly 0..30(r+1), acked 0..20(r+1).
#[test]
#[ignore = "run by crash_loses_nothing_pushed_and_admits_nothing_twice as a child process"]
fn crash_child() {
    let Some(dir) = std::env::var_os(DIR_VAR) else {
        return;
    };
    let mut store = SledStore::open(Path::new(&dir), options()).unwrap();
    let mut leased = std::collections::VecDeque::new();
    let mut next_lease_id = 0u64;
    for round in 0..100_000u64 {
        for n in round * PUSH..(round + 1) * PUSH {
            let r = req(n);
            assert!(store.insert_seen(fingerprint(&r)).unwrap());
            let host = r.url.host_str().unwrap().to_owned();
            store
                .push(
                    &host,
                    Entry {
                        priority: 0,
                        seq: n + 1,
                        request: r,
                    },
                )
                .unwrap();
        }
        for _ in 0..LEASE {
            let host = HOSTS[(next_lease_id % 3) as usize];
            let (lease, r) = store.lease(host).unwrap().unwrap();
            assert_eq!(r.url.path(), format!("/{next_lease_id}"));
            leased.push_back(lease);
            next_lease_id += 1;
        }
        for _ in 0..ACK {
            store.ack(leased.pop_front().unwrap()).unwrap();
        }
        store.flush().unwrap();
        println!("checkpoint {round}");
    }
}

fn run_and_kill(dir: &Path, after: Duration) -> Option<u64> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            &crate::test_path(module_path!(), "crash_child"),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DIR_VAR, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut last = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(r) = line.strip_prefix("checkpoint ") {
                last = r.trim().parse::<u64>().ok();
                let _ = first_tx.send(());
            }
        }
        last
    });
    // The kill delay counts from the first checkpoint, not from the spawn: a busy machine
    // (CI, a build beside it) can take longer than the shortest delay to start the child.
    // Bounded: a child that never checkpoints is killed after 30 s and the trial fails.
    let _ = first_rx.recv_timeout(Duration::from_secs(30));
    std::thread::sleep(after);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        // kill() sends SIGKILL on Unix: no destructor, no flush.
        child.kill().unwrap();
    }
    child.wait().unwrap();
    reader.join().unwrap()
}

#[test]
fn crash_loses_nothing_pushed_and_admits_nothing_twice() {
    for (trial, ms) in [150u64, 420, 777].into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let last = run_and_kill(dir.path(), Duration::from_millis(ms));
        let Some(r) = last else {
            panic!("trial {trial}: the child reached no checkpoint in 30 s");
        };

        let mut store = SledStore::open(dir.path(), options()).unwrap();
        let mut queued = Vec::new();
        for host in HOSTS {
            // Bounded: at most every id ever pushed.
            for _ in 0..(r + 2) * PUSH {
                let Some((lease, req)) = store.lease(host).unwrap() else {
                    break;
                };
                queued.push(req.url.path()[1..].parse::<u64>().unwrap());
                store.ack(lease).unwrap();
            }
        }
        let set: HashSet<u64> = queued.iter().copied().collect();
        assert_eq!(
            set.len(),
            queued.len(),
            "trial {trial}: a request is queued twice"
        );

        let acked_at_checkpoint = ACK * (r + 1);
        let pushed_at_checkpoint = PUSH * (r + 1);
        // Acknowledged before the last checkpoint: never back.
        assert!(
            set.iter().all(|&n| n >= acked_at_checkpoint),
            "trial {trial}: an acknowledged request came back"
        );
        // Pushed before the last checkpoint and not acknowledgeable in the next round: all
        // present (requests leased and not acknowledged included).
        for n in ACK * (r + 2)..pushed_at_checkpoint {
            assert!(
                set.contains(&n),
                "trial {trial}: request {n} was lost (checkpoint {r})"
            );
        }
        // Nothing that was never pushed.
        assert!(set.iter().all(|&n| n < PUSH * (r + 2)));
        assert!(
            store.requeued_on_open() as u64 >= LEASE * (r + 1) - ACK * (r + 2),
            "trial {trial}: leases outstanding at the kill were not returned"
        );

        // Every URL pushed by the checkpoint is still known as seen.
        for n in 0..pushed_at_checkpoint {
            assert!(
                !store.insert_seen(fingerprint(&req(n))).unwrap(),
                "trial {trial}: URL {n} would be admitted again"
            );
        }
    }
}
