//! Every request that touches the network goes through robots.txt and the slot of the host
//! it is sent to, and the slot hears what a response says the moment it arrives: proved from
//! the server's side against lab servers on 127.0.0.1 (several labs = several hosts).
//! Waits are scaled down (a few seconds instead of 30 s) so the suite stays short; the
//! shapes are the real ones.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use crawler::prelude::*;
use crawler_lab::{Lab, RecordedRequest, RetryAfter, Scenario, ScriptReply};

/// One item per page that reached the spider.
#[derive(Debug, Serialize)]
struct Page {
    url: String,
}

/// Fetches its start URLs, follows book links on listings, and takes `slow` to parse pages
/// whose path contains `/slow` or that come with an `X-Slow` header (a heavy page or a slow
/// pipeline), `parse` for the others.
struct Pages {
    start: Vec<String>,
    follow: bool,
    slow: Duration,
    parse: Duration,
}

impl Pages {
    fn new(start: Vec<String>) -> Self {
        Self {
            start,
            follow: false,
            slow: Duration::ZERO,
            parse: Duration::ZERO,
        }
    }
}

impl Spider for Pages {
    type Item = Page;

    fn name(&self) -> &str {
        "pages"
    }

    fn start_urls(&self) -> Vec<String> {
        self.start.clone()
    }

    async fn parse(&self, page: Response, out: &mut Output<Page>) -> Result<()> {
        if page.url().path().contains("/slow") || page.headers().contains_key("x-slow") {
            tokio::time::sleep(self.slow).await;
        } else if !self.parse.is_zero() {
            tokio::time::sleep(self.parse).await;
        }
        if self.follow {
            for href in page.select("a").attrs("href") {
                if href.contains("/book-") {
                    out.follow(href);
                }
            }
        }
        out.item(Page {
            url: page.url().to_string(),
        });
        Ok(())
    }
}

fn crawl(spider: Pages) -> Crawl<Pages> {
    Crawl::new(spider)
        .progress(false)
        // Bounded: no test may hang on a bug.
        .set("download_timeout", "10s")
}

fn html(title: &str) -> String {
    format!(
        "<!DOCTYPE html><html><head><title>{title}</title></head><body><p>{title}</p></body></html>"
    )
}

fn page_requests(lab: &Lab) -> Vec<RecordedRequest> {
    lab.recorder()
        .requests()
        .into_iter()
        .filter(|r| r.path != "/robots.txt")
        .collect()
}

/// Seconds (lab clock) between the response to the first request matching `pred` and the
/// next request to the same lab.
fn gap_after(lab: &Lab, pred: impl Fn(&RecordedRequest) -> bool) -> Option<f64> {
    let all = lab.recorder().requests();
    let i = all.iter().position(pred)?;
    let replied = all[i].replied_at.as_secs_f64();
    all.iter()
        .skip(i + 1)
        .map(|r| r.at.as_secs_f64())
        .find(|&t| t >= replied)
        .map(|t| t - replied)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remaining_zero_on_the_first_2xx_stops_the_next_send_while_the_page_is_parsed() {
    // Four in flight to one host. The first answer says the quota is spent for 3 s; that
    // page takes 2 s to parse, the others 0.3 s. The slot must hear the quota when the answer
    // arrives, not after the parse, so nothing else leaves inside the 3 s (a request that
    // was already on its way when the answer left the server gets the lab's 0.1 s grace).
    let first = Arc::new(AtomicBool::new(true));
    let lab = Lab::builder()
        .script(move |req| {
            if !req.path.starts_with("/page-") {
                return None;
            }
            let reply = ScriptReply::new(200).html(html(req.path));
            Some(if first.swap(false, Ordering::SeqCst) {
                reply
                    .header("RateLimit", "\"default\";r=0;t=3")
                    .header("RateLimit-Policy", "\"default\";q=4;w=3")
                    .header("X-Slow", "1")
                    .announce(Duration::from_secs(3))
            } else {
                reply
            })
        })
        .start()
        .await
        .expect("lab");
    let start: Vec<String> = (0..12)
        .map(|i| lab.url_for(&format!("/page-{i}")))
        .collect();
    let spider = Pages {
        slow: Duration::from_millis(2000),
        parse: Duration::from_millis(300),
        ..Pages::new(start)
    };
    let stats = crawl(spider)
        .set("obey_robots", "false")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("randomize_delay", "false")
        .set("concurrency_per_host", "4")
        .run()
        .await
        .expect("crawl");
    assert_eq!(stats.items_scraped, 12, "{stats}");
    let report = lab.recorder().report();
    let me = report.clients.values().next().expect("one client");
    assert_eq!(me.violations, 0, "{:?}", me.violation_samples);
    let pages = page_requests(&lab);
    let exhausted = pages
        .iter()
        .map(|r| r.replied_at.as_secs_f64())
        .fold(f64::INFINITY, f64::min);
    let after: Vec<f64> = pages
        .iter()
        .map(|r| r.at.as_secs_f64() - exhausted)
        .collect();
    let early: Vec<&f64> = after.iter().filter(|&&t| t > 0.1 && t < 2.9).collect();
    assert!(
        early.is_empty(),
        "sent inside the exhausted quota at {early:?}"
    );
    // Requests sent before the answer was read (within the lab's grace) are the only ones
    // before the reset; the rest waited for it.
    assert!(after.iter().any(|&t| t >= 2.9), "{after:?}");
    assert!(stats.reconciles(), "{stats}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_txt_503_for_a_while_holds_the_host_and_loses_no_page() {
    // robots.txt answers 503 (no Retry-After) for the lab's first 4 s, then the usual rules.
    // RFC 9309's "disallow for now" means wait: every page is fetched after the outage.
    let lab = Lab::builder()
        .script(|req| {
            (req.path == "/robots.txt" && req.since_start < Duration::from_secs(4))
                .then(|| ScriptReply::new(503).html(html("maintenance")))
        })
        .start()
        .await
        .expect("lab");
    let start: Vec<String> = (1..=20)
        .map(|i| lab.url_for(&format!("/catalogue/book-{i}.html")))
        .collect();
    let started = std::time::Instant::now();
    let stats = crawl(Pages::new(start))
        .set("start_rate", "20")
        .set("max_rate", "50")
        .run()
        .await
        .expect("crawl");
    let wall = started.elapsed();
    assert_eq!(stats.items_scraped, 20, "{stats}");
    assert_eq!(stats.disallowed, 0, "{stats}");
    assert!(stats.failed.is_empty(), "{stats}");
    assert_eq!(stats.skipped_host, 0, "{stats}");
    let all = lab.recorder().requests();
    let robots: Vec<&RecordedRequest> = all.iter().filter(|r| r.path == "/robots.txt").collect();
    assert!(
        robots.iter().any(|r| r.status == 503),
        "the outage was seen"
    );
    let first_ok = robots
        .iter()
        .find(|r| r.status == 200)
        .map(|r| r.at)
        .expect("robots.txt read after the outage");
    // No page before robots.txt was read, and robots.txt was not hammered meanwhile.
    assert!(page_requests(&lab).iter().all(|r| r.at >= first_ok));
    assert!(robots.len() <= 6, "{} robots.txt requests", robots.len());
    eprintln!(
        "robots outage: {} requests ({} robots.txt), pages lost 0, wall {:.1}s",
        all.len(),
        robots.len(),
        wall.as_secs_f64()
    );
    assert!(stats.reconciles(), "{stats}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_outage_longer_than_allowed_skips_the_host_with_a_reason() {
    let lab = Lab::builder()
        .script(|req| (req.path == "/robots.txt").then(|| ScriptReply::new(503)))
        .start()
        .await
        .expect("lab");
    let start: Vec<String> = (1..=3)
        .map(|i| lab.url_for(&format!("/catalogue/book-{i}.html")))
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let failures = dir.path().join("failures.jsonl");
    let stats = crawl(Pages::new(start))
        .set("robots_outage_max", "3s")
        .set("failures_file", failures.to_string_lossy().to_string())
        .run()
        .await
        .expect("crawl");
    assert_eq!(stats.skipped_host, 3, "{stats}");
    assert_eq!(stats.disallowed, 0, "{stats}");
    assert!(page_requests(&lab).is_empty());
    let text = std::fs::read_to_string(&failures).expect("failures file");
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.contains("robots.txt unavailable"), "{text}");
    assert!(stats.reconciles(), "{stats}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_without_retry_after_holds_the_host_and_every_item_arrives() {
    // 10 r/s with a burst of 5, refusals without Retry-After; we start at 30 r/s.
    let lab = Lab::builder()
        .books(100)
        .scenario(Scenario::rate_limited(10.0, 5).retry_after(RetryAfter::Absent))
        .start()
        .await
        .expect("lab");
    // 30 pages: the refusals of the first seconds and their holds (later, the crawl
    // mostly waits through backoff holds that grow with each repeat).
    let start: Vec<String> = (1..=30)
        .map(|i| lab.url_for(&format!("/catalogue/book-{i}.html")))
        .collect();
    let stats = crawl(Pages::new(start))
        .set("start_rate", "30")
        .set("max_rate", "30")
        .set("concurrency_per_host", "4")
        .set("retry_times", "6")
        .run()
        .await
        .expect("crawl");
    assert_eq!(stats.items_scraped, 30, "{stats}");
    let all = lab.recorder().requests();
    let refusals: Vec<&RecordedRequest> = all.iter().filter(|r| r.status == 429).collect();
    assert!(
        !refusals.is_empty(),
        "starting at 3x the limit meets a refusal"
    );
    // After each refusal (and the grace for requests already in flight), nothing for at
    // least a second: the shortest backoff hold is 5 s, drawn with jitter down to half.
    for refusal in &refusals {
        let replied = refusal.replied_at.as_secs_f64();
        let next = all
            .iter()
            .map(|r| r.at.as_secs_f64())
            .filter(|&t| t > replied + 0.1)
            .fold(f64::INFINITY, f64::min);
        assert!(
            next - replied >= 0.95,
            "a request {:.2}s after a 429 at {replied:.2}s",
            next - replied
        );
    }
    assert!(stats.reconciles(), "{stats}");
    lab.shutdown().await;
}

async fn challenge_as(status: u16) {
    let first = Arc::new(AtomicBool::new(true));
    let lab = Lab::builder()
        .script(move |req| {
            if !req.path.starts_with("/catalogue/") || !first.swap(false, Ordering::SeqCst) {
                return None;
            }
            Some(ScriptReply::new(status).html(
                "<html><head><title>Just a moment...</title></head><body>\
                 <div id=\"cf-challenge-running\">Checking your browser</div></body></html>",
            ))
        })
        .start()
        .await
        .expect("lab");
    let start: Vec<String> = (1..=5)
        .map(|i| lab.url_for(&format!("/catalogue/book-{i}.html")))
        .collect();
    let stats = crawl(Pages::new(start))
        .set("obey_robots", "false")
        .set("throttle", "fixed")
        .set("download_delay", "100ms")
        .set("randomize_delay", "false")
        .set("soft_block_pause", "3s")
        .run()
        .await
        .expect("crawl");
    let gap = gap_after(&lab, |r| r.status == status).expect("challenge served");
    assert!(
        gap >= 2.9,
        "{status} challenge: next request {gap:.2}s later, pause is 3s"
    );
    assert!(gap < 10.0, "{status}: paused far too long ({gap:.1}s)");
    // The challenged page is retried after the pause.
    assert_eq!(stats.items_scraped, 5, "{stats}");
    assert!(stats.reconciles(), "{stats}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_challenge_served_as_403_pauses_the_host() {
    challenge_as(403).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_challenge_served_as_503_pauses_the_host() {
    challenge_as(503).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_date_retry_after_is_read_against_a_server_clock_ten_minutes_ahead() {
    // The server's clock runs 10 minutes ahead of ours. It refuses the first page with
    // `Retry-After: <its now + 5 s>` (an HTTP-date). Read against our clock that is a wait of
    // 10 min 5 s, beyond max_retry_after, and the host would be skipped; read against its
    // `Date` it is 5 s.
    let first = Arc::new(AtomicBool::new(true));
    let lab = Lab::builder()
        .script(move |req| {
            if !req.path.starts_with("/catalogue/") || !first.swap(false, Ordering::SeqCst) {
                return None;
            }
            let theirs = SystemTime::now() + Duration::from_secs(600);
            Some(
                ScriptReply::new(503)
                    .date(theirs)
                    .header(
                        "Retry-After",
                        ScriptReply::http_date(theirs + Duration::from_secs(5)),
                    )
                    .announce(Duration::from_secs(4))
                    .html(html("busy")),
            )
        })
        .start()
        .await
        .expect("lab");
    let start: Vec<String> = (1..=4)
        .map(|i| lab.url_for(&format!("/catalogue/book-{i}.html")))
        .collect();
    let stats = crawl(Pages::new(start))
        .set("obey_robots", "false")
        .set("start_rate", "10")
        .run()
        .await
        .expect("crawl");
    assert_eq!(stats.skipped_host, 0, "{stats}");
    assert_eq!(stats.items_scraped, 4, "{stats}");
    let gap = gap_after(&lab, |r| r.status == 503).expect("refusal served");
    assert!(
        (4.0..12.0).contains(&gap),
        "held {gap:.1}s, asked 5s by the server's clock"
    );
    let report = lab.recorder().report();
    let me = report.clients.values().next().expect("one client");
    assert_eq!(me.violations, 0, "{:?}", me.violation_samples);
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_robots_for_one_host_fetches_its_disallowed_paths_and_not_anothers() {
    let mine = Lab::builder().start().await.expect("lab");
    let theirs = Lab::builder().start().await.expect("lab");
    let rule = serde_json::from_value(serde_json::json!({
        "match": format!("127.0.0.1:{}", mine.addr().port()),
        "ignore_robots": true,
    }))
    .expect("host rule");
    let settings = Settings {
        hosts: vec![rule],
        ..Settings::default()
    };
    let start = vec![
        mine.url_for("/private/a.html"),
        theirs.url_for("/private/b.html"),
        theirs.url_for("/catalogue/book-1.html"),
    ];
    let stats = crawl(Pages::new(start))
        .settings(settings)
        .set("start_rate", "10")
        .run()
        .await
        .expect("crawl");
    let mine_paths: Vec<String> = mine
        .recorder()
        .requests()
        .into_iter()
        .map(|r| r.path)
        .collect();
    let theirs_paths: Vec<String> = theirs
        .recorder()
        .requests()
        .into_iter()
        .map(|r| r.path)
        .collect();
    assert!(
        mine_paths.contains(&"/private/a.html".to_owned()),
        "{mine_paths:?}"
    );
    assert!(
        !mine_paths.contains(&"/robots.txt".to_owned()),
        "robots.txt of an ignored host is not even asked: {mine_paths:?}"
    );
    assert!(
        !theirs_paths.iter().any(|p| p.starts_with("/private/")),
        "{theirs_paths:?}"
    );
    assert_eq!(stats.disallowed, 1, "{stats}");
    assert_eq!(stats.items_scraped, 2, "{stats}");
    mine.shutdown().await;
    theirs.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_into_a_robots_disallowed_path_is_never_fetched_and_is_counted() {
    let lab = Lab::builder()
        .script(|req| match req.path {
            "/go" => Some(ScriptReply::redirect(302, "/private/secret.html")),
            "/moved" => Some(ScriptReply::redirect(301, "/catalogue/book-1.html")),
            _ => None,
        })
        .start()
        .await
        .expect("lab");
    let stats = crawl(Pages::new(vec![lab.url_for("/go"), lab.url_for("/moved")]))
        .set("start_rate", "10")
        .run()
        .await
        .expect("crawl");
    let paths: Vec<String> = lab
        .recorder()
        .requests()
        .into_iter()
        .map(|r| r.path)
        .collect();
    assert!(
        !paths.iter().any(|p| p.starts_with("/private/")),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"/catalogue/book-1.html".to_owned()),
        "{paths:?}"
    );
    assert_eq!(stats.redirected, 2, "{stats}");
    assert_eq!(stats.disallowed, 1, "{stats}");
    assert_eq!(stats.items_scraped, 1, "{stats}");
    assert!(stats.reconciles(), "{stats}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_farm_of_twenty_hosts_redirecting_to_one_never_exceeds_its_limit() {
    // The target allows 5 r/s with a burst of 5 and refuses with Retry-After: 2. Twenty
    // source hosts (twenty labs, twenty ports) each redirect five pages to it. The target's
    // own slot paces every hop, whichever host sent it there, and its 429s hold it alone.
    let target = Lab::builder()
        .books(200)
        .scenario(Scenario::rate_limited(5.0, 5).retry_after(RetryAfter::Seconds(2)))
        .start()
        .await
        .expect("target lab");
    let mut sources = Vec::new();
    for s in 0..20u32 {
        let base = target.url();
        let lab = Lab::builder()
            .script(move |req| {
                let n: u32 = req.path.strip_prefix("/p/")?.parse().ok()?;
                Some(ScriptReply::redirect(
                    301,
                    format!("{base}catalogue/book-{}.html", s * 5 + n + 1),
                ))
            })
            .start()
            .await
            .expect("source lab");
        sources.push(lab);
    }
    let start: Vec<String> = sources
        .iter()
        .flat_map(|lab| (0..5).map(|n| lab.url_for(&format!("/p/{n}"))))
        .collect();
    let started = std::time::Instant::now();
    let stats = crawl(Pages::new(start))
        .set("start_rate", "10")
        .set("max_rate", "20")
        .set("concurrency", "32")
        .run()
        .await
        .expect("crawl");
    let wall = started.elapsed();
    let report = target.recorder().report();
    let t = report.clients.values().next().expect("the target saw us");
    eprintln!(
        "redirect farm: {} requests to the target ({} refused), max {} in any second, {} items of 100, wall {:.1}s",
        t.requests,
        t.status_429,
        t.max_per_second,
        stats.items_scraped,
        wall.as_secs_f64()
    );
    assert_eq!(stats.items_scraped, 100, "{stats}");
    assert_eq!(stats.redirected, 100, "{stats}");
    assert_eq!(t.violations, 0, "{:?}", t.violation_samples);
    // Rate 5/s plus the burst of 5, and the one robots.txt.
    assert!(
        t.max_per_second <= 11,
        "target saw {} in one second",
        t.max_per_second
    );
    assert!(t.status_429 <= 3, "{} refusals", t.status_429);
    assert!(stats.reconciles(), "{stats}");
    for lab in sources {
        lab.shutdown().await;
    }
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_on_a_maintenance_redirect_holds_the_host() {
    // A 302 to a maintenance page with `Retry-After: 3`: not a 429 or 503, still an
    // instruction for the whole host.
    let first = Arc::new(AtomicBool::new(true));
    let lab = Lab::builder()
        .script(move |req| {
            if req.path.starts_with("/catalogue/") && first.swap(false, Ordering::SeqCst) {
                return Some(
                    ScriptReply::redirect(302, "/maintenance")
                        .header("Retry-After", "3")
                        .html(html("moved")),
                );
            }
            (req.path == "/maintenance").then(|| ScriptReply::new(200).html(html("maintenance")))
        })
        .start()
        .await
        .expect("lab");
    let start: Vec<String> = (1..=4)
        .map(|i| lab.url_for(&format!("/catalogue/book-{i}.html")))
        .collect();
    let stats = crawl(Pages::new(start))
        .set("obey_robots", "false")
        .set("throttle", "fixed")
        .set("download_delay", "100ms")
        .set("randomize_delay", "false")
        .run()
        .await
        .expect("crawl");
    let gap = gap_after(&lab, |r| r.status == 302).expect("redirect served");
    assert!(
        (2.9..8.0).contains(&gap),
        "next request {gap:.2}s after a Retry-After: 3"
    );
    let report = lab.recorder().report();
    let me = report.clients.values().next().expect("one client");
    assert_eq!(me.violations, 0, "{:?}", me.violation_samples);
    assert_eq!(stats.redirected, 1, "{stats}");
    assert_eq!(stats.items_scraped, 4, "{stats}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn robots_txt_is_a_paced_send_of_the_hosts_slot() {
    // One request a second to the host: robots.txt and the first page are two sends a
    // second apart, not back to back.
    let lab = Lab::builder().start().await.expect("lab");
    let start = vec![
        lab.url_for("/catalogue/book-1.html"),
        lab.url_for("/catalogue/book-2.html"),
    ];
    let stats = crawl(Pages::new(start))
        .set("throttle", "fixed")
        .set("download_delay", "1s")
        .set("randomize_delay", "false")
        .run()
        .await
        .expect("crawl");
    assert_eq!(stats.items_scraped, 2, "{stats}");
    let at: Vec<(String, f64)> = lab
        .recorder()
        .requests()
        .into_iter()
        .map(|r| (r.path, r.at.as_secs_f64()))
        .collect();
    assert_eq!(at.len(), 3, "{at:?}");
    assert_eq!(at[0].0, "/robots.txt");
    for pair in at.windows(2) {
        let gap = pair[1].1 - pair[0].1;
        assert!(
            gap >= 0.95,
            "{} then {} after {gap:.2}s",
            pair[0].0,
            pair[1].0
        );
    }
    lab.shutdown().await;
}
