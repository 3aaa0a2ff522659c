//! The engine: the loop that asks the scheduler what is ready, downloads it, runs the spider
//! and the pipelines, writes the feeds, and accounts for every request.
//!
//! This folder owns a crawl from its first request to its final stats: what a crawl is and
//! how it is built (here), the main loop (`run`), what happens when a worker ends
//! (`settle`: accounting and acknowledgement), the per-request worker (`worker`: a 3xx
//! becomes its next hop by crawler-core's redirect rule and goes back through the frontier),
//! the retry policy (`retry`), the feed writer thread (`feeds`), the debug line per answered
//! request (`request_log`) and stopping on a signal (`signals`). It
//! speaks no HTTP and keeps no frontier of its own: downloads go through the [`Downloader`],
//! order and politeness through the [`Scheduler`];
//! the only files it writes are the feeds and the failures file.

use std::sync::Arc;

use tokio::sync::watch;

use crawler_core::FeedSpec;
use crawler_core::Settings;
use crawler_core::Spider;
use crawler_core::{Downloader, Scheduler};
use crawler_core::{DynPipeline, Pipeline};
use crawler_core::{Extension, SharedExtension};
use crawler_core::{Shutdown, Stats};

mod extensions;
mod feeds;
mod late;
mod request_log;
mod retry;
mod run;
mod settle;
mod signals;
mod subrequests;
#[cfg(test)]
mod tests;
mod worker;

/// Hosts in each progress snapshot (and so in the live display, the metrics and the saved
/// stats): the busiest ones. A crawl touching 100,000 hosts must not copy 100,000 records
/// four times a second, nor export 100,000 metric series.
pub const PROGRESS_HOSTS: usize = 50;
/// Hosts in the final stats: the busiest ones, a generous cap that still bounds the report.
pub const FINAL_HOSTS: usize = 1000;

/// A snapshot of a running crawl, for progress displays.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// Counters so far.
    pub stats: Stats,
    /// Requests waiting in the frontier.
    pub queued: usize,
    /// Requests being downloaded or parsed.
    pub in_flight: usize,
    /// Whether scheduling has stopped because a shutdown was asked for.
    pub stopping: bool,
    /// Whether the crawl is over.
    pub finished: bool,
}

/// Runs one spider to completion.
pub struct Engine<S: Spider, D: Downloader, Q: Scheduler> {
    spider: Arc<S>,
    downloader: Arc<D>,
    scheduler: Q,
    settings: Settings,
    pipelines: Vec<Box<dyn DynPipeline<S::Item>>>,
    feeds: Vec<FeedSpec>,
    shutdown: Shutdown,
    progress: watch::Sender<Progress>,
    handle_ctrl_c: bool,
    /// The WARC writer whose tap the downloader holds, closed when the crawl ends.
    warc: Option<crate::warc::WarcWriter>,
    /// Names resolved before their requests reach the scheduler (see
    /// [`Engine::resolve_ahead`]).
    resolve_ahead: Option<Arc<dyn crawler_core::dns::ResolveAhead>>,
    /// The crawl's resolver, whose counts go in the stats (see [`Engine::dns`]).
    dns: Option<Arc<dyn crawler_core::dns::NameCache>>,
    /// Extensions subscribed to the crawl's signals, in the order added.
    extensions: Vec<SharedExtension<S::Item>>,
}

impl<S: Spider, D: Downloader, Q: Scheduler> Engine<S, D, Q> {
    /// An engine for `spider`, fetching with `downloader` in the order `scheduler` decides.
    pub fn new(spider: S, downloader: D, scheduler: Q, settings: Settings) -> Self {
        Self {
            spider: Arc::new(spider),
            downloader: Arc::new(downloader),
            scheduler,
            settings,
            pipelines: Vec::new(),
            feeds: Vec::new(),
            shutdown: Shutdown::new(),
            progress: watch::channel(Progress::default()).0,
            handle_ctrl_c: false,
            warc: None,
            resolve_ahead: None,
            dns: None,
            extensions: Vec::new(),
        }
    }

    /// Resolve the names of requests with `ahead` before they reach the scheduler: the
    /// start requests' before the first is queued, each page's follow-ups in its worker
    /// (concurrently, never on the engine's loop). A scheduler that keys hosts by address
    /// then reads every answer from the resolver's cache instead of waiting for one.
    pub fn resolve_ahead(mut self, ahead: Arc<dyn crawler_core::dns::ResolveAhead>) -> Self {
        self.resolve_ahead = Some(ahead);
        self
    }

    /// Count what `resolver` (the crawl's resolver) does in the stats ([`Stats::dns`]:
    /// lookups sent, names answered from its cache, failures), in the progress snapshots
    /// (so the metrics endpoint) and the final stats.
    ///
    /// [`Stats::dns`]: crawler_core::Stats::dns
    pub fn dns(mut self, resolver: Arc<dyn crawler_core::dns::NameCache>) -> Self {
        self.dns = Some(resolver);
        self
    }

    /// Subscribe an extension to the crawl's signals, after the ones already added (see
    /// [`Extension`]).
    pub fn extension(self, extension: impl Extension<S::Item>) -> Self {
        self.shared_extension(std::sync::Arc::new(extension))
    }

    /// [`Engine::extension`] for an extension the downloader shares too (its
    /// [`headers_received`](Extension::headers_received) is the downloader's to call).
    pub fn shared_extension(mut self, extension: SharedExtension<S::Item>) -> Self {
        self.extensions.push(extension);
        self
    }

    /// Close `writer` when the crawl ends (after the last download), and count its records
    /// in the stats (`warc_records`). The downloader must hold its
    /// [`tap`](crate::warc::WarcWriter::tap).
    pub fn warc(mut self, writer: crate::warc::WarcWriter) -> Self {
        self.warc = Some(writer);
        self
    }

    /// Add a pipeline stage after the ones already added.
    pub fn pipeline(mut self, stage: impl Pipeline<S::Item>) -> Self {
        self.pipelines.push(Box::new(stage));
        self
    }

    /// Write items to a feed as well.
    pub fn feed(mut self, spec: FeedSpec) -> Self {
        self.feeds.push(spec);
        self
    }

    /// Stop gracefully on Ctrl-C, and on SIGTERM (how systemd, Docker and Kubernetes stop
    /// a service) on Unix: the first signal finishes the requests in flight and leaves a
    /// resumable job; a second one, at any point (the final drain included), stops at once.
    pub fn handle_ctrl_c(mut self, yes: bool) -> Self {
        self.handle_ctrl_c = yes;
        self
    }

    /// Use `shutdown` as this crawl's stop handle: parts built before the engine (a Redis
    /// frontier, whose retries during an outage must notice Ctrl-C) can watch it.
    pub fn with_shutdown(mut self, shutdown: Shutdown) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// A handle that stops the crawl, like Ctrl-C.
    pub fn shutdown_handle(&self) -> Shutdown {
        self.shutdown.clone()
    }

    /// Progress snapshots, refreshed a few times a second while the crawl runs.
    pub fn progress(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }
}
