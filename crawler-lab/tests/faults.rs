//! Faults on purpose: each fault endpoint misbehaves as documented, and chaos assigns faults
//! to about 20% of book pages, deterministically per path and seed.

use crate::common;

use std::collections::BTreeMap;
use std::io::Read;
use std::time::{Duration, Instant};

use common::{client, locs, raw_get};
use crawler_lab::{FaultKind, Lab, Scenario};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn open() -> Lab {
    Lab::builder().books(100).start().await.expect("lab")
}

#[tokio::test]
async fn wire_level_faults_break_framing_as_documented() {
    let lab = open().await;
    let book = lab.book(1).expect("book");

    let reset = raw_get(lab.addr(), &FaultKind::ResetMidBody.path(), "", usize::MAX).await;
    let declared: usize = reset
        .header("content-length")
        .expect("cl")
        .parse()
        .expect("n");
    assert!(
        reset.body.len() < declared,
        "{} of {declared}",
        reset.body.len()
    );
    assert!(
        reset.read_error,
        "the connection ends with a reset, not EOF"
    );

    let longer = raw_get(
        lab.addr(),
        &FaultKind::LongerThanDeclared.path(),
        "",
        usize::MAX,
    )
    .await;
    let declared: usize = longer
        .header("content-length")
        .expect("cl")
        .parse()
        .expect("n");
    assert!(
        longer.body.len() >= 2 * declared,
        "{} vs {declared}",
        longer.body.len()
    );
    assert!(String::from_utf8_lossy(&longer.body).contains(&book.title));

    let endless = raw_get(lab.addr(), &FaultKind::EndlessBody.path(), "", 2 << 20).await;
    assert_eq!(endless.header("transfer-encoding"), Some("chunked"));
    assert!(
        endless.body.len() >= (2 << 20) - 4096,
        "stopped after {}",
        endless.body.len()
    );
    assert!(!endless.body.ends_with(b"0\r\n\r\n"));

    // The trickle: the head comes at once, then 256 bytes per 250 ms.
    let mut s = tokio::net::TcpStream::connect(lab.addr())
        .await
        .expect("connect");
    s.write_all(b"GET /fault/slow HTTP/1.1\r\nHost: lab\r\n\r\n")
        .await
        .expect("write");
    let mut buf = vec![0u8; 64 * 1024];
    let t = Instant::now();
    let mut got = 0;
    while t.elapsed() < Duration::from_millis(600) {
        match tokio::time::timeout(Duration::from_millis(700), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got += n,
            _ => break,
        }
    }
    assert!(got > 0 && got < 2000, "{got} bytes in 600 ms");
    lab.shutdown().await;
}

#[tokio::test]
async fn gzip_bomb_is_small_on_the_wire_and_huge_inflated() {
    let lab = open().await;
    let c = client();
    let t = Instant::now();
    let resp = c
        .get(lab.url_for("/fault/gzip-bomb"))
        .send()
        .await
        .expect("bomb");
    assert_eq!(resp.headers()["content-encoding"], "gzip");
    let wire = resp.bytes().await.expect("body");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "bomb took {:?}",
        t.elapsed()
    );
    assert!(wire.len() < 1 << 20, "{} bytes on the wire", wire.len());
    let mut inflated = flate2::read::GzDecoder::new(&wire[..]).take(64 << 20);
    let n = std::io::copy(&mut inflated, &mut std::io::sink()).expect("inflate");
    assert_eq!(n, 64 << 20, "inflates past 64 MiB");

    let sitemap = c
        .get(lab.url_for(&FaultKind::SitemapGzipBomb.path()))
        .send()
        .await
        .expect("sitemap bomb")
        .bytes()
        .await
        .expect("body");
    assert!(sitemap.len() < 1 << 20);
    let mut head = String::new();
    flate2::read::GzDecoder::new(&sitemap[..])
        .take(200)
        .read_to_string(&mut head)
        .expect("inflate");
    assert!(head.contains("<urlset"));
    lab.shutdown().await;
}

#[tokio::test]
async fn redirect_faults_loop_chain_and_leave_http() {
    let lab = open().await;
    let c = client();
    let location = |path: String| {
        let c = c.clone();
        let url = lab.url_for(&path);
        async move {
            let r = c.get(url).send().await.expect("redirect");
            assert_eq!(r.status(), 302);
            r.headers()["location"]
                .to_str()
                .expect("location")
                .to_owned()
        }
    };
    let a = location(FaultKind::RedirectLoop.path()).await;
    let b = location(a.clone()).await;
    assert!(
        b.starts_with(&FaultKind::RedirectLoop.path()) && b != a,
        "{a} -> {b}"
    );
    assert_eq!(location(b.clone()).await, a, "{b} leads back to {a}");

    let mut hop = FaultKind::RedirectChain.path() + "/30";
    let mut hops = 0;
    loop {
        let r = c.get(lab.url_for(&hop)).send().await.expect("hop");
        if r.status() == 200 {
            break;
        }
        hop = r.headers()["location"]
            .to_str()
            .expect("location")
            .to_owned();
        hops += 1;
        assert!(hops <= 30);
    }
    assert_eq!(hops, 30);

    let ftp = location(FaultKind::RedirectToNonHttp.path()).await;
    assert!(ftp.starts_with("ftp://"), "{ftp}");
    lab.shutdown().await;
}

#[tokio::test]
async fn charset_and_content_type_faults() {
    let lab = open().await;
    let c = client();
    let book = lab.book(1).expect("book");
    let get = |k: FaultKind| {
        let c = c.clone();
        let url = lab.url_for(&k.path());
        async move {
            let r = c.get(url).send().await.expect("fault");
            let ct = r.headers()["content-type"].to_str().expect("ct").to_owned();
            (ct, r.bytes().await.expect("body").to_vec())
        }
    };
    let (ct, bytes) = get(FaultKind::Windows1252).await;
    assert_eq!(ct, "text/html; charset=windows-1252");
    assert!(std::str::from_utf8(&bytes).is_err());
    let (text, _, bad) = encoding_rs::WINDOWS_1252.decode(&bytes);
    assert!(!bad);
    assert!(text.contains("Café “crème brûlée” £4.50"));
    assert!(text.contains(&format!("<p class=\"price\">{}</p>", book.price)));

    let (ct, bytes) = get(FaultKind::ShiftJis).await;
    assert_eq!(ct, "text/html");
    assert!(
        bytes
            .windows(25)
            .any(|w| w == b"<meta charset=\"Shift_JIS\">"[..25].as_ref())
    );
    let (text, _, bad) = encoding_rs::SHIFT_JIS.decode(&bytes);
    assert!(!bad);
    assert!(text.contains("日本語の本"));
    assert!(text.contains(&book.title));

    let (ct, bytes) = get(FaultKind::InvalidUtf8).await;
    assert_eq!(ct, "text/html; charset=utf-8");
    assert!(std::str::from_utf8(&bytes).is_err());
    assert!(String::from_utf8_lossy(&bytes).contains(&book.title));

    let (ct, bytes) = get(FaultKind::WrongContentType).await;
    assert_eq!(ct, "image/jpeg");
    assert!(bytes.starts_with(b"<!DOCTYPE html>"));

    let r = c
        .get(lab.url_for(&FaultKind::ServerError.path()))
        .send()
        .await
        .expect("500");
    assert_eq!(r.status(), 500);
    lab.shutdown().await;
}

#[tokio::test]
async fn malformed_sitemaps() {
    let lab = open().await;
    let c = client();
    let text = |k: FaultKind| {
        let c = c.clone();
        let url = lab.url_for(&k.path());
        async move {
            c.get(url)
                .send()
                .await
                .expect("get")
                .bytes()
                .await
                .expect("body")
        }
    };
    let broken = String::from_utf8(text(FaultKind::BrokenSitemap).await.to_vec()).expect("utf8");
    assert!(broken.starts_with("<?xml") && !broken.contains("</urlset>"));
    let laughs =
        String::from_utf8(text(FaultKind::SitemapEntityExpansion).await.to_vec()).expect("utf8");
    assert!(laughs.contains("<!ENTITY lol9 \"&lol8;&lol8;"));
    assert!(laughs.contains("&lol9;</loc>"));
    let huge = text(FaultKind::HugeSitemap).await;
    let mut xml = String::new();
    flate2::read::GzDecoder::new(&huge[..])
        .read_to_string(&mut xml)
        .expect("gunzip");
    assert_eq!(locs(&xml).len(), 60_000);
    lab.shutdown().await;
}

#[tokio::test]
async fn chaos_faults_about_a_fifth_of_book_pages_deterministically() {
    let lab = Lab::builder()
        .scenario(Scenario::chaos())
        .seed(3)
        .start()
        .await
        .expect("lab");
    assert_eq!(lab.books(), 2000);
    let faulty = lab.faulty_paths();
    let share = faulty.len() as f64 / 2000.0;
    assert!((0.16..=0.24).contains(&share), "{share}");
    let mut kinds: BTreeMap<FaultKind, usize> = BTreeMap::new();
    for (_, k) in &faulty {
        *kinds.entry(*k).or_default() += 1;
    }
    assert_eq!(kinds.len(), FaultKind::PAGE_FAULTS.len(), "{kinds:?}");

    // Same seed, same faults; another seed, other faults.
    let twin = Lab::builder()
        .scenario(Scenario::chaos())
        .seed(3)
        .start()
        .await
        .expect("twin");
    assert_eq!(twin.faulty_paths(), faulty);
    let other = Lab::builder()
        .scenario(Scenario::chaos())
        .seed(4)
        .start()
        .await
        .expect("other");
    assert_ne!(other.faulty_paths(), faulty);
    twin.shutdown().await;
    other.shutdown().await;

    assert_eq!(lab.expected_fault("/catalogue/page-1.html"), None);
    assert_eq!(
        lab.expected_fault(&lab.url_for(&faulty[0].0)),
        Some(faulty[0].1)
    );

    // What the server does matches what the lab says, for the quick kinds and healthy pages.
    let c = client();
    let mut checked = 0;
    for id in 1..=300u32 {
        let path = format!("/catalogue/book-{id}.html");
        let expected = lab.expected_fault(&path);
        let quick = match expected {
            None => Some(200),
            Some(FaultKind::ServerError) => Some(500),
            Some(
                FaultKind::RedirectLoop | FaultKind::RedirectChain | FaultKind::RedirectToNonHttp,
            ) => Some(302),
            _ => None,
        };
        let Some(status) = quick else { continue };
        let r = c.get(lab.url_for(&path)).send().await.expect("chaos page");
        assert_eq!(r.status().as_u16(), status, "{path}: {expected:?}");
        checked += 1;
    }
    assert!(checked > 200);

    let wrong = faulty
        .iter()
        .find(|(_, k)| *k == FaultKind::WrongContentType)
        .expect("a wrong content type");
    let r = c.get(lab.url_for(&wrong.0)).send().await.expect("get");
    assert_eq!(r.headers()["content-type"], "image/jpeg");

    let index = c
        .get(lab.url_for("/sitemap.xml"))
        .send()
        .await
        .expect("index");
    let index = index.text().await.expect("body");
    for k in FaultKind::SITEMAP_FAULTS {
        assert!(index.contains(&lab.url_for(&k.path())), "{k} listed");
    }
    let json: BTreeMap<String, FaultKind> = serde_json::from_str(
        &c.get(lab.url_for("/_lab/faults"))
            .send()
            .await
            .expect("faults")
            .text()
            .await
            .expect("json"),
    )
    .expect("parse");
    assert_eq!(json.len(), faulty.len());
    let report = lab.recorder().report();
    assert!(report.client("127.0.0.1").expect("client").faults > 0);
    lab.shutdown().await;
}
