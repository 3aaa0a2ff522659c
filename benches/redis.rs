//! Coordination cost of a Redis-shared crawl: pages/s of 1 and of 4 worker processes on an
//! open lab with many hosts, against one Redis server and against a Redis Cluster of
//! three masters; Redis round trips and commands per fetched page, and Redis memory per
//! URL seen.
//!
//! ```text
//! cargo bench --bench redis                    # 50 hosts x 100 books
//! REDIS_BENCH_HOSTS=20 REDIS_BENCH_BOOKS=100 cargo bench --bench redis
//! REDIS_BENCH_RUNS=1,2 cargo bench --bench redis   # only the four-worker runs
//! REDIS_BENCH_HOT=4,16 REDIS_BENCH_BOOKS=300 cargo bench --bench redis  # one hot host
//! ```
//!
//! Where the CPU goes, per page: Redis's (every master's `used_cpu_sys` + `used_cpu_user`),
//! the worker processes' and this process's (the labs'), and how many cores they kept busy
//! together: a second and third master relieve only the first part.
//!
//! `REDIS_BENCH_HOT` (worker counts) measures instead how leases contend on one paced host
//! (a fixed 10 ms delay, four requests in flight fleet-wide) that every worker leases from:
//! round trips per page by purpose, lease answers per page (granted, "not yet": the
//! host's next slot was further off than the lease may reach, or its concurrency was in
//! flight), and the bytes each lease sent and received besides the request it hands out.
//!
//! Needs `redis-server` and `redis-cli` on the PATH; starts its own server and cluster
//! (three masters, no replicas) on free loopback ports. Workers are this binary re-run as
//! child processes. Prints a markdown table.

#![allow(clippy::unwrap_used)]

// The one redis-server helper of the workspace's tests, and its cluster helper.
#[path = "../crawler-store/tests/support/redis.rs"]
mod redis_server;
use redis_server::Redis;
#[path = "../crawler-store/tests/support/redis_cluster.rs"]
mod redis_cluster;
use redis_cluster::{RedisCluster, command_on, info_field};

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;
#[path = "support/cpu.rs"]
mod cpu;

use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crawler::prelude::*;
use crawler_lab::Lab;

/// Crawls every lab host from its front page.
struct Many(Vec<String>);

impl Spider for Many {
    type Item = books::Book;
    fn name(&self) -> &str {
        "redis-bench"
    }
    fn start_urls(&self) -> Vec<String> {
        self.0.clone()
    }
    async fn parse(&self, page: Response, out: &mut Output<books::Book>) -> Result<()> {
        books::Books {
            start: String::new(),
        }
        .parse(page, out)
        .await
    }
}

/// The purposes of round trips, as the workers print them.
const PURPOSES: [&str; 5] = ["lease", "fleet_read", "host_read", "write", "other"];

fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if std::env::var_os("REDIS_BENCH_CHILD").is_some() {
        child();
        return;
    }
    if let Ok(counts) = std::env::var("REDIS_BENCH_HOT") {
        hot(&counts, env_or("REDIS_BENCH_BOOKS", 300));
        return;
    }
    let hosts = env_or("REDIS_BENCH_HOSTS", 50);
    let books = env_or("REDIS_BENCH_BOOKS", 100);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let labs: Vec<Lab> = rt.block_on(async {
        let mut labs = Vec::new();
        for _ in 0..hosts {
            labs.push(Lab::builder().books(books).start().await.unwrap());
        }
        labs
    });
    let urls: Vec<String> = labs.iter().map(Lab::url).collect();
    let redis = Redis::start();
    let cluster = RedisCluster::start_with(3, 0, std::time::Duration::from_secs(5));
    println!("Redis-shared crawl, open lab: {hosts} hosts x {books} books, workers as processes\n");
    println!(
        "| Redis | workers | pages | seconds | pages/s | round trips/page | commands/page | Redis bytes/page | CPU ms/page: Redis / workers / labs | cores busy |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|");
    let runs = [
        ("one server", redis.url(), vec![redis.port], 1usize),
        ("one server", redis.url(), vec![redis.port], 4),
        ("cluster, 3 masters", cluster.url(), cluster.masters(), 4),
    ];
    // `REDIS_BENCH_RUNS=2` runs the third configuration only.
    let only: Option<Vec<usize>> = std::env::var("REDIS_BENCH_RUNS")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.parse().ok()).collect());
    let mut breakdown = Vec::new();
    for (run, (name, url, masters, workers)) in runs.into_iter().enumerate() {
        if only.as_ref().is_some_and(|o| !o.contains(&run)) {
            continue;
        }
        for lab in &labs {
            lab.reset();
        }
        let job = format!("bench-{run}");
        let memory = || -> u64 {
            masters
                .iter()
                .filter_map(|&p| info_field(&command_on(p, &["INFO", "memory"])?, "used_memory"))
                .filter_map(|v| v.parse::<u64>().ok())
                .sum()
        };
        // Redis's own CPU (every master's), the workers' (children, once waited for) and
        // this process's (the labs): which of them a bigger cluster would relieve.
        let redis_cpu = || -> f64 {
            masters
                .iter()
                .filter_map(|&p| command_on(p, &["INFO", "cpu"]))
                .map(|info| {
                    ["used_cpu_sys", "used_cpu_user"]
                        .iter()
                        .filter_map(|f| info_field(&info, f)?.parse::<f64>().ok())
                        .sum::<f64>()
                })
                .sum()
        };
        let memory_before = memory();
        let cpu_before = (redis_cpu(), cpu::children_cpu_seconds(), cpu::cpu_seconds());
        let started = Instant::now();
        let children: Vec<Child> = (0..workers).map(|_| spawn(&url, &job, &urls)).collect();
        let Totals {
            pages,
            trips,
            commands,
            by_purpose,
            lease,
        } = Totals::of(children, started);
        let secs = started.elapsed().as_secs_f64();
        let cpu = [
            redis_cpu() - cpu_before.0,
            cpu::children_cpu_seconds() - cpu_before.1,
            cpu::cpu_seconds() - cpu_before.2,
        ];
        // What the job leaves once done: its seen sets, host states and stats.
        let kept = memory().saturating_sub(memory_before);
        let per_page = |s: f64| s * 1_000.0 / pages.max(1) as f64;
        println!(
            "| {name} | {workers} | {pages} | {secs:.1} | {:.0} | {:.2} | {:.2} | {:.0} | {:.3} / {:.3} / {:.3} | {:.2} |",
            pages as f64 / secs,
            trips as f64 / pages.max(1) as f64,
            commands as f64 / pages.max(1) as f64,
            kept as f64 / pages.max(1) as f64,
            per_page(cpu[0]),
            per_page(cpu[1]),
            per_page(cpu[2]),
            cpu.iter().sum::<f64>() / secs,
        );
        breakdown.push(format!(
            "{name}, {workers} workers: {}; {}",
            per_purpose(&by_purpose, pages),
            lease.show(pages)
        ));
    }
    println!("\nRound trips per page by purpose:\n");
    for b in breakdown {
        println!("- {b}");
    }
    drop(redis);
    drop(cluster);
    rt.block_on(async {
        for lab in labs {
            lab.shutdown().await;
        }
    });
}

/// Wait for a worker, at most `RUN_LIMIT` after the run started (then it is killed, and
/// the benchmark fails).
fn finish(mut c: Child, started: Instant) -> std::process::Output {
    const RUN_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);
    while c.try_wait().unwrap().is_none() {
        if started.elapsed() > RUN_LIMIT {
            let _ = c.kill();
            let _ = c.wait();
            panic!("a worker did not finish within {RUN_LIMIT:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

/// What the workers of one run reported on their `BENCH` lines, summed.
#[derive(Default)]
struct Totals {
    pages: u64,
    trips: u64,
    commands: u64,
    by_purpose: [u64; PURPOSES.len()],
    lease: Leases,
}

impl Totals {
    /// Wait for every worker (see [`finish`]) and add up its figures.
    fn of(children: Vec<Child>, started: Instant) -> Self {
        let mut t = Self::default();
        for c in children {
            let out = finish(c, started);
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "a worker failed: {text}");
            let line = text.lines().find(|l| l.starts_with("BENCH")).unwrap();
            let field = |name: &str| -> u64 {
                line.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
                    .and_then(|v| v.parse().ok())
                    .unwrap()
            };
            t.pages += field("pages");
            t.trips += field("trips");
            t.commands += field("commands");
            for (i, p) in PURPOSES.iter().enumerate() {
                t.by_purpose[i] += field(p);
            }
            t.lease.add(&field);
        }
        t
    }
}

/// Round trips per page by purpose, as `lease 1.02, fleet_read 0.01, ...`.
fn per_purpose(by_purpose: &[u64; PURPOSES.len()], pages: u64) -> String {
    PURPOSES
        .iter()
        .zip(by_purpose)
        .map(|(p, n)| format!("{p} {:.2}", *n as f64 / pages.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Lease answers and bytes, summed over the workers.
#[derive(Default)]
struct Leases {
    granted: u64,
    not_yet: u64,
    full: u64,
    asked: u64,
    sent: u64,
    received: u64,
}

impl Leases {
    fn add(&mut self, field: &dyn Fn(&str) -> u64) {
        self.granted += field("lease_granted");
        self.not_yet += field("lease_not_yet");
        self.full += field("lease_full");
        self.asked += field("leases");
        self.sent += field("lease_sent");
        self.received += field("lease_received");
    }

    fn show(&self, pages: u64) -> String {
        let pages = pages.max(1) as f64;
        let asked = self.asked.max(1) as f64;
        format!(
            "lease answers per page: granted {:.2}, not yet {:.2}, full {:.2}; bytes per \
             lease: {:.0} sent, {:.0} received",
            self.granted as f64 / pages,
            self.not_yet as f64 / pages,
            self.full as f64 / pages,
            self.sent as f64 / asked,
            self.received as f64 / asked
        )
    }
}

/// One hot host: every worker leases from the same paced lab host (see the module docs).
fn hot(counts: &str, books: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let lab = rt.block_on(async { Lab::builder().books(books).start().await.unwrap() });
    let redis = Redis::start();
    println!("One hot host: {books} books, a fixed 10 ms delay, 4 in flight fleet-wide\n");
    println!("| workers | pages | seconds | pages/s | round trips/page | by purpose | leases |");
    println!("|---:|---:|---:|---:|---:|---|---|");
    for (run, workers) in counts
        .split(',')
        .filter_map(|n| n.trim().parse::<usize>().ok())
        .enumerate()
    {
        lab.reset();
        let job = format!("hot-{run}");
        let started = Instant::now();
        let children: Vec<Child> = (0..workers)
            .map(|_| {
                let mut c = command(&redis.url(), &job, &[lab.url()]);
                c.env("REDIS_BENCH_PACED", "1");
                c.spawn().unwrap()
            })
            .collect();
        let Totals {
            pages,
            trips,
            by_purpose,
            lease,
            ..
        } = Totals::of(children, started);
        let secs = started.elapsed().as_secs_f64();
        println!(
            "| {workers} | {pages} | {secs:.1} | {:.0} | {:.2} | {} | {} |",
            pages as f64 / secs,
            trips as f64 / pages.max(1) as f64,
            per_purpose(&by_purpose, pages),
            lease.show(pages)
        );
    }
    drop(redis);
    rt.block_on(lab.shutdown());
}

fn spawn(url: &str, job: &str, urls: &[String]) -> Child {
    command(url, job, urls).spawn().unwrap()
}

fn command(url: &str, job: &str, urls: &[String]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.env("REDIS_BENCH_CHILD", "1")
        .env("REDIS_BENCH_URL", url)
        .env("REDIS_BENCH_JOB", job)
        .env("REDIS_BENCH_STARTS", urls.join(" "))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    c
}

fn child() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let starts: Vec<String> = std::env::var("REDIS_BENCH_STARTS")
        .unwrap()
        .split(' ')
        .map(str::to_owned)
        .collect();
    let paced = std::env::var_os("REDIS_BENCH_PACED").is_some();
    let stats = rt
        .block_on(
            Crawl::new(Many(starts))
                .set("redis_url", std::env::var("REDIS_BENCH_URL").unwrap())
                .set("job_name", std::env::var("REDIS_BENCH_JOB").unwrap())
                // Open hosts: pacing out of the way, so coordination is what is measured;
                // the hot host is paced, so every lease books a slot.
                .set("throttle", "fixed")
                .set("download_delay", if paced { "10ms" } else { "0s" })
                .set("randomize_delay", "false")
                .set("max_rate", "1000")
                .set("concurrency", "32")
                .set("concurrency_per_host", "4")
                .progress(false)
                .run(),
        )
        .unwrap();
    let purposes: Vec<String> = crawler::store::redis_round_trips_by_purpose()
        .iter()
        .map(|(what, n)| format!("{}={n}", what.replace(' ', "_")))
        .collect();
    let answers: Vec<String> = crawler::store::redis_lease_answers()
        .iter()
        .map(|(what, n)| format!("lease_{}={n}", what.replace(' ', "_")))
        .collect();
    let (leases, sent, received) = crawler::store::redis_lease_bytes();
    println!(
        "BENCH pages={} trips={} commands={} {} {} leases={leases} lease_sent={sent} \
         lease_received={received}",
        stats.fetched,
        crawler::store::redis_round_trips(),
        crawler::store::redis_commands(),
        purposes.join(" "),
        answers.join(" ")
    );
}
