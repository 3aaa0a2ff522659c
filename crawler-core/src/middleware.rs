//! Middlewares: small hooks around the downloader and around the spider's output.
//!
//! Both kinds are decorators, so the engine needs no knowledge of them:
//! [`Middlewares`] wraps any [`Downloader`] and is one itself, and [`SpiderWithMiddlewares`]
//! wraps any [`Spider`] and is one itself.
//!
//! # Order (Scrapy's convention)
//!
//! A stack is a list from the engine's side to the far side:
//!
//! - Downloader middlewares: `process_request` runs first to last (the first is nearest the
//!   engine), `process_response` last to first (the last is nearest the network, so it sees
//!   the response first). A request answered directly by middleware *k*
//!   ([`Action::Respond`]) skips the network and the request hooks after *k*; every
//!   response hook still runs on it, as in Scrapy.
//! - Spider middlewares: `process_output` and `process_start_requests` run last to first:
//!   the last middleware is nearest the spider and sees its output first.
//!
//! # Outcomes
//!
//! - [`Action::Drop`] ends the request as `failed` with reason `other` and a message naming
//!   the middleware. Nothing is sent, the host's slot learns nothing, and it is not retried.
//! - [`After::Retry`] turns the response into a `soft_block` failure: the engine retries
//!   those whatever the status (with its backoff, or the server's Retry-After), and counts
//!   the request as `failed: soft_block` once retries run out. The host's slot still learns
//!   what the server really said (status, latency, RateLimit headers).
//!
//! # Removing a header
//!
//! A request header whose value is empty is a marker meaning "do not send this header": the
//! downloader stack drops such headers before the network. The engine adds a `Referer` to
//! follow-up requests only when they have none, so a spider middleware removes it by setting
//! it empty (that is what the `referer` policy does).
//!
//! ```
//! use crawler_core::{Action, DownloaderMiddleware, Request};
//!
//! /// Tags every request so the server's logs show our crawl.
//! struct Tag;
//!
//! impl DownloaderMiddleware for Tag {
//!     fn name(&self) -> &str { "tag" }
//!     async fn process_request(&self, request: &mut Request) -> Action {
//!         request.headers.push(("X-Crawl-Tag".into(), "nightly".into()));
//!         Action::Continue
//!     }
//! }
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use url::Url;

use crate::error::{Error, ErrorKind, Result};
use crate::fetch::{Download, Downloader, Failure, FailureKind, Feedback, Fetched};
use crate::output::Output;
use crate::request::Request;
use crate::response::Response;
use crate::spider::Spider;

/// What a downloader middleware decided about an outgoing request.
// Moved once per request; boxing the response would cost an allocation on the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Action {
    /// Go on to the next middleware, then the network.
    Continue,
    /// Answer with this response instead of sending the request (a cache, a stub, a
    /// canned page). The response hooks still run on it.
    Respond(Response),
    /// Do not send the request; it ends as failed with this reason.
    Drop(String),
}

/// What a downloader middleware decided about a response.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum After {
    /// Hand the (possibly changed) response to the next response hook.
    Pass(Response),
    /// Use this response and skip the remaining response hooks: it goes straight to the
    /// engine and the spider.
    Replace(Response),
    /// The response is not usable (an empty page, a login wall): retry the request, for
    /// this reason.
    Retry(String),
}

/// A downloader middleware: hooks before a request is sent and after its response arrives.
///
/// Hooks are `async fn`s in the impl. One instance serves every request of the crawl, many
/// at once, so state lives behind a lock or in atomics.
pub trait DownloaderMiddleware: Send + Sync + 'static {
    /// A short name for logs and stats.
    fn name(&self) -> &str;

    /// Change the request (headers, meta), answer it directly, or drop it.
    fn process_request(&self, request: &mut Request) -> impl Future<Output = Action> + Send {
        let _ = request;
        async { Action::Continue }
    }

    /// Look at (or change, replace, retry) the response to `request`.
    fn process_response(
        &self,
        request: &Request,
        response: Response,
    ) -> impl Future<Output = After> + Send {
        let _ = request;
        async move { After::Pass(response) }
    }

    /// The middleware's own counters (cookies stored, malformed headers, ...), added to the
    /// crawl's middleware stats.
    fn counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Object-safe form of [`DownloaderMiddleware`], so middlewares of different types share one
/// stack. Implemented for every `DownloaderMiddleware`; not meant to be implemented directly.
pub trait DynDownloaderMiddleware: Send + Sync + 'static {
    /// See [`DownloaderMiddleware::name`].
    fn name(&self) -> &str;
    /// See [`DownloaderMiddleware::process_request`].
    fn process_request<'a>(&'a self, request: &'a mut Request) -> BoxFuture<'a, Action>;
    /// See [`DownloaderMiddleware::process_response`].
    fn process_response<'a>(
        &'a self,
        request: &'a Request,
        response: Response,
    ) -> BoxFuture<'a, After>;
    /// See [`DownloaderMiddleware::counters`].
    fn counters(&self) -> Vec<(String, u64)>;
}

impl<M: DownloaderMiddleware> DynDownloaderMiddleware for M {
    fn name(&self) -> &str {
        DownloaderMiddleware::name(self)
    }
    fn process_request<'a>(&'a self, request: &'a mut Request) -> BoxFuture<'a, Action> {
        Box::pin(DownloaderMiddleware::process_request(self, request))
    }
    fn process_response<'a>(
        &'a self,
        request: &'a Request,
        response: Response,
    ) -> BoxFuture<'a, After> {
        Box::pin(DownloaderMiddleware::process_response(
            self, request, response,
        ))
    }
    fn counters(&self) -> Vec<(String, u64)> {
        DownloaderMiddleware::counters(self)
    }
}

/// A boxed downloader middleware, as kept in a stack.
pub type BoxedDownloaderMiddleware = Box<dyn DynDownloaderMiddleware>;

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

    fn snapshot(&self, into: &mut BTreeMap<String, u64>) {
        for (k, c) in [
            ("requests", &self.requests),
            ("responded", &self.responded),
            ("dropped", &self.dropped),
            ("responses", &self.responses),
            ("replaced", &self.replaced),
            ("retried", &self.retried),
        ] {
            let n = c.load(Ordering::Relaxed);
            if n > 0 {
                into.insert(k.to_owned(), n);
            }
        }
    }
}

struct Stage {
    mw: BoxedDownloaderMiddleware,
    tally: Tally,
}

/// Counters of every middleware of a crawl, by middleware name, readable during and after
/// the crawl. Cheap to clone; clones see the same counters.
#[derive(Clone, Default)]
pub struct MiddlewareStats {
    sources: Arc<Mutex<Vec<Arc<dyn StatsSource>>>>,
}

impl std::fmt::Debug for MiddlewareStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("MiddlewareStats")
            .field(&self.snapshot())
            .finish()
    }
}

/// Something whose counters a [`MiddlewareStats`] reads.
trait StatsSource: Send + Sync {
    fn collect(&self, into: &mut BTreeMap<String, BTreeMap<String, u64>>);
}

impl MiddlewareStats {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn register(&self, source: Arc<dyn StatsSource>) {
        self.sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(source);
    }

    /// Counters by middleware name (`downloader:NAME` or `spider:NAME`), then by counter.
    /// Counters still at zero are left out.
    pub fn snapshot(&self) -> BTreeMap<String, BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        for s in self
            .sources
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            s.collect(&mut out);
        }
        out.retain(|_, v: &mut BTreeMap<String, u64>| !v.is_empty());
        out
    }
}

struct DownloaderStages(Vec<Stage>);

impl StatsSource for DownloaderStages {
    fn collect(&self, into: &mut BTreeMap<String, BTreeMap<String, u64>>) {
        for s in &self.0 {
            let entry = into
                .entry(format!("downloader:{}", s.mw.name()))
                .or_default();
            s.tally.snapshot(entry);
            for (k, v) in s.mw.counters() {
                if v > 0 {
                    entry.insert(k, v);
                }
            }
        }
    }
}

/// A downloader with a stack of [`DownloaderMiddleware`]s around it; a [`Downloader`] itself.
pub struct Middlewares<D> {
    inner: D,
    stages: Arc<DownloaderStages>,
}

impl<D: Downloader> Middlewares<D> {
    /// `inner` with the middlewares in `stack`, first nearest the engine.
    pub fn new(inner: D, stack: Vec<BoxedDownloaderMiddleware>) -> Self {
        let stages = stack
            .into_iter()
            .map(|mw| Stage {
                mw,
                tally: Tally::default(),
            })
            .collect();
        Self {
            inner,
            stages: Arc::new(DownloaderStages(stages)),
        }
    }

    /// The wrapped downloader.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The names of the middlewares, in stack order.
    pub fn names(&self) -> Vec<String> {
        self.stages
            .0
            .iter()
            .map(|s| s.mw.name().to_owned())
            .collect()
    }

    /// Report this stack's counters into `stats`.
    pub fn register_stats(&self, stats: &MiddlewareStats) {
        stats.register(Arc::clone(&self.stages) as Arc<dyn StatsSource>);
    }

    /// Run the response hooks from stage `from` (exclusive) back to the first.
    async fn responses(
        &self,
        request: &Request,
        mut response: Response,
        from: usize,
    ) -> std::result::Result<Response, (String, String)> {
        for stage in self.stages.0[..from].iter().rev() {
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

    async fn fetch(&self, request: &Request) -> Download {
        let mut req = request.clone();
        let stages = &self.stages.0;
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
                }),
                feedback,
            },
        }
    }
}

/// What a spider middleware knows about the page whose output it sees.
#[derive(Debug, Clone)]
pub struct Page {
    /// The page's final URL (after redirects).
    pub url: Url,
    /// The HTTP status.
    pub status: u16,
    /// The request that fetched it.
    pub request: Request,
}

/// A spider middleware: filters or transforms what the spider's callbacks return.
///
/// Generic over the item type, so a middleware can look into items (drop books over a
/// price); middlewares that only touch requests implement it for every `I`.
pub trait SpiderMiddleware<I>: Send + Sync + 'static {
    /// A short name for logs and stats.
    fn name(&self) -> &str;

    /// Filter or change the items and requests a callback produced for `page`.
    fn process_output(&self, page: &Page, items: &mut Vec<I>, requests: &mut Vec<Request>) {
        let _ = (page, items, requests);
    }

    /// Filter or change the spider's start requests.
    fn process_start_requests(&self, requests: &mut Vec<Request>) {
        let _ = requests;
    }

    /// The middleware's own counters, added to the crawl's middleware stats.
    fn counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
}

/// A boxed spider middleware, as kept in a stack.
pub type BoxedSpiderMiddleware<I> = Box<dyn SpiderMiddleware<I>>;

struct SpiderStage<I> {
    mw: BoxedSpiderMiddleware<I>,
    items_in: AtomicU64,
    items_out: AtomicU64,
    requests_in: AtomicU64,
    requests_out: AtomicU64,
}

struct SpiderStages<I>(Vec<SpiderStage<I>>);

impl<I: Send + 'static> StatsSource for SpiderStages<I> {
    fn collect(&self, into: &mut BTreeMap<String, BTreeMap<String, u64>>) {
        for s in &self.0 {
            let entry = into.entry(format!("spider:{}", s.mw.name())).or_default();
            let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
            let items_dropped = load(&s.items_in).saturating_sub(load(&s.items_out));
            let requests_dropped = load(&s.requests_in).saturating_sub(load(&s.requests_out));
            for (k, v) in [
                ("items_in", load(&s.items_in)),
                ("items_dropped", items_dropped),
                ("requests_in", load(&s.requests_in)),
                ("requests_dropped", requests_dropped),
            ] {
                if v > 0 {
                    entry.insert(k.to_owned(), v);
                }
            }
            for (k, v) in s.mw.counters() {
                if v > 0 {
                    entry.insert(k, v);
                }
            }
        }
    }
}

/// A spider with a stack of [`SpiderMiddleware`]s over its output; a [`Spider`] itself.
pub struct SpiderWithMiddlewares<S: Spider> {
    inner: S,
    stages: Arc<SpiderStages<S::Item>>,
}

impl<S: Spider> SpiderWithMiddlewares<S> {
    /// `inner` with the middlewares in `stack`, first nearest the engine.
    pub fn new(inner: S, stack: Vec<BoxedSpiderMiddleware<S::Item>>) -> Self {
        let stages = stack
            .into_iter()
            .map(|mw| SpiderStage {
                mw,
                items_in: AtomicU64::new(0),
                items_out: AtomicU64::new(0),
                requests_in: AtomicU64::new(0),
                requests_out: AtomicU64::new(0),
            })
            .collect();
        Self {
            inner,
            stages: Arc::new(SpiderStages(stages)),
        }
    }

    /// The wrapped spider.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The names of the middlewares, in stack order.
    pub fn names(&self) -> Vec<String> {
        self.stages
            .0
            .iter()
            .map(|s| s.mw.name().to_owned())
            .collect()
    }

    /// Report this stack's counters into `stats`.
    pub fn register_stats(&self, stats: &MiddlewareStats) {
        stats.register(Arc::clone(&self.stages) as Arc<dyn StatsSource>);
    }

    fn run_output(&self, page: &Page, out: &mut Output<S::Item>) {
        let (items, requests) = out.parts_mut();
        for s in self.stages.0.iter().rev() {
            s.items_in.fetch_add(items.len() as u64, Ordering::Relaxed);
            s.requests_in
                .fetch_add(requests.len() as u64, Ordering::Relaxed);
            s.mw.process_output(page, items, requests);
            s.items_out.fetch_add(items.len() as u64, Ordering::Relaxed);
            s.requests_out
                .fetch_add(requests.len() as u64, Ordering::Relaxed);
        }
    }
}

impl<S: Spider> Spider for SpiderWithMiddlewares<S> {
    type Item = S::Item;

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn start_urls(&self) -> Vec<String> {
        self.inner.start_urls()
    }

    fn start_requests(&self) -> Result<Vec<Request>> {
        let mut requests = self.inner.start_requests()?;
        for s in self.stages.0.iter().rev() {
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
        let info = Page {
            url: page.url().clone(),
            status: page.status(),
            request: page.request().clone(),
        };
        // A callback error keeps what the page produced up to it, so the middlewares see
        // that output too.
        let result = self.inner.parse(page, out).await;
        self.run_output(&info, out);
        result
    }

    async fn not_modified(&self, page: Response, out: &mut Output<S::Item>) -> Result<()> {
        let info = Page {
            url: page.url().clone(),
            status: page.status(),
            request: page.request().clone(),
        };
        let result = self.inner.not_modified(page, out).await;
        self.run_output(&info, out);
        result
    }
}

/// The built-in downloader middlewares, by the name `downloader_middlewares` uses.
/// `custom` marks where middlewares added in code go (at the end when it is not listed).
pub const DOWNLOADER_MIDDLEWARES: &[&str] = &[
    "http_auth",
    "default_headers",
    "user_agent",
    "cookies",
    "custom",
];

/// The built-in spider middlewares, by the name `spider_middlewares` uses. `custom` marks
/// where middlewares added in code go (at the end when it is not listed).
pub const SPIDER_MIDDLEWARES: &[&str] = &["referer", "custom"];

/// The referer policies `referer_policy` accepts.
pub const REFERER_POLICIES: &[&str] = &[
    "default",
    "no-referrer",
    "same-origin",
    "origin",
    "unsafe-url",
];

/// Sets the `Referer` of follow-up requests by policy (the `referer` spider middleware).
///
/// - `default` (`no-referrer-when-downgrade`, browsers' and Scrapy's default): the page URL,
///   except from an https page to an http URL, which gets none.
/// - `no-referrer`: never.
/// - `same-origin`: the page URL to the same origin only.
/// - `origin`: only the page's origin (`https://host/`).
/// - `unsafe-url`: always the page URL.
///
/// The URL sent never carries the page's fragment or user:password. A `Referer` the spider
/// set itself is left alone.
#[derive(Debug)]
pub struct RefererPolicy {
    policy: Policy,
    removed: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Default,
    NoReferrer,
    SameOrigin,
    Origin,
    UnsafeUrl,
}

impl RefererPolicy {
    /// A policy by name (one of [`REFERER_POLICIES`]).
    pub fn new(name: &str) -> Result<Self> {
        let policy = match name.trim().to_ascii_lowercase().as_str() {
            "default" | "no-referrer-when-downgrade" => Policy::Default,
            "no-referrer" => Policy::NoReferrer,
            "same-origin" => Policy::SameOrigin,
            "origin" => Policy::Origin,
            "unsafe-url" => Policy::UnsafeUrl,
            other => {
                return Err(Error::new(
                    ErrorKind::Settings,
                    format!(
                        "unknown referer_policy '{other}'; expected one of {}",
                        REFERER_POLICIES.join(", ")
                    ),
                ));
            }
        };
        Ok(Self {
            policy,
            removed: AtomicU64::new(0),
        })
    }

    /// The Referer value for a request to `target` from `page`; `None` for none.
    pub fn referer_for(&self, page: &Url, target: &Url) -> Option<String> {
        let mut clean = page.clone();
        clean.set_fragment(None);
        let _ = clean.set_username("");
        let _ = clean.set_password(None);
        match self.policy {
            Policy::NoReferrer => None,
            Policy::UnsafeUrl => Some(clean.to_string()),
            Policy::Default => (!(page.scheme() == "https" && target.scheme() == "http"))
                .then(|| clean.to_string()),
            Policy::SameOrigin => (page.origin() == target.origin()).then(|| clean.to_string()),
            Policy::Origin => Some(format!("{}/", page.origin().ascii_serialization())),
        }
    }
}

impl<I> SpiderMiddleware<I> for RefererPolicy {
    fn name(&self) -> &str {
        "referer"
    }

    fn process_output(&self, page: &Page, _items: &mut Vec<I>, requests: &mut Vec<Request>) {
        for r in requests.iter_mut() {
            if r.header_value("referer").is_some() {
                continue;
            }
            match self.referer_for(&page.url, &r.url) {
                Some(v) => r.headers.push(("Referer".to_owned(), v)),
                None => {
                    // The engine adds the page URL to requests without a Referer; an empty
                    // one tells it there is one, and the downloader stack drops it.
                    self.removed.fetch_add(1, Ordering::Relaxed);
                    r.headers.push(("Referer".to_owned(), String::new()));
                }
            }
        }
    }

    fn counters(&self) -> Vec<(String, u64)> {
        vec![(
            "referer_removed".to_owned(),
            self.removed.load(Ordering::Relaxed),
        )]
    }
}

/// The spider middleware stack `settings.spider_middlewares` names, in order, with
/// `custom` (the middlewares added in code, in the order given) where it is listed or at the
/// end.
pub fn spider_stack<I: 'static>(
    settings: &crate::Settings,
    custom: Vec<BoxedSpiderMiddleware<I>>,
) -> Result<Vec<BoxedSpiderMiddleware<I>>> {
    order_stack(
        &settings.spider_middlewares,
        SPIDER_MIDDLEWARES,
        |name| {
            Ok(match name {
                "referer" => Some(Box::new(RefererPolicy::new(&settings.referer_policy)?)
                    as BoxedSpiderMiddleware<I>),
                _ => None,
            })
        },
        custom,
    )
}

/// Order a stack: the built-ins in the order `names` lists them (`custom` standing for
/// `custom`), each built by `make` (which may return `None` for one that is switched off),
/// then the custom ones where `custom` is listed, or at the end.
pub fn order_stack<T>(
    names: &[String],
    known: &[&str],
    mut make: impl FnMut(&str) -> Result<Option<T>>,
    custom: Vec<T>,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    let mut custom = Some(custom);
    for name in names {
        let name = name.trim();
        if !known.contains(&name) {
            return Err(Error::new(
                ErrorKind::Settings,
                format!(
                    "unknown middleware '{name}'; built-in ones are {}",
                    known.join(", ")
                ),
            ));
        }
        if name == "custom" {
            if let Some(c) = custom.take() {
                out.extend(c);
            }
        } else if let Some(m) = make(name)? {
            out.push(m);
        }
    }
    if let Some(c) = custom {
        out.extend(c);
    }
    Ok(out)
}

/// The first problem with the middleware settings: (keys to blame, why).
pub(crate) fn settings_problem(s: &crate::Settings) -> Option<(Vec<&'static str>, String)> {
    for (key, names, known) in [
        (
            "downloader_middlewares",
            &s.downloader_middlewares,
            DOWNLOADER_MIDDLEWARES,
        ),
        (
            "spider_middlewares",
            &s.spider_middlewares,
            SPIDER_MIDDLEWARES,
        ),
    ] {
        if let Some(bad) = names.iter().find(|n| !known.contains(&n.trim())) {
            return Some((
                vec![key],
                format!(
                    "names unknown middleware '{bad}'; built-in ones are {}",
                    known.join(", ")
                ),
            ));
        }
    }
    if let Some(bad) = s
        .default_headers
        .iter()
        .find(|h| parse_header_line(h).is_none())
    {
        return Some((
            vec!["default_headers"],
            format!("entry '{bad}' is not written `Name: value`"),
        ));
    }
    if let Err(e) = RefererPolicy::new(&s.referer_policy) {
        return Some((vec!["referer_policy"], e.to_string()));
    }
    None
}

/// `Name: value` split into a valid header name and its trimmed value.
pub fn parse_header_line(line: &str) -> Option<(String, String)> {
    let (name, value) = line.split_once(':')?;
    let name = name.trim();
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    valid.then(|| (name.to_owned(), value.trim().to_owned()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Answers every request with a 200 and counts what it was sent.
    #[derive(Default)]
    struct Net {
        sent: AtomicUsize,
        last_headers: Mutex<Vec<(String, String)>>,
    }

    fn ok(req: &Request) -> Response {
        Response::new(
            req.clone(),
            req.url.clone(),
            200,
            http::HeaderMap::new(),
            bytes::Bytes::from_static(b"<html></html>"),
        )
    }

    impl Downloader for Arc<Net> {
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
        let net = Arc::new(Net::default());
        let mw = Middlewares::new(
            Arc::clone(&net),
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
        let net = Arc::new(Net::default());
        let mw = Middlewares::new(
            Arc::clone(&net),
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
        let net = Arc::new(Net::default());
        let mw = Middlewares::new(
            Arc::clone(&net),
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
        let net = Arc::new(Net::default());
        let mw = Middlewares::new(
            Arc::clone(&net),
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
        let mw = Middlewares::new(Arc::clone(&net), stack(&log, &[("r", go, retry)]));
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
        let net = Arc::new(Net::default());
        let mw = Middlewares::new(Arc::clone(&net), Vec::new());
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

    #[test]
    fn referer_policies() {
        let page = Url::parse("https://user:pw@a.example/p?q=1#frag").unwrap();
        let same = Url::parse("https://a.example/next").unwrap();
        let other = Url::parse("https://b.example/x").unwrap();
        let down = Url::parse("http://a.example/plain").unwrap();
        let full = Some("https://a.example/p?q=1".to_owned());
        let r = |name: &str, to: &Url| RefererPolicy::new(name).unwrap().referer_for(&page, to);
        assert_eq!(r("default", &other), full);
        assert_eq!(r("default", &down), None, "no referer on a downgrade");
        assert_eq!(r("no-referrer", &same), None);
        assert_eq!(r("same-origin", &same), full);
        assert_eq!(r("same-origin", &other), None);
        assert_eq!(r("origin", &other).as_deref(), Some("https://a.example/"));
        assert_eq!(r("unsafe-url", &down), full);
        assert!(RefererPolicy::new("sometimes").is_err());
    }

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
        let settings = crate::Settings {
            referer_policy: "same-origin".into(),
            ..crate::Settings::default()
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
