//! Politeness, proved from the server's side: each test runs a real crawl against a lab
//! scenario and checks the lab's recorder. Rates and windows are scaled (for example 50
//! requests/s with Retry-After 3 s instead of 5/s and 30 s) so CI stays short; the unscaled
//! scenarios run in the `politeness` benchmark.

#[path = "support/names.rs"]
mod names;

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

use std::time::Duration;

use books::Books;
use crawler::prelude::*;
use crawler_lab::{Block, Dialect, Lab, Overload, RetryAfter, Scenario};

fn crawl(start: String) -> Crawl<Books> {
    Crawl::new(Books { start }).progress(false)
}

/// Requests per second over the requests after `from` (seconds on the lab clock).
fn rate_after(lab: &Lab, from: f64) -> f64 {
    let times: Vec<f64> = lab
        .recorder()
        .requests()
        .iter()
        .map(|r| r.at.as_secs_f64())
        .filter(|&t| t >= from)
        .collect();
    match (times.first(), times.last()) {
        (Some(a), Some(b)) if b > a => (times.len() - 1) as f64 / (b - a),
        _ => 0.0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn practice_test_scaled_no_violations_few_refusals_near_full_rate() {
    // The server allows 50/s with a burst of 200 and answers refusals with Retry-After: 3.
    // We start at 100/s, twice too fast, with no headers to tell us. A burst hides how
    // far over the limit a rate is (the accepted rate is inflated by it), so it takes a
    // refusal episode or two, each a multiplicative decrease answered by a hold (the
    // requests already in flight refused alongside); after that, no request inside a
    // window, few refusals, and close to the limit (docs/politeness.md).
    let scenario = Scenario::rate_limited(50.0, 200).retry_after(RetryAfter::Seconds(3));
    let lab = Lab::builder()
        .books(2000)
        .scenario(scenario)
        .start()
        .await
        .expect("lab");
    let stats = crawl(lab.url())
        .set("start_rate", "100")
        .set("max_rate", "200")
        .set("concurrency_per_host", "8")
        .run()
        .await
        .expect("crawl");
    let report = lab.recorder().report();
    let me = report.clients.values().next().expect("one client");
    assert_eq!(stats.items_scraped, 2000, "{stats}");
    assert_eq!(me.violations, 0, "{:?}", me.violation_samples);
    let refusals: Vec<f64> = lab
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.status == 429)
        .map(|r| r.replied_at.as_secs_f64())
        .collect();
    // Refusals closer together than a second are one episode (requests in flight).
    let episodes = refusals
        .iter()
        .enumerate()
        .filter(|(i, t)| *i == 0 || **t - refusals[*i - 1] > 1.0)
        .count();
    assert!(
        (1..=3).contains(&episodes),
        "refusal episodes: {episodes} ({refusals:?})"
    );
    // The budget is used. No upper bound here: a probe that holds above the lowest refused
    // pace forgets it and the next one steps further, and the burst of 200 admits more than
    // 50/s for the seconds this measures (the server's word on overshoot is a refusal,
    // which the episode count above bounds).
    // After the first episode, later holds included: at least 70% of the limit.
    let first_refusal = refusals.first().copied().unwrap_or(0.0);
    let after_learning = rate_after(&lab, first_refusal + 4.0);
    assert!(
        after_learning >= 35.0,
        "rate after the first episode {after_learning:.1}/s, limit 50/s"
    );
    // Steady state, from the end of the last hold, when the crawl went on for a while after
    // it (a last probe refused in the crawl's final seconds leaves nothing to measure).
    let last_refusal = refusals.iter().copied().fold(0.0, f64::max);
    let crawl_end = lab
        .recorder()
        .requests()
        .iter()
        .map(|r| r.at.as_secs_f64())
        .fold(0.0, f64::max);
    if crawl_end - (last_refusal + 4.0) >= 5.0 {
        let steady = rate_after(&lab, last_refusal + 4.0);
        assert!(
            steady >= 40.0,
            "steady-state rate {steady:.1}/s, limit 50/s"
        );
    }
    assert!(stats.reconciles());
    lab.shutdown().await;
}

async fn headers_dialect(dialect: Dialect) {
    // 60 requests per 3-second window, announced in the headers of every response; 150
    // books (about 170 pages) fill three windows or so.
    let scenario = Scenario::quota(60, Duration::from_secs(3)).ratelimit_headers(dialect);
    let lab = Lab::builder()
        .books(150)
        .scenario(scenario)
        .start()
        .await
        .expect("lab");
    let stats = crawl(lab.url())
        .set("max_rate", "200")
        .set("concurrency_per_host", "8")
        .run()
        .await
        .expect("crawl");
    let report = lab.recorder().report();
    let me = report.clients.values().next().expect("one client");
    assert_eq!(stats.items_scraped, 150, "{dialect:?}: {stats}");
    assert_eq!(
        me.status_429, 0,
        "{dialect:?}: the headers were announced, so no refusal"
    );
    assert_eq!(me.violations, 0, "{dialect:?}: {:?}", me.violation_samples);
    // Throughput against the advertised quota (20/s), from the second request on (the first
    // is robots.txt, sent before any header was read).
    let rate = rate_after(&lab, 0.0);
    assert!(
        rate >= 0.9 * 20.0,
        "{dialect:?}: {rate:.1}/s is under 90% of 20/s"
    );
    assert!(
        rate <= 20.0 * 1.05 + 1.0,
        "{dialect:?}: {rate:.1}/s is over the quota"
    );
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratelimit_headers_ietf() {
    headers_dialect(Dialect::Ietf).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratelimit_headers_ietf_with_policy() {
    headers_dialect(Dialect::IetfWithPolicy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratelimit_headers_structured() {
    headers_dialect(Dialect::Structured).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratelimit_headers_x_unix() {
    headers_dialect(Dialect::XUnix).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratelimit_headers_x_delta() {
    headers_dialect(Dialect::XDelta).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_settles_below_capacity() {
    // Latency 10 ms + 20 ms per other request in flight; a 17th request in flight gets 503.
    let overload = Overload::new(16, Duration::from_millis(10), Duration::from_millis(20));
    let scenario = Scenario::open()
        .overload(overload)
        .retry_after(RetryAfter::Seconds(1));
    let lab = Lab::builder()
        .books(400)
        .scenario(scenario)
        .start()
        .await
        .expect("lab");
    // Start far too fast: the crawler must find the knee and back off from it.
    let stats = crawl(lab.url())
        .set("start_rate", "300")
        .set("max_rate", "500")
        .set("concurrency_per_host", "32")
        .run()
        .await
        .expect("crawl");
    let requests = lab.recorder().requests();
    let refused = requests.iter().filter(|r| r.status == 503).count();
    assert_eq!(stats.items_scraped, 400, "{stats}");
    assert!(
        refused * 100 < requests.len(),
        "503s: {refused} of {}",
        requests.len()
    );
    // Latency did rise with load (the crawler pushed), and the crawler eased off.
    let slowest = requests
        .iter()
        .map(|r| r.replied_at - r.at)
        .max()
        .unwrap_or_default();
    assert!(
        slowest >= Duration::from_millis(30),
        "never loaded the server: {slowest:?}"
    );
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_slower_than_robots_txt_are_not_cut_for_latency() {
    // Every page takes 150 ms of the server's work; robots.txt is a static file answered at
    // once. With the defaults (one request in flight), 150 ms pages allow 6.7 r/s: the
    // crawl climbs to it and is never slowed for latency (the server is slow, not queueing).
    let scenario = Scenario::open().overload(Overload::pages(
        64,
        Duration::from_millis(150),
        Duration::ZERO,
    ));
    let lab = Lab::builder()
        .books(200)
        .scenario(scenario)
        .start()
        .await
        .expect("lab");
    let record = std::env::temp_dir().join(format!("crawler-slow-pages-{}", std::process::id()));
    let _ = std::fs::remove_file(&record);
    let stats = tokio::time::timeout(
        Duration::from_secs(240),
        crawl(lab.url()).politeness_record(&record).run(),
    )
    .await
    .expect("finishes")
    .expect("crawl");
    assert_eq!(stats.items_scraped, 200, "{stats}");
    let text = std::fs::read_to_string(&record).unwrap_or_default();
    let _ = std::fs::remove_file(&record);
    let cuts = text
        .lines()
        .filter(|l| l.contains(r#""trigger":"latency""#))
        .count();
    assert_eq!(cuts, 0, "cut for latency:\n{text}");
    // The last twenty seconds ran at the pace one request at a time allows.
    let end = lab
        .recorder()
        .requests()
        .last()
        .map_or(0.0, |r| r.at.as_secs_f64());
    let rate = rate_after(&lab, end - 20.0);
    assert!(rate > 0.8 * 6.7, "{rate:.2} r/s at the end");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soft_block_pauses_then_resumes_slower_and_hides_challenges() {
    // More than 10 requests within a second: challenge pages for 2 s.
    let scenario = Scenario::open().soft_block(Block::new(10, Duration::from_secs(2)));
    let lab = Lab::builder()
        .books(100)
        .scenario(scenario)
        .start()
        .await
        .expect("lab");
    let stats = crawl(lab.url())
        .set("start_rate", "30")
        .set("max_rate", "30")
        .set("concurrency_per_host", "4")
        .set("soft_block_pause", "3s")
        .run()
        .await
        .expect("crawl");
    let requests = lab.recorder().requests();
    let first_challenge = requests
        .iter()
        .find(|r| r.challenge)
        .expect("the crawl tripped the block");
    assert_eq!(
        stats.items_scraped, 100,
        "every book, none a challenge page: {stats}"
    );
    assert_eq!(
        stats.spider_errors, 0,
        "a challenge page reached the spider"
    );
    // The pause: nothing sent for the pause after the first challenge was answered, apart
    // from requests already in flight then.
    let t0 = first_challenge.replied_at;
    let during = requests
        .iter()
        .filter(|r| {
            r.at > t0 + Duration::from_millis(100) && r.at < t0 + Duration::from_millis(2900)
        })
        .count();
    assert_eq!(during, 0, "requests sent during the pause");
    // Then slower than before: under the block threshold.
    let after = rate_after(&lab, (t0 + Duration::from_secs(3)).as_secs_f64());
    let before = requests.iter().filter(|r| r.at < t0).count() as f64 / t0.as_secs_f64().max(0.1);
    assert!(after < before, "resumed at {after:.1}/s, was {before:.1}/s");
    assert!(
        after <= 10.0,
        "resumed at {after:.1}/s, above the block threshold"
    );
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_host_never_starves_an_open_one() {
    // One host refuses past a tiny budget with Retry-After: 3; the other is open.
    let limited = Scenario::rate_limited(10.0, 5).retry_after(RetryAfter::Seconds(3));
    let held = Lab::builder()
        .books(100)
        .scenario(limited)
        .start()
        .await
        .expect("lab");
    let open = Lab::builder().books(300).start().await.expect("lab");

    struct Both(String, String);
    impl Spider for Both {
        type Item = books::Book;
        fn name(&self) -> &str {
            "both"
        }
        fn start_urls(&self) -> Vec<String> {
            vec![self.0.clone(), self.1.clone()]
        }
        async fn parse(&self, page: Response, out: &mut Output<books::Book>) -> Result<()> {
            Books {
                start: String::new(),
            }
            .parse(page, out)
            .await
        }
    }
    let crawl = Crawl::new(Both(held.url(), open.url()))
        .set("start_rate", "20")
        .set("max_rate", "40")
        .set("concurrency_per_host", "4")
        .set("retry_times", "0")
        .progress(false);
    let stats = tokio::time::timeout(Duration::from_secs(120), crawl.run())
        .await
        .expect("finishes")
        .expect("crawl");
    let refusal = held
        .recorder()
        .requests()
        .into_iter()
        .find(|r| r.status == 429)
        .expect("the limited host refused");
    // Both labs started within milliseconds, so their clocks line up to well under the
    // 3-second window examined here.
    let (from, to) = (
        refusal.replied_at + Duration::from_millis(500),
        refusal.replied_at + Duration::from_millis(2500),
    );
    let open_during = open
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.at > from && r.at < to)
        .count();
    assert!(
        open_during >= 20,
        "the open host sent only {open_during} requests during the hold"
    );
    let me = held.recorder().report();
    assert_eq!(me.clients.values().map(|c| c.violations).sum::<u64>(), 0);
    assert!(stats.items_scraped >= 300, "{stats}");
    held.shutdown().await;
    open.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_beyond_the_maximum_skips_the_host() {
    let scenario = Scenario::rate_limited(1.0, 3).retry_after(RetryAfter::Seconds(3600));
    let lab = Lab::builder()
        .books(100)
        .scenario(scenario)
        .start()
        .await
        .expect("lab");
    let stats = tokio::time::timeout(
        Duration::from_secs(60),
        crawl(lab.url())
            .set("start_rate", "10")
            .set("max_retry_after", "10m")
            .run(),
    )
    .await
    .expect("the crawl finishes instead of waiting an hour")
    .expect("crawl");
    assert!(stats.skipped_host > 0, "{stats}");
    assert!(stats.reconciles(), "{stats:?}");
    assert_eq!(stats.pending, 0);
    let host = stats.hosts.first().expect("host stats");
    assert!(
        host.skipped
            .as_deref()
            .is_some_and(|w| w.contains("max_retry_after")),
        "{host:?}"
    );
    let me = lab.recorder().report();
    assert_eq!(me.clients.values().map(|c| c.violations).sum::<u64>(), 0);
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_names_behind_one_limiter_share_its_holds() {
    // One server, one limiter per client, reached under two host names: `127.0.0.1` and
    // `localhost` are two slots, each paced on its own at twice the limit they share.
    let scenario = Scenario::rate_limited(20.0, 10).retry_after(RetryAfter::Seconds(2));
    let lab = Lab::builder()
        .books(100)
        .scenario(scenario)
        .start()
        .await
        .expect("lab");
    let port = lab.addr().port();
    if !names::localhost_reaches_the_lab(port) {
        return;
    }

    struct TwoNames(Vec<String>);
    impl Spider for TwoNames {
        type Item = books::Book;
        fn name(&self) -> &str {
            "two-names"
        }
        fn start_urls(&self) -> Vec<String> {
            self.0.clone()
        }
        async fn parse(&self, page: Response, out: &mut Output<books::Book>) -> Result<()> {
            Books {
                start: String::new(),
            }
            .parse(page, out)
            .await
        }
    }
    let record =
        std::env::temp_dir().join(format!("crawler-limiter-groups-{}", std::process::id()));
    let _ = std::fs::remove_file(&record);
    let names = vec![lab.url(), format!("http://localhost:{port}/")];
    let crawl = Crawl::new(TwoNames(names))
        .set("start_rate", "20")
        .set("max_rate", "40")
        .set("concurrency_per_host", "4")
        .politeness_record(&record)
        .progress(false);
    let stats = tokio::time::timeout(Duration::from_secs(180), crawl.run())
        .await
        .expect("finishes")
        .expect("crawl");
    let refusals = lab
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.status == 429)
        .count();
    assert!(
        refusals > 0,
        "the shared limiter never refused: nothing was tested"
    );
    let report = lab.recorder().report();
    assert_eq!(report.clients.len(), 1, "one client to the limiter");
    let me = report.clients.values().next().expect("one client");
    assert_eq!(
        me.violations, 0,
        "requests inside holds across both names: {:?}",
        me.violation_samples
    );
    // Both names crawled the whole site, and the holds they shared are in the record.
    assert_eq!(stats.items_scraped, 200, "{stats}");
    assert!(stats.reconciles(), "{stats:?}");
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        assert!(
            stats.hosts.iter().any(|h| h.host == host && h.requests > 0),
            "{host} not crawled: {:?}",
            stats.hosts
        );
    }
    let text = std::fs::read_to_string(&record).unwrap_or_default();
    let _ = std::fs::remove_file(&record);
    assert!(
        text.lines()
            .any(|l| l.contains(r#""trigger":"limiter group""#) && l.contains(r#""kind":"hold""#)),
        "no shared hold in the politeness record"
    );
    lab.shutdown().await;
}
