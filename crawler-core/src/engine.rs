//! The engine: the loop that asks the scheduler what is ready, downloads it, runs the spider
//! and the pipelines, writes the feeds, and accounts for every request.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::failures::{FailureLog, FailureRecord};
use crate::feed::{FeedSpec, FeedWriter};
use crate::fetch::{
    Admission, Download, Downloader, Failure, FailureKind, Feedback, Fetched, Lease, Next,
    Scheduler,
};
use crate::output::Output;
use crate::pipeline::{DynPipeline, Pipeline, Processed};
use crate::request::Request;
use crate::settings::{FeedFsync, Settings};
use crate::spider::Spider;
use crate::stats::Stats;

/// How often the progress snapshot is refreshed.
const PROGRESS_TICK: Duration = Duration::from_millis(250);
/// Hosts in each progress snapshot (and so in the live display, the metrics and the saved
/// stats): the busiest ones. A crawl touching 100,000 hosts must not copy 100,000 records
/// four times a second, nor export 100,000 metric series.
pub const PROGRESS_HOSTS: usize = 50;
/// Hosts in the final stats: the busiest ones, a generous cap that still bounds the report.
pub const FINAL_HOSTS: usize = 1000;
/// Items buffered between the workers and the feed writer; a slow disk slows the crawl
/// instead of growing memory.
const FEED_BUFFER: usize = 1024;
/// How often stats are saved and a persistent frontier is made durable.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);
/// The feed writer's group commit: how long written items may wait for their fsync (and
/// their requests for their acknowledgement). The job store hands its own writes to the disk
/// every 50 ms as well, so an acknowledgement is durable about 100 ms after its items were
/// written at most.
const GROUP_COMMIT: Duration = Duration::from_millis(50);

/// Asks a running crawl to stop. The first request stops scheduling and lets requests in
/// flight finish; the second abandons them (they stay counted as pending), and during the
/// final drain it stops writing the feeds at once (the requests whose items were not yet
/// written stay unacknowledged, so a resumed job fetches them again).
#[derive(Debug, Clone)]
pub struct Shutdown(Arc<watch::Sender<u32>>);

impl Default for Shutdown {
    fn default() -> Self {
        Self(Arc::new(watch::channel(0).0))
    }
}

impl Shutdown {
    /// A new, untriggered handle.
    pub fn new() -> Self {
        Self::default()
    }

    /// Ask the crawl to stop (again).
    pub fn request(&self) {
        self.0.send_modify(|n| *n += 1);
    }

    /// How many times a stop has been asked for.
    pub fn requested(&self) -> u32 {
        *self.0.borrow()
    }

    fn subscribe(&self) -> watch::Receiver<u32> {
        self.0.subscribe()
    }
}

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
        }
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

    /// Run the crawl until the frontier is empty or a shutdown is asked for, then flush the
    /// feeds and return the final stats.
    ///
    /// A request's lease is acknowledged only once its follow-up requests are queued and its
    /// items are flushed to the feeds, so with a persistent frontier a crash (even `kill -9`)
    /// loses nothing: unacknowledged requests are fetched again on resume, and the only
    /// duplicates in the feeds are items of requests that were in flight.
    pub async fn run(self) -> Result<Stats> {
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
        } = self;
        settings.validate()?;
        let started = Instant::now();

        // Open everything fallible before the first request, so a bad path costs nothing.
        let writers = feeds
            .iter()
            .map(FeedWriter::open)
            .collect::<Result<Vec<_>>>()?;
        for p in &pipelines {
            p.open().await.map_err(|e| {
                Error::new(
                    ErrorKind::Other,
                    format!("pipeline {} failed to open: {e}", p.name()),
                )
            })?;
        }
        let restored = scheduler.restored_stats();
        let mut failures = match &settings.failures_file {
            // A resumed job keeps the failures of the runs before it, and so does a fleet
            // worker started again: the fleet already acknowledged those requests.
            Some(path) => Some(FailureLog::open(
                std::path::Path::new(path),
                restored.is_some() || scheduler.is_shared(),
            )?),
            None => None,
        };
        let (items_tx, items_rx) = mpsc::channel::<FeedMsg<S::Item>>(FEED_BUFFER);
        let (acks_tx, mut acks_rx) = mpsc::unbounded_channel::<Lease>();
        // Set on a second stop request: the writer stops at once, acknowledging nothing more.
        let feed_abort = Arc::new(AtomicBool::new(false));
        let feed_task = {
            let fsync = settings.feed_fsync == FeedFsync::Group;
            let abort = Arc::clone(&feed_abort);
            tokio::task::spawn_blocking(move || {
                write_feeds(writers, items_rx, acks_tx, fsync, &abort)
            })
        };

        let signals = handle_ctrl_c.then(|| tokio::spawn(listen_for_signals(shutdown.clone())));

        let now = Instant::now();
        let mut stats = match restored {
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
                for req in spider.start_requests()? {
                    offer(&mut scheduler, &mut fresh, req, now);
                }
                tracing::info!(
                    spider = spider.name(),
                    queued = scheduler.queued(),
                    "crawl started"
                );
                fresh
            }
        };
        let elapsed_before = stats.elapsed;

        // Without a feed, items end after the pipelines: sending each one to the writer
        // thread (a wake-up per item) and waiting for its flush would buy nothing.
        let has_feeds = !feeds.is_empty();
        let ctx = Arc::new(Ctx {
            spider,
            downloader,
            pipelines,
            items_tx: items_tx.clone(),
            has_feeds,
            max_redirects: settings.max_redirects,
        });
        let mut tasks: JoinSet<Completion> = JoinSet::new();
        let mut leases: HashMap<tokio::task::Id, Lease> = HashMap::new();
        // Workers report what a response told its host's slot the moment it arrives, before
        // the spider parses it: with several requests in flight to one host, a `remaining=0`
        // or a Retry-After must stop the next send even while a slow parse runs.
        let (feedback_tx, mut feedback_rx) = mpsc::unbounded_channel::<(Lease, Feedback)>();
        let mut reported: std::collections::HashSet<Lease> = std::collections::HashSet::new();
        // Fetched pages whose items must reach the feeds before their lease is acknowledged;
        // the marker goes through the same channel as the items, after them.
        let mut marks: VecDeque<Lease> = VecDeque::new();
        // Work deferred until a lease is acknowledged (validators of pages whose items are
        // still on their way to the feeds).
        let mut after_acks: std::collections::HashMap<u64, crate::AfterAck> =
            std::collections::HashMap::new();
        let mut stop_rx = shutdown.subscribe();
        let mut stopping = shutdown.requested() > 0;
        let mut abandoned = 0u64;
        let mut fatal: Option<Error> = None;
        // The feed writer ended before the crawl did: it failed, and the crawl stops.
        let mut feed_gone = false;
        let retry = RetryPolicy::from(&settings);
        let mut ticker = tokio::time::interval(PROGRESS_TICK);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_checkpoint = Instant::now();

        loop {
            let mut wake = None;
            if !stopping {
                while tasks.len() < settings.concurrency {
                    match scheduler.next(Instant::now()) {
                        Next::Ready(lease, req) => {
                            let report = Report {
                                lease,
                                tx: feedback_tx.clone(),
                            };
                            let handle = tasks.spawn(work(Arc::clone(&ctx), req, report));
                            leases.insert(handle.id(), lease);
                        }
                        Next::NotBefore(at) => {
                            wake = Some(at);
                            break;
                        }
                        Next::Empty => break,
                    }
                }
            }
            if let Some(e) = scheduler.take_error() {
                tracing::error!("stopping: {e}");
                fatal.get_or_insert(e);
                stopping = true;
            }
            if tasks.is_empty() && marks.is_empty() && (stopping || wake.is_none()) {
                break;
            }
            tokio::select! {
                joined = tasks.join_next_with_id(), if !tasks.is_empty() => {
                    let (id, mut done) = match joined {
                        Some(Ok((id, done))) => (id, done),
                        Some(Err(e)) if e.is_cancelled() => {
                            // Abandoned on a second Ctrl-C: the lease stays open, so a
                            // persistent frontier fetches the request again on resume.
                            leases.remove(&e.id());
                            abandoned += 1;
                            continue;
                        }
                        Some(Err(e)) => (e.id(), Completion::panicked(&e)),
                        None => continue,
                    };
                    let now = Instant::now();
                    let Some(lease) = leases.remove(&id) else { continue };
                    // The worker's early report may still sit in the channel.
                    while let Ok((early, fb)) = feedback_rx.try_recv() {
                        if reported.insert(early) {
                            scheduler.complete(early, &fb, now);
                        }
                    }
                    if !reported.remove(&lease) {
                        scheduler.complete(lease, &done.feedback, now);
                    }
                    if done.feed_closed {
                        // Some of its items never reached the feeds: the lease stays open,
                        // so a persistent frontier fetches the page again on resume.
                        if !stopping {
                            tracing::error!("the feed writer stopped; stopping the crawl");
                        }
                        stopping = true;
                        abandoned += 1;
                        continue;
                    }
                    if let Terminal::Requeued = done.terminal {
                        // Not an attempt: the page was not sent (robots.txt went in its
                        // place, or is unavailable and the host is held).
                        if let Some(req) = done.request.take() {
                            scheduler.retry(lease, req, now);
                        }
                    } else if let Some((req, at)) = retry.plan(&mut done, now) {
                        scheduler.retry(lease, req, at);
                        stats.retries += 1;
                    }
                    for (req, why) in scheduler.take_skipped() {
                        tracing::warn!(url = %req.url, "not fetched: {why}");
                        stats.skipped_host += 1;
                        if let Some(log) = failures.as_mut() {
                            log.record(&FailureRecord {
                                url: req.url.as_str(),
                                reason: FailureKind::HostSkipped.as_str(),
                                attempts: req.retries,
                                status: None,
                                message: &why,
                            });
                        }
                    }
                    let terminal = !matches!(done.terminal, Terminal::Retrying | Terminal::Requeued);
                    let wrote_items = has_feeds && done.items > 0;
                    let after_ack = done.after_ack.take();
                    account(&mut scheduler, &mut stats, &mut failures, done);
                    // Follow-up requests are queued now; items may still be on their way to
                    // the feeds.
                    if terminal {
                        if wrote_items {
                            marks.push_back(lease);
                            if let Some(work) = after_ack {
                                after_acks.insert(lease.0, work);
                            }
                        } else {
                            scheduler.acknowledge(lease);
                            if let Some(work) = after_ack {
                                work.run();
                            }
                        }
                    }
                }
                permit = items_tx.reserve(), if !marks.is_empty() => match permit {
                    Ok(permit) => {
                        if let Some(lease) = marks.pop_front() {
                            permit.send(FeedMsg::Flushed(lease));
                        }
                    }
                    // The writer is gone: whether these items reached the disk is unknown,
                    // so their leases stay open and a resume fetches the pages again.
                    Err(_) => marks.clear(),
                },
                lease = acks_rx.recv(), if !feed_gone => match lease {
                    Some(lease) => {
                        scheduler.acknowledge(lease);
                        if let Some(work) = after_acks.remove(&lease.0) {
                            work.run();
                        }
                    }
                    None => {
                        // Only a failure ends the writer while the crawl still holds the
                        // items channel open.
                        feed_gone = true;
                        if !stopping {
                            tracing::error!("the feed writer stopped; stopping the crawl");
                        }
                        stopping = true;
                    }
                },
                Some((lease, fb)) = feedback_rx.recv() => {
                    if reported.insert(lease) {
                        scheduler.complete(lease, &fb, Instant::now());
                    }
                }
                _ = sleep_until(wake), if wake.is_some() => {}
                changed = stop_rx.changed() => {
                    let asked = if changed.is_ok() { *stop_rx.borrow_and_update() } else { 1 };
                    stopping = asked >= 1;
                    if asked >= 2 {
                        tracing::warn!(in_flight = tasks.len(), "stopping now; requests in flight stay pending");
                        tasks.abort_all();
                        feed_abort.store(true, Ordering::Relaxed);
                    }
                }
                _ = ticker.tick() => {
                    stats.elapsed = elapsed_before + started.elapsed();
                    if last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
                        // Per-host figures feed the live display and metrics; once a second
                        // is plenty and keeps the cost off the hot path.
                        stats.hosts = busiest(scheduler.host_stats(), PROGRESS_HOSTS);
                        scheduler.checkpoint(&stats);
                        if let Some(log) = failures.as_mut() {
                            log.flush();
                        }
                        last_checkpoint = Instant::now();
                    }
                    progress.send_replace(Progress {
                        stats: stats.clone(),
                        queued: scheduler.queued(),
                        in_flight: tasks.len(),
                        stopping,
                        finished: false,
                    });
                }
            }
        }

        drop(items_tx);
        let Ok(ctx) = Arc::try_unwrap(ctx) else {
            return Err(Error::msg("internal error: a worker outlived the crawl"));
        };
        let Ctx {
            pipelines,
            items_tx,
            ..
        } = ctx;
        // Closing the channel lets the feed writer drain, close the JSON array and sync.
        drop(items_tx);
        if shutdown.requested() >= 2 {
            feed_abort.store(true, Ordering::Relaxed);
        }
        let mut feed_task = feed_task;
        let joined = tokio::select! {
            joined = &mut feed_task => joined,
            () = second_stop(&mut stop_rx) => {
                tracing::warn!("stopping now: items not yet written are dropped, and their requests stay unacknowledged for a resume");
                feed_abort.store(true, Ordering::Relaxed);
                // The writer checks the flag between items, so this is quick.
                feed_task.await
            }
        };
        // Leases whose items reached the disk before the writer stopped.
        while let Ok(lease) = acks_rx.try_recv() {
            scheduler.acknowledge(lease);
            if let Some(work) = after_acks.remove(&lease.0) {
                work.run();
            }
        }
        let written = match joined {
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
        };
        for p in &pipelines {
            tokio::select! {
                closed = p.close() => {
                    if let Err(e) = closed {
                        tracing::error!(pipeline = p.name(), "pipeline failed to close: {e}");
                    }
                }
                () = second_stop(&mut stop_rx) => {
                    tracing::warn!(pipeline = p.name(), "stopping now: not waiting for the pipeline to close");
                }
            }
        }
        if let Some(s) = signals {
            s.abort();
        }
        if let Some(log) = failures {
            let n = log.finish()?;
            tracing::info!(
                failed = n,
                "failed requests listed in {}",
                settings.failures_file.as_deref().unwrap_or("")
            );
        }
        stats.pending = scheduler.queued() as u64 + abandoned;
        stats.hosts = busiest(scheduler.host_stats(), FINAL_HOSTS);
        stats.elapsed = elapsed_before + started.elapsed();
        debug_assert!(written <= stats.items_scraped);
        // The final checkpoint keeps pending counts out: they are recomputed on resume.
        let mut saved = stats.clone();
        saved.pending = 0;
        scheduler.checkpoint(&saved);
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

/// The `n` busiest hosts (most queued, then most requests, then most holds), in that order.
fn busiest(mut hosts: Vec<crate::fetch::HostStats>, n: usize) -> Vec<crate::fetch::HostStats> {
    let key = |h: &crate::fetch::HostStats| std::cmp::Reverse((h.queued, h.requests, h.holds));
    if hosts.len() > n {
        // Partition in linear time, then sort only what is kept.
        hosts.select_nth_unstable_by_key(n, key);
        hosts.truncate(n);
        hosts.shrink_to_fit();
    }
    hosts.sort_by_key(key);
    hosts
}

/// Resolves once a stop has been asked for twice (at once if it already has been).
async fn second_stop(rx: &mut watch::Receiver<u32>) {
    while *rx.borrow_and_update() < 2 {
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Turn Ctrl-C and (on Unix) SIGTERM into stop requests, for as long as the crawl runs.
async fn listen_for_signals(shutdown: Shutdown) {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    loop {
        #[cfg(unix)]
        let name = tokio::select! {
            r = tokio::signal::ctrl_c() => match r {
                Ok(()) => "interrupt",
                Err(_) => return,
            },
            Some(()) = async {
                match term.as_mut() {
                    Some(t) => t.recv().await,
                    None => std::future::pending().await,
                }
            } => "SIGTERM",
        };
        #[cfg(not(unix))]
        let name = match tokio::signal::ctrl_c().await {
            Ok(()) => "interrupt",
            Err(_) => return,
        };
        shutdown.request();
        if shutdown.requested() == 1 {
            tracing::warn!(
                "{name}: stopping: finishing requests in flight, then the job can be resumed \
                 (send it again to stop now)"
            );
        } else {
            tracing::warn!("{name} again: stopping now");
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(at).await;
    }
}

fn offer<Q: Scheduler>(scheduler: &mut Q, stats: &mut Stats, req: Request, now: Instant) {
    stats.requests_enqueued += 1;
    if let Admission::Filtered(reason) = scheduler.enqueue(req, now) {
        Stats::bump(&mut stats.filtered, reason.as_str());
    }
}

fn account<Q: Scheduler>(
    scheduler: &mut Q,
    stats: &mut Stats,
    failures: &mut Option<FailureLog>,
    done: Completion,
) {
    match done.terminal {
        Terminal::Fetched => stats.fetched += 1,
        Terminal::NotModified => stats.not_modified += 1,
        Terminal::Disallowed => stats.disallowed += 1,
        Terminal::Redirected => stats.redirected += 1,
        Terminal::Failed(kind) => {
            Stats::bump(&mut stats.failed, kind.as_str());
            if let (Some(log), Some(req)) = (failures.as_mut(), &done.request) {
                // A failed redirect hop is reported under the URL that was asked for; the hop
                // that failed goes in the message.
                let (url, message) = match req.redirect_urls.first() {
                    Some(first) => (
                        first.as_str(),
                        format!(
                            "{} (at {} after {} redirects)",
                            done.message,
                            req.url,
                            req.redirect_urls.len()
                        ),
                    ),
                    None => (req.url.as_str(), done.message.clone()),
                };
                log.record(&FailureRecord {
                    url,
                    reason: kind.as_str(),
                    attempts: req.retries + 1,
                    status: done.status,
                    message: &message,
                });
            }
        }
        Terminal::Retrying | Terminal::Requeued => {}
    }
    if let Some(status) = done.status {
        *stats.status.entry(status).or_default() += 1;
    }
    stats.response_bytes += done.bytes;
    stats.items_scraped += done.items;
    stats.items_dropped += done.dropped;
    stats.invalid_links += done.invalid_links;
    stats.spider_errors += u64::from(done.spider_error);
    let now = Instant::now();
    for req in done.requests {
        offer(scheduler, stats, req, now);
    }
}

/// What workers share.
struct Ctx<S: Spider, D> {
    spider: Arc<S>,
    downloader: Arc<D>,
    pipelines: Vec<Box<dyn DynPipeline<S::Item>>>,
    items_tx: mpsc::Sender<FeedMsg<S::Item>>,
    /// Whether any feed is open: without one, items are counted and dropped in the worker.
    has_feeds: bool,
    /// Redirect hops allowed from one start request.
    max_redirects: usize,
}

enum Terminal {
    Fetched,
    NotModified,
    Disallowed,
    /// A 3xx whose next hop was queued as a new request.
    Redirected,
    Failed(FailureKind),
    /// Not terminal: queued again for another attempt.
    Retrying,
    /// Not terminal and not an attempt: back to the host's queue (see [`Fetched::Requeue`]).
    Requeued,
}

/// Where a worker reports its request's feedback as soon as the response arrives.
struct Report {
    lease: Lease,
    tx: mpsc::UnboundedSender<(Lease, Feedback)>,
}

/// Which failures are worth another attempt, and how long to wait before it.
struct RetryPolicy {
    times: u32,
    codes: Vec<u16>,
    base: Duration,
    cap: Duration,
}

impl From<&Settings> for RetryPolicy {
    fn from(s: &Settings) -> Self {
        Self {
            times: s.retry_times,
            codes: s.retry_http_codes.clone(),
            base: s.retry_backoff_base,
            cap: s.retry_backoff_cap,
        }
    }
}

impl RetryPolicy {
    /// Whether a failure of this kind (and status) can succeed on another attempt.
    fn retryable(&self, kind: FailureKind, status: Option<u16>) -> bool {
        match kind {
            FailureKind::Timeout | FailureKind::Connection | FailureKind::SoftBlock => true,
            FailureKind::Status => status.is_some_and(|s| self.codes.contains(&s)),
            _ => false,
        }
    }

    /// Full-jitter exponential backoff: uniform in [0, min(cap, base x 2^attempt)].
    fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.cap);
        ceiling.mul_f64(rand_unit())
    }

    /// If `done` should be retried, take its request out and say when to send it again.
    fn plan(&self, done: &mut Completion, now: Instant) -> Option<(Request, Instant)> {
        let Terminal::Failed(kind) = done.terminal else {
            return None;
        };
        if !self.retryable(kind, done.status) {
            return None;
        }
        let req = done.request.as_ref()?;
        if req.retries >= self.times {
            return None;
        }
        let mut req = done.request.take()?;
        req.retries += 1;
        req.dont_filter = true;
        // A server's Retry-After wins over our own guess; the host's slot holds it too.
        let wait = done
            .feedback
            .retry_after
            .unwrap_or_else(|| self.backoff(req.retries));
        tracing::debug!(url = %req.url, attempt = req.retries, ?wait, reason = %kind, "retrying");
        done.terminal = Terminal::Retrying;
        Some((req, now + wait))
    }
}

/// A uniform random number in [0, 1), from the standard library's randomly keyed hasher, so
/// core needs no RNG dependency for one jitter draw per retry.
fn rand_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// One request's result, reported to the engine loop.
struct Completion {
    /// The request, kept for a retry and for the failures file.
    request: Option<Request>,
    /// Why it failed, when it did.
    message: String,
    feedback: Feedback,
    terminal: Terminal,
    status: Option<u16>,
    bytes: u64,
    requests: Vec<Request>,
    items: u64,
    dropped: u64,
    invalid_links: u64,
    spider_error: bool,
    feed_closed: bool,
    /// What the downloader deferred until the request is acknowledged (see
    /// [`crate::AfterAck`]); set only when the page was parsed and its items all sent.
    after_ack: Option<crate::AfterAck>,
}

impl Completion {
    fn new(feedback: Feedback, terminal: Terminal) -> Self {
        Self {
            request: None,
            message: String::new(),
            feedback,
            terminal,
            status: None,
            bytes: 0,
            requests: Vec::new(),
            items: 0,
            dropped: 0,
            invalid_links: 0,
            spider_error: false,
            feed_closed: false,
            after_ack: None,
        }
    }

    fn panicked(e: &tokio::task::JoinError) -> Self {
        tracing::error!("a spider callback panicked: {e}");
        let feedback = Feedback {
            sent: true,
            ..Feedback::default()
        };
        let mut c = Self::new(feedback, Terminal::Failed(FailureKind::Spider));
        c.spider_error = true;
        c
    }
}

/// Download one request, parse it, run the items through the pipelines into the feed.
async fn work<S: Spider, D: Downloader>(
    ctx: Arc<Ctx<S, D>>,
    req: Request,
    report: Report,
) -> Completion {
    let Download { outcome, feedback } = match ctx.downloader.gate(&req).await {
        Some(answered) => answered,
        None => ctx.downloader.fetch(&req).await,
    };
    // The slot learns now; parsing and pipelines may take a while.
    let _ = report.tx.send((report.lease, feedback.clone()));
    let response = match outcome {
        Fetched::Disallowed => return Completion::new(feedback, Terminal::Disallowed),
        Fetched::Requeue(why) => {
            tracing::debug!(url = %req.url, "back to the queue: {why}");
            let mut c = Completion::new(feedback, Terminal::Requeued);
            c.request = Some(req);
            return c;
        }
        Fetched::Failed(Failure {
            kind,
            message,
            status,
        }) => {
            tracing::debug!(url = %req.url, %kind, "request failed: {message}");
            let mut c = Completion::new(feedback, Terminal::Failed(kind));
            c.status = status;
            c.request = Some(req);
            c.message = message;
            return c;
        }
        Fetched::Response(r) => r,
    };
    let status = response.status();
    // A 304 answered from the HTTP cache counts as not modified (the server sent no body),
    // yet the spider parses the cached page so its items are still produced.
    let revalidated = response.is_revalidated();
    let terminal = match status {
        _ if revalidated => Terminal::NotModified,
        200..=299 => Terminal::Fetched,
        304 => Terminal::NotModified,
        _ => Terminal::Failed(FailureKind::Status),
    };
    if !revalidated
        && REDIRECTS.contains(&status)
        && !req
            .meta
            .get(DONT_REDIRECT_META)
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    {
        let mut done = match redirect(&req, &response, ctx.max_redirects) {
            Ok(next) => {
                tracing::debug!(from = %req.url, to = %next.url, status, "redirect");
                let mut done = Completion::new(feedback, Terminal::Redirected);
                done.requests = vec![next];
                done
            }
            Err(failure) => {
                tracing::debug!(url = %req.url, status, "redirect not followed: {}", failure.message);
                let mut done = Completion::new(feedback, Terminal::Failed(failure.kind));
                done.message = failure.message;
                done.request = Some(req);
                done
            }
        };
        done.status = Some(status);
        done.bytes = response.body().len() as u64;
        return done;
    }
    let mut done = Completion::new(feedback, terminal);
    done.status = Some(if revalidated { 304 } else { status });
    // Cached bodies did not cross the network; the stats count bytes received.
    done.bytes = if response.is_cached() {
        0
    } else {
        response.body().len() as u64
    };
    if let Terminal::Failed(_) = done.terminal {
        if status >= 400 {
            tracing::debug!(url = %req.url, status, "response not handled by the spider");
        }
        done.message = format!("HTTP {status}");
        done.request = Some(req);
        return done;
    }

    let url = response.url().clone();
    let after_ack = response.take_after_ack();
    let problems = response.problems();
    let mut out = Output::new(response.base_url().clone(), req.depth);
    let result = if status == 304 && !revalidated {
        // Unchanged and no copy to replay: the spider's hook decides (default: nothing).
        ctx.spider.not_modified(response, &mut out).await
    } else {
        ctx.spider.parse(response, &mut out).await
    };
    let problems = std::mem::take(&mut *problems.lock().unwrap_or_else(|p| p.into_inner()));
    for p in &problems {
        tracing::error!(%url, "{p}");
    }
    if let Err(e) = &result {
        tracing::warn!(%url, "spider error: {e}");
    }
    done.spider_error = result.is_err() || !problems.is_empty();
    done.invalid_links = out.invalid_links();
    let (items, mut requests) = out.into_parts();
    // Follow-ups inherit nothing implicitly except depth; keep the referrer for debugging.
    // A copy of the URL's text per request, not a formatting pass (`to_string`) per link.
    let referer = url.as_str();
    for r in &mut requests {
        if r.header_value("referer").is_none() {
            r.headers.push(("Referer".to_owned(), referer.to_owned()));
        }
    }
    done.requests = requests;

    'items: for mut item in items {
        for p in &ctx.pipelines {
            match p.process(item).await {
                Ok(Processed::Keep(kept)) => item = kept,
                Ok(Processed::Drop(reason)) => {
                    tracing::debug!(%url, pipeline = p.name(), "item dropped: {reason}");
                    done.dropped += 1;
                    continue 'items;
                }
                Err(e) => {
                    tracing::warn!(%url, pipeline = p.name(), "pipeline error, item dropped: {e}");
                    done.dropped += 1;
                    continue 'items;
                }
            }
        }
        if !ctx.has_feeds {
            drop(item);
        } else if ctx.items_tx.send(FeedMsg::Item(item)).await.is_err() {
            done.feed_closed = true;
            break;
        }
        done.items += 1;
    }
    if !done.spider_error && !done.feed_closed {
        done.after_ack = after_ack;
    }
    done
}

/// Request meta key: when `true`, a 3xx answer is not followed (it ends as an HTTP status
/// failure, as any non-2xx the spider does not handle).
pub const DONT_REDIRECT_META: &str = "dont_redirect";

/// Statuses whose `Location` is followed.
pub const REDIRECTS: [u16; 5] = [301, 302, 303, 307, 308];

/// The next hop of a redirect, as a new request that goes through the frontier (so the
/// target's robots.txt and its host's slot apply), or why it cannot be followed. As Scrapy's
/// RedirectMiddleware: 301/302/303 turn a POST into a GET without body (303 anything but
/// HEAD), 307/308 keep method and body; credentials do not cross to another origin; the
/// callback, meta, priority and depth carry over.
pub fn redirect(
    req: &Request,
    response: &crate::Response,
    max: usize,
) -> std::result::Result<Request, Failure> {
    let status = response.status();
    let location = response
        .headers()
        .get(http::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| {
            failure(
                FailureKind::BadRedirect,
                status,
                format!("HTTP {status} without a usable Location"),
            )
        })?;
    let target = response.url().join(location).map_err(|e| {
        failure(
            FailureKind::BadRedirect,
            status,
            format!("redirect to an invalid URL '{location}': {e}"),
        )
    })?;
    if !matches!(target.scheme(), "http" | "https") || target.host().is_none() {
        return Err(failure(
            FailureKind::BadRedirect,
            status,
            format!("redirect to non-http URL '{target}'"),
        ));
    }
    if target == req.url || req.redirect_urls.contains(&target) {
        return Err(failure(
            FailureKind::TooManyRedirects,
            status,
            format!("redirect loop at '{target}'"),
        ));
    }
    if req.redirect_urls.len() + 1 > max {
        return Err(failure(
            FailureKind::TooManyRedirects,
            status,
            format!("more than {max} redirects"),
        ));
    }
    let mut next = req.clone();
    next.redirect_urls.push(req.url.clone());
    let to_get = match status {
        301 | 302 => req.method == "POST",
        303 => req.method != "HEAD",
        _ => false,
    };
    if to_get {
        next.method = "GET".to_owned();
        next.body = None;
        next.headers.retain(|(k, _)| {
            !k.eq_ignore_ascii_case("content-type") && !k.eq_ignore_ascii_case("content-length")
        });
    }
    if target.origin() != req.url.origin() {
        // Credentials given for one origin are not handed to another.
        next.headers.retain(|(k, _)| {
            !k.eq_ignore_ascii_case("authorization") && !k.eq_ignore_ascii_case("cookie")
        });
    }
    next.url = target;
    next.retries = 0;
    // A hop belongs to its own chain: loops are caught above, per chain, and the chain
    // length is bounded. Filtering a hop as a duplicate because another page redirected to
    // the same place would end this page without its response or a failure to show.
    next.dont_filter = true;
    Ok(next)
}

fn failure(kind: FailureKind, status: u16, message: String) -> Failure {
    Failure {
        kind,
        message,
        status: Some(status),
    }
}

/// What flows to the feed writer: items, and markers saying "every item of this request
/// has been sent".
enum FeedMsg<I> {
    Item(I),
    Flushed(Lease),
}

/// The feed writer thread: write items as they come and hand back the leases whose items
/// are on disk, in group commits: at most every [`GROUP_COMMIT`] (at once when the queue
/// runs dry and `fsync` is off) the files are flushed and, with `fsync`, synced, and only
/// then are the leases collected since the last commit released for acknowledgement. So an
/// acknowledgement never reaches the job store before the items of its request reach the
/// disk. On an error nothing more is released: those requests are fetched again on resume.
fn write_feeds<I: serde::Serialize>(
    mut writers: Vec<FeedWriter>,
    mut rx: mpsc::Receiver<FeedMsg<I>>,
    acks: mpsc::UnboundedSender<Lease>,
    fsync: bool,
    abort: &AtomicBool,
) -> Result<u64> {
    let runtime = tokio::runtime::Handle::current();
    let mut written = 0u64;
    let mut done: Vec<Lease> = Vec::new();
    let mut last_commit = std::time::Instant::now();
    let commit = |writers: &mut Vec<FeedWriter>, done: &mut Vec<Lease>| -> Result<()> {
        for w in writers.iter_mut() {
            if fsync { w.sync()? } else { w.flush()? }
        }
        for lease in done.drain(..) {
            let _ = acks.send(lease);
        }
        Ok(())
    };
    loop {
        if abort.load(Ordering::Relaxed) {
            // Stop now: what is buffered is flushed when the files close; the leases not
            // yet released stay open.
            return Ok(written);
        }
        let due = !done.is_empty() && last_commit.elapsed() >= GROUP_COMMIT;
        if due {
            commit(&mut writers, &mut done)?;
            last_commit = std::time::Instant::now();
        }
        let msg = match rx.try_recv() {
            Ok(msg) => msg,
            Err(mpsc::error::TryRecvError::Disconnected) => break,
            Err(mpsc::error::TryRecvError::Empty) if done.is_empty() => {
                // Idle: the files on disk trail the crawl by as little as possible.
                for w in &mut writers {
                    w.flush()?;
                }
                match rx.blocking_recv() {
                    Some(msg) => msg,
                    None => break,
                }
            }
            Err(mpsc::error::TryRecvError::Empty) if !fsync => {
                commit(&mut writers, &mut done)?;
                last_commit = std::time::Instant::now();
                continue;
            }
            Err(mpsc::error::TryRecvError::Empty) => {
                // Leases are waiting for the next group commit: wait for more items until
                // it is due, so one fsync covers them all.
                for w in &mut writers {
                    w.flush()?;
                }
                let wait = GROUP_COMMIT.saturating_sub(last_commit.elapsed());
                match runtime.block_on(tokio::time::timeout(wait, rx.recv())) {
                    Ok(Some(msg)) => msg,
                    Ok(None) => break,
                    Err(_) => continue,
                }
            }
        };
        match msg {
            FeedMsg::Item(item) => {
                for w in &mut writers {
                    w.write(&item)?;
                }
                written += 1;
            }
            FeedMsg::Flushed(lease) => done.push(lease),
        }
    }
    for w in writers {
        w.finish()?;
    }
    for lease in done {
        let _ = acks.send(lease);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> RetryPolicy {
        RetryPolicy::from(&Settings::default())
    }

    fn failed(kind: FailureKind, status: Option<u16>, retries: u32) -> Completion {
        let mut c = Completion::new(Feedback::default(), Terminal::Failed(kind));
        c.status = status;
        let mut req = Request::get("http://example.com/x").unwrap();
        req.retries = retries;
        c.request = Some(req);
        c
    }

    #[test]
    fn only_what_can_succeed_is_retried() {
        let p = policy();
        let cdn = [520, 521, 522, 523, 524, 525, 526, 527, 530];
        for code in [
            408, 429, 500, 502, 503, 504, 505, 506, 507, 508, 509, 510, 511,
        ]
        .into_iter()
        .chain(cdn)
        {
            assert!(p.retryable(FailureKind::Status, Some(code)), "{code}");
        }
        for code in [400, 401, 403, 404, 501] {
            assert!(!p.retryable(FailureKind::Status, Some(code)), "{code}");
        }
        assert!(p.retryable(FailureKind::Timeout, None));
        assert!(p.retryable(FailureKind::Connection, None));
        for kind in [
            FailureKind::TooLarge,
            FailureKind::TooManyRedirects,
            FailureKind::Dns,
            FailureKind::Decode,
        ] {
            assert!(!p.retryable(kind, None), "{kind}");
        }
    }

    #[test]
    fn backoff_is_full_jitter_under_the_cap() {
        let p = policy();
        for attempt in 0..12u32 {
            let ceiling = Duration::from_secs(1)
                .saturating_mul(1 << attempt)
                .min(Duration::from_secs(60));
            let draws: Vec<Duration> = (0..200).map(|_| p.backoff(attempt)).collect();
            assert!(draws.iter().all(|d| *d <= ceiling), "attempt {attempt}");
            // Full jitter spreads over the whole range, not just near the ceiling.
            assert!(draws.iter().any(|d| *d < ceiling / 2), "attempt {attempt}");
        }
    }

    fn answer(req: &Request, status: u16, location: Option<&str>) -> crate::Response {
        let mut headers = http::HeaderMap::new();
        if let Some(l) = location {
            headers.insert(
                http::header::LOCATION,
                http::HeaderValue::from_str(l).unwrap(),
            );
        }
        crate::Response::new(
            req.clone(),
            req.url.clone(),
            status,
            headers,
            bytes::Bytes::new(),
        )
    }

    #[test]
    fn redirects_follow_scrapys_rules() {
        let post = Request::get("http://a.example/form")
            .unwrap()
            .method("POST")
            .body("q=1")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("Authorization", "Basic eA==")
            .callback("after")
            .meta("k", 1)
            .unwrap();
        // 301/302/303: POST becomes GET without a body; 307/308 keep both.
        for status in [301, 302, 303] {
            let next = redirect(&post, &answer(&post, status, Some("/done")), 10).unwrap();
            assert_eq!(next.method, "GET", "{status}");
            assert_eq!(next.body, None, "{status}");
            assert!(next.header_value("content-type").is_none(), "{status}");
            assert_eq!(next.url.as_str(), "http://a.example/done");
        }
        for status in [307, 308] {
            let next = redirect(&post, &answer(&post, status, Some("/done")), 10).unwrap();
            assert_eq!(next.method, "POST", "{status}");
            assert_eq!(next.body.as_deref(), Some(&b"q=1"[..]));
        }
        let next = redirect(&post, &answer(&post, 302, Some("/done")), 10).unwrap();
        assert_eq!(next.redirect_urls, std::slice::from_ref(&post.url));
        assert_eq!(next.callback.as_deref(), Some("after"));
        assert_eq!(next.meta.get("k"), Some(&serde_json::json!(1)));
        assert!(next.dont_filter);
        // Same origin keeps credentials; another origin does not get them.
        assert!(next.header_value("authorization").is_some());
        let away = redirect(&post, &answer(&post, 302, Some("http://b.example/")), 10).unwrap();
        assert!(away.header_value("authorization").is_none());

        let get = Request::get("http://a.example/x").unwrap();
        let err = |status, loc: Option<&str>, req: &Request, max| {
            redirect(req, &answer(req, status, loc), max)
                .unwrap_err()
                .kind
        };
        assert_eq!(err(302, None, &get, 10), FailureKind::BadRedirect);
        assert_eq!(
            err(302, Some("ftp://a.example/f"), &get, 10),
            FailureKind::BadRedirect
        );
        assert_eq!(
            err(302, Some("/x"), &get, 10),
            FailureKind::TooManyRedirects
        );
        let mut hop = get.clone();
        hop.redirect_urls = vec![url::Url::parse("http://a.example/y").unwrap()];
        assert_eq!(
            err(302, Some("/y"), &hop, 10),
            FailureKind::TooManyRedirects,
            "loop"
        );
        assert_eq!(
            err(302, Some("/z"), &hop, 1),
            FailureKind::TooManyRedirects,
            "limit"
        );
        assert!(redirect(&hop, &answer(&hop, 302, Some("/z")), 2).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_planned_until_attempts_run_out_and_retry_after_wins() {
        let p = policy();
        let now = Instant::now();
        let mut c = failed(FailureKind::Status, Some(503), 0);
        c.feedback.retry_after = Some(Duration::from_secs(7));
        let (req, at) = p.plan(&mut c, now).expect("first retry");
        assert_eq!(req.retries, 1);
        assert!(req.dont_filter);
        assert_eq!(at, now + Duration::from_secs(7));
        assert!(matches!(c.terminal, Terminal::Retrying));

        let mut last = failed(FailureKind::Timeout, None, 2);
        assert!(p.plan(&mut last, now).is_none(), "retry_times is 2");
        assert!(matches!(
            last.terminal,
            Terminal::Failed(FailureKind::Timeout)
        ));
        let mut not_found = failed(FailureKind::Status, Some(404), 0);
        assert!(p.plan(&mut not_found, now).is_none());
    }
}
