//! Sub-requests: the requests a downloader makes while it answers a page (a browser's
//! scripts, XHR, images; see [`SubRequests`]). Each one is queued in the frontier for its
//! own host, handed out when that host's slot allows a send (so a hold or a Retry-After
//! stops it like any page), goes through the downloader's gate (robots.txt) and fetch, and
//! its feedback reaches the slot the moment it arrives. Its answer goes back to the waiting
//! downloader instead of to the spider, and it is counted in `Stats::subrequests`, not
//! among the crawl's pages. One whose page stopped waiting (its render's deadline) before
//! its host's slot let it go is dropped unsent (`abandoned`).
//!
//! They are not counted against `concurrency`, and neither are the pages parked in a render
//! waiting for them: counted, a crawl of rendered pages would fill its workers with pages
//! whose sub-requests could never be handed out.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::task::{Id, JoinError, JoinSet};
use tokio::time::Instant;

use super::run::Crawl;
use super::worker::Ctx;
use crawler_core::Request;
use crawler_core::Spider;
use crawler_core::{Admission, Download, Downloader, Failure, FailureKind, Feedback, Fetched};
use crawler_core::{Lease, Scheduler};
use crawler_core::{SUBREQUEST_META, SubRequest, SubRequests};

/// The engine's side of the sub-request channel.
pub(super) struct Subs {
    pub(super) rx: mpsc::UnboundedReceiver<SubRequest>,
    /// A sender kept by the engine: the channel stays open whatever the downloader keeps,
    /// and the downloader's own refusals are read from it at the end.
    pub(super) handle: SubRequests,
    /// Downloaders waiting for an answer, by the id in the request's meta.
    waiting: HashMap<u64, oneshot::Sender<Download>>,
    seq: u64,
    /// Sub-requests in the frontier and not yet handed out: while there are any, a stopping
    /// crawl still asks the scheduler for them (pages in flight wait for them).
    pub(super) queued: usize,
    pub(super) tasks: JoinSet<SubDone>,
    leases: HashMap<Id, Lease>,
}

/// A sub-request's fetch, back from its task.
pub(super) struct SubDone {
    request: Request,
    id: u64,
    download: Download,
}

impl Subs {
    pub(super) fn new() -> Self {
        let (handle, rx) = SubRequests::channel();
        Self {
            rx,
            handle,
            waiting: HashMap::new(),
            seq: 0,
            queued: 0,
            tasks: JoinSet::new(),
            leases: HashMap::new(),
        }
    }
}

/// The engine's id of a sub-request, if `request` is one.
pub(super) fn sub_id(request: &Request) -> Option<u64> {
    request.meta.get(SUBREQUEST_META)?.as_u64()
}

fn failed(kind: FailureKind, message: String) -> Download {
    Download {
        outcome: Fetched::Failed(Failure::new(kind, message)),
        feedback: Feedback::default(),
    }
}

impl<S: Spider, D: Downloader, Q: Scheduler> Crawl<S, D, Q> {
    /// A downloader asked for a sub-request: queue it for its host.
    pub(super) fn sub_arrived(&mut self, sub: SubRequest) {
        let SubRequest { mut request, reply } = sub;
        self.subs.seq += 1;
        let id = self.subs.seq;
        request
            .meta
            .insert(SUBREQUEST_META.to_owned(), serde_json::Value::from(id));
        // A page's scripts are fetched for every page that uses them (the browser's cache
        // keeps what it may): the duplicate filter is for pages.
        request.dont_filter = true;
        // Extensions see a sub-request as any request (it carries the sub-request meta).
        let copy = self.ctx.signals.scheduled(&request);
        match self.scheduler.enqueue(request, Instant::now()) {
            Admission::Queued => {
                self.subs.waiting.insert(id, reply);
                self.subs.queued += 1;
                // The host may be skipped for the run: the request is then set aside.
                self.record_skipped();
            }
            Admission::Filtered(reason) => {
                self.ctx.signals.dropped(copy.as_ref(), reason.as_str());
                self.count_sub("filtered");
                let _ = reply.send(failed(
                    FailureKind::Other,
                    format!("sub-request filtered: {}", reason.as_str()),
                ));
            }
        }
    }

    /// A sub-request of a skipped host, set aside by the scheduler: answered as such.
    pub(super) fn sub_skipped(&mut self, request: &Request, why: &str) -> bool {
        let Some(id) = sub_id(request) else {
            return false;
        };
        self.count_sub("skipped_host");
        self.subs.queued = self.subs.queued.saturating_sub(1);
        if let Some(reply) = self.subs.waiting.remove(&id) {
            let _ = reply.send(failed(FailureKind::HostSkipped, why.to_owned()));
        }
        true
    }

    /// The scheduler handed out a sub-request: fetch it, unless nobody waits for it any
    /// more (one saved by an earlier run of a job, whose page is fetched again anyway).
    pub(super) fn start_sub(&mut self, lease: Lease, request: Request, ctx: Arc<Ctx<S, D>>) {
        self.subs.queued = self.subs.queued.saturating_sub(1);
        let id = sub_id(&request).unwrap_or_default();
        // Nobody waits any more when the page's render ended first (its deadline): the
        // request is not sent, and its slot gets the send back.
        let waited = self
            .subs
            .waiting
            .get(&id)
            .is_some_and(|reply| !reply.is_closed());
        if !waited {
            let now = Instant::now();
            self.scheduler.complete(lease, &Feedback::default(), now);
            self.scheduler.acknowledge(lease);
            let label = match self.subs.waiting.remove(&id) {
                Some(_) => "abandoned",
                None => "orphaned",
            };
            self.count_sub(label);
            return;
        }
        let tx = self.feedback_tx.clone();
        let handle = self.subs.tasks.spawn(async move {
            let download = match ctx.downloader.gate(&request).await {
                Some(answered) => answered,
                None => {
                    if let Some((list, crawl)) = ctx.signals.on() {
                        for e in list {
                            e.request_reached_downloader(&request, crawl);
                        }
                    }
                    ctx.downloader.fetch(&request).await
                }
            };
            if let (Some((list, crawl)), Fetched::Response(response)) =
                (ctx.signals.on(), &download.outcome)
            {
                for e in list {
                    e.response_received(response, &request, crawl);
                }
            }
            // The slot learns the moment the answer is in, as for a page.
            let _ = tx.send((lease, download.feedback.clone()));
            SubDone {
                request,
                id,
                download,
            }
        });
        self.subs.leases.insert(handle.id(), lease);
    }

    /// A sub-request's fetch ended: tell its slot, count it, answer the downloader.
    pub(super) fn sub_joined(&mut self, joined: Option<Result<(Id, SubDone), JoinError>>) {
        let now = Instant::now();
        let (task, done) = match joined {
            Some(Ok(pair)) => pair,
            Some(Err(e)) => {
                // Cancelled on a second stop, or a panic in a downloader: the lease closes
                // with nothing learned, and the waiting page times out or is abandoned.
                if let Some(lease) = self.subs.leases.remove(&e.id()) {
                    self.take_early_reports(now);
                    if !self.reported.remove(&lease) {
                        self.scheduler.complete(lease, &Feedback::default(), now);
                    }
                    self.scheduler.acknowledge(lease);
                }
                self.count_sub("failed");
                return;
            }
            None => return,
        };
        let Some(lease) = self.subs.leases.remove(&task) else {
            return;
        };
        self.take_early_reports(now);
        if !self.reported.remove(&lease) {
            self.scheduler.complete(lease, &done.download.feedback, now);
        }
        let SubDone {
            mut request,
            id,
            download,
        } = done;
        let again = match &download.outcome {
            Fetched::Response(r) if r.status() >= 400 => {
                self.retry
                    .sub_retry(FailureKind::Status, Some(r.status()), request.retries, now)
            }
            Fetched::Failed(f) => self.retry.sub_retry(f.kind, f.status, request.retries, now),
            _ => None,
        };
        if let Some(at) = again {
            // Its host's slot (a hold after a 429, a backoff after failures) decides when
            // it actually goes; the page waits for it within its own deadline.
            tracing::debug!(url = %request.url, "sub-request retried");
            request.retries += 1;
            self.scheduler.retry(lease, request, at);
            self.subs.queued += 1;
            self.count_sub("retried");
            return;
        }
        if let Fetched::Requeue(_) = download.outcome {
            // Not sent: robots.txt went in its place (or is unavailable and the host is
            // held). Back to its host's queue, still awaited.
            self.scheduler.retry(lease, request, now);
            self.subs.queued += 1;
            return;
        }
        self.scheduler.acknowledge(lease);
        let label = match &download.outcome {
            Fetched::Response(r) => {
                self.stats.response_bytes += r.body().len() as u64;
                "sent"
            }
            Fetched::Disallowed => "disallowed",
            _ => "failed",
        };
        self.count_sub(label);
        if let Some(reply) = self.subs.waiting.remove(&id) {
            let _ = reply.send(download);
        }
    }

    /// A page was handed out while the engine only wanted the sub-requests behind it (the
    /// crawl is stopping): it goes back to its queue unsent, for a resume.
    pub(super) fn give_back(&mut self, lease: Lease, request: Request) {
        self.scheduler.give_back(lease, request, Instant::now());
    }

    pub(super) fn count_sub(&mut self, label: &str) {
        *self.stats.subrequests.entry(label.to_owned()).or_default() += 1;
    }

    /// The downloader's own refusals, and the sub-requests its rendered pages did not wait
    /// for, into the stats.
    pub(super) fn count_blocked(&mut self) {
        let blocked = self.subs.handle.blocked();
        if blocked > 0 {
            self.stats.subrequests.insert("blocked".to_owned(), blocked);
        }
        let pending = self.subs.handle.pending_at_render();
        if pending > 0 {
            self.stats
                .subrequests
                .insert("pending_at_render".to_owned(), pending);
        }
    }
}
