//! Helpers shared by the lab's integration tests: a reqwest client and a raw HTTP/1.1 client
//! for wire-level checks (framing, resets) that reqwest hides.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A reqwest client for loopback: no proxy, no redirects followed, no decompression.
pub(crate) fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .no_gzip()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

/// A response as bytes on the wire.
pub(crate) struct Raw {
    pub status: u16,
    /// Header lines, names lowercased.
    pub headers: Vec<(String, String)>,
    /// Everything after the head.
    pub body: Vec<u8>,
    /// The read ended with an error (such as a reset) instead of EOF.
    pub read_error: bool,
}

impl Raw {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one GET with `Connection: close` and extra header lines; reads until EOF, an error,
/// `limit` bytes, or 10 s.
pub(crate) async fn raw_get(addr: SocketAddr, path: &str, extra: &str, limit: usize) -> Raw {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!("GET {path} HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n{extra}\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut read_error = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while buf.len() < limit {
        match tokio::time::timeout_at(deadline, s.read(&mut chunk)).await {
            Ok(Ok(0)) | Err(_) => break,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(_)) => {
                read_error = true;
                break;
            }
        }
    }
    parse(buf, read_error)
}

fn parse(buf: Vec<u8>, read_error: bool) -> Raw {
    let end = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head");
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Raw {
        status,
        headers,
        body: buf[end + 4..].to_vec(),
        read_error,
    }
}

/// Decodes a chunked body; `None` if the framing is incomplete.
pub(crate) fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&body[..line_end]).ok()?, 16).ok()?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        if body.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// Body text of a GET through reqwest, asserting the status.
pub(crate) async fn get_text(client: &reqwest::Client, url: &str, status: u16) -> String {
    let resp = client.get(url).send().await.expect("request");
    assert_eq!(resp.status().as_u16(), status, "{url}");
    resp.text().await.expect("body")
}

/// Every `href="..."` value in a page.
pub(crate) fn hrefs(html: &str) -> Vec<String> {
    html.split("href=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// Every `<loc>` value in a sitemap.
pub(crate) fn locs(xml: &str) -> Vec<String> {
    xml.split("<loc>")
        .skip(1)
        .filter_map(|s| s.split("</loc>").next())
        .map(str::to_owned)
        .collect()
}
