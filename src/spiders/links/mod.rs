//! Link extraction: which links of a page a crawl should consider, as absolute URLs.
//!
//! This folder owns the [`LinkExtractor`] and its builder (`builder`: settings checked and
//! compiled once), the per-link decision (`filter`: resolve, canonicalise, filter,
//! deduplicate) and the page-level `<meta>` signals (`meta`: refresh targets, robots
//! nofollow). It reads a parsed [`Response`] only: no I/O, no clock, no shared state. The
//! domain rule is [`crawler_core::matching::host_in_domain`]'s, not a copy of it.

use std::collections::HashSet;

use regex::RegexSet;
use url::Url;

use crawler_core::Response;

mod builder;
mod filter;
mod meta;
#[cfg(test)]
mod tests;

pub use builder::LinkExtractorBuilder;
use builder::{default_tags, selector_for};
use meta::has_token;

/// File extensions (lower case, without the dot) that [`LinkExtractor`] skips by default: links
/// to files a crawler for pages has no use for (images, audio, video, archives, office
/// documents, fonts, executables, style sheets and scripts). Like Scrapy's
/// `IGNORED_EXTENSIONS`, with fonts and a few modern formats added.
#[rustfmt::skip] // one line per kind of file reads better than rustfmt's packing
pub const IGNORED_EXTENSIONS: &[&str] = &[
    // archives and packages
    "7z", "7zip", "apk", "bz2", "cab", "deb", "dmg", "gz", "iso", "jar", "lz", "lzma", "rar",
    "rpm", "tar", "tar.gz", "tgz", "xz", "zip", "zst",
    // images
    "ai", "avif", "bmp", "cdr", "drw", "dxf", "eps", "gif", "heic", "ico", "jpeg", "jpg", "mng",
    "pct", "png", "ps", "psd", "psp", "pst", "svg", "tif", "tiff", "webp",
    // audio
    "aac", "aif", "aiff", "au", "flac", "m4a", "mid", "midi", "mp3", "oga", "ogg", "opus", "ra",
    "wav", "wma",
    // video
    "3gp", "asf", "asx", "avi", "flv", "m4v", "mkv", "mov", "mp4", "mpeg", "mpg", "ogv", "qt",
    "rm", "swf", "vob", "webm", "wmv",
    // office documents
    "doc", "docb", "docm", "docx", "dot", "dotm", "dotx", "odg", "odp", "ods", "odt", "pdf",
    "pot", "potm", "potx", "pps", "ppt", "pptm", "pptx", "rtf", "xls", "xlsb", "xlsm", "xlsx",
    "xltm", "xltx",
    // fonts
    "eot", "otf", "ttf", "woff", "woff2",
    // executables and libraries
    "bin", "dll", "exe", "msi", "so",
    // style sheets, scripts, feeds
    "css", "js", "mjs", "rss",
];

/// A link found on a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The absolute http(s) URL (without its fragment when canonicalising).
    pub url: Url,
    /// The element's text, whitespace collapsed (empty for `<area>`, `<img>`, meta refresh).
    pub text: String,
    /// Whether the element's `rel` contains `nofollow`, or the page's
    /// `<meta name="robots">` says `nofollow` (or `none`).
    pub nofollow: bool,
}

/// What [`LinkExtractor::extract_counted`] found, and what it skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Extracted {
    /// The links kept, in document order (meta refresh links last).
    pub links: Vec<Link>,
    /// Hrefs that could not become an http(s) URL: empty, malformed, or another scheme
    /// (`mailto:`, `javascript:`, `ftp:`...).
    pub invalid: u64,
    /// Valid links rejected by the extractor's filters (patterns, domains, extensions,
    /// nofollow).
    pub filtered: u64,
    /// Links dropped because an earlier link of the page had the same URL.
    pub duplicates: u64,
}

/// Finds the links of a page that a crawl should consider.
///
/// Build one with [`LinkExtractor::builder`] (or [`LinkExtractor::default`] for every `<a>`
/// and `<area>` link). For each page, [`extract`](Self::extract):
///
/// 1. reads the configured attributes of the configured tags (default `a[href]`,
///    `area[href]`), only inside the [`restrict_css`](LinkExtractorBuilder::restrict_css)
///    regions when some are given (an element that is itself a region counts), plus the
///    `<meta http-equiv="refresh">` target unless turned off or restricted to regions;
/// 2. resolves each against the page's base URL (`<base href>` when present); empty,
///    malformed and non-http(s) hrefs are skipped and counted as
///    [`invalid`](Extracted::invalid);
/// 3. drops the fragment (when canonicalising, the default);
/// 4. keeps the link only if its host is in the allowed domains (when any) and not in the
///    denied ones, its path does not end in an ignored extension, its URL matches an allow
///    pattern (when any) and no deny pattern, and (when asked) it is not nofollow;
/// 5. drops later links with a URL already kept on this page (unless turned off).
///
/// Pages that are not HTML (by Content-Type) have no links. Patterns are regular expressions
/// ([`regex`](https://docs.rs/regex) syntax) searched anywhere in the absolute URL, as in
/// Scrapy: anchor them (`^`, `$`) or escape dots (`\.`) where it matters.
///
/// ```
/// use crawler::core::{Request, Response};
/// use crawler::spiders::LinkExtractor;
///
/// let links = LinkExtractor::builder()
///     .allow([r"/catalogue/"])
///     .deny([r"/catalogue/old/"])
///     .restrict_css(["main"])
///     .build()
///     .unwrap();
///
/// let html = r#"<main>
///     <a href="/catalogue/a.html#top">A</a>
///     <a href="/catalogue/old/b.html">B</a>
///     <a href="/catalogue/cover.jpg">cover</a>
///     <a href="mailto:shop@example.com">mail</a>
/// </main><footer><a href="/catalogue/c.html">C</a></footer>"#;
/// let req = Request::get("http://example.com/").unwrap();
/// let page = Response::new(req.clone(), req.url, 200, Default::default(), html.into());
///
/// let found = links.extract_counted(&page);
/// let urls: Vec<&str> = found.links.iter().map(|l| l.url.as_str()).collect();
/// assert_eq!(urls, ["http://example.com/catalogue/a.html"]);
/// assert_eq!(found.links[0].text, "A");
/// assert_eq!(found.invalid, 1, "the mailto: link is skipped and counted");
/// ```
#[derive(Debug, Clone)]
pub struct LinkExtractor {
    allow: RegexSet,
    deny: RegexSet,
    allow_domains: Vec<String>,
    deny_domains: Vec<String>,
    /// Whether regions restrict the search (meta refresh is then outside every region).
    restricted: bool,
    /// One selector list matching every candidate element, so a page is walked once.
    selector: String,
    tags: Vec<(String, String)>,
    canonicalize: bool,
    unique: bool,
    deny_extensions: HashSet<String>,
    respect_nofollow: bool,
    meta_refresh: bool,
}

impl Default for LinkExtractor {
    /// Every `<a href>` and `<area href>` link and meta refresh, canonicalised, deduplicated,
    /// without [`IGNORED_EXTENSIONS`].
    fn default() -> Self {
        let tags = default_tags();
        Self {
            allow: RegexSet::empty(),
            deny: RegexSet::empty(),
            allow_domains: Vec::new(),
            deny_domains: Vec::new(),
            restricted: false,
            selector: selector_for(&[], &tags),
            tags,
            canonicalize: true,
            unique: true,
            deny_extensions: IGNORED_EXTENSIONS.iter().map(|e| (*e).to_owned()).collect(),
            respect_nofollow: false,
            meta_refresh: true,
        }
    }
}

impl LinkExtractor {
    /// A builder with the defaults of [`LinkExtractor::default`].
    pub fn builder() -> LinkExtractorBuilder {
        LinkExtractorBuilder::default()
    }

    /// The links of a page that pass this extractor's filters.
    pub fn extract(&self, page: &Response) -> Vec<Link> {
        self.extract_counted(page).links
    }

    /// The links of a page, with counts of what was skipped and why.
    pub fn extract_counted(&self, page: &Response) -> Extracted {
        let mut found = Extracted::default();
        if !page.is_html() {
            return found;
        }
        let base = page.base_url();
        let mut seen = HashSet::new();
        let page_meta = self.page_meta(page);
        for el in page.select(&self.selector) {
            let name = el.name();
            let rel_nofollow = el
                .attr("rel")
                .is_some_and(|rel| has_token(&rel, "nofollow"));
            // Text is read only once, and only if some attribute of the element is a link.
            let mut text: Option<String> = None;
            for (tag, attr) in &self.tags {
                if *tag != name {
                    continue;
                }
                let Some(href) = el.attr(attr) else { continue };
                let text = text.get_or_insert_with(|| el.text()).clone();
                self.consider(
                    base,
                    &href,
                    text,
                    rel_nofollow || page_meta.nofollow,
                    &mut seen,
                    &mut found,
                );
            }
        }
        for href in &page_meta.refresh {
            self.consider(
                base,
                href,
                String::new(),
                page_meta.nofollow,
                &mut seen,
                &mut found,
            );
        }
        found
    }
}
