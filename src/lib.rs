//! A polite, Scrapy-style crawling framework.
//!
//! Write a spider as a plain struct, point it at a site, and get items out, while every host
//! is treated the way its operator would want: per-host budgets, robots.txt, delays, and
//! holds when a server asks for them.
//!
//! ```no_run
//! use crawler::prelude::*;
//!
//! #[derive(Serialize)]
//! struct Book { title: String, price: String }
//!
//! struct Books;
//!
//! impl Spider for Books {
//!     type Item = Book;
//!     fn name(&self) -> &str { "books" }
//!     fn start_urls(&self) -> Vec<String> { vec!["http://127.0.0.1:8080/".into()] }
//!     async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
//!         for href in page.select("article.book h3 a").attrs("href") {
//!             out.follow(href);
//!         }
//!         out.follow_all(page.select("li.next a").attrs("href"));
//!         if let Some(h1) = page.select_first("div.product h1") {
//!             out.item(Book { title: h1.text(), price: page.text_of("p.price")? });
//!         }
//!         Ok(())
//!     }
//! }
//!
//! # async fn run() -> std::result::Result<(), crawler::Error> {
//! let stats = Crawl::new(Books).feed("books.jsonl")?.run().await?;
//! println!("{stats}");
//! # Ok(()) }
//! ```
//!
//! What a project uses is here: [`Crawl`], the spider vocabulary ([`Spider`], [`Request`],
//! [`Response`], [`Output`], [`Pipeline`], the one [`Error`]), and the modules [`settings`],
//! [`middleware`], [`feeds`] and [`spiders`] (link extraction, CrawlSpider rules, the
//! sitemap spider). The pieces live in crates of their own (crawler-core, crawler-engine,
//! crawler-http, crawler-sched, crawler-store). The command lines (the `crawler`
//! binary, a project's `Runner`) are the `crawler-cli` crate; the test site is
//! `crawler-lab`.

#[cfg(feature = "mimalloc")]
mod allocator;
mod conditional;
mod logging;
#[doc(hidden)]
pub mod progress;
pub mod settings;
pub mod spiders;

use std::path::PathBuf;
use std::sync::Arc;

pub use crawler_core::{
    Context, Error, ErrorKind, Follow, IntoNodes, Node, Output, Pipeline, Processed, RenderOptions,
    Request, Response, Result, Selection, Spider, SpiderContext, Stats, Url, check_css,
    check_xpath,
};
// On a line of its own, apart from the selection types' list above.
pub use crawler_core::FormRequest;
// The spider's hooks beyond its callbacks: statuses it asks for, errbacks, its counters.
pub use crawler_core::{AllowedStatuses, Counters, FailedRequest, FailureKind};
// Extensions: code subscribed to the crawl's signals (monitors, idle feeders).
pub use crawler_core::{CrawlHandle, Extension};
pub use crawler_engine::Progress;
pub use logging::{init_logging, init_logging_with};

/// Middlewares: hooks around the downloader ([`middleware::DownloaderMiddleware`]) and over a
/// spider's output ([`middleware::SpiderMiddleware`]), added with
/// [`Crawl::downloader_middleware`] and [`Crawl::spider_middleware`] and ordered by the
/// `downloader_middlewares` / `spider_middlewares` settings.
pub mod middleware {
    pub use crawler_core::{
        Action, After, DOWNLOADER_MIDDLEWARES, DownloaderMiddleware, Page, REFERER_POLICIES,
        RefererPolicy, SPIDER_MIDDLEWARES, SpiderMiddleware,
    };
    pub use crawler_engine::MiddlewareStats;
}

/// Feeds: where items are written ([`Crawl::feed`], the `feeds` setting).
pub mod feeds {
    pub use crawler_core::{FeedFormat, FeedSpec, STDOUT_FEED};
}

/// Conditional requests and the HTTP cache: what earlier runs stored per URL (validators,
/// whole pages), behind the [`cache::ConditionalStore`] trait a crawl
/// takes with [`Crawl::conditional_store`]; the settings pick sled in `cache_dir` (the
/// `sled` feature) otherwise.
pub mod cache {
    pub use crawler_core::{CachedPage, ConditionalStore, MemoryConditional, Validators};
    #[cfg(feature = "sled")]
    pub use crawler_store::SledConditional;
}

/// Rendering in chromium (the `browser` feature): [`browser::BrowserConfig`] and the
/// [`browser::Rendering`] download handler a [`Crawl`] puts under its middlewares.
#[cfg(feature = "browser")]
pub use crawler_browser as browser;

// The crates underneath, whole: for the `crawler` command line (crawler-cli) and this
// repository's tests and benchmarks, which drive parts a project never touches. Not the
// documented API; a project uses the modules above.
#[doc(hidden)]
pub use crawler_core as core;
#[doc(hidden)]
pub use crawler_engine as engine;
/// The files and images pipelines: files and images that items name, fetched through the
/// crawl (paced, robots-gated, retried) and stored once by content.
pub use crawler_engine::files;
#[doc(hidden)]
pub use crawler_http as http;
#[doc(hidden)]
pub use crawler_sched as sched;
#[doc(hidden)]
pub use crawler_store as store;
// The command line's glue: one logging and progress path for it and for `Crawl`.
#[doc(hidden)]
pub use logging::{log_colour, log_level_filter, set_log_level};

/// mimalloc, for a spider project that wants it as its global allocator (the `crawler`
/// binary and the benchmarks use it): less CPU per page than the system allocator at about
/// the same peak RSS on the crawl benchmark (BENCHMARKS.md, "Crawl speed", "The allocator and
/// the build"). A library never picks the allocator, so a project opts in in its `main.rs`:
///
/// ```
/// #[global_allocator]
/// static GLOBAL: crawler::MiMalloc = crawler::MiMalloc;
/// # fn main() {}
/// ```
///
/// Built with transparent huge pages off for the process: with them, mimalloc's eagerly
/// committed arenas doubled the crawl's peak RSS. Call [`tune_allocator`] first thing in
/// `main` too, so that freed memory goes back to the OS at once.
#[cfg(feature = "mimalloc")]
pub use mimalloc::MiMalloc;

#[cfg(feature = "mimalloc")]
pub use allocator::tune_allocator;

use crawler_core::dns::ResolveAhead;
use crawler_core::{
    BoxedDownloaderMiddleware, BoxedSpiderMiddleware, DownloaderMiddleware, SpiderMiddleware,
};
use crawler_core::{ConditionalStore, FeedSpec, Settings, Shutdown};
use crawler_engine::Engine;
use crawler_engine::{MiddlewareStats, Middlewares, SpiderWithMiddlewares};
use crawler_http::HttpDownloader;
use crawler_sched::{FleetFrontier, Frontier, FrontierConfig, MemoryStore, QueueStore};
use settings::SettingsLayers;

/// Run a built engine to completion as a task of the runtime rather than in the caller's
/// future. Under `#[tokio::main]` the caller's future is polled on the main thread, outside
/// the worker pool, so each worker's report to the engine woke that thread through a futex:
/// measured, a fifth of the crawl's CPU per page (BENCHMARKS.md, "Crawl speed", "The allocator
/// and the build").
#[doc(hidden)]
pub async fn run_engine<S: Spider>(engine: HttpEngine<S>) -> Result<Stats, Error> {
    match tokio::spawn(engine.run()).await {
        Ok(result) => Ok(result?),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(Error::new(
            ErrorKind::Cancelled,
            format!("the crawl was cancelled: {e}"),
        )),
    }
}

/// Everything a spider file needs.
pub mod prelude {
    pub use crate::Crawl;
    pub use crawler_core::FormRequest;
    pub use crawler_core::{AllowedStatuses, FailedRequest, FailureKind};
    pub use crawler_core::{
        Context, Node, Output, Pipeline, Processed, Request, Response, Result, Selection, Settings,
        Spider, SpiderContext, Stats,
    };
    pub use crawler_core::{CrawlHandle, Extension};
    pub use serde::Serialize;
}

/// The engine type a [`Crawl`] builds: HTTP downloads, and a frontier in memory, in a job
/// directory, or shared by a fleet through Redis.
///
/// The spider and the downloader come wrapped in their middleware stacks
/// ([`Crawl::spider_middleware`], [`Crawl::downloader_middleware`] and the
/// `spider_middlewares` / `downloader_middlewares` settings).
pub type HttpEngine<S> =
    Engine<SpiderWithMiddlewares<S>, Middlewares<Fetcher>, FleetFrontier<Box<dyn QueueStore>>>;

/// What a [`Crawl`]'s middlewares wrap: the HTTP downloader, under the browser's download
/// handler with the `browser` feature (which renders the pages that ask for it and leaves
/// every other request to HTTP).
#[cfg(feature = "browser")]
pub type Fetcher = crawler_browser::Rendering<HttpDownloader>;
/// What a [`Crawl`]'s middlewares wrap: the HTTP downloader.
#[cfg(not(feature = "browser"))]
pub type Fetcher = HttpDownloader;

/// The HTTP downloader under the browser's download handler.
#[cfg(feature = "browser")]
fn fetcher(http: HttpDownloader, settings: &Settings) -> Result<Fetcher, Error> {
    let config = crawler_browser::BrowserConfig::from_settings(settings);
    // A crawl that renders finds out at once when there is no browser to render with, not
    // at its first page.
    if config.render_all || config.hosts.iter().any(|r| r.render == Some(true)) {
        config
            .find_executable()
            .map_err(|e| Error::new(ErrorKind::Settings, e.to_string()))?;
    }
    Ok(crawler_browser::Rendering::new(http, config))
}

/// Without the `browser` feature, the `render` settings are refused, never ignored
/// (requests that ask for rendering in code are fetched without it).
#[cfg(not(feature = "browser"))]
fn fetcher(http: HttpDownloader, settings: &Settings) -> Result<Fetcher, Error> {
    if settings.render || settings.hosts.iter().any(|r| r.render == Some(true)) {
        return Err(Error::new(
            ErrorKind::Settings,
            "render is set, but this program was built without the `browser` feature of \
             the crawler crate (in Cargo.toml: crawler = { ..., features = [\"browser\"] })",
        ));
    }
    Ok(http)
}

/// Open (or resume) the job directory's persistent frontier. Settings that change what the
/// frontier holds (allowed domains, depth and URL-length limits) are part of the job's
/// identity, so resuming with different ones is refused rather than silently mixed.
#[cfg(feature = "sled")]
fn open_job(
    dir: &str,
    spider: &str,
    allowed: &[String],
    settings: &Settings,
) -> Result<(Box<dyn QueueStore>, bool), Error> {
    let digest = format!(
        "allowed_domains={};depth_limit={};max_url_length={}",
        allowed.join(","),
        settings.depth_limit,
        settings.max_url_length
    );
    let store = crawler_store::SledStore::open_job(
        std::path::Path::new(dir),
        spider,
        &digest,
        // sled writes its log to the OS every 50 ms: a kill -9 then repeats at most the
        // requests finished in the last 50 ms before it (their acknowledgements were still
        // in sled's buffer), on top of those in flight.
        crawler_store::StoreOptions {
            flush_every_ms: Some(50),
            ..Default::default()
        },
    )?;
    let resuming = store.saved_stats().is_some() || store.queued() > 0;
    if store.requeued_on_open() > 0 {
        tracing::info!(
            requeued = store.requeued_on_open(),
            "requests in flight when the last run stopped are queued again"
        );
    }
    Ok((Box::new(store), resuming))
}

/// Without the `sled` feature there is no job directory: `job_dir` is refused, never ignored.
#[cfg(not(feature = "sled"))]
fn open_job(
    _dir: &str,
    _spider: &str,
    _allowed: &[String],
    _settings: &Settings,
) -> Result<(Box<dyn QueueStore>, bool), Error> {
    Err(Error::new(
        ErrorKind::Settings,
        format!("job_dir is set, but this program was built without {SLED_FEATURE}"),
    ))
}

/// How a setting that needs files on disk names the feature that brings them.
#[cfg(not(feature = "sled"))]
pub(crate) const SLED_FEATURE: &str = "the `sled` feature of the crawler crate (in \
     Cargo.toml: crawler = { ..., features = [\"sled\"] })";

/// The stats of a fleet's job (`job_name` at `redis_url`): every worker's last saved stats
/// summed with [`Stats::merge`], the spider's own counters ([`Stats::spider`]) included.
/// Each worker saves its stats at its checkpoints (once a second) and when it ends, so once
/// every worker is done these are the job's final stats; while they run, the latest.
/// Read without joining the job. `retry_for` bounds the wait for an unreachable Redis.
///
/// ```no_run
/// # async fn f() -> Result<(), crawler::Error> {
/// let stats = crawler::fleet_stats("redis://127.0.0.1:6379", "books", std::time::Duration::from_secs(5))?;
/// println!("{} items, {:?} missing prices", stats.items_scraped, stats.spider.get("products/missing_price"));
/// # Ok(()) }
/// ```
#[cfg(feature = "redis")]
pub fn fleet_stats(
    redis_url: &str,
    job_name: &str,
    retry_for: std::time::Duration,
) -> Result<Stats, Error> {
    let mut total = Stats::default();
    for (worker, saved) in
        crawler_store::RedisStore::read_worker_stats(redis_url, job_name, retry_for)?
    {
        let stats: Stats = serde_json::from_value(saved).map_err(|e| {
            Error::new(
                ErrorKind::Storage,
                format!("worker {worker}'s saved stats are unreadable: {e}"),
            )
        })?;
        total.merge(&stats);
    }
    Ok(total)
}

/// The politeness parameters of a fleet's hosts: the same machine, modes and tuning as a
/// local crawl. The host state is small (a few dozen numbers and two minutes of delivery
/// bins), so it travels with every commit as it is.
#[cfg(feature = "redis")]
fn fleet_params(settings: &Settings) -> crawler_sched::politeness::Params {
    crawler_sched::politeness::Params::from_settings(settings)
}

/// Join the Redis-backed crawl named by `job_name` (default: the spider's name): its store
/// holds the shared frontier and leases, the budget every host is paced by, and the
/// robots.txt files the workers share.
///
/// `shutdown` is the crawl's stop handle: a stop request during a Redis outage ends the
/// store's retries, so Ctrl-C is never stuck behind `redis_retry_for`.
#[cfg(feature = "redis")]
fn open_fleet(
    url: &str,
    spider: &str,
    settings: &Settings,
    shutdown: &Shutdown,
) -> Result<FleetStore, Error> {
    let job = settings
        .job_name
        .clone()
        .unwrap_or_else(|| spider.to_owned());
    let options = crawler_store::RedisOptions {
        lease_timeout: settings.lease_timeout,
        retry_for: settings.redis_retry_for,
        budget: Some(fleet_params(settings)),
        idle_ttl: settings.redis_idle_ttl,
        stop: Some(shutdown.clone()),
        ..crawler_store::RedisOptions::new(url, job)
    };
    Ok(crawler_store::RedisStore::open(options)?)
}

/// The fleet's store: Redis.
#[cfg(feature = "redis")]
type FleetStore = crawler_store::RedisStore;

/// The robots.txt files the fleet's workers share.
#[cfg(feature = "redis")]
fn fleet_robots(store: &FleetStore) -> std::sync::Arc<dyn crawler_core::RobotsShare> {
    store.robots()
}

/// The worker's frontier over the fleet's store, every host paced by the shared budget.
#[cfg(feature = "redis")]
fn fleet_frontier(
    store: FleetStore,
    allowed: Vec<String>,
    settings: &Settings,
    resolver: &Arc<crawler_http::Resolver>,
) -> WithAhead {
    let budget = store.budget();
    let fleet = store.fleet();
    let mut config = FrontierConfig::from_settings(settings, allowed);
    let ahead = attach_resolver(&mut config, resolver);
    let pacing = settings.clone();
    config.throttle = Box::new(move |host, _now| {
        let params = fleet_params(&pacing.for_host(host));
        Box::new(crawler_sched::SharedThrottle::new(
            host,
            std::sync::Arc::clone(&budget),
            params,
        ))
    });
    let frontier = Frontier::with_store(config, Box::new(store) as Box<dyn QueueStore>);
    (FleetFrontier::new(frontier, fleet), ahead)
}

/// A fleet worker's frontier, and the engine's resolve-ahead when it needs one.
type WithAhead = (
    FleetFrontier<Box<dyn QueueStore>>,
    Option<Arc<dyn ResolveAhead>>,
);

/// The frontier's addresses come from the crawl's one resolver (the downloader's), read
/// without waiting; the engine's resolve-ahead when its keys or limiter groups read them.
fn attach_resolver(
    config: &mut FrontierConfig,
    resolver: &Arc<crawler_http::Resolver>,
) -> Option<Arc<dyn ResolveAhead>> {
    let cache: Arc<dyn crawler_core::dns::NameCache> = resolver.clone();
    config.ip_keys = Arc::new(crawler_sched::IpKeys::shared(cache));
    if config.needs_addresses() {
        config.ip_keys.resolve_ahead(config.allowed_domains.clone())
    } else {
        None
    }
}

/// Without the `redis` feature there is no fleet: `redis_url` is refused, never ignored.
#[cfg(not(feature = "redis"))]
fn open_fleet(
    _url: &str,
    _spider: &str,
    _settings: &Settings,
    _shutdown: &Shutdown,
) -> Result<FleetStore, Error> {
    Err(Error::new(
        ErrorKind::Settings,
        "redis_url is set, but this program was built without the `redis` feature of the \
         crawler crate (in Cargo.toml: crawler = { ..., features = [\"redis\"] })",
    ))
}

/// Without the `redis` feature no fleet store is ever made.
#[cfg(not(feature = "redis"))]
type FleetStore = std::convert::Infallible;

#[cfg(not(feature = "redis"))]
fn fleet_robots(store: &FleetStore) -> std::sync::Arc<dyn crawler_core::RobotsShare> {
    match *store {}
}

#[cfg(not(feature = "redis"))]
fn fleet_frontier(
    store: FleetStore,
    _allowed: Vec<String>,
    _settings: &Settings,
    _resolver: &Arc<crawler_http::Resolver>,
) -> WithAhead {
    match store {}
}

/// Log, once at start, that the address rules stop at a proxy (the `proxy` setting, or one
/// in the environment) unless `allow_unchecked_proxy` accepts it: the proxy resolves host
/// names itself, so only IP literals and metadata names can be checked.
#[doc(hidden)]
pub fn warn_unchecked_proxy(settings: &Settings) {
    if let Some(why) = crawler_http::unchecked_proxy(settings, crawler_http::process_env()) {
        tracing::warn!("{why}");
    }
}

type Stage<S> = Box<dyn FnOnce(HttpEngine<S>) -> HttpEngine<S> + Send>;

/// Something that follows a crawl's progress snapshots while it runs (see
/// [`Crawl::watch_progress`]).
type Watcher = Box<
    dyn FnOnce(
            tokio::sync::watch::Receiver<crawler_engine::Progress>,
        ) -> tokio::task::JoinHandle<()>
        + Send,
>;

/// Sets up a crawl of one spider: settings, feeds, pipelines.
pub struct Crawl<S: Spider> {
    spider: S,
    settings: Settings,
    overrides: Vec<(String, String)>,
    /// Feed files, and whether each is appended to (else replaced).
    feeds: Vec<(PathBuf, bool)>,
    stages: Vec<Stage<S>>,
    progress: bool,
    /// Draw the live display on a terminal instead of the progress log lines.
    live_progress: bool,
    /// Followers of the progress snapshots, stopped when the crawl ends.
    watchers: Vec<Watcher>,
    /// Validators and HTTP cache given in code; else opened from the settings.
    conditional: Option<Arc<dyn ConditionalStore>>,
    /// Downloader middlewares added in code, in order.
    downloader_middlewares: Vec<BoxedDownloaderMiddleware>,
    /// Spider middlewares added in code, in order.
    spider_middlewares: Vec<BoxedSpiderMiddleware<S::Item>>,
    /// Where the middlewares of the built engine report their counters.
    middleware_stats: MiddlewareStats,
    /// The spider's arguments, handed to [`Spider::open`] when the engine is built.
    args: Vec<(String, String)>,
    /// Where the politeness record goes, when not (only) in the job directory.
    politeness_record: Option<PathBuf>,
    /// Extensions added in code, in order.
    extensions: Vec<crawler_core::SharedExtension<S::Item>>,
}

impl<S: Spider> Crawl<S> {
    /// A crawl of `spider` with default settings.
    pub fn new(spider: S) -> Self {
        Self {
            spider,
            settings: Settings::default(),
            overrides: Vec::new(),
            feeds: Vec::new(),
            stages: Vec::new(),
            progress: true,
            live_progress: false,
            watchers: Vec::new(),
            conditional: None,
            downloader_middlewares: Vec::new(),
            spider_middlewares: Vec::new(),
            middleware_stats: MiddlewareStats::new(),
            args: Vec::new(),
            politeness_record: None,
            extensions: Vec::new(),
        }
    }

    /// Subscribe an extension to the crawl's signals (Scrapy's `EXTENSIONS`), after the
    /// ones already added: items scraped, dropped and failed in a pipeline, requests
    /// scheduled, dropped and sent, headers and responses received, the crawl opened, idle
    /// and closed. See [`Extension`] for each signal, and `examples/monitor.rs`. The ones
    /// added here sit where `custom` is in the `extensions` setting (by default before the
    /// built-in `monitor`).
    pub fn extension(mut self, extension: impl Extension<S::Item>) -> Self {
        self.extensions.push(Arc::new(extension));
        self
    }

    /// Give the spider an argument, as `crawl NAME -a key=value` does: the spider reads it
    /// in [`Spider::open`], before its start requests. An argument the spider does not read
    /// makes [`Crawl::build`] fail with [`ErrorKind::Argument`].
    pub fn arg(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.args.push((key.into(), value.into()));
        self
    }

    /// Give the spider several arguments (see [`Crawl::arg`]).
    pub fn args<K: Into<String>, V: Into<String>>(
        mut self,
        args: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.args
            .extend(args.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Record each host's traffic and politeness changes to `path` (JSON Lines, appended),
    /// for `crawler report`. With a job directory the record is kept there anyway, as
    /// `JOB_DIR/politeness.jsonl`; this path replaces it.
    pub fn politeness_record(mut self, path: impl Into<PathBuf>) -> Self {
        self.politeness_record = Some(path.into());
        self
    }

    /// Replace the base settings (the spider's `custom_settings` and [`Crawl::set`] apply on
    /// top).
    pub fn settings(mut self, settings: Settings) -> Self {
        self.settings = settings;
        self
    }

    /// Override one setting by key, as `-s key=value` does.
    pub fn set(mut self, key: &str, value: impl Into<String>) -> Self {
        self.overrides.push((key.to_owned(), value.into()));
        self
    }

    /// Write items to this file (format by extension: .jsonl, .json, .csv, .xml, .parquet, or
    /// after a colon: `items.txt:jsonl`), replacing what it held (a resumed job, or a fleet worker,
    /// appends instead). `-` writes JSON Lines to standard output. `%(name)s` and `%(time)s`
    /// in the path become the spider's name and the crawl's start time
    /// (`2024-05-21T12-33-41`, UTC). The path may be an object URL (`s3://bucket/key.jsonl`,
    /// `gs://`, `az://`) or a `file://` URL; with `feed_batch_items`, `%(batch_id)d` and
    /// `%(batch_time)s` name each batch.
    pub fn feed(self, path: impl Into<PathBuf>) -> Result<Self, Error> {
        self.add_feed(path.into(), false)
    }

    /// Append items to this file (format by extension), keeping what it holds: Scrapy's
    /// `-o`. A `.json` file is one closed array and cannot be appended to: that is refused
    /// here, before the crawl (use [`Crawl::feed`] to replace it, or `.jsonl`).
    pub fn append_feed(self, path: impl Into<PathBuf>) -> Result<Self, Error> {
        self.add_feed(path.into(), true)
    }

    fn add_feed(mut self, path: PathBuf, append: bool) -> Result<Self, Error> {
        let spec = FeedSpec::new(&path)?;
        if spec.is_stdout() {
            // Two writers on one stream would interleave their records.
            if self
                .feeds
                .iter()
                .any(|(p, _)| FeedSpec::new(p).is_ok_and(|s| s.is_stdout()))
            {
                return Err(Error::new(
                    ErrorKind::Settings,
                    "standard output ('-') can take one feed only",
                ));
            }
        } else if append
            && spec.format.is_closed_document()
            && !spec.is_batched()
            && !spec.is_object()
        {
            // (Batches and objects are kept whole: appending writes the ones after them.)
            return Err(Error::new(
                ErrorKind::Settings,
                format!(
                    "cannot append to the {} feed '{}' (one document, already closed): write \
                     .jsonl to append, or replace the file (-O instead of -o)",
                    spec.format.title(),
                    path.display()
                ),
            ));
        }
        self.feeds.push((path, append));
        Ok(self)
    }

    /// Add an item pipeline stage.
    pub fn pipeline(mut self, stage: impl Pipeline<S::Item>) -> Self {
        self.stages
            .push(Box::new(move |e: HttpEngine<S>| e.pipeline(stage)));
        self
    }

    /// Add a downloader middleware after the ones already added. Middlewares added in code
    /// sit where `custom` is in the `downloader_middlewares` setting (by default after the
    /// built-ins, nearest the network).
    pub fn downloader_middleware(mut self, middleware: impl DownloaderMiddleware) -> Self {
        self.downloader_middlewares.push(Box::new(middleware));
        self
    }

    /// Add a spider middleware after the ones already added. Middlewares added in code sit
    /// where `custom` is in the `spider_middlewares` setting (by default after the
    /// built-ins, nearest the spider, so they see its output first).
    pub fn spider_middleware(mut self, middleware: impl SpiderMiddleware<S::Item>) -> Self {
        self.spider_middlewares.push(Box::new(middleware));
        self
    }

    /// The counters of this crawl's middlewares, readable while and after it runs (
    /// [`Crawl::run`] also puts them in [`Stats::middlewares`]).
    pub fn middleware_stats(&self) -> MiddlewareStats {
        self.middleware_stats.clone()
    }

    /// Show progress while running (default on): a `progress:` log line every
    /// `progress_interval`.
    pub fn progress(mut self, on: bool) -> Self {
        self.progress = on;
        self
    }

    /// With progress on, draw a live display when stderr is a terminal instead of the log
    /// lines (default off; the `crawler` command's crawls turn it on). It needs the
    /// `live-progress` feature; without it the log lines are kept. See [`progress::spawn`].
    pub fn live_progress(mut self, on: bool) -> Self {
        self.live_progress = on;
        self
    }

    /// Hand the crawl's progress snapshots to `watcher` when [`Crawl::run`] starts the
    /// engine; the task it returns is aborted when the crawl ends. The `crawler` command's
    /// metrics endpoint is one.
    pub fn watch_progress(
        mut self,
        watcher: impl FnOnce(
            tokio::sync::watch::Receiver<crawler_engine::Progress>,
        ) -> tokio::task::JoinHandle<()>
        + Send
        + 'static,
    ) -> Self {
        self.watchers.push(Box::new(watcher));
        self
    }

    /// Keep validators (conditional requests, sitemap lastmod) and, if the store keeps
    /// responses, the HTTP cache in `store` instead of the database the settings would open
    /// (`cache_dir`, or `JOB_DIR/cache`). Useful for tests
    /// ([`MemoryConditional`](crawler_core::MemoryConditional)) and for sharing one store
    /// between crawls in one process.
    pub fn conditional_store(mut self, store: Arc<dyn ConditionalStore>) -> Self {
        self.conditional = Some(store);
        self
    }

    /// The effective settings: base, then the spider's own, then explicit overrides.
    pub fn effective_settings(&self) -> Result<Settings, Error> {
        let mut s = self.settings.clone();
        for (k, v) in self.spider.custom_settings() {
            s.set(k, &v)
                .map_err(|e| e.context(format!("spider '{}'", self.spider.name())))?;
        }
        for (k, v) in &self.overrides {
            s.set(k, v)?;
        }
        s.validate()?;
        Ok(s)
    }

    /// Take this crawl's settings from layered sources (defaults < settings file < the
    /// spider's `custom_settings` < `CRAWLER_*` environment < `-s`), as the runner does.
    /// Errors name the layer (and for the file, the line and column) that set a bad value.
    pub fn with_settings_layers(mut self, layers: &SettingsLayers) -> Result<Self, Error> {
        let custom = self.spider.custom_settings();
        let resolved = layers.resolve(Some((self.spider.name(), &custom)))?;
        self.settings = resolved.settings;
        // `effective_settings` re-applies the spider's settings over the base; the layers
        // above the spider's are re-applied after them, so precedence is kept.
        self.overrides.extend(layers.overrides());
        Ok(self)
    }

    /// Build the engine without running it (to get a shutdown handle or progress). The
    /// spider's [`Spider::open`] runs here, with its arguments and the effective settings.
    pub fn build(mut self) -> Result<HttpEngine<S>, Error> {
        // Validated, so its secrets are registered before anything logs: the spider's
        // `open` and the crawl's logs and errors never show them.
        let settings = self.effective_settings()?;
        crawler_core::open_spider(&mut self.spider, &settings, &self.args)?;
        warn_unchecked_proxy(&settings);
        // The built-in extensions the settings name, and ours where `custom` is.
        self.extensions =
            crawler_core::extension_stack(&settings, std::mem::take(&mut self.extensions))?;
        let shutdown = Shutdown::new();
        // A fleet's store first: the downloader shares robots.txt through it.
        let fleet = match &settings.redis_url {
            Some(url) => Some(open_fleet(url, self.spider.name(), &settings, &shutdown)?),
            None => None,
        };
        let mut downloader = HttpDownloader::new(&settings)?;
        // One resolver for the crawl: the downloader connects with it, the frontier keys with it.
        let resolver = Arc::clone(downloader.resolver());
        if let Some(store) = &fleet {
            downloader = downloader.with_robots_share(fleet_robots(store));
        }
        let started = std::time::SystemTime::now();
        // Opened before the first request, so a bad path costs nothing; the downloader hands
        // it every exchange, the engine closes it at the end.
        let warc = crawler_engine::warc::WarcConfig::from_settings(
            &settings,
            self.spider.name(),
            started,
        )?
        .map(crawler_engine::warc::WarcWriter::open)
        .transpose()?;
        if let Some(writer) = &warc {
            downloader = downloader.with_tap(writer.tap());
        }
        if !self.extensions.is_empty() {
            // Only with extensions: without, the downloader asks nothing when headers arrive.
            downloader = downloader.with_headers_hook(Arc::new(crawler_core::ExtensionHeaders(
                self.extensions.clone(),
            )));
        }
        let downloader = if settings.replay_warc.is_empty() {
            conditional::attach(downloader, &settings, self.conditional)?
        } else {
            // A replay: the archive answers pages and robots.txt alike, in place of the
            // network, the HTTP cache and validators. Indexed now, so a missing or damaged
            // file fails the crawl before it starts.
            let archive = Arc::new(crawler_engine::warc::WarcArchive::open(
                &settings.replay_warc,
            )?);
            tracing::info!(
                files = archive.files().len(),
                answers = archive.len(),
                "replaying from WARC: nothing goes to the network"
            );
            downloader
                .with_robots_share(Arc::clone(&archive) as Arc<dyn crawler_core::RobotsShare>)
                .with_store(archive)
        };
        let downloader = fetcher(downloader, &settings)?;
        let downloader = Middlewares::new(
            downloader,
            crawler_http::downloader_stack(&settings, self.downloader_middlewares)?,
        );
        downloader.register_stats(&self.middleware_stats);
        let spider = SpiderWithMiddlewares::new(
            self.spider,
            crawler_core::spider_stack(&settings, self.spider_middlewares)?,
        );
        spider.register_stats(&self.middleware_stats);
        let allowed = spider.allowed_domains();
        let record = self.politeness_record.clone().or_else(|| {
            let dir = settings.job_dir.as_ref()?;
            Some(std::path::Path::new(dir).join(crawler_sched::record::RECORD_FILE))
        });
        let (mut frontier, resuming, ahead) = if let Some(store) = fleet {
            // A fleet worker always appends to its feeds: when one is started again, the
            // fleet has already acknowledged the requests behind the items in them, so
            // erasing those items would lose them for good.
            let (frontier, ahead) = fleet_frontier(store, allowed, &settings, &resolver);
            (frontier, true, ahead)
        } else {
            let (store, resuming) = match &settings.job_dir {
                Some(dir) => open_job(dir, spider.name(), &allowed, &settings)?,
                None => (Box::new(MemoryStore::new()) as Box<dyn QueueStore>, false),
            };
            let mut config = FrontierConfig::from_settings(&settings, allowed);
            let ahead = attach_resolver(&mut config, &resolver);
            let frontier = Frontier::with_store(config, store);
            (FleetFrontier::solo(frontier), resuming, ahead)
        };
        let name = spider.name().to_owned();
        if let Some(path) = record {
            // A report is a bonus: a crawl that cannot keep one still runs.
            match crawler_sched::Recorder::open(&path) {
                Ok(recorder) => frontier.record_to(recorder),
                Err(e) => tracing::warn!(
                    path = %path.display(),
                    "cannot open the politeness record, the crawl goes on without it: {e}"
                ),
            }
        }
        let mut engine =
            Engine::new(spider, downloader, frontier, settings).with_shutdown(shutdown);
        if let Some(ahead) = ahead {
            engine = engine.resolve_ahead(ahead);
        }
        engine = engine.dns(resolver.clone());
        if let Some(writer) = warc {
            engine = engine.warc(writer);
        }
        for (path, append) in self.feeds {
            // `%(name)s` and `%(time)s`, as in Scrapy's feed URIs.
            let path = match path.to_str() {
                Some(text) => PathBuf::from(crawler_core::expand_feed_path(text, &name, started)?),
                None => path,
            };
            // A resumed job (or a fleet worker) adds to the feeds of the runs before it.
            let spec = FeedSpec::new(path)?;
            engine = engine.feed(if resuming || append {
                spec.append()
            } else {
                spec
            });
        }
        for stage in self.stages {
            engine = stage(engine);
        }
        for extension in self.extensions {
            engine = engine.shared_extension(extension);
        }
        Ok(engine)
    }

    /// Run to completion with Ctrl-C handling and progress, returning the final stats. The
    /// one run path: the command lines' crawls run through it too.
    pub async fn run(mut self) -> Result<Stats, Error> {
        let show = self.progress;
        let live = self.live_progress;
        let watchers = std::mem::take(&mut self.watchers);
        let settings = self.effective_settings()?;
        if settings.log_level != Settings::default().log_level {
            // Logging was set up before these settings were read (`init_logging` at the top
            // of `main`); a level the crawl asks for is applied now.
            set_log_level(&settings.log_level);
        }
        warn_default_user_agent(&settings);
        let middleware_stats = self.middleware_stats();
        let engine = self.build()?.handle_ctrl_c(true);
        let progress = show.then(|| {
            let rx = engine.progress();
            if live {
                progress::spawn(rx, settings.progress_interval)
            } else {
                progress::spawn_log_lines(rx, settings.progress_interval)
            }
        });
        let watchers: Vec<_> = watchers.into_iter().map(|w| w(engine.progress())).collect();
        let stats = run_engine(engine).await.map(|mut stats| {
            stats.middlewares = middleware_stats.snapshot();
            for (name, counters) in &stats.middlewares {
                tracing::info!(middleware = %name, ?counters, "middleware stats");
            }
            stats
        });
        // Followed to the end, the crawl failed or not (a live display is cleared before the
        // caller prints anything).
        if let Some(p) = progress {
            let _ = p.await;
        }
        for w in watchers {
            w.abort();
        }
        let stats = stats?;
        if stats.pending > 0 {
            match &settings.job_dir {
                Some(dir) => tracing::warn!(
                    pending = stats.pending,
                    "crawl paused; run the same command again (job dir {dir}) to resume"
                ),
                None => tracing::warn!(
                    pending = stats.pending,
                    "crawl stopped early; set job_dir (--job-dir) to be able to resume"
                ),
            }
        }
        Ok(stats)
    }
}

/// Warn once, at crawl start, that the User-Agent was never set: operators who see the crawl
/// in their logs cannot tell whose it is or how to reach them.
#[doc(hidden)]
pub fn warn_default_user_agent(settings: &Settings) {
    if settings.has_default_user_agent() {
        tracing::warn!(
            user_agent = %settings.user_agent,
            "user_agent is still the default; set it to name your crawler and a contact \
             (crawler.toml [general] user_agent = \"mybot/1.0 (+https://example.com/bot)\")"
        );
    }
}

#[cfg(test)]
mod tests {
    /// Without the `browser` feature, asking for rendering in the settings is an error that
    /// names the feature, for the whole crawl and for a host.
    #[cfg(not(feature = "browser"))]
    #[test]
    fn render_without_the_browser_feature_is_refused() {
        use crawler_core::{Output, Response, Spider};
        struct Nothing;
        impl Spider for Nothing {
            type Item = ();
            fn name(&self) -> &str {
                "nothing"
            }
            async fn parse(&self, _: Response, _: &mut Output<()>) -> crawler_core::Result<()> {
                Ok(())
            }
        }
        let e = super::Crawl::new(Nothing)
            .set("render", "true")
            .build()
            .err()
            .expect("refused");
        assert!(e.to_string().contains("`browser` feature"), "{e}");
        let e = super::Crawl::new(Nothing)
            .set("hosts", r#"[{"match":"js.example","render":true}]"#)
            .build()
            .err()
            .expect("refused");
        assert!(e.to_string().contains("`browser` feature"), "{e}");
        assert!(super::Crawl::new(Nothing).build().is_ok());
    }
}
