//! The address policy end to end (issue 34): a crawl started on loopback goes on within it,
//! a link to the cloud metadata service is refused before anything is sent, and a page
//! served from a public address cannot lead into private space.
//!
//! No test here sends a packet off loopback even if the policy broke: the crawls that meet a
//! metadata link go through the lab as their proxy, so an escaped request would reach the
//! lab (and its recorder) rather than 169.254.169.254.

use crawler::core::address::FROM_PRIVATE_META;
use crawler::core::{FailureKind, Fetched};
use crawler::http::HttpDownloader;
use crawler::prelude::*;
use crawler_lab::{Lab, ScriptReply};

const METADATA: &str = "http://169.254.169.254/latest/meta-data/";

/// Follows every link of the lab's listing pages, and a metadata link from each of them.
struct Curious {
    start: String,
}

impl Spider for Curious {
    type Item = String;
    fn name(&self) -> &str {
        "curious"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }
    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        if let Some(h1) = page.select_first("div.product h1") {
            out.item(h1.text());
        }
        for a in page.select("a[href]") {
            if let Some(href) = a.attr("href") {
                out.follow(href);
            }
        }
        out.follow(METADATA);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_crawl_goes_on_but_never_requests_the_metadata_service() {
    let lab = Lab::builder().books(100).start().await.expect("lab starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let failures = dir.path().join("failures.jsonl");
    for deny_private in ["false", "true"] {
        let stats = Crawl::new(Curious { start: lab.url() })
            .set("deny_private_addresses", deny_private)
            // The lab is also the proxy: an escaped request lands on loopback, recorded.
            .set("proxy", lab.url())
            .set("allow_unchecked_proxy", "true")
            .set("failures_file", failures.to_string_lossy())
            .set("throttle", "fixed")
            .set("download_delay", "0s")
            .set("concurrency_per_host", "8")
            .progress(false)
            .run()
            .await
            .expect("crawl runs");
        assert_eq!(
            stats.items_scraped, 100,
            "deny_private_addresses={deny_private}: a loopback start is crawled: {stats}"
        );
        assert_eq!(
            stats.failed.get("forbidden_address").copied(),
            Some(1),
            "{stats}"
        );
        assert!(stats.reconciles(), "{stats:?}");
        let text = std::fs::read_to_string(&failures).expect("failures file");
        let line = text
            .lines()
            .find(|l| l.contains("169.254.169.254"))
            .unwrap_or_else(|| panic!("the refusal is in the failures file: {text}"));
        let record: serde_json::Value = serde_json::from_str(line).expect("JSON line");
        assert_eq!(record["reason"], "forbidden_address", "{line}");
        assert!(
            record["message"]
                .as_str()
                .is_some_and(|m| m.contains("allow_addresses")),
            "the message says how to allow it: {line}"
        );
    }
    let seen = lab.recorder().requests();
    assert!(
        !seen.iter().any(|r| r.path.contains("meta-data")),
        "the metadata page was never requested"
    );
    assert_eq!(
        seen.iter()
            .filter(|r| r.path.ends_with("/robots.txt") && r.referer.is_none())
            .count(),
        2,
        "one robots.txt fetch per crawl (the lab's), none for the metadata service \
         (the lab's pages also link to /robots.txt: those carry a Referer)"
    );
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_metadata_address_is_allowed() {
    // Named in allow_addresses, the metadata link goes out (through the lab as a proxy, so
    // nothing leaves loopback): the refusal above is the policy, not a broken route.
    let lab = Lab::builder().books(100).start().await.expect("lab starts");
    let stats = Crawl::new(Curious { start: lab.url() })
        .set("proxy", lab.url())
        .set("allow_addresses", "169.254.169.254")
        .set("obey_robots", "false")
        .set("depth_limit", "1")
        .set("retry_times", "0")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .progress(false)
        .run()
        .await
        .expect("crawl runs");
    assert_eq!(stats.failed.get("forbidden_address"), None, "{stats}");
    assert!(
        lab.recorder()
            .requests()
            .iter()
            .any(|r| r.path.contains("meta-data")),
        "the named address was requested"
    );
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_page_cannot_lead_into_private_space() {
    let lab = Lab::builder().books(100).start().await.expect("lab starts");
    let settings = Settings {
        deny_private_addresses: true,
        obey_robots: true,
        ..Settings::default()
    };
    let downloader = HttpDownloader::new(&settings).expect("downloader");
    let by_name = lab.url().replace("127.0.0.1", "localhost");
    for url in [lab.url(), by_name.clone()] {
        // Found on a page served from a public address: refused, robots.txt included, by
        // the literal check or (for the name) by the resolver, before connecting.
        let from_public = Request::get(&url)
            .unwrap()
            .meta(FROM_PRIVATE_META, false)
            .unwrap();
        let got = downloader.fetch_once(&from_public).await;
        match &got.outcome {
            Fetched::Failed(f) => {
                assert_eq!(f.kind, FailureKind::Forbidden, "{url}: {f:?}");
                assert!(f.message.contains("deny_private_addresses"), "{f:?}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    assert_eq!(
        lab.recorder().len(),
        0,
        "nothing reached the private address"
    );
    // The same URLs as start requests, or found on a private page, are fetched.
    for url in [lab.url(), by_name] {
        for req in [
            Request::get(&url).unwrap(),
            Request::get(&url)
                .unwrap()
                .meta(FROM_PRIVATE_META, true)
                .unwrap(),
        ] {
            let got = downloader.fetch_once(&req).await;
            assert!(
                matches!(&got.outcome, Fetched::Response(r) if r.status() == 200),
                "{url}: {:?}",
                got.outcome
            );
        }
    }
    lab.shutdown().await;
}

/// The namespace test's addresses, all on the namespace's only interface (loopback): a
/// public-looking one for the site, and places a crawl from it must never reach.
const PUBLIC_IP: &str = "93.184.216.34";
const METADATA_IP: &str = "169.254.169.254";
const INTRANET_IP: &str = "10.20.30.40";
/// Set for the test binary run inside the namespace.
const NETNS_CHILD: &str = "ADDRESS_POLICY_NETNS";

/// The policy on real routes: in a network namespace of its own with only a loopback
/// interface (so nothing can leave the machine whatever happens), the metadata address, an
/// intranet address and a public-looking address are put on loopback; the lab serves the
/// public one and listeners wait on the others. A crawl started on the public site, whose
/// pages link (and redirect) to all of them, must connect to none.
#[test]
fn in_a_loopback_only_namespace_a_public_crawl_connects_to_no_private_or_metadata_address() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let setup = format!(
        "ip link set lo up && ip addr add {METADATA_IP}/32 dev lo && \
         ip addr add {PUBLIC_IP}/32 dev lo && ip addr add {INTRANET_IP}/32 dev lo && \
         exec \"$0\" --exact {} --include-ignored --nocapture",
        crate::test_path(module_path!(), "inside_the_namespace")
    );
    let out = std::process::Command::new("unshare")
        .args(["--net", "--map-root-user", "sh", "-c", &setup])
        .arg(&exe)
        .env(NETNS_CHILD, "1")
        .output()
        .expect("unshare (util-linux) runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the crawl in the namespace failed (needs `unshare` and `ip`; .ci/run installs \
         iproute2):\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1 passed"),
        "the test inside the namespace ran:\n{stdout}"
    );
}

/// Follows the lab's links, and from every page a link to each trap.
struct Escaper {
    start: String,
    traps: Vec<String>,
}

impl Spider for Escaper {
    type Item = String;
    fn name(&self) -> &str {
        "escaper"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }
    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        if let Some(h1) = page.select_first("div.product h1") {
            out.item(h1.text());
        }
        for a in page.select("a[href]") {
            if let Some(href) = a.attr("href") {
                out.follow(href);
            }
        }
        for trap in &self.traps {
            out.follow(trap.as_str());
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs inside the network namespace that the test above creates"]
async fn inside_the_namespace() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    assert!(
        std::env::var_os(NETNS_CHILD).is_some(),
        "run by in_a_loopback_only_namespace_...: it needs the addresses that test adds"
    );
    // Listeners that count every connection, HTTP or not.
    let connections = Arc::new(AtomicUsize::new(0));
    let mut ports = Vec::new();
    for addr in [
        format!("{METADATA_IP}:80"),
        format!("{INTRANET_IP}:80"),
        "127.0.0.1:0".to_owned(),
        "[::1]:0".to_owned(),
    ] {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        ports.push(listener.local_addr().expect("bound").port());
        let connections = Arc::clone(&connections);
        tokio::spawn(async move {
            while listener.accept().await.is_ok() {
                connections.fetch_add(1, Ordering::SeqCst);
            }
        });
    }
    let traps = vec![
        format!("http://{METADATA_IP}/latest/meta-data/"),
        format!("http://{INTRANET_IP}/intranet"),
        format!("http://127.0.0.1:{}/admin", ports[2]),
        format!("http://localhost:{}/admin", ports[2]),
        format!("http://[::1]:{}/admin", ports[3]),
    ];
    let lab = Lab::builder()
        .ip(PUBLIC_IP.parse().expect("an address"))
        .books(100)
        // One page of the public site redirects into the intranet.
        .script(|req| {
            (req.path == "/leave")
                .then(|| ScriptReply::redirect(302, format!("http://{INTRANET_IP}/from-redirect")))
        })
        .start()
        .await
        .expect("lab starts on the public address");
    let mut all_traps = traps.clone();
    all_traps.push(lab.url_for("leave"));
    let dir = tempfile::tempdir().expect("tempdir");
    let failures = dir.path().join("failures.jsonl");
    // Default settings but speed: deny_private_addresses is on by default.
    let stats = Crawl::new(Escaper {
        start: lab.url(),
        traps: all_traps,
    })
    .set("failures_file", failures.to_string_lossy())
    .set("throttle", "fixed")
    .set("download_delay", "0s")
    .set("concurrency_per_host", "8")
    .set("retry_times", "0")
    .progress(false)
    .run()
    .await
    .expect("crawl runs");
    assert_eq!(stats.items_scraped, 100, "{stats}");
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "no connection reached a private or metadata address"
    );
    // Every trap (and the redirect's target) is refused, once each, in the failures file.
    let text = std::fs::read_to_string(&failures).expect("failures file");
    for url in traps
        .iter()
        .map(String::as_str)
        .chain([format!("http://{INTRANET_IP}/from-redirect").as_str()])
    {
        let host = crawler::core::Url::parse(url).expect("URL");
        let host = host.host_str().expect("host");
        assert!(
            text.lines()
                .any(|l| l.contains(host) && l.contains("forbidden_address")),
            "{url} refused as forbidden_address: {text}"
        );
    }
    assert_eq!(
        stats.failed.get("forbidden_address").copied(),
        Some(traps.len() as u64 + 1),
        "{stats}"
    );
    assert!(stats.reconciles(), "{stats:?}");
    lab.shutdown().await;
}
