//! Link extraction: which links of a page a crawl should consider, as absolute URLs.

use std::collections::HashSet;

use regex::RegexSet;
use url::Url;

use crate::error::{Error, ErrorKind, Result};
use crate::response::Response;

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
/// use crawler_core::{LinkExtractor, Request, Response};
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

    /// Resolve, filter and deduplicate one candidate href, recording the outcome.
    fn consider(
        &self,
        base: &Url,
        href: &str,
        text: String,
        nofollow: bool,
        seen: &mut HashSet<String>,
        found: &mut Extracted,
    ) {
        let Some(mut url) = resolve(base, href) else {
            tracing::debug!(href, page = %base, "skipping link that is not an http(s) URL");
            found.invalid += 1;
            return;
        };
        if self.canonicalize {
            url.set_fragment(None);
        }
        if !self.wanted(&url, nofollow) {
            found.filtered += 1;
            return;
        }
        if self.unique && !seen.insert(url.as_str().to_owned()) {
            found.duplicates += 1;
            return;
        }
        found.links.push(Link {
            url,
            text,
            nofollow,
        });
    }

    /// The filters, cheapest first.
    fn wanted(&self, url: &Url, nofollow: bool) -> bool {
        if nofollow && self.respect_nofollow {
            return false;
        }
        let host = url.host_str().unwrap_or_default();
        let host = host.strip_suffix('.').unwrap_or(host);
        if !self.allow_domains.is_empty()
            && !self
                .allow_domains
                .iter()
                .any(|d| crate::matching::host_in_domain(host, d))
        {
            return false;
        }
        if self
            .deny_domains
            .iter()
            .any(|d| crate::matching::host_in_domain(host, d))
        {
            return false;
        }
        if self.has_denied_extension(url.path()) {
            return false;
        }
        let s = url.as_str();
        if !self.allow.is_empty() && !self.allow.is_match(s) {
            return false;
        }
        !self.deny.is_match(s)
    }

    fn has_denied_extension(&self, path: &str) -> bool {
        if self.deny_extensions.is_empty() {
            return false;
        }
        let file = path.rsplit('/').next().unwrap_or_default();
        if !file.contains('.') {
            return false;
        }
        let file = file.to_ascii_lowercase();
        // Every dotted suffix, so that both "tar.gz" and "gz" can be listed.
        file.match_indices('.')
            .any(|(i, _)| self.deny_extensions.contains(&file[i + 1..]))
    }

    /// Page-level signals from `<meta>`: refresh targets and a robots nofollow.
    fn page_meta(&self, page: &Response) -> PageMeta {
        let mut meta = PageMeta::default();
        let want_refresh = self.meta_refresh && !self.restricted;
        for el in page.select("meta[content]") {
            let Some(content) = el.attr("content") else {
                continue;
            };
            if want_refresh
                && el
                    .attr("http-equiv")
                    .is_some_and(|h| h.trim().eq_ignore_ascii_case("refresh"))
            {
                if let Some(target) = refresh_target(&content) {
                    meta.refresh.push(target.to_owned());
                }
            } else if el
                .attr("name")
                .is_some_and(|n| n.trim().eq_ignore_ascii_case("robots"))
                && (has_token(&content, "nofollow") || has_token(&content, "none"))
            {
                meta.nofollow = true;
            }
        }
        meta
    }
}

#[derive(Default)]
struct PageMeta {
    refresh: Vec<String>,
    nofollow: bool,
}

/// Resolve an href against the base; `None` unless the result is an http(s) URL with a host.
fn resolve(base: &Url, href: &str) -> Option<Url> {
    // HTML strips ASCII whitespace around attribute URLs; an empty href would otherwise
    // resolve to the page itself, which is never what a link to "nothing" means.
    let href = href.trim_matches(|c: char| c.is_ascii_whitespace());
    if href.is_empty() {
        return None;
    }
    let url = base.join(href).ok()?;
    (matches!(url.scheme(), "http" | "https") && url.host().is_some()).then_some(url)
}

/// Whether a space- or comma-separated list contains `token`, ignoring ASCII case.
fn has_token(list: &str, token: &str) -> bool {
    list.split(|c: char| c.is_ascii_whitespace() || c == ',')
        .any(|t| t.eq_ignore_ascii_case(token))
}

/// The URL of a `content="5; url=/next"` refresh, in the forms browsers accept:
/// `;` or `,` after the delay, `url=` optional and in any case, the URL optionally quoted.
fn refresh_target(content: &str) -> Option<&str> {
    let content = content.trim();
    let rest = content
        .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
        .trim_start();
    let rest = rest.strip_prefix([';', ','])?.trim_start();
    let rest = match rest.get(..3) {
        Some(p) if p.eq_ignore_ascii_case("url") => {
            let after = rest[3..].trim_start();
            match after.strip_prefix('=') {
                Some(after) => after.trim_start(),
                // "url" is the start of a relative URL such as "urls.html", not the keyword.
                None => rest,
            }
        }
        _ => rest,
    };
    let target = match rest.chars().next() {
        Some(q @ ('"' | '\'')) => rest[1..].split(q).next().unwrap_or_default(),
        _ => rest,
    }
    .trim();
    (!target.is_empty()).then_some(target)
}

fn default_tags() -> Vec<(String, String)> {
    vec![
        ("a".to_owned(), "href".to_owned()),
        ("area".to_owned(), "href".to_owned()),
    ]
}

/// One selector list that matches every link element in (or being) one of the regions.
fn selector_for(regions: &[String], tags: &[(String, String)]) -> String {
    let links = tags
        .iter()
        .map(|(t, a)| format!("{t}[{a}]"))
        .collect::<Vec<_>>()
        .join(", ");
    if regions.is_empty() {
        return links;
    }
    // `:is()` keeps each region's own selector list intact (it may contain commas).
    let within = regions
        .iter()
        .map(|r| format!(":is({r})"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(":is({within}) :is({links}), :is({within}):is({links})")
}

/// Configures a [`LinkExtractor`]; checked by [`build`](Self::build).
///
/// Methods taking lists add to what was set before, except [`tags`](Self::tags) and
/// [`deny_extensions`](Self::deny_extensions), which replace a default.
#[derive(Debug, Clone)]
pub struct LinkExtractorBuilder {
    allow: Vec<String>,
    deny: Vec<String>,
    allow_domains: Vec<String>,
    deny_domains: Vec<String>,
    restrict_css: Vec<String>,
    tags: Vec<(String, String)>,
    canonicalize: bool,
    unique: bool,
    deny_extensions: Vec<String>,
    respect_nofollow: bool,
    meta_refresh: bool,
}

impl Default for LinkExtractorBuilder {
    fn default() -> Self {
        Self {
            allow: Vec::new(),
            deny: Vec::new(),
            allow_domains: Vec::new(),
            deny_domains: Vec::new(),
            restrict_css: Vec::new(),
            tags: default_tags(),
            canonicalize: true,
            unique: true,
            deny_extensions: IGNORED_EXTENSIONS.iter().map(|e| (*e).to_owned()).collect(),
            respect_nofollow: false,
            meta_refresh: true,
        }
    }
}

fn strings<S: Into<String>>(items: impl IntoIterator<Item = S>) -> impl Iterator<Item = String> {
    items.into_iter().map(Into::into)
}

impl LinkExtractorBuilder {
    /// Keep only URLs matching at least one of these regular expressions.
    pub fn allow<S: Into<String>>(mut self, patterns: impl IntoIterator<Item = S>) -> Self {
        self.allow.extend(strings(patterns));
        self
    }

    /// Drop URLs matching any of these regular expressions (deny wins over allow).
    pub fn deny<S: Into<String>>(mut self, patterns: impl IntoIterator<Item = S>) -> Self {
        self.deny.extend(strings(patterns));
        self
    }

    /// Keep only links to these domains or their subdomains (`example.com` allows
    /// `www.example.com`).
    pub fn allow_domains<S: Into<String>>(mut self, domains: impl IntoIterator<Item = S>) -> Self {
        self.allow_domains.extend(strings(domains));
        self
    }

    /// Drop links to these domains and their subdomains.
    pub fn deny_domains<S: Into<String>>(mut self, domains: impl IntoIterator<Item = S>) -> Self {
        self.deny_domains.extend(strings(domains));
        self
    }

    /// Look for links only inside elements matching these CSS selectors (an element that
    /// itself matches counts too, so `li.next a` works). Meta refresh is then not read.
    pub fn restrict_css<S: Into<String>>(mut self, regions: impl IntoIterator<Item = S>) -> Self {
        self.restrict_css.extend(strings(regions));
        self
    }

    /// Which attribute of which tag holds a link, e.g. `[("a", "href"), ("img", "src")]`.
    /// Replaces the default `[("a", "href"), ("area", "href")]`.
    pub fn tags<T: Into<String>, A: Into<String>>(
        mut self,
        pairs: impl IntoIterator<Item = (T, A)>,
    ) -> Self {
        self.tags = pairs
            .into_iter()
            .map(|(t, a)| (t.into(), a.into()))
            .collect();
        self
    }

    /// Drop URL fragments (`#...`), so one page is not seen as several (default on).
    pub fn canonicalize(mut self, on: bool) -> Self {
        self.canonicalize = on;
        self
    }

    /// Keep only the first link to each URL on a page (default on).
    pub fn unique(mut self, on: bool) -> Self {
        self.unique = on;
        self
    }

    /// Skip links whose path ends in one of these extensions (case-insensitive, with or
    /// without the dot). Replaces [`IGNORED_EXTENSIONS`]; an empty list skips none.
    pub fn deny_extensions<S: Into<String>>(mut self, exts: impl IntoIterator<Item = S>) -> Self {
        self.deny_extensions = strings(exts).collect();
        self
    }

    /// Skip links marked `rel="nofollow"`, and every link of a page whose
    /// `<meta name="robots">` says `nofollow` or `none` (default off: such links are
    /// returned with [`Link::nofollow`] set).
    pub fn respect_nofollow(mut self, on: bool) -> Self {
        self.respect_nofollow = on;
        self
    }

    /// Read the target of `<meta http-equiv="refresh" content="5; url=/next">` (default on).
    pub fn meta_refresh(mut self, on: bool) -> Self {
        self.meta_refresh = on;
        self
    }

    /// Check and compile the configuration.
    ///
    /// Fails with [`ErrorKind::Settings`] naming the culprit for a pattern that is not a valid
    /// regular expression, an empty or URL-shaped domain, a tag or attribute name that is not
    /// a plain name, an empty extension or tag list; and with [`ErrorKind::Selector`] for a
    /// region that is not valid CSS.
    pub fn build(self) -> Result<LinkExtractor> {
        let allow = patterns("allow", &self.allow)?;
        let deny = patterns("deny", &self.deny)?;
        let allow_domains = domains("allow_domains", self.allow_domains)?;
        let deny_domains = domains("deny_domains", self.deny_domains)?;
        if self.tags.is_empty() {
            return Err(Error::new(
                ErrorKind::Settings,
                "link extractor has no tags to read links from",
            ));
        }
        let mut tags = Vec::with_capacity(self.tags.len());
        for (tag, attr) in self.tags {
            let (tag, attr) = (
                tag.trim().to_ascii_lowercase(),
                attr.trim().to_ascii_lowercase(),
            );
            for (what, name) in [("tag", &tag), ("attribute", &attr)] {
                if !is_plain_name(name) {
                    return Err(Error::new(
                        ErrorKind::Settings,
                        format!(
                            "link extractor {what} '{name}' is not a plain name \
                             (letters, digits, '-' and '_')"
                        ),
                    ));
                }
            }
            tags.push((tag, attr));
        }
        for region in &self.restrict_css {
            scraper::Selector::parse(region).map_err(|e| {
                Error::new(
                    ErrorKind::Selector,
                    format!("invalid restrict_css selector '{region}': {e}"),
                )
            })?;
        }
        let selector = selector_for(&self.restrict_css, &tags);
        // Each part parsed alone above; the combination must parse too (`:is()` limits).
        scraper::Selector::parse(&selector).map_err(|e| {
            Error::new(
                ErrorKind::Selector,
                format!("restrict_css regions cannot be combined into '{selector}': {e}"),
            )
        })?;
        let mut deny_extensions = HashSet::new();
        for ext in self.deny_extensions {
            let ext = ext.trim().trim_start_matches('.').to_ascii_lowercase();
            if ext.is_empty() {
                return Err(Error::new(
                    ErrorKind::Settings,
                    "link extractor deny_extensions has an empty extension",
                ));
            }
            deny_extensions.insert(ext);
        }
        Ok(LinkExtractor {
            allow,
            deny,
            allow_domains,
            deny_domains,
            restricted: !self.restrict_css.is_empty(),
            selector,
            tags,
            canonicalize: self.canonicalize,
            unique: self.unique,
            deny_extensions,
            respect_nofollow: self.respect_nofollow,
            meta_refresh: self.meta_refresh,
        })
    }
}

fn patterns(what: &str, list: &[String]) -> Result<RegexSet> {
    // Compiled one by one first, so the error names the pattern at fault.
    for p in list {
        regex::Regex::new(p).map_err(|e| {
            Error::new(
                ErrorKind::Settings,
                format!("link extractor {what} pattern '{p}' is not a valid regular expression"),
            )
            .with_source(e)
        })?;
    }
    RegexSet::new(list).map_err(|e| {
        Error::new(
            ErrorKind::Settings,
            format!("link extractor {what} patterns are too large together"),
        )
        .with_source(e)
    })
}

fn domains(what: &str, list: Vec<String>) -> Result<Vec<String>> {
    list.into_iter()
        .map(|d| {
            let norm = d.trim().trim_matches('.').to_ascii_lowercase();
            let bad = norm.is_empty()
                || norm.contains(['/', ' ', '\t', '\n', '\r'])
                || (norm.contains(':') && !norm.starts_with('['));
            if bad {
                Err(Error::new(
                    ErrorKind::Settings,
                    format!(
                        "link extractor {what} entry '{d}' is not a domain \
                         (write a bare host such as 'example.com', without scheme, port or path)"
                    ),
                ))
            } else {
                Ok(norm)
            }
        })
        .collect()
}

fn is_plain_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Request;

    const PAGE: &str = "http://example.com/dir/page.html";

    fn page_at(url: &str, html: &str) -> Response {
        let req = Request::get(url).unwrap();
        let url = req.url.clone();
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "content-type",
            http::HeaderValue::from_static("text/html; charset=utf-8"),
        );
        Response::new(req, url, 200, headers, bytes::Bytes::from(html.to_owned()))
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
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "content-type",
            http::HeaderValue::from_static("application/json"),
        );
        let p = Response::new(
            req.clone(),
            req.url,
            200,
            headers,
            bytes::Bytes::from_static(br#"{"html": "<a href='/x'>x</a>"}"#),
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
}
