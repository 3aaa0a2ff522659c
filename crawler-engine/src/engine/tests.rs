//! The engine end to end on a small in-memory site: a scripted downloader, a FIFO frontier
//! that keeps a ledger of its leases, a pipeline and a feed. It pins down what the main loop
//! does with each outcome: what is fetched, retried, redirected, failed, counted, written
//! and acknowledged.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::Engine;
use crawler_core::FeedSpec;
use crawler_core::Output;
use crawler_core::Request;
use crawler_core::Result;
use crawler_core::Settings;
use crawler_core::Spider;
use crawler_core::{
    Admission, Download, Downloader, Failure, FailureKind, Feedback, Fetched, FilterReason, Lease,
    Next, Scheduler,
};
use crawler_core::{AfterAck, Response};
use crawler_core::{Pipeline, Processed};

const SITE: &str = "http://site.test";

/// Serves the site: `/flaky` fails once with a 503, `/down` never connects, `/a` carries
/// work to do once its request is acknowledged.
struct Site {
    hits: Mutex<HashMap<String, u32>>,
    after_ack_ran: Arc<AtomicBool>,
}

impl Downloader for Site {
    async fn fetch(&self, req: &Request) -> Download {
        let path = req.url.path().to_owned();
        let hit = {
            let mut hits = self.hits.lock().unwrap();
            let n = hits.entry(path.clone()).or_default();
            *n += 1;
            *n
        };
        let (status, location, body) = match path.as_str() {
            "/" => (
                200,
                None,
                r#"<a href="/a">a</a><a href="/b">b</a><a href="/moved">m</a>
                   <a href="/missing">x</a><a href="/flaky">f</a><a href="/down">d</a>
                   <a href="/a">a again</a>"#,
            ),
            "/a" => (200, None, r#"<a href="/">home</a><a href="/b">b</a>"#),
            "/b" | "/c" => (200, None, "<p>leaf</p>"),
            "/moved" => (301, Some("/c"), ""),
            "/flaky" if hit == 1 => (503, None, "busy"),
            "/flaky" => (200, None, "<p>fine now</p>"),
            "/down" => {
                return Download {
                    outcome: Fetched::Failed(Failure::new(FailureKind::Connection, "refused")),
                    feedback: Feedback {
                        sent: true,
                        failure: Some(FailureKind::Connection),
                        ..Feedback::default()
                    },
                };
            }
            _ => (404, None, "not here"),
        };
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/html"),
        );
        if let Some(l) = location {
            headers.insert(http::header::LOCATION, http::HeaderValue::from_static(l));
        }
        let mut page = Response::new(
            req.clone(),
            req.url.clone(),
            status,
            headers,
            bytes::Bytes::from_static(body.as_bytes()),
        );
        if path == "/a" {
            let ran = Arc::clone(&self.after_ack_ran);
            page.set_after_ack(AfterAck::new(move || ran.store(true, Ordering::SeqCst)));
        }
        Download {
            outcome: Fetched::Response(page),
            feedback: Feedback {
                sent: true,
                status: Some(status),
                ..Feedback::default()
            },
        }
    }
}

/// Which leases were handed out, completed and settled (acknowledged or retried).
#[derive(Default)]
struct Ledger {
    open: HashSet<u64>,
    completed: HashMap<u64, u32>,
    handed_out: u64,
}

/// First in, first out, deduplicated by URL; retries wait for their time.
struct Fifo {
    queue: VecDeque<(Instant, Request)>,
    seen: HashSet<String>,
    next_lease: u64,
    ledger: Arc<Mutex<Ledger>>,
}

impl Scheduler for Fifo {
    fn enqueue(&mut self, request: Request, now: Instant) -> Admission {
        if !request.dont_filter && !self.seen.insert(request.url.to_string()) {
            return Admission::Filtered(FilterReason::Duplicate);
        }
        self.queue.push_back((now, request));
        Admission::Queued
    }

    fn next(&mut self, now: Instant) -> Next {
        let Some(i) = self.queue.iter().position(|(at, _)| *at <= now) else {
            return match self.queue.iter().map(|(at, _)| *at).min() {
                Some(at) => Next::NotBefore(at),
                None => Next::Empty,
            };
        };
        let Some((_, req)) = self.queue.remove(i) else {
            return Next::Empty;
        };
        self.next_lease += 1;
        let mut ledger = self.ledger.lock().unwrap();
        ledger.open.insert(self.next_lease);
        ledger.handed_out += 1;
        Next::Ready(Lease(self.next_lease), req)
    }

    fn complete(&mut self, lease: Lease, _feedback: &Feedback, _now: Instant) {
        *self
            .ledger
            .lock()
            .unwrap()
            .completed
            .entry(lease.0)
            .or_default() += 1;
    }

    fn acknowledge(&mut self, lease: Lease) {
        assert!(
            self.ledger.lock().unwrap().open.remove(&lease.0),
            "{lease:?}"
        );
    }

    fn queued(&self) -> usize {
        self.queue.len()
    }

    fn retry(&mut self, lease: Lease, request: Request, not_before: Instant) {
        assert!(
            self.ledger.lock().unwrap().open.remove(&lease.0),
            "{lease:?}"
        );
        self.queue.push_back((not_before, request));
    }
}

/// One item per page, its path; follows every link.
struct Paths;

impl Spider for Paths {
    type Item = String;

    fn name(&self) -> &str {
        "paths"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![format!("{SITE}/")]
    }

    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        out.item(page.url().path().to_owned());
        out.follow_all(page.select("a").attrs("href"));
        Ok(())
    }
}

/// Drops the item of `/b`.
struct NotB;

impl Pipeline<String> for NotB {
    async fn process(&self, item: String) -> Result<Processed<String>> {
        Ok(if item == "/b" {
            Processed::Drop("not b".into())
        } else {
            Processed::Keep(item)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crawl_accounts_for_every_request_and_acknowledges_every_lease() {
    let dir = tempfile::tempdir().unwrap();
    let feed = dir.path().join("items.jsonl");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let after_ack_ran = Arc::new(AtomicBool::new(false));
    let site = Site {
        hits: Mutex::new(HashMap::new()),
        after_ack_ran: Arc::clone(&after_ack_ran),
    };
    let fifo = Fifo {
        queue: VecDeque::new(),
        seen: HashSet::new(),
        next_lease: 0,
        ledger: Arc::clone(&ledger),
    };
    let settings = Settings {
        concurrency: 3,
        retry_backoff_base: Duration::from_millis(1),
        retry_backoff_cap: Duration::from_millis(5),
        ..Settings::default()
    };
    let engine = Engine::new(Paths, site, fifo, settings)
        .pipeline(NotB)
        .feed(FeedSpec::new(&feed).unwrap());
    let progress = engine.progress();
    let stats = tokio::time::timeout(Duration::from_secs(30), engine.run())
        .await
        .expect("the crawl ends")
        .expect("the crawl succeeds");

    // Enqueued: the start page, 7 links on it, 2 on /a, and the redirect's next hop.
    assert_eq!(stats.requests_enqueued, 11);
    assert_eq!(stats.filtered.get("duplicate"), Some(&3));
    assert_eq!(
        stats.fetched, 5,
        "/, /a, /b, /c and /flaky at its second attempt"
    );
    assert_eq!(stats.redirected, 1);
    assert_eq!(stats.failed.get("http_status"), Some(&1), "{stats:?}");
    assert_eq!(stats.failed.get("connection"), Some(&1), "{stats:?}");
    assert_eq!(stats.retries, 3, "/flaky once, /down twice");
    assert_eq!(stats.pending, 0);
    assert!(stats.reconciles(), "{stats:?}");
    let status: Vec<(u16, u64)> = stats.status.iter().map(|(s, n)| (*s, *n)).collect();
    assert_eq!(status, [(200, 5), (301, 1), (404, 1), (503, 1)]);
    assert_eq!(stats.items_scraped, 4);
    assert_eq!(stats.items_dropped, 1);
    assert_eq!(stats.spider_errors, 0);
    assert_eq!(stats.close_reason, "finished");

    let text = std::fs::read_to_string(&feed).unwrap();
    let mut items: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    items.sort();
    assert_eq!(items, ["/", "/a", "/c", "/flaky"]);

    let ledger = ledger.lock().unwrap();
    assert!(
        ledger.open.is_empty(),
        "unsettled leases: {:?}",
        ledger.open
    );
    assert_eq!(ledger.handed_out, 11, "8 URLs, then 3 more attempts");
    assert_eq!(ledger.completed.len() as u64, ledger.handed_out);
    assert!(
        ledger.completed.values().all(|n| *n == 1),
        "each lease completed once"
    );
    assert!(
        after_ack_ran.load(Ordering::SeqCst),
        "the work waiting on /a's ack ran"
    );
    let last = progress.borrow().clone();
    assert!(last.finished && !last.stopping);
    assert_eq!(last.stats.items_scraped, 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_asked_before_the_start_fetches_nothing_and_leaves_the_start_pending() {
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let site = Site {
        hits: Mutex::new(HashMap::new()),
        after_ack_ran: Arc::new(AtomicBool::new(false)),
    };
    let fifo = Fifo {
        queue: VecDeque::new(),
        seen: HashSet::new(),
        next_lease: 0,
        ledger: Arc::clone(&ledger),
    };
    let engine = Engine::new(Paths, site, fifo, Settings::default());
    engine.shutdown_handle().request();
    let stats = engine.run().await.expect("the crawl succeeds");
    assert_eq!(stats.requests_enqueued, 1);
    assert_eq!(stats.pending, 1);
    assert_eq!(stats.fetched, 0);
    assert!(stats.reconciles(), "{stats:?}");
    assert_eq!(stats.close_reason, "stopped");
    assert_eq!(ledger.lock().unwrap().handed_out, 0);
}

fn fifo(ledger: &Arc<Mutex<Ledger>>) -> Fifo {
    Fifo {
        queue: VecDeque::new(),
        seen: HashSet::new(),
        next_lease: 0,
        ledger: Arc::clone(ledger),
    }
}

fn site() -> Site {
    Site {
        hits: Mutex::new(HashMap::new()),
        after_ack_ran: Arc::new(AtomicBool::new(false)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_limit_stops_like_a_stop_request_and_leaves_the_rest_pending() {
    let dir = tempfile::tempdir().unwrap();
    let feed = dir.path().join("items.jsonl");
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    // One request at a time, so the limit is met exactly on the start page.
    let settings = Settings {
        concurrency: 1,
        close_item_count: 1,
        ..Settings::default()
    };
    let engine =
        Engine::new(Paths, site(), fifo(&ledger), settings).feed(FeedSpec::new(&feed).unwrap());
    let shutdown = engine.shutdown_handle();
    let stats = tokio::time::timeout(Duration::from_secs(30), engine.run())
        .await
        .expect("the crawl ends")
        .expect("the crawl succeeds");
    assert_eq!(stats.close_reason, "close_item_count");
    assert_eq!(stats.fetched, 1);
    assert_eq!(stats.items_scraped, 1);
    // The start page's 6 distinct links stay queued, as after a Ctrl-C.
    assert_eq!(stats.pending, 6, "{stats:?}");
    assert!(stats.reconciles(), "{stats:?}");
    assert_eq!(
        shutdown.requested(),
        1,
        "one stop request: a Ctrl-C now would be the second and stop at once"
    );
    let ledger = ledger.lock().unwrap();
    assert_eq!(ledger.handed_out, 1);
    assert!(ledger.open.is_empty(), "the start page was acknowledged");
    assert_eq!(std::fs::read_to_string(&feed).unwrap().lines().count(), 1);
}

/// Asks to close the crawl once it has seen the item of `/a`.
#[derive(Default)]
struct CloseAfterA(AtomicBool);

impl Pipeline<String> for CloseAfterA {
    async fn process(&self, item: String) -> Result<Processed<String>> {
        if item == "/a" {
            self.0.store(true, Ordering::SeqCst);
        }
        Ok(Processed::Keep(item))
    }

    fn close_crawl(&self) -> Option<String> {
        self.0.load(Ordering::SeqCst).then(|| "saw /a".to_owned())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_closes_the_crawl_with_its_reason() {
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let settings = Settings {
        concurrency: 1,
        ..Settings::default()
    };
    let engine =
        Engine::new(Paths, site(), fifo(&ledger), settings).pipeline(CloseAfterA::default());
    let stats = tokio::time::timeout(Duration::from_secs(30), engine.run())
        .await
        .expect("the crawl ends")
        .expect("the crawl succeeds");
    assert_eq!(stats.close_reason, "saw /a");
    assert_eq!(stats.fetched, 2, "/ then /a, first in first out");
    assert!(stats.pending > 0, "{stats:?}");
    assert!(stats.reconciles(), "{stats:?}");
    assert!(stats.to_string().contains("close reason       saw /a"));
}

/// `/` links to `/slow` and `/a`; `/a` asks for a wait of an hour; `/slow`, parsed slowly,
/// links to `/c` and `/d`, found only after the host is skipped.
struct LongWait;

impl Downloader for LongWait {
    async fn fetch(&self, req: &Request) -> Download {
        let path = req.url.path();
        let (status, body) = match path {
            "/" => (200, r#"<a href="/slow">s</a><a href="/a">a</a>"#),
            "/slow" => (200, r#"<a href="/c">c</a><a href="/d">d</a>"#),
            "/a" => (429, "later"),
            _ => (200, "<p>leaf</p>"),
        };
        let retry_after = (path == "/a").then_some(Duration::from_secs(3600));
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/html"),
        );
        let page = Response::new(
            req.clone(),
            req.url.clone(),
            status,
            headers,
            bytes::Bytes::from_static(body.as_bytes()),
        );
        Download {
            outcome: Fetched::Response(page),
            feedback: Feedback {
                sent: true,
                status: Some(status),
                retry_after,
                ..Feedback::default()
            },
        }
    }
}

/// Follows every link; takes a while over `/slow`.
struct SlowPaths;

impl Spider for SlowPaths {
    type Item = String;

    fn name(&self) -> &str {
        "slow-paths"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![format!("{SITE}/")]
    }

    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        if page.url().path() == "/slow" {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        out.follow_all(page.select("a").attrs("href"));
        Ok(())
    }
}

/// A FIFO frontier (one host) that skips its host, as the real one does, when an answer asks
/// for a wait over `max_retry_after`: what is queued, retried or found later is set aside for
/// the engine to count.
struct Skipping {
    queue: VecDeque<Request>,
    leased: HashMap<u64, Request>,
    next_lease: u64,
    skipped: Option<String>,
    set_aside: Vec<(Request, String)>,
    max_wait: Duration,
}

impl Scheduler for Skipping {
    fn enqueue(&mut self, request: Request, _now: Instant) -> Admission {
        match &self.skipped {
            Some(why) => self.set_aside.push((request, why.clone())),
            None => self.queue.push_back(request),
        }
        Admission::Queued
    }

    fn next(&mut self, _now: Instant) -> Next {
        let Some(req) = self.queue.pop_front() else {
            return Next::Empty;
        };
        self.next_lease += 1;
        self.leased.insert(self.next_lease, req.clone());
        Next::Ready(Lease(self.next_lease), req)
    }

    fn complete(&mut self, _lease: Lease, feedback: &Feedback, _now: Instant) {
        if feedback.retry_after.is_some_and(|w| w > self.max_wait) && self.skipped.is_none() {
            let why = "Retry-After asked for a wait of 3600s, more than max_retry_after".to_owned();
            for req in self.queue.drain(..) {
                self.set_aside.push((req, why.clone()));
            }
            self.skipped = Some(why);
        }
    }

    fn acknowledge(&mut self, lease: Lease) {
        assert!(self.leased.remove(&lease.0).is_some(), "{lease:?}");
    }

    fn queued(&self) -> usize {
        self.queue.len()
    }

    fn retry(&mut self, lease: Lease, request: Request, _not_before: Instant) {
        assert!(self.leased.remove(&lease.0).is_some(), "{lease:?}");
        let _ = self.enqueue(request, Instant::now());
    }

    fn take_skipped(&mut self) -> Vec<(Request, String)> {
        std::mem::take(&mut self.set_aside)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_of_a_skipped_host_end_in_the_failures_file_even_when_found_last() {
    let dir = tempfile::tempdir().unwrap();
    let failures = dir.path().join("failures.jsonl");
    let settings = Settings {
        concurrency: 2,
        failures_file: Some(failures.to_string_lossy().into_owned()),
        ..Settings::default()
    };
    let frontier = Skipping {
        queue: VecDeque::new(),
        leased: HashMap::new(),
        next_lease: 0,
        skipped: None,
        set_aside: Vec::new(),
        max_wait: settings.max_retry_after,
    };
    let stats = tokio::time::timeout(
        Duration::from_secs(30),
        Engine::new(SlowPaths, LongWait, frontier, settings).run(),
    )
    .await
    .expect("the crawl ends")
    .expect("the crawl succeeds");
    // `/a`'s retry, and `/c` and `/d`, queued by the crawl's last settle after the skip.
    assert_eq!(stats.skipped_host, 3, "{stats:?}");
    assert_eq!(stats.fetched, 2, "/ and /slow");
    assert_eq!(stats.retries, 1);
    assert_eq!(stats.pending, 0);
    assert!(stats.reconciles(), "{stats:?}");
    let text = std::fs::read_to_string(&failures).unwrap();
    let mut lines: Vec<(String, String, u64, String)> = text
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["url"].as_str().unwrap().to_owned(),
                v["reason"].as_str().unwrap().to_owned(),
                v["attempts"].as_u64().unwrap(),
                v["message"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    lines.sort();
    let urls: Vec<&str> = lines.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(
        urls,
        [
            format!("{SITE}/a"),
            format!("{SITE}/c"),
            format!("{SITE}/d")
        ],
        "{text}"
    );
    for (url, reason, attempts, message) in &lines {
        assert_eq!(reason, "host_skipped", "{url}");
        assert!(message.contains("max_retry_after"), "{url}: {message}");
        // `/a` was sent once; `/c` and `/d` never.
        assert_eq!(*attempts, u64::from(url.ends_with("/a")), "{url}");
    }
}
