//! robots.txt shared by a fleet's workers through Redis: a file one worker put is the next
//! worker's, with what is left of its TTL, and gone when that ends.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crawler_core::SharedRobots;
use crawler_store::{RedisOptions, RedisStore};

#[path = "support/redis.rs"]
mod redis_server;

use redis_server::Redis;

fn open(redis: &Redis, job: &str) -> RedisStore {
    RedisStore::open(RedisOptions {
        retry_for: Duration::from_secs(10),
        ..RedisOptions::new(redis.url(), job)
    })
    .unwrap()
}

#[test]
fn a_file_one_worker_fetched_is_every_workers_until_its_ttl_ends() {
    let redis = Redis::start();
    let a = open(&redis, "robots-share");
    let b = open(&redis, "robots-share");
    let file = SharedRobots {
        status: 200,
        body: b"User-agent: *\nDisallow: /private/\n\xff".to_vec(),
        truncated: true,
    };
    let origin = "http://h.test:8080";
    assert!(b.robots().get(origin).unwrap().is_none(), "nothing yet");
    a.robots()
        .put(origin, &file, Duration::from_secs(60))
        .unwrap();
    let (got, left) = b
        .robots()
        .get(origin)
        .unwrap()
        .expect("the other worker's file");
    assert_eq!(got, file, "status, body (bytes as fetched) and the cut");
    // What is left is read on the fleet's clock as each worker estimates it, and two
    // workers' estimates differ by up to half a round trip (the store's clock module): a
    // few ms over the TTL is that, a reset TTL or a lost one is the failure.
    assert!(
        left < Duration::from_secs(61) && left > Duration::from_secs(55),
        "{left:?} left"
    );
    assert!(b.robots().get("http://other.test").unwrap().is_none());
    // Another job keeps its own.
    assert!(
        open(&redis, "robots-other")
            .robots()
            .get(origin)
            .unwrap()
            .is_none()
    );
    // A short TTL ends.
    a.robots()
        .put("http://short.test", &file, Duration::from_millis(150))
        .unwrap();
    assert!(b.robots().get("http://short.test").unwrap().is_some());
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        b.robots().get("http://short.test").unwrap().is_none(),
        "expired"
    );
}
