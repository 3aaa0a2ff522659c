//! The downloader's conditional requests, HTTP cache, per-request body cap and robots.txt
//! sitemap answers, against a local server.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderMap, StatusCode, header};
use axum::routing::get;
use crawler_core::{
    BodyOrigin, ConditionalStore, Downloader, Fetched, MemoryConditional, Request, Response,
    Settings,
};
use crawler_http::{HttpDownloader, MAX_BODY_META, ROBOTS_SITEMAPS_META};
use support::serve;

const ETAG: &str = "\"v1\"";

/// A page with an ETag that answers 304 to a matching If-None-Match.
async fn page(
    headers: HeaderMap,
) -> (
    StatusCode,
    [(header::HeaderName, &'static str); 2],
    &'static str,
) {
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == ETAG.as_bytes());
    let status = if matches {
        StatusCode::NOT_MODIFIED
    } else {
        StatusCode::OK
    };
    let body = if matches { "" } else { "<h1>hello</h1>" };
    (
        status,
        [
            (header::ETAG, ETAG),
            (header::LAST_MODIFIED, "Wed, 21 Oct 2015 07:28:00 GMT"),
        ],
        body,
    )
}

fn router() -> Router {
    Router::new()
        .route("/page", get(page))
        .route("/big", get(|| async { "x".repeat(2 << 20) }))
        .route(
            "/robots.txt",
            get(|| async { "User-agent: *\nDisallow: /private/\nSitemap: /a.xml\nSitemap: http://127.0.0.1:1/b.xml.gz\n" }),
        )
}

fn settings() -> Settings {
    Settings {
        max_body_size: 1 << 20,
        ..Settings::default()
    }
}

/// Fetch, then acknowledge as the engine does once the page's items are written: only then
/// are its validators (and the cached copy) stored.
async fn fetch(d: &HttpDownloader, req: &Request) -> Response {
    let response = fetch_unacknowledged(d, req).await;
    if let Some(work) = response.take_after_ack() {
        work.run();
    }
    response
}

async fn fetch_unacknowledged(d: &HttpDownloader, req: &Request) -> Response {
    match d.fetch_once(req).await.outcome {
        Fetched::Response(r) => r,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn validators_are_sent_back_and_a_304_replays_the_cached_page() {
    let server = serve(router()).await;
    let url = server.url("/page");
    let req = Request::new(url.clone());
    let store = Arc::new(MemoryConditional::with_cache());
    let d = HttpDownloader::new(&settings())
        .unwrap()
        .with_store(store.clone());

    // Nothing is stored before the request is acknowledged: a crash in between must not
    // turn the re-fetch into a 304 for a page whose items were never written.
    let unacked = fetch_unacknowledged(&d, &req).await;
    assert_eq!(unacked.status(), 200);
    assert_eq!(store.validators(&url).unwrap(), None);
    assert!(store.cached(&url).unwrap().is_none());
    unacked.take_after_ack().expect("deferred work").run();
    assert!(store.validators(&url).unwrap().is_some());

    let first = fetch(&d, &req).await;
    assert!(first.is_revalidated(), "now the validators are sent");
    let v = store.validators(&url).unwrap().unwrap();
    assert_eq!(v.etag.as_deref(), Some(ETAG));
    assert_eq!(v.body_len, 14);
    assert_eq!(
        v.content_hash,
        xxhash_rust::xxh3::xxh3_64(b"<h1>hello</h1>")
    );
    assert!(first.history().is_some());

    let second = fetch(&d, &req).await;
    assert!(second.is_revalidated(), "{second:?}");
    assert_eq!(second.status(), 200, "the cached page's status");
    assert_eq!(second.body().as_ref(), b"<h1>hello</h1>");
    assert_eq!(second.header("etag"), Some(ETAG));
}

#[tokio::test]
async fn without_a_cache_the_304_reaches_the_engine_and_own_headers_win() {
    let server = serve(router()).await;
    let url = server.url("/page");
    let store = Arc::new(MemoryConditional::new());
    let d = HttpDownloader::new(&settings())
        .unwrap()
        .with_store(store.clone());
    assert_eq!(fetch(&d, &Request::new(url.clone())).await.status(), 200);
    let before = store.validators(&url).unwrap().unwrap();

    let again = fetch(&d, &Request::new(url.clone())).await;
    assert_eq!(again.status(), 304);
    assert!(!again.is_cached());
    assert!(store.validators(&url).unwrap().unwrap().fetched_at_unix >= before.fetched_at_unix);

    // A request that sets its own validator is sent as the spider wrote it.
    let own = Request::new(url.clone()).header("If-None-Match", "\"other\"");
    assert_eq!(fetch(&d, &own).await.status(), 200);

    // conditional_requests off: stored validators are not sent.
    let mut s = settings();
    s.conditional_requests = false;
    let plain = HttpDownloader::new(&s).unwrap().with_store(store);
    assert_eq!(fetch(&plain, &Request::new(url)).await.status(), 200);
}

#[tokio::test]
async fn offline_replay_sends_nothing() {
    let server = serve(router()).await;
    let url = server.url("/page");
    let store = Arc::new(MemoryConditional::with_cache());
    let online = HttpDownloader::new(&settings())
        .unwrap()
        .with_store(store.clone());
    fetch(&online, &Request::new(url.clone())).await;
    let hits = server.hits.get("/page");

    let mut s = settings();
    s.http_cache = true;
    s.http_cache_offline = true;
    let offline = HttpDownloader::new(&s).unwrap().with_store(store);
    let download = offline.fetch(&Request::new(url)).await;
    assert!(!download.feedback.sent);
    let Fetched::Response(r) = download.outcome else {
        panic!("replayed")
    };
    assert_eq!(r.origin(), BodyOrigin::Cache);
    assert_eq!(r.body().as_ref(), b"<h1>hello</h1>");
    assert_eq!(server.hits.get("/page"), hits, "the server saw nothing");
}

#[tokio::test]
async fn the_body_cap_can_be_raised_per_request() {
    let server = serve(router()).await;
    let d = HttpDownloader::new(&settings()).unwrap();
    let req = Request::new(server.url("/big"));
    match d.fetch_once(&req).await.outcome {
        Fetched::Failed(f) => assert_eq!(f.kind.as_str(), "too_large"),
        other => panic!("{other:?}"),
    }
    let mut big = req.clone();
    big.meta.insert(MAX_BODY_META.into(), (4u64 << 20).into());
    assert_eq!(fetch(&d, &big).await.body().len(), 2 << 20);
}

#[tokio::test]
async fn robots_sitemap_lines_come_from_the_robots_cache() {
    let server = serve(router()).await;
    let d = HttpDownloader::new(&settings()).unwrap();
    let mut req = Request::new(server.url("/robots.txt"));
    req.meta.insert(ROBOTS_SITEMAPS_META.into(), true.into());
    let r = fetch(&d, &req).await;
    assert_eq!(
        r.text(),
        format!(
            "Sitemap: {}\nSitemap: http://127.0.0.1:1/b.xml.gz\n",
            server.url("/a.xml")
        )
    );
    // The robots check for a page reuses the same fetch.
    fetch(&d, &Request::new(server.url("/page"))).await;
    assert_eq!(server.hits.get("/robots.txt"), 1);
}
