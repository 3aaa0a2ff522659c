//! Hostile pages against good ones (issue 34): does a pathological page move the latency the
//! crawler measures for other hosts' pages?
//!
//! ```text
//! cargo bench --bench hostile            # baseline, then with hostile pages, one line each
//! cargo bench --bench hostile -- hostile # only the run with hostile pages
//! cargo bench --bench hostile -- wide N   # a page of 200,000 links, max_links_per_page N:
//!                                         # what was queued, and the peak RSS
//! ```
//!
//! A raw TCP server on 127.0.0.1 answers 20 good pages after 100 ms each (the "network");
//! 127.0.0.2 and 127.0.0.3 serve a page of 100,000 nested `div`s each (1.1 MB, half a minute
//! of parsing when parsing ran on the async runtime), so both arrive at once as in issue 34's
//! report, and 127.0.0.4 serves 4 heavy but legal pages (150,000 list items with a link each,
//! 5.4 MB, 300,000 elements) whose every link the spider selects. The good host is paced to
//! one request every 250 ms so its pages are fetched while the hostile ones are parsed. Reported: the good host's latency as its slot measured it (mean, p95), the
//! hostile pages' outcome, and the wall time.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crawler::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: crawler::MiMalloc = crawler::MiMalloc;

const GOOD: usize = 20;
const DEEP: usize = 2;
const HEAVY: usize = 4;
/// What the good server takes to answer.
const GOOD_DELAY: Duration = Duration::from_millis(100);
/// What the deep pages' servers take to answer.
const DEEP_DELAY: Duration = Duration::from_millis(1000);

/// When the crawl started, and when the last good page was parsed (ms after the start).
static STARTED: std::sync::Mutex<Option<Instant>> = std::sync::Mutex::new(None);
static LAST_GOOD_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

struct Mixed {
    starts: Vec<String>,
}

impl Spider for Mixed {
    type Item = usize;
    fn name(&self) -> &str {
        "mixed"
    }
    fn start_urls(&self) -> Vec<String> {
        self.starts.clone()
    }
    async fn parse(&self, page: Response, out: &mut Output<usize>) -> Result<()> {
        // The heavy pages' selection work is the spider's: it runs where the spider runs.
        out.item(page.select("ul li a").len());
        if page.url().path() == "/wide" {
            out.follow_all(page.select("a[href]").attrs("href"));
        }
        if page.url().path().starts_with("/good/")
            && let Some(started) = *STARTED.lock().unwrap_or_else(|p| p.into_inner())
        {
            let ms = started.elapsed().as_millis() as u64;
            LAST_GOOD_MS.fetch_max(ms, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }
}

fn page(body: &str) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body.as_bytes());
    r
}

async fn serve(mut stream: TcpStream, deep: &'static str, heavy: &'static str) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let path = text.split_whitespace().nth(1).unwrap_or("/");
    let bytes = if path.starts_with("/good/") {
        tokio::time::sleep(GOOD_DELAY).await;
        page("<html><body><ul><li><a href=\"#\">good</a></li></ul></body></html>")
    } else if path.starts_with("/deep/") {
        // Late, so the good host's requests are in flight when they arrive.
        tokio::time::sleep(DEEP_DELAY).await;
        page(deep)
    } else if path.starts_with("/heavy/") {
        page(heavy)
    } else if path == "/wide" {
        page(WIDE.get().map_or("", String::as_str))
    } else {
        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec()
    };
    let _ = stream.write_all(&bytes).await;
    let _ = stream.shutdown().await;
}

async fn listen(ip: &str, deep: &'static str, heavy: &'static str) -> SocketAddr {
    let listener = TcpListener::bind((ip, 0)).await.expect("bind on loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream, deep, heavy));
        }
    });
    addr
}

async fn run(hostile: bool, good: SocketAddr, deep: &[SocketAddr], heavy: SocketAddr) {
    let mut starts: Vec<String> = (0..GOOD)
        .map(|i| format!("http://{good}/good/{i}"))
        .collect();
    if hostile {
        starts.extend(deep.iter().map(|addr| format!("http://{addr}/deep/0")));
        starts.extend((0..HEAVY).map(|i| format!("http://{heavy}/heavy/{i}")));
    }
    let started = Instant::now();
    *STARTED.lock().unwrap_or_else(|p| p.into_inner()) = Some(started);
    LAST_GOOD_MS.store(0, std::sync::atomic::Ordering::Relaxed);
    let stats = Crawl::new(Mixed { starts })
        .set("throttle", "fixed")
        .set("randomize_delay", "false")
        .set("download_delay", "250ms")
        .set("concurrency_per_host", "1")
        .set("obey_robots", "false")
        .set("retry_times", "0")
        .progress(false)
        .run()
        .await
        .expect("crawl runs");
    let wall = started.elapsed();
    let host = stats
        .hosts
        .iter()
        .find(|h| h.host == good.to_string())
        .expect("the good host in the stats");
    let failed: Vec<String> = stats
        .failed
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    println!(
        "{:<8} good pages {:>2}: latency mean {:>6.3} s, p95 {:>6.3} s (server: {:.3} s) | \
         last good page parsed at {:.1} s | items {} | failed [{}] | wall {:.1} s",
        if hostile { "hostile" } else { "baseline" },
        host.requests,
        host.latency_mean,
        host.latency_p95,
        GOOD_DELAY.as_secs_f64(),
        LAST_GOOD_MS.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1000.0,
        stats.items_scraped,
        failed.join(" "),
        wall.as_secs_f64(),
    );
}

/// The page of 200,000 distinct links of the `wide` mode.
static WIDE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Peak resident set size of this process so far, in MiB (Linux).
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// One crawl of the wide page, stopped after it (`close_page_count = 1`): its links are what
/// the queue holds at the end.
async fn wide(max_links: &str) {
    let links: String = (0..200_000)
        .map(|i| format!("<a href=\"/t/{i}\">{i}</a>"))
        .collect();
    let _ = WIDE.set(format!("<html><body>{links}</body></html>"));
    let server = listen("127.0.0.1", "", "").await;
    let before = peak_rss_mib();
    let stats = Crawl::new(Mixed {
        starts: vec![format!("http://{server}/wide")],
    })
    .set("max_links_per_page", max_links)
    .set("close_page_count", "1")
    .set("obey_robots", "false")
    .progress(false)
    .run()
    .await
    .expect("crawl runs");
    println!(
        "wide max_links_per_page={max_links}: queued at the end {}, links dropped {} | \
         peak RSS {:.0} MiB (before the crawl {:.0} MiB)",
        stats.pending,
        stats.links_dropped,
        peak_rss_mib(),
        before,
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "wide") {
        wide(args.get(i + 1).map_or("10000", String::as_str)).await;
        return;
    }
    let only_hostile = std::env::args().any(|a| a == "hostile");
    let deep: &'static str = Box::leak(
        format!(
            "<html><body>{}deep{}</body></html>",
            "<div>".repeat(100_000),
            "</div>".repeat(100_000)
        )
        .into_boxed_str(),
    );
    let heavy: &'static str = Box::leak(
        format!(
            "<html><body><ul>{}</ul></body></html>",
            "<li><a href=\"/next\">an item</a></li>".repeat(150_000)
        )
        .into_boxed_str(),
    );
    let good = listen("127.0.0.1", deep, heavy).await;
    let mut deep_hosts = Vec::new();
    for i in 0..DEEP {
        deep_hosts.push(listen(&format!("127.0.0.{}", i + 2), deep, heavy).await);
    }
    let heavy_host = listen(&format!("127.0.0.{}", DEEP + 2), deep, heavy).await;
    if !only_hostile {
        run(false, good, &deep_hosts, heavy_host).await;
    }
    run(true, good, &deep_hosts, heavy_host).await;
}
