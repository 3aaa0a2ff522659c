//! Politeness shared by a fleet: one per-host budget for many worker processes.
//!
//! When several processes crawl as one (a shared frontier in Redis, say), each host's rate,
//! token bucket and holds must be shared too, or N workers send N times the host's budget.
//! The fleet runs the very same [`HostMachine`] as a local crawl; only where its state
//! lives differs:
//!
//! - [`SharedBudget`]: the contract a shared backend implements (crawler-store implements
//!   it on Redis). The backend keeps each host's [`HostState`] with a version, and a
//!   worker changes it by compare-and-set: it computes the next state in Rust from the
//!   version it holds and commits it only if nobody committed in between (otherwise it
//!   recomputes from the fresher state). The backend's clock is the fleet's clock. A send
//!   is booked in the same atomic step as the lease that hands the request out, so no
//!   worker can send outside the budget.
//! - [`SharedThrottle`]: a [`Throttle`] over that state: ready time, rate and holds from
//!   the last state heard (no round trip), every outcome committed at once.
//! - [`FleetFrontier`]: a [`Frontier`] that knows it is one of many: it picks up hosts that
//!   other workers queued work for, and does not report "nothing left" while the fleet still
//!   has work queued or leased (a lease of a killed worker comes back when it expires).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use crawler_core::{Admission, Feedback, HostStats, Lease, Next, Request, Scheduler};
use tokio::time::Instant;

use crate::error::Error;
use crate::frontier::Frontier;
use crate::politeness::{HostMachine, HostState, Params, Verdict};
use crate::store::QueueStore;
use crate::throttle::{AuditRecord, Throttle};

/// A host's machine state as the shared store holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned {
    /// The state.
    pub state: HostState,
    /// Its version: every commit adds one.
    pub version: u64,
}

/// A per-host politeness state shared by every worker of a crawl.
///
/// Implementations keep each host's [`HostState`] where all workers see it, with a
/// version, and must book sends in the same atomic step as the lease that hands a
/// request out (their `QueueStore::lease`), because a throttle hears of a send only after
/// the fact.
pub trait SharedBudget: Send + Sync + 'static {
    /// Use `params` for `host` from now on (its first request, or a `[[hosts]]` rule).
    fn register(&self, host: &str, params: &Params);
    /// The host's state as last heard, if any (no round trip).
    fn cached(&self, host: &str) -> Option<Versioned>;
    /// The fleet's clock now (the shared store's time, in ms), as estimated locally.
    fn now_ms(&self) -> f64;
    /// Queue a routine outcome (nothing every worker must know at once) that happened at
    /// fleet time `at`: the backend folds it into the host's state with its next commit
    /// (the next lease of the host, typically), saving a round trip per request.
    fn defer(&self, host: &str, feedback: &Feedback, at: f64);
    /// Replace version `expected` of the host's state with `state` (and mark the host
    /// skipped for the whole fleet with `skip`), atomically. `Ok(false)` when another
    /// worker committed first; the cache then holds the fresher state.
    fn commit(
        &self,
        host: &str,
        expected: u64,
        state: &HostState,
        skip: Option<&str>,
    ) -> Result<bool, Error>;
}

/// How many times an outcome is recomputed when other workers keep committing first.
const COMMIT_TRIES: usize = 16;

/// A [`Throttle`] whose [`HostMachine`] state lives in a [`SharedBudget`].
pub struct SharedThrottle {
    host: String,
    budget: Arc<dyn SharedBudget>,
    params: Params,
    /// Until the backend first answers for this host: a fresh machine from now.
    fresh: HostState,
    audit: VecDeque<AuditRecord>,
}

impl SharedThrottle {
    /// The throttle of `host`, registering its parameters with `budget`.
    pub fn new(host: &str, budget: Arc<dyn SharedBudget>, params: Params) -> Self {
        budget.register(host, &params);
        let fresh = HostMachine::new(params.clone(), budget.now_ms())
            .state()
            .clone();
        Self {
            host: host.to_owned(),
            budget,
            params,
            fresh,
            audit: VecDeque::new(),
        }
    }

    fn machine(&self) -> (HostMachine, u64) {
        match self.budget.cached(&self.host) {
            Some(v) => (
                HostMachine::with_state(self.params.clone(), v.state),
                v.version,
            ),
            None => (
                HostMachine::with_state(self.params.clone(), self.fresh.clone()),
                0,
            ),
        }
    }
}

/// Whether an outcome can wait for the host's next commit: a plain answer that neither
/// holds the host nor changes a floor or a budget.
fn routine(fb: &Feedback) -> bool {
    fb.sent
        && fb.failure.is_none()
        && fb.retry_after.is_none()
        && fb.rate_limit.is_none()
        && fb.crawl_delay.is_none()
        && !fb.soft_block
        && !fb.robots_unavailable
        && fb
            .status
            .is_some_and(|s| s < 500 && s != 429 && s != 403 && s != 408)
}

impl Throttle for SharedThrottle {
    fn concurrency(&self) -> usize {
        // The store enforces the fleet-wide limit at lease time; locally the same bound.
        self.machine().0.concurrency() as usize
    }

    fn ready_at(&self) -> Instant {
        let (m, _) = self.machine();
        let wait = m.ready_at() - self.budget.now_ms();
        let now = Instant::now();
        if wait > 0.0 {
            now + Duration::from_secs_f64(wait / 1_000.0)
        } else {
            // Due already: a time in the past, so that a caller comparing with the `now`
            // it took a moment ago sees the host as ready.
            now.checked_sub(Duration::from_secs_f64(1.0 - wait / 1_000.0))
                .unwrap_or(now)
        }
    }

    fn on_send(&mut self, _now: Instant) {
        // The send was booked by the store in the step that leased the request.
    }

    fn on_feedback(&mut self, feedback: &Feedback, _now: Instant) -> Verdict {
        if routine(feedback) {
            let (mut m, _) = self.machine();
            let at = self.budget.now_ms();
            let verdict = m.on_feedback(feedback, at);
            if verdict == Verdict::Continue {
                self.budget.defer(&self.host, feedback, at);
                return verdict;
            }
        }
        let mut verdict = Verdict::Continue;
        for _ in 0..COMMIT_TRIES {
            let (mut m, version) = self.machine();
            verdict = m.on_feedback(feedback, self.budget.now_ms());
            let skip = match &verdict {
                Verdict::Skip(why) => Some(why.as_str()),
                Verdict::Continue => None,
            };
            match self.budget.commit(&self.host, version, m.state(), skip) {
                Ok(true) => {
                    let changes = m.take_audit();
                    crate::throttle::log_changes(&self.host, changes, &mut self.audit);
                    return verdict;
                }
                Ok(false) => continue,
                Err(e) => {
                    // The store reports the same outage through the frontier and stops the
                    // crawl if it lasts; the throttle can only say so.
                    tracing::error!(host = %self.host, "cannot commit to the shared budget: {e}");
                    return verdict;
                }
            }
        }
        tracing::warn!(host = %self.host, "the shared budget stayed contended; outcome dropped");
        verdict
    }

    fn rate(&self) -> f64 {
        self.machine().0.rate()
    }

    fn holds(&self) -> (u64, Duration) {
        let (n, ms) = self.machine().0.holds();
        (n, Duration::from_secs_f64(ms.max(0.0) / 1_000.0))
    }

    fn audit(&self) -> Vec<AuditRecord> {
        self.audit.iter().cloned().collect()
    }
}

/// What the fleet as a whole has left, as last heard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FleetStatus {
    /// Requests queued fleet-wide (hosts skipped for the run not counted).
    pub queued: usize,
    /// Requests leased by any worker and not yet acknowledged (including leases of dead
    /// workers that have not expired yet).
    pub leased: usize,
}

/// A shared frontier's view of the whole fleet.
pub trait Fleet: Send + 'static {
    /// The fleet's state now (one round trip). Asked only when this worker has nothing
    /// to do, before it concludes the crawl is over.
    fn status(&self) -> FleetStatus;

    /// A failure of the shared backend met outside the frontier's fallible calls (in
    /// `status`, or the store's `queued` and `hosts`, which cannot return one), taken once.
    /// The engine stops on it, so an idle worker whose backend failed does not wait forever.
    fn take_error(&self) -> Option<crate::Error> {
        None
    }
}

/// How often an idle worker looks for work queued by others (and for expired leases).
const POLL: Duration = Duration::from_millis(100);

/// A [`Frontier`] over a store shared by several workers: finds work other workers queued
/// and waits, rather than finishing, while any worker still holds leases that may yield
/// more work or come back when they expire.
///
/// Built with [`FleetFrontier::solo`], it is the plain frontier (for a crawl that is not
/// shared), so one engine type serves both.
pub struct FleetFrontier<S: QueueStore> {
    inner: Frontier<S>,
    fleet: Option<Box<dyn Fleet>>,
    /// When the fleet was last asked whether the crawl is over.
    last_status: Option<Instant>,
}

impl<S: QueueStore> FleetFrontier<S> {
    /// Wrap `inner`, whose store is shared; `fleet` reports on the other workers.
    pub fn new(inner: Frontier<S>, fleet: Box<dyn Fleet>) -> Self {
        Self {
            inner,
            fleet: Some(fleet),
            last_status: None,
        }
    }

    /// A frontier that is not shared: every call goes straight to `inner`.
    pub fn solo(inner: Frontier<S>) -> Self {
        Self {
            inner,
            fleet: None,
            last_status: None,
        }
    }

    /// The wrapped frontier.
    pub fn frontier(&self) -> &Frontier<S> {
        &self.inner
    }
}

impl<S: QueueStore> Scheduler for FleetFrontier<S> {
    fn enqueue(&mut self, request: Request, now: Instant) -> Admission {
        self.inner.enqueue(request, now)
    }

    fn is_shared(&self) -> bool {
        self.fleet.is_some()
    }

    fn next(&mut self, now: Instant) -> Next {
        let first = self.inner.next(now);
        let Some(fleet) = &self.fleet else {
            return first;
        };
        if matches!(first, Next::Ready(..)) {
            return first;
        }
        // A refused lease or another worker's pushes: give every host with work (as the
        // store last heard) a place in the ready heap; the store limits how often this asks
        // the shared backend. Twice, because a lease refused by the shared budget takes its
        // host out of the heap, and it must go back in at the slot the refusal booked.
        let mut next = first;
        for _ in 0..2 {
            if matches!(next, Next::Ready(..)) {
                return next;
            }
            self.inner.refresh_hosts(now);
            next = self.inner.next(now);
        }
        let poll = now + POLL;
        match next {
            Next::Ready(..) => next,
            Next::NotBefore(at) => Next::NotBefore(at.min(poll)),
            Next::Empty => {
                // Only a fresh answer may end the crawl (a stale one may predate another
                // worker's pushes); ask at most once per poll interval.
                let stale = self
                    .last_status
                    .is_none_or(|at| now.saturating_duration_since(at) >= POLL);
                if stale {
                    self.last_status = Some(now);
                    let fleet = fleet.status();
                    if fleet.queued == 0 && fleet.leased == 0 {
                        return Next::Empty;
                    }
                }
                Next::NotBefore(poll)
            }
        }
    }

    fn complete(&mut self, lease: Lease, feedback: &Feedback, now: Instant) {
        self.inner.complete(lease, feedback, now);
    }

    fn acknowledge(&mut self, lease: Lease) {
        self.inner.acknowledge(lease);
    }

    fn queued(&self) -> usize {
        self.inner.queued()
    }

    fn retry(&mut self, lease: Lease, request: Request, not_before: Instant) {
        self.inner.retry(lease, request, not_before);
    }

    fn checkpoint(&mut self, stats: &crawler_core::Stats) {
        self.inner.checkpoint(stats);
    }

    fn restored_stats(&mut self) -> Option<crawler_core::Stats> {
        self.inner.restored_stats()
    }

    fn take_skipped(&mut self) -> Vec<(Request, String)> {
        self.inner.take_skipped()
    }

    fn host_stats(&self) -> Vec<HostStats> {
        self.inner.host_stats()
    }

    fn take_error(&mut self) -> Option<crawler_core::Error> {
        self.inner.take_error().or_else(|| {
            let e = self.fleet.as_ref()?.take_error()?;
            Some(
                crawler_core::Error::new(
                    crawler_core::ErrorKind::Storage,
                    "the shared frontier failed",
                )
                .with_source(e),
            )
        })
    }
}
