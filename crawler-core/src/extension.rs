//! Extensions: code that subscribes to the crawl's signals (Scrapy's signals and
//! `EXTENSIONS`), such as monitors that check counts and close a crawl that goes wrong, or a
//! feeder that gives an idle spider more work.
//!
//! An [`Extension`] implements only the signals it cares for; every method has a default
//! that does nothing. The engine calls the per-event signals (items, requests, responses)
//! where the event happens, on the task that handles it, with borrowed views of what the
//! event is about: nothing is copied for them, and with no extension registered nothing is
//! called at all (each site checks an empty list), so an unused signal costs nothing.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::output::Counters;
use crate::pipeline::BoxFuture;
use crate::request::Request;
use crate::response::Response;
use crate::stats::Stats;

/// Code subscribed to a crawl's signals, added with `Crawl::extension` (or
/// `Engine::extension`). Every method has a default that does nothing.
///
/// The per-event signals (`item_*`, `request_*`, `response_received`, `headers_received`)
/// are plain functions called inline, where the event happens (on a worker, or in the
/// engine's loop for `request_scheduled` and `request_dropped`): **a slow extension slows
/// the crawl**. Keep them to counting and comparing; send anything slow (a database write,
/// a message to a chat) to a task of your own through a channel. The async signals
/// (`spider_opened`, `spider_idle`, `spider_closed`) are awaited once each time the crawl
/// reaches that point, when nothing else is running.
///
/// Several extensions are called in the order they were added. A browser's sub-requests
/// (the scripts and data a rendered page loads, sent through their host's slot) fire the
/// request signals too (`request_scheduled`, `request_dropped`,
/// `request_reached_downloader`, `response_received`); they carry the
/// [`SUBREQUEST_META`](crate::SUBREQUEST_META) meta key, to tell them apart.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use crawler_core::{CrawlHandle, Extension, Url};
///
/// /// Closes the crawl when more than 10 items were dropped by the pipelines.
/// #[derive(Default)]
/// struct TooManyDrops(AtomicU64);
///
/// impl<I: Send + Sync + 'static> Extension<I> for TooManyDrops {
///     fn item_dropped(&self, _url: &Url, _stage: &str, _reason: &str, crawl: &CrawlHandle) {
///         if self.0.fetch_add(1, Ordering::Relaxed) + 1 > 10 {
///             crawl.close_spider("too_many_drops");
///         }
///     }
/// }
/// ```
pub trait Extension<I>: Send + Sync + 'static {
    /// The extension's name, for logs (its type name by default).
    fn name(&self) -> &str {
        std::any::type_name::<Self>()
    }

    /// The crawl is about to send its first request (Scrapy's `spider_opened`): after the
    /// spider's [`opened`](crate::Spider::opened) hook, before the start requests are
    /// queued. Open a connection, read a file, keep `crawl` for later. An error fails the
    /// crawl before any request, with a message naming the extension.
    fn spider_opened(&self, crawl: &CrawlHandle) -> impl Future<Output = Result<()>> + Send {
        let _ = crawl;
        async { Ok(()) }
    }

    /// The frontier has no request left and none is in flight (Scrapy's `spider_idle`): the
    /// crawl is about to close as `finished`. Return requests to keep it going (the hook
    /// scrapy-redis feeds a spider with): they are queued as start requests are, and the
    /// crawl goes on; the signal comes again the next time the crawl is idle. Returning
    /// none (the default) lets it close. Requests that all turn out filtered (duplicates)
    /// close it too, so an extension that keeps offering the same URL cannot spin forever.
    /// Extensions are asked in the order they were added, and the first that returns
    /// requests ends the round: add a feeder before a monitor, and the monitor is asked
    /// only when the crawl is out of work for good (the moment to judge its counts, and
    /// [`CrawlHandle::close_spider`] then sets the close reason).
    /// It may wait (for a channel, a queue): a stop request (Ctrl-C) ends the wait. It is
    /// not called once the crawl is closing (a stop, a close limit, `close_spider`).
    fn spider_idle(&self, crawl: &CrawlHandle) -> impl Future<Output = Vec<Request>> + Send {
        let _ = crawl;
        async { Vec::new() }
    }

    /// The crawl has ended (Scrapy's `spider_closed`): after the spider's own
    /// [`closed`](crate::Spider::closed) hook, with the reason it closed and the final
    /// stats. An error is logged; the crawl's result does not change.
    fn spider_closed(
        &self,
        reason: &str,
        stats: &Stats,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (reason, stats);
        async { Ok(()) }
    }

    /// A request is offered to the frontier (Scrapy's `request_scheduled`): a start
    /// request, a followed link, a redirect's next hop, a retry not included. It may still
    /// be filtered ([`request_dropped`](Extension::request_dropped) follows then).
    fn request_scheduled(&self, request: &Request, crawl: &CrawlHandle) {
        let _ = (request, crawl);
    }

    /// The frontier refused a request (Scrapy's `request_dropped`): `reason` is the
    /// `filtered` stat's key (`duplicate`, `offsite`, `depth`, `queue_full`…).
    fn request_dropped(&self, request: &Request, reason: &str, crawl: &CrawlHandle) {
        let _ = (request, reason, crawl);
    }

    /// A request passed robots.txt and goes to the downloader now (Scrapy's
    /// `request_reached_downloader`); each attempt counts (a retry reaches it again).
    /// Requests refused by robots.txt never reach it.
    fn request_reached_downloader(&self, request: &Request, crawl: &CrawlHandle) {
        let _ = (request, crawl);
    }

    /// A response's status and headers arrived, before its body is read (Scrapy's
    /// `headers_received`). Return a reason to stop the download there (a declared length
    /// too large, a content type not wanted): the body is not read, and the request ends as
    /// `failed:download_stopped` with that reason as its message (an errback sees it as
    /// [`FailureKind::DownloadStopped`](crate::FailureKind::DownloadStopped)); it is not
    /// retried. Unlike Scrapy's `StopDownload`, no partial response reaches the callback.
    /// Called by the HTTP downloader for every request it sends (robots.txt, fetched apart
    /// by its cache, excepted); answers from the HTTP cache are not downloaded and do not
    /// come here. It has no [`CrawlHandle`]: keep the one
    /// [`spider_opened`](Extension::spider_opened) gives when you need it.
    fn headers_received(
        &self,
        request: &Request,
        status: u16,
        headers: &http::HeaderMap,
    ) -> Option<String> {
        let _ = (request, status, headers);
        None
    }

    /// A response arrived for `request` (Scrapy's `response_received`): any status,
    /// redirects and errors included, before the spider sees it.
    fn response_received(&self, response: &Response, request: &Request, crawl: &CrawlHandle) {
        let _ = (response, request, crawl);
    }

    /// An item passed every pipeline (Scrapy's `item_scraped`); `url` is the page it came
    /// from. Called before it goes to the feeds.
    fn item_scraped(&self, item: &I, url: &url::Url, crawl: &CrawlHandle) {
        let _ = (item, url, crawl);
    }

    /// A pipeline stage dropped an item (Scrapy's `item_dropped`), with the reason it gave
    /// ([`Processed::Drop`](crate::Processed::Drop)); `stage` names the pipeline. The item
    /// itself went to that stage and is gone.
    fn item_dropped(&self, url: &url::Url, stage: &str, reason: &str, crawl: &CrawlHandle) {
        let _ = (url, stage, reason, crawl);
    }

    /// A pipeline stage failed on an item (Scrapy's `item_error`); the item is dropped.
    fn item_error(&self, url: &url::Url, stage: &str, error: &Error, crawl: &CrawlHandle) {
        let _ = (url, stage, error, crawl);
    }
}

/// What an extension may do to the crawl it watches (Scrapy's `crawler`): read its stats,
/// add to the spider's own counters, and close it. Cheap to clone; keep one from
/// [`spider_opened`](Extension::spider_opened) to use from your own tasks.
#[derive(Clone)]
pub struct CrawlHandle {
    close: mpsc::UnboundedSender<String>,
    stats: Arc<dyn Fn() -> Stats + Send + Sync>,
    /// Counters added through the handle and not yet summed into the crawl's stats.
    counters: Arc<Mutex<Counters>>,
}

impl fmt::Debug for CrawlHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrawlHandle").finish_non_exhaustive()
    }
}

impl CrawlHandle {
    /// A handle whose [`close_spider`](CrawlHandle::close_spider) sends to `close` and whose
    /// [`stats`](CrawlHandle::stats) calls `stats`. The engine makes it; an extension is
    /// handed one.
    pub fn new(
        close: mpsc::UnboundedSender<String>,
        stats: impl Fn() -> Stats + Send + Sync + 'static,
    ) -> Self {
        Self {
            close,
            stats: Arc::new(stats),
            counters: Arc::default(),
        }
    }

    /// Add one to the spider's own counter `name` (Scrapy's
    /// `self.crawler.stats.inc_value(name)` from an extension or a signal handler): it is
    /// summed with the callbacks' [`Output::stats`](crate::Output::stats) into
    /// [`Stats::spider`], the JSON stats and the printed summary. Counted at once; seen in
    /// [`stats`](CrawlHandle::stats) from the next snapshot.
    pub fn inc_stat(&self, name: &str) {
        self.inc_stat_by(name, 1);
    }

    /// Add `n` to the spider's own counter `name` (see [`inc_stat`](CrawlHandle::inc_stat)).
    pub fn inc_stat_by(&self, name: &str, n: u64) {
        // A panic elsewhere while holding the lock left plain counters: still usable.
        self.counters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .inc_by(name, n);
    }

    /// Take the counters added through this handle (and its clones) since the last call:
    /// the engine sums them into the crawl's stats.
    pub fn take_counters(&self) -> Counters {
        std::mem::take(
            &mut *self
                .counters
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// The crawl's stats: the latest progress snapshot (refreshed four times a second),
    /// exact when the crawl is idle ([`Extension::spider_idle`]). The spider's own counters
    /// are in [`Stats::spider`].
    pub fn stats(&self) -> Stats {
        (self.stats)()
    }

    /// Close the crawl for `reason` (Scrapy's `crawler.engine.close_spider`, what
    /// spidermon's monitors and `CloseSpider` do): no new requests, those in flight finish,
    /// and `reason` becomes [`Stats::close_reason`] (unless something closed it first). A
    /// crawl already over ignores it.
    pub fn close_spider(&self, reason: impl Into<String>) {
        // The engine is gone once the crawl is over: nothing left to close.
        let _ = self.close.send(reason.into());
    }
}

/// Object-safe form of [`Extension`], so extensions of different types share one list.
/// Implement [`Extension`], never this.
pub trait DynExtension<I>: Send + Sync {
    /// [`Extension::name`].
    fn name(&self) -> &str;
    /// [`Extension::spider_opened`], boxed.
    fn spider_opened<'a>(&'a self, crawl: &'a CrawlHandle) -> BoxFuture<'a, Result<()>>;
    /// [`Extension::spider_idle`], boxed.
    fn spider_idle<'a>(&'a self, crawl: &'a CrawlHandle) -> BoxFuture<'a, Vec<Request>>;
    /// [`Extension::spider_closed`], boxed.
    fn spider_closed<'a>(&'a self, reason: &'a str, stats: &'a Stats) -> BoxFuture<'a, Result<()>>;
    /// [`Extension::request_scheduled`].
    fn request_scheduled(&self, request: &Request, crawl: &CrawlHandle);
    /// [`Extension::request_dropped`].
    fn request_dropped(&self, request: &Request, reason: &str, crawl: &CrawlHandle);
    /// [`Extension::request_reached_downloader`].
    fn request_reached_downloader(&self, request: &Request, crawl: &CrawlHandle);
    /// [`Extension::headers_received`].
    fn headers_received(
        &self,
        request: &Request,
        status: u16,
        headers: &http::HeaderMap,
    ) -> Option<String>;
    /// [`Extension::response_received`].
    fn response_received(&self, response: &Response, request: &Request, crawl: &CrawlHandle);
    /// [`Extension::item_scraped`].
    fn item_scraped(&self, item: &I, url: &url::Url, crawl: &CrawlHandle);
    /// [`Extension::item_dropped`].
    fn item_dropped(&self, url: &url::Url, stage: &str, reason: &str, crawl: &CrawlHandle);
    /// [`Extension::item_error`].
    fn item_error(&self, url: &url::Url, stage: &str, error: &Error, crawl: &CrawlHandle);
}

impl<I: 'static, E: Extension<I>> DynExtension<I> for E {
    fn name(&self) -> &str {
        Extension::name(self)
    }
    fn spider_opened<'a>(&'a self, crawl: &'a CrawlHandle) -> BoxFuture<'a, Result<()>> {
        Box::pin(Extension::spider_opened(self, crawl))
    }
    fn spider_idle<'a>(&'a self, crawl: &'a CrawlHandle) -> BoxFuture<'a, Vec<Request>> {
        Box::pin(Extension::spider_idle(self, crawl))
    }
    fn spider_closed<'a>(&'a self, reason: &'a str, stats: &'a Stats) -> BoxFuture<'a, Result<()>> {
        Box::pin(Extension::spider_closed(self, reason, stats))
    }
    fn request_scheduled(&self, request: &Request, crawl: &CrawlHandle) {
        Extension::request_scheduled(self, request, crawl);
    }
    fn request_dropped(&self, request: &Request, reason: &str, crawl: &CrawlHandle) {
        Extension::request_dropped(self, request, reason, crawl);
    }
    fn request_reached_downloader(&self, request: &Request, crawl: &CrawlHandle) {
        Extension::request_reached_downloader(self, request, crawl);
    }
    fn headers_received(
        &self,
        request: &Request,
        status: u16,
        headers: &http::HeaderMap,
    ) -> Option<String> {
        Extension::headers_received(self, request, status, headers)
    }
    fn response_received(&self, response: &Response, request: &Request, crawl: &CrawlHandle) {
        Extension::response_received(self, response, request, crawl);
    }
    fn item_scraped(&self, item: &I, url: &url::Url, crawl: &CrawlHandle) {
        Extension::item_scraped(self, item, url, crawl);
    }
    fn item_dropped(&self, url: &url::Url, stage: &str, reason: &str, crawl: &CrawlHandle) {
        Extension::item_dropped(self, url, stage, reason, crawl);
    }
    fn item_error(&self, url: &url::Url, stage: &str, error: &Error, crawl: &CrawlHandle) {
        Extension::item_error(self, url, stage, error, crawl);
    }
}

/// Extensions shared between the engine and the downloader, as one list.
pub type SharedExtension<I> = Arc<dyn DynExtension<I>>;

/// What the HTTP downloader asks when a response's headers arrive: whether to stop the
/// download, and why (see [`Extension::headers_received`]).
pub trait HeadersHook: Send + Sync {
    /// `Some(reason)` stops the download before its body.
    fn headers_received(
        &self,
        request: &Request,
        status: u16,
        headers: &http::HeaderMap,
    ) -> Option<String>;
}

/// The extensions of a crawl as one [`HeadersHook`]: the first that stops the download
/// decides, its name in the reason.
pub struct ExtensionHeaders<I>(pub Vec<SharedExtension<I>>);

impl<I: 'static> HeadersHook for ExtensionHeaders<I> {
    fn headers_received(
        &self,
        request: &Request,
        status: u16,
        headers: &http::HeaderMap,
    ) -> Option<String> {
        self.0.iter().find_map(|e| {
            e.headers_received(request, status, headers)
                .map(|why| format!("download stopped by extension {}: {why}", e.name()))
        })
    }
}

/// The built-in extensions, by the name the `extensions` setting uses (Scrapy's
/// `EXTENSIONS`). `custom` marks where extensions added in code go (at the end when it is
/// not listed).
pub const EXTENSIONS: &[&str] = &["custom", "monitor"];

/// The crawl's extensions in the order `settings.extensions` names them: each built-in
/// that is switched on (the `monitor` when one of its bounds is set), and `custom` (the
/// ones added in code, in the order given) where it is listed or at the end. An unknown
/// name is an error naming the built-in ones.
pub fn extension_stack<I: 'static>(
    settings: &crate::Settings,
    custom: Vec<SharedExtension<I>>,
) -> Result<Vec<SharedExtension<I>>> {
    crate::middleware::order_stack_of(
        "extension",
        &settings.extensions,
        EXTENSIONS,
        |name| {
            Ok(match name {
                "monitor" => crate::monitor::Monitor::from_settings(settings)
                    .map(|m| Arc::new(m) as SharedExtension<I>),
                _ => None,
            })
        },
        custom,
    )
}
