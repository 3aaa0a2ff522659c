//! Proxies per host and per request (issue 47): a real HTTP proxy (Debian's `tinyproxy`,
//! with Basic credentials) and a real SOCKS5 one (Debian's `microsocks`) started by the
//! tests, a `[[hosts]]` rule sending one lab's
//! requests through it, a request with its own proxy, and another lab reached directly.
//! The proxy's log says which requests went through it; the password appears nowhere in
//! what the crawl prints. Everything stays on 127.0.0.1.

use std::collections::HashSet;

use crawler::prelude::*;
use crawler_lab::Lab;

/// The proxy's Basic credentials; the password must never be printed.
const USER: &str = "crawler";
const PASSWORD: &str = "pr0xy-s3cret-pw";

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Book {
    url: String,
    title: String,
}

/// Crawls the books of several labs; the books of URLs starting with `via.0` go out with
/// the request's own proxy `via.1`.
struct Shelves {
    starts: Vec<String>,
    via: Option<(String, String)>,
}

impl Spider for Shelves {
    type Item = Book;
    fn name(&self) -> &str {
        "shelves"
    }
    fn start_urls(&self) -> Vec<String> {
        self.starts.clone()
    }
    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        if page.callback() == Some("book") {
            out.item(Book {
                url: page.url().to_string(),
                title: page.text_of("div.product h1")?,
            });
            return Ok(());
        }
        for href in page.select("a").attrs("href") {
            let Ok(url) = page.url().join(&href) else {
                continue;
            };
            let book = href.contains("book-");
            match &self.via {
                Some((prefix, proxy)) if book && url.as_str().starts_with(prefix.as_str()) => {
                    out.request(Request::get(url.as_str())?.callback("book").proxy(proxy));
                }
                _ if book => {
                    out.follow(href).callback("book");
                }
                _ => {
                    out.follow(href);
                }
            }
        }
        Ok(())
    }
}

/// A tinyproxy on a free 127.0.0.1 port, with Basic credentials, logging each request. It
/// can be killed (by its process id) and started again on the same port.
struct Tinyproxy {
    child: std::sync::Mutex<std::process::Child>,
    dir: tempfile::TempDir,
    port: u16,
}

impl Tinyproxy {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let log = dir.path().join("tinyproxy.log");
        let conf = format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 200\nAllow 127.0.0.1\n\
             BasicAuth {USER} {PASSWORD}\nLogLevel Connect\nLogFile \"{}\"\n",
            log.display()
        );
        std::fs::write(dir.path().join("tinyproxy.conf"), conf).expect("tinyproxy.conf");
        let child = Self::spawn(dir.path());
        // Owned first, so a proxy that never comes up is still killed (by `Drop`).
        let proxy = Self {
            child: std::sync::Mutex::new(child),
            dir,
            port,
        };
        wait_listening(port, "tinyproxy");
        proxy
    }

    /// tinyproxy with the configuration in `dir` (its port is in it).
    fn spawn(dir: &std::path::Path) -> std::process::Child {
        std::process::Command::new("tinyproxy")
            .arg("-d")
            .arg("-c")
            .arg(dir.join("tinyproxy.conf"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("tinyproxy must be installed (apt-get install tinyproxy)")
    }

    /// Kill the proxy by its process id (SIGKILL: connections through it are cut).
    fn kill(&self) {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Start the proxy again, on the same port, once killed.
    fn restart(&self) {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        *child = Self::spawn(self.dir.path());
        drop(child);
        wait_listening(self.port, "tinyproxy");
    }

    /// The proxy's URL with `password`.
    fn url(&self, password: &str) -> String {
        format!("http://{USER}:{password}@127.0.0.1:{}", self.port)
    }

    /// The absolute URLs of the requests the proxy forwarded.
    fn forwarded(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("tinyproxy.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_once("): GET ").map(|(_, r)| r))
            .filter_map(|r| r.split_whitespace().next().map(str::to_owned))
            .collect()
    }
}

impl Drop for Tinyproxy {
    fn drop(&mut self) {
        // Our own child, by its id.
        self.kill();
    }
}

/// A free TCP port on 127.0.0.1 (free when asked; the server binds it right after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on loopback")
        .port()
}

/// Wait (at most 5 s) until something listens on `port`, or panic naming `what`.
fn wait_listening(port: u16, what: &str) {
    for _ in 0..250 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("{what} did not come up on port {port}");
}

/// The lab's host key, `127.0.0.1:port`.
fn host_of(lab: &Lab) -> String {
    let url = url::Url::parse(&lab.url()).expect("lab URL");
    format!("127.0.0.1:{}", url.port().expect("lab port"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_rule_and_a_request_proxy_go_through_the_proxy_and_other_hosts_go_direct() {
    let proxy = Tinyproxy::start();
    // `ruled`: every request through the proxy by its `[[hosts]]` rule. `direct`: no rule,
    // but its book pages carry the proxy as their own (`Request::proxy`); its listings go
    // direct. `plain`: nothing through the proxy.
    let ruled = Lab::builder().books(100).start().await.expect("lab starts");
    let mixed = Lab::builder().books(100).start().await.expect("lab starts");
    let plain = Lab::builder().books(100).start().await.expect("lab starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let items = dir.path().join("items.jsonl");
    let failures = dir.path().join("failures.jsonl");
    let rules = serde_json::json!([
        { "match": host_of(&ruled), "proxy": proxy.url(PASSWORD) }
    ])
    .to_string();
    let stats = Crawl::new(Shelves {
        starts: vec![ruled.url(), mixed.url(), plain.url()],
        via: Some((mixed.url(), proxy.url(PASSWORD))),
    })
    .feed(&items)
    .expect("feed path")
    .set("hosts", rules)
    .set("failures_file", failures.to_string_lossy())
    .set("concurrency_per_host", "4")
    .set("throttle", "fixed")
    .set("download_delay", "0s")
    .progress(false)
    .run()
    .await
    .expect("crawl runs");

    let books: Vec<Book> = std::fs::read_to_string(&items)
        .expect("items file")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(books.len(), 300, "{stats}");
    let urls: HashSet<&str> = books.iter().map(|b| b.url.as_str()).collect();
    assert_eq!(urls.len(), 300, "every book once: {stats}");

    let forwarded = proxy.forwarded();
    let through = |lab: &Lab| -> Vec<&String> {
        forwarded
            .iter()
            .filter(|u| u.starts_with(lab.url().as_str()))
            .collect()
    };
    // Every request the ruled lab saw came through the proxy: as many as it recorded.
    let ruled_seen = ruled.recorder().requests().len();
    assert!(ruled_seen > 100, "{ruled_seen}");
    assert_eq!(through(&ruled).len(), ruled_seen, "{forwarded:?}");
    // The mixed lab's book pages came through the proxy, its listings directly.
    let mixed_books: Vec<&String> = through(&mixed);
    assert_eq!(mixed_books.len(), 100, "{forwarded:?}");
    assert!(
        mixed_books.iter().all(|u| u.contains("book-")),
        "{mixed_books:?}"
    );
    assert!(mixed.recorder().requests().len() > 100);
    // Nothing of the plain lab went through the proxy.
    assert!(through(&plain).is_empty(), "{forwarded:?}");
    assert!(plain.recorder().requests().len() > 100);

    // The password is printed nowhere: not in the stats, the failures file, or the settings.
    let mut settings = Settings::default();
    settings
        .set(
            "hosts",
            &serde_json::json!([{ "match": "x.test", "proxy": proxy.url(PASSWORD) }]).to_string(),
        )
        .expect("a proxy rule");
    let printed = format!(
        "{stats}\n{stats:?}\n{}\n{settings:?}",
        std::fs::read_to_string(&failures).unwrap_or_default()
    );
    assert!(!printed.contains(PASSWORD), "{printed}");
    assert!(
        printed.contains(USER),
        "the user name stays readable: {printed}"
    );
    ruled.shutdown().await;
    mixed.shutdown().await;
    plain.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_refusing_the_connection_fails_the_requests_without_printing_the_password() {
    let lab = Lab::builder().books(100).start().await.expect("lab starts");
    // A port nothing listens on: the proxy refuses the connection.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let bad = format!("http://{USER}:{PASSWORD}@127.0.0.1:{closed}");
    let dir = tempfile::tempdir().expect("tempdir");
    let failures = dir.path().join("failures.jsonl");
    let rules = serde_json::json!([
        { "match": host_of(&lab), "proxy": bad },
    ])
    .to_string();
    let stats = Crawl::new(Shelves {
        starts: vec![lab.url()],
        via: None,
    })
    .set("hosts", rules)
    .set("failures_file", failures.to_string_lossy())
    .set("throttle", "fixed")
    .set("download_delay", "0s")
    .set("retry_times", "1")
    .progress(false)
    .run()
    .await
    .expect("crawl runs");
    assert_eq!(stats.items_scraped, 0, "{stats}");
    assert!(
        lab.recorder().requests().is_empty(),
        "nothing reached the origin"
    );
    let text = std::fs::read_to_string(&failures).unwrap_or_default();
    let printed = format!("{stats}\n{stats:?}\n{text}");
    assert!(!printed.contains(PASSWORD), "{printed}");
    // The start page failed in the proxy's class, after its retry.
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(records.len(), 1, "{text}");
    assert_eq!(records[0]["reason"], "proxy", "{text}");
    assert_eq!(records[0]["attempts"], 2, "{text}");
    // robots.txt is obeyed, and its failure through the proxy is the proxy's: the host is
    // neither skipped as unreachable nor held.
    assert_eq!(stats.skipped_host, 0, "{stats}");
    assert!(stats.hosts.iter().all(|h| h.skipped.is_none()), "{stats}");
    // Both attempts (and the robots.txt fetches before them) counted on the proxy, the
    // attempts as `proxy` failures.
    let (_, figures) = only_proxy(&stats);
    assert!(figures.requests >= 2, "{stats}");
    assert_eq!(figures.failed.get("proxy"), Some(&2), "{stats}");
    lab.shutdown().await;
}

/// A microsocks SOCKS5 server on a free 127.0.0.1 port, with credentials; it prints one line
/// per connection it makes (`client[n] 127.0.0.1: connected to HOST:PORT`).
struct Microsocks {
    child: std::process::Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Microsocks {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port on loopback")
            .port();
        let out = std::fs::File::create(dir.path().join("microsocks.log")).expect("log file");
        let child = std::process::Command::new("microsocks")
            .args(["-i", "127.0.0.1", "-p", &port.to_string()])
            .args(["-u", USER, "-P", PASSWORD])
            // It logs on stderr (unbuffered); stdout too, in case.
            .stdout(out.try_clone().expect("log file"))
            .stderr(out)
            .spawn()
            .expect("microsocks must be installed (apt-get install microsocks)");
        // Owned first, so a server that never comes up is still killed (by `Drop`).
        let socks = Self { child, dir, port };
        for _ in 0..250 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return socks;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("microsocks did not come up on port {port}");
    }

    /// How many connections the server made to `host` (`127.0.0.1:port`).
    fn connections_to(&self, host: &str) -> usize {
        std::fs::read_to_string(self.dir.path().join("microsocks.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.ends_with(&format!("connected to {host}")))
            .count()
    }
}

impl Drop for Microsocks {
    fn drop(&mut self) {
        // Our own child, by its id.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socks5_proxy_in_a_hosts_rule_carries_every_request_of_its_hosts() {
    let socks = Microsocks::start();
    let ruled = Lab::builder().books(100).start().await.expect("lab starts");
    let plain = Lab::builder().books(100).start().await.expect("lab starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let items = dir.path().join("items.jsonl");
    let url = format!("socks5h://{USER}:{PASSWORD}@127.0.0.1:{}", socks.port);
    let rules = serde_json::json!([{ "match": host_of(&ruled), "proxy": url }]).to_string();
    let stats = Crawl::new(Shelves {
        starts: vec![ruled.url(), plain.url()],
        via: None,
    })
    .feed(&items)
    .expect("feed path")
    .set("hosts", rules)
    .set("concurrency_per_host", "4")
    .set("throttle", "fixed")
    .set("download_delay", "0s")
    .progress(false)
    .run()
    .await
    .expect("crawl runs");
    let lines = std::fs::read_to_string(&items).expect("items file");
    assert_eq!(lines.lines().count(), 200, "{stats}");
    // Connections are kept alive, so fewer than requests, but some went through the proxy
    // and none of the plain lab's.
    assert!(ruled.recorder().requests().len() > 100);
    assert!(socks.connections_to(&host_of(&ruled)) > 0, "{stats}");
    assert_eq!(socks.connections_to(&host_of(&plain)), 0);
    let printed = format!("{stats}\n{stats:?}");
    assert!(!printed.contains(PASSWORD), "{printed}");
    ruled.shutdown().await;
    plain.shutdown().await;
}

/// Crawls one lab's books, and once the `at`-th book is parsed calls `then` (which kills
/// the proxy the crawl goes through).
struct KillAt {
    start: String,
    at: usize,
    seen: std::sync::atomic::AtomicUsize,
    then: Box<dyn Fn() + Send + Sync>,
}

impl Spider for KillAt {
    type Item = Book;
    fn name(&self) -> &str {
        "kill_at"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }
    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        if page.callback() == Some("book") {
            out.item(Book {
                url: page.url().to_string(),
                title: page.text_of("div.product h1")?,
            });
            let n = self.seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            if n == self.at {
                (self.then)();
            }
            return Ok(());
        }
        for href in page.select("a").attrs("href") {
            if href.contains("book-") {
                out.follow(href).callback("book");
            } else {
                out.follow(href);
            }
        }
        Ok(())
    }
}

/// Books of the lab the mid-crawl tests crawl, and the book after which the proxy is killed.
const MID_BOOKS: usize = 300;
const KILL_AT: usize = MID_BOOKS / 4;

/// Crawl `lab` through `proxy` by a `[[hosts]]` rule, robots.txt obeyed, calling `then` at
/// the `KILL_AT`-th book: the items, the failures file's records, the stats.
async fn crawl_killing(
    lab: &Lab,
    proxy: &str,
    retry_times: &str,
    then: Box<dyn Fn() + Send + Sync>,
) -> (Vec<Book>, Vec<serde_json::Value>, Stats) {
    let dir = tempfile::tempdir().expect("tempdir");
    let items = dir.path().join("items.jsonl");
    let failures = dir.path().join("failures.jsonl");
    let rules = serde_json::json!([{ "match": host_of(lab), "proxy": proxy }]).to_string();
    let stats = Crawl::new(KillAt {
        start: lab.url(),
        at: KILL_AT,
        seen: std::sync::atomic::AtomicUsize::new(0),
        then,
    })
    .feed(&items)
    .expect("feed path")
    .set("hosts", rules)
    .set("failures_file", failures.to_string_lossy())
    .set("concurrency_per_host", "4")
    .set("throttle", "fixed")
    .set("download_delay", "0s")
    .set("retry_times", retry_times)
    .set("retry_backoff_base", "100ms")
    .set("retry_backoff_cap", "1s")
    .progress(false)
    .run()
    .await
    .expect("crawl runs");
    let books = std::fs::read_to_string(&items)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let records = std::fs::read_to_string(&failures)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    (books, records, stats)
}

/// The one proxy in `stats.proxies`: its name (as printed) and figures; the name must not
/// hold the password.
fn only_proxy(stats: &Stats) -> (String, crawler::core::ProxyStats) {
    assert_eq!(stats.proxies.len(), 1, "{stats}");
    let (name, figures) = stats.proxies.iter().next().expect("one proxy");
    assert!(!name.contains(PASSWORD), "{name}");
    assert!(name.contains(USER), "{name}");
    (name.clone(), figures.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_killed_mid_crawl_leaves_each_later_url_in_the_failures_file_as_proxy() {
    let proxy = std::sync::Arc::new(Tinyproxy::start());
    let lab = Lab::builder()
        .books(MID_BOOKS)
        .start()
        .await
        .expect("lab starts");
    let killer = std::sync::Arc::clone(&proxy);
    let (books, records, stats) = crawl_killing(
        &lab,
        &proxy.url(PASSWORD),
        "2",
        Box::new(move || killer.kill()),
    )
    .await;
    // The proxy died after KILL_AT books and never came back: what was fetched before is
    // there, and every request that had not ended is in the failures file, in the proxy's
    // class, once, after its retries.
    assert!(books.len() >= KILL_AT, "{stats}");
    assert!(
        books.len() < MID_BOOKS,
        "the proxy was killed mid-crawl: {stats}"
    );
    assert!(!records.is_empty(), "{stats}");
    let reasons: HashSet<&str> = records
        .iter()
        .map(|r| r["reason"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(reasons, HashSet::from(["proxy"]), "{records:?}");
    assert!(records.iter().all(|r| r["attempts"] == 3), "{records:?}");
    let failed: HashSet<&str> = records
        .iter()
        .map(|r| r["url"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(failed.len(), records.len(), "each URL once: {records:?}");
    let fetched: HashSet<&str> = books.iter().map(|b| b.url.as_str()).collect();
    assert!(fetched.is_disjoint(&failed), "{records:?}");
    // Every request enqueued ended: fetched, filtered or failed as `proxy`, nothing else.
    assert_eq!(stats.failed.len(), 1, "{stats}");
    assert_eq!(
        stats.failed.get("proxy"),
        Some(&(records.len() as u64)),
        "{stats}"
    );
    assert_eq!(stats.skipped_host, 0, "{stats}");
    assert!(stats.reconciles(), "{stats}");
    // Per proxy: every attempt counted, the failures by class; redacted in the JSON stats.
    let (name, figures) = only_proxy(&stats);
    assert!(
        figures.requests >= books.len() as u64 + 3 * records.len() as u64,
        "{stats}"
    );
    assert!(
        figures.failed.get("proxy").copied().unwrap_or(0) >= 2 * records.len() as u64,
        "{stats}"
    );
    let json = serde_json::to_value(&stats).expect("stats to JSON");
    assert_eq!(
        json["proxies"][&name]["requests"], figures.requests,
        "{json}"
    );
    let printed = format!("{stats}\n{json}");
    assert!(printed.contains(&format!("proxy {name}:")), "{printed}");
    assert!(!printed.contains(PASSWORD), "{printed}");
    lab.shutdown().await;
}

/// How long the proxy stays down before it is started again.
const OUTAGE: std::time::Duration = std::time::Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_killed_mid_crawl_and_back_after_an_outage_loses_no_item() {
    let proxy = std::sync::Arc::new(Tinyproxy::start());
    let lab = Lab::builder()
        .books(MID_BOOKS)
        .start()
        .await
        .expect("lab starts");
    let killer = std::sync::Arc::clone(&proxy);
    let restarted = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&restarted);
    let (books, records, stats) = crawl_killing(
        &lab,
        &proxy.url(PASSWORD),
        // Enough retries (full-jitter backoff, 100 ms doubling to at most 1 s) to span the
        // outage several times over.
        "10",
        Box::new(move || {
            killer.kill();
            let proxy = std::sync::Arc::clone(&killer);
            let flag = std::sync::Arc::clone(&flag);
            // The outage is the scenario: the proxy comes back after it, on its own thread.
            std::thread::spawn(move || {
                std::thread::sleep(OUTAGE);
                proxy.restart();
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            });
        }),
    )
    .await;
    assert!(restarted.load(std::sync::atomic::Ordering::SeqCst));
    // Every item, each once, and nothing in the failures file.
    assert_eq!(books.len(), MID_BOOKS, "{stats}");
    let urls: HashSet<&str> = books.iter().map(|b| b.url.as_str()).collect();
    assert_eq!(urls.len(), MID_BOOKS, "{stats}");
    assert!(records.is_empty(), "{records:?}");
    assert!(stats.failed.is_empty(), "{stats}");
    // The outage was seen: requests failed against the dead proxy and were retried.
    let (_, figures) = only_proxy(&stats);
    assert!(!figures.failed.is_empty(), "{stats}");
    assert!(stats.retries > 0, "{stats}");
    lab.shutdown().await;
}

/// stunnel (Debian's `stunnel4`) on a free 127.0.0.1 port, speaking TLS with a certificate
/// made by the test and passing each connection on to `to` in the clear: an `https://`
/// proxy in front of a tinyproxy.
struct Stunnel {
    child: std::process::Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Stunnel {
    fn start(to: u16) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        crate::network::make_certificates(dir.path());
        let port = free_port();
        let d = dir.path().display();
        let conf = format!(
            "foreground = yes\npid =\ndebug = 5\noutput = {d}/stunnel.log\n\
             [proxy]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:{to}\n\
             cert = {d}/server.pem\nkey = {d}/server.key\n"
        );
        std::fs::write(dir.path().join("stunnel.conf"), conf).expect("stunnel.conf");
        let child = std::process::Command::new("stunnel4")
            .arg(dir.path().join("stunnel.conf"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("stunnel must be installed (apt-get install stunnel4)");
        // Owned first, so a server that never comes up is still killed (by `Drop`).
        let stunnel = Self { child, dir, port };
        wait_listening(port, "stunnel");
        stunnel
    }

    fn ca_file(&self) -> String {
        self.dir
            .path()
            .join("ca.pem")
            .to_string_lossy()
            .into_owned()
    }

    /// How many TLS connections stunnel accepted and passed on.
    fn connections(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("stunnel.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("accepted connection from"))
            .count()
    }
}

impl Drop for Stunnel {
    fn drop(&mut self) {
        // Our own child, by its id.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_proxy_is_reached_over_tls_and_carries_every_request() {
    let proxy = Tinyproxy::start();
    let tls = Stunnel::start(proxy.port);
    let lab = Lab::builder().books(100).start().await.expect("lab starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let items = dir.path().join("items.jsonl");
    let url = format!("https://{USER}:{PASSWORD}@127.0.0.1:{}", tls.port);
    let failures = dir.path().join("failures.jsonl");
    let crawl = |ca: Option<String>, items: &std::path::Path| {
        let mut crawl = Crawl::new(Shelves {
            starts: vec![lab.url()],
            via: None,
        })
        .feed(items)
        .expect("feed path")
        .set("proxy", url.as_str())
        .set("failures_file", failures.to_string_lossy())
        .set("concurrency_per_host", "4")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        // tinyproxy may close a kept-alive connection as the next request goes out on it
        // ("connection closed before message completed"): a `connection` failure the
        // engine retries, as it would with any server.
        .set("retry_times", "2")
        .progress(false);
        if let Some(ca) = ca {
            crawl = crawl.set("tls_ca_file", ca);
        }
        crawl.run()
    };
    // Without the test's CA the proxy's certificate is not trusted: nothing goes through.
    let stats = crawl(None, &dir.path().join("untrusted.jsonl"))
        .await
        .expect("crawl runs");
    assert_eq!(stats.items_scraped, 0, "{stats}");
    assert!(lab.recorder().requests().is_empty());
    assert!(proxy.forwarded().is_empty());
    // Trusted: every book, every request through the proxy, on TLS connections to it.
    let stats = crawl(Some(tls.ca_file()), &items)
        .await
        .expect("crawl runs");
    let lines = std::fs::read_to_string(&items).expect("items file");
    let failed = std::fs::read_to_string(&failures).unwrap_or_default();
    assert_eq!(lines.lines().count(), 100, "{stats}\n{failed}");
    let seen = lab.recorder().requests().len();
    assert!(seen > 100, "{seen}");
    assert_eq!(proxy.forwarded().len(), seen, "{stats}");
    assert!(tls.connections() > 0, "{stats}");
    let (name, figures) = only_proxy(&stats);
    assert!(name.starts_with("https://"), "{name}");
    // Every attempt counted: those that reached the lab, and those the proxy's connection
    // failed (counted as failed).
    let failed: u64 = figures.failed.values().sum();
    assert!(figures.requests >= seen as u64, "{stats}");
    assert!(figures.requests - failed <= seen as u64, "{stats}");
    lab.shutdown().await;
}
