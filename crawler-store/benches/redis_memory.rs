//! Redis memory of a fleet's job, measured on a real `RedisStore`: bytes per seen URL, per
//! queued request, per host with queued work, and per host's politeness state, against one
//! `redis-server` and against a Redis Cluster of three masters (no replicas), each started
//! here on free loopback ports without persistence.
//!
//! ```text
//! cargo bench -p crawler-store --bench redis_memory
//! REDIS_MEMORY_SEEN=200000 REDIS_MEMORY_QUEUED=100000 REDIS_MEMORY_HOSTS=1000 \
//!     REDIS_MEMORY_CLUSTER=1 cargo bench -p crawler-store --bench redis_memory
//! ```
//!
//! Each figure is a difference of `INFO memory` `used_memory` (summed over the masters)
//! around one job of its own, after the store has joined it and the scripts are loaded:
//!
//! - *seen URL*: N requests pushed with their fingerprints (`insert_seen`, then `push`),
//!   then the job's queues and `hosts` sets deleted: what stays is the seen sets.
//! - *host with queued work*: one request pushed (without a fingerprint) to each of H hosts:
//!   a queue key, its sorted set and one member, and the host in its shard's `hosts` set.
//! - *queued request*: M requests pushed (without fingerprints) over H hosts, less the
//!   figure above for the H hosts, over the M - H requests beyond the first of each host.
//! - *host state*: one request pushed to each of H hosts, leased (with a shared budget of
//!   the default settings, so the lease writes the host's state) and acknowledged: the
//!   queues empty, what stays is each host's `b:HOST` hash.
//!
//! A second table gives what a push and a lease (with its acknowledgement) send to Redis
//! and get back (`INFO stats` `total_net_*_bytes`), the store's round trips and commands
//! (script calls), and the masters' time in scripts (`INFO commandstats`) for each.
//!
//! `MEMORY USAGE key SAMPLES 0` of the keys of each kind, summed, is printed beside each
//! difference as a check. Needs `redis-server` and `redis-cli` on the PATH.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/redis_cluster.rs"]
mod redis_cluster;
#[path = "../tests/support/redis.rs"]
mod redis_server;

use std::time::{Duration, Instant};

use crawler_core::{Request, Settings};
use crawler_sched::politeness::Params;
use crawler_sched::{Entry, QueueStore, fingerprint};
use crawler_store::{RedisOptions, RedisStore};
use redis_cluster::RedisCluster;
use redis_server::Redis;

fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

/// A deterministic stream of numbers (splitmix64), for varied URLs.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

const SECTIONS: [&str; 8] = [
    "catalogue",
    "products",
    "articles",
    "news/2024",
    "blog/posts",
    "category/books",
    "docs/reference",
    "forum/threads",
];
const WORDS: [&str; 12] = [
    "travel", "mystery", "poetry", "history", "science", "fiction", "garden", "kitchen", "running",
    "jazz", "design", "climbing",
];

fn host(h: usize) -> String {
    format!("www.shop{h:05}.example.com")
}

/// A GET URL of about 80 characters on host `h`, distinct for each `i`.
fn url(draw: &mut Draw, h: usize, i: usize) -> String {
    let section = SECTIONS[(draw.next() % 8) as usize];
    let a = WORDS[(draw.next() % 12) as usize];
    let b = WORDS[(draw.next() % 12) as usize];
    format!(
        "https://{}/{section}/{a}-{b}-{i}/index.html?page={}",
        host(h),
        draw.next() % 40
    )
}

/// The masters of the Redis under test, by port, and the store's URL.
struct Target {
    name: &'static str,
    url: String,
    masters: Vec<u16>,
}

fn connect(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection()
        .unwrap()
}

impl Target {
    /// `used_memory` summed over the masters.
    fn used(&self) -> i64 {
        self.masters
            .iter()
            .map(|&p| {
                let info: String = redis::cmd("INFO")
                    .arg("memory")
                    .query(&mut connect(p))
                    .unwrap();
                info.lines()
                    .find_map(|l| l.strip_prefix("used_memory:"))
                    .and_then(|v| v.trim().parse::<i64>().ok())
                    .expect("used_memory in INFO memory")
            })
            .sum()
    }

    /// `total_net_input_bytes` and `total_net_output_bytes` summed over the masters.
    fn net(&self) -> (i64, i64) {
        let mut sum = (0, 0);
        for &p in &self.masters {
            let info: String = redis::cmd("INFO")
                .arg("stats")
                .query(&mut connect(p))
                .unwrap();
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name))
                    .and_then(|v| v.trim().parse::<i64>().ok())
                    .expect("net bytes in INFO stats")
            };
            sum.0 += field("total_net_input_bytes:");
            sum.1 += field("total_net_output_bytes:");
        }
        sum
    }

    /// Microseconds the masters spent in scripts (`INFO commandstats`, `evalsha` and
    /// `eval`), summed.
    fn script_usec(&self) -> i64 {
        let mut sum = 0;
        for &p in &self.masters {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut connect(p))
                .unwrap();
            for l in info.lines() {
                if let Some(rest) = l
                    .strip_prefix("cmdstat_evalsha:")
                    .or_else(|| l.strip_prefix("cmdstat_eval:"))
                {
                    sum += rest
                        .split(',')
                        .find_map(|f| f.strip_prefix("usec="))
                        .and_then(|v| v.parse::<i64>().ok())
                        .unwrap_or(0);
                }
            }
        }
        sum
    }

    /// Every key matching `pattern` on every master, with its master.
    fn keys(&self, pattern: &str) -> Vec<(u16, String)> {
        let mut out = Vec::new();
        for &p in &self.masters {
            let mut con = connect(p);
            let mut cursor = 0u64;
            // Bounded: a SCAN of COUNT 1000 over at most a few million keys.
            for _ in 0..100_000 {
                let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query(&mut con)
                    .unwrap();
                out.extend(batch.into_iter().map(|k| (p, k)));
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        out
    }

    /// `MEMORY USAGE key SAMPLES 0` (exact) summed over the keys matching `pattern`.
    fn usage(&self, pattern: &str) -> (usize, i64) {
        let keys = self.keys(pattern);
        let mut total = 0;
        for &p in &self.masters {
            let mut con = connect(p);
            for (_, k) in keys.iter().filter(|(q, _)| *q == p) {
                let n: Option<i64> = redis::cmd("MEMORY")
                    .arg("USAGE")
                    .arg(k)
                    .arg("SAMPLES")
                    .arg(0)
                    .query(&mut con)
                    .unwrap();
                total += n.unwrap_or(0);
            }
        }
        (keys.len(), total)
    }

    /// Delete the keys matching `pattern`, one `DEL` each (a cluster's keys of one `DEL`
    /// must share a slot).
    fn delete(&self, pattern: &str) {
        for (p, k) in self.keys(pattern) {
            let _: i64 = redis::cmd("DEL").arg(&k).query(&mut connect(p)).unwrap();
        }
    }

    fn open(&self, job: &str, budget: bool) -> RedisStore {
        RedisStore::open(RedisOptions {
            retry_for: Duration::from_secs(20),
            budget: budget.then(|| Params::from_settings(&Settings::default())),
            ..RedisOptions::new(self.url.clone(), job)
        })
        .unwrap()
    }
}

/// Push `count` requests over `hosts` hosts (round robin), with their fingerprints in the
/// seen set or not. Returns the mean length of a request's JSON.
fn push(store: &mut RedisStore, count: usize, hosts: usize, seen: bool, seed: u64) -> f64 {
    let mut draw = Draw(seed);
    let mut json = 0usize;
    for i in 0..count {
        let h = i % hosts;
        let mut request = Request::get(url(&mut draw, h, i)).unwrap();
        request.depth = 3;
        json += serde_json::to_vec(&request).unwrap().len();
        if seen {
            assert!(store.insert_seen(fingerprint(&request)).unwrap());
        }
        store
            .push(
                &host(h),
                Entry {
                    priority: 0,
                    seq: i as u64 + 1,
                    request,
                },
            )
            .unwrap();
    }
    store.flush().unwrap();
    json as f64 / count.max(1) as f64
}

/// What one operation of the store sends and receives, and how many waits and calls.
struct Traffic {
    what: &'static str,
    count: usize,
    input: i64,
    output: i64,
    trips: u64,
    commands: u64,
    usec: i64,
}

impl Traffic {
    fn around<'a>(
        t: &'a Target,
        s: &RedisStore,
        what: &'static str,
    ) -> impl FnOnce(&RedisStore, usize) -> Self + use<'a> {
        let (in0, out0) = t.net();
        let usec = t.script_usec();
        let (trips, commands) = (s.round_trips(), s.commands());
        move |s: &RedisStore, count: usize| {
            let (in1, out1) = t.net();
            let usec = t.script_usec() - usec;
            Self {
                what,
                count,
                input: in1 - in0,
                output: out1 - out0,
                trips: s.round_trips() - trips,
                commands: s.commands() - commands,
                usec,
            }
        }
    }
}

struct Row {
    what: &'static str,
    count: usize,
    delta: i64,
    usage: i64,
}

struct Measured {
    rows: Vec<Row>,
    traffic: Vec<Traffic>,
    json: f64,
    state: f64,
}

fn measure(t: &Target, n: usize, m: usize, h: usize) -> Measured {
    let started = Instant::now();
    // The scripts loaded on every master, so that no difference below carries them.
    {
        let mut s = t.open("warmup", true);
        push(&mut s, 200, 100, true, 9);
        for k in 0..100 {
            if let Some((id, _)) = s.lease(&host(k)).unwrap() {
                s.ack(id).unwrap();
            }
        }
        s.flush().unwrap();
    }
    t.delete("crawler:{warmup*");

    // Seen URLs: pushed with fingerprints, then the queues and host sets deleted.
    let mut s = t.open("seen", false);
    let base = t.used();
    let done = Traffic::around(t, &s, "push of a new URL (with its fingerprint), batched");
    let json = push(&mut s, n, h, true, 1);
    let pushes = done(&s, n);
    drop(s);
    t.delete("crawler:{seen/*}:q:*");
    t.delete("crawler:{seen/*}:hosts");
    let (_, seen_usage) = t.usage("crawler:{seen/*}:seen");
    let seen = Row {
        what: "seen URL (fingerprint in a shard's `seen` set)",
        count: n,
        delta: t.used() - base,
        usage: seen_usage,
    };

    // Hosts with one queued request each.
    let mut s = t.open("hosts", false);
    let base = t.used();
    push(&mut s, h, h, false, 2);
    drop(s);
    let (_, q1) = t.usage("crawler:{hosts/*}:q:*");
    let (_, hs1) = t.usage("crawler:{hosts/*}:hosts");
    let host_delta = t.used() - base;
    let hosts = Row {
        what: "host with queued work (`q:HOST` key + `hosts` entry + its first request)",
        count: h,
        delta: host_delta,
        usage: q1 + hs1,
    };

    // Queued requests over the same number of hosts, beyond the first of each.
    let mut s = t.open("queue", false);
    let base = t.used();
    push(&mut s, m, h, false, 3);
    drop(s);
    let (_, qm) = t.usage("crawler:{queue/*}:q:*");
    let (_, hsm) = t.usage("crawler:{queue/*}:hosts");
    let queued = Row {
        what: "queued request (a member of `q:HOST`)",
        count: m - h,
        delta: t.used() - base - host_delta,
        usage: qm + hsm - (q1 + hs1),
    };

    // Politeness state: one lease (with a budget) and its acknowledgement per host.
    let mut s = t.open("state", true);
    let base = t.used();
    push(&mut s, h, h, false, 4);
    let mut leased = 0;
    let done = Traffic::around(t, &s, "lease with a budget (+ its acknowledgement)");
    for k in 0..h {
        if let Some((id, _)) = s.lease(&host(k)).unwrap() {
            s.ack(id).unwrap();
            leased += 1;
        }
    }
    s.flush().unwrap();
    let leases = done(&s, h);
    drop(s);
    assert_eq!(leased, h, "every host's request was leased");
    let (_, b) = t.usage("crawler:{state/*}:b:*");
    let state_len: Vec<usize> = t
        .keys("crawler:{state/*}:b:*")
        .iter()
        .take(50)
        .map(|(p, k)| {
            // The learning state (`s`) is written by the first outcome that teaches
            // something, not by a lease: after leases alone only the pacing record is there.
            let s: Option<String> = redis::cmd("HGET")
                .arg(k)
                .arg("s")
                .query(&mut connect(*p))
                .unwrap();
            s.map_or(0, |s| s.len())
        })
        .collect();
    let mean_state = state_len.iter().sum::<usize>() as f64 / state_len.len().max(1) as f64;
    let state = Row {
        what: "host's politeness state (`b:HOST`, after one lease)",
        count: h,
        delta: t.used() - base,
        usage: b,
    };
    eprintln!(
        "{}: measured in {:.1} s",
        t.name,
        started.elapsed().as_secs_f64()
    );
    Measured {
        rows: vec![seen, queued, hosts, state],
        traffic: vec![pushes, leases],
        json,
        state: mean_state,
    }
}

fn main() {
    let n = env_or("REDIS_MEMORY_SEEN", 200_000);
    let m = env_or("REDIS_MEMORY_QUEUED", 100_000);
    let h = env_or("REDIS_MEMORY_HOSTS", 1_000).clamp(1, m.max(1));
    let cluster = env_or("REDIS_MEMORY_CLUSTER", 1) != 0;
    let version = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();

    let mut results = Vec::new();
    {
        let redis = Redis::start();
        let t = Target {
            name: "one server",
            url: redis.url(),
            masters: vec![redis.port],
        };
        results.push((t.name, measure(&t, n, m, h)));
    }
    if cluster {
        let c = RedisCluster::start_with(3, 0, Duration::from_secs(5));
        let t = Target {
            name: "cluster, 3 masters",
            url: c.url(),
            masters: c.masters(),
        };
        assert_eq!(t.masters.len(), 3);
        results.push((t.name, measure(&t, n, m, h)));
    }

    println!(
        "REDIS_MEMORY_SEEN={n} REDIS_MEMORY_QUEUED={m} REDIS_MEMORY_HOSTS={h} \
         REDIS_MEMORY_CLUSTER={} cargo bench -p crawler-store --bench redis_memory",
        u8::from(cluster)
    );
    println!("{version}");
    if let Some((_, r)) = results.first() {
        println!(
            "request JSON {:.0} bytes on average (queue member: 16 more); host learning state \
             JSON {:.0} bytes (none until an outcome teaches something: a lease books its send \
             in the host's pacing record)",
            r.json, r.state
        );
    }
    println!();
    println!("| Redis | what | count | used_memory delta | bytes each | MEMORY USAGE each |");
    println!("|---|---|---:|---:|---:|---:|");
    for (name, r) in &results {
        for row in &r.rows {
            let c = row.count.max(1) as f64;
            println!(
                "| {name} | {} | {} | {} | {:.1} | {:.1} |",
                row.what,
                row.count,
                row.delta,
                row.delta as f64 / c,
                row.usage as f64 / c
            );
        }
    }
    println!();
    println!(
        "| Redis | operation | count | bytes to Redis each | bytes from Redis each | round trips each | commands each | script µs each |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for (name, r) in &results {
        for x in &r.traffic {
            let c = x.count.max(1) as f64;
            println!(
                "| {name} | {} | {} | {:.1} | {:.1} | {:.4} | {:.4} | {:.1} |",
                x.what,
                x.count,
                x.input as f64 / c,
                x.output as f64 / c,
                x.trips as f64 / c,
                x.commands as f64 / c,
                x.usec as f64 / c
            );
        }
    }
}
