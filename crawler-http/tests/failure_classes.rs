//! Broken responses are named for what they are (issue 34): a body cut short or reset is a
//! `connection` failure (retried: the next attempt may well get it whole); headers over the
//! HTTP library's limits are permanent (`too_large`, not retried: the answer will not change).
//! Each case is a raw TCP server on 127.0.0.1 writing exactly the bytes under test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crawler_core::{Download, FailureKind, Fetched, Request, Settings};
use crawler_http::HttpDownloader;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// How the server ends the exchange after writing its bytes.
#[derive(Clone, Copy)]
enum End {
    /// Close the connection normally (FIN).
    Close,
    /// Reset it (RST), as a crashed server or a middlebox does.
    Reset,
}

/// A server that answers every connection with `reply`, then ends it as `end` says. Returns
/// the URL of a page on it.
async fn raw_server(reply: Vec<u8>, end: End) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let reply = reply.clone();
            tokio::spawn(async move {
                // Read the request head before answering, so the client is not cut off
                // while it is still sending.
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream.write_all(&reply).await;
                let _ = stream.flush().await;
                // Let the bytes reach the client before the end, so it is a cut mid-body
                // and not a failed send.
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let End::Reset = end {
                    let _ = stream.set_zero_linger();
                }
                drop(stream);
            });
        }
    });
    format!("http://{addr}/page")
}

async fn fetch(url: &str) -> Download {
    let settings = Settings {
        obey_robots: false,
        download_timeout: Duration::from_secs(10),
        ..Settings::default()
    };
    let downloader = HttpDownloader::new(&settings).unwrap();
    downloader.fetch_once(&Request::get(url).unwrap()).await
}

fn failure_kind(got: &Download) -> FailureKind {
    match &got.outcome {
        Fetched::Failed(f) => f.kind,
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn head(extra: &str) -> String {
    format!("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n{extra}\r\n")
}

#[tokio::test]
async fn a_body_cut_short_is_a_connection_failure() {
    // Content-Length 10,000, 10 bytes, then the server closes.
    let reply = format!("{}0123456789", head("Content-Length: 10000\r\n"));
    let got = fetch(&raw_server(reply.into_bytes(), End::Close).await).await;
    assert_eq!(failure_kind(&got), FailureKind::Connection, "{got:?}");
    assert_eq!(got.feedback.failure, Some(FailureKind::Connection));
    // The head arrived: the slot learns the status it came with.
    assert_eq!(got.feedback.status, Some(200));
}

#[tokio::test]
async fn a_chunked_body_cut_short_is_a_connection_failure() {
    let reply = format!(
        "{}a\r\n0123456789\r\n400\r\nonly part",
        head("Transfer-Encoding: chunked\r\n")
    );
    let got = fetch(&raw_server(reply.into_bytes(), End::Close).await).await;
    assert_eq!(failure_kind(&got), FailureKind::Connection, "{got:?}");
}

#[tokio::test]
async fn a_reset_mid_body_is_a_connection_failure() {
    let reply = format!("{}0123456789", head("Content-Length: 10000\r\n"));
    let got = fetch(&raw_server(reply.into_bytes(), End::Reset).await).await;
    assert_eq!(failure_kind(&got), FailureKind::Connection, "{got:?}");
}

#[tokio::test]
async fn a_gzip_body_cut_short_is_a_connection_failure() {
    // Compressed bodies go through the decoder, which must not turn the cut into `decode`.
    let mut reply = head("Content-Encoding: gzip\r\nContent-Length: 10000\r\n").into_bytes();
    reply.extend_from_slice(&[0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00]);
    let got = fetch(&raw_server(reply, End::Close).await).await;
    assert_eq!(failure_kind(&got), FailureKind::Connection, "{got:?}");
}

#[tokio::test]
async fn headers_over_the_librarys_limits_are_permanent() {
    let many: String = (0..1000).map(|i| format!("X-H{i}: v\r\n")).collect();
    let huge = format!("X-Big: {}\r\n", "a".repeat(1024 * 1024));
    for extra in [many, huge] {
        let reply = format!("{}ok", head(&format!("{extra}Content-Length: 2\r\n")));
        let got = fetch(&raw_server(reply.into_bytes(), End::Close).await).await;
        assert_eq!(failure_kind(&got), FailureKind::TooLarge, "{got:?}");
        let Fetched::Failed(f) = &got.outcome else {
            unreachable!()
        };
        assert!(f.message.contains("headers"), "{f:?}");
    }
}

#[tokio::test]
async fn a_whole_body_that_does_not_decode_is_still_decode() {
    let mut reply = head("Content-Encoding: gzip\r\nContent-Length: 10\r\n").into_bytes();
    reply.extend_from_slice(b"not gzip!!");
    let got = fetch(&raw_server(reply, End::Close).await).await;
    assert_eq!(failure_kind(&got), FailureKind::Decode, "{got:?}");
}

#[tokio::test]
async fn a_whole_body_is_still_a_response() {
    // The control: the same server with the whole body is no failure.
    let reply = format!("{}0123456789", head("Content-Length: 10\r\n"));
    let got = fetch(&raw_server(reply.into_bytes(), End::Close).await).await;
    assert!(
        matches!(&got.outcome, Fetched::Response(r) if r.body().len() == 10),
        "{:?}",
        got.outcome
    );
}
