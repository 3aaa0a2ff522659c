//! The link extractor's tests, moved from the inline module of the former `links.rs`.

use super::meta::refresh_target;
use super::*;
use crawler_core::ErrorKind;
use crawler_core::Request;

const PAGE: &str = "http://example.com/dir/page.html";

fn page_at(url: &str, html: &str) -> Response {
    crate::spiders::html_response(Request::get(url).unwrap(), html)
}

fn page(html: &str) -> Response {
    page_at(PAGE, html)
}

fn urls(links: &[Link]) -> Vec<&str> {
    links.iter().map(|l| l.url.as_str()).collect()
}

fn extract(ex: &LinkExtractor, html: &str) -> Vec<String> {
    ex.extract(&page(html))
        .into_iter()
        .map(|l| l.url.to_string())
        .collect()
}

#[test]
fn links_resolve_relative_to_the_page_with_their_text() {
    let p = page(
        r#"<a href="next.html"> Next
            page </a><a href="../up.html">up</a><a href="/root">r</a>
           <a href="//other.org/x">o</a><a href="?q=1">q</a><area href="map.html">"#,
    );
    let links = LinkExtractor::default().extract(&p);
    assert_eq!(
        urls(&links),
        [
            "http://example.com/dir/next.html",
            "http://example.com/up.html",
            "http://example.com/root",
            "http://other.org/x",
            "http://example.com/dir/page.html?q=1",
            "http://example.com/dir/map.html",
        ]
    );
    assert_eq!(links[0].text, "Next page");
    assert!(links.iter().all(|l| !l.nofollow));
}

#[test]
fn base_href_changes_what_relative_links_mean() {
    let html = r#"<html><head><base href="http://cdn.example.net/books/"></head>
        <body><a href="a.html">a</a><a href="/b.html">b</a></body></html>"#;
    assert_eq!(
        extract(&LinkExtractor::default(), html),
        [
            "http://cdn.example.net/books/a.html",
            "http://cdn.example.net/b.html"
        ]
    );
}

#[test]
fn allow_and_deny_patterns_filter_urls() {
    let html = r#"<a href="/catalogue/page-2.html">p</a><a href="/catalogue/book-1.html">b</a>
        <a href="/category/x/page-1.html">c</a><a href="/catalogue/book-9.html">b9</a>"#;
    let ex = LinkExtractor::builder()
        .allow([r"/catalogue/"])
        .deny([r"book-9\.html$"])
        .build()
        .unwrap();
    let found = ex.extract_counted(&page(html));
    assert_eq!(
        urls(&found.links),
        [
            "http://example.com/catalogue/page-2.html",
            "http://example.com/catalogue/book-1.html"
        ]
    );
    assert_eq!(found.filtered, 2);
    // Several allow patterns: any one suffices.
    let ex = LinkExtractor::builder()
        .allow([r"page-\d+", r"book-1\."])
        .build()
        .unwrap();
    assert_eq!(extract(&ex, html).len(), 3);
}

#[test]
fn bad_patterns_and_settings_fail_build_with_the_culprit_named() {
    let e = LinkExtractor::builder()
        .allow(["ok", "book-(\\d+"])
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Settings);
    assert!(e.to_string().contains("allow pattern 'book-(\\d+'"), "{e}");
    let e = LinkExtractor::builder()
        .deny(["[z-a]"])
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("deny pattern '[z-a]'"), "{e}");
    let e = LinkExtractor::builder()
        .allow_domains(["http://example.com/"])
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("'http://example.com/'"), "{e}");
    let e = LinkExtractor::builder()
        .restrict_css(["div[["])
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Selector);
    assert!(e.to_string().contains("'div[['"), "{e}");
    let e = LinkExtractor::builder()
        .tags([("a", "href]")])
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("attribute 'href]'"), "{e}");
    let e = LinkExtractor::builder()
        .tags(Vec::<(String, String)>::new())
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("no tags"), "{e}");
    let e = LinkExtractor::builder()
        .deny_extensions(["pdf", " . "])
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("empty extension"), "{e}");
}

#[test]
fn allowed_and_denied_domains_include_subdomains() {
    let html = r#"<a href="http://example.com/1">1</a><a href="http://www.Example.com/2">2</a>
        <a href="http://notexample.com/3">3</a><a href="http://ads.example.com/4">4</a>
        <a href="http://other.org/5">5</a><a href="http://example.com./6">6</a>"#;
    let ex = LinkExtractor::builder()
        .allow_domains([".Example.COM"])
        .deny_domains(["ads.example.com"])
        .build()
        .unwrap();
    assert_eq!(
        extract(&ex, html),
        [
            "http://example.com/1",
            "http://www.example.com/2",
            "http://example.com./6"
        ]
    );
    let ex = LinkExtractor::builder()
        .deny_domains(["example.com"])
        .build()
        .unwrap();
    assert_eq!(
        extract(&ex, html),
        ["http://notexample.com/3", "http://other.org/5"]
    );
}

#[test]
fn restrict_css_limits_links_to_regions() {
    let html = r#"<nav><a href="/nav">n</a></nav>
        <div class="content"><p><a href="/in-1">1</a></p><a href="/in-2">2</a></div>
        <div class="side"><a href="/side">s</a></div>
        <ul><li class="next"><a href="/next">next</a></li></ul>
        <meta http-equiv="refresh" content="0; url=/refresh">"#;
    let ex = LinkExtractor::builder()
        .restrict_css(["div.content", "li.next a"])
        .build()
        .unwrap();
    assert_eq!(
        extract(&ex, html),
        [
            "http://example.com/in-1",
            "http://example.com/in-2",
            "http://example.com/next"
        ],
        "regions, and a region that is itself a link; no meta refresh outside regions"
    );
    // A region given as a selector list keeps its meaning.
    let ex = LinkExtractor::builder()
        .restrict_css(["nav, div.side"])
        .build()
        .unwrap();
    assert_eq!(
        extract(&ex, html),
        ["http://example.com/nav", "http://example.com/side"]
    );
    // Nested regions do not yield a link twice, even with duplicates kept.
    let ex = LinkExtractor::builder()
        .restrict_css(["div", "div.content p"])
        .unique(false)
        .build()
        .unwrap();
    assert_eq!(extract(&ex, html).len(), 3);
}

#[test]
fn tags_and_attributes_are_configurable() {
    let html = r#"<a href="/a">a</a><link rel="next" href="/page-2"><img src="/pic">
        <div data-href="/nope"></div><script src="/app"></script>"#;
    let ex = LinkExtractor::builder()
        .tags([("link", "href"), ("img", "src"), ("A", "HREF")])
        .deny_extensions(Vec::<String>::new())
        .build()
        .unwrap();
    assert_eq!(
        extract(&ex, html),
        [
            "http://example.com/a",
            "http://example.com/page-2",
            "http://example.com/pic"
        ]
    );
    let ex = LinkExtractor::builder()
        .tags([("link", "href")])
        .build()
        .unwrap();
    assert_eq!(extract(&ex, html), ["http://example.com/page-2"]);
}

#[test]
fn fragments_are_dropped_when_canonicalising() {
    let html = r##"<a href="/a#top">1</a><a href="/a#bottom">2</a><a href="#x">3</a>"##;
    let found = LinkExtractor::default().extract_counted(&page(html));
    assert_eq!(
        urls(&found.links),
        ["http://example.com/a", "http://example.com/dir/page.html"]
    );
    assert_eq!(found.duplicates, 1);
    let ex = LinkExtractor::builder()
        .canonicalize(false)
        .build()
        .unwrap();
    assert_eq!(
        extract(&ex, html),
        [
            "http://example.com/a#top",
            "http://example.com/a#bottom",
            "http://example.com/dir/page.html#x"
        ]
    );
}

#[test]
fn duplicates_within_a_page_are_dropped_first_one_wins() {
    let html = r#"<a href="/b">first</a><a href="http://example.com/b">second</a>
        <a href="/dir/../b">third</a><a href="/c">c</a>"#;
    let found = LinkExtractor::default().extract_counted(&page(html));
    assert_eq!(
        urls(&found.links),
        ["http://example.com/b", "http://example.com/c"]
    );
    assert_eq!(found.links[0].text, "first");
    assert_eq!(found.duplicates, 2);
    let ex = LinkExtractor::builder().unique(false).build().unwrap();
    assert_eq!(extract(&ex, html).len(), 4);
}

#[test]
fn ignored_extensions_are_skipped_case_insensitively_on_the_path() {
    let html = r#"<a href="/cover.JPG">1</a><a href="/dl/book.tar.gz">2</a>
        <a href="/doc.pdf?download=1">3</a><a href="/font.woff2">4</a>
        <a href="/page.html">5</a><a href="/view?file=x.pdf">6</a><a href="/v1.2/">7</a>
        <a href="/setup.EXE">8</a><a href="/song.mp3">9</a><a href="/data.xlsx">10</a>"#;
    let found = LinkExtractor::default().extract_counted(&page(html));
    assert_eq!(
        urls(&found.links),
        [
            "http://example.com/page.html",
            "http://example.com/view?file=x.pdf",
            "http://example.com/v1.2/"
        ]
    );
    assert_eq!(found.filtered, 7);
    // A custom list replaces the default; the dot is optional.
    let ex = LinkExtractor::builder()
        .deny_extensions([".HTML"])
        .build()
        .unwrap();
    let got = extract(&ex, html);
    assert!(got.contains(&"http://example.com/cover.JPG".to_owned()));
    assert!(!got.contains(&"http://example.com/page.html".to_owned()));
}

#[test]
fn nofollow_is_flagged_and_skipped_when_asked() {
    let html = r#"<a href="/a" rel="nofollow">a</a><a href="/b" rel="noopener NoFollow">b</a>
        <a href="/c" rel="next">c</a>"#;
    let links = LinkExtractor::default().extract(&page(html));
    assert_eq!(
        links.iter().map(|l| l.nofollow).collect::<Vec<_>>(),
        [true, true, false]
    );
    let ex = LinkExtractor::builder()
        .respect_nofollow(true)
        .build()
        .unwrap();
    assert_eq!(extract(&ex, html), ["http://example.com/c"]);
    // A page-wide robots nofollow covers every link.
    let html = r#"<meta name="ROBOTS" content="noindex, nofollow"><a href="/c">c</a>"#;
    assert!(LinkExtractor::default().extract(&page(html))[0].nofollow);
    assert!(extract(&ex, html).is_empty());
}

#[test]
fn meta_refresh_targets_are_links() {
    for (content, want) in [
        ("5; url=/next", "http://example.com/next"),
        ("0;URL='later.html'", "http://example.com/dir/later.html"),
        ("3, url = \"http://other.org/x\"", "http://other.org/x"),
        ("1; urls.html", "http://example.com/dir/urls.html"),
        ("0.5; /half", "http://example.com/half"),
    ] {
        let html = format!(
            r#"<html><head><meta http-equiv="Refresh" content="{}"></head><body></body></html>"#,
            content.replace('"', "&quot;")
        );
        assert_eq!(
            extract(&LinkExtractor::default(), &html),
            [want],
            "{content}"
        );
    }
    // A refresh without a target only reloads the page: no link.
    let html = r#"<meta http-equiv="refresh" content="30">"#;
    assert!(extract(&LinkExtractor::default(), html).is_empty());
    let html = r#"<meta http-equiv="refresh" content="0; url=/next"><a href="/a">a</a>"#;
    let off = LinkExtractor::builder()
        .meta_refresh(false)
        .build()
        .unwrap();
    assert_eq!(extract(&off, html), ["http://example.com/a"]);
    assert_eq!(
        extract(&LinkExtractor::default(), html),
        ["http://example.com/a", "http://example.com/next"]
    );
}

#[test]
fn malformed_and_non_http_hrefs_are_counted_not_fatal() {
    let html = r#"<a href="http://[::1">1</a><a href="javascript:void(0)">2</a>
        <a href="mailto:shop@example.com">3</a><a href="">4</a><a href="   ">5</a>
        <a href="ftp://example.com/f">6</a><a href="http://">7</a><a href="tel:+441234">8</a>
        <a href="data:text/html,hi">9</a><a href=" /ok ">ok</a><a>no href</a>
        <meta http-equiv="refresh" content="0; url=javascript:alert(1)">"#;
    let found = LinkExtractor::default().extract_counted(&page(html));
    assert_eq!(urls(&found.links), ["http://example.com/ok"]);
    assert_eq!(found.invalid, 10);
    assert_eq!(found.filtered + found.duplicates, 0);
}

#[test]
fn non_html_bodies_have_no_links() {
    let req = Request::get(PAGE).unwrap();
    let mut headers = crawler_core::HeaderMap::new();
    headers.insert(
        "content-type",
        crawler_core::HeaderValue::from_static("application/json"),
    );
    let p = Response::new(
        req.clone(),
        req.url,
        200,
        headers,
        crawler_core::Bytes::from_static(br#"{"html": "<a href='/x'>x</a>"}"#),
    );
    assert!(LinkExtractor::default().extract(&p).is_empty());
}

#[test]
fn refresh_parser_handles_odd_forms() {
    assert_eq!(refresh_target("0;url=/a"), Some("/a"));
    assert_eq!(refresh_target("  7 ;  URL=  /b  "), Some("/b"));
    assert_eq!(refresh_target("0; url='/c' junk"), Some("/c"));
    assert_eq!(refresh_target("0; url="), None);
    assert_eq!(refresh_target("10"), None);
    assert_eq!(refresh_target(""), None);
    assert_eq!(refresh_target("url=/d"), None, "a delay comes first");
}
