//! The emulated nginx and HAProxy limiters, over the wire: status, Retry-After, the delayed
//! mode's wait, and which requests count.

use crate::common;

use std::time::{Duration, Instant};

use common::client;
use crawler_lab::{Lab, LimitReqDelay, RetryAfter, Scenario};

async fn start(scenario: Scenario) -> Lab {
    Lab::builder()
        .books(100)
        .scenario(scenario)
        .start()
        .await
        .expect("lab starts")
}

/// Sends `n` GETs back to back; returns (status, Retry-After, seconds to answer).
async fn burst(lab: &Lab, n: usize) -> Vec<(u16, Option<String>, f64)> {
    let c = client();
    let mut out = Vec::new();
    for i in 0..n {
        let url = lab.url_for(&format!("/catalogue/book-{}.html", i % 100 + 1));
        let t = Instant::now();
        let r = c.get(url).send().await.expect("request");
        let ra = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        out.push((r.status().as_u16(), ra, t.elapsed().as_secs_f64()));
    }
    out
}

#[tokio::test]
async fn nginx_nodelay_serves_burst_plus_one_then_429_with_the_scenarios_retry_after() {
    // 1 r/s so that the burst takes far less than one drain interval on any machine.
    let lab = start(
        Scenario::nginx_limit_req(1.0, 3, LimitReqDelay::NoDelay)
            .retry_after(RetryAfter::Seconds(30)),
    )
    .await;
    let got = burst(&lab, 6).await;
    let statuses: Vec<u16> = got.iter().map(|g| g.0).collect();
    // The new node's first request leaves excess 0, then 3 more fit the burst of 3.
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429]);
    assert_eq!(got[4].1.as_deref(), Some("30"));
    assert_eq!(got[0].1, None);
    lab.shutdown().await;
}

#[tokio::test]
async fn nginx_retry_after_absent_sends_no_header() {
    let lab = start(
        Scenario::nginx_limit_req(1.0, 0, LimitReqDelay::NoDelay).retry_after(RetryAfter::Absent),
    )
    .await;
    let got = burst(&lab, 2).await;
    assert_eq!((got[1].0, got[1].1.as_deref()), (429, None));
    lab.shutdown().await;
}

#[tokio::test]
async fn nginx_delayed_mode_holds_requests_within_the_burst() {
    // 10 r/s, burst 2, no nodelay: the second request waits 100 ms, the third 200 ms (their
    // excess over the rate), the fourth is refused at once.
    let lab = start(Scenario::nginx_limit_req(10.0, 2, LimitReqDelay::Delay(0))).await;
    let c = client();
    let url = lab.url_for("/catalogue/book-1.html");
    let first = c.get(&url).send().await.expect("request");
    assert_eq!(first.status(), 200);
    // Send the next three at once, so their excess is computed on arrival, together.
    let t = Instant::now();
    let (a, b, d) = tokio::join!(
        async {
            c.get(&url)
                .send()
                .await
                .map(|r| (r.status().as_u16(), t.elapsed()))
        },
        async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            c.get(&url)
                .send()
                .await
                .map(|r| (r.status().as_u16(), t.elapsed()))
        },
        async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            c.get(&url)
                .send()
                .await
                .map(|r| (r.status().as_u16(), t.elapsed()))
        },
    );
    let (a, b, d) = (a.expect("a"), b.expect("b"), d.expect("d"));
    assert_eq!((a.0, b.0, d.0), (200, 200, 429), "{a:?} {b:?} {d:?}");
    assert!(a.1 >= Duration::from_millis(60), "served too soon: {a:?}");
    assert!(b.1 >= Duration::from_millis(150), "served too soon: {b:?}");
    assert!(
        d.1 < Duration::from_millis(150),
        "a refusal is not delayed: {d:?}"
    );
    lab.shutdown().await;
}

#[tokio::test]
async fn haproxy_counts_refused_requests() {
    // deny if rate > 3 over 10 s. Four back to back: the fourth reads 4 and is refused; so is
    // every further one, because each refused request is counted too.
    let lab = start(
        Scenario::haproxy_req_rate(3, Duration::from_secs(10)).retry_after(RetryAfter::Seconds(30)),
    )
    .await;
    let got = burst(&lab, 8).await;
    let statuses: Vec<u16> = got.iter().map(|g| g.0).collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429, 429, 429]);
    assert_eq!(got[3].1.as_deref(), Some("30"));
    lab.shutdown().await;
}

#[tokio::test]
async fn fixed_window_does_not_count_refusals() {
    // 2 per 1 s window: hammering within a window must not eat into the next one.
    let lab = start(Scenario::quota(2, Duration::from_secs(1))).await;
    let c = client();
    let url = lab.url_for("/catalogue/book-1.html");
    let mut first_window = Vec::new();
    let t = Instant::now();
    for _ in 0..6 {
        first_window.push(c.get(&url).send().await.expect("request").status().as_u16());
    }
    // Windows are aligned to the lab's start; wait into the next one.
    let left = Duration::from_secs(1).saturating_sub(t.elapsed()) + Duration::from_millis(1100);
    tokio::time::sleep(left).await;
    let mut next = Vec::new();
    for _ in 0..3 {
        next.push(c.get(&url).send().await.expect("request").status().as_u16());
    }
    assert_eq!(next, [200, 200, 429], "first window: {first_window:?}");
    lab.shutdown().await;
}
