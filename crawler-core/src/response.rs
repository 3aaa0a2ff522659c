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

    /// The body decoded to text. Malformed sequences become U+FFFD rather than errors.
    pub fn text(&self) -> &str {
        self.text.get_or_init(|| {
            let enc = charset::sniff(self.header("content-type"), &self.body);
            let (text, _, _) = enc.decode(&self.body);
            text.into_owned()
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
            let html = match self.text.get() {
                Some(text) => Html::parse_document(text),
                None => {
                    let enc = charset::sniff(self.header("content-type"), &self.body);
                    Html::parse_document(&enc.decode(&self.body).0)
                }
            };
            Mutex::new(html)
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

    /// A request for a link on this page (depth + 1, same callback unless changed).
    pub fn follow(&self, href: &str) -> Result<Request> {
        let mut req = Request::new(self.urljoin(href)?);
        req.depth = self.request.depth + 1;
        Ok(req)
    }

    /// All elements matching a CSS selector, in document order.
    ///
    /// An invalid selector yields an empty selection and is reported as an error of this page
    /// once the callback returns, so a typo shows up in the log and the stats instead of
    /// panicking mid-crawl.
    pub fn select(&self, css: &str) -> Selection<'_> {
        let Some(selector) = self.selector(css) else {
            return Selection {
                doc: self.doc(),
                ids: Vec::new(),
            };
        };
        let doc = self.doc();
        let ids = lock(doc).select(&selector).map(|e| e.id()).collect();
        Selection { doc, ids }
    }

    /// The first element matching a CSS selector.
    pub fn select_first(&self, css: &str) -> Option<Element<'_>> {
        let selector = self.selector(css)?;
        let doc = self.doc();
        // Stop at the first match rather than collecting them all: a title or price near
        // the top of a page then skips the walk over the rest of the tree (the related-book
        // links of the heavy crawl profile).
        let id = lock(doc).select(&selector).next().map(|e| e.id())?;
        Some(Element { doc, id })
    }

    /// The text of the first element matching `css`, or an error naming the selector and page.
    pub fn text_of(&self, css: &str) -> Result<String> {
        self.select_first(css).map(|e| e.text()).ok_or_else(|| {
            Error::new(
                ErrorKind::Missing,
                format!("no element matches '{css}' on {}", self.url),
            )
        })
    }

    fn selector(&self, css: &str) -> Option<Rc<Selector>> {
        match compile(css) {
            Ok(s) => Some(s),
            Err(e) => {
                lock(&self.problems).push(e);
                None
            }
        }
    }

    /// Problems found while the spider used this response (invalid selectors), shared with the
    /// engine so they are reported after the callback returns.
    pub(crate) fn problems(&self) -> Arc<Mutex<Vec<Error>>> {
        Arc::clone(&self.problems)
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
pub struct Selection<'a> {
    doc: &'a Mutex<Html>,
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
        self.ids.first().map(|&id| Element { doc: self.doc, id })
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

    /// The text of every match.
    pub fn texts(&self) -> Vec<String> {
        let doc = lock(self.doc);
        self.ids
            .iter()
            .filter_map(|&id| element(&doc, id).map(|e| collapse(e.text())))
            .collect()
    }
}

impl<'a> IntoIterator for Selection<'a> {
    type Item = Element<'a>;
    type IntoIter =
        std::iter::Map<std::vec::IntoIter<NodeId>, Box<dyn Fn(NodeId) -> Element<'a> + 'a>>;

    fn into_iter(self) -> Self::IntoIter {
        let doc = self.doc;
        self.ids
            .into_iter()
            .map(Box::new(move |id| Element { doc, id }))
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

    /// Descendants of this element matching a CSS selector; an invalid selector matches nothing.
    pub fn select(&self, css: &str) -> Selection<'a> {
        let ids = match compile(css) {
            Ok(sel) => self
                .with(|e| e.select(&sel).map(|d| d.id()).collect())
                .unwrap_or_default(),
            Err(e) => {
                tracing::error!("{e}");
                Vec::new()
            }
        };
        Selection { doc: self.doc, ids }
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
        assert_eq!(div.select("h1").texts(), ["A Light in the Attic"]);
    }

    #[test]
    fn invalid_selectors_are_reported_not_panicked() {
        let p = page("<p>x</p>");
        assert!(p.select("p[").is_empty());
        let problems = p.problems();
        let problems = problems.lock().unwrap();
        assert_eq!(problems.len(), 1);
        assert!(
            problems[0]
                .to_string()
                .contains("invalid CSS selector 'p['")
        );
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
