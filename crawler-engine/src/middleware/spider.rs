//! [`SpiderWithMiddlewares`], the stack of spider middlewares over a [`Spider`]'s output that
//! is a spider itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crawler_core::{
    BoxedSpiderMiddleware, Output, Page, Request, Response, Result, Spider, SpiderMiddleware,
};

use super::stack::{Member, Stages, Tallies, insert_nonzero};
use super::stats::MiddlewareStats;

/// What the spider stack counts at each stage: items and requests in, and out.
#[derive(Default)]
struct SpiderTally {
    items_in: AtomicU64,
    items_out: AtomicU64,
    requests_in: AtomicU64,
    requests_out: AtomicU64,
}

impl Tallies for SpiderTally {
    fn snapshot(&self, into: &mut BTreeMap<String, u64>) {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let items_dropped = load(&self.items_in).saturating_sub(load(&self.items_out));
        let requests_dropped = load(&self.requests_in).saturating_sub(load(&self.requests_out));
        insert_nonzero(
            into,
            [
                ("items_in", load(&self.items_in)),
                ("items_dropped", items_dropped),
                ("requests_in", load(&self.requests_in)),
                ("requests_dropped", requests_dropped),
            ],
        );
    }
}

impl<I: 'static> Member for dyn SpiderMiddleware<I> {
    fn name(&self) -> &str {
        SpiderMiddleware::name(self)
    }
    fn counters(&self) -> Vec<(String, u64)> {
        SpiderMiddleware::counters(self)
    }
}

/// The spider stack's stages, with what it counted at each.
type SpiderStages<I> = Stages<dyn SpiderMiddleware<I>, SpiderTally>;

/// A spider with a stack of [`SpiderMiddleware`]s over its output; a [`Spider`] itself.
pub struct SpiderWithMiddlewares<S: Spider> {
    inner: S,
    stages: Arc<SpiderStages<S::Item>>,
}

impl<S: Spider> SpiderWithMiddlewares<S> {
    /// `inner` with the middlewares in `stack`, first nearest the engine.
    pub fn new(inner: S, stack: Vec<BoxedSpiderMiddleware<S::Item>>) -> Self {
        Self {
            inner,
            stages: Arc::new(Stages::new("spider", stack)),
        }
    }

    /// The wrapped spider.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The names of the middlewares, in stack order.
    pub fn names(&self) -> Vec<String> {
        self.stages.names()
    }

    /// Report this stack's counters into `stats`.
    pub fn register_stats(&self, stats: &MiddlewareStats) {
        self.stages.register(stats);
    }

    fn run_output(&self, page: &Page, out: &mut Output<S::Item>) {
        let (items, requests) = out.parts_mut();
        for s in self.stages.as_slice().iter().rev() {
            let t = &s.tally;
            t.items_in.fetch_add(items.len() as u64, Ordering::Relaxed);
            t.requests_in
                .fetch_add(requests.len() as u64, Ordering::Relaxed);
            s.mw.process_output(page, items, requests);
            t.items_out.fetch_add(items.len() as u64, Ordering::Relaxed);
            t.requests_out
                .fetch_add(requests.len() as u64, Ordering::Relaxed);
        }
    }
}

impl<S: Spider> Spider for SpiderWithMiddlewares<S> {
    type Item = S::Item;

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn open(&mut self, ctx: &crawler_core::SpiderContext<'_>) -> Result<()> {
        self.inner.open(ctx)
    }

    async fn opened(&self) -> Result<()> {
        self.inner.opened().await
    }

    fn start_urls(&self) -> Vec<String> {
        self.inner.start_urls()
    }

    fn start_requests(&self) -> Result<Vec<Request>> {
        let mut requests = self.inner.start_requests()?;
        for s in self.stages.as_slice().iter().rev() {
            s.mw.process_start_requests(&mut requests);
        }
        Ok(requests)
    }

    fn allowed_domains(&self) -> Vec<String> {
        self.inner.allowed_domains()
    }

    fn custom_settings(&self) -> Vec<(&'static str, String)> {
        self.inner.custom_settings()
    }

    async fn parse(&self, page: Response, out: &mut Output<S::Item>) -> Result<()> {
        let info = Page::of(&page);
        // A callback error keeps what the page produced up to it, so the middlewares see
        // that output too.
        let result = self.inner.parse(page, out).await;
        self.run_output(&info, out);
        result
    }

    async fn not_modified(&self, page: Response, out: &mut Output<S::Item>) -> Result<()> {
        let info = Page::of(&page);
        let result = self.inner.not_modified(page, out).await;
        self.run_output(&info, out);
        result
    }

    fn allowed_statuses(&self) -> crawler_core::AllowedStatuses {
        self.inner.allowed_statuses()
    }

    // An errback's output has no page for the middlewares to judge it by: it goes on as
    // the errback made it.
    async fn errback(
        &self,
        failure: crawler_core::FailedRequest,
        out: &mut Output<S::Item>,
    ) -> Result<()> {
        self.inner.errback(failure, out).await
    }

    async fn closed(&self, reason: &str, stats: &crawler_core::Stats) -> Result<()> {
        self.inner.closed(reason, stats).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Mutex;

    use super::*;
    use crate::middleware::ok;
    use crawler_core::spider_stack;

    struct Books;

    impl Spider for Books {
        type Item = u32;
        fn name(&self) -> &str {
            "books"
        }
        fn start_urls(&self) -> Vec<String> {
            vec!["http://a.example/".into(), "http://a.example/skip".into()]
        }
        async fn parse(&self, _page: Response, out: &mut Output<u32>) -> Result<()> {
            out.item(5);
            out.item(50);
            out.follow("http://a.example/next");
            out.follow("http://b.example/away");
            Ok(())
        }
    }

    /// Drops items over a limit, and journals its calls.
    struct Cap(u32, &'static str, Arc<Mutex<Vec<String>>>);

    impl SpiderMiddleware<u32> for Cap {
        fn name(&self) -> &str {
            self.1
        }
        fn process_output(&self, page: &Page, items: &mut Vec<u32>, requests: &mut Vec<Request>) {
            self.2
                .lock()
                .unwrap()
                .push(format!("{}:{}", self.1, page.url));
            items.retain(|&i| i <= self.0);
            requests.retain(|r| r.url.host_str() == page.url.host_str());
        }
        fn process_start_requests(&self, requests: &mut Vec<Request>) {
            requests.retain(|r| !r.url.path().contains("skip"));
        }
    }

    #[tokio::test]
    async fn spider_middlewares_run_nearest_the_spider_first() {
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let settings = crawler_core::Settings {
            referer_policy: "same-origin".into(),
            ..crawler_core::Settings::default()
        };
        let stack = spider_stack(
            &settings,
            vec![
                Box::new(Cap(100, "outer", Arc::clone(&log))),
                Box::new(Cap(10, "inner", Arc::clone(&log))),
            ],
        )
        .unwrap();
        let spider = SpiderWithMiddlewares::new(Books, stack);
        assert_eq!(spider.names(), ["referer", "outer", "inner"]);
        let stats = MiddlewareStats::new();
        spider.register_stats(&stats);
        assert_eq!(spider.start_requests().unwrap().len(), 1);

        let req = Request::get("http://a.example/").unwrap();
        let page = ok(&req);
        let mut out = Output::new(req.url.clone(), 0);
        spider.parse(page, &mut out).await.unwrap();
        assert_eq!(out.items(), [5]);
        assert_eq!(out.requests().len(), 1);
        assert_eq!(
            out.requests()[0].header_value("referer"),
            Some("http://a.example/")
        );
        assert_eq!(
            *log.lock().unwrap(),
            ["inner:http://a.example/", "outer:http://a.example/"]
        );
        let snap = stats.snapshot();
        assert_eq!(snap["spider:inner"]["items_dropped"], 1);
        assert_eq!(snap["spider:inner"]["requests_dropped"], 1);
        assert!(!snap["spider:outer"].contains_key("items_dropped"));
    }
}
