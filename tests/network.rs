//! The network as servers speak it (issue 47): zstd bodies, decoded under `max_body_size`;
//! HTTP/2 negotiated by ALPN with a real nginx on TLS (a certificate of the test's own CA,
//! trusted through `tls_ca_file`), HTTP/1.1 where nginx does not offer HTTP/2, and the
//! version forced per host.
//!
//! The zstd server is a raw TCP one written here, so it answers `Content-Encoding: zstd`
//! with exactly the bytes the test made. nginx (Debian's `nginx` package) and `openssl` run
//! as child processes of the test. Everything stays on 127.0.0.1.

use std::net::SocketAddr;

use crawler::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, serde::Serialize)]
struct Product {
    title: String,
    /// The HTTP version the page came in, as `Response::http_version` gives it.
    http: String,
    /// The TLS version of its connection, as `Response::tls_version` gives it.
    tls: String,
}

struct Shop {
    start: String,
}

impl Spider for Shop {
    type Item = Product;
    fn name(&self) -> &str {
        "shop"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }
    async fn parse(&self, page: Response, out: &mut Output<Product>) -> Result<()> {
        if let Some(h1) = page.select_first("div.product h1") {
            out.item(Product {
                title: h1.text(),
                http: format!("{:?}", page.http_version()),
                tls: page.tls_version().unwrap_or("-").to_owned(),
            });
        }
        out.follow_all(page.select("a[href]").attrs("href"));
        Ok(())
    }
}

/// The crawl's `max_body_size` in the zstd test: 1 MiB.
const CAP: u64 = 1 << 20;

/// A product page, zstd-compressed (the compressed bytes and the decoded length).
fn zstd_page(title: &str) -> Vec<u8> {
    let html = format!(
        "<html><head><title>{title}</title></head><body><div class=\"product\">\
         <h1>{title}</h1><p>{}</p></div></body></html>",
        "zstd ".repeat(2000)
    );
    zstd::encode_all(html.as_bytes(), 3).expect("zstd in memory")
}

/// 64 MiB of zeros, zstd-compressed to a few KiB: 64 times the cap once decoded.
fn zstd_bomb() -> Vec<u8> {
    let zeros = vec![0u8; 64 << 20];
    zstd::encode_all(&zeros[..], 19).expect("zstd in memory")
}

/// Read one request's head and answer it, then close.
async fn serve_zstd(mut stream: TcpStream, page: &[u8], bomb: &[u8]) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let target = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
    // The client must offer zstd for the server to use it (as a real server would).
    let offers_zstd = text
        .lines()
        .any(|l| l.starts_with("accept-encoding:") && l.contains("zstd"));
    let respond = |status: &str, extra: &str, body: &[u8]| {
        let mut r = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n{extra}\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    };
    let zstd = "Content-Encoding: zstd\r\n";
    let bytes = match target.as_str() {
        "/" => respond(
            "200 OK",
            "",
            b"<html><body><a href=\"/zstd-page\">p</a> <a href=\"/zstd-bomb\">b</a></body></html>",
        ),
        "/zstd-page" if offers_zstd => respond("200 OK", zstd, page),
        "/zstd-bomb" if offers_zstd => respond("200 OK", zstd, bomb),
        "/zstd-page" | "/zstd-bomb" => respond("406 Not Acceptable", "", b"zstd only"),
        _ => respond("404 Not Found", "", b"none"),
    };
    let _ = stream.write_all(&bytes).await;
    let _ = stream.shutdown().await;
}

/// A server on 127.0.0.1 answering `/zstd-page` and `/zstd-bomb` in zstd.
async fn zstd_server() -> SocketAddr {
    let page: &'static [u8] = Box::leak(zstd_page("Zstd product").into_boxed_slice());
    let bomb: &'static [u8] = Box::leak(zstd_bomb().into_boxed_slice());
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind on loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_zstd(stream, page, bomb));
        }
    });
    addr
}

/// The items' titles in a JSON Lines feed.
fn titles(items: &std::path::Path) -> Vec<String> {
    item_field(items, "title")
}

/// One field of each item in a JSON Lines feed.
fn item_field(items: &std::path::Path, field: &str) -> Vec<String> {
    std::fs::read_to_string(items)
        .expect("items file")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON line");
            v[field].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zstd_page_gives_its_item_and_a_zstd_bomb_stops_at_max_body_size() {
    let addr = zstd_server().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let failures = dir.path().join("failures.jsonl");
    let items = dir.path().join("items.jsonl");
    let stats = Crawl::new(Shop {
        start: format!("http://{addr}/"),
    })
    .feed(&items)
    .expect("feed path")
    .set("failures_file", failures.to_string_lossy())
    .set("throttle", "fixed")
    .set("download_delay", "0s")
    .set("max_body_size", CAP.to_string())
    .set("retry_times", "0")
    .progress(false)
    .run()
    .await
    .expect("crawl runs");

    assert_eq!(titles(&items), vec!["Zstd product".to_owned()], "{stats}");
    let text = std::fs::read_to_string(&failures).expect("failures file");
    let records: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(records.len(), 1, "{text}");
    assert_eq!(
        records[0]["url"],
        format!("http://{addr}/zstd-bomb"),
        "{text}"
    );
    assert_eq!(records[0]["reason"], "too_large", "{text}");
    // Aborted at the cap: what was decoded before it is counted, and it is not the 64 MiB
    // the bomb would have become.
    assert!(stats.response_bytes > CAP, "{stats}");
    assert!(stats.response_bytes < 4 * CAP, "{stats}");
    assert!(stats.reconciles(), "{stats:?}");
}

/// `openssl` at `dir`, or a panic naming the command that failed.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the openssl command must be installed (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA of the test's own (`ca.pem`) and a certificate it signed for 127.0.0.1 and
/// localhost (`server.pem`, `server.key`), written in `dir`.
pub(crate) fn make_certificates(dir: &std::path::Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=crawler test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(dir, &ca);
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .expect("write server.ext");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    );
}

/// A client certificate signed by the CA in `dir` (`make_certificates` first), for TLS
/// client authentication: `client.pem` and its key `client.key`; and `other.pem` with
/// `other.key`, the same from a CA nginx does not trust.
fn make_client_certificates(dir: &std::path::Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    std::fs::write(
        dir.join("client.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
         extendedKeyUsage=clientAuth\n",
    )
    .expect("write client.ext");
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend([
        "-keyout",
        "client.key",
        "-out",
        "client.csr",
        "-subj",
        "/CN=crawler test client",
    ]);
    openssl(dir, &csr);
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "client.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "client.pem",
            "-days",
            "2",
            "-extfile",
            "client.ext",
        ],
    );
    // Self-signed: a certificate of the right shape that no CA nginx trusts vouches for.
    let mut other = vec!["req", "-x509"];
    other.extend(ec);
    other.extend([
        "-keyout",
        "other.key",
        "-out",
        "other.pem",
        "-days",
        "2",
        "-subj",
        "/CN=crawler test stranger",
    ]);
    openssl(dir, &other);
}

/// Product pages served by nginx, and the index linking them.
const NGINX_PAGES: usize = 5;

/// A real nginx of the test's own: one server block on TLS with HTTP/2 and one on TLS with
/// HTTP/1.1 only, both serving the same static site from a temporary directory, with a
/// certificate signed by the test's CA. Killed on drop.
struct Nginx {
    child: std::process::Child,
    dir: tempfile::TempDir,
    /// The port of the server block with HTTP/2.
    h2_port: u16,
    /// The port of the server block with HTTP/1.1 only.
    h1_port: u16,
    /// The port of a server block with HTTP/2 that speaks TLS 1.2 only.
    tls12_port: u16,
    /// The port of a server block with HTTP/2 that requires a client certificate signed by
    /// the test's CA (`ssl_verify_client on`).
    mtls_port: u16,
}

/// A free TCP port on 127.0.0.1 (free when asked; nginx binds it right after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on loopback")
        .port()
}

impl Nginx {
    fn start() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        make_certificates(root);
        make_client_certificates(root);
        let site = root.join("site");
        std::fs::create_dir_all(&site).expect("site dir");
        let links: String = (1..=NGINX_PAGES)
            .map(|n| format!("<a href=\"/p{n}.html\">{n}</a>\n"))
            .collect();
        std::fs::write(
            site.join("index.html"),
            format!("<html><body>{links}</body></html>"),
        )
        .expect("index");
        for n in 1..=NGINX_PAGES {
            std::fs::write(
                site.join(format!("p{n}.html")),
                format!(
                    "<html><body><div class=\"product\"><h1>Product {n}</h1></div></body></html>"
                ),
            )
            .expect("page");
        }
        let (h2_port, h1_port, tls12_port, mtls_port) =
            (free_port(), free_port(), free_port(), free_port());
        let d = root.display();
        // `listen ... ssl http2` works from nginx 1.9.5 on (Debian 12 ships 1.22, where the
        // `http2 on;` directive of 1.25.1 does not exist yet); later versions only warn.
        let server = |port: u16, http2: &str, log: &str, protocols: &str, extra: &str| {
            format!(
                "server {{ listen 127.0.0.1:{port} ssl{http2}; server_name localhost; \
                 ssl_certificate {d}/server.pem; ssl_certificate_key {d}/server.key; \
                 ssl_protocols {protocols}; {extra} \
                 access_log {d}/{log} proto; root {d}/site; index index.html; }}\n"
            )
        };
        let mtls = format!("ssl_client_certificate {d}/ca.pem; ssl_verify_client on;");
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\n\
             error_log {d}/error.log warn;\npid {d}/nginx.pid;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n\
             types {{ text/html html; text/plain txt; }}\n\
             default_type application/octet-stream;\n\
             log_format proto '$server_protocol $connection $request_uri $status \
             $ssl_client_verify';\n\
             client_body_temp_path {d}/tmp_body; proxy_temp_path {d}/tmp_proxy;\n\
             fastcgi_temp_path {d}/tmp_fastcgi; uwsgi_temp_path {d}/tmp_uwsgi;\n\
             scgi_temp_path {d}/tmp_scgi;\n\
             {}{}{}{}}}\n",
            server(h2_port, " http2", "h2.log", "TLSv1.2 TLSv1.3", ""),
            server(h1_port, "", "h1.log", "TLSv1.2 TLSv1.3", ""),
            server(tls12_port, " http2", "tls12.log", "TLSv1.2", ""),
            server(mtls_port, " http2", "mtls.log", "TLSv1.2 TLSv1.3", &mtls),
        );
        std::fs::write(root.join("nginx.conf"), conf).expect("nginx.conf");
        let child = std::process::Command::new("nginx")
            .arg("-p")
            .arg(root)
            .arg("-c")
            .arg(root.join("nginx.conf"))
            .arg("-e")
            .arg(root.join("error.log"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("nginx must be installed (apt-get install nginx)");
        let nginx = Self {
            child,
            dir,
            h2_port,
            h1_port,
            tls12_port,
            mtls_port,
        };
        nginx.wait_ready();
        nginx
    }

    /// Wait until both ports accept connections.
    fn wait_ready(&self) {
        for _ in 0..250 {
            let up = |port: u16| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
            if up(self.h2_port) && up(self.h1_port) && up(self.tls12_port) && up(self.mtls_port) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let log = std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default();
        panic!("nginx did not come up: {log}");
    }

    fn ca_file(&self) -> String {
        self.file("ca.pem")
    }

    /// The path of `name` in the server's directory.
    fn file(&self, name: &str) -> String {
        self.dir.path().join(name).to_string_lossy().into_owned()
    }

    /// The protocols of the requests one server block logged (`HTTP/2.0`, `HTTP/1.1`).
    fn protocols(&self, log: &str) -> Vec<String> {
        self.log_field(log, 0)
    }

    /// How many connections the requests one server block logged came on.
    fn connections(&self, log: &str) -> usize {
        let serials: std::collections::HashSet<String> =
            self.log_field(log, 1).into_iter().collect();
        serials.len()
    }

    /// Field `n` of each line of an access log.
    fn log_field(&self, log: &str, n: usize) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join(log))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split_whitespace().nth(n).map(str::to_owned))
            .collect()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // Our own child, by its id.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Crawl `start` with the test's CA trusted, and `settings` on top; the items' titles, the
/// failures file's lines, the stats, and the HTTP versions the items' pages came in.
async fn crawl_tls(
    start: String,
    ca_file: &str,
    settings: &[(&str, &str)],
) -> (
    Vec<String>,
    Vec<serde_json::Value>,
    Stats,
    std::collections::BTreeSet<String>,
) {
    crawl_tls_with(start, ca_file, settings, "http").await
}

/// [`crawl_tls`] with the distinct values of the items' `field` instead of their versions.
async fn crawl_tls_field(
    start: String,
    ca_file: &str,
    field: &str,
) -> (
    Vec<String>,
    Vec<serde_json::Value>,
    Stats,
    std::collections::BTreeSet<String>,
) {
    crawl_tls_with(start, ca_file, &[], field).await
}

async fn crawl_tls_with(
    start: String,
    ca_file: &str,
    settings: &[(&str, &str)],
    field: &str,
) -> (
    Vec<String>,
    Vec<serde_json::Value>,
    Stats,
    std::collections::BTreeSet<String>,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let failures = dir.path().join("failures.jsonl");
    let items = dir.path().join("items.jsonl");
    let mut crawl = Crawl::new(Shop { start })
        .feed(&items)
        .expect("feed path")
        .set("failures_file", failures.to_string_lossy())
        .set("tls_ca_file", ca_file)
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("concurrency_per_host", "2")
        .set("retry_times", "0")
        .progress(false);
    for (k, v) in settings {
        crawl = crawl.set(k, *v);
    }
    let stats = crawl.run().await.expect("crawl runs");
    let mut titles = titles(&items);
    titles.sort();
    let versions = item_field(&items, field).into_iter().collect();
    let failures = std::fs::read_to_string(&failures)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    (titles, failures, stats, versions)
}

fn product_titles() -> Vec<String> {
    (1..=NGINX_PAGES).map(|n| format!("Product {n}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_on_tls_is_crawled_over_http2_where_it_offers_it_and_http1_where_not() {
    let nginx = Nginx::start();
    let ca = nginx.ca_file();

    // HTTP/2 negotiated by ALPN: every response came in HTTP/2, as nginx logged them too.
    let (titles, failures, stats, versions) =
        crawl_tls(format!("https://127.0.0.1:{}/", nginx.h2_port), &ca, &[]).await;
    assert_eq!(titles, product_titles(), "{failures:?}\n{stats}");
    assert_eq!(versions.into_iter().collect::<Vec<_>>(), ["Some(HTTP/2.0)"]);
    assert!(failures.is_empty(), "{failures:?}");
    let responses: u64 = stats.status.values().sum();
    // The index, its pages and robots.txt (nginx's 404).
    assert_eq!(responses, NGINX_PAGES as u64 + 1, "{stats}");
    assert_eq!(
        stats.http_versions.get("HTTP/2"),
        Some(&responses),
        "{stats}"
    );
    assert_eq!(stats.http_versions.len(), 1, "{stats}");
    let served = nginx.protocols("h2.log");
    assert_eq!(served.len(), NGINX_PAGES + 2, "{served:?}");
    assert!(served.iter().all(|p| p == "HTTP/2.0"), "{served:?}");
    // Two requests in flight at a time (`concurrency_per_host = 2`), as two streams of one
    // connection: robots.txt, the index and every page came on it.
    assert_eq!(nginx.connections("h2.log"), 1, "{served:?}");

    // The server block without HTTP/2: `auto` speaks HTTP/1.1 to it.
    let (titles, failures, stats, versions) =
        crawl_tls(format!("https://127.0.0.1:{}/", nginx.h1_port), &ca, &[]).await;
    assert_eq!(titles, product_titles(), "{failures:?}\n{stats}");
    assert_eq!(versions.into_iter().collect::<Vec<_>>(), ["Some(HTTP/1.1)"]);
    let responses: u64 = stats.status.values().sum();
    assert_eq!(
        stats.http_versions.get("HTTP/1.1"),
        Some(&responses),
        "{stats}"
    );
    assert_eq!(stats.http_versions.len(), 1, "{stats}");
    let served = nginx.protocols("h1.log");
    assert!(
        !served.is_empty() && served.iter().all(|p| p == "HTTP/1.1"),
        "{served:?}"
    );

    // The TLS version of each page's connection, for the request log: nginx offers 1.3.
    let (_, _, _, tls) =
        crawl_tls_field(format!("https://127.0.0.1:{}/", nginx.h2_port), &ca, "tls").await;
    assert_eq!(tls.into_iter().collect::<Vec<_>>(), ["TLSv1.3"]);
    let (_, _, _, tls) = crawl_tls_field(
        format!("https://127.0.0.1:{}/", nginx.tls12_port),
        &ca,
        "tls",
    )
    .await;
    assert_eq!(tls.into_iter().collect::<Vec<_>>(), ["TLSv1.2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_version_rules_force_a_version_per_host() {
    let nginx = Nginx::start();
    let ca = nginx.ca_file();
    let h2 = format!("127.0.0.1:{}", nginx.h2_port);
    let h1 = format!("127.0.0.1:{}", nginx.h1_port);

    // A `[[hosts]]` rule forcing HTTP/1.1 on the server that offers HTTP/2.
    let rule = format!(r#"[{{"match":"{h2}","http_version":"1.1"}}]"#);
    let (titles, _, stats, _) =
        crawl_tls(format!("https://{h2}/"), &ca, &[("hosts", rule.as_str())]).await;
    assert_eq!(titles, product_titles(), "{stats}");
    assert_eq!(
        stats.http_versions.keys().collect::<Vec<_>>(),
        ["HTTP/1.1"],
        "{stats}"
    );

    // HTTP/2 forced on the server without it fails at the handshake, as `tls`, clearly,
    // and is not retried (robots.txt's handshake fails the same way: not an outage to
    // hold the host for, the page goes and fails with the reason).
    let (titles, failures, stats, _) =
        crawl_tls(format!("https://{h1}/"), &ca, &[("http_version", "2")]).await;
    assert!(titles.is_empty(), "{titles:?}");
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0]["reason"], "tls", "{failures:?}");
    let message = failures[0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("http_version"), "{message}");
    assert_eq!(stats.retries, 0, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_settings_decide_which_servers_are_trusted() {
    let nginx = Nginx::start();
    let h2 = format!("127.0.0.1:{}", nginx.h2_port);
    let crawl = |start: String, settings: Vec<(&'static str, String)>| async move {
        let dir = tempfile::tempdir().expect("tempdir");
        let items = dir.path().join("items.jsonl");
        let mut crawl = Crawl::new(Shop { start })
            .feed(&items)
            .expect("feed path")
            .set("obey_robots", "false")
            .set("throttle", "fixed")
            .set("download_delay", "0s")
            .set("retry_times", "0")
            .progress(false);
        for (k, v) in settings {
            crawl = crawl.set(k, v);
        }
        let stats = crawl.run().await.expect("crawl runs");
        (titles(&items), stats)
    };

    // Without the test's CA, its certificate is refused, as `tls` (robots.txt's refusal
    // does not hold the host: the page fails the same way, at once).
    let (titles, stats) = crawl(
        format!("https://{h2}/"),
        vec![("obey_robots", "true".to_owned())],
    )
    .await;
    assert!(titles.is_empty(), "{titles:?}");
    assert_eq!(stats.failed.get("tls"), Some(&1), "{stats}");

    // `tls_verify = false` in a rule for that host accepts it, for that host only.
    let rule = format!(r#"[{{"match":"{h2}","tls_verify":false}}]"#);
    let (mut titles, stats) = crawl(format!("https://{h2}/"), vec![("hosts", rule)]).await;
    titles.sort();
    assert_eq!(titles, product_titles(), "{stats}");
    assert_eq!(
        stats.http_versions.keys().collect::<Vec<_>>(),
        ["HTTP/2"],
        "{stats}"
    );

    // `tls_min_version = "1.3"` refuses a server that speaks TLS 1.2 only, which the
    // default accepts.
    let start = format!("https://127.0.0.1:{}/", nginx.tls12_port);
    let ca = ("tls_ca_file", nginx.ca_file());
    let (titles, stats) = crawl(start.clone(), vec![ca.clone()]).await;
    assert_eq!(titles.len(), NGINX_PAGES, "{stats}");
    let (titles, stats) = crawl(start, vec![ca, ("tls_min_version", "1.3".to_owned())]).await;
    assert!(titles.is_empty(), "{titles:?}");
    assert_eq!(stats.failed.get("tls"), Some(&1), "{stats}");
}

/// How the HTTP/2 test server misbehaves.
#[derive(Clone, Copy, PartialEq)]
enum H2Fault {
    /// The first request of every page is refused (RST_STREAM REFUSED_STREAM).
    RefuseFirst,
    /// The first connection is closed at once (GOAWAY NO_ERROR, no stream processed).
    GoawayFirst,
}

/// Counters of the HTTP/2 test server.
#[derive(Default)]
struct H2Seen {
    connections: std::sync::atomic::AtomicUsize,
    refused: std::sync::atomic::AtomicUsize,
    /// Paths already refused once.
    paths: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// An h2c server (HTTP/2 without TLS, prior knowledge) on 127.0.0.1 serving the index and
/// product pages, with `fault`.
async fn h2_server(fault: H2Fault) -> (SocketAddr, std::sync::Arc<H2Seen>) {
    use std::sync::atomic::Ordering::SeqCst;
    let seen = std::sync::Arc::new(H2Seen::default());
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .await
        .expect("bind on loopback");
    let addr = listener.local_addr().expect("local addr");
    let shared = std::sync::Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let seen = std::sync::Arc::clone(&shared);
            tokio::spawn(async move {
                let first = seen.connections.fetch_add(1, SeqCst) == 0;
                let Ok(mut conn) = h2::server::handshake(stream).await else {
                    return;
                };
                if fault == H2Fault::GoawayFirst && first {
                    conn.abrupt_shutdown(h2::Reason::NO_ERROR);
                    while conn.accept().await.is_some() {}
                    return;
                }
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    let path = req.uri().path().to_owned();
                    if fault == H2Fault::RefuseFirst
                        && path != "/robots.txt"
                        && seen
                            .paths
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(path.clone())
                    {
                        seen.refused.fetch_add(1, SeqCst);
                        respond.send_reset(h2::Reason::REFUSED_STREAM);
                        continue;
                    }
                    let (status, body) = match path.as_str() {
                        "/" => (
                            200,
                            (1..=NGINX_PAGES)
                                .map(|n| format!("<a href=\"/p{n}\">{n}</a>"))
                                .collect::<String>(),
                        ),
                        p if p.starts_with("/p") => (
                            200,
                            format!("<div class=\"product\"><h1>Product {}</h1></div>", &p[2..]),
                        ),
                        _ => (404, "none".to_owned()),
                    };
                    let Ok(head) = http::Response::builder()
                        .status(status)
                        .header("content-type", "text/html")
                        .body(())
                    else {
                        return;
                    };
                    if let Ok(mut send) = respond.send_response(head, false) {
                        let _ = send.send_data(bytes::Bytes::from(body), true);
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// Crawl an h2c server with `http_version = "2"`: titles, stats.
async fn crawl_h2(addr: SocketAddr) -> (Vec<String>, Stats) {
    let dir = tempfile::tempdir().expect("tempdir");
    let items = dir.path().join("items.jsonl");
    let stats = Crawl::new(Shop {
        start: format!("http://{addr}/"),
    })
    .feed(&items)
    .expect("feed path")
    .set("http_version", "2")
    .set("throttle", "fixed")
    .set("download_delay", "0s")
    .set("retry_times", "2")
    .set("retry_backoff_base", "10ms")
    .set("retry_backoff_cap", "50ms")
    .progress(false)
    .run()
    .await
    .expect("crawl runs");
    let mut titles = titles(&items);
    titles.sort();
    (titles, stats)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_http2_streams_are_connection_failures_retried_by_the_engine() {
    use std::sync::atomic::Ordering::SeqCst;
    let (addr, seen) = h2_server(H2Fault::RefuseFirst).await;
    let (titles, stats) = crawl_h2(addr).await;
    assert_eq!(titles, product_titles(), "{stats}");
    assert!(stats.failed.is_empty(), "{stats}");
    // The index and each page refused once and sent again by the engine (after its backoff,
    // through the host's slot; a host held for the run of failures costs its pages no
    // attempt), none resent behind its back by the transport.
    let refused = seen.refused.load(SeqCst) as u64;
    assert_eq!(refused, NGINX_PAGES as u64 + 1, "{stats}");
    assert!(stats.retries >= 1 && stats.retries <= refused, "{stats}");
    // Spoken as HTTP/2 (h2c with prior knowledge) on one connection.
    assert_eq!(
        stats.http_versions.keys().collect::<Vec<_>>(),
        ["HTTP/2"],
        "{stats}"
    );
    assert_eq!(seen.connections.load(SeqCst), 1, "{stats}");
    assert!(stats.reconciles(), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_goaway_loses_no_request() {
    use std::sync::atomic::Ordering::SeqCst;
    let (addr, seen) = h2_server(H2Fault::GoawayFirst).await;
    let (titles, stats) = crawl_h2(addr).await;
    assert_eq!(titles, product_titles(), "{stats}");
    assert!(stats.failed.is_empty(), "{stats}");
    assert!(seen.connections.load(SeqCst) >= 2, "{stats}");
    assert!(stats.reconciles(), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_shown_to_the_hosts_that_require_one() {
    let nginx = Nginx::start();
    let ca = nginx.ca_file();
    let mtls = format!("127.0.0.1:{}", nginx.mtls_port);
    let start = format!("https://{mtls}/");

    // Without a certificate nginx answers every request 400 (no certificate sent): not
    // one page.
    let (titles, _, stats, _) = crawl_tls(start.clone(), &ca, &[]).await;
    assert!(titles.is_empty(), "{titles:?}");
    assert!(stats.status.contains_key(&400), "{stats}");

    // A certificate the server's CA did not sign is refused the same way.
    let (cert, key) = (nginx.file("other.pem"), nginx.file("other.key"));
    let (titles, _, stats, _) = crawl_tls(
        start.clone(),
        &ca,
        &[("tls_client_cert", &cert), ("tls_client_key", &key)],
    )
    .await;
    assert!(titles.is_empty(), "{titles:?} {stats}");

    // The crawl's certificate, key apart: every page, each request verified by nginx.
    let (cert, key) = (nginx.file("client.pem"), nginx.file("client.key"));
    let before = nginx.log_field("mtls.log", 4).len();
    let (titles, failures, stats, _) = crawl_tls(
        start.clone(),
        &ca,
        &[("tls_client_cert", &cert), ("tls_client_key", &key)],
    )
    .await;
    assert_eq!(titles, product_titles(), "{failures:?}\n{stats}");
    let verified = nginx.log_field("mtls.log", 4);
    assert!(verified.len() > before + NGINX_PAGES, "{verified:?}");
    assert!(
        verified[before..].iter().all(|v| v == "SUCCESS"),
        "{verified:?}"
    );

    // Per host: a `[[hosts]]` rule's certificate (chain and key in one file) for that host
    // alone; the crawl has none.
    let both = nginx.dir.path().join("both.pem");
    let pem = [
        std::fs::read_to_string(&cert).expect("client.pem"),
        std::fs::read_to_string(&key).expect("client.key"),
    ]
    .concat();
    std::fs::write(&both, pem).expect("both.pem");
    let rule = serde_json::json!([{ "match": mtls, "tls_client_cert": both }]).to_string();
    let (titles, failures, stats, _) = crawl_tls(start, &ca, &[("hosts", rule.as_str())]).await;
    assert_eq!(titles, product_titles(), "{failures:?}\n{stats}");

    // A certificate file without its key stops the crawl at start, naming the setting.
    let err = Crawl::new(Shop {
        start: format!("https://{mtls}/"),
    })
    .set("tls_client_cert", cert.as_str())
    .progress(false)
    .run()
    .await
    .expect_err("a certificate without its key");
    assert!(err.to_string().contains("tls_client_cert"), "{err}");
}
