//! Sitemaps fetched from a real local server: gzipped indexes, the URL cap, broken XML, entity
//! tricks, every lastmod form. (Walks through indexes, bounded by depth and count, are the
//! sitemap spider's: the facade's `spiders::sitemaps` tests and `tests/sitemaps.rs`.)

// Helpers outside #[test] fns unwrap too (clippy.toml only covers test fns): a panic
// there is a test failure, which is what we want.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use crawler_http::{
    RobotsCache, SitemapErrorKind, SitemapKind, SitemapLimits, fetch_sitemap, robots_client,
};
use support::{UA, gzip, serve};

fn client() -> reqwest::Client {
    support::following_client()
}

fn urlset(locs: impl IntoIterator<Item = String>) -> String {
    let mut xml = String::from(
        r#"<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">"#,
    );
    for loc in locs {
        xml.push_str(&format!("<url><loc>{loc}</loc></url>\n"));
    }
    xml.push_str("</urlset>");
    xml
}

fn gz_response(body: Vec<u8>) -> impl IntoResponse {
    // Served as a file, not with Content-Encoding: the parser must see the gzip bytes.
    ([(header::CONTENT_TYPE, "application/x-gzip")], body)
}

#[tokio::test]
async fn index_of_gzipped_sitemaps_is_read() {
    // Bound late: the index names the server's own address.
    let listener_base = std::sync::Arc::new(std::sync::OnceLock::<String>::new());
    let base = std::sync::Arc::clone(&listener_base);
    let s1 = gzip(urlset((0..3).map(|i| format!("http://127.0.0.1/a/{i}"))).as_bytes());
    let s2 = gzip(urlset((0..2).map(|i| format!("http://127.0.0.1/b/{i}"))).as_bytes());
    // Gzip under a plain .xml name: detected by magic bytes, not the file name.
    let s3 = gzip(urlset(["http://127.0.0.1/c/0".to_owned()]).as_bytes());
    let router = Router::new()
        .route(
            "/sitemap_index.xml",
            get(move || {
                let b = base.get().cloned().unwrap_or_default();
                async move {
                    format!(
                        r#"<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
                        <sitemap><loc>{b}s1.xml.gz</loc><lastmod>2024-05-17</lastmod></sitemap>
                        <sitemap><loc>{b}s2.xml.gz</loc></sitemap>
                        <sitemap><loc>{b}s3.xml</loc></sitemap>
                        <sitemap><loc>{b}sitemap_index.xml</loc></sitemap>
                        <sitemap><loc>{b}missing.xml</loc></sitemap>
                        </sitemapindex>"#
                    )
                }
            }),
        )
        .route("/s1.xml.gz", get(move || async move { gz_response(s1) }))
        .route("/s2.xml.gz", get(move || async move { gz_response(s2) }))
        .route("/s3.xml", get(move || async move { gz_response(s3) }));
    let server = serve(router).await;
    listener_base.set(server.base.to_string()).unwrap();

    let limits = SitemapLimits::default();
    let index = fetch_sitemap(&client(), &server.url("/sitemap_index.xml"), &limits).await;
    assert_eq!(index.kind, SitemapKind::Index);
    let children: Vec<&str> = index.entries.iter().map(|e| e.loc.as_str()).collect();
    assert_eq!(children.len(), 5, "{children:?}");
    let mut kinds = Vec::new();
    let mut pages = Vec::new();
    let mut errors = Vec::new();
    for path in ["/s1.xml.gz", "/s2.xml.gz", "/s3.xml", "/missing.xml"] {
        let file = fetch_sitemap(&client(), &server.url(path), &limits).await;
        kinds.push((path, file.kind));
        errors.extend(file.error);
        pages.extend(file.entries.into_iter().map(|e| e.loc));
    }
    assert_eq!(
        kinds,
        [
            ("/s1.xml.gz", SitemapKind::UrlSet),
            ("/s2.xml.gz", SitemapKind::UrlSet),
            ("/s3.xml", SitemapKind::UrlSet),
            ("/missing.xml", SitemapKind::Unknown),
        ]
    );
    assert_eq!(pages.len(), 6);
    assert!(pages.contains(&"http://127.0.0.1/c/0".to_owned()));
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].kind, SitemapErrorKind::Status { status: 404 });
    assert!(errors[0].to_string().contains("missing.xml"));
}

#[tokio::test]
async fn sixty_thousand_entries_keep_fifty_thousand() {
    let xml = urlset((0..60_000).map(|i| format!("http://127.0.0.1/p/{i}")));
    let server = serve(Router::new().route("/big.xml", get(move || async move { xml }))).await;
    let parsed = fetch_sitemap(
        &client(),
        &server.url("/big.xml"),
        &SitemapLimits::default(),
    )
    .await;
    assert_eq!(parsed.entries.len(), 50_000);
    assert_eq!(parsed.dropped, 10_000);
    assert_eq!(parsed.error, None);
    assert_eq!(parsed.entries[49_999].loc, "http://127.0.0.1/p/49999");
}

#[tokio::test]
async fn broken_xml_names_url_and_position_and_keeps_earlier_entries() {
    let xml = "<urlset>\n<url><loc>http://127.0.0.1/1</loc></url>\n\
               <url><loc>http://127.0.0.1/2</loc></url>\n\
               <url><loc>http://127.0.0.1/3</loc></uurl>\n\
               <url><loc>http://127.0.0.1/4</loc></url></urlset>";
    let at = xml.find("</uurl>").unwrap() as u64;
    let server = serve(Router::new().route("/broken.xml", get(move || async move { xml }))).await;
    let url = server.url("/broken.xml");
    let parsed = fetch_sitemap(&client(), &url, &SitemapLimits::default()).await;
    let locs: Vec<_> = parsed.entries.iter().map(|e| e.loc.as_str()).collect();
    assert_eq!(locs, ["http://127.0.0.1/1", "http://127.0.0.1/2"]);
    let err = parsed.error.unwrap();
    assert_eq!(err.position(), Some(at));
    assert_eq!(err.url, url.as_str());
    let msg = err.to_string();
    assert!(
        msg.contains(url.as_str()) && msg.contains(&format!("at byte {at}")),
        "{msg}"
    );
}

#[tokio::test]
async fn entity_expansion_is_refused() {
    let mut xml = String::from(
        r#"<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">"#,
    );
    // Each level ten times the previous: &e12; would be 40 * 10^12 bytes if expanded.
    for level in 1..=12 {
        let prev = if level == 1 {
            "a".to_owned()
        } else {
            format!("e{}", level - 1)
        };
        xml.push_str(&format!(
            "<!ENTITY e{level} \"{}\">",
            format!("&{prev};").repeat(10)
        ));
    }
    xml.push_str(
        r#"<!ENTITY ext SYSTEM "file:///etc/passwd">]>
        <urlset><url><loc>http://127.0.0.1/&e12;</loc></url>
        <url><loc>http://127.0.0.1/&ext;</loc></url>
        <url><loc>http://127.0.0.1/safe?a=1&amp;b=&lt;2&gt;</loc></url></urlset>"#,
    );
    let server = serve(Router::new().route("/lol.xml", get(move || async move { xml }))).await;
    let parsed = fetch_sitemap(
        &client(),
        &server.url("/lol.xml"),
        &SitemapLimits::default(),
    )
    .await;
    assert_eq!(parsed.error, None);
    assert_eq!(
        parsed.skipped, 2,
        "locs with custom entities are skipped, not expanded"
    );
    assert_eq!(parsed.entries.len(), 1);
    assert_eq!(parsed.entries[0].loc, "http://127.0.0.1/safe?a=1&b=%3C2%3E");
}

#[tokio::test]
async fn every_lastmod_form() {
    let forms = [
        ("2024", Some(1_704_067_200)),
        ("2024-05", Some(1_714_521_600)),
        ("2024-05-17", Some(1_715_904_000)),
        ("2024-05-17T13:20Z", Some(1_715_952_000)),
        ("2024-05-17T15:20+02:00", Some(1_715_952_000)),
        ("2024-05-17T13:20:05Z", Some(1_715_952_005)),
        ("2024-05-17T08:20:05-05:00", Some(1_715_952_005)),
        ("2024-05-17T13:20:05.123Z", Some(1_715_952_005)),
        ("2024-05-17T13:20:05.123456789+00:00", Some(1_715_952_005)),
        ("2024-05-17t13:20:05z", Some(1_715_952_005)),
        ("2024-05-17 13:20:05Z", Some(1_715_952_005)),
        ("2024-13-01", None),
        ("2024-02-30", None),
        ("2024-05-17T25:00Z", None),
        ("yesterday", None),
    ];
    let mut xml = String::from("<urlset>");
    for (i, (form, _)) in forms.iter().enumerate() {
        xml.push_str(&format!(
            "<url><loc>http://127.0.0.1/{i}</loc><lastmod> {form} </lastmod></url>"
        ));
    }
    xml.push_str("</urlset>");
    let body = gzip(xml.as_bytes());
    let server = serve(Router::new().route(
        "/dates.xml.gz",
        get(move || async move { gz_response(body) }),
    ))
    .await;
    let parsed = fetch_sitemap(
        &client(),
        &server.url("/dates.xml.gz"),
        &SitemapLimits::default(),
    )
    .await;
    assert_eq!(parsed.entries.len(), forms.len());
    for (entry, (form, want)) in parsed.entries.iter().zip(forms) {
        assert_eq!(entry.lastmod, want, "{form}");
    }
    assert_eq!(parsed.bad_lastmod, 4);
}

#[tokio::test]
async fn gzip_bomb_over_http_stops_at_the_cap() {
    // 200 MB of zeros in ~200 KB: both as a .gz file and as Content-Encoding.
    let bomb = std::sync::Arc::new(zeros_gz(200));
    let (b1, b2) = (bomb.clone(), bomb.clone());
    let server = serve(
        Router::new()
            .route(
                "/bomb.xml.gz",
                get(move || async move { gz_response((*b1).clone()) }),
            )
            .route(
                "/encoded.xml",
                get(move || async move { ([(header::CONTENT_ENCODING, "gzip")], (*b2).clone()) }),
            ),
    )
    .await;
    let limits = SitemapLimits {
        max_bytes: 5 * 1024 * 1024,
        ..SitemapLimits::default()
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder().gzip(true).build().unwrap();
    for path in ["/bomb.xml.gz", "/encoded.xml"] {
        let parsed = fetch_sitemap(&client, &server.url(path), &limits).await;
        assert_eq!(
            parsed.error.map(|e| e.kind),
            Some(SitemapErrorKind::TooLarge {
                limit: 5 * 1024 * 1024
            }),
            "{path}"
        );
        assert_eq!(
            parsed.entries.len(),
            1,
            "{path}: the entry before the padding is kept"
        );
    }
}

/// A sitemap with one entry, then `mb` MiB of zero bytes, gzipped chunk by chunk.
fn zeros_gz(mb: usize) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(b"<urlset><url><loc>http://127.0.0.1/first</loc></url><url><loc>")
        .unwrap();
    let chunk = vec![0u8; 1024 * 1024];
    for _ in 0..mb {
        enc.write_all(&chunk).unwrap();
    }
    enc.finish().unwrap()
}

#[tokio::test]
async fn failures_are_reported_not_fatal() {
    let server = serve(
        Router::new()
            .route("/gone.xml", get(|| async { StatusCode::GONE }))
            .route(
                "/slow.xml",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    "never"
                }),
            )
            .route(
                "/feed.xml",
                get(|| async { "<rss><channel></channel></rss>" }),
            ),
    )
    .await;
    let limits = SitemapLimits {
        fetch_timeout: Duration::from_millis(300),
        ..SitemapLimits::default()
    };
    let p = fetch_sitemap(&client(), &server.url("/gone.xml"), &limits).await;
    assert_eq!(
        p.error.unwrap().kind,
        SitemapErrorKind::Status { status: 410 }
    );
    let p = fetch_sitemap(&client(), &server.url("/slow.xml"), &limits).await;
    assert!(matches!(
        p.error.unwrap().kind,
        SitemapErrorKind::Fetch { .. }
    ));
    let p = fetch_sitemap(&client(), &server.url("/feed.xml"), &limits).await;
    assert!(matches!(
        p.error.unwrap().kind,
        SitemapErrorKind::NotSitemap { .. }
    ));
}

#[tokio::test]
async fn robots_sitemap_lines_name_the_sitemaps() {
    let router = Router::new()
        .route(
            "/robots.txt",
            get(|req: axum::extract::Request| async move {
                let host = req.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("").to_owned();
                format!("User-agent: *\nAllow: /\nSitemap: http://{host}/s.xml\nSitemap: /relative.xml\n")
            }),
        )
        .route(
            "/s.xml",
            get(|| async { urlset(["http://127.0.0.1/from-robots".to_owned()]) }),
        )
        .route(
            "/relative.xml",
            get(|| async { urlset(["http://127.0.0.1/from-relative".to_owned()]) }),
        );
    let server = serve(router).await;
    let robots = RobotsCache::new(robots_client(UA, Duration::from_secs(2)).unwrap(), UA);
    let roots = robots.rules(&server.url("/")).await.sitemap_urls();
    assert_eq!(
        roots,
        [server.url("/s.xml"), server.url("/relative.xml")],
        "a relative Sitemap line is resolved against the robots.txt URL (RFC 9309)"
    );
    let mut locs = Vec::new();
    for root in &roots {
        let file = fetch_sitemap(&client(), root, &SitemapLimits::default()).await;
        locs.extend(file.entries.into_iter().map(|e| e.loc));
    }
    locs.sort();
    assert_eq!(
        locs,
        [
            "http://127.0.0.1/from-relative",
            "http://127.0.0.1/from-robots"
        ]
    );
}
