//! A host that refuses connections is not an outage to wait out (issue 34): after a few
//! robots.txt tries in a row its pages end as `host_skipped` with the reason, without
//! anything more sent; a timeout or a 5xx stays an outage, and a host that answers again
//! starts its count afresh.
#![allow(clippy::unwrap_used)]

use crawler_core::{Download, Downloader, FailureKind, Fetched, Request, Settings};
use crawler_http::HttpDownloader;
use tokio::net::TcpListener;

/// A port on 127.0.0.1 where nothing listens (bound, then released).
async fn refused_origin() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

async fn gate(d: &HttpDownloader, url: &str) -> Download {
    d.gate(&Request::get(url).unwrap())
        .await
        .expect("robots.txt answers for the page")
}

#[tokio::test]
async fn a_host_refusing_connections_is_given_up_after_a_few_tries() {
    let d = HttpDownloader::new(&Settings::default()).unwrap();
    let origin = refused_origin().await;
    let page = format!("{origin}/a");
    for attempt in 1..3 {
        let got = gate(&d, &page).await;
        assert!(
            matches!(got.outcome, Fetched::Requeue(_)) && got.feedback.robots_unavailable,
            "try {attempt} holds the host: {:?}",
            got.outcome
        );
        assert!(got.feedback.sent);
    }
    let got = gate(&d, &page).await;
    let Fetched::Failed(f) = &got.outcome else {
        panic!("the third refusal gives the host up: {:?}", got.outcome)
    };
    assert_eq!(f.kind, FailureKind::HostSkipped);
    assert!(
        f.message.contains("unreachable") && f.message.to_ascii_lowercase().contains("refused"),
        "{f:?}"
    );
    assert!(
        !got.feedback.robots_unavailable,
        "no hold: the host is done"
    );
    // The host's other pages end at once, with nothing sent.
    let got = gate(&d, &format!("{origin}/b")).await;
    assert!(
        matches!(&got.outcome, Fetched::Failed(f) if f.kind == FailureKind::HostSkipped),
        "{:?}",
        got.outcome
    );
    assert!(!got.feedback.sent);
    // Another dead origin has its own count.
    let mut other = refused_origin().await;
    while other == origin {
        other = refused_origin().await;
    }
    let other = format!("{other}/a");
    assert!(matches!(
        gate(&d, &other).await.outcome,
        Fetched::Requeue(_)
    ));
}

#[tokio::test]
async fn a_host_that_answers_again_starts_its_count_afresh() {
    // robots.txt trusted for no time: every page asks again.
    let settings = Settings {
        robots_ttl: std::time::Duration::ZERO,
        ..Settings::default()
    };
    let d = HttpDownloader::new(&settings).unwrap();
    let origin = refused_origin().await;
    let page = format!("{origin}/a");
    for _ in 1..3 {
        assert!(matches!(gate(&d, &page).await.outcome, Fetched::Requeue(_)));
    }
    // The server comes back on the same port and robots.txt reads (a 404: no rules).
    let addr = origin.trim_start_matches("http://").to_owned();
    let listener = TcpListener::bind(&addr).await.unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, axum::Router::new()).await });
    let answered = d.gate(&Request::get(&page).unwrap()).await;
    assert!(
        answered.is_none(),
        "robots.txt read, the page may go: {answered:?}"
    );
    server.abort();
    let _ = server.await;
    // Down again: the count started afresh, so two refusals are outages, the third gives up.
    for _ in 1..3 {
        let got = gate(&d, &page).await;
        assert!(
            matches!(got.outcome, Fetched::Requeue(_)),
            "{:?}",
            got.outcome
        );
    }
    let got = gate(&d, &page).await;
    assert!(
        matches!(&got.outcome, Fetched::Failed(f) if f.kind == FailureKind::HostSkipped),
        "{:?}",
        got.outcome
    );
}
