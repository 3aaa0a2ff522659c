//! A tiny axum server on 127.0.0.1:0 for the integration tests, with a per-path hit counter.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use crawler_core::Url;

/// Counts requests per path, so tests can prove what was (not) fetched.
#[derive(Clone, Default)]
pub(crate) struct Hits(Arc<Mutex<HashMap<String, usize>>>);

impl Hits {
    pub(crate) fn get(&self, path: &str) -> usize {
        self.0.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

async fn count(State(hits): State<Hits>, req: Request, next: Next) -> Response {
    *hits
        .0
        .lock()
        .unwrap()
        .entry(req.uri().path().to_owned())
        .or_default() += 1;
    next.run(req).await
}

/// A running server: its base URL and hit counter. The server stops with the test's runtime.
pub(crate) struct Server {
    pub base: Url,
    pub hits: Hits,
}

impl Server {
    pub(crate) fn url(&self, path: &str) -> Url {
        self.base.join(path).unwrap()
    }
}

pub(crate) async fn serve(router: Router) -> Server {
    let hits = Hits::default();
    let app = router.layer(middleware::from_fn_with_state(hits.clone(), count));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    Server {
        base: Url::parse(&format!("http://{addr}/")).unwrap(),
        hits,
    }
}

/// A plain client like the downloader's: it follows up to 5 redirects itself.
pub(crate) fn following_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .user_agent(UA)
        .redirect(reqwest::redirect::Policy::limited(5))
        .build()
        .unwrap()
}

pub(crate) const UA: &str = "crawler/0.1 (+https://example.invalid/crawler)";

/// gzip `data` in memory.
pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}
