//! The network as servers speak it (issue 47): zstd bodies, decoded under `max_body_size`.
//!
//! The zstd server is a raw TCP one written here, so it answers `Content-Encoding: zstd`
//! with exactly the bytes the test made. Everything stays on 127.0.0.1.

use std::net::SocketAddr;

use crawler::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, serde::Serialize)]
struct Product {
    title: String,
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
            out.item(Product { title: h1.text() });
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
    std::fs::read_to_string(items)
        .expect("items file")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("JSON line");
            v["title"].as_str().unwrap_or_default().to_owned()
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
    assert_eq!(records[0]["url"], format!("http://{addr}/zstd-bomb"), "{text}");
    assert_eq!(records[0]["reason"], "too_large", "{text}");
    // Aborted at the cap: what was decoded before it is counted, and it is not the 64 MiB
    // the bomb would have become.
    assert!(stats.response_bytes > CAP, "{stats}");
    assert!(stats.response_bytes < 4 * CAP, "{stats}");
    assert!(stats.reconciles(), "{stats:?}");
}
