//! Responses: status, headers, body, decoded text, and selection (CSS and XPath, in
//! [`crate::select`]).

use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use scraper::Html;
use serde::de::DeserializeOwned;
use url::Url;

use crate::charset;
use crate::conditional::ConditionalStore;
use crate::error::{Error, ErrorKind, Result};
use crate::fetch::{Failure, FailureKind};
use crate::parse::ParseLimits;
use crate::request::{Request, check_scheme};
use crate::select::{Doc, Node, Page, Selection};

/// A downloaded page, handed to a spider callback.
///
/// Text is decoded lazily (charset from the header, a BOM, or `<meta>`), and the HTML tree is
/// parsed on the first selection and then reused. The tree sits behind a mutex so that a
/// `Response` is `Sync` and a spider may hold selections across `.await` in a `Send` future.
pub struct Response {
    url: Url,
    status: u16,
    headers: http::HeaderMap,
    body: Bytes,
    request: Request,
    text: OnceLock<String>,
    doc: OnceLock<Mutex<Doc>>,
    base: OnceLock<Url>,
    problems: Arc<Mutex<Vec<Error>>>,
    /// Where the body came from: the network, or the HTTP cache (after a 304, or offline).
    origin: BodyOrigin,
    /// What earlier crawls stored about URLs, when the crawl keeps validators.
    history: Option<Arc<dyn ConditionalStore>>,
    /// What to record once the request is acknowledged (validators, the cached copy).
    after_ack: Mutex<Option<AfterAck>>,
    /// The address the response came from, when it came from the network.
    remote_addr: Option<std::net::IpAddr>,
    /// The HTTP version the response came in, when it came from the network.
    http_version: Option<http::Version>,
    /// The TLS version of the connection it came on (`TLSv1.3`), when the downloader
    /// recorded it.
    tls_version: Option<&'static str>,
    /// The bounds the HTML parse must stay within (the crawl's `parse_*` settings).
    limits: ParseLimits,
}

/// Work a downloader defers until the engine acknowledges the request, that is until the
/// page's items are in the feeds and its follow-up requests are queued: validators stored
/// earlier would let a crash turn the re-fetch into a 304 for a page whose items were never
/// written.
pub struct AfterAck(Box<dyn FnOnce() + Send>);

impl AfterAck {
    /// Defer `f`.
    pub fn new(f: impl FnOnce() + Send + 'static) -> Self {
        Self(Box::new(f))
    }

    /// Do it now.
    pub fn run(self) {
        (self.0)()
    }
}

impl std::fmt::Debug for AfterAck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AfterAck")
    }
}

/// Where a response's body came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BodyOrigin {
    /// Downloaded by this request.
    #[default]
    Network,
    /// The server answered 304 Not Modified and the body is the copy in the HTTP cache.
    Revalidated,
    /// Replayed from the HTTP cache without asking the server (offline replay).
    Cache,
}

impl std::fmt::Debug for Response {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Response")
            .field("url", &self.url.as_str())
            .field("status", &self.status)
            .field("body_len", &self.body.len())
            .finish_non_exhaustive()
    }
}

impl Response {
    /// Build a response (downloaders and tests call this).
    pub fn new(
        request: Request,
        url: Url,
        status: u16,
        headers: http::HeaderMap,
        body: Bytes,
    ) -> Self {
        Self {
            url,
            status,
            headers,
            body,
            request,
            text: OnceLock::new(),
            doc: OnceLock::new(),
            base: OnceLock::new(),
            problems: Arc::default(),
            origin: BodyOrigin::Network,
            history: None,
            after_ack: Mutex::new(None),
            remote_addr: None,
            http_version: None,
            tls_version: None,
            limits: ParseLimits::default(),
        }
    }

    /// Set the bounds the HTML parse must stay within (the engine sets the crawl's).
    pub fn set_parse_limits(&mut self, limits: ParseLimits) {
        self.limits = limits;
    }

    /// Decode and parse an HTML body now, within the parse limits, so the spider's
    /// selections find the tree ready. `Err` when no character encoding fits the body
    /// ([`FailureKind::Decode`]) or the page crosses a limit ([`FailureKind::TooComplex`]).
    /// A declared charset passed over for another is logged at debug level.
    pub fn parse_html(&self) -> std::result::Result<(), Failure> {
        if self.doc.get().is_some() {
            return Ok(());
        }
        let decoded = charset::decode(self.header("content-type"), &self.body);
        if let Some(why) = decoded.unfit {
            tracing::warn!(url = %self.url, "page not parsed: {why}");
            return Err(Failure::new(FailureKind::Decode, why));
        }
        if let Some(why) = &decoded.fallback {
            tracing::debug!(url = %self.url, encoding = decoded.encoding.name(), "charset: {why}");
        }
        let html = crate::parse::parse_document(&decoded.text, &self.limits)
            .map_err(|e| Failure::new(FailureKind::TooComplex, e.to_string()))?;
        // Set unless a selection got there first (it parsed the same text).
        let _ = self.doc.set(Mutex::new(Doc::new(html)));
        Ok(())
    }

    /// Record the address the response was served from (downloaders call this).
    pub fn with_remote_addr(mut self, addr: Option<std::net::IpAddr>) -> Self {
        self.remote_addr = addr;
        self
    }

    /// The address the response was served from, when known.
    pub fn remote_addr(&self) -> Option<std::net::IpAddr> {
        self.remote_addr
    }

    /// Record the HTTP version the response came in (downloaders call this).
    pub fn with_http_version(mut self, version: http::Version) -> Self {
        self.http_version = Some(version);
        self
    }

    /// The HTTP version the response came in (`http::Version::HTTP_2` when HTTP/2 was
    /// negotiated), when it came from the network; `None` for a page replayed from the HTTP
    /// cache or built by hand. [`crate::http_version_name`] gives its name (`HTTP/2`).
    pub fn http_version(&self) -> Option<http::Version> {
        self.http_version
    }

    /// Record the TLS version of the connection the response came on (downloaders call
    /// this).
    pub fn with_tls_version(mut self, version: Option<&'static str>) -> Self {
        self.tls_version = version;
        self
    }

    /// The TLS version of the connection the response came on (`TLSv1.2`, `TLSv1.3`), when
    /// the downloader recorded it (the HTTP downloader does); `None` on plain `http://`,
    /// from the cache, or built by hand.
    pub fn tls_version(&self) -> Option<&'static str> {
        self.tls_version
    }

    /// Whether the page was served from a private, loopback or link-local address (by its
    /// URL's host when the address is unknown: an IP literal, or `localhost`). Requests
    /// found on it may reach private addresses (see [`crate::address::FROM_PRIVATE_META`]).
    pub fn served_from_private(&self) -> bool {
        use crate::address::{AddressClass, classify};
        if let Some(ip) = self.remote_addr {
            return classify(ip) != AddressClass::Public;
        }
        match self.url.host() {
            Some(url::Host::Ipv4(ip)) => classify(ip.into()) != AddressClass::Public,
            Some(url::Host::Ipv6(ip)) => classify(ip.into()) != AddressClass::Public,
            Some(url::Host::Domain(d)) => {
                let d = d.trim_end_matches('.').to_ascii_lowercase();
                d == "localhost" || d.ends_with(".localhost")
            }
            None => false,
        }
    }

    /// Defer `work` until the engine acknowledges this response's request (see
    /// [`AfterAck`]). The engine drops it when the spider or the feeds fail on the page.
    pub fn set_after_ack(&mut self, work: AfterAck) {
        *self.after_ack.get_mut().unwrap_or_else(|p| p.into_inner()) = Some(work);
    }

    /// Take the deferred work out (the engine calls this).
    pub fn take_after_ack(&self) -> Option<AfterAck> {
        self.after_ack
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Mark where the body came from (downloaders call this for cached bodies).
    pub fn with_origin(mut self, origin: BodyOrigin) -> Self {
        self.origin = origin;
        self
    }

    /// Where the body came from.
    pub fn origin(&self) -> BodyOrigin {
        self.origin
    }

    /// Whether the server answered 304 Not Modified and this body is the cached copy: the
    /// request counts as not modified, yet the spider still sees the page.
    pub fn is_revalidated(&self) -> bool {
        self.origin == BodyOrigin::Revalidated
    }

    /// Whether the body came from the HTTP cache (revalidated or replayed offline) rather
    /// than over the network.
    pub fn is_cached(&self) -> bool {
        self.origin != BodyOrigin::Network
    }

    /// Attach what earlier crawls stored about URLs (downloaders call this).
    pub fn with_history(mut self, history: Arc<dyn ConditionalStore>) -> Self {
        self.history = Some(history);
        self
    }

    /// What earlier crawls stored about URLs (validators: last fetch time, Last-Modified),
    /// when the crawl keeps them (a job directory with conditional requests or the HTTP
    /// cache). Sitemap spiders read it to skip entries that have not changed.
    pub fn history(&self) -> Option<&dyn ConditionalStore> {
        self.history.as_deref()
    }

    /// The final URL (after redirects).
    pub fn url(&self) -> &Url {
        &self.url
    }

    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// All response headers.
    pub fn headers(&self) -> &http::HeaderMap {
        &self.headers
    }

    /// One header's value as text, if present and readable.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The raw (already content-decoded) body bytes.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The request that produced this response.
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// The URLs redirected through to reach this response, oldest first; [`Response::url`]
    /// is the last hop's.
    pub fn redirect_urls(&self) -> &[Url] {
        &self.request.redirect_urls
    }

    /// The callback named by the request, if any.
    pub fn callback(&self) -> Option<&str> {
        self.request.callback.as_deref()
    }

    /// The request's depth (start requests are 0).
    pub fn depth(&self) -> u32 {
        self.request.depth
    }

    /// A value the request carried in its meta, deserialised as `T`.
    pub fn meta<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        self.request
            .meta
            .get(key)
            .and_then(|v| T::deserialize(v).ok())
    }

    /// Whether the body is HTML (by Content-Type, or by its first bytes when none is given).
    pub fn is_html(&self) -> bool {
        match self.header("content-type") {
            Some(ct) => {
                let ct = ct.to_ascii_lowercase();
                ct.contains("html") || ct.contains("xml")
            }
            None => self.body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'<'),
        }
    }

    /// The body decoded to text: by its byte-order mark, its declared charset (header, then
    /// `<meta>`), else UTF-8 or the encoding detected from the bytes, the first of them
    /// that decodes the body cleanly. When none does, malformed sequences become U+FFFD
    /// rather than errors.
    pub fn text(&self) -> &str {
        self.text.get_or_init(|| {
            charset::decode(self.header("content-type"), &self.body)
                .text
                .into_owned()
        })
    }

    /// Parse the body as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body).map_err(|e| {
            Error::new(
                ErrorKind::Other,
                format!("body of {} is not the expected JSON", self.url),
            )
            .with_source(e)
        })
    }

    fn doc(&self) -> &Mutex<Doc> {
        self.doc.get_or_init(|| {
            // Parse from the decoded text without keeping a copy of it: a UTF-8 body is
            // borrowed as it is, and the tree holds its own strings anyway.
            let parsed = match self.text.get() {
                Some(text) => crate::parse::parse_document(text, &self.limits),
                None => crate::parse::parse_document(
                    &charset::decode(self.header("content-type"), &self.body).text,
                    &self.limits,
                ),
            };
            // A page past the limits selects nothing, and the engine fails it as
            // `too_complex` from the recorded problem.
            Mutex::new(Doc::new(parsed.unwrap_or_else(|e| {
                crate::select::record(&self.problems, &e);
                Html::new_document()
            })))
        })
    }

    /// The base for relative links: `<base href>` when the page has one, else the page URL.
    pub fn base_url(&self) -> &Url {
        self.base.get_or_init(|| {
            // A byte search first, so pages without <base> never pay for a parse here.
            if !charset::may_have_base(&self.body) {
                return self.url.clone();
            }
            self.select("base[href]")
                .attrs("href")
                .next()
                .and_then(|href| self.url.join(href.trim()).ok())
                .unwrap_or_else(|| self.url.clone())
        })
    }

    /// Resolve a link found on this page to an absolute http(s) URL.
    pub fn urljoin(&self, href: &str) -> Result<Url> {
        let url = self.base_url().join(href.trim()).map_err(|e| {
            Error::new(
                ErrorKind::Url,
                format!("invalid link '{href}' on {}", self.url),
            )
            .with_source(e)
        })?;
        check_scheme(url)
    }

    /// A request for a link on this page (depth + 1, same callback unless changed). It may
    /// lead into private space only if this page was served from there (see
    /// [`crate::address::FROM_PRIVATE_META`]); in a crawl the engine marks every follow-up
    /// so, and the mark here serves requests sent outside one (the shell, contracts).
    pub fn follow(&self, href: &str) -> Result<Request> {
        let mut req = Request::new(self.urljoin(href)?);
        req.depth = self.request.depth + 1;
        crate::address::mark_from_private(&mut req.meta, self.served_from_private());
        Ok(req)
    }

    fn page(&self) -> Page<'_> {
        Page {
            doc: self.doc(),
            problems: &self.problems,
        }
    }

    /// The nodes a CSS selector matches, in document order: elements, or with parsel's
    /// pseudo-elements at the end, their text nodes (`h1::text`; `div ::text` for all the
    /// text below) or one attribute (`a::attr(href)`). Read them with
    /// [`Selection::text`] / [`Selection::attr`] (tidied) or [`Selection::get`] /
    /// [`Selection::getall`] (as Scrapy gives them).
    ///
    /// The selector is the spider's own code, so an invalid one is a bug of the spider, not
    /// of the page: it yields an empty selection here (no panic mid-crawl), and the engine
    /// then treats the page as a spider error: it is logged with the page's URL and
    /// callback, counted in `spider_errors`, and none of the items the callback produced
    /// from this page are written, so a typo never yields half-empty items. Links it
    /// followed are still followed. The error names the selector and the position of the
    /// fault. To handle an invalid selector yourself (one built from data, say), use
    /// [`Response::try_select`].
    #[doc(alias = "css")]
    pub fn select(&self, css: &str) -> Selection<'_> {
        let page = self.page();
        page.recorded(page.css(None, css, false))
    }

    /// Like [`Response::select`], but an invalid selector is returned as an error of kind
    /// [`ErrorKind::Selector`] and the page is not marked as failed: what to do is the
    /// spider's choice.
    pub fn try_select(&self, css: &str) -> Result<Selection<'_>> {
        self.page().css(None, css, false)
    }

    /// The first node matching a CSS selector (an invalid selector fails the page, as
    /// with [`Response::select`]).
    pub fn select_first(&self, css: &str) -> Option<Node<'_>> {
        let page = self.page();
        // Stop at the first match rather than collecting them all: a title or price near
        // the top of a page then skips the walk over the rest of the tree (the related-book
        // links of the heavy crawl profile).
        page.recorded(page.css(None, css, true)).first()
    }

    /// The text of the first node matching `css`, or an error naming the selector and
    /// page: [`ErrorKind::Missing`] when nothing matches, [`ErrorKind::Selector`] when the
    /// selector is invalid (which also fails the page, as with [`Response::select`], even if
    /// the spider ignores this error).
    pub fn text_of(&self, css: &str) -> Result<String> {
        let page = self.page();
        let first = page.noted(page.css(None, css, true))?.first();
        first.map(|n| n.text()).ok_or_else(|| {
            Error::new(
                ErrorKind::Missing,
                format!("no element matches '{css}' on {}", self.url),
            )
        })
    }

    /// What an XPath 1.0 expression gives on this page, with the document as its context:
    /// elements (`//div[@class="product"]`), text nodes (`//h1/text()`), attributes
    /// (`//a/@href`), or a value (`count(//li)`, `normalize-space(//h1)`), read as
    /// [`Response::select`]'s are. Every function of XPath 1.0 is there (`contains`,
    /// `starts-with`, `normalize-space`, `position`, `last`, `count`, `string`...). Names are
    /// the parser's, lower case for HTML, in no namespace (as lxml reads HTML for Scrapy).
    /// An invalid expression fails the page as an invalid CSS selector does.
    pub fn xpath(&self, expr: &str) -> Selection<'_> {
        let page = self.page();
        page.recorded(page.xpath(None, expr))
    }

    /// Like [`Response::xpath`], but an invalid expression is returned as an error of kind
    /// [`ErrorKind::Selector`] and the page is not marked as failed.
    pub fn try_xpath(&self, expr: &str) -> Result<Selection<'_>> {
        self.page().xpath(None, expr)
    }

    /// Problems found while the spider used this response (invalid selectors), shared with the
    /// engine so they are reported after the callback returns.
    pub fn problems(&self) -> Arc<Mutex<Vec<Error>>> {
        Arc::clone(&self.problems)
    }
}

/// An HTML page at `http://example.com/dir/page.html`, for tests of what reads pages.
#[cfg(test)]
pub(crate) fn test_page(html: &str) -> Response {
    let req = Request::get("http://example.com/dir/page.html").expect("a valid URL");
    let url = req.url.clone();
    let mut headers = http::HeaderMap::new();
    headers.insert("content-type", http::HeaderValue::from_static("text/html"));
    Response::new(req, url, 200, headers, Bytes::from(html.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_page as page;

    #[test]
    fn selects_text_and_attributes() {
        let p = page(
            r#"<div class="product"><h1>  A  Light in
            the Attic </h1><p class="price">£51.77</p></div><a href="next.html">n</a><a>x</a>"#,
        );
        assert_eq!(p.text_of("div.product h1").unwrap(), "A Light in the Attic");
        assert_eq!(p.select_first("p.price").unwrap().text(), "£51.77");
        assert_eq!(
            p.select("a").attrs("href").collect::<Vec<_>>(),
            ["next.html"]
        );
        assert_eq!(p.select("a").len(), 2);
        let e = p.text_of("p.missing").unwrap_err();
        assert!(
            e.to_string().contains("no element matches 'p.missing'"),
            "{e}"
        );
        let div = p.select_first("div").unwrap();
        assert_eq!(
            div.select("h1").texts().collect::<Vec<_>>(),
            ["A Light in the Attic"]
        );
        assert!(p.problems().lock().unwrap().is_empty());
    }

    #[test]
    fn first_match_helpers_and_iterators() {
        let p = page(
            r#"<ul><li><a>no href</a></li><li><a href="a.html"> First </a></li>
            <li><a href="b.html">Second</a></li></ul>"#,
        );
        let links = p.select("li a");
        // The first match that has the attribute; the first match's text.
        assert_eq!(links.attr("href").as_deref(), Some("a.html"));
        assert_eq!(links.text().as_deref(), Some("no href"));
        assert_eq!(links.attr("title"), None);
        assert_eq!(links.texts().nth(1).as_deref(), Some("First"));
        assert_eq!(links.attrs("href").count(), 2);
        let names: Vec<String> = links.iter().map(|e| e.name()).collect();
        assert_eq!(names, ["a", "a", "a"]);
        assert_eq!(links.len(), 3, "iter() leaves the selection usable");
        let empty = p.select("table");
        assert_eq!((empty.text(), empty.attr("href")), (None, None));
        assert_eq!(empty.texts().count(), 0);
    }

    #[test]
    fn invalid_selectors_are_recorded_once_and_fail_text_of() {
        let p = page("<p>x</p>");
        assert!(p.select("p[").is_empty());
        assert!(p.select("p[").is_empty());
        assert!(p.select_first("p[").is_none());
        let e = p.text_of("p[").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Selector, "not a missing element: {e}");
        // Inside an element too.
        let para = p.select_first("p").unwrap();
        assert!(para.select("b[").is_empty());
        {
            let problems = p.problems();
            let problems = problems.lock().unwrap();
            assert_eq!(problems.len(), 2, "{problems:?}");
            assert!(
                problems[0]
                    .to_string()
                    .contains("invalid CSS selector 'p['")
            );
        }

        // try_select hands the error to the spider and records nothing.
        let q = page("<p>x</p>");
        let e = q.try_select("p[").err().unwrap();
        assert_eq!(e.kind(), ErrorKind::Selector);
        assert!(q.select_first("p").unwrap().try_select("b[").is_err());
        assert_eq!(q.try_select("p").unwrap().text().as_deref(), Some("x"));
        assert!(q.problems().lock().unwrap().is_empty());
    }

    #[test]
    fn links_resolve_against_base_href() {
        let p = page(r#"<head><base href="http://cdn.example.com/b/"></head><a href="x">x</a>"#);
        assert_eq!(
            p.urljoin("x").unwrap().as_str(),
            "http://cdn.example.com/b/x"
        );
        // In any letter case.
        let upper =
            page(r#"<HEAD><BASE HREF="http://cdn.example.com/u/"></HEAD><a href="x">x</a>"#);
        assert_eq!(
            upper.urljoin("x").unwrap().as_str(),
            "http://cdn.example.com/u/x"
        );
        let q = page("<a href='x'>x</a>");
        assert_eq!(
            q.urljoin("../y?q=1#f").unwrap().as_str(),
            "http://example.com/y?q=1#f"
        );
        assert!(q.urljoin("javascript:void(0)").is_err());
        let child = q.follow("x").unwrap();
        assert_eq!(child.depth, 1);
    }

    #[test]
    fn text_is_decoded_from_declared_charset() {
        let req = Request::get("http://example.com/").unwrap();
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "content-type",
            http::HeaderValue::from_static("text/html; charset=windows-1252"),
        );
        let r = Response::new(
            req.clone(),
            req.url,
            200,
            headers,
            Bytes::from_static(b"caf\xe9"),
        );
        assert_eq!(r.text(), "café");
    }
}
