//! What a callback produces: items, and requests for more pages.

use serde::Serialize;
use url::Url;

use crate::error::Result;
use crate::request::{Request, check_scheme, meta_value};

/// Collects a callback's items and follow-up requests.
///
/// Links are resolved against the page (honouring `<base href>`). A link that cannot become an
/// http(s) URL (malformed, `mailto:`, `javascript:`) is skipped and counted rather than failing
/// the page, because one bad href must not cost the rest of the page's links.
#[derive(Debug)]
pub struct Output<I> {
    base: Url,
    depth: u32,
    items: Vec<I>,
    requests: Vec<Request>,
    invalid_links: u64,
    close: Option<String>,
    /// Most links kept from one page (`max_links_per_page`); those beyond are dropped.
    max_links: usize,
    /// Links dropped because the page had more than `max_links`.
    dropped_links: u64,
    /// The spider's own counters this callback added to.
    counters: Counters,
}

/// The spider's own counters, added to by a callback through [`Output::stats`] and summed
/// into [`Stats::spider`](crate::Stats::spider) (Scrapy's `self.crawler.stats.inc_value`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counters(std::collections::BTreeMap<String, u64>);

impl Counters {
    /// Add one to the counter `name` (created at 0).
    pub fn inc(&mut self, name: &str) {
        self.inc_by(name, 1);
    }

    /// Add `n` to the counter `name` (created at 0).
    pub fn inc_by(&mut self, name: &str, n: u64) {
        match self.0.get_mut(name) {
            Some(v) => *v = v.saturating_add(n),
            None => {
                self.0.insert(name.to_owned(), n);
            }
        }
    }

    /// What this callback counted under `name` so far (0 if nothing).
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Every counter, by name.
    pub fn into_map(self) -> std::collections::BTreeMap<String, u64> {
        self.0
    }
}

impl<I> Output<I> {
    /// An empty output for a page at `base` with request depth `depth`.
    pub fn new(base: Url, depth: u32) -> Self {
        Self {
            base,
            depth,
            items: Vec::new(),
            requests: Vec::new(),
            invalid_links: 0,
            close: None,
            max_links: usize::MAX,
            dropped_links: 0,
            counters: Counters::default(),
        }
    }

    /// The spider's own counters, which end up in the final stats
    /// ([`Stats::spider`](crate::Stats::spider)), the JSON stats and the printed summary:
    /// `out.stats().inc("products/missing_price")`.
    pub fn stats(&mut self) -> &mut Counters {
        &mut self.counters
    }

    /// Take the counters out (the engine sums them into the crawl's stats).
    pub fn take_counters(&mut self) -> Counters {
        std::mem::take(&mut self.counters)
    }

    /// Keep at most `max` requests from this page (the engine sets `max_links_per_page`):
    /// a page of 200,000 links would otherwise queue them all at once.
    pub fn with_max_links(mut self, max: usize) -> Self {
        self.max_links = max;
        self
    }

    /// Whether the page has no room for another request beyond `pending` ones not yet
    /// scheduled (a [`Follow`] of several links holds them until it is dropped); counts the
    /// one refused.
    fn full(&mut self, pending: usize) -> bool {
        let full = self.requests.len().saturating_add(pending) >= self.max_links;
        if full {
            self.dropped_links += 1;
        }
        full
    }

    /// Emit an item.
    pub fn item(&mut self, item: I) {
        self.items.push(item);
    }

    /// Follow a link: resolved against the page, with the default callback unless the
    /// returned [`Follow`] names one. The request is scheduled when the `Follow` is
    /// dropped, so a plain `out.follow(href);` follows the link, and a chain sets the
    /// callback, meta and the rest in the same statement:
    ///
    /// ```
    /// # use crawler_core::{Output, Result, Url};
    /// # fn f(out: &mut Output<()>, n: u32) -> Result<()> {
    /// out.follow("catalogue/page-2.html");
    /// out.follow("book-1.html").callback("book").meta("page", n)?;
    /// # Ok(()) }
    /// # let mut out = Output::new(Url::parse("http://example.com/").unwrap(), 0);
    /// # f(&mut out, 1).unwrap();
    /// # assert_eq!(out.requests().len(), 2);
    /// ```
    ///
    /// A link that is not an http(s) URL is skipped and counted, as always: the chain then
    /// does nothing.
    pub fn follow(&mut self, href: impl AsRef<str>) -> Follow<'_, I> {
        let requests = self.link(href.as_ref(), 0).into_iter().collect();
        Follow {
            out: self,
            requests,
        }
    }

    /// Follow a link and parse it with the named callback: shorthand for
    /// `out.follow(href).callback(callback)`.
    pub fn follow_with(&mut self, href: impl AsRef<str>, callback: &str) {
        self.follow(href).callback(callback);
    }

    /// Follow every link of an iterator, like Scrapy's `response.follow_all(urls, ...)`:
    /// with the default callback, unless the returned [`Follow`] sets options, which then
    /// apply to every link. As with [`Output::follow`], the requests are scheduled when the
    /// `Follow` is dropped:
    ///
    /// ```
    /// # use crawler_core::{Output, Result, Url};
    /// # fn f(out: &mut Output<()>, hrefs: Vec<String>, n: u32) -> Result<()> {
    /// out.follow_all(["page-2.html", "page-3.html"]);
    /// out.follow_all(hrefs).callback("book").meta("page", n)?.priority(1);
    /// # Ok(()) }
    /// # let mut out = Output::new(Url::parse("http://example.com/").unwrap(), 0);
    /// # f(&mut out, vec!["a".into(), "b".into()], 1).unwrap();
    /// # assert_eq!(out.requests().len(), 4);
    /// ```
    ///
    /// Links that are not http(s) URLs are skipped and counted; those beyond the page's
    /// `max_links_per_page` are dropped and counted.
    pub fn follow_all<S: AsRef<str>>(
        &mut self,
        hrefs: impl IntoIterator<Item = S>,
    ) -> Follow<'_, I> {
        let mut requests = Vec::new();
        for href in hrefs {
            if let Some(req) = self.link(href.as_ref(), requests.len()) {
                requests.push(req);
            }
        }
        Follow {
            out: self,
            requests,
        }
    }

    /// Schedule a fully built request. Its depth is set to this page's depth + 1.
    pub fn request(&mut self, mut request: Request) {
        if self.full(0) {
            return;
        }
        request.depth = self.depth + 1;
        self.requests.push(request);
    }

    /// The request for one link, or `None` (counted) when it is not an http(s) URL or the
    /// page has no room beside `pending` requests not yet scheduled.
    fn link(&mut self, href: &str, pending: usize) -> Option<Request> {
        if self.full(pending) {
            return None;
        }
        match self
            .base
            .join(href.trim())
            .ok()
            .and_then(|u| check_scheme(u).ok())
        {
            Some(url) => {
                let mut req = Request::new(url);
                req.depth = self.depth + 1;
                Some(req)
            }
            None => {
                tracing::debug!(href, page = %self.base, "skipping link that is not an http(s) URL");
                self.invalid_links += 1;
                None
            }
        }
    }

    /// Close the whole crawl, like Scrapy's `CloseSpider`: no new requests are sent, those
    /// in flight finish, and this page's items and links are still kept (with a job
    /// directory, the links wait there for a resume). The final stats give `reason` as
    /// [`Stats::close_reason`](crate::Stats::close_reason). The first reason asked for
    /// wins.
    pub fn close_spider(&mut self, reason: impl Into<String>) {
        self.close.get_or_insert_with(|| reason.into());
    }

    /// The reason given to [`Output::close_spider`], if the callback asked to close the
    /// crawl.
    pub fn close_requested(&self) -> Option<&str> {
        self.close.as_deref()
    }

    /// Items emitted so far.
    pub fn items(&self) -> &[I] {
        &self.items
    }

    /// Requests emitted so far.
    pub fn requests(&self) -> &[Request] {
        &self.requests
    }

    /// Links skipped because they were not valid http(s) URLs.
    pub fn invalid_links(&self) -> u64 {
        self.invalid_links
    }

    /// Links dropped because the page had more than `max_links_per_page`.
    pub fn dropped_links(&self) -> u64 {
        self.dropped_links
    }

    /// The items and requests emitted so far, to filter or change in place (spider
    /// middlewares do).
    pub fn parts_mut(&mut self) -> (&mut Vec<I>, &mut Vec<Request>) {
        (&mut self.items, &mut self.requests)
    }

    /// Take the items and requests out.
    pub fn into_parts(self) -> (Vec<I>, Vec<Request>) {
        (self.items, self.requests)
    }
}

/// Links being followed, from [`Output::follow`] (one) or [`Output::follow_all`] (many):
/// set their callback, meta, priority; the requests are scheduled when this is dropped (at
/// the end of the statement, usually). Every option applies to every link.
///
/// [`meta`](Follow::meta) returns a `Result` (a value that does not serialise is an error,
/// and the links are then not followed), so the compiler warns when a chain ending in it is
/// not handled with `?`.
#[derive(Debug)]
pub struct Follow<'a, I> {
    out: &'a mut Output<I>,
    /// The requests to schedule on drop: none for a link that is not an http(s) URL (already
    /// counted), or after an error.
    requests: Vec<Request>,
}

impl<I> Follow<'_, I> {
    /// The one place an option is applied: to every request being followed.
    fn map(mut self, f: impl FnMut(Request) -> Request) -> Self {
        self.requests = std::mem::take(&mut self.requests)
            .into_iter()
            .map(f)
            .collect();
        self
    }

    /// Parse the responses with the named callback ([`Response::callback`](crate::Response::callback)).
    pub fn callback(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.map(|r| r.callback(name.clone()))
    }

    /// Carry a value (any `Serialize`) under `key` to the followed pages, read there with
    /// [`Response::meta`](crate::Response::meta). A value that does not serialise is an
    /// error and no link is followed.
    pub fn meta(mut self, key: impl Into<String>, value: impl Serialize) -> Result<Self> {
        if self.requests.is_empty() {
            return Ok(self);
        }
        let key = key.into();
        // Serialised once for all the links.
        let value = match meta_value(&key, value) {
            Ok(v) => v,
            Err(e) => {
                // Nothing is scheduled when `self` drops.
                self.requests.clear();
                return Err(e);
            }
        };
        Ok(self.map(|mut r| {
            r.meta.insert(key.clone(), value.clone());
            r
        }))
    }

    /// Name the errback that receives these requests' failures (see [`Request::errback`]).
    pub fn errback(self, name: impl Into<String>) -> Self {
        let name = name.into();
        self.map(|r| r.errback(name.clone()))
    }

    /// Hand answers with these statuses to the callback (see [`Request::allow_statuses`]).
    pub fn allow_statuses(self, statuses: impl IntoIterator<Item = u16>) -> Self {
        let statuses: Vec<u16> = statuses.into_iter().collect();
        self.map(|r| r.allow_statuses(statuses.iter().copied()))
    }

    /// Hand every answer to the callback, whatever its status (see
    /// [`Request::allow_all_statuses`]).
    pub fn allow_all_statuses(self) -> Self {
        self.map(Request::allow_all_statuses)
    }

    /// Send through the proxy at `url` (see [`Request::proxy`]).
    pub fn proxy(self, url: impl Into<String>) -> Self {
        let url = url.into();
        self.map(|r| r.proxy(url.clone()))
    }

    /// Set the priority (higher runs sooner within the host's queue).
    pub fn priority(self, priority: i32) -> Self {
        self.map(|r| r.priority(priority))
    }

    /// Add a request header.
    pub fn header(self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let (name, value) = (name.into(), value.into());
        self.map(|r| r.header(name.clone(), value.clone()))
    }

    /// Bypass the duplicate filter for these requests.
    pub fn dont_filter(self) -> Self {
        self.map(Request::dont_filter)
    }

    /// Render the followed pages in a browser before the spider sees them (see
    /// [`Request::render`]).
    pub fn render(self) -> Self {
        self.map(Request::render)
    }

    /// Render the followed pages in a browser with `options` (see [`Request::render_with`]).
    pub fn render_with(self, options: crate::render::RenderOptions) -> Self {
        self.map(|r| r.render_with(options.clone()))
    }

    /// The (first) request as built so far (`None` when every link was skipped).
    pub fn request(&self) -> Option<&Request> {
        self.requests.first()
    }

    /// Every request as built so far, in the order of the links.
    pub fn requests(&self) -> &[Request] {
        &self.requests
    }
}

impl<I> Drop for Follow<'_, I> {
    fn drop(&mut self) {
        self.out.requests.append(&mut self.requests);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_resolves_counts_and_deepens() {
        let base = Url::parse("http://example.com/a/b.html").unwrap();
        let mut out: Output<()> = Output::new(base, 2);
        out.follow("c.html");
        out.follow_with("/d", "detail");
        out.follow("mailto:someone@example.com");
        out.follow("http://[::1");
        let reqs = out.requests();
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].url.as_str(), "http://example.com/a/c.html");
        assert_eq!(reqs[1].callback.as_deref(), Some("detail"));
        assert!(reqs.iter().all(|r| r.depth == 3));
        assert_eq!(out.invalid_links(), 2);
        assert_eq!(out.close_requested(), None);
        out.close_spider("enough");
        out.close_spider("later");
        assert_eq!(out.close_requested(), Some("enough"));
    }

    #[test]
    fn follow_sets_callback_meta_and_more_in_one_statement() {
        let base = Url::parse("http://example.com/catalogue/page-1.html").unwrap();
        let mut out: Output<()> = Output::new(base, 0);
        let n = 4u32;
        out.follow("book-7.html")
            .callback("book")
            .meta("page", n)
            .unwrap()
            .priority(5)
            .header("X-Test", "1")
            .dont_filter();
        // A skipped link ignores the chain (no panic, no request).
        out.follow("javascript:void(0)")
            .callback("book")
            .meta("page", n)
            .unwrap();
        // A value that does not serialise is an error, and the link is not followed.
        let unserialisable: std::collections::HashMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let e = out
            .follow("book-8.html")
            .meta("pair", unserialisable)
            .unwrap_err();
        assert!(e.to_string().contains("meta value for 'pair'"), "{e}");

        let reqs = out.requests();
        assert_eq!(reqs.len(), 1, "{reqs:?}");
        let r = &reqs[0];
        assert_eq!(r.url.as_str(), "http://example.com/catalogue/book-7.html");
        assert_eq!(r.callback.as_deref(), Some("book"));
        assert_eq!(r.meta.get("page"), Some(&serde_json::json!(4)));
        assert_eq!((r.priority, r.depth, r.dont_filter), (5, 1, true));
        assert_eq!(r.header_value("x-test"), Some("1"));
        assert_eq!(out.invalid_links(), 1);
    }

    #[test]
    fn follow_all_without_options_follows_every_link_with_the_default_callback() {
        let base = Url::parse("http://example.com/list/").unwrap();
        let mut out: Output<()> = Output::new(base, 1);
        out.follow_all(["a.html", "mailto:x@example.com", "/b.html", "c.html"]);
        let urls: Vec<&str> = out.requests().iter().map(|r| r.url.as_str()).collect();
        assert_eq!(
            urls,
            [
                "http://example.com/list/a.html",
                "http://example.com/b.html",
                "http://example.com/list/c.html"
            ]
        );
        assert!(
            out.requests()
                .iter()
                .all(|r| r.callback.is_none() && r.depth == 2)
        );
        assert_eq!(out.invalid_links(), 1);
    }

    #[test]
    fn follow_all_applies_every_option_to_every_link() {
        let base = Url::parse("http://example.com/").unwrap();
        let mut out: Output<()> = Output::new(base, 0);
        let hrefs = vec![
            "b1.html".to_owned(),
            "b2.html".to_owned(),
            "b3.html".to_owned(),
        ];
        let follow = out
            .follow_all(&hrefs)
            .callback("book")
            .meta("page", 2u32)
            .unwrap()
            .meta("tags", ["x", "y"])
            .unwrap()
            .priority(7)
            .header("X-Test", "1")
            .dont_filter()
            .render();
        assert_eq!(follow.requests().len(), 3, "held until dropped");
        drop(follow);
        let reqs = out.requests();
        assert_eq!(reqs.len(), 3, "{reqs:?}");
        for (r, href) in reqs.iter().zip(&hrefs) {
            assert_eq!(r.url.as_str(), format!("http://example.com/{href}"));
            assert_eq!(r.callback.as_deref(), Some("book"));
            assert_eq!(r.meta.get("page"), Some(&serde_json::json!(2)));
            assert_eq!(r.meta.get("tags"), Some(&serde_json::json!(["x", "y"])));
            assert!(r.meta.contains_key(crate::render::RENDER_META), "{r:?}");
            assert_eq!((r.priority, r.depth, r.dont_filter), (7, 1, true));
            assert_eq!(r.header_value("x-test"), Some("1"));
        }
    }

    #[test]
    fn follow_all_with_a_bad_meta_value_follows_none_of_the_links() {
        let base = Url::parse("http://example.com/").unwrap();
        let mut out: Output<()> = Output::new(base, 0);
        let unserialisable: std::collections::HashMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let e = out
            .follow_all(["a", "b"])
            .callback("book")
            .meta("pair", unserialisable)
            .unwrap_err();
        assert!(e.to_string().contains("meta value for 'pair'"), "{e}");
        assert!(out.requests().is_empty(), "{:?}", out.requests());
    }

    #[test]
    fn follow_all_keeps_to_max_links_counting_links_not_yet_scheduled() {
        let base = Url::parse("http://example.com/").unwrap();
        let mut out: Output<()> = Output::new(base, 0).with_max_links(3);
        out.follow("first");
        // Room for two more: the third and fourth of this call are dropped and counted.
        out.follow_all(["a", "b", "c", "d"]).callback("book");
        out.follow("last");
        let urls: Vec<&str> = out.requests().iter().map(|r| r.url.path()).collect();
        assert_eq!(urls, ["/first", "/a", "/b"]);
        assert_eq!(out.dropped_links(), 3);
        assert_eq!(out.requests()[1].callback.as_deref(), Some("book"));
    }
}
