//! Settling a finished request: tell its host's slot what happened, retry or requeue it,
//! count it in the stats (and the failures file), queue its follow-ups, and acknowledge its
//! lease, at once or once its items are on disk.

use tokio::task::{Id, JoinError};
use tokio::time::Instant;

use super::extensions::Signals;
use super::run::Crawl;
use super::worker::{Completion, Terminal};
use crate::failures::{FailureLog, FailureRecord};
use crawler_core::AfterAck;
use crawler_core::Request;
use crawler_core::Spider;
use crawler_core::Stats;
use crawler_core::{Admission, Downloader, FailureKind, HostStats, Lease, Scheduler};

impl<S: Spider, D: Downloader, Q: Scheduler> Crawl<S, D, Q> {
    /// A worker ended (`None`: there was none to wait for): settle its request, unless it
    /// was abandoned.
    pub(super) fn joined(&mut self, joined: Option<Result<(Id, Completion), JoinError>>) {
        if let Some(id) = match &joined {
            Some(Ok((id, _))) => Some(*id),
            Some(Err(e)) => Some(e.id()),
            None => None,
        } {
            self.rendering.remove(&id);
        }
        let (id, mut done) = match joined {
            Some(Ok((id, done))) => (id, done),
            Some(Err(e)) if e.is_cancelled() => {
                // Abandoned on a second Ctrl-C: the lease stays open, so a
                // persistent frontier fetches the request again on resume.
                self.leases.remove(&e.id());
                if self.skipped_turns.remove(&e.id()) {
                    // Its errback cut short; the request was skipped all the same.
                    self.stats.skipped_host += 1;
                    return;
                }
                self.abandoned += 1;
                return;
            }
            Some(Err(e)) => (e.id(), Completion::panicked(&e)),
            None => return,
        };
        if self.skipped_turns.remove(&id) {
            self.settle_skipped(done);
            self.check_limits();
            return;
        }
        let now = Instant::now();
        let Some(lease) = self.leases.remove(&id) else {
            return;
        };
        let close = done.close.take();
        self.settle(lease, done, now);
        if let Some(reason) = close {
            self.close(reason);
        }
        self.check_limits();
    }

    /// Hand the scheduler every early report (a worker's feedback, sent before it parses)
    /// still in the channel.
    pub(super) fn take_early_reports(&mut self, now: Instant) {
        while let Ok((early, fb)) = self.feedback_rx.try_recv() {
            if self.reported.insert(early) {
                self.scheduler.complete(early, &fb, now);
            }
        }
    }

    /// Settle what the worker holding `lease` reported.
    fn settle(&mut self, lease: Lease, mut done: Completion, now: Instant) {
        // The worker's early report may still sit in the channel.
        self.take_early_reports(now);
        if !self.reported.remove(&lease) {
            self.scheduler.complete(lease, &done.feedback, now);
        }
        if done.feed_closed {
            // Some of its items never reached the feeds: the lease stays open,
            // so a persistent frontier fetches the page again on resume.
            if !self.stopping {
                tracing::error!("the feed writer stopped; stopping the crawl");
            }
            self.stopping = true;
            self.abandoned += 1;
            return;
        }
        if let Terminal::Requeued = done.terminal {
            // Not an attempt: the page was not sent (robots.txt went in its
            // place, or is unavailable and the host is held).
            if let Some(req) = done.request.take() {
                self.scheduler.retry(lease, req, now);
            }
        } else if done.late {
            // The spider's late turn is the request's end: no retry after it.
        } else if let Some((req, at)) = {
            let unwell = done
                .request
                .as_ref()
                .is_some_and(|r| self.scheduler.host_unwell(&r.url));
            self.retry.plan(&mut done, now, unwell)
        } {
            self.scheduler.retry(lease, req, at);
            self.stats.retries += 1;
        } else if super::late::wants_late(&done) {
            // No retry follows: the spider gets its turn (an allowed status's callback, or
            // the errback) as a task of its own under the same lease, which stays open
            // until that turn's items and requests are safe. The slot has had this
            // answer's feedback already.
            self.reported.insert(lease);
            let handle = self
                .tasks
                .spawn(super::late::late(std::sync::Arc::clone(&self.ctx), done));
            self.leases.insert(handle.id(), lease);
            return;
        }
        let terminal = !matches!(done.terminal, Terminal::Retrying | Terminal::Requeued);
        let wrote_items = self.has_feeds && done.items > 0;
        let after_ack = done.after_ack.take();
        let cap = self.ctx.queue_cap;
        account(
            &mut self.scheduler,
            &mut self.stats,
            &mut self.failures,
            done,
            cap,
            &self.ctx.signals,
        );
        // After the follow-ups are queued: those for a host skipped meanwhile were set aside
        // too, and this may be the crawl's last settle.
        self.record_skipped();
        // Follow-up requests are queued now; items may still be on their way to
        // the feeds.
        if terminal {
            self.release(lease, wrote_items, after_ack);
        }
    }

    /// Count (and list in the failures file) the requests the scheduler gave up on without
    /// sending them, because their host is skipped. A request that names an errback gets
    /// its turn there first, as a task of its own settled by [`Crawl::settle_skipped`]
    /// (unless the crawl is stopping). Returns whether such a turn was started.
    pub(super) fn record_skipped(&mut self) -> bool {
        let mut started = false;
        for (req, why) in self.scheduler.take_skipped() {
            if self.sub_skipped(&req, &why) {
                continue;
            }
            tracing::warn!(url = %req.url, "not fetched: {why}");
            if req.errback.is_some() && !self.stopping {
                let mut done =
                    Completion::new(crawler_core::Feedback::default(), Terminal::SkippedHost);
                done.message = why;
                done.request = Some(req);
                let handle = self
                    .tasks
                    .spawn(super::late::late(std::sync::Arc::clone(&self.ctx), done));
                self.skipped_turns.insert(handle.id());
                started = true;
                continue;
            }
            self.stats.skipped_host += 1;
            if let Some(log) = self.failures.as_mut() {
                log.record(&FailureRecord {
                    url: req.url.as_str(),
                    reason: FailureKind::HostSkipped.as_str(),
                    attempts: req.retries,
                    status: None,
                    message: &why,
                });
            }
        }
        started
    }

    /// The errback's turn at a request set aside with its skipped host is over: count it
    /// as `skipped_host` (listed in the failures file unless the errback handled it), and
    /// take its items' counts, counters and follow-up requests. It holds no lease: the
    /// scheduler let the request go when it set it aside.
    fn settle_skipped(&mut self, mut done: Completion) {
        let close = done.close.take();
        let cap = self.ctx.queue_cap;
        account(
            &mut self.scheduler,
            &mut self.stats,
            &mut self.failures,
            done,
            cap,
            &self.ctx.signals,
        );
        self.record_skipped();
        if let Some(reason) = close {
            self.close(reason);
        }
    }

    /// A request is done: acknowledge its lease now, or, when it wrote items, once a flush
    /// marker sent after them comes back from the feed writer.
    fn release(&mut self, lease: Lease, wrote_items: bool, after_ack: Option<AfterAck>) {
        if wrote_items {
            self.marks.push_back(lease);
            if let Some(work) = after_ack {
                self.after_acks.insert(lease.0, work);
            }
        } else {
            self.scheduler.acknowledge(lease);
            if let Some(work) = after_ack {
                self.durable_after.push(work);
            }
        }
    }
}

/// The feed writer has the items of `lease` on disk: acknowledge it, and queue the work that
/// waited for that until the acknowledgement is durable (see [`run_durable`]).
pub(super) fn acknowledge<Q: Scheduler>(
    scheduler: &mut Q,
    after_acks: &mut std::collections::HashMap<u64, AfterAck>,
    durable_after: &mut Vec<AfterAck>,
    lease: Lease,
) {
    scheduler.acknowledge(lease);
    if let Some(work) = after_acks.remove(&lease.0) {
        durable_after.push(work);
    }
}

/// Run the work that waited for acknowledgements, once a checkpoint made them durable.
///
/// The work stores a page's validators, in a database apart from the job's frontier, each
/// flushed on its own. Stored at the acknowledgement, a kill could keep the validators and
/// lose the acknowledgement with the links found on the page (the frontier had not
/// flushed yet): the resumed crawl would fetch the page again, be answered 304, and never
/// queue those links. After the checkpoint, a kill loses at worst the validators, and the
/// page is fetched again in full.
pub(super) fn run_durable(durable_after: &mut Vec<AfterAck>) {
    for work in durable_after.drain(..) {
        work.run();
    }
}

/// Queue a request, counted as enqueued (and as filtered when the scheduler turns it away),
/// with the `request_scheduled` and `request_dropped` signals.
pub(super) fn offer<Q: Scheduler, I>(
    scheduler: &mut Q,
    stats: &mut Stats,
    req: Request,
    now: Instant,
    signals: &Signals<I>,
) {
    stats.requests_enqueued += 1;
    let copy = signals.scheduled(&req);
    if let Admission::Filtered(reason) = scheduler.enqueue(req, now) {
        Stats::bump(&mut stats.filtered, reason.as_str());
        signals.dropped(copy.as_ref(), reason.as_str());
    }
}

/// Count a finished attempt in the stats (and the failures file), and queue its follow-up
/// requests.
fn account<Q: Scheduler, I>(
    scheduler: &mut Q,
    stats: &mut Stats,
    failures: &mut Option<FailureLog>,
    done: Completion,
    cap: Option<usize>,
    signals: &Signals<I>,
) {
    match done.terminal {
        Terminal::Fetched => stats.fetched += 1,
        Terminal::NotModified => stats.not_modified += 1,
        Terminal::Disallowed => stats.disallowed += 1,
        Terminal::Redirected => stats.redirected += 1,
        Terminal::Failed(kind) => {
            Stats::bump(&mut stats.failed, kind.as_str());
            // A failure the errback handled is the spider's to report.
            if let (Some(log), Some(req), false) = (failures.as_mut(), &done.request, done.handled)
            {
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
        Terminal::SkippedHost => {
            stats.skipped_host += 1;
            // As a failure: listed unless its errback handled it.
            if let (Some(log), Some(req), false) = (failures.as_mut(), &done.request, done.handled)
            {
                log.record(&FailureRecord {
                    url: req.url.as_str(),
                    reason: FailureKind::HostSkipped.as_str(),
                    attempts: req.retries,
                    status: None,
                    message: &done.message,
                });
            }
        }
        Terminal::Retrying | Terminal::Requeued => {}
    }
    if let Some(status) = done.status {
        *stats.status.entry(status).or_default() += 1;
    }
    if let Some(version) = done.feedback.http_version {
        Stats::bump(
            &mut stats.http_versions,
            crawler_core::http_version_name(version),
        );
    }
    if let Some(proxy) = &done.feedback.proxy {
        let p = stats.proxies.entry(proxy.to_string()).or_default();
        p.requests += 1;
        if let Some(kind) = done.feedback.failure {
            Stats::bump(&mut p.failed, kind.as_str());
        }
    }
    stats.response_bytes += done.bytes;
    stats.items_scraped += done.items;
    stats.items_dropped += done.dropped;
    stats.invalid_links += done.invalid_links;
    stats.links_dropped += done.links_dropped;
    stats.robots_not_text += u64::from(done.feedback.robots_not_text);
    stats.spider_errors += u64::from(done.spider_error);
    for (name, n) in done.counters.into_map() {
        let v = stats.spider.entry(name).or_default();
        *v = v.saturating_add(n);
    }
    let now = Instant::now();
    let before = scheduler.queued();
    for req in done.requests {
        if cap.is_some_and(|cap| scheduler.queued() >= cap) {
            // Offered and refused, so the request has its terminal state and the stats add
            // up; said once, the first time, and counted every time.
            stats.requests_enqueued += 1;
            let copy = signals.scheduled(&req);
            signals.dropped(copy.as_ref(), QUEUE_FULL);
            Stats::bump(&mut stats.filtered, QUEUE_FULL);
            if stats.filtered.get(QUEUE_FULL) == Some(&1) {
                tracing::warn!(
                    queued = scheduler.queued(),
                    "the queue is full (max_queued_requests): new links are dropped and \
                     counted as filtered queue_full; set job_dir to keep them on disk instead"
                );
            }
            continue;
        }
        offer(scheduler, stats, req, now, signals);
    }
    let after = scheduler.queued();
    if after / QUEUE_MILESTONE > before / QUEUE_MILESTONE {
        // A frontier growing by a large page at a time shows here, not only in the
        // periodic progress line.
        tracing::info!(
            queued = after,
            "the queue grew past {}",
            after / QUEUE_MILESTONE * QUEUE_MILESTONE
        );
    }
}

/// The filter reason of links dropped because the in-memory queue was full.
const QUEUE_FULL: &str = "queue_full";
/// The queue's growth is logged each time it passes a multiple of this.
const QUEUE_MILESTONE: usize = 100_000;

/// The cap on requests queued in memory: `max_queued_requests`, when the queues are in
/// memory (no job directory, no Redis: those keep them in their store, on disk).
pub(super) fn queue_cap(settings: &crawler_core::Settings) -> Option<usize> {
    let in_memory = settings.job_dir.is_none() && settings.redis_url.is_none();
    (in_memory && settings.max_queued_requests > 0).then_some(settings.max_queued_requests)
}

/// The `n` busiest hosts (most queued, then most requests, then most holds), in that order.
pub(super) fn busiest(mut hosts: Vec<HostStats>, n: usize) -> Vec<HostStats> {
    let key = |h: &HostStats| std::cmp::Reverse((h.queued, h.requests, h.holds));
    if hosts.len() > n {
        // Partition in linear time, then sort only what is kept.
        hosts.select_nth_unstable_by_key(n, key);
        hosts.truncate(n);
        hosts.shrink_to_fit();
    }
    hosts.sort_by_key(key);
    hosts
}
