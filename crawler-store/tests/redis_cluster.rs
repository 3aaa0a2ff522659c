//! A job on a Redis Cluster: its keys spread over every master while each script stays in
//! one slot (the cluster refuses anything else), duplicates are still found across workers,
//! shared robots.txt files spread too, and a malformed cluster URL is a clear error.
//!
//! Each test starts its own cluster (three masters, one replica each) on free loopback
//! ports: `redis-server` and `redis-cli` must be installed (`.ci/run` does this).

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::time::Duration;

use crawler_core::{Request, SharedRobots};
use crawler_sched::{Entry, QueueStore, fingerprint};
use crawler_store::{RedisOptions, RedisStore};

#[path = "support/redis_cluster.rs"]
mod redis_cluster;

use redis_cluster::{RedisCluster, command_on, info_field};

fn open(cluster: &RedisCluster, job: &str) -> RedisStore {
    RedisStore::open(RedisOptions {
        retry_for: Duration::from_secs(10),
        ..RedisOptions::new(cluster.url(), job)
    })
    .unwrap()
}

fn queue(store: &mut RedisStore, host: &str, path: &str) {
    let request = Request::get(format!("http://{host}/{path}")).unwrap();
    if store.insert_seen(fingerprint(&request)).unwrap() {
        store
            .push(
                host,
                Entry {
                    priority: 0,
                    seq: 1,
                    request,
                },
            )
            .unwrap();
    }
}

/// Script calls each master ran so far (`INFO commandstats`: EVALSHA and EVAL).
fn scripts_run(port: u16) -> u64 {
    let info = command_on(port, &["INFO", "commandstats"]).unwrap_or_default();
    ["cmdstat_evalsha", "cmdstat_eval"]
        .iter()
        .filter_map(|k| info_field(&info, k))
        .filter_map(|v| {
            v.split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

#[test]
fn a_job_spreads_over_every_master_with_each_script_in_one_slot() {
    let cluster = RedisCluster::start(3, Duration::from_millis(2000));
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3);
    let before: HashMap<u16, u64> = masters.iter().map(|&p| (p, scripts_run(p))).collect();

    let mut a = open(&cluster, "spread");
    let mut b = open(&cluster, "spread");
    assert!(a.is_cluster());
    let hosts: Vec<String> = (0..60).map(|i| format!("h{i}.test")).collect();
    for h in &hosts {
        queue(&mut a, h, "1");
        queue(&mut a, h, "2");
    }
    a.flush().unwrap();

    // Every master holds some of the job's queues (24 shards, 8 per master).
    let mut queues_per_master: HashMap<u16, usize> = HashMap::new();
    for (port, key) in cluster.keys("crawler:{spread/*}:q:*") {
        assert!(key.contains(":q:h"), "{key}");
        *queues_per_master.entry(port).or_default() += 1;
    }
    assert_eq!(
        queues_per_master.values().sum::<usize>(),
        60,
        "{queues_per_master:?}"
    );
    for &m in &masters {
        assert!(
            queues_per_master.get(&m).is_some_and(|&n| n >= 8),
            "master {m} holds too few queues: {queues_per_master:?}"
        );
    }

    // B finds A's work and meets A's links as duplicates (the shared seen set decides).
    for h in &hosts {
        queue(&mut b, h, "1");
    }
    let fleet = b.fleet();
    let status = fleet.status();
    assert_eq!((status.queued, status.leased), (120, 0), "{status:?}");
    let mut leased = 0;
    for h in &hosts {
        while let Some((id, req)) = b.lease(h).unwrap() {
            assert!(req.url.as_str().starts_with(&format!("http://{h}/")));
            b.ack(id).unwrap();
            leased += 1;
        }
    }
    assert_eq!(leased, 120, "every queued request once");
    b.flush().unwrap();
    let status = fleet.status();
    assert!(fleet.take_error().is_none());
    assert_eq!((status.queued, status.leased), (0, 0), "{status:?}");

    // The work went to every master, not to one.
    let ran: Vec<u64> = masters
        .iter()
        .map(|p| scripts_run(*p) - before[p])
        .collect();
    let total: u64 = ran.iter().sum();
    for (m, n) in masters.iter().zip(&ran) {
        assert!(
            *n * 6 >= total,
            "master {m} ran {n} of {total} scripts: {ran:?}"
        );
    }
    // A step is one round trip however many masters its scripts went to.
    assert!(
        b.commands() > b.round_trips(),
        "{} {}",
        b.commands(),
        b.round_trips()
    );

    // Shared robots.txt files go to their origin's shard, on every master, and each is the
    // other worker's (a command sent to the wrong master is an error, not a miss).
    let file = |h: &str| SharedRobots {
        status: 200,
        body: format!("User-agent: *\nDisallow: /{h}/\n").into_bytes(),
        truncated: false,
    };
    for h in &hosts {
        a.robots()
            .put(&format!("http://{h}"), &file(h), Duration::from_secs(60))
            .unwrap();
    }
    for h in &hosts {
        let (got, _) = b
            .robots()
            .get(&format!("http://{h}"))
            .unwrap()
            .unwrap_or_else(|| panic!("{h}'s file"));
        assert_eq!(got, file(h));
    }
    let mut files_per_master: HashMap<u16, usize> = HashMap::new();
    for (port, _) in cluster.keys("crawler:{spread/*}:robots:*") {
        *files_per_master.entry(port).or_default() += 1;
    }
    assert_eq!(files_per_master.values().sum::<usize>(), 60);
    assert_eq!(files_per_master.len(), 3, "{files_per_master:?}");
}

#[test]
fn a_malformed_cluster_url_is_a_clear_error() {
    for (url, says) in [
        (
            "redis+cluster://127.0.0.1:7000,,127.0.0.1:7001",
            "empty seed",
        ),
        (
            "redis+cluster://127.0.0.1",
            "\"127.0.0.1\" is not host:port",
        ),
        ("redis+cluster://:s3cret@127.0.0.1:7000/3", "not \"3\""),
    ] {
        let err = RedisStore::open(RedisOptions::new(url, "j"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("invalid Redis Cluster URL"), "{err}");
        assert!(err.contains(says), "{err}");
        assert!(!err.contains("s3cret"), "the password leaked: {err}");
    }
}
