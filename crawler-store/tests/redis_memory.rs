//! What a fleet worker does when Redis forgets: lease ids never repeat (so a stale
//! acknowledgement cannot delete another worker's lease), a rollback is noticed, and an
//! empty Redis is lost state, never an empty queue.
//!
//! Each test starts its own `redis-server` (without persistence) on a free loopback port.

#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crawler_core::Request;
use crawler_sched::{Entry, QueueStore, fingerprint};
use crawler_store::{RedisOptions, RedisStore};

struct Redis {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Redis {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Self::spawn(port, dir.path());
        let r = Self { child, port, dir };
        r.wait_ready();
        r
    }

    /// No automatic snapshots and no AOF: only an explicit `SAVE` is kept.
    fn spawn(port: u16, dir: &Path) -> Child {
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install redis-server)")
    }

    fn wait_ready(&self) {
        for _ in 0..250 {
            if self
                .command(&["PING"])
                .is_some_and(|r| r.starts_with("+PONG"))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not come up on port {}", self.port);
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn command(&self, args: &[&str]) -> Option<String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut cmd = format!("*{}\r\n", args.len());
        for a in args {
            cmd.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(cmd.as_bytes()).ok()?;
        let mut buf = vec![0u8; 64 * 1024];
        let n = s.read(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// Kill the server (losing everything since the last `SAVE`) and start it again from
    /// that snapshot: what a restart from an old RDB file, or a failover to a replica that
    /// was behind, looks like.
    fn crash_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = Self::spawn(self.port, self.dir.path());
        self.wait_ready();
    }

    /// The lease ids in the job's `lease` hash, sorted.
    fn lease_ids(&self, job: &str) -> Vec<String> {
        let reply = self
            .command(&["HKEYS", &format!("crawler:{{{job}}}:lease")])
            .unwrap();
        // "*N", then "$len", "value" pairs.
        let mut ids: Vec<String> = reply
            .lines()
            .skip(1)
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        ids.sort();
        ids
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn options(redis: &Redis, job: &str) -> RedisOptions {
    RedisOptions {
        retry_for: Duration::from_secs(10),
        ..RedisOptions::new(redis.url(), job)
    }
}

fn queue_one(store: &mut RedisStore, url: &str) {
    let request = Request::get(url).unwrap();
    assert!(store.insert_seen(fingerprint(&request)).unwrap());
    store
        .push(
            "h.test",
            Entry {
                priority: 0,
                seq: 1,
                request,
            },
        )
        .unwrap();
    store.flush().unwrap();
}

#[test]
fn lease_ids_never_repeat_and_a_stale_ack_spares_the_new_lease() {
    let mut redis = Redis::start();
    let mut a = RedisStore::open(options(&redis, "leases")).unwrap();
    let mut b = RedisStore::open(options(&redis, "leases")).unwrap();
    queue_one(&mut a, "http://h.test/1");
    assert!(redis.command(&["SAVE"]).unwrap().starts_with("+OK"));

    // A leases the page; then Redis loses everything after the snapshot, that lease too.
    let (na, _) = a.lease("h.test").unwrap().expect("A leases the page");
    let before = redis.lease_ids("leases");
    assert_eq!(before, vec![format!("{}:{na}", a.lease_token())]);
    redis.crash_and_restart();

    // The page is queued again, and B leases it under an id of its own.
    let (nb, request) = b
        .lease("h.test")
        .unwrap()
        .expect("the page is queued again");
    assert_eq!(request.url.as_str(), "http://h.test/1");
    let after = redis.lease_ids("leases");
    assert_eq!(after, vec![format!("{}:{nb}", b.lease_token())]);
    assert_ne!(
        before, after,
        "a lease id never repeats across a Redis restart"
    );

    // A's acknowledgement of its lost lease is stale: B's live lease survives it.
    a.ack(na).unwrap();
    a.flush().unwrap();
    assert_eq!(
        redis.lease_ids("leases"),
        after,
        "a stale acknowledgement deleted another worker's live lease"
    );
    // And A noticed that Redis lost updates it had confirmed (so it forgot its seen cache).
    assert_eq!(a.rollbacks(), 1);
    assert_eq!(b.rollbacks(), 0, "nothing B confirmed was lost");
    assert_eq!(a.job_epoch(), b.job_epoch(), "the snapshot kept the job");
}

#[test]
fn a_rolled_back_seen_set_does_not_filter_links_for_ever() {
    let mut redis = Redis::start();
    let mut a = RedisStore::open(options(&redis, "seen")).unwrap();
    queue_one(&mut a, "http://h.test/0");
    assert!(redis.command(&["SAVE"]).unwrap().starts_with("+OK"));
    // A queues a link, then Redis loses it (and the seen mark with it).
    queue_one(&mut a, "http://h.test/lost");
    redis.crash_and_restart();
    a.flush().unwrap();
    assert_eq!(a.rollbacks(), 1);
    // Met again (the page that linked to it is fetched again), the link is new to A, and
    // queued again: A's memory of it went with the rollback.
    let again = Request::get("http://h.test/lost").unwrap();
    assert!(
        a.insert_seen(fingerprint(&again)).unwrap(),
        "the local seen cache still filtered a link Redis lost"
    );
}

#[test]
fn an_empty_redis_is_lost_state_not_an_empty_queue() {
    let mut redis = Redis::start();
    let mut a = RedisStore::open(options(&redis, "empty")).unwrap();
    queue_one(&mut a, "http://h.test/1");
    // A restart without persistence: everything is gone.
    redis.crash_and_restart();
    let fleet = a.fleet();
    let _ = fleet.status();
    let err = fleet
        .take_error()
        .expect("reading the fleet's state from an empty Redis is an error")
        .to_string();
    assert!(err.contains("lost the state of job \"empty\""), "{err}");
    assert!(err.contains(&a.job_epoch()), "{err}");
    // Every later step fails at once with the same cause, writing nothing.
    let e = a.flush().unwrap_err();
    assert!(e.is_redis_lost(), "{e}");
    assert_eq!(redis.command(&["DBSIZE"]).unwrap().trim(), ":0");
}
