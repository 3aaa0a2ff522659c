//! robots.txt against a real local server: every status case of RFC 9309, redirects, size cap,
//! group matching, caching and retry-later.

// Helpers outside #[test] fns unwrap too (clippy.toml only covers test fns): a panic
// there is a test failure, which is what we want.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;
use crawler_http::{RobotsCache, RobotsOptions, RobotsStatus, fetch_robots, robots_client};
use support::{UA, following_client, serve};

const RULES: &str = "User-agent: *\nDisallow: /private\n\n\
    User-agent: crawler\nDisallow: /only-crawler\nCrawl-delay: 3\n\n\
    Sitemap: http://127.0.0.1:1/sitemap.xml\n";

fn fast() -> RobotsOptions {
    RobotsOptions {
        ttl: Duration::from_secs(3600),
        retry_unreachable: Duration::from_millis(300),
        fetch_timeout: Duration::from_millis(500),
    }
}

fn cache(options: RobotsOptions) -> RobotsCache {
    RobotsCache::with_options(
        robots_client(UA, Duration::from_secs(2)).unwrap(),
        UA,
        options,
    )
}

fn status_router(status: u16) -> Router {
    let status = StatusCode::from_u16(status).unwrap();
    Router::new().route(
        "/robots.txt",
        get(move || async move { (status, "User-agent: *\nDisallow: /\n") }),
    )
}

#[tokio::test]
async fn ok_parses_groups_by_product_token_and_fetches_once() {
    let server = serve(Router::new().route(
        "/robots.txt",
        get(|| async {
            // Slow enough that the concurrent checks below overlap the fetch.
            tokio::time::sleep(Duration::from_millis(100)).await;
            RULES
        }),
    ))
    .await;
    let robots = Arc::new(cache(fast()));
    let checks = (0..20).map(|i| {
        let robots = Arc::clone(&robots);
        let url = server.url(&format!("/page/{i}"));
        async move { robots.check(&url).await }
    });
    let results = futures_util::future::join_all(checks).await;
    assert_eq!(server.hits.get("/robots.txt"), 1, "one shared fetch");
    assert_eq!(results.iter().filter(|c| c.fetched).count(), 1);
    assert!(results.iter().all(|c| c.allowed));
    assert_eq!(results[0].crawl_delay, Some(Duration::from_secs(3)));

    // Our group (`crawler`) replaces `*`: /private is allowed for us, /only-crawler is not.
    assert!(robots.check(&server.url("/private")).await.allowed);
    assert!(!robots.check(&server.url("/only-crawler/x")).await.allowed);
    assert_eq!(server.hits.get("/robots.txt"), 1, "served from cache");
    assert_eq!(
        robots.cached_sitemaps(&server.url("/")).unwrap()[0].as_str(),
        "http://127.0.0.1:1/sitemap.xml"
    );

    // Another agent falls back to `*`.
    let other = RobotsCache::with_options(
        robots_client("otherbot/2.0", Duration::from_secs(2)).unwrap(),
        "otherbot/2.0",
        fast(),
    );
    assert!(!other.check(&server.url("/private")).await.allowed);
    assert!(other.check(&server.url("/only-crawler")).await.allowed);
    assert_eq!(other.check(&server.url("/x")).await.crawl_delay, None);
}

#[tokio::test]
async fn client_errors_allow_everything() {
    for status in [404, 410, 401, 403] {
        let server = serve(status_router(status)).await;
        let robots = cache(fast());
        let check = robots.check(&server.url("/anything")).await;
        assert!(check.allowed && check.fetched, "HTTP {status} allows all");
        let rules = robots.rules(&server.url("/")).await;
        assert!(
            matches!(rules.status(), RobotsStatus::Unavailable { status: Some(s), .. } if *s == status)
        );
        // Unavailable is a verdict for the whole TTL, not retried soon.
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!robots.check(&server.url("/x")).await.fetched);
    }
}

#[tokio::test]
async fn server_errors_and_429_disallow_for_now() {
    for status in [500, 503, 429] {
        let server = serve(status_router(status)).await;
        let robots = cache(fast());
        let check = robots.check(&server.url("/anything")).await;
        assert!(!check.allowed && check.fetched, "HTTP {status} disallows");
        let rules = robots.rules(&server.url("/")).await;
        assert!(
            matches!(rules.status(), RobotsStatus::Unreachable { status: Some(s), .. } if *s == status)
        );
        let again = robots.check(&server.url("/other")).await;
        assert!(
            !again.allowed && !again.fetched,
            "within the retry interval: cached"
        );
        assert_eq!(server.hits.get("/robots.txt"), 1);
    }
}

#[tokio::test]
async fn unreachable_is_retried_later_and_recovers() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let server = serve(Router::new().route(
        "/robots.txt",
        get(move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 0 {
                    (StatusCode::SERVICE_UNAVAILABLE, "busy").into_response()
                } else {
                    "User-agent: *\nDisallow: /private\n".into_response()
                }
            }
        }),
    ))
    .await;
    let robots = cache(fast());
    assert!(!robots.check(&server.url("/public")).await.allowed);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let check = robots.check(&server.url("/public")).await;
    assert!(check.fetched, "fetched again after the retry interval");
    assert!(check.allowed);
    assert!(!robots.check(&server.url("/private")).await.allowed);
    assert_eq!(server.hits.get("/robots.txt"), 2);
}

#[tokio::test]
async fn hanging_server_times_out_and_disallows() {
    let server = serve(Router::new().route(
        "/robots.txt",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            "never"
        }),
    ))
    .await;
    let robots = cache(fast());
    let started = std::time::Instant::now();
    let check = robots.check(&server.url("/x")).await;
    // Generous bound: the fetch timeout is 0.5 s; without it this would hang for an hour.
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!check.allowed && check.fetched);
    let rules = robots.rules(&server.url("/")).await;
    assert!(
        matches!(rules.status(), RobotsStatus::Unreachable { status: None, reason } if reason.contains("within")),
        "{:?}",
        rules.status()
    );
}

#[tokio::test]
async fn connection_refused_disallows() {
    // Bind then drop, so nothing listens on the port.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let robots = cache(fast());
    let url = crawler_core::Url::parse(&format!("http://127.0.0.1:{port}/x")).unwrap();
    let check = robots.check(&url).await;
    assert!(!check.allowed && check.fetched);
}

/// `/robots.txt` redirects `hops` times (relative, absolute, mixed 301/302/307/308) before a
/// file that disallows `/blocked`.
fn chain(hops: usize) -> Router {
    let mut router = Router::new();
    for i in 0..hops {
        let from = if i == 0 {
            "/robots.txt".to_owned()
        } else {
            format!("/hop/{i}")
        };
        let to = format!("/hop/{}", i + 1);
        let code = [301u16, 302, 307, 308][i % 4];
        router = router.route(
            &from,
            get(move || async move {
                (
                    StatusCode::from_u16(code).unwrap(),
                    [(header::LOCATION, to)],
                )
            }),
        );
    }
    router.route(
        &format!("/hop/{hops}"),
        get(|| async { "User-agent: *\nDisallow: /blocked\n" }),
    )
}

#[tokio::test]
async fn redirects_are_followed_up_to_five() {
    for hops in [3, 5] {
        let server = serve(chain(hops)).await;
        for robots in [cache(fast()), RobotsCache::new(following_client(), UA)] {
            assert!(
                !robots.check(&server.url("/blocked")).await.allowed,
                "{hops} hops: the redirected file's rules apply"
            );
            assert!(robots.check(&server.url("/open")).await.allowed);
        }
        assert_eq!(server.hits.get(&format!("/hop/{hops}")), 2);
    }
}

#[tokio::test]
async fn six_redirects_mean_unavailable() {
    let server = serve(chain(6)).await;
    // Both our own redirect handling and a client that follows redirects itself.
    for robots in [cache(fast()), RobotsCache::new(following_client(), UA)] {
        let check = robots.check(&server.url("/blocked")).await;
        assert!(
            check.allowed,
            "RFC 9309: more than 5 redirects = unavailable"
        );
        let rules = robots.rules(&server.url("/")).await;
        assert!(
            matches!(rules.status(), RobotsStatus::Unavailable { .. }),
            "{:?}",
            rules.status()
        );
    }
    assert_eq!(
        server.hits.get("/hop/6"),
        0,
        "the sixth hop is never fetched"
    );
}

#[tokio::test]
async fn redirect_loop_is_unavailable() {
    let server = serve(
        Router::new()
            .route("/robots.txt", get(|| async { Redirect::temporary("/a") }))
            .route("/a", get(|| async { Redirect::temporary("/robots.txt") })),
    )
    .await;
    let robots = cache(fast());
    assert!(robots.check(&server.url("/x")).await.allowed);
    assert!(server.hits.get("/robots.txt") <= 2);
}

#[tokio::test]
async fn oversized_file_is_cut_not_rejected() {
    let mut body = String::from("User-agent: *\nDisallow: /early\n");
    while body.len() < 600 * 1024 {
        body.push_str("# padding padding padding padding padding padding padding\n");
    }
    body.push_str("Disallow: /late\n");
    let server = serve(Router::new().route("/robots.txt", get(move || async move { body }))).await;
    let robots = cache(fast());
    assert!(!robots.check(&server.url("/early")).await.allowed);
    assert!(
        robots.check(&server.url("/late")).await.allowed,
        "rules after 500 KiB are ignored"
    );
    let report = fetch_robots(
        &robots_client(UA, Duration::from_secs(2)).unwrap(),
        &server.url("/late"),
        UA,
    )
    .await;
    assert!(report.truncated && report.allowed);
    assert_eq!(report.status, RobotsStatus::Fetched { status: 200 });
}

#[tokio::test]
async fn rules_are_never_cut_mid_line() {
    // The 500 KiB boundary falls inside "Disallow: /privatefolder": a byte cut would leave
    // "Disallow: /", forbidding everything.
    let rule = "Disallow: /privatefolder\n";
    let mut body = String::from("User-agent: *\n");
    body.push_str(&"#".repeat(500 * 1024 - 11 - body.len() - 1));
    body.push('\n');
    assert_eq!(body.len(), 500 * 1024 - 11);
    body.push_str(rule);
    body.push_str(&"#".repeat(1000));
    assert!(body.len() > 500 * 1024);
    let server = serve(Router::new().route("/robots.txt", get(move || async move { body }))).await;
    let robots = cache(fast());
    assert!(robots.check(&server.url("/public")).await.allowed);
}

#[tokio::test]
async fn ttl_expiry_refetches() {
    let server = serve(Router::new().route("/robots.txt", get(|| async { RULES }))).await;
    let robots = RobotsCache::with_ttl(
        robots_client(UA, Duration::from_secs(2)).unwrap(),
        UA,
        Duration::from_millis(300),
    );
    assert!(robots.check(&server.url("/a")).await.fetched);
    assert!(!robots.check(&server.url("/b")).await.fetched);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(robots.cached_sitemaps(&server.url("/")), None, "expired");
    assert!(robots.check(&server.url("/c")).await.fetched);
    assert_eq!(server.hits.get("/robots.txt"), 2);
}

#[tokio::test]
async fn report_explains_the_verdict() {
    let server = serve(Router::new().route(
        "/robots.txt",
        get(|| async {
            "User-agent: *\nDisallow: /\n\nUser-agent: Crawler\nAllow: /shop/public\n\
             Disallow: /shop/\nCrawl-delay: 1.5\nSitemap: http://h/s1.xml\nSitemap: http://h/s2.xml\n"
        }),
    ))
    .await;
    let client = robots_client(UA, Duration::from_secs(2)).unwrap();
    let report = fetch_robots(&client, &server.url("/shop/cart?id=1"), UA).await;
    assert!(!report.allowed);
    assert_eq!(report.agent, "crawler");
    assert_eq!(report.group.as_deref(), Some("crawler"));
    assert_eq!(report.matched_rule.as_deref(), Some("Disallow: /shop/"));
    assert_eq!(report.crawl_delay, Some(Duration::from_millis(1500)));
    assert_eq!(report.sitemaps, ["http://h/s1.xml", "http://h/s2.xml"]);
    assert_eq!(report.robots_url, server.url("/robots.txt").as_str());

    let report = fetch_robots(&client, &server.url("/shop/public/1"), UA).await;
    assert!(report.allowed);
    assert_eq!(report.matched_rule.as_deref(), Some("Allow: /shop/public"));

    let report = fetch_robots(&client, &server.url("/elsewhere"), UA).await;
    assert!(report.allowed && report.matched_rule.is_none());

    let report = fetch_robots(&client, &server.url("/elsewhere"), "otherbot").await;
    assert!(!report.allowed);
    assert_eq!(report.group.as_deref(), Some("*"));
    assert_eq!(report.matched_rule.as_deref(), Some("Disallow: /"));
}

/// The files a fleet's workers share, in memory (the fleet's is Redis: crawler-store).
#[derive(Default)]
struct MemoryShare {
    files: std::sync::Mutex<
        std::collections::HashMap<String, (crawler_core::SharedRobots, std::time::Instant)>,
    >,
}

impl crawler_core::RobotsShare for MemoryShare {
    fn get(
        &self,
        origin: &str,
    ) -> crawler_core::Result<Option<(crawler_core::SharedRobots, Duration)>> {
        let files = self.files.lock().unwrap();
        Ok(files.get(origin).and_then(|(file, until)| {
            let left = until.checked_duration_since(std::time::Instant::now())?;
            Some((file.clone(), left))
        }))
    }

    fn put(
        &self,
        origin: &str,
        robots: &crawler_core::SharedRobots,
        ttl: Duration,
    ) -> crawler_core::Result<()> {
        let until = std::time::Instant::now() + ttl;
        self.files
            .lock()
            .unwrap()
            .insert(origin.to_owned(), (robots.clone(), until));
        Ok(())
    }
}

/// Two workers of a fleet, each with its own cache over one share: the origin's robots.txt
/// is fetched once for both, the second judges by the first's file (same rules, same
/// Crawl-delay, and its slot not spent on robots.txt); and an outage is not shared: each
/// worker asks again (the host's shared hold spaces those asks).
#[tokio::test]
async fn a_fleets_workers_fetch_robots_txt_once_for_all() {
    let server = serve(Router::new().route("/robots.txt", get(|| async { RULES }))).await;
    let share: Arc<dyn crawler_core::RobotsShare> = Arc::new(MemoryShare::default());
    let first = cache(fast()).share_with(Arc::clone(&share));
    let second = cache(fast()).share_with(Arc::clone(&share));
    let a = first.check(&server.url("/only-crawler/a")).await;
    let b = second.check(&server.url("/only-crawler/b")).await;
    assert!(a.fetched && !b.fetched, "{a:?} {b:?}");
    assert!(!a.allowed && !b.allowed, "the same rules: {a:?} {b:?}");
    assert_eq!(b.crawl_delay, Some(Duration::from_secs(3)));
    assert!(second.check(&server.url("/private")).await.allowed);
    assert_eq!(server.hits.get("/robots.txt"), 1, "one fetch for the fleet");

    let down = serve(status_router(503)).await;
    let first = cache(fast()).share_with(Arc::clone(&share));
    let second = cache(fast()).share_with(Arc::clone(&share));
    assert!(first.check(&down.url("/x")).await.fetched);
    assert!(second.check(&down.url("/x")).await.fetched);
    assert_eq!(down.hits.get("/robots.txt"), 2, "an outage is not shared");
}
