//! The book site: structure, pagination, validators, sitemaps, blobs, the recorder's basics.

use crate::common;

use std::collections::{BTreeSet, HashSet};
use std::io::Read;

use common::{client, dechunk, get_text, hrefs, locs, raw_get};
use crawler_lab::{Lab, Scenario};

async fn lab(books: usize) -> Lab {
    Lab::builder()
        .books(books)
        .seed(7)
        .start()
        .await
        .expect("lab starts")
}

#[tokio::test]
async fn index_links_to_catalogue_categories_and_private() {
    let lab = lab(1000).await;
    let c = client();
    let resp = c.get(lab.url()).send().await.expect("get /");
    assert_eq!(resp.headers()["content-type"], "text/html; charset=utf-8");
    let html = resp.text().await.expect("body");
    assert!(html.contains("<title>"));
    let links = hrefs(&html);
    assert!(links.contains(&"/catalogue/page-1.html".to_owned()));
    assert!(links.contains(&"/private/secret.html".to_owned()));
    let categories: BTreeSet<_> = links
        .iter()
        .filter(|l| l.starts_with("/category/") && l.ends_with("/page-1.html"))
        .collect();
    assert_eq!(categories.len(), 10);
    lab.shutdown().await;
}

#[tokio::test]
async fn catalogue_paginates_1000_books_into_50_pages_of_20() {
    let lab = lab(1000).await;
    assert_eq!(lab.catalogue_pages(), 50);
    let c = client();
    let mut url = lab.url_for("/catalogue/page-1.html");
    let mut pages = 0;
    let mut ids = Vec::new();
    loop {
        let html = get_text(&c, &url, 200).await;
        pages += 1;
        assert!(html.contains("href=\"/private/secret.html\""), "{url}");
        let on_page: Vec<u32> = hrefs(&html)
            .iter()
            .filter_map(|h| {
                h.strip_prefix("/catalogue/book-")?
                    .strip_suffix(".html")?
                    .parse()
                    .ok()
            })
            .collect();
        assert!(on_page.len() == 20, "{url} lists {} books", on_page.len());
        ids.extend(on_page);
        let next = format!(
            "<li class=\"next\"><a href=\"page-{}.html\">next</a></li>",
            pages + 1
        );
        if !html.contains(&next) {
            break;
        }
        assert!(pages < 60, "pagination does not end");
        url = lab.url_for(&format!("/catalogue/page-{}.html", pages + 1));
    }
    assert_eq!(pages, 50);
    assert_eq!(ids, (1..=1000).collect::<Vec<_>>());
    get_text(&c, &lab.url_for("/catalogue/page-51.html"), 404).await;
    get_text(&c, &lab.url_for("/catalogue/page-0.html"), 404).await;

    // The exact article markup a spider's selectors rely on.
    let first = get_text(&c, &lab.url_for("/catalogue/page-1.html"), 200).await;
    let book = lab.book(1).expect("book 1");
    let article = format!(
        "<article class=\"book\"><h3><a href=\"/catalogue/book-1.html\" title=\"{}\">",
        book.title
    );
    assert!(first.contains(&article), "{first}");
    assert!(first.contains(&format!("<p class=\"price\">{}</p></article>", book.price)));
    lab.shutdown().await;
}

#[tokio::test]
async fn book_pages_show_unique_titles_prices_and_stock() {
    let lab = lab(1000).await;
    let c = client();
    let book = lab.book(17).expect("book 17");
    let html = get_text(&c, &lab.url_for(&book.path), 200).await;
    let product = format!(
        "<div class=\"product\"><h1>{}</h1><p class=\"price\">{}</p><p class=\"stock\">In stock ({} available)</p></div>",
        book.title, book.price, book.stock
    );
    assert!(html.contains(&product), "{html}");
    assert!(book.price.starts_with('£') && book.price.len() >= 6);
    let links = hrefs(&html);
    assert!(links.contains(&format!("/category/{}/page-1.html", book.category)));
    assert!(links.contains(&"/private/secret.html".to_owned()));
    assert!((3_000..8_000).contains(&html.len()), "{} bytes", html.len());

    let titles: HashSet<String> = (1..=1000)
        .filter_map(|id| lab.book(id))
        .map(|b| b.title)
        .collect();
    assert_eq!(titles.len(), 1000);
    assert!(lab.book(1001).is_none());
    get_text(&c, &lab.url_for("/catalogue/book-1001.html"), 404).await;
    get_text(&c, &lab.url_for("/no/such/page"), 404).await;
    lab.shutdown().await;
}

#[tokio::test]
async fn categories_together_list_every_book_once() {
    let lab = lab(1000).await;
    let c = client();
    let index = get_text(&c, &lab.url(), 200).await;
    let mut seen = Vec::new();
    for first in hrefs(&index)
        .into_iter()
        .filter(|l| l.starts_with("/category/"))
        .collect::<BTreeSet<_>>()
    {
        let dir = first.trim_end_matches("page-1.html").to_owned();
        let mut page = 1;
        loop {
            let html = get_text(&c, &lab.url_for(&format!("{dir}page-{page}.html")), 200).await;
            seen.extend(
                hrefs(&html)
                    .into_iter()
                    .filter(|h| h.starts_with("/catalogue/book-")),
            );
            if !html.contains("<li class=\"next\">") {
                break;
            }
            page += 1;
            assert!(page < 20, "category pagination does not end");
        }
        for id in 1..=1000 {
            if let Some(b) = lab.book(id)
                && dir == format!("/category/{}/", b.category)
            {
                assert!(seen.contains(&b.path), "{} missing from {dir}", b.path);
            }
        }
    }
    let unique: HashSet<_> = seen.iter().collect();
    assert_eq!(seen.len(), 1000);
    assert_eq!(unique.len(), 1000);
    lab.shutdown().await;
}

#[tokio::test]
async fn conditional_requests_get_304_while_unchanged() {
    let lab = lab(1000).await;
    let c = client();
    for path in [
        "/",
        "/catalogue/page-3.html",
        "/catalogue/book-42.html",
        "/category/travel/page-1.html",
    ] {
        let url = lab.url_for(path);
        let first = c.get(&url).send().await.expect("get");
        assert_eq!(first.status(), 200);
        let etag = first.headers()["etag"].to_str().expect("etag").to_owned();
        let modified = first.headers()["last-modified"]
            .to_str()
            .expect("lm")
            .to_owned();
        assert!(etag.starts_with('"') && etag.ends_with('"'));

        let by_tag = c
            .get(&url)
            .header("If-None-Match", &etag)
            .send()
            .await
            .expect("inm");
        assert_eq!(by_tag.status(), 304, "{path}");
        assert_eq!(by_tag.headers()["etag"].to_str().expect("etag"), etag);
        assert!(by_tag.bytes().await.expect("body").is_empty());

        let by_date = c
            .get(&url)
            .header("If-Modified-Since", &modified)
            .send()
            .await
            .expect("ims");
        assert_eq!(by_date.status(), 304, "{path}");

        let stale = c
            .get(&url)
            .header("If-None-Match", "\"nope\"")
            .send()
            .await
            .expect("inm");
        assert_eq!(stale.status(), 200);
        let old = c
            .get(&url)
            .header("If-Modified-Since", "Mon, 01 Jan 2001 00:00:00 GMT")
            .send()
            .await
            .expect("ims");
        assert_eq!(old.status(), 200);
    }
    let report = lab.recorder().report();
    let me = report.client("127.0.0.1").expect("client");
    assert_eq!(me.conditional, 16);
    assert_eq!(me.not_modified, 8);
    lab.shutdown().await;
}

#[tokio::test]
async fn mutation_moves_validators_of_changed_books_only() {
    let lab = lab(1000).await;
    let c = client();
    let etag = |html: reqwest::Response| {
        (
            html.headers()["etag"].to_str().expect("etag").to_owned(),
            html.headers()["last-modified"]
                .to_str()
                .expect("lm")
                .to_owned(),
        )
    };
    let before: Vec<_> = futures_like_all(&c, &lab, 1..=1000).await;
    let changed = lab.mutate(0.05);
    assert!(
        (20..=90).contains(&changed.len()),
        "{} changed",
        changed.len()
    );
    assert_eq!(lab.version(), 1);
    let after: Vec<_> = futures_like_all(&c, &lab, 1..=1000).await;
    for id in 1..=1000usize {
        let moved = before[id - 1] != after[id - 1];
        assert_eq!(moved, changed.contains(&(id as u32)), "book {id}");
    }
    let id = changed[0];
    let old = before[id as usize - 1].clone();
    let resp = c
        .get(lab.url_for(&format!("/catalogue/book-{id}.html")))
        .header("If-None-Match", &old.0)
        .send()
        .await
        .expect("get");
    assert_eq!(resp.status(), 200);
    let (_, modified) = etag(resp);
    let new = httpdate::parse_http_date(&modified).expect("date");
    assert!(new > httpdate::parse_http_date(&old.1).expect("date"));

    // The same seed and mutation give the same changed set in another process.
    let twin = Lab::builder()
        .books(1000)
        .seed(7)
        .mutate(0.05)
        .start()
        .await
        .expect("twin");
    assert_eq!(twin.book(id), lab.book(id));
    twin.shutdown().await;
    lab.shutdown().await;
}

async fn futures_like_all(
    c: &reqwest::Client,
    lab: &Lab,
    ids: std::ops::RangeInclusive<u32>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for id in ids {
        let r = c
            .head(lab.url_for(&format!("/catalogue/book-{id}.html")))
            .send()
            .await
            .expect("head");
        out.push((
            r.headers()["etag"].to_str().expect("etag").to_owned(),
            r.headers()["last-modified"]
                .to_str()
                .expect("lm")
                .to_owned(),
        ));
    }
    out
}

#[tokio::test]
async fn robots_and_sitemaps_list_every_book_exactly_once() {
    let lab = lab(12_000).await;
    let c = client();
    let robots = get_text(&c, &lab.url_for("/robots.txt"), 200).await;
    assert_eq!(
        robots,
        format!(
            "User-agent: *\nDisallow: /private/\n\nSitemap: {}sitemap.xml\n",
            lab.url()
        )
    );
    let index = get_text(&c, &lab.url_for("/sitemap.xml"), 200).await;
    assert!(index.contains("<sitemapindex"));
    let maps = locs(&index);
    assert_eq!(maps.len(), 3);
    assert_eq!(index.matches("<lastmod>").count(), 3);
    let mut books = Vec::new();
    let mut shapes = BTreeSet::new();
    for map in &maps {
        assert!(map.ends_with(".xml.gz"), "{map}");
        let resp = c.get(map).send().await.expect("sitemap");
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["content-type"], "application/gzip");
        let gz = resp.bytes().await.expect("gz");
        let mut xml = String::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_string(&mut xml)
            .expect("gunzip");
        assert!(xml.contains("<urlset"));
        let urls = locs(&xml);
        assert_eq!(xml.matches("<lastmod>").count(), urls.len());
        for lm in xml
            .split("<lastmod>")
            .skip(1)
            .filter_map(|s| s.split("</lastmod>").next())
        {
            shapes.insert(lm.len());
        }
        books.extend(urls);
    }
    assert!(shapes.len() >= 4, "lastmod forms: {shapes:?}");
    let unique: HashSet<_> = books.iter().cloned().collect();
    assert_eq!(books.len(), 12_000);
    assert_eq!(unique.len(), 12_000);
    for id in [1, 5000, 5001, 12_000] {
        assert!(unique.contains(&lab.url_for(&format!("/catalogue/book-{id}.html"))));
    }
    get_text(&c, &lab.url_for("/sitemaps/books-4.xml.gz"), 404).await;
    lab.shutdown().await;
}

#[tokio::test]
async fn blobs_stream_with_and_without_content_length() {
    let lab = lab(100).await;
    let sized = raw_get(lab.addr(), "/blob/100000", "", usize::MAX).await;
    assert_eq!(sized.status, 200);
    assert_eq!(sized.header("content-length"), Some("100000"));
    assert_eq!(sized.header("transfer-encoding"), None);
    assert_eq!(sized.body.len(), 100_000);

    let chunked = raw_get(lab.addr(), "/blob/100000?chunked=1", "", usize::MAX).await;
    assert_eq!(chunked.header("content-length"), None);
    assert_eq!(chunked.header("transfer-encoding"), Some("chunked"));
    let body = dechunk(&chunked.body).expect("complete chunked body");
    assert_eq!(body.len(), 100_000);
    assert_eq!(body, sized.body);

    // A large blob arrives in pieces, so a client can stop early.
    let c = client();
    let mut resp = c
        .get(lab.url_for("/blob/268435456?chunked=1"))
        .send()
        .await
        .expect("big blob");
    let mut got = 0;
    while let Some(chunk) = resp.chunk().await.expect("chunk") {
        got += chunk.len();
        if got >= 4 << 20 {
            break;
        }
    }
    assert!(got >= 4 << 20);
    drop(resp);

    let html = raw_get(lab.addr(), "/blob/10?type=html", "", usize::MAX).await;
    assert_eq!(
        html.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let over = raw_get(lab.addr(), "/blob/2000000000", "", usize::MAX).await;
    assert_eq!(over.status, 400);
    lab.shutdown().await;
}

#[tokio::test]
async fn recorder_keys_clients_and_keeps_headers_of_interest() {
    let lab = lab(100).await;
    let c = client();
    c.get(lab.url_for("/private/secret.html"))
        .header("User-Agent", "test-bot/1.0")
        .send()
        .await
        .expect("private");
    c.get(lab.url_for("/catalogue/page-1.html"))
        .header("X-Lab-Client", "alpha")
        .header("If-Modified-Since", "Mon, 01 Jan 2001 00:00:00 GMT")
        .send()
        .await
        .expect("alpha");
    let report_json = get_text(&c, &lab.url_for("/_lab/report"), 200).await;
    let parsed: serde_json::Value = serde_json::from_str(&report_json).expect("json");
    assert_eq!(parsed["clients"]["alpha"]["requests"], 1);

    let log = lab.recorder().requests();
    assert_eq!(log.len(), 2, "the report endpoint is not recorded");
    assert_eq!(log[0].path, "/private/secret.html");
    assert_eq!(log[0].status, 200);
    assert_eq!(log[0].client, "127.0.0.1");
    assert_eq!(log[0].user_agent.as_deref(), Some("test-bot/1.0"));
    assert!(log[0].bytes > 1000);
    assert_eq!(log[1].client, "alpha");
    assert_eq!(log[1].method, "GET");
    assert_eq!(
        log[1].if_modified_since.as_deref(),
        Some("Mon, 01 Jan 2001 00:00:00 GMT")
    );
    assert!(log[1].at >= log[0].at);
    assert_eq!(lab.recorder().count_prefix("/private/"), 1);

    get_text(&c, &lab.url_for("/_lab/reset"), 200).await;
    assert!(lab.recorder().is_empty());
    lab.shutdown().await;
}

#[tokio::test]
async fn configuration_errors_say_what_is_valid() {
    let small = Lab::builder()
        .books(50)
        .start()
        .await
        .expect_err("too small");
    assert_eq!(
        small.to_string(),
        "books must be between 100 and 100000, got 50"
    );
    let unknown = Scenario::by_name("gentle").expect_err("unknown");
    let msg = unknown.to_string();
    assert!(
        msg.contains("unknown scenario `gentle`") && msg.contains("rate-limited-5rps"),
        "{msg}"
    );
    let lab = lab(100).await;
    let clash = Lab::builder()
        .port(lab.addr().port())
        .start()
        .await
        .expect_err("port in use");
    assert!(
        clash.to_string().contains(&lab.addr().to_string()),
        "{clash}"
    );
    lab.shutdown().await;
}

#[tokio::test]
async fn shutdown_stops_serving() {
    let lab = lab(100).await;
    let addr = lab.addr();
    let ok = raw_get(addr, "/", "", usize::MAX).await;
    assert_eq!(ok.status, 200);
    lab.shutdown().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[test]
fn readme_documents_every_named_scenario() {
    let readme = include_str!("../README.md");
    for name in Scenario::names() {
        assert!(
            readme.contains(&format!("`{name}`")),
            "README lacks `{name}`"
        );
    }
}
