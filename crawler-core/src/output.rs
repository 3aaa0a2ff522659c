//! What a callback produces: items, and requests for more pages.

use serde::Serialize;
use url::Url;

use crate::error::Result;
use crate::request::{Request, check_scheme};

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
        }
    }

    /// Keep at most `max` requests from this page (the engine sets `max_links_per_page`):
    /// a page of 200,000 links would otherwise queue them all at once.
    pub fn with_max_links(mut self, max: usize) -> Self {
        self.max_links = max;
        self
    }

    /// Whether the page has no room for another request; counts the one refused.
    fn full(&mut self) -> bool {
        let full = self.requests.len() >= self.max_links;
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
        let request = self.link(href.as_ref());
        Follow { out: self, request }
    }

    /// Follow a link and parse it with the named callback (the same as
    /// `out.follow(href).callback(callback)`).
    pub fn follow_with(&mut self, href: impl AsRef<str>, callback: &str) {
        self.follow(href).callback(callback);
    }

    /// Follow every link of an iterator with the default callback.
    pub fn follow_all<S: AsRef<str>>(&mut self, hrefs: impl IntoIterator<Item = S>) {
        for href in hrefs {
            if let Some(req) = self.link(href.as_ref()) {
                self.requests.push(req);
            }
        }
    }

    /// Schedule a fully built request. Its depth is set to this page's depth + 1.
    pub fn request(&mut self, mut request: Request) {
        if self.full() {
            return;
        }
        request.depth = self.depth + 1;
        self.requests.push(request);
    }

    fn link(&mut self, href: &str) -> Option<Request> {
        if self.full() {
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

/// A link being followed, from [`Output::follow`]: set its callback, meta, priority; the
/// request is scheduled when this is dropped (at the end of the statement, usually).
///
/// [`meta`](Follow::meta) returns a `Result` (a value that does not serialise is an error,
/// and the link is then not followed), so the compiler warns when a chain ending in it is
/// not handled with `?`.
#[derive(Debug)]
pub struct Follow<'a, I> {
    out: &'a mut Output<I>,
    /// `None` for a link that is not an http(s) URL (already counted), or after an error.
    request: Option<Request>,
}

impl<I> Follow<'_, I> {
    /// Parse the response with the named callback ([`Response::callback`](crate::Response::callback)).
    pub fn callback(mut self, name: impl Into<String>) -> Self {
        if let Some(r) = self.request.take() {
            self.request = Some(r.callback(name));
        }
        self
    }

    /// Carry a value (any `Serialize`) under `key` to the followed page, read there with
    /// [`Response::meta`](crate::Response::meta). A value that does not serialise is an
    /// error and the link is not followed.
    pub fn meta(mut self, key: impl Into<String>, value: impl Serialize) -> Result<Self> {
        if let Some(r) = self.request.take() {
            // On an error the request is dropped here, so nothing is scheduled.
            self.request = Some(r.meta(key, value)?);
        }
        Ok(self)
    }

    /// Set the priority (higher runs sooner within the host's queue).
    pub fn priority(mut self, priority: i32) -> Self {
        if let Some(r) = &mut self.request {
            r.priority = priority;
        }
        self
    }

    /// Add a request header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Some(r) = &mut self.request {
            r.headers.push((name.into(), value.into()));
        }
        self
    }

    /// Bypass the duplicate filter for this request.
    pub fn dont_filter(mut self) -> Self {
        if let Some(r) = &mut self.request {
            r.dont_filter = true;
        }
        self
    }

    /// Render the followed page in a browser before the spider sees it (see
    /// [`Request::render`]).
    pub fn render(mut self) -> Self {
        if let Some(r) = self.request.take() {
            self.request = Some(r.render());
        }
        self
    }

    /// Render the followed page in a browser with `options` (see [`Request::render_with`]).
    pub fn render_with(mut self, options: crate::render::RenderOptions) -> Self {
        if let Some(r) = self.request.take() {
            self.request = Some(r.render_with(options));
        }
        self
    }

    /// The request as built so far (`None` when the link was skipped).
    pub fn request(&self) -> Option<&Request> {
        self.request.as_ref()
    }
}

impl<I> Drop for Follow<'_, I> {
    fn drop(&mut self) {
        if let Some(r) = self.request.take() {
            self.out.requests.push(r);
        }
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
}
