//! The crawl's one resolver (issue 47) against a real DNS server: Debian's `dnsmasq`,
//! started by the tests on 127.0.0.1 with every query logged, answering names only it knows
//! (`*.dns.test`; the system's resolver does not, so a lookup that went around the crawl's
//! resolver would fail the crawl). What is measured:
//!
//! - one query per name per TTL: over a crawl of many requests per name, over concurrent
//!   lookups of one name, and a second query once the TTL has run out;
//! - every address of a multi-address name kept (the client's list, the frontier's key);
//! - `resolve` entries answered with no query at all;
//! - failures remembered (one query for a name that does not exist, however often asked);
//! - no lookup on a blocking thread and no `block_in_place`: the lookups, a fetch through
//!   the downloader and the frontier's keys run on a runtime that counts the threads it
//!   starts, and it starts none beyond its workers (`spawn_blocking`, which
//!   `getaddrinfo`-based lookups use, and `block_in_place`, which the frontier used, both
//!   start one).

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crawler::prelude::*;
use crawler_core::dns::NameCache;
use crawler_core::{Fetched, Url};
use crawler_http::{HttpDownloader, Resolver};
use crawler_lab::Lab;

/// A dnsmasq on a free 127.0.0.1 port, authoritative for `.test`, logging every query.
struct Dnsmasq {
    child: std::process::Child,
    _dir: tempfile::TempDir,
    log: PathBuf,
    port: u16,
}

impl Dnsmasq {
    /// Started with `ttl` seconds on its answers and `records` (dnsmasq options such as
    /// `--address=/wild.dns.test/127.0.0.1`).
    fn start(ttl: u32, records: &[String]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("queries.log");
        let port = std::net::UdpSocket::bind("127.0.0.1:0")
            .and_then(|s| s.local_addr())
            .expect("a free port on loopback")
            .port();
        let child = std::process::Command::new("dnsmasq")
            .args([
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--listen-address=127.0.0.1",
                "--bind-interfaces",
                "--no-resolv",
                "--no-hosts",
                "--log-queries",
                "--user=root",
                "--pid-file=",
                // Authoritative for .test: unknown names are NXDOMAIN, a name without an
                // IPv6 address answers AAAA with nothing, never REFUSED.
                "--local=/test/",
            ])
            .arg(format!("--port={port}"))
            .arg(format!("--local-ttl={ttl}"))
            .arg(format!("--log-facility={}", log.display()))
            .args(records)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("dnsmasq must be installed (apt-get install dnsmasq-base)");
        let dns = Self {
            child,
            _dir: dir,
            log,
            port,
        };
        // Up once it answers a probe over UDP.
        let probe = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05probe\x04test\x00\x00\x01\x00\x01";
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("a probe socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("a read timeout");
        for _ in 0..100 {
            let mut buf = [0u8; 512];
            if socket.send_to(probe, ("127.0.0.1", port)).is_ok() && socket.recv(&mut buf).is_ok() {
                return dns;
            }
        }
        panic!("dnsmasq did not come up on port {port}");
    }

    /// The `dns_servers` entry naming it.
    fn server(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The A queries it was asked for `name`.
    fn queries(&self, name: &str) -> usize {
        let wanted = format!("query[A] {name} from");
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.ends_with("127.0.0.1") && l.contains(&wanted))
            .filter(|l| {
                // Exactly this name, not one ending with it.
                l.split("query[A] ")
                    .nth(1)
                    .and_then(|r| r.split(' ').next())
                    == Some(name)
            })
            .count()
    }

    /// Every A query it was asked, by name.
    fn all_queries(&self) -> std::collections::HashMap<String, usize> {
        let mut by_name = std::collections::HashMap::new();
        for line in std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
        {
            if let Some(name) = line
                .split("query[A] ")
                .nth(1)
                .and_then(|r| r.split(' ').next())
            {
                *by_name.entry(name.to_owned()).or_insert(0) += 1;
            }
        }
        by_name
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn settings_for(dns: &Dnsmasq) -> Settings {
    Settings {
        dns_servers: vec![dns.server()],
        ..Settings::default()
    }
}

/// The lab on a runtime of its own (a thread of its own), so the runtime under test runs
/// only the crawler's side.
fn lab_apart(
    books: usize,
) -> (
    Lab,
    std::thread::JoinHandle<()>,
    tokio::sync::oneshot::Sender<()>,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("the lab's runtime");
        rt.block_on(async move {
            let lab = Lab::builder()
                .books(books)
                .start()
                .await
                .expect("lab starts");
            let _ = tx.send(lab);
            let _ = stop_rx.await;
        });
    });
    let lab = rx.recv().expect("the lab started");
    (lab, thread, stop_tx)
}

#[test]
fn one_query_per_name_per_ttl_every_address_and_no_blocking_thread() {
    let dns = Dnsmasq::start(
        2,
        &[
            "--address=/wild.dns.test/127.0.0.1".to_owned(),
            "--host-record=multi.dns.test,127.0.0.3".to_owned(),
            "--host-record=multi.dns.test,127.0.0.2".to_owned(),
        ],
    );
    let (lab, lab_thread, stop_lab) = lab_apart(100);
    let port = lab.addr().port();
    // Two workers; every thread this runtime starts beyond them is a blocking one
    // (`spawn_blocking`, or a replacement worker for `block_in_place`).
    let started = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&started);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .expect("runtime");
    let mut settings = settings_for(&dns);
    settings.resolve = vec!["fixed.dns.test:127.0.0.1".to_owned()];
    let resolver = Resolver::from_settings(&settings).expect("resolver");
    runtime.block_on(async {
        // 50 lookups of one name at once: one query.
        let mut lookups = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let resolver = Arc::clone(&resolver);
            lookups.spawn(async move { resolver.lookup("a.wild.dns.test").await });
        }
        for answer in lookups.join_all().await {
            let addrs = answer.expect("a.wild.dns.test resolves");
            assert_eq!(&*addrs, [IpAddr::from([127, 0, 0, 1])]);
        }
        assert_eq!(dns.queries("a.wild.dns.test"), 1);
        // Every address of a name is kept.
        let multi = resolver.lookup("multi.dns.test").await.expect("multi");
        let mut sorted = multi.to_vec();
        sorted.sort();
        assert_eq!(
            sorted,
            [IpAddr::from([127, 0, 0, 2]), IpAddr::from([127, 0, 0, 3])]
        );
        // A failure is remembered: one query however often asked.
        for _ in 0..5 {
            let err = resolver.lookup("nowhere.dns.test").await.unwrap_err();
            assert!(err.contains("failed to lookup address"), "{err}");
        }
        assert_eq!(dns.queries("nowhere.dns.test"), 1);
        // `resolve` answers without DNS.
        let fixed = resolver.lookup("fixed.dns.test").await.expect("fixed");
        assert_eq!(&*fixed, [IpAddr::from([127, 0, 0, 1])]);
        assert_eq!(dns.queries("fixed.dns.test"), 0);

        // The frontier's keys read the same cache: every address kept, the lowest keys.
        let keys = Arc::new(crawler_sched::IpKeys::shared(
            Arc::clone(&resolver) as Arc<dyn NameCache>
        ));
        let url = |s: &str| Url::parse(s).expect("URL");
        assert_eq!(keys.addresses(&url("http://multi.dns.test/")).len(), 2);
        assert_eq!(keys.key(&url("http://multi.dns.test:81/")), "127.0.0.2:81");
        // A name not resolved yet keys as itself and is looked up in the background; the
        // engine's resolve-ahead makes that a rare miss.
        let ahead = keys
            .resolve_ahead(Vec::new())
            .expect("keys from a resolver");
        ahead
            .resolve_ahead(vec![
                url("http://b.wild.dns.test/"),
                url("http://c.wild.dns.test/"),
            ])
            .await;
        assert_eq!(keys.key(&url("http://b.wild.dns.test/")), "127.0.0.1");
        assert_eq!(keys.misses(), 0);
        assert_eq!(
            keys.key(&url("http://late.wild.dns.test/")),
            "late.wild.dns.test"
        );
        assert_eq!(keys.misses(), 1);
        for _ in 0..100 {
            if resolver.cached("late.wild.dns.test").addresses().is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(keys.key(&url("http://late.wild.dns.test/")), "127.0.0.1");

        // The downloader connects through the same resolver: robots.txt and the page cost
        // no query for a name already looked up.
        let downloader =
            HttpDownloader::with_resolver(&settings, Arc::clone(&resolver)).expect("downloader");
        for path in ["", "catalogue/page-1.html"] {
            let req = Request::get(format!("http://c.wild.dns.test:{port}/{path}")).expect("URL");
            let got = downloader.fetch_once(&req).await;
            match got.outcome {
                Fetched::Response(r) => assert_eq!(r.status(), 200),
                other => panic!("the page through the resolver: {other:?}"),
            }
        }
        assert_eq!(dns.queries("c.wild.dns.test"), 1);
        assert_eq!(dns.queries("b.wild.dns.test"), 1);

        // Once the TTL (2 s) has run out, one more query.
        tokio::time::sleep(Duration::from_millis(2_600)).await;
        resolver.lookup("a.wild.dns.test").await.expect("again");
        resolver
            .lookup("a.wild.dns.test")
            .await
            .expect("cached again");
        assert_eq!(dns.queries("a.wild.dns.test"), 2);
    });
    assert_eq!(
        started.load(Ordering::SeqCst),
        2,
        "threads beyond the 2 workers: a lookup blocked a thread"
    );
    drop(runtime);
    let _ = stop_lab.send(());
    let _ = lab_thread.join();
}

/// One page (three URLs of it) on each of `hosts` names under `wild.dns.test`, plus the
/// names `resolve` answers.
struct Names {
    hosts: usize,
    port: u16,
    fixed: Vec<String>,
}

impl Spider for Names {
    type Item = String;
    fn name(&self) -> &str {
        "names"
    }
    fn start_requests(&self) -> Result<Vec<Request>> {
        let names = (0..self.hosts)
            .map(|i| format!("h{i}.wild.dns.test"))
            .chain(self.fixed.iter().cloned());
        let mut out = Vec::new();
        for name in names {
            for n in 0..3 {
                out.push(Request::get(format!("http://{name}:{}/?n={n}", self.port))?);
            }
        }
        Ok(out)
    }
    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        out.item(page.url().to_string());
        Ok(())
    }
}

/// A crawl of many names, each asked for robots.txt and three pages: one query per name,
/// none for the names `resolve` answers, every item in. `hosts` names under
/// `wild.dns.test`.
async fn crawl_names(hosts: usize, dns: &Dnsmasq) {
    let lab = Lab::builder()
        .books(100)
        .record_limit(0)
        .start()
        .await
        .expect("lab starts");
    let fixed = vec!["fixed-a.dns.test".to_owned(), "fixed-b.dns.test".to_owned()];
    let spider = Names {
        hosts,
        port: lab.addr().port(),
        fixed: fixed.clone(),
    };
    let engine = Crawl::new(spider)
        .set("dns_servers", dns.server())
        .set(
            "resolve",
            "fixed-a.dns.test:127.0.0.1, fixed-b.dns.test:127.0.0.1",
        )
        .set("concurrency", "64")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("log_level", "warn")
        .progress(false)
        .build()
        .expect("engine");
    let stats = engine.run().await.expect("the crawl runs");
    let names = hosts + fixed.len();
    // No name failed to resolve. Over 10,000 hosts on a loaded machine a few connections
    // to the lab may still fail after their retries (as `connection`, each name resolved);
    // the small crawl must get every item.
    assert_eq!(stats.failed.get("dns"), None, "{:?}", stats.failed);
    let lost = if hosts > 1_000 {
        stats.failed.get("connection").copied().unwrap_or(0)
    } else {
        0
    };
    assert_eq!(
        stats.items_scraped + lost,
        3 * names as u64,
        "items {}, failed {:?}",
        stats.items_scraped,
        stats.failed
    );
    let asked = dns.all_queries();
    let not_once: Vec<(String, Option<&usize>)> = (0..hosts)
        .map(|i| format!("h{i}.wild.dns.test"))
        .filter(|name| asked.get(name) != Some(&1))
        .map(|name| {
            let n = asked.get(&name);
            (name, n)
        })
        .collect();
    assert!(
        not_once.is_empty(),
        "{} of {hosts} names not asked exactly once, e.g. {:?}",
        not_once.len(),
        &not_once[..not_once.len().min(5)]
    );
    for name in &fixed {
        assert_eq!(asked.get(name), None, "{name} is in resolve: no query");
    }
    assert_eq!(
        asked.values().sum::<usize>(),
        hosts + 1,
        "{hosts} names and the probe"
    );
    // The stats count the same: one lookup per name, none failed, and every connection to
    // a `resolve` name (and those after a name's first) answered without a lookup.
    assert_eq!(stats.dns.lookups, hosts as u64, "{stats}");
    assert_eq!(stats.dns.failed, 0, "{stats}");
    assert!(stats.dns.cached >= fixed.len() as u64, "{stats}");
    assert!(
        stats.dns.cached + stats.dns.lookups >= names as u64,
        "every name asked for by a connection: {stats}"
    );
    let json = serde_json::to_value(&stats).expect("stats to JSON");
    assert_eq!(json["dns"]["lookups"], hosts, "{json}");
    assert!(
        stats
            .to_string()
            .contains(&format!("dns                {hosts} lookups")),
        "{stats}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crawl_asks_each_name_once_and_resolve_entries_never() {
    let dns = Dnsmasq::start(300, &["--address=/wild.dns.test/127.0.0.1".to_owned()]);
    crawl_names(40, &dns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the 10,000-host figure (BENCHMARKS.md, \"DNS: one lookup per name\"): cargo test --test all dns:: -- --ignored"]
async fn ten_thousand_hosts_one_query_each() {
    let dns = Dnsmasq::start(300, &["--address=/wild.dns.test/127.0.0.1".to_owned()]);
    let started = std::time::Instant::now();
    crawl_names(10_000, &dns).await;
    println!("10,000 hosts, one query each, in {:?}", started.elapsed());
}
