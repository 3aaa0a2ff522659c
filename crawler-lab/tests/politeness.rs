//! The politeness lab: rate limits, header dialects, the violation counter, overload, blocks,
//! robots variants, and scenario scoping.

use crate::common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{client, get_text};
use crawler_lab::{Block, Dialect, Lab, Overload, RetryAfter, Robots, Scenario};
use reqwest::header::HeaderMap;

async fn start(scenario: Scenario) -> Lab {
    Lab::builder()
        .books(100)
        .scenario(scenario)
        .start()
        .await
        .expect("lab starts")
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// Sends `n` GETs back to back on one keep-alive connection; returns statuses and headers.
async fn burst(lab: &Lab, n: usize) -> Vec<(u16, HeaderMap)> {
    let c = client();
    let mut out = Vec::new();
    for i in 0..n {
        let url = lab.url_for(&format!("/catalogue/book-{}.html", i % 100 + 1));
        let r = c.get(url).send().await.expect("request");
        out.push((r.status().as_u16(), r.headers().clone()));
    }
    out
}

/// Statuses must be `ok` times 200 then refusals; a slow burst may earn refilled tokens
/// (5 per second), which show up as extra 200s only after the 20th request.
fn assert_burst_pattern(statuses: &[u16], ok: usize, refused: u16, elapsed: Duration) {
    let refill = (elapsed.as_secs_f64() * 5.0).floor() as usize;
    assert!(statuses[..ok].iter().all(|&s| s == 200), "{statuses:?}");
    assert_eq!(statuses[ok], refused, "{statuses:?}");
    let extra = statuses[ok..].iter().filter(|&&s| s == 200).count();
    assert!(
        extra <= refill,
        "{extra} extra 200s after {elapsed:?}: {statuses:?}"
    );
    assert!(statuses.iter().all(|&s| s == 200 || s == refused));
}

#[tokio::test]
async fn burst_against_5rps_gets_20_ok_then_429_with_retry_after_30() {
    let lab = start(Scenario::by_name("rate-limited-5rps").expect("named")).await;
    let started = Instant::now();
    let got = burst(&lab, 30).await;
    let statuses: Vec<u16> = got.iter().map(|(s, _)| *s).collect();
    assert_burst_pattern(&statuses, 20, 429, started.elapsed());
    if started.elapsed() < Duration::from_millis(200) {
        let mut exact = vec![200; 20];
        exact.extend([429; 10]);
        assert_eq!(statuses, exact);
    }
    for (status, h) in &got {
        let ra = header(h, "retry-after");
        if *status == 429 {
            assert_eq!(ra, Some("30"));
        } else {
            assert_eq!(ra, None);
        }
    }
    let report = lab.recorder().report();
    let me = report.client("127.0.0.1").expect("client");
    assert_eq!(me.requests, 30);
    assert_eq!(
        me.status_429 as usize,
        statuses.iter().filter(|&&s| s == 429).count()
    );
    lab.shutdown().await;
}

#[tokio::test]
async fn retry_after_forms_and_refusal_status_follow_the_scenario() {
    let cases = [
        ("rate-limited-5rps-http-date", 429),
        ("rate-limited-5rps-no-retry-after", 429),
        ("rate-limited-5rps-malformed", 429),
        ("rate-limited-5rps-503", 503),
    ];
    for (name, status) in cases {
        let lab = start(Scenario::by_name(name).expect("named")).await;
        let started = Instant::now();
        let got = burst(&lab, 21).await;
        let statuses: Vec<u16> = got.iter().map(|(s, _)| *s).collect();
        assert_burst_pattern(&statuses, 20, status, started.elapsed());
        let h = &got[20].1;
        let ra = header(h, "retry-after");
        match name {
            "rate-limited-5rps-http-date" => {
                let at = httpdate::parse_http_date(ra.expect("date")).expect("http-date");
                let ahead = at.duration_since(SystemTime::now()).expect("future");
                assert!((28..=30).contains(&ahead.as_secs()), "{ahead:?}");
            }
            "rate-limited-5rps-no-retry-after" => assert_eq!(ra, None),
            "rate-limited-5rps-malformed" => assert_eq!(ra, Some("in a while")),
            _ => assert_eq!(ra, Some("30")),
        }
        lab.shutdown().await;
    }
}

#[tokio::test]
async fn violations_count_requests_inside_an_announced_wait_only() {
    // One token per second, a 1 s Retry-After, the default 100 ms grace.
    let scenario = Scenario::rate_limited(1.0, 1).retry_after(RetryAfter::Seconds(1));
    let lab = start(scenario).await;
    let c = client();
    let get = |path: &'static str| {
        let c = c.clone();
        let url = lab.url_for(path);
        async move { c.get(url).send().await.expect("request").status().as_u16() }
    };
    assert_eq!(get("/catalogue/book-1.html").await, 200);
    assert_eq!(get("/catalogue/book-2.html").await, 429); // announces a 1 s wait
    // Back to back: as if it had been in flight when the 429 left; inside the grace.
    assert_eq!(get("/catalogue/book-3.html").await, 429);
    tokio::time::sleep(Duration::from_millis(300)).await;
    get("/catalogue/book-4.html").await; // inside the wait: a violation
    let inside = lab.recorder().report();
    assert_eq!(inside.client("127.0.0.1").expect("client").violations, 1);

    // Every refusal renews the wait; past the last one's end, a request is no violation.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(get("/catalogue/book-5.html").await, 200);
    let report = lab.recorder().report();
    let me = report.client("127.0.0.1").expect("client");
    assert_eq!(me.violations, 1, "{:?}", me.violation_samples);
    assert_eq!(me.violation_samples[0].path, "/catalogue/book-4.html");
    assert_eq!(report.total_violations(), 1);
    lab.shutdown().await;
}

#[tokio::test]
async fn remaining_zero_in_ratelimit_headers_announces_a_wait() {
    let scenario = Scenario::quota(3, Duration::from_secs(60)).ratelimit_headers(Dialect::Ietf);
    let lab = start(scenario).await;
    let got = burst(&lab, 3).await;
    assert_eq!(header(&got[2].1, "ratelimit-remaining"), Some("0"));
    assert!(lab.recorder().report().total_violations() == 0);
    tokio::time::sleep(Duration::from_millis(250)).await;
    let late = burst(&lab, 1).await;
    assert_eq!(late[0].0, 429);
    assert_eq!(lab.recorder().report().total_violations(), 1);
    lab.shutdown().await;
}

/// (limit, remaining, seconds to reset) as one dialect states them.
fn read_dialect(d: Dialect, h: &HeaderMap) -> (u32, u32, f64) {
    let num = |name: &str| -> f64 {
        header(h, name)
            .unwrap_or_else(|| panic!("{name} missing"))
            .parse()
            .unwrap_or_else(|_| panic!("{name} not a number"))
    };
    match d {
        Dialect::Ietf | Dialect::IetfWithPolicy => {
            if d == Dialect::IetfWithPolicy {
                assert_eq!(header(h, "ratelimit-policy"), Some("5;w=60"));
            } else {
                assert_eq!(header(h, "ratelimit-policy"), None);
            }
            (
                num("ratelimit-limit") as u32,
                num("ratelimit-remaining") as u32,
                num("ratelimit-reset"),
            )
        }
        Dialect::Structured => {
            let policy = header(h, "ratelimit-policy").expect("policy");
            let policies: Vec<&str> = policy.split(", ").collect();
            assert_eq!(policies[0], "\"default\";q=5;w=60");
            assert_eq!(policies[1], "\"hourly\";q=300;w=3600");
            let field = header(h, "ratelimit").expect("RateLimit");
            let params: Vec<&str> = field.split(';').collect();
            assert_eq!(params[0], "\"default\"");
            let r = params[1]
                .strip_prefix("r=")
                .expect("r=")
                .parse()
                .expect("r");
            let t = params[2]
                .strip_prefix("t=")
                .expect("t=")
                .parse()
                .expect("t");
            (5, r, t)
        }
        Dialect::XUnix | Dialect::XDelta => {
            let after = num("x-ratelimit-reset-after");
            assert!(
                header(h, "x-ratelimit-reset-after")
                    .expect("after")
                    .contains('.')
            );
            let reset = num("x-ratelimit-reset");
            let reset = if d == Dialect::XUnix {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .expect("clock")
                    .as_secs_f64();
                assert!(reset > 1_600_000_000.0, "Unix time expected, got {reset}");
                reset - now
            } else {
                reset
            };
            assert!((reset - after).abs() <= 1.5, "{reset} vs {after}");
            (
                num("x-ratelimit-limit") as u32,
                num("x-ratelimit-remaining") as u32,
                reset,
            )
        }
    }
}

#[tokio::test]
async fn every_dialect_is_well_formed_and_follows_the_quota() {
    for d in [
        Dialect::Ietf,
        Dialect::IetfWithPolicy,
        Dialect::Structured,
        Dialect::XUnix,
        Dialect::XDelta,
    ] {
        let lab = start(Scenario::quota(5, Duration::from_secs(60)).ratelimit_headers(d)).await;
        let got = burst(&lab, 7).await;
        let mut last_reset = f64::MAX;
        for (i, (status, h)) in got.iter().enumerate() {
            let (limit, remaining, reset) = read_dialect(d, h);
            assert_eq!(limit, 5, "{d:?}");
            assert!(reset > 0.0 && reset <= 61.0, "{d:?} reset {reset}");
            assert!(reset <= last_reset + 1.0, "{d:?} reset grew");
            last_reset = reset;
            if i < 5 {
                assert_eq!(*status, 200, "{d:?} request {i}");
                assert_eq!(remaining, 4 - i as u32, "{d:?} request {i}");
            } else {
                assert_eq!(*status, 429, "{d:?} request {i}");
                assert_eq!(remaining, 0);
                let ra: f64 = header(h, "retry-after")
                    .expect("retry-after")
                    .parse()
                    .expect("secs");
                assert!(
                    (ra - reset).abs() <= 1.5,
                    "{d:?} Retry-After {ra} vs reset {reset}"
                );
            }
        }
        lab.shutdown().await;
    }
}

#[tokio::test]
async fn bucket_headers_count_down_with_the_tokens() {
    let lab =
        start(Scenario::rate_limited(2.0, 4).ratelimit_headers(Dialect::IetfWithPolicy)).await;
    let got = burst(&lab, 5).await;
    let remaining: Vec<_> = got
        .iter()
        .map(|(_, h)| {
            header(h, "ratelimit-remaining")
                .expect("remaining")
                .to_owned()
        })
        .collect();
    assert_eq!(remaining, ["3", "2", "1", "0", "0"]);
    assert_eq!(got[4].0, 429);
    assert_eq!(header(&got[0].1, "ratelimit-policy"), Some("4;w=2"));
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_latency_grows_with_concurrency_then_503() {
    let model = Overload::new(4, Duration::from_millis(100), Duration::from_millis(50));
    let lab = start(
        Scenario::open()
            .overload(model)
            .retry_after(RetryAfter::Seconds(2)),
    )
    .await;
    let timed = |n: usize| {
        let url = lab.url_for("/catalogue/book-1.html");
        async move {
            let mut tasks = Vec::new();
            for _ in 0..n {
                let url = url.clone();
                // Separate clients: separate connections, all in flight at once.
                tasks.push(tokio::spawn(async move {
                    let t = Instant::now();
                    let r = client().get(url).send().await.expect("request");
                    let status = r.status().as_u16();
                    let ra = header(r.headers(), "retry-after").map(str::to_owned);
                    (status, t.elapsed(), ra)
                }));
            }
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await.expect("task"));
            }
            out
        }
    };
    let alone = timed(1).await;
    assert_eq!(alone[0].0, 200);
    assert!(alone[0].1 >= Duration::from_millis(100));
    let four = timed(4).await;
    assert!(four.iter().all(|(s, _, _)| *s == 200));
    let slowest = four.iter().map(|(_, d, _)| *d).max().expect("four");
    assert!(
        slowest >= Duration::from_millis(190),
        "slowest of four took {slowest:?}"
    );
    assert!(slowest > alone[0].1 + Duration::from_millis(100));
    let eight = timed(8).await;
    let refused: Vec<_> = eight.iter().filter(|(s, _, _)| *s == 503).collect();
    assert_eq!(refused.len(), 4, "{eight:?}");
    assert!(refused.iter().all(|(_, _, ra)| ra.as_deref() == Some("2")));
    lab.shutdown().await;
}

#[tokio::test]
async fn soft_block_serves_challenges_past_the_threshold_for_the_window() {
    let lab = start(Scenario::open().soft_block(Block::new(5, Duration::from_millis(800)))).await;
    let c = client();
    let mut challenged = Vec::new();
    for i in 0..8 {
        let r = c
            .get(lab.url_for(&format!("/catalogue/book-{}.html", i + 1)))
            .send()
            .await
            .expect("get");
        assert_eq!(r.status(), 200);
        let mitigated = header(r.headers(), "cf-mitigated").is_some();
        let html = r.text().await.expect("body");
        let markers = html.contains("Just a moment...")
            && html.contains("unusual traffic")
            && html.contains("cf-challenge");
        assert_eq!(markers, mitigated);
        assert_eq!(markers, !html.contains("class=\"product\""));
        challenged.push(markers);
    }
    assert_eq!(
        challenged,
        [false, false, false, false, false, true, true, true]
    );
    assert_eq!(
        lab.recorder()
            .report()
            .client("127.0.0.1")
            .expect("c")
            .challenges,
        3
    );
    // Past the window, and past the second whose rate triggered it.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let html = get_text(&c, &lab.url_for("/catalogue/book-1.html"), 200).await;
    assert!(
        html.contains("class=\"product\""),
        "the block lasts only its window"
    );
    lab.shutdown().await;
}

#[tokio::test]
async fn hard_block_answers_403_past_the_threshold() {
    let lab = start(Scenario::by_name("hard-block").expect("named")).await;
    let got = burst(&lab, 14).await;
    let statuses: Vec<u16> = got.iter().map(|(s, _)| *s).collect();
    assert_eq!(&statuses[..10], &[200; 10]);
    assert_eq!(&statuses[10..], &[403; 4]);
    lab.shutdown().await;
}

#[tokio::test]
async fn robots_variants() {
    let c = client();
    let robots = |r: Robots| async move {
        let lab = start(Scenario::open().robots(r)).await;
        let t = Instant::now();
        let resp = client()
            .get(lab.url_for("/robots.txt"))
            .send()
            .await
            .expect("robots");
        let status = resp.status().as_u16();
        let body = resp.text().await.expect("body");
        lab.shutdown().await;
        (status, body, t.elapsed())
    };
    let (_, delay, _) = robots(Robots::CrawlDelay(2.0)).await;
    assert!(
        delay.contains("User-agent: *\nDisallow: /private/\nCrawl-delay: 2\n"),
        "{delay}"
    );
    let (_, agents, _) = robots(Robots::PerAgent("crawler".into())).await;
    assert!(agents.contains("User-agent: crawler\nDisallow: /private/\nDisallow: /category/\nAllow: /category/travel/\nCrawl-delay: 1\n"));
    assert!(agents.contains("User-agent: BadBot\nDisallow: /\n"));
    for code in [404, 500, 503] {
        let (status, _, _) = robots(Robots::Status(code)).await;
        assert_eq!(status, code);
    }
    let (status, _, took) = robots(Robots::Timeout(Duration::from_millis(400))).await;
    assert_eq!(status, 200);
    assert!(took >= Duration::from_millis(400), "{took:?}");
    let (_, big, _) = robots(Robots::Oversized).await;
    assert!(big.len() >= 1 << 20);
    let hidden = big.find("Disallow: /catalogue/").expect("hidden group");
    assert!(hidden > 500 * 1024);
    assert!(big.starts_with("User-agent: *\nDisallow: /private/\n"));
    drop(c);
}

#[tokio::test]
async fn scenarios_apply_per_path_prefix_and_per_client_key() {
    let lab = Lab::builder()
        .books(100)
        .scenario_for_prefix("/catalogue/", Scenario::rate_limited(0.5, 1))
        .scenario_for_client("slowpoke", Scenario::rate_limited(0.5, 2))
        .start()
        .await
        .expect("lab");
    let c = client();
    let status = |path: &str, who: Option<&str>| {
        let mut rb = c.get(lab.url_for(path));
        if let Some(who) = who {
            rb = rb.header("X-Lab-Client", who);
        }
        async move { rb.send().await.expect("request").status().as_u16() }
    };
    for _ in 0..3 {
        assert_eq!(status("/", None).await, 200, "the default scenario is open");
    }
    assert_eq!(status("/catalogue/page-1.html", None).await, 200);
    assert_eq!(status("/catalogue/page-2.html", None).await, 429);
    // Another client key has its own bucket under the same rule.
    assert_eq!(status("/catalogue/page-2.html", Some("other")).await, 200);
    // The client rule wins over the path rule, everywhere.
    assert_eq!(status("/", Some("slowpoke")).await, 200);
    assert_eq!(
        status("/catalogue/page-1.html", Some("slowpoke")).await,
        200
    );
    assert_eq!(status("/", Some("slowpoke")).await, 429);
    lab.shutdown().await;
}

#[tokio::test]
async fn enforced_retry_after_refuses_until_the_wait_ends() {
    let scenario = Scenario::rate_limited(50.0, 1)
        .retry_after(RetryAfter::Seconds(1))
        .enforce_retry_after();
    let lab = start(scenario).await;
    let got = burst(&lab, 2).await;
    assert_eq!((got[0].0, got[1].0), (200, 429));
    // The bucket refills in 20 ms, but the announced second is held.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(burst(&lab, 1).await[0].0, 429);
    lab.shutdown().await;
}
