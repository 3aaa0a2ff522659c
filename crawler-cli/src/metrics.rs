//! A tiny Prometheus endpoint: the latest progress snapshot in the text exposition format.
//!
//! Enabled by the `metrics_addr` setting (a bare port binds 127.0.0.1). Every request on
//! the socket, whatever its path, gets the current figures; the server is a few lines of
//! tokio rather than a web framework because it serves one document.
//!
//! It must never take the crawl down or grow without bound: an accept error (out of file
//! descriptors, a connection reset before accept) is logged and retried after a short
//! pause, and at most [`MAX_CONNECTIONS`] clients are served at once (others wait in the
//! listen backlog). Per-host series cover the busiest hosts only (see
//! `crawler::engine::PROGRESS_HOSTS`).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use crawler::engine::Progress;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crawler::{Error, ErrorKind};

/// Longest a client may take to send its request before the connection is dropped.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Clients served at once; a scraper needs one.
pub const MAX_CONNECTIONS: usize = 16;
/// Pause after a failed accept: long enough not to spin on a persistent error (EMFILE),
/// short enough that scrapes resume quickly.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Bind `addr` and serve the snapshots of `rx` until the returned task is aborted.
pub async fn serve(
    addr: SocketAddr,
    rx: watch::Receiver<Progress>,
) -> Result<JoinHandle<()>, Error> {
    Ok(serve_on(bind(addr).await?, rx))
}

/// Bind the endpoint's socket at `addr` (and log where it is), to serve with [`serve_on`].
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot serve metrics on {addr}: {e}"),
        )
    })?;
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!("metrics at http://{bound}/metrics");
    Ok(listener)
}

/// Serve the snapshots of `rx` on an already bound `listener` until the returned task is
/// aborted.
pub fn serve_on(listener: TcpListener, rx: watch::Receiver<Progress>) -> JoinHandle<()> {
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            // Wait for a free slot before accepting, so a flood of idle connections waits
            // in the kernel's backlog instead of holding tasks and buffers here.
            let Ok(slot) = std::sync::Arc::clone(&slots).acquire_owned().await else {
                return;
            };
            let mut stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("metrics endpoint: accept failed: {e}; retrying");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            };
            let body = crawler::core::redact::scrub(&exposition(&rx.borrow().clone())).into_owned();
            tokio::spawn(async move {
                let _slot = slot;
                // A client that never reads must not hold its slot for ever.
                let _ = tokio::time::timeout(2 * READ_TIMEOUT, async {
                    // Read (and ignore) the request head so the client sees a normal exchange.
                    let mut buf = [0u8; 2048];
                    let _ = tokio::time::timeout(READ_TIMEOUT, stream.read(&mut buf)).await;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(body.as_bytes()).await;
                    let _ = stream.shutdown().await;
                })
                .await;
            });
        }
    })
}

/// Escape a label value (backslash, quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The Prometheus text exposition of one snapshot.
pub fn exposition(p: &Progress) -> String {
    let s = &p.stats;
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, rows: Vec<(String, f64)>| {
        let _ = writeln!(out, "# HELP crawler_{name} {help}");
        let _ = writeln!(out, "# TYPE crawler_{name} {kind}");
        for (labels, v) in rows {
            let _ = writeln!(out, "crawler_{name}{labels} {v}");
        }
    };
    let one = |v: f64| vec![(String::new(), v)];
    metric(
        "queued_requests",
        "gauge",
        "Requests waiting in the frontier.",
        one(p.queued as f64),
    );
    metric(
        "in_flight_requests",
        "gauge",
        "Requests being downloaded or parsed.",
        one(p.in_flight as f64),
    );
    metric(
        "requests_enqueued_total",
        "counter",
        "Requests offered to the frontier.",
        one(s.requests_enqueued as f64),
    );
    metric(
        "fetched_total",
        "counter",
        "Responses handed to the spider.",
        one(s.fetched as f64),
    );
    metric(
        "items_scraped_total",
        "counter",
        "Items written to the feeds.",
        one(s.items_scraped as f64),
    );
    metric(
        "response_bytes_total",
        "counter",
        "Body bytes received.",
        one(s.response_bytes as f64),
    );
    metric(
        "retries_total",
        "counter",
        "Attempts beyond the first.",
        one(s.retries as f64),
    );
    metric(
        "responses_total",
        "counter",
        "HTTP responses by status.",
        s.status
            .iter()
            .map(|(k, v)| (format!("{{status=\"{k}\"}}"), *v as f64))
            .collect(),
    );
    metric(
        "failed_total",
        "counter",
        "Requests that ended without a usable response, by reason.",
        s.failed
            .iter()
            .map(|(k, v)| (format!("{{reason=\"{}\"}}", label(k)), *v as f64))
            .collect(),
    );
    metric(
        "dns_lookups_total",
        "counter",
        "Names resolved by the crawl's resolver: sent (lookups sent to DNS), cached (asked \
         for by a connection and answered without a lookup of their own), failed.",
        vec![
            ("{kind=\"sent\"}".to_owned(), s.dns.lookups as f64),
            ("{kind=\"cached\"}".to_owned(), s.dns.cached as f64),
            ("{kind=\"failed\"}".to_owned(), s.dns.failed as f64),
        ],
    );
    metric(
        "proxy_requests_total",
        "counter",
        "Requests sent through each proxy (its password redacted).",
        s.proxies
            .iter()
            .map(|(k, p)| (format!("{{proxy=\"{}\"}}", label(k)), p.requests as f64))
            .collect(),
    );
    metric(
        "proxy_failed_total",
        "counter",
        "Requests through each proxy that ended without a response, by failure class.",
        s.proxies
            .iter()
            .flat_map(|(k, p)| {
                p.failed.iter().map(move |(reason, n)| {
                    (
                        format!("{{proxy=\"{}\",reason=\"{}\"}}", label(k), label(reason)),
                        *n as f64,
                    )
                })
            })
            .collect(),
    );
    metric(
        "spider_stats_total",
        "counter",
        "The spider's own counters (Output::stats), by name.",
        s.spider
            .iter()
            .map(|(k, v)| (format!("{{name=\"{}\"}}", label(k)), *v as f64))
            .collect(),
    );
    let host = |h: &crawler::core::HostStats| format!("{{host=\"{}\"}}", label(&h.host));
    metric(
        "host_rate",
        "gauge",
        "The rate each host is paced at, requests/s.",
        s.hosts
            .iter()
            .filter_map(|h| h.rate.map(|r| (host(h), r)))
            .collect(),
    );
    metric(
        "host_queued_requests",
        "gauge",
        "Requests queued per host.",
        s.hosts.iter().map(|h| (host(h), h.queued as f64)).collect(),
    );
    metric(
        "host_holds_total",
        "counter",
        "Holds placed on each host (Retry-After, RateLimit, soft block).",
        s.hosts.iter().map(|h| (host(h), h.holds as f64)).collect(),
    );
    metric(
        "host_hold_seconds_total",
        "counter",
        "Time each host spent held.",
        s.hosts.iter().map(|h| (host(h), h.hold_secs)).collect(),
    );
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn idle_clients_cannot_take_more_than_their_share() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_tx, rx) = watch::channel(Progress::default());
        let server = serve_on(listener, rx);
        // Clients that connect and never send a request hold every slot...
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        let mut late = tokio::net::TcpStream::connect(addr).await.unwrap();
        late.write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        let early = tokio::time::timeout(Duration::from_millis(500), late.read(&mut buf)).await;
        assert!(early.is_err(), "served past the cap");
        // ...until they go away: then the waiting client is served.
        drop(idle);
        let n = tokio::time::timeout(Duration::from_secs(3), late.read(&mut buf))
            .await
            .expect("served once slots are free")
            .unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200 OK"));
        server.abort();
    }

    #[test]
    fn exposition_has_queue_status_and_host_series() {
        let mut p = Progress {
            queued: 7,
            ..Default::default()
        };
        p.stats.status.insert(429, 3);
        p.stats.spider.insert("products/missing".into(), 4);
        p.stats.hosts.push(crawler::core::HostStats {
            host: "a\"b".into(),
            rate: Some(2.5),
            holds: 1,
            ..Default::default()
        });
        p.stats.dns.lookups = 5;
        p.stats.dns.cached = 40;
        let proxy = p
            .stats
            .proxies
            .entry("http://u:***@127.0.0.1:3128".into())
            .or_default();
        proxy.requests = 9;
        proxy.failed.insert("proxy".into(), 2);
        let text = exposition(&p);
        assert!(text.contains("crawler_queued_requests 7\n"), "{text}");
        assert!(
            text.contains("crawler_dns_lookups_total{kind=\"sent\"} 5\n"),
            "{text}"
        );
        assert!(
            text.contains("crawler_dns_lookups_total{kind=\"cached\"} 40\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "crawler_proxy_failed_total{proxy=\"http://u:***@127.0.0.1:3128\",reason=\"proxy\"} 2\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("crawler_responses_total{status=\"429\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("crawler_host_rate{host=\"a\\\"b\"} 2.5\n"),
            "{text}"
        );
        assert!(
            text.contains("crawler_host_holds_total{host=\"a\\\"b\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("crawler_spider_stats_total{name=\"products/missing\"} 4\n"),
            "{text}"
        );
    }
}
