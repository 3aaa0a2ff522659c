//! What a callback produces: items, and requests for more pages.

use url::Url;

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
        }
    }

    /// Emit an item.
    pub fn item(&mut self, item: I) {
        self.items.push(item);
    }

    /// Follow a link with the default callback.
    pub fn follow(&mut self, href: impl AsRef<str>) {
        if let Some(req) = self.link(href.as_ref()) {
            self.requests.push(req);
        }
    }

    /// Follow a link and parse it with the named callback.
    pub fn follow_with(&mut self, href: impl AsRef<str>, callback: &str) {
        if let Some(req) = self.link(href.as_ref()) {
            self.requests.push(req.callback(callback));
        }
    }

    /// Follow every link of an iterator with the default callback.
    pub fn follow_all<S: AsRef<str>>(&mut self, hrefs: impl IntoIterator<Item = S>) {
        for href in hrefs {
            self.follow(href);
        }
    }

    /// Schedule a fully built request. Its depth is set to this page's depth + 1.
    pub fn request(&mut self, mut request: Request) {
        request.depth = self.depth + 1;
        self.requests.push(request);
    }

    fn link(&mut self, href: &str) -> Option<Request> {
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
}
