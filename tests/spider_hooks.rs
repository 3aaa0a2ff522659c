//! Every answer reaches the spider that asks for it (issue 45), end to end against the lab:
//! statuses a spider, a request or the settings allow reach the callback with their body
//! (after the retries, the host's hold kept); errbacks receive failures and refusals and
//! emit items; `closed` is called once with the reason; the spider's own counters reach the
//! final stats.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crawler::prelude::*;
use crawler_lab::{Lab, ScriptReply};

/// Lab pages: `/` links to a 404, a 410 and a page that always answers 503 (each with a
/// body the spider can read), and to a robots-disallowed page; `/long` asks for a wait of
/// two hours.
async fn lab() -> Lab {
    Lab::builder()
        .script(|req| {
            let html =
                |status: u16, body: &str| Some(ScriptReply::new(status).html(body.to_owned()));
            match req.path {
                "/robots.txt" => None,
                "/" => html(
                    200,
                    r#"<a href="/missing">m</a><a href="/gone">g</a><a href="/private/p">p</a>"#,
                ),
                "/missing" => html(404, "<h1>No such product</h1><a href='/instead'>i</a>"),
                "/instead" => html(200, "<h1>Replacement</h1>"),
                "/moved" | "/moved-too" => Some(ScriptReply::redirect(301, "/instead")),
                "/gone" => html(410, "<h1>Gone for good</h1>"),
                // A wait far over max_retry_after: the host is skipped for the run.
                "/long" => Some(
                    ScriptReply::new(503)
                        .header("Retry-After", "7200")
                        .html("<h1>Closed for maintenance</h1>"),
                ),
                "/busy" => Some(
                    ScriptReply::new(503)
                        .header("Retry-After", "1")
                        .html("<h1>Busy, come back</h1>"),
                ),
                _ => html(200, "<p>leaf</p>"),
            }
        })
        .start()
        .await
        .expect("lab")
}

#[derive(Debug, Serialize, serde::Deserialize, PartialEq)]
struct Seen {
    url: String,
    status: u16,
    text: String,
}

/// What `closed` was called with, each time.
type Closed = Arc<Mutex<Vec<(String, Stats)>>>;

/// Allows 404 (its own list); counts what it sees; records `closed`.
struct Statuses {
    start: String,
    closed: Closed,
}

impl Spider for Statuses {
    type Item = Seen;

    fn name(&self) -> &str {
        "statuses"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }

    fn allowed_statuses(&self) -> AllowedStatuses {
        AllowedStatuses::list([404])
    }

    async fn parse(&self, page: Response, out: &mut Output<Seen>) -> Result<()> {
        out.stats().inc("pages");
        if page.status() != 200 {
            out.stats().inc(&format!("status/{}", page.status()));
        }
        out.item(Seen {
            url: page.url().path().to_owned(),
            status: page.status(),
            text: page.text_of("h1").unwrap_or_default(),
        });
        out.follow_all(page.select("a").attrs("href"));
        Ok(())
    }

    async fn closed(&self, reason: &str, stats: &Stats) -> Result<()> {
        self.closed
            .lock()
            .expect("lock")
            .push((reason.to_owned(), stats.clone()));
        Ok(())
    }
}

fn read_items(path: &std::path::Path) -> Vec<Seen> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut items: Vec<Seen> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    items.sort_by(|a, b| a.url.cmp(&b.url));
    items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_404_reaches_the_callback_with_its_body_and_closed_sees_the_counters() {
    let lab = lab().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let items = dir.path().join("items.jsonl");
    let failures = dir.path().join("failures.jsonl");
    let closed = Closed::default();
    let stats = Crawl::new(Statuses {
        start: lab.url_for("/"),
        closed: Arc::clone(&closed),
    })
    .progress(false)
    .set("start_rate", "20")
    .set("failures_file", failures.to_string_lossy().to_string())
    .feed(&items)
    .expect("feed")
    .run()
    .await
    .expect("crawl");

    // The 404's body reached the callback, and its link was followed; the 410 (not
    // allowed) did not, and the spider has no errback, so it is in the failures file.
    let seen = read_items(&items);
    let paths: Vec<(&str, u16, &str)> = seen
        .iter()
        .map(|s| (s.url.as_str(), s.status, s.text.as_str()))
        .collect();
    assert_eq!(
        paths,
        [
            ("/", 200, ""),
            ("/instead", 200, "Replacement"),
            ("/missing", 404, "No such product"),
        ],
        "{stats}"
    );
    let listed = std::fs::read_to_string(&failures).expect("failures file");
    let lines: Vec<serde_json::Value> = listed
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 1, "{listed}");
    assert_eq!(lines[0]["url"], lab.url_for("/gone"));
    assert_eq!(lines[0]["reason"], "http_status");
    assert_eq!(lines[0]["status"], 410);

    assert_eq!(stats.fetched, 3, "{stats}");
    assert_eq!(stats.failed.get("http_status"), Some(&1), "{stats}");
    assert_eq!(stats.disallowed, 1, "{stats}");
    assert!(stats.reconciles(), "{stats:?}");
    // The spider's own counters, in the stats, their JSON and the printed summary.
    assert_eq!(stats.spider.get("pages"), Some(&3), "{stats}");
    assert_eq!(stats.spider.get("status/404"), Some(&1), "{stats}");
    let json = serde_json::to_value(&stats).expect("stats serialise");
    assert_eq!(json["spider"]["status/404"], 1, "{json}");
    assert!(
        stats
            .to_string()
            .contains("spider stats       pages=3 status/404=1"),
        "{stats}"
    );
    // `closed` ran once, after the crawl, with its reason and the final counters.
    let calls = closed.lock().expect("lock").clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0, "finished");
    assert_eq!(calls[0].1.spider.get("pages"), Some(&3));
    assert_eq!(calls[0].1.items_scraped, 3);
    lab.shutdown().await;
}

/// No list of its own: the setting or the request decides.
struct Plain {
    requests: Vec<Request>,
}

impl Spider for Plain {
    type Item = Seen;

    fn name(&self) -> &str {
        "plain"
    }

    fn start_requests(&self) -> Result<Vec<Request>> {
        Ok(self.requests.clone())
    }

    async fn parse(&self, page: Response, out: &mut Output<Seen>) -> Result<()> {
        out.item(Seen {
            url: page.url().path().to_owned(),
            status: page.status(),
            text: page.text_of("h1").unwrap_or_default(),
        });
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allowed_statuses_setting_lets_a_410_through() {
    let lab = lab().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let items = dir.path().join("items.jsonl");
    let requests = vec![
        Request::get(lab.url_for("/gone")).expect("url"),
        Request::get(lab.url_for("/missing")).expect("url"),
    ];
    let stats = Crawl::new(Plain { requests })
        .progress(false)
        .set("start_rate", "20")
        .set("allowed_statuses", "410")
        .feed(&items)
        .expect("feed")
        .run()
        .await
        .expect("crawl");
    let seen = read_items(&items);
    assert_eq!(seen.len(), 1, "{stats}");
    assert_eq!((seen[0].url.as_str(), seen[0].status), ("/gone", 410));
    assert_eq!(seen[0].text, "Gone for good");
    assert_eq!(
        stats.failed.get("http_status"),
        Some(&1),
        "the 404: {stats}"
    );
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_503_is_retried_first_and_its_host_held_then_reaches_the_callback() {
    let lab = lab().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let items = dir.path().join("items.jsonl");
    let requests = vec![
        Request::get(lab.url_for("/busy"))
            .expect("url")
            .allow_statuses([503]),
    ];
    let stats = tokio::time::timeout(
        Duration::from_secs(60),
        Crawl::new(Plain { requests })
            .progress(false)
            .set("start_rate", "20")
            .set("retry_times", "1")
            .feed(&items)
            .expect("feed")
            .run(),
    )
    .await
    .expect("in time")
    .expect("crawl");

    let seen = read_items(&items);
    assert_eq!(seen.len(), 1, "{stats}");
    assert_eq!(
        (seen[0].status, seen[0].text.as_str()),
        (503, "Busy, come back")
    );
    assert_eq!(stats.retries, 1, "retried first: {stats}");
    assert_eq!(stats.status.get(&503), Some(&2), "{stats}");
    assert_eq!(stats.fetched, 1, "{stats}");
    assert!(stats.failed.is_empty(), "{stats}");
    // The host was held by the 503's Retry-After, as for any 503: the retry came after
    // the wait, and nothing reached the server inside it.
    let busy: Vec<_> = lab
        .recorder()
        .requests()
        .into_iter()
        .filter(|r| r.path == "/busy")
        .collect();
    assert_eq!(busy.len(), 2, "{busy:?}");
    assert!(
        busy[1].at >= busy[0].replied_at + Duration::from_secs(1),
        "the retry went inside the Retry-After: {busy:?}"
    );
    assert_eq!(lab.recorder().report().total_violations(), 0);
    let host = stats.hosts.first().expect("host stats");
    assert!(host.holds >= 1, "the 503 held its host: {host:?}");
    lab.shutdown().await;
}

/// Names an errback on every request; the errback emits an item per failure.
struct Errbacks {
    requests: Vec<Request>,
}

impl Spider for Errbacks {
    type Item = Seen;

    fn name(&self) -> &str {
        "errbacks"
    }

    fn start_requests(&self) -> Result<Vec<Request>> {
        Ok(self.requests.clone())
    }

    async fn parse(&self, page: Response, out: &mut Output<Seen>) -> Result<()> {
        out.item(Seen {
            url: page.url().path().to_owned(),
            status: page.status(),
            text: "parsed".to_owned(),
        });
        Ok(())
    }

    async fn errback(&self, failure: FailedRequest, out: &mut Output<Seen>) -> Result<()> {
        assert_eq!(failure.errback(), Some("lost"));
        out.stats().inc(&format!("errback/{}", failure.kind()));
        let tag: Option<String> = failure.meta("tag");
        out.item(Seen {
            url: failure.url().path().to_owned(),
            status: failure.status().unwrap_or(0),
            text: format!(
                "{} attempts={} tag={} headers={}",
                failure.kind(),
                failure.attempts(),
                tag.unwrap_or_default(),
                failure.headers().is_some()
            ),
        });
        // A replacement, as a retry on a mirror would be.
        if failure.url().path() == "/gone" {
            out.follow("/instead");
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_errback_receives_a_connection_failure_and_a_forbidden_address_and_emits_items() {
    // A port nothing listens on: the connection is refused.
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let items = dir.path().join("items.jsonl");
    let failures = dir.path().join("failures.jsonl");
    let url = format!("http://127.0.0.1:{closed_port}/down");
    let requests = vec![
        Request::get(&url)
            .expect("url")
            .errback("lost")
            .meta("tag", "t1")
            .expect("meta"),
        // A cloud metadata address: refused before connecting, nothing leaves the machine.
        Request::get("http://169.254.169.254/latest/meta-data/")
            .expect("url")
            .errback("lost"),
    ];
    let stats = tokio::time::timeout(
        Duration::from_secs(60),
        Crawl::new(Errbacks { requests })
            .progress(false)
            // robots.txt of a closed port would skip the host before the page is tried.
            .set("obey_robots", "false")
            .set("retry_times", "0")
            .set("failures_file", failures.to_string_lossy().to_string())
            .feed(&items)
            .expect("feed")
            .run(),
    )
    .await
    .expect("in time")
    .expect("crawl");
    let seen = read_items(&items);
    let got: Vec<(&str, &str)> = seen
        .iter()
        .map(|s| (s.url.as_str(), s.text.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("/down", "connection attempts=1 tag=t1 headers=false"),
            (
                "/latest/meta-data/",
                "forbidden_address attempts=0 tag= headers=false"
            ),
        ],
        "{stats}"
    );
    assert_eq!(stats.failed.get("connection"), Some(&1), "{stats}");
    assert_eq!(stats.failed.get("forbidden_address"), Some(&1), "{stats}");
    assert_eq!(stats.spider.get("errback/connection"), Some(&1), "{stats}");
    // Handled by the errback: not in the failures file.
    let listed = std::fs::read_to_string(&failures).unwrap_or_default();
    assert!(listed.trim().is_empty(), "{listed}");
    assert!(stats.reconciles(), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_errback_receives_robots_refusals_and_statuses_and_its_requests_are_followed() {
    let lab = lab().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let items = dir.path().join("items.jsonl");
    let requests = ["/private/p", "/gone"]
        .into_iter()
        .map(|p| Request::get(lab.url_for(p)).expect("url").errback("lost"))
        .collect();
    let stats = Crawl::new(Errbacks { requests })
        .progress(false)
        .set("start_rate", "20")
        .feed(&items)
        .expect("feed")
        .run()
        .await
        .expect("crawl");
    let seen = read_items(&items);
    let got: Vec<(&str, u16, &str)> = seen
        .iter()
        .map(|s| (s.url.as_str(), s.status, s.text.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("/gone", 410, "http_status attempts=1 tag= headers=true"),
            ("/instead", 200, "parsed"),
            (
                "/private/p",
                0,
                "robots_disallowed attempts=0 tag= headers=false"
            ),
        ],
        "{stats}"
    );
    assert_eq!(stats.disallowed, 1, "{stats}");
    assert_eq!(stats.failed.get("http_status"), Some(&1), "{stats}");
    assert_eq!(stats.fetched, 1, "{stats}");
    assert!(stats.reconciles(), "{stats:?}");
    // Nothing was sent to the disallowed path.
    assert!(
        lab.recorder()
            .requests()
            .iter()
            .all(|r| !r.path.starts_with("/private/"))
    );
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_errback_the_spider_does_not_implement_fails_as_a_spider_error_and_is_listed() {
    let lab = lab().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let failures = dir.path().join("failures.jsonl");
    // `Plain` has no errback: the default one refuses, so nothing is lost silently.
    let requests = vec![
        Request::get(lab.url_for("/gone"))
            .expect("url")
            .errback("nowhere"),
    ];
    let stats = Crawl::new(Plain { requests })
        .progress(false)
        .set("failures_file", failures.to_string_lossy().to_string())
        .run()
        .await
        .expect("crawl");
    assert_eq!(stats.spider_errors, 1, "{stats}");
    assert_eq!(stats.failed.get("http_status"), Some(&1), "{stats}");
    let listed = std::fs::read_to_string(&failures).expect("failures file");
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.contains(&lab.url_for("/gone")), "{listed}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_followed_unless_the_request_lists_their_status() {
    let lab = lab().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let items = dir.path().join("items.jsonl");
    let requests = vec![
        // The setting's "all" lets redirects be followed, as Scrapy's HTTPERROR_ALLOW_ALL.
        Request::get(lab.url_for("/moved")).expect("url"),
        // The request's own list hands the 301 to the callback.
        Request::get(lab.url_for("/moved-too"))
            .expect("url")
            .allow_statuses([301]),
    ];
    let stats = Crawl::new(Plain { requests })
        .progress(false)
        .set("start_rate", "20")
        .set("allowed_statuses", "all")
        .feed(&items)
        .expect("feed")
        .run()
        .await
        .expect("crawl");
    let seen = read_items(&items);
    let got: Vec<(&str, u16)> = seen.iter().map(|s| (s.url.as_str(), s.status)).collect();
    assert_eq!(got, [("/instead", 200), ("/moved-too", 301)], "{stats}");
    assert_eq!(stats.redirected, 1, "{stats}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_set_aside_with_their_skipped_host_reach_the_errback() {
    let lab = lab().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let items = dir.path().join("items.jsonl");
    let failures = dir.path().join("failures.jsonl");
    // `/long` goes first (one request in flight, and a priority that keeps it ahead when
    // robots.txt takes its first turn); its two-hour Retry-After skips the host, and the
    // pages still queued behind it are set aside unsent.
    let mut requests = vec![Request::get(lab.url_for("/long")).expect("url").priority(1)];
    for p in ["/p1", "/p2", "/p3"] {
        requests.push(Request::get(lab.url_for(p)).expect("url").errback("lost"));
    }
    let stats = tokio::time::timeout(
        Duration::from_secs(60),
        Crawl::new(Errbacks { requests })
            .progress(false)
            .set("concurrency_per_host", "1")
            .set("failures_file", failures.to_string_lossy().to_string())
            .feed(&items)
            .expect("feed")
            .run(),
    )
    .await
    .expect("in time")
    .expect("crawl");
    let seen = read_items(&items);
    let got: Vec<(&str, &str)> = seen
        .iter()
        .map(|s| (s.url.as_str(), s.text.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("/p1", "host_skipped attempts=0 tag= headers=false"),
            ("/p2", "host_skipped attempts=0 tag= headers=false"),
            ("/p3", "host_skipped attempts=0 tag= headers=false"),
        ],
        "{stats}"
    );
    assert_eq!(
        stats.spider.get("errback/host_skipped"),
        Some(&3),
        "{stats}"
    );
    // Still counted as skipped with their host; only `/long` (no errback) is listed.
    assert!(stats.skipped_host >= 3, "{stats}");
    let listed = std::fs::read_to_string(&failures).unwrap_or_default();
    assert!(
        listed.lines().all(|l| l.contains("/long")),
        "handled by the errback, not listed: {listed}"
    );
    let sent: Vec<String> = lab
        .recorder()
        .requests()
        .iter()
        .map(|r| r.path.clone())
        .filter(|p| p.starts_with("/p"))
        .collect();
    assert!(
        sent.is_empty(),
        "nothing sent to the skipped host: {sent:?}"
    );
    assert!(stats.reconciles(), "{stats:?}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_politeness_record_counts_as_sent_only_what_reached_the_wire() {
    let lab = lab().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let record = dir.path().join("politeness.jsonl");
    let stats = Crawl::new(Statuses {
        start: lab.url_for("/"),
        closed: Closed::default(),
    })
    .progress(false)
    .set("start_rate", "20")
    .politeness_record(&record)
    .run()
    .await
    .expect("crawl");
    // `/private/p` was handed out, then refused by the cached robots.txt: never sent.
    assert_eq!(stats.disallowed, 1, "{stats}");
    let text = std::fs::read_to_string(&record).expect("the record");
    let (mut sent, mut unsent) = (0, 0);
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        if v["t"] == "second" {
            sent += v["sent"].as_u64().unwrap_or(0);
            unsent += v["unsent"].as_u64().unwrap_or(0);
        }
    }
    let arrived = lab.recorder().requests().len() as u64;
    assert_eq!(
        sent, arrived,
        "the record's sends are the requests the server saw (robots.txt included): {text}"
    );
    assert_eq!(unsent, 1, "the refusal is counted apart: {text}");
    lab.shutdown().await;
}
