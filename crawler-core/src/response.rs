//! Responses: status, headers, body, decoded text, and CSS selection.

use std::rc::Rc;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;
use ego_tree::NodeId;
use scraper::{ElementRef, Html, Selector};
use serde::de::DeserializeOwned;
use url::Url;

use crate::charset;
use crate::conditional::ConditionalStore;
use crate::error::{Error, ErrorKind, Result};
use crate::fetch::{Failure, FailureKind};
use crate::parse::ParseLimits;
use crate::request::{Request, check_scheme};

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
    doc: OnceLock<Mutex<Html>>,
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
        let _ = self.doc.set(Mutex::new(html));
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

    fn doc(&self) -> &Mutex<Html> {
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
            Mutex::new(parsed.unwrap_or_else(|e| {
                record(&self.problems, &e);
                Html::new_document()
            }))
        })
    }

    /// The base for relative links: `<base href>` when the page has one, else the page URL.
    pub fn base_url(&self) -> &Url {
        self.base.get_or_init(|| {
            // A byte search first, so pages without <base> never pay for a parse here.
            if charset::find(&self.body, b"<base").is_none() {
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

    /// All elements matching a CSS selector, in document order.
    ///
    /// The selector is the spider's own code, so an invalid one is a bug of the spider, not
    /// of the page: it yields an empty selection here (no panic mid-crawl), and the engine
    /// then treats the page as a spider error: it is logged with the page's URL and
    /// callback, counted in `spider_errors`, and none of the items the callback produced
    /// from this page are written, so a typo never yields half-empty items. Links it
    /// followed are still followed. To handle an invalid selector yourself (one built from
    /// data, say), use [`Response::try_select`].
    pub fn select(&self, css: &str) -> Selection<'_> {
        match self.selector(css) {
            Ok(selector) => self.select_with(&selector),
            // `selector` recorded the problem for the engine.
            Err(_) => Selection {
                doc: self.doc(),
                problems: &self.problems,
                ids: Vec::new(),
            },
        }
    }

    /// Like [`Response::select`], but an invalid selector is returned as an error of kind
    /// [`ErrorKind::Selector`] and the page is not marked as failed: what to do is the
    /// spider's choice.
    pub fn try_select(&self, css: &str) -> Result<Selection<'_>> {
        compile(css).map(|selector| self.select_with(&selector))
    }

    fn select_with(&self, selector: &Selector) -> Selection<'_> {
        let doc = self.doc();
        let ids = lock(doc).select(selector).map(|e| e.id()).collect();
        Selection {
            doc,
            problems: &self.problems,
            ids,
        }
    }

    /// The first element matching a CSS selector (an invalid selector fails the page, as
    /// with [`Response::select`]).
    pub fn select_first(&self, css: &str) -> Option<Element<'_>> {
        let selector = self.selector(css).ok()?;
        let doc = self.doc();
        // Stop at the first match rather than collecting them all: a title or price near
        // the top of a page then skips the walk over the rest of the tree (the related-book
        // links of the heavy crawl profile).
        let id = lock(doc).select(&selector).next().map(|e| e.id())?;
        Some(Element {
            doc,
            problems: &self.problems,
            id,
        })
    }

    /// The text of the first element matching `css`, or an error naming the selector and
    /// page: [`ErrorKind::Missing`] when nothing matches, [`ErrorKind::Selector`] when the
    /// selector is invalid (which also fails the page, as with [`Response::select`], even if
    /// the spider ignores this error).
    pub fn text_of(&self, css: &str) -> Result<String> {
        let selector = self.selector(css)?;
        let doc = self.doc();
        let text = lock(doc)
            .select(&selector)
            .next()
            .map(|e| collapse(e.text()));
        text.ok_or_else(|| {
            Error::new(
                ErrorKind::Missing,
                format!("no element matches '{css}' on {}", self.url),
            )
        })
    }

    /// Compile `css`; an invalid selector is also recorded as a problem of this page.
    fn selector(&self, css: &str) -> Result<Rc<Selector>> {
        compile(css).inspect_err(|e| record(&self.problems, e))
    }

    /// Problems found while the spider used this response (invalid selectors), shared with the
    /// engine so they are reported after the callback returns.
    pub fn problems(&self) -> Arc<Mutex<Vec<Error>>> {
        Arc::clone(&self.problems)
    }
}

/// Note an invalid selector the spider used, for the engine to report once the callback
/// returns. A copy: the caller may also return the error to the spider.
fn record(problems: &Mutex<Vec<Error>>, e: &Error) {
    let mut problems = lock(problems);
    // A selector inside a loop would repeat the same problem once per element.
    if problems.len() < 16 && !problems.iter().any(|p| p.to_string() == e.to_string()) {
        problems.push(Error::new(e.kind(), e.to_string()));
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves the tree intact (it is never mutated).
    m.lock().unwrap_or_else(|p| p.into_inner())
}

thread_local! {
    // Spiders use a handful of selectors millions of times; parsing each once per thread
    // keeps selection cheap without asking users to hold compiled selectors. Shared (`Rc`)
    // rather than cloned out per use: a clone copies the selector's vectors every call.
    static SELECTORS: std::cell::RefCell<std::collections::HashMap<String, Rc<Selector>>> =
        std::cell::RefCell::default();
}

fn compile(css: &str) -> Result<Rc<Selector>> {
    SELECTORS.with(|cache| {
        if let Some(s) = cache.borrow().get(css) {
            return Ok(Rc::clone(s));
        }
        let s = Rc::new(Selector::parse(css).map_err(|e| {
            Error::new(
                ErrorKind::Selector,
                format!("invalid CSS selector '{css}': {e}"),
            )
        })?);
        let mut cache = cache.borrow_mut();
        if cache.len() > 4096 {
            // Selectors built from page data could grow the cache without end.
            cache.clear();
        }
        cache.insert(css.to_owned(), Rc::clone(&s));
        Ok(s)
    })
}

/// The elements a CSS selector matched.
///
/// Scrapy's `.get()` is [`text`](Selection::text) / [`attr`](Selection::attr) (the first
/// match), its `.getall()` is [`texts`](Selection::texts) / [`attrs`](Selection::attrs)
/// (iterators over every match; `.collect::<Vec<_>>()` for a list).
pub struct Selection<'a> {
    doc: &'a Mutex<Html>,
    problems: &'a Mutex<Vec<Error>>,
    ids: Vec<NodeId>,
}

impl<'a> Selection<'a> {
    /// How many elements matched.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether nothing matched.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The first match.
    pub fn first(&self) -> Option<Element<'a>> {
        self.ids.first().map(|&id| self.element(id))
    }

    fn element(&self, id: NodeId) -> Element<'a> {
        Element {
            doc: self.doc,
            problems: self.problems,
            id,
        }
    }

    /// Every match, in document order (without consuming the selection).
    pub fn iter(&self) -> impl Iterator<Item = Element<'a>> + '_ {
        self.ids.iter().map(|&id| self.element(id))
    }

    /// The value of attribute `name` of the first match that has it (Scrapy's
    /// `css("a::attr(href)").get()`).
    pub fn attr(&self, name: &str) -> Option<String> {
        let doc = lock(self.doc);
        self.ids.iter().find_map(|&id| {
            element(&doc, id)
                .and_then(|e| e.attr(name))
                .map(str::to_owned)
        })
    }

    /// The value of attribute `name` of every match that has it.
    pub fn attrs(&self, name: &str) -> impl Iterator<Item = String> + 'a {
        let doc = lock(self.doc);
        let values: Vec<String> = self
            .ids
            .iter()
            .filter_map(|&id| {
                element(&doc, id)
                    .and_then(|e| e.attr(name))
                    .map(str::to_owned)
            })
            .collect();
        values.into_iter()
    }

    /// The text of the first match, whitespace collapsed and trimmed (Scrapy's
    /// `css("h1::text").get()`); `None` when nothing matched. For an error naming the
    /// selector and page instead, use [`Response::text_of`].
    pub fn text(&self) -> Option<String> {
        self.first().map(|e| e.text())
    }

    /// The text of every match, whitespace collapsed and trimmed.
    pub fn texts(&self) -> impl Iterator<Item = String> + 'a {
        let doc = lock(self.doc);
        let values: Vec<String> = self
            .ids
            .iter()
            .filter_map(|&id| element(&doc, id).map(|e| collapse(e.text())))
            .collect();
        values.into_iter()
    }
}

impl<'a> IntoIterator for Selection<'a> {
    type Item = Element<'a>;
    type IntoIter =
        std::iter::Map<std::vec::IntoIter<NodeId>, Box<dyn Fn(NodeId) -> Element<'a> + 'a>>;

    fn into_iter(self) -> Self::IntoIter {
        let (doc, problems) = (self.doc, self.problems);
        self.ids
            .into_iter()
            .map(Box::new(move |id| Element { doc, problems, id }))
    }
}

fn element(doc: &Html, id: NodeId) -> Option<ElementRef<'_>> {
    doc.tree.get(id).and_then(ElementRef::wrap)
}

/// Text of all descendants with runs of whitespace collapsed to one space and the ends trimmed,
/// which is what a scraped title or price should look like.
fn collapse<'a>(parts: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for word in parts.flat_map(str::split_whitespace) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// One element of a page.
#[derive(Clone, Copy)]
pub struct Element<'a> {
    doc: &'a Mutex<Html>,
    /// The page's problem list, where an invalid selector is recorded.
    problems: &'a Mutex<Vec<Error>>,
    id: NodeId,
}

impl<'a> Element<'a> {
    fn with<T>(&self, f: impl FnOnce(ElementRef<'_>) -> T) -> Option<T> {
        let doc = lock(self.doc);
        element(&doc, self.id).map(f)
    }

    /// The tag name, lower case.
    pub fn name(&self) -> String {
        self.with(|e| e.value().name().to_owned())
            .unwrap_or_default()
    }

    /// The value of an attribute, if present.
    pub fn attr(&self, name: &str) -> Option<String> {
        self.with(|e| e.attr(name).map(str::to_owned)).flatten()
    }

    /// The element's text, whitespace collapsed and trimmed.
    pub fn text(&self) -> String {
        self.with(|e| collapse(e.text())).unwrap_or_default()
    }

    /// The element's outer HTML.
    pub fn html(&self) -> String {
        self.with(|e| e.html()).unwrap_or_default()
    }

    /// The element's inner HTML.
    pub fn inner_html(&self) -> String {
        self.with(|e| e.inner_html()).unwrap_or_default()
    }

    /// Descendants of this element matching a CSS selector. An invalid selector matches
    /// nothing and fails the page, as with [`Response::select`].
    pub fn select(&self, css: &str) -> Selection<'a> {
        match compile(css) {
            Ok(selector) => self.select_with(&selector),
            Err(e) => {
                record(self.problems, &e);
                Selection {
                    doc: self.doc,
                    problems: self.problems,
                    ids: Vec::new(),
                }
            }
        }
    }

    /// Like [`Element::select`], but an invalid selector is returned as an error and the
    /// page is not marked as failed.
    pub fn try_select(&self, css: &str) -> Result<Selection<'a>> {
        compile(css).map(|selector| self.select_with(&selector))
    }

    fn select_with(&self, selector: &Selector) -> Selection<'a> {
        let ids = self
            .with(|e| e.select(selector).map(|d| d.id()).collect())
            .unwrap_or_default();
        Selection {
            doc: self.doc,
            problems: self.problems,
            ids,
        }
    }
}

impl std::fmt::Debug for Element<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Element(<{}>)", self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(html: &str) -> Response {
        let req = Request::get("http://example.com/dir/page.html").unwrap();
        let url = req.url.clone();
        let mut headers = http::HeaderMap::new();
        headers.insert("content-type", http::HeaderValue::from_static("text/html"));
        Response::new(req, url, 200, headers, Bytes::from(html.to_owned()))
    }

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
