//! [`Middlewares`], the stack of downloader middlewares around a [`Downloader`] that is a
//! downloader itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crawler_core::{
    Action, After, BoxedDownloaderMiddleware, Download, Downloader, DynDownloaderMiddleware,
    Failure, FailureKind, Feedback, Fetched, Request, Response,
};

use super::stack::{Member, Stages, Tallies, insert_nonzero};
use super::stats::MiddlewareStats;

/// What happened at one stage, counted by the stack itself.
#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    responded: AtomicU64,
    dropped: AtomicU64,
    responses: AtomicU64,
    replaced: AtomicU64,
    retried: AtomicU64,
}

impl Tally {
    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

impl Tallies for Tally {
    fn snapshot(&self, into: &mut BTreeMap<String, u64>) {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        insert_nonzero(
            into,
            [
                ("requests", load(&self.requests)),
                ("responded", load(&self.responded)),
                ("dropped", load(&self.dropped)),
                ("responses", load(&self.responses)),
                ("replaced", load(&self.replaced)),
                ("retried", load(&self.retried)),
            ],
        );
    }
}

impl Member for dyn DynDownloaderMiddleware {
    fn name(&self) -> &str {
        DynDownloaderMiddleware::name(self)
    }
    fn counters(&self) -> Vec<(String, u64)> {
        DynDownloaderMiddleware::counters(self)
    }
}

/// The downloader stack's stages, with what it counted at each.
type DownloaderStages = Stages<dyn DynDownloaderMiddleware, Tally>;

/// A downloader with a stack of [`DownloaderMiddleware`](crawler_core::DownloaderMiddleware)s
/// around it; a [`Downloader`] itself.
pub struct Middlewares<D> {
    inner: D,
    stages: Arc<DownloaderStages>,
}

impl<D: Downloader> Middlewares<D> {
    /// `inner` with the middlewares in `stack`, first nearest the engine.
    pub fn new(inner: D, stack: Vec<BoxedDownloaderMiddleware>) -> Self {
        Self {
            inner,
            stages: Arc::new(Stages::new("downloader", stack)),
        }
    }

    /// The wrapped downloader.
    pub fn inner(&self) -> &D {
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

    /// Run the response hooks from stage `from` (exclusive) back to the first.
    async fn responses(
        &self,
        request: &Request,
        mut response: Response,
        from: usize,
    ) -> std::result::Result<Response, (String, String)> {
        for stage in self.stages.as_slice()[..from].iter().rev() {
            Tally::bump(&stage.tally.responses);
            match stage.mw.process_response(request, response).await {
                After::Pass(r) => response = r,
                After::Replace(r) => {
                    Tally::bump(&stage.tally.replaced);
                    return Ok(r);
                }
                After::Retry(why) => {
                    Tally::bump(&stage.tally.retried);
                    return Err((stage.mw.name().to_owned(), why));
                }
            }
        }
        Ok(response)
    }
}

impl<D: Downloader> Downloader for Middlewares<D> {
    fn gate(
        &self,
        request: &Request,
    ) -> impl std::future::Future<Output = Option<Download>> + Send {
        // The gate (robots.txt) comes before every middleware, as the engine's own step.
        self.inner.gate(request)
    }

    fn attach(&self, subrequests: crawler_core::SubRequests) {
        self.inner.attach(subrequests);
    }

    fn renders(&self, request: &Request) -> bool {
        self.inner.renders(request)
    }

    fn render_limit(&self) -> usize {
        self.inner.render_limit()
    }

    fn render(
        &self,
        request: &Request,
        response: Response,
    ) -> impl std::future::Future<Output = Fetched> + Send {
        // After the response middlewares (they ran in `fetch`): rendering is the last step
        // before the spider, as a browser download handler is in scrapy-playwright.
        self.inner.render(request, response)
    }

    async fn fetch(&self, request: &Request) -> Download {
        let mut req = request.clone();
        let stages = self.stages.as_slice();
        let mut answered = None;
        for stage in stages {
            Tally::bump(&stage.tally.requests);
            match stage.mw.process_request(&mut req).await {
                Action::Continue => {}
                Action::Respond(response) => {
                    Tally::bump(&stage.tally.responded);
                    answered = Some(response);
                    // Scrapy runs every response hook on a direct answer, not only the
                    // ones before it: cookies, stats and the like see it as any response.
                    break;
                }
                Action::Drop(why) => {
                    Tally::bump(&stage.tally.dropped);
                    let name = stage.mw.name();
                    tracing::debug!(url = %req.url, middleware = name, "request dropped: {why}");
                    return Download {
                        outcome: Fetched::Failed(Failure::new(
                            FailureKind::Other,
                            format!("dropped by middleware {name}: {why}"),
                        )),
                        feedback: Feedback::default(),
                    };
                }
            }
        }
        let (response, feedback) = match answered {
            Some(response) => {
                // Nothing reached the host, so its slot must not learn from this.
                let feedback = Feedback {
                    status: Some(response.status()),
                    ..Feedback::default()
                };
                (response, feedback)
            }
            None => {
                // Empty values are "do not send" markers (see the module docs).
                req.headers.retain(|(_, v)| !v.is_empty());
                let Download { outcome, feedback } = self.inner.fetch(&req).await;
                match outcome {
                    Fetched::Response(r) => (r, feedback),
                    other => {
                        return Download {
                            outcome: other,
                            feedback,
                        };
                    }
                }
            }
        };
        let status = response.status();
        match self.responses(&req, response, stages.len()).await {
            Ok(response) => Download {
                outcome: Fetched::Response(response),
                feedback,
            },
            Err((name, why)) => Download {
                outcome: Fetched::Failed(Failure {
                    kind: FailureKind::SoftBlock,
                    message: format!("retry asked by middleware {name}: {why}"),
                    status: Some(status),
                    bytes: 0,
                }),
                feedback,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::middleware::ok;
    use crawler_core::DownloaderMiddleware;

    /// Answers every request with a 200 and counts what it was sent (shared by its clones,
    /// so a test reads what the stack's copy saw).
    #[derive(Default, Clone)]
    struct Net(Arc<Sent>);

    #[derive(Default)]
    struct Sent {
        sent: AtomicUsize,
        last_headers: Mutex<Vec<(String, String)>>,
    }

    impl std::ops::Deref for Net {
        type Target = Sent;
        fn deref(&self) -> &Sent {
            &self.0
        }
    }

    impl Downloader for Net {
        async fn fetch(&self, request: &Request) -> Download {
            self.sent.fetch_add(1, Ordering::SeqCst);
            *self.last_headers.lock().unwrap() = request.headers.clone();
            Download {
                outcome: Fetched::Response(ok(request)),
                feedback: Feedback {
                    sent: true,
                    status: Some(200),
                    ..Feedback::default()
                },
            }
        }
    }

    /// Logs its hooks to a shared journal, and does what it is told on one of them.
    struct Logger {
        name: &'static str,
        log: Arc<Mutex<Vec<String>>>,
        on_request: fn(&Request) -> Action,
        on_response: fn(Response) -> After,
    }

    impl DownloaderMiddleware for Logger {
        fn name(&self) -> &str {
            self.name
        }
        async fn process_request(&self, request: &mut Request) -> Action {
            self.log.lock().unwrap().push(format!("req:{}", self.name));
            request.headers.push(("X-Seen".into(), self.name.into()));
            (self.on_request)(request)
        }
        async fn process_response(&self, _request: &Request, response: Response) -> After {
            self.log.lock().unwrap().push(format!("resp:{}", self.name));
            (self.on_response)(response)
        }
    }

    /// A middleware's name and what it does on a request and on a response.
    type Spec = (&'static str, fn(&Request) -> Action, fn(Response) -> After);

    fn stack(log: &Arc<Mutex<Vec<String>>>, specs: &[Spec]) -> Vec<BoxedDownloaderMiddleware> {
        specs
            .iter()
            .map(|&(name, on_request, on_response)| {
                Box::new(Logger {
                    name,
                    log: Arc::clone(log),
                    on_request,
                    on_response,
                }) as BoxedDownloaderMiddleware
            })
            .collect()
    }

    fn go(_: &Request) -> Action {
        Action::Continue
    }
    fn pass(r: Response) -> After {
        After::Pass(r)
    }

    #[tokio::test]
    async fn requests_run_in_order_and_responses_in_reverse() {
        let log = Arc::default();
        let net = Net::default();
        let mw = Middlewares::new(
            net.clone(),
            stack(&log, &[("a", go, pass), ("b", go, pass), ("c", go, pass)]),
        );
        let req = Request::get("http://example.com/").unwrap();
        let d = mw.fetch(&req).await;
        assert!(matches!(d.outcome, Fetched::Response(_)));
        assert!(d.feedback.sent);
        assert_eq!(
            *log.lock().unwrap(),
            ["req:a", "req:b", "req:c", "resp:c", "resp:b", "resp:a"]
        );
        let seen: Vec<String> = net
            .last_headers
            .lock()
            .unwrap()
            .iter()
            .map(|h| h.1.clone())
            .collect();
        assert_eq!(seen, ["a", "b", "c"], "the network sees every change");
        assert!(
            req.headers.is_empty(),
            "the engine's request is not changed"
        );
    }

    #[tokio::test]
    async fn respond_skips_the_network_and_later_request_hooks() {
        fn answer(r: &Request) -> Action {
            Action::Respond(ok(r))
        }
        let log = Arc::default();
        let net = Net::default();
        let mw = Middlewares::new(
            net.clone(),
            stack(
                &log,
                &[("a", go, pass), ("b", answer, pass), ("c", go, pass)],
            ),
        );
        let stats = MiddlewareStats::new();
        mw.register_stats(&stats);
        let d = mw
            .fetch(&Request::get("http://example.com/").unwrap())
            .await;
        assert!(matches!(d.outcome, Fetched::Response(ref r) if r.status() == 200));
        assert!(
            !d.feedback.sent,
            "the host's slot must not learn from a local answer"
        );
        assert_eq!(net.sent.load(Ordering::SeqCst), 0);
        assert_eq!(
            *log.lock().unwrap(),
            ["req:a", "req:b", "resp:c", "resp:b", "resp:a"]
        );
        let snap = stats.snapshot();
        assert_eq!(snap["downloader:b"]["responded"], 1);
        assert!(!snap["downloader:c"].contains_key("requests"));
    }

    #[tokio::test]
    async fn drop_fails_the_request_with_the_reason() {
        fn drop_it(_: &Request) -> Action {
            Action::Drop("not today".into())
        }
        let log = Arc::default();
        let net = Net::default();
        let mw = Middlewares::new(
            net.clone(),
            stack(&log, &[("a", go, pass), ("gate", drop_it, pass)]),
        );
        let d = mw
            .fetch(&Request::get("http://example.com/").unwrap())
            .await;
        let Fetched::Failed(f) = d.outcome else {
            panic!("dropped requests fail")
        };
        assert_eq!(f.kind, FailureKind::Other);
        assert_eq!(f.message, "dropped by middleware gate: not today");
        assert_eq!(net.sent.load(Ordering::SeqCst), 0);
        assert_eq!(
            *log.lock().unwrap(),
            ["req:a", "req:gate"],
            "no response hooks"
        );
    }

    #[tokio::test]
    async fn replace_short_circuits_and_retry_becomes_a_retryable_failure() {
        fn replace(r: Response) -> After {
            let req = r.request().clone();
            After::Replace(Response::new(
                req.clone(),
                req.url.clone(),
                203,
                http::HeaderMap::new(),
                bytes::Bytes::new(),
            ))
        }
        fn retry(_: Response) -> After {
            After::Retry("empty page".into())
        }
        let log = Arc::default();
        let net = Net::default();
        let mw = Middlewares::new(
            net.clone(),
            stack(&log, &[("a", go, pass), ("b", go, replace)]),
        );
        let d = mw
            .fetch(&Request::get("http://example.com/").unwrap())
            .await;
        assert!(matches!(d.outcome, Fetched::Response(ref r) if r.status() == 203));
        assert_eq!(
            *log.lock().unwrap(),
            ["req:a", "req:b", "resp:b"],
            "a replaced response skips the hooks nearer the engine"
        );

        let log = Arc::default();
        let mw = Middlewares::new(net.clone(), stack(&log, &[("r", go, retry)]));
        let d = mw
            .fetch(&Request::get("http://example.com/").unwrap())
            .await;
        let Fetched::Failed(f) = d.outcome else {
            panic!("retry becomes a failure")
        };
        assert_eq!(f.kind, FailureKind::SoftBlock);
        assert_eq!(f.status, Some(200));
        assert!(f.message.contains("middleware r: empty page"));
        assert!(d.feedback.sent && d.feedback.status == Some(200) && !d.feedback.soft_block);
    }

    #[tokio::test]
    async fn empty_headers_are_not_sent() {
        let net = Net::default();
        let mw = Middlewares::new(net.clone(), Vec::new());
        let req = Request::get("http://example.com/")
            .unwrap()
            .header("Referer", "")
            .header("X-Keep", "1");
        let _ = mw.fetch(&req).await;
        assert_eq!(
            *net.last_headers.lock().unwrap(),
            [("X-Keep".to_owned(), "1".to_owned())]
        );
    }
}
