//! What a fleet worker does when Redis forgets: lease ids never repeat (so a stale
//! acknowledgement cannot delete another worker's lease), a rollback is noticed, and an
//! empty Redis is lost state, never an empty queue.
//!
//! Each test starts its own `redis-server` (without persistence) on a free loopback port.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crawler_core::Request;
use crawler_sched::{Entry, QueueStore, fingerprint};
use crawler_store::{RedisOptions, RedisStore};

#[path = "support/redis.rs"]
mod redis_server;

use redis_server::Redis;

/// The lease ids in the job's `lease` hashes, sorted.
fn lease_ids(redis: &Redis, job: &str) -> Vec<String> {
    redis.lease_ids(job)
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
    let before = lease_ids(&redis, "leases");
    assert_eq!(before, vec![format!("{}:{na}", a.lease_token())]);
    redis.crash_and_restart();

    // The page is queued again, and B leases it under an id of its own.
    let (nb, request) = b
        .lease("h.test")
        .unwrap()
        .expect("the page is queued again");
    assert_eq!(request.url.as_str(), "http://h.test/1");
    let after = lease_ids(&redis, "leases");
    assert_eq!(after, vec![format!("{}:{nb}", b.lease_token())]);
    assert_ne!(
        before, after,
        "a lease id never repeats across a Redis restart"
    );

    // A's acknowledgement of its lost lease is stale: B's live lease survives it.
    a.ack(na).unwrap();
    a.flush().unwrap();
    assert_eq!(
        lease_ids(&redis, "leases"),
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
fn links_a_rollback_lost_are_queued_again_by_the_worker_that_queued_them() {
    let mut redis = Redis::start();
    let mut a = RedisStore::open(options(&redis, "replay")).unwrap();
    queue_one(&mut a, "http://h.test/kept");
    assert!(redis.command(&["SAVE"]).unwrap().starts_with("+OK"));
    // Confirmed by Redis, then lost with everything after the snapshot (on a cluster: a
    // failover to a replica that was behind, while the page that linked to it was
    // acknowledged on another master).
    queue_one(&mut a, "http://h.test/lost");
    redis.crash_and_restart();
    a.flush().unwrap();
    assert_eq!(a.rollbacks(), 1);
    let fleet = a.fleet();
    let status = fleet.status();
    assert_eq!(
        status.queued, 2,
        "the lost link is queued again: {status:?}"
    );
    let mut urls = Vec::new();
    while let Some((id, request)) = a.lease("h.test").unwrap() {
        urls.push(request.url.to_string());
        a.ack(id).unwrap();
    }
    urls.sort();
    assert_eq!(urls, ["http://h.test/kept", "http://h.test/lost"]);
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
