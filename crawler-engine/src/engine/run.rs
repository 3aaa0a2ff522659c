//! The crawl's life: open everything, run the main loop (start workers on what is ready,
//! then wait for the next event and handle it), and finally drain the feeds and settle the
//! stats. What happens when a worker ends is in `settle`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::{JoinError, JoinHandle, JoinSet};
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::feeds::{FeedMsg, FeedThread};
use super::retry::RetryPolicy;
use super::settle::{acknowledge, busiest, offer, run_durable};
use super::signals::{listen_for_signals, second_stop};
use super::subrequests::{Subs, sub_id};
use super::worker::{Completion, Ctx, Report, work};
use super::{Engine, FINAL_HOSTS, PROGRESS_HOSTS, Progress};
use crate::failures::FailureLog;
use crate::feed_writer::FeedWriter;
use crawler_core::AfterAck;
use crawler_core::DynPipeline;
use crawler_core::FeedSpec;
use crawler_core::Shutdown;
use crawler_core::Spider;
use crawler_core::{CLOSE_ERROR, CLOSE_FINISHED, CLOSE_STOPPED, Stats};
use crawler_core::{Downloader, Feedback, Lease, Next, Scheduler};
use crawler_core::{Error, ErrorKind, Result};
use crawler_core::{FeedFsync, Settings};

/// How often the progress snapshot is refreshed.
const PROGRESS_TICK: Duration = Duration::from_millis(250);
/// How often stats are saved and a persistent frontier is made durable.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// Acknowledged pages whose work (validators, cached bodies) may wait for a checkpoint
/// before one is made early, to bound the memory they hold.
const MAX_WAITING_FOR_CHECKPOINT: usize = 1024;

impl<S: Spider, D: Downloader, Q: Scheduler> Engine<S, D, Q> {
    /// Run the crawl until the frontier is empty or a shutdown is asked for, then flush the
    /// feeds and return the final stats.
    ///
    /// A request's lease is acknowledged only once its follow-up requests are queued and its
    /// items are flushed to the feeds, so with a persistent frontier a crash (even `kill -9`)
    /// loses nothing: unacknowledged requests are fetched again on resume, and the only
    /// duplicates in the feeds are items of requests that were in flight.
    pub async fn run(self) -> Result<Stats> {
        let mut crawl = Crawl::open(self).await?;
        crawl.main_loop().await;
        crawl.finish().await
    }
}

/// A crawl under way: what the steps of the main loop read and change.
pub(super) struct Crawl<S: Spider, D: Downloader, Q: Scheduler> {
    pub(super) scheduler: Q,
    settings: Settings,
    shutdown: Shutdown,
    progress: watch::Sender<Progress>,
    /// The Ctrl-C and SIGTERM listener, when the engine handles them.
    signals: Option<JoinHandle<()>>,
    pub(super) stats: Stats,
    pub(super) failures: Option<FailureLog>,
    /// What the workers share.
    pub(super) ctx: Arc<Ctx<S, D>>,
    /// Without a feed, items end after the pipelines: sending each one to the writer
    /// thread (a wake-up per item) and waiting for its flush would buy nothing.
    pub(super) has_feeds: bool,
    feed: FeedThread<S::Item>,
    pub(super) retry: RetryPolicy,
    pub(super) tasks: JoinSet<Completion>,
    pub(super) leases: HashMap<tokio::task::Id, Lease>,
    /// Errback turns at requests set aside with their skipped host (they hold no lease).
    pub(super) skipped_turns: std::collections::HashSet<tokio::task::Id>,
    /// Workers report what a response told its host's slot the moment it arrives, before
    /// the spider parses it: with several requests in flight to one host, a `remaining=0`
    /// or a Retry-After must stop the next send even while a slow parse runs.
    pub(super) feedback_tx: mpsc::UnboundedSender<(Lease, Feedback)>,
    pub(super) feedback_rx: mpsc::UnboundedReceiver<(Lease, Feedback)>,
    pub(super) reported: HashSet<Lease>,
    /// Fetched pages whose items must reach the feeds before their lease is acknowledged;
    /// the marker goes through the same channel as the items, after them.
    pub(super) marks: VecDeque<Lease>,
    /// Work deferred until a lease is acknowledged (validators of pages whose items are
    /// still on their way to the feeds).
    pub(super) after_acks: HashMap<u64, AfterAck>,
    /// Work of acknowledged leases, run after the next checkpoint (see
    /// [`super::settle::run_durable`]).
    pub(super) durable_after: Vec<AfterAck>,
    stop_rx: watch::Receiver<u32>,
    pub(super) stopping: bool,
    pub(super) abandoned: u64,
    fatal: Option<Error>,
    /// The feed writer ended before the crawl did: it failed, and the crawl stops.
    feed_gone: bool,
    started: Instant,
    /// Time spent by the runs of this job before this one.
    elapsed_before: Duration,
    /// The crawl's resolver, counted in the stats (see [`Engine::dns`]).
    dns: Option<Arc<dyn crawler_core::dns::NameCache>>,
    /// The resolver's counts of the runs of this job before this one.
    dns_before: crawler_core::dns::DnsStats,
    ticker: Interval,
    last_checkpoint: Instant,
    /// Why the crawl is closing, once something asked it to (see [`Stats::close_reason`]).
    close_reason: Option<String>,
    /// The counters when this run began: the close limits count from them, so a resumed
    /// job's limits apply to the run, not to the whole job.
    at_start: Counts,
    /// When `close_timeout` closes the crawl.
    deadline: Option<Instant>,
    /// The WARC writer, closed at the end (see [`Engine::warc`]).
    warc: Option<crate::warc::WarcWriter>,
    /// Requests the downloader makes for the pages it answers (see `subrequests`).
    pub(super) subs: Subs,
    /// Workers of pages the downloader renders, from their hand-out to their end: at
    /// [`Downloader::render_limit`], no new page is handed out.
    pub(super) rendering: HashSet<tokio::task::Id>,
    /// Close requests from extensions ([`crawler_core::CrawlHandle::close_spider`]).
    ext_close_rx: mpsc::UnboundedReceiver<String>,
}

/// The counters the close limits watch.
#[derive(Debug, Clone, Copy)]
struct Counts {
    items: u64,
    pages: u64,
    errors: u64,
}

impl Counts {
    fn of(stats: &Stats) -> Self {
        Self {
            items: stats.items_scraped,
            pages: stats.status.values().sum(),
            errors: stats.spider_errors,
        }
    }
}

impl<S: Spider, D: Downloader, Q: Scheduler> Crawl<S, D, Q> {
    /// Check the settings, open the feeds, the pipelines and the failures file, start the
    /// feed writer (and the signal listener), and queue the start requests, or take up a
    /// resumed job where it stopped.
    async fn open(engine: Engine<S, D, Q>) -> Result<Self> {
        let Engine {
            spider,
            downloader,
            mut scheduler,
            settings,
            pipelines,
            feeds,
            shutdown,
            progress,
            handle_ctrl_c,
            warc,
            resolve_ahead,
            dns,
            extensions,
        } = engine;
        settings.validate()?;
        let started = Instant::now();

        // Pipelines learn their crawl before they open: a stage that fetches (the files
        // pipeline) sends its requests through the crawl's sub-request channel.
        let subs = Subs::new();
        let context = crawler_core::PipelineContext::new(
            std::sync::Arc::new(settings.clone()),
            subs.handle.clone(),
        );
        for p in &pipelines {
            p.attach(&context);
        }
        let park_delivery = context.fetches();
        // Open everything fallible before the first request, so a bad path costs nothing.
        let writers = open_outputs(&feeds, &settings, &pipelines).await?;
        // Extensions read the stats from the progress snapshots, and close the crawl
        // through a channel the loop listens to (only when there are extensions).
        let (ext_close_tx, ext_close_rx) = mpsc::unbounded_channel::<String>();
        let snapshots = progress.subscribe();
        let handle =
            crawler_core::CrawlHandle::new(ext_close_tx, move || snapshots.borrow().stats.clone());
        let signals_ext = super::extensions::Signals::new(extensions, handle);
        open_spider_and_extensions(&*spider, &signals_ext).await?;
        let restored = scheduler.restored_stats();
        let failures = match &settings.failures_file {
            // A resumed job keeps the failures of the runs before it, and so does a fleet
            // worker started again: the fleet already acknowledged those requests.
            Some(path) => Some(FailureLog::from_settings(
                path,
                &settings,
                restored.is_some() || scheduler.is_shared(),
            )?),
            None => None,
        };
        let feed = FeedThread::spawn(writers, settings.feed_fsync == FeedFsync::Group);

        let signals = handle_ctrl_c.then(|| tokio::spawn(listen_for_signals(shutdown.clone())));

        let stats = first_stats(
            &*spider,
            &mut scheduler,
            restored,
            resolve_ahead.as_deref(),
            &signals_ext,
        )
        .await?;
        let elapsed_before = stats.elapsed;
        let dns_before = stats.dns;

        let has_feeds = !feeds.is_empty();
        // Read once: a spider's list does not change during its crawl.
        let statuses = crawler_core::StatusRules {
            spider: spider.allowed_statuses(),
            setting: settings.allowed_statuses.clone(),
        };
        let ctx = Arc::new(Ctx {
            spider,
            downloader,
            pipelines,
            items_tx: feed.items.clone(),
            has_feeds,
            max_redirects: settings.max_redirects,
            parked: AtomicUsize::new(0),
            park_delivery,
            parse_pool: Arc::new(tokio::sync::Semaphore::new(super::worker::parse_threads(
                &settings,
            ))),
            parse_limits: crawler_core::ParseLimits::from_settings(&settings),
            max_links: match settings.max_links_per_page {
                0 => usize::MAX,
                n => n,
            },
            queue_cap: super::settle::queue_cap(&settings),
            statuses,
            resolve_ahead,
            signals: signals_ext,
        });
        ctx.downloader.attach(subs.handle.clone());
        let (feedback_tx, feedback_rx) = mpsc::unbounded_channel::<(Lease, Feedback)>();
        let stop_rx = shutdown.subscribe();
        let stopping = shutdown.requested() > 0;
        let mut stats = stats;
        // A resumed job's saved stats carry the reason its last run closed.
        stats.close_reason.clear();
        let at_start = Counts::of(&stats);
        let deadline =
            (!settings.close_timeout.is_zero()).then(|| started + settings.close_timeout);
        let retry = RetryPolicy::from(&settings);
        let mut ticker = tokio::time::interval(PROGRESS_TICK);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Ok(Self {
            scheduler,
            settings,
            shutdown,
            progress,
            signals,
            stats,
            failures,
            ctx,
            has_feeds,
            feed,
            retry,
            tasks: JoinSet::new(),
            leases: HashMap::new(),
            skipped_turns: std::collections::HashSet::new(),
            feedback_tx,
            feedback_rx,
            reported: HashSet::new(),
            marks: VecDeque::new(),
            after_acks: HashMap::new(),
            durable_after: Vec::new(),
            stop_rx,
            stopping,
            abandoned: 0,
            fatal: None,
            feed_gone: false,
            started,
            elapsed_before,
            dns,
            dns_before,
            ticker,
            last_checkpoint: Instant::now(),
            close_reason: stopping.then(|| CLOSE_STOPPED.to_owned()),
            at_start,
            deadline,
            subs,
            rendering: HashSet::new(),
            warc,
            ext_close_rx,
        })
    }

    /// Until the frontier is empty (or a stop is asked for), every worker has reported and
    /// every flush marker is on its way to the feed writer.
    async fn main_loop(&mut self) {
        loop {
            if self.ctx.signals.any() {
                // An extension's close request counts before the next hand-out, not after
                // whatever event the loop happens to pick first.
                while let Ok(reason) = self.ext_close_rx.try_recv() {
                    self.close(reason);
                }
            }
            let wake = if self.stopping && self.subs.queued == 0 {
                None
            } else {
                self.start_workers()
            };
            if let Some(e) = self.scheduler.take_error() {
                tracing::error!("stopping: {e}");
                self.fatal.get_or_insert(e);
                self.stopping = true;
                self.close_reason
                    .get_or_insert_with(|| CLOSE_ERROR.to_owned());
            }
            if self.tasks.is_empty()
                && self.subs.tasks.is_empty()
                && self.marks.is_empty()
                && (self.stopping || wake.is_none())
                && !self.idle().await
            {
                // Requests set aside for a skipped host with no settle after them (start
                // requests of a host a fleet already skipped) end here, not silently; those
                // with an errback get their turn before the crawl ends.
                if !self.record_skipped() {
                    break;
                }
            }
            self.next_event(wake).await;
        }
    }

    /// Start a worker on each request the scheduler says may go now, up to the concurrency
    /// limit. Returns when the next one will be ready, if the scheduler said so.
    fn start_workers(&mut self) -> Option<Instant> {
        // Answers that arrived while the loop was busy elsewhere go first: an answer can
        // move its host's next slot (a hold, or a send that left late), and a request
        // handed out before it is read would go at the old time.
        self.take_early_reports(Instant::now());
        // Workers parked in a render wait for sub-requests, not for the network, so they do
        // not count: the others finish on their own (a fetch, a parse), so a sub-request
        // waits at most for one of them, never for a page that waits for it.
        let render_limit = self.ctx.downloader.render_limit();
        loop {
            let parked = self.ctx.parked.load(Ordering::Relaxed);
            let active = self.tasks.len().saturating_sub(parked);
            // At the renderer's bound, the next pages wait in the frontier (a page fetched
            // now would wait for a tab in memory, its render's deadline running). Not only
            // the pages that render: which one does is known only once it is handed out,
            // and one handed out and given back would come out again at once.
            let renders_full = self.rendering.len() >= render_limit;
            let room = !self.stopping && !renders_full && active < self.settings.concurrency;
            // Stopping, or the renderer full: no new page, but the pages still rendering
            // need their sub-requests.
            let subs_only = (self.stopping || renders_full) && self.subs.queued > 0;
            if !room && !subs_only {
                break;
            }
            match self.scheduler.next(Instant::now()) {
                Next::Ready(lease, req) if sub_id(&req).is_some() => {
                    self.start_sub(lease, req, Arc::clone(&self.ctx));
                }
                Next::Ready(lease, req) if !room => {
                    // Unsent, so its slot gets the send back; and the loop ends here, as the
                    // same page would come out again at once (the ticker tries again).
                    self.give_back(lease, req);
                    break;
                }
                Next::Ready(lease, req) => {
                    let renders = self.ctx.downloader.renders(&req);
                    let report = Report {
                        lease,
                        tx: self.feedback_tx.clone(),
                    };
                    let handle = self.tasks.spawn(work(Arc::clone(&self.ctx), req, report));
                    self.leases.insert(handle.id(), lease);
                    if renders {
                        self.rendering.insert(handle.id());
                    }
                }
                Next::NotBefore(at) => return Some(at),
                Next::Empty => break,
            }
        }
        None
    }

    /// Wait for the next thing to happen and handle it: a worker ended, the feed channel has
    /// room for a flush marker, the writer released a lease, a worker reported early, the
    /// scheduler's next request is due (`wake`), a stop was asked for, or progress is due.
    async fn next_event(&mut self, wake: Option<Instant>) {
        tokio::select! {
            joined = self.tasks.join_next_with_id(), if !self.tasks.is_empty() => {
                self.joined(joined);
            }
            () = send_mark(&self.feed.items, &mut self.marks), if !self.marks.is_empty() => {}
            lease = self.feed.acks.recv(), if !self.feed_gone => match lease {
                Some(lease) => acknowledge(
                    &mut self.scheduler,
                    &mut self.after_acks,
                    &mut self.durable_after,
                    lease,
                ),
                None => {
                    // Only a failure ends the writer while the crawl still holds the
                    // items channel open.
                    self.feed_gone = true;
                    if !self.stopping {
                        tracing::error!("the feed writer stopped; stopping the crawl");
                    }
                    self.stopping = true;
                    self.close_reason.get_or_insert_with(|| CLOSE_ERROR.to_owned());
                }
            },
            Some(sub) = self.subs.rx.recv() => self.sub_arrived(sub),
            joined = self.subs.tasks.join_next_with_id(), if !self.subs.tasks.is_empty() => {
                self.sub_joined(joined);
            }
            Some((lease, fb)) = self.feedback_rx.recv() => {
                if self.reported.insert(lease) {
                    self.scheduler.complete(lease, &fb, Instant::now());
                }
            }
            _ = sleep_until(wake), if wake.is_some() => {}
            // Once stopping, the deadline has nothing left to stop (and must not fire again).
            () = sleep_until(self.deadline), if self.deadline.is_some() && !self.stopping => {
                self.close("close_timeout".to_owned());
            }
            changed = self.stop_rx.changed() => self.stop_asked(changed.is_ok()),
            Some(reason) = self.ext_close_rx.recv(), if self.ctx.signals.any() => {
                self.close(reason);
            }
            _ = self.ticker.tick() => self.tick(),
        }
    }

    /// The crawl is idle (nothing queued, nothing in flight) and about to close: give the
    /// extensions their `spider_idle` signal. Returns whether they queued more work, so
    /// the crawl goes on. Never called once the crawl is closing.
    async fn idle(&mut self) -> bool {
        if self.stopping || !self.ctx.signals.any() {
            return false;
        }
        // The handle's stats are exact at this point.
        self.tick();
        let ctx = Arc::clone(&self.ctx);
        let (list, crawl) = (ctx.signals.list(), ctx.signals.handle());
        let mut requests = Vec::new();
        for e in list {
            let more = tokio::select! {
                more = e.spider_idle(crawl) => more,
                changed = self.stop_rx.changed() => {
                    self.stop_asked(changed.is_ok());
                    Vec::new()
                }
            };
            requests.extend(more);
            // The first extension that adds work ends the round: one added after it (a
            // monitor judging the crawl's end) is asked only when the crawl is really out of
            // work.
            if self.stopping || !requests.is_empty() {
                break;
            }
        }
        // A close asked for during the signal (a monitor's verdict) is the crawl's reason.
        while let Ok(reason) = self.ext_close_rx.try_recv() {
            self.close(reason);
        }
        if self.stopping || requests.is_empty() {
            return false;
        }
        let before = self.stats.requests_enqueued - self.stats.filtered.values().sum::<u64>();
        let now = Instant::now();
        for req in requests {
            offer(&mut self.scheduler, &mut self.stats, req, now, &ctx.signals);
        }
        let after = self.stats.requests_enqueued - self.stats.filtered.values().sum::<u64>();
        // Requests all filtered (duplicates of pages crawled) add no work: the crawl closes
        // rather than asking again forever.
        let more = after > before;
        if more {
            tracing::info!(
                added = after - before,
                "the crawl was idle: extensions added requests"
            );
        }
        more
    }

    /// A stop was asked for (`changed` is false if the handle is gone): the first stops
    /// scheduling, the second abandons the requests in flight and the feed writer's backlog.
    fn stop_asked(&mut self, changed: bool) {
        let asked = if changed {
            *self.stop_rx.borrow_and_update()
        } else {
            1
        };
        self.stopping = asked >= 1;
        if self.stopping {
            // A close condition records its own reason before it asks to stop.
            self.close_reason
                .get_or_insert_with(|| CLOSE_STOPPED.to_owned());
        }
        if asked >= 2 {
            tracing::warn!(
                in_flight = self.tasks.len(),
                "stopping now; requests in flight stay pending"
            );
            self.tasks.abort_all();
            self.feed.abort.store(true, Ordering::Relaxed);
        }
    }

    /// Close the crawl for `reason` the way a first stop request does: no new requests, those
    /// in flight finish, the feeds are drained and what is still queued stays in the job
    /// directory for a resume. The first reason wins; a close after a Ctrl-C keeps
    /// `stopped`.
    pub(super) fn close(&mut self, reason: String) {
        let reason = if reason.trim().is_empty() {
            "closed by the spider".to_owned()
        } else {
            reason
        };
        // Through the stop handle, so everything watching it (a Redis frontier's retries, a
        // later Ctrl-C counted as the second request that stops at once) sees the same stop.
        let asked = self.shutdown.request_first();
        if self.close_reason.is_none() {
            let reason = if asked {
                reason
            } else {
                CLOSE_STOPPED.to_owned()
            };
            tracing::info!(
                reason = %reason,
                in_flight = self.tasks.len(),
                "closing the crawl: finishing the requests in flight"
            );
            self.close_reason = Some(reason);
        }
        self.stopping = true;
    }

    /// Close the crawl when a close limit (`close_item_count`, `close_page_count`,
    /// `close_error_count`) is reached; they count from the start of this run.
    pub(super) fn check_limits(&mut self) {
        if self.stopping {
            return;
        }
        let now = Counts::of(&self.stats);
        let reached =
            |limit: u64, count: u64, start: u64| limit > 0 && count.saturating_sub(start) >= limit;
        let s = &self.settings;
        let reason = if reached(s.close_item_count, now.items, self.at_start.items) {
            "close_item_count"
        } else if reached(s.close_page_count, now.pages, self.at_start.pages) {
            "close_page_count"
        } else if reached(s.close_error_count, now.errors, self.at_start.errors) {
            "close_error_count"
        } else {
            return;
        };
        self.close(reason.to_owned());
    }

    /// Refresh the progress snapshot and, once every [`CHECKPOINT_EVERY`], save the stats.
    fn tick(&mut self) {
        self.stats.elapsed = self.elapsed_before + self.started.elapsed();
        self.ctx.signals.drain_counters(&mut self.stats);
        if let Some(dns) = &self.dns {
            self.stats.dns = self.dns_before + dns.counts();
        }
        // Early too when much work waits for a checkpoint: it holds pages' bodies.
        if self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY
            || self.durable_after.len() >= MAX_WAITING_FOR_CHECKPOINT
        {
            // Per-host figures feed the live display and metrics; once a second
            // is plenty and keeps the cost off the hot path.
            self.stats.hosts = busiest(self.scheduler.host_stats(), PROGRESS_HOSTS);
            self.scheduler.checkpoint(&self.stats);
            run_durable(&mut self.durable_after);
            if let Some(log) = self.failures.as_mut() {
                log.flush();
            }
            self.last_checkpoint = Instant::now();
        }
        self.progress.send_replace(Progress {
            stats: self.stats.clone(),
            queued: self.scheduler.queued(),
            in_flight: self.tasks.len(),
            stopping: self.stopping,
            finished: false,
        });
    }

    /// After the loop: let the feed writer drain (unless a second stop cuts it short),
    /// acknowledge what reached the disk, close the pipelines and the failures file, and
    /// settle the final stats.
    async fn finish(mut self) -> Result<Stats> {
        self.count_blocked();
        let Crawl {
            mut scheduler,
            settings,
            shutdown,
            progress,
            signals,
            mut stats,
            failures,
            ctx,
            feed,
            mut after_acks,
            mut durable_after,
            mut stop_rx,
            stopping,
            abandoned,
            mut fatal,
            started,
            elapsed_before,
            dns,
            dns_before,
            close_reason,
            warc,
            ..
        } = self;
        let FeedThread {
            items,
            mut acks,
            abort,
            task,
        } = feed;
        drop(items);
        let Ok(ctx) = Arc::try_unwrap(ctx) else {
            return Err(Error::msg("internal error: a worker outlived the crawl"));
        };
        let Ctx {
            spider,
            pipelines,
            items_tx,
            signals: extensions,
            ..
        } = ctx;
        // Closing the channel lets the feed writer drain, close the JSON array and sync.
        drop(items_tx);
        if shutdown.requested() >= 2 {
            abort.store(true, Ordering::Relaxed);
        }
        let joined = wait_for_writer(task, &abort, &mut stop_rx).await;
        // Leases whose items reached the disk before the writer stopped.
        while let Ok(lease) = acks.try_recv() {
            acknowledge(&mut scheduler, &mut after_acks, &mut durable_after, lease);
        }
        let written = items_written(joined, &mut fatal);
        close_pipelines(&pipelines, &mut stop_rx).await;
        if let Some(s) = signals {
            s.abort();
        }
        if let Some(log) = failures {
            // An upload that fails keeps the local copy (named in the error) and fails the
            // crawl's result, as the WARC below, without cutting the rest of the closing short.
            match log.finish().await {
                Ok(n) => tracing::info!(
                    failed = n,
                    "failed requests listed in {}",
                    settings.failures_file.as_deref().unwrap_or("")
                ),
                Err(e) => {
                    tracing::error!("{e}");
                    fatal.get_or_insert(e);
                }
            }
        }
        if let Some(warc) = warc {
            // Every download is over: what the tap was handed is all there is.
            match warc.close().await {
                Ok(summary) => {
                    stats.warc_records = summary.records;
                    tracing::info!(
                        records = summary.records,
                        files = summary.files.len(),
                        "WARC written"
                    );
                }
                Err(e) => {
                    tracing::error!("the WARC archive is incomplete: {e}");
                    fatal.get_or_insert(e);
                }
            }
        }
        extensions.drain_counters(&mut stats);
        stats.pending = scheduler.queued() as u64 + abandoned;
        stats.hosts = busiest(scheduler.host_stats(), FINAL_HOSTS);
        stats.elapsed = elapsed_before + started.elapsed();
        if let Some(dns) = &dns {
            stats.dns = dns_before + dns.counts();
        }
        stats.close_reason = close_reason.unwrap_or_else(|| CLOSE_FINISHED.to_owned());
        debug_assert!(written <= stats.items_scraped);
        // Once, with the final stats, after the feeds and the pipelines are closed.
        if let Err(e) = spider.closed(&stats.close_reason, &stats).await {
            tracing::error!(
                spider = spider.name(),
                "the spider's closed hook failed: {e}"
            );
        }
        for e in extensions.list() {
            if let Err(err) = e.spider_closed(&stats.close_reason, &stats).await {
                tracing::error!(extension = e.name(), "spider_closed failed: {err}");
            }
        }
        // The final checkpoint keeps pending counts out: they are recomputed on resume.
        let mut saved = stats.clone();
        saved.pending = 0;
        scheduler.checkpoint(&saved);
        run_durable(&mut durable_after);
        progress.send_replace(Progress {
            stats: stats.clone(),
            queued: scheduler.queued(),
            in_flight: 0,
            stopping,
            finished: true,
        });
        if let Some(e) = fatal.or_else(|| scheduler.take_error()) {
            return Err(e);
        }
        if !stats.reconciles() && !scheduler.is_shared() {
            tracing::error!(
                ?stats,
                "terminal states do not add up to the requests enqueued"
            );
        }
        Ok(stats)
    }
}

/// Open the feeds' files, then the pipelines; the first failure ends the crawl before it
/// starts.
async fn open_outputs<I>(
    feeds: &[FeedSpec],
    settings: &Settings,
    pipelines: &[Box<dyn DynPipeline<I>>],
) -> Result<Vec<FeedWriter>> {
    let writers = feeds
        .iter()
        .map(|spec| FeedWriter::open_with(spec, settings))
        .collect::<Result<Vec<_>>>()?;
    for p in pipelines {
        p.open().await.map_err(|e| {
            Error::new(
                ErrorKind::Other,
                format!("pipeline {} failed to open: {e}", p.name()),
            )
        })?;
    }
    Ok(writers)
}

/// The stats a crawl starts from: a resumed job's saved ones, squared with its frontier, or
/// fresh ones once the spider's start requests are queued.
async fn first_stats<S: Spider, Q: Scheduler>(
    spider: &S,
    scheduler: &mut Q,
    restored: Option<Stats>,
    ahead: Option<&dyn crawler_core::dns::ResolveAhead>,
    signals: &super::extensions::Signals<S::Item>,
) -> Result<Stats> {
    let now = Instant::now();
    Ok(match restored {
        Some(mut saved) => {
            // The frontier is the truth about what is still to do; counters saved a
            // moment before a crash may lag it.
            saved.requests_enqueued = saved.terminal() + scheduler.queued() as u64;
            saved.pending = 0;
            tracing::info!(
                spider = spider.name(),
                queued = scheduler.queued(),
                "resuming a crawl"
            );
            saved
        }
        None => {
            let mut fresh = Stats::default();
            let start = spider.start_requests()?;
            if let Some(ahead) = ahead {
                ahead
                    .resolve_ahead(start.iter().map(|r| r.url.clone()).collect())
                    .await;
            }
            for req in start {
                offer(scheduler, &mut fresh, req, now, signals);
            }
            tracing::info!(
                spider = spider.name(),
                queued = scheduler.queued(),
                "crawl started"
            );
            fresh
        }
    })
}

/// The spider's [`Spider::opened`] hook, then each extension's `spider_opened`: the first
/// error fails the crawl before its first request, naming who failed.
async fn open_spider_and_extensions<S: Spider>(
    spider: &S,
    signals: &super::extensions::Signals<S::Item>,
) -> Result<()> {
    spider
        .opened()
        .await
        .map_err(|e| e.context(format!("spider '{}' failed to open", spider.name())))?;
    for e in signals.list() {
        e.spider_opened(signals.handle())
            .await
            .map_err(|err| err.context(format!("extension {} failed to open", e.name())))?;
    }
    Ok(())
}

/// Wait for the feed writer to finish; a second stop request makes it stop at once.
async fn wait_for_writer(
    mut feed_task: JoinHandle<Result<u64>>,
    abort: &AtomicBool,
    stop_rx: &mut watch::Receiver<u32>,
) -> std::result::Result<Result<u64>, JoinError> {
    tokio::select! {
        joined = &mut feed_task => joined,
        () = second_stop(stop_rx) => {
            tracing::warn!("stopping now: items not yet written are dropped, and their requests stay unacknowledged for a resume");
            abort.store(true, Ordering::Relaxed);
            // The writer checks the flag between items, so this is quick.
            feed_task.await
        }
    }
}

/// How many items the feed writer wrote; its failure, if it failed, becomes the crawl's.
fn items_written(
    joined: std::result::Result<Result<u64>, JoinError>,
    fatal: &mut Option<Error>,
) -> u64 {
    match joined {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => {
            tracing::error!("{e}");
            fatal.get_or_insert(e);
            0
        }
        Err(e) => {
            fatal.get_or_insert(Error::msg(format!("the feed writer crashed: {e}")));
            0
        }
    }
}

/// Close the pipelines in order; a second stop request stops waiting for them.
async fn close_pipelines<I>(
    pipelines: &[Box<dyn DynPipeline<I>>],
    stop_rx: &mut watch::Receiver<u32>,
) {
    for p in pipelines {
        tokio::select! {
            closed = p.close() => {
                if let Err(e) = closed {
                    tracing::error!(pipeline = p.name(), "pipeline failed to close: {e}");
                }
            }
            () = second_stop(stop_rx) => {
                tracing::warn!(pipeline = p.name(), "stopping now: not waiting for the pipeline to close");
            }
        }
    }
}

/// Send the oldest flush marker once the feed channel has room for it.
async fn send_mark<I>(items: &mpsc::Sender<FeedMsg<I>>, marks: &mut VecDeque<Lease>) {
    match items.reserve().await {
        Ok(permit) => {
            if let Some(lease) = marks.pop_front() {
                permit.send(FeedMsg::Flushed(lease));
            }
        }
        // The writer is gone: whether these items reached the disk is unknown,
        // so their leases stay open and a resume fetches the pages again.
        Err(_) => marks.clear(),
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}
