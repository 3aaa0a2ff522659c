//! The main loop: schedule, collect what the workers report, account, acknowledge, and
//! finally drain the feeds and settle the stats.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::feeds::{FEED_BUFFER, FeedMsg, write_feeds};
use super::retry::RetryPolicy;
use super::shutdown::{listen_for_signals, second_stop};
use super::worker::{Completion, Ctx, Report, Terminal, work};
use super::{Engine, FINAL_HOSTS, PROGRESS_HOSTS, Progress};
use crate::error::{Error, ErrorKind, Result};
use crate::failures::{FailureLog, FailureRecord};
use crate::feed::FeedWriter;
use crate::fetch::{Admission, Downloader, FailureKind, Feedback, Lease, Next, Scheduler};
use crate::request::Request;
use crate::settings::FeedFsync;
use crate::spider::Spider;
use crate::stats::Stats;

/// How often the progress snapshot is refreshed.
const PROGRESS_TICK: Duration = Duration::from_millis(250);
/// How often stats are saved and a persistent frontier is made durable.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

impl<S: Spider, D: Downloader, Q: Scheduler> Engine<S, D, Q> {
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
