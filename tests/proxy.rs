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

/// A tinyproxy on a free 127.0.0.1 port, with Basic credentials, logging each request.
struct Tinyproxy {
    child: std::process::Child,
    dir: tempfile::TempDir,
    port: u16,
}

impl Tinyproxy {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port on loopback")
            .port();
        let log = dir.path().join("tinyproxy.log");
        let conf = format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 200\nAllow 127.0.0.1\n\
             BasicAuth {USER} {PASSWORD}\nLogLevel Connect\nLogFile \"{}\"\n",
            log.display()
        );
        let conf_path = dir.path().join("tinyproxy.conf");
        std::fs::write(&conf_path, conf).expect("tinyproxy.conf");
        let child = std::process::Command::new("tinyproxy")
            .arg("-d")
            .arg("-c")
            .arg(&conf_path)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("tinyproxy must be installed (apt-get install tinyproxy)");
        // Owned first, so a proxy that never comes up is still killed (by `Drop`).
        let proxy = Self { child, dir, port };
        for _ in 0..250 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return proxy;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("tinyproxy did not come up on port {port}");
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
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
    // Without robots.txt, whose gate skips an unreachable host before its pages fail.
    .set("obey_robots", "false")
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
