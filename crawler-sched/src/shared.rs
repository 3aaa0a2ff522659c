//! Politeness shared by a fleet: one per-host budget for many worker processes.
//!
//! When several processes crawl as one (a shared frontier in Redis, say), each host's rate,
//! token bucket and holds must be shared too, or N workers send N times the host's budget.
//! This module holds the crawler-sched side of that:
//!
//! - [`SharedBudget`]: the small, synchronous contract a shared backend implements
//!   (crawler-store implements it on Redis). The backend owns the pacing state and the
//!   adaptive rate; it enforces the budget *where a request is handed out*, in the same
//!   atomic step as the lease, so no worker can send outside the fleet's budget even though
//!   [`Throttle::on_send`] cannot refuse.
//! - [`SharedThrottle`]: a [`Throttle`] that reads the backend's last word on its host
//!   (ready time, rate, holds) without a round trip and reports every outcome to it, at once
//!   when the outcome places a hold (Retry-After, 429/503, an exhausted quota, a challenge
//!   page, a timeout) so every worker respects it, batched otherwise.
//! - [`FleetFrontier`]: a [`Frontier`] that knows it is one of many: it picks up hosts that
//!   other workers queued work for, and does not report "nothing left" while the fleet still
//!   has work queued or leased (a lease of a killed worker comes back when it expires).

use std::sync::Arc;
use std::time::Duration;

use crawler_core::{
    Admission, FailureKind, Feedback, HostStats, Lease, Next, Request, Scheduler, Settings,
};
use tokio::time::Instant;

use crate::error::Error;
use crate::frontier::Frontier;
use crate::store::QueueStore;
use crate::throttle::{Throttle, Verdict};

/// The pacing parameters of one host, as the shared budget needs them (from the settings,
/// after any `[[hosts]]` rule).
#[derive(Debug, Clone, PartialEq)]
pub struct BudgetParams {
    /// Rate a new host starts at, requests/s.
    pub start_rate: f64,
    /// Floor of the adaptive rate.
    pub min_rate: f64,
    /// Ceiling of the adaptive rate.
    pub max_rate: f64,
    /// Token-bucket burst: sends allowed back to back after an idle spell.
    pub burst: u32,
    /// Smallest gap between two sends (`download_delay`).
    pub min_gap: Duration,
    /// Margin added to every hold.
    pub hold_margin: Duration,
    /// How long a challenge page holds the host.
    pub soft_block_pause: Duration,
    /// Fraction of the rate kept after a challenge page.
    pub soft_block_resume: f64,
    /// Latency rise tolerated before easing off.
    pub latency_tolerance: Duration,
    /// Longest wait a host may ask for before it is skipped for this run.
    pub max_wait: Duration,
    /// Requests one worker may have in flight to the host.
    pub concurrency: usize,
}

impl BudgetParams {
    /// The parameters `settings` give (use [`Settings::for_host`] first for host rules).
    pub fn from_settings(s: &Settings) -> Self {
        Self {
            start_rate: s.start_rate.clamp(s.min_rate, s.max_rate),
            min_rate: s.min_rate,
            max_rate: s.max_rate,
            burst: s.burst.max(1),
            min_gap: s.download_delay,
            hold_margin: s.hold_margin,
            soft_block_pause: s.soft_block_pause,
            soft_block_resume: s.soft_block_resume,
            latency_tolerance: s.latency_tolerance,
            max_wait: s.max_retry_after,
            concurrency: s.concurrency_per_host.max(1),
        }
    }
}

/// The shared state of one host as this process last heard it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostView {
    /// The earliest instant this worker may be handed the host's next request.
    pub ready_at: Instant,
    /// The fleet's current rate for the host, requests/s.
    pub rate: f64,
    /// Holds placed on the host by any worker.
    pub holds: u64,
    /// Total time under holds.
    pub held: Duration,
}

/// A per-host budget shared by every worker of a crawl.
///
/// Implementations keep the pacing state (token bucket, adaptive rate, holds) where all
/// workers see it and update it atomically. They must enforce the budget when they hand a
/// request out (their `QueueStore::lease`), because a throttle is told of a send only after
/// the fact. The methods are synchronous and cheap: [`SharedBudget::view`] answers from
/// memory, and [`SharedBudget::report`] may batch what is not urgent.
pub trait SharedBudget: Send + Sync + 'static {
    /// Use `params` for `host` from now on (its first request, or a `[[hosts]]` rule).
    fn register(&self, host: &str, params: &BudgetParams);
    /// The last known shared state of `host`, if any was heard yet (no round trip).
    fn view(&self, host: &str) -> Option<HostView>;
    /// Report one request's outcome. `urgent` outcomes (holds, refusals) must reach the
    /// shared state before this returns; others may wait for the next round trip. `skip`
    /// carries the reason when this worker gives up on the host for the run.
    fn report(
        &self,
        host: &str,
        feedback: &Feedback,
        urgent: bool,
        skip: Option<&str>,
    ) -> Result<(), Error>;
}

/// A [`Throttle`] whose pacing lives in a [`SharedBudget`]: ready times, the rate and
/// holds come from the fleet's state; outcomes go back to it.
pub struct SharedThrottle {
    host: String,
    budget: Arc<dyn SharedBudget>,
    params: BudgetParams,
    /// Until the backend first answers for this host: now.
    born: Instant,
    /// Fast moving average of latency (seconds), for the local concurrency.
    latency: Option<f64>,
}

impl SharedThrottle {
    /// The throttle of `host`, registering its parameters with `budget`.
    pub fn new(
        host: &str,
        budget: Arc<dyn SharedBudget>,
        params: BudgetParams,
        now: Instant,
    ) -> Self {
        budget.register(host, &params);
        Self {
            host: host.to_owned(),
            budget,
            params,
            born: now,
            latency: None,
        }
    }

    /// Whether an outcome changes what every worker must do right now.
    fn urgent(fb: &Feedback) -> bool {
        fb.retry_after.is_some()
            || fb.soft_block
            || matches!(fb.status, Some(429 | 503))
            || fb.failure == Some(FailureKind::Timeout)
            || fb.rate_limit.is_some_and(|rl| rl.remaining == 0)
    }

    /// The reason to skip the host, when it asked for a wait longer than allowed.
    fn too_long(&self, fb: &Feedback) -> Option<String> {
        let waits = [
            fb.retry_after.map(|w| (w, "Retry-After")),
            fb.rate_limit
                .filter(|rl| rl.remaining == 0)
                .and_then(|rl| rl.reset.or(rl.window))
                .map(|reset| (reset, "RateLimit exhausted")),
            fb.soft_block
                .then_some((self.params.soft_block_pause, "challenge page")),
        ];
        waits
            .into_iter()
            .flatten()
            .find(|(w, _)| *w > self.params.max_wait)
            .map(|(wait, trigger)| {
                format!(
                    "{trigger} asked for a wait of {:.0}s, more than max_retry_after ({:.0}s)",
                    wait.as_secs_f64(),
                    self.params.max_wait.as_secs_f64()
                )
            })
    }
}

impl Throttle for SharedThrottle {
    fn concurrency(&self) -> usize {
        // Little's law per worker, as in `Adaptive`: enough in flight for the fleet rate at
        // the current latency; the shared bucket keeps the sum within the budget anyway.
        let rate = self.rate();
        let lat = self.latency.unwrap_or(0.0);
        ((1.5 * rate * lat).ceil() as usize).clamp(1, self.params.concurrency)
    }

    fn ready_at(&self) -> Instant {
        self.budget
            .view(&self.host)
            .map_or(self.born, |v| v.ready_at)
    }

    fn on_send(&mut self, _now: Instant) {
        // The token was taken by the backend when it handed the request out.
    }

    fn on_feedback(&mut self, feedback: &Feedback, _now: Instant) -> Verdict {
        if feedback.sent && feedback.status.is_some() {
            let lat = feedback.latency.as_secs_f64();
            self.latency = Some(self.latency.map_or(lat, |f| 0.7 * f + 0.3 * lat));
        }
        let skip = self.too_long(feedback);
        let urgent = Self::urgent(feedback) || skip.is_some();
        if let Err(e) = self
            .budget
            .report(&self.host, feedback, urgent, skip.as_deref())
        {
            // The store reports the same outage through the frontier and stops the crawl
            // if it lasts; the throttle can only say so.
            tracing::error!(host = %self.host, "cannot report to the shared budget: {e}");
        }
        match skip {
            Some(why) => {
                tracing::warn!(host = %self.host, "skipping host for this run: {why}");
                Verdict::Skip(why)
            }
            None => Verdict::Continue,
        }
    }

    fn rate(&self) -> f64 {
        self.budget
            .view(&self.host)
            .map_or(self.params.start_rate, |v| v.rate)
    }

    fn holds(&self) -> (u64, Duration) {
        self.budget
            .view(&self.host)
            .map_or((0, Duration::ZERO), |v| (v.holds, v.held))
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
        self.inner.take_error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// A budget in memory that records reports.
    #[derive(Default)]
    struct Recorder {
        views: Mutex<HashMap<String, HostView>>,
        reports: Mutex<Vec<(String, bool, Option<String>)>>,
    }

    impl SharedBudget for Recorder {
        fn register(&self, _host: &str, _params: &BudgetParams) {}
        fn view(&self, host: &str) -> Option<HostView> {
            self.views.lock().ok()?.get(host).copied()
        }
        fn report(
            &self,
            host: &str,
            _fb: &Feedback,
            urgent: bool,
            skip: Option<&str>,
        ) -> Result<(), Error> {
            if let Ok(mut r) = self.reports.lock() {
                r.push((host.to_owned(), urgent, skip.map(str::to_owned)));
            }
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn holds_are_urgent_and_long_waits_skip() {
        let rec = Arc::new(Recorder::default());
        let s = Settings {
            max_retry_after: Duration::from_secs(60),
            ..Default::default()
        };
        let now = Instant::now();
        let mut t = SharedThrottle::new("h", rec.clone(), BudgetParams::from_settings(&s), now);
        assert_eq!(
            t.ready_at(),
            now,
            "ready at once before the backend has spoken"
        );
        let ok = Feedback {
            sent: true,
            status: Some(200),
            ..Default::default()
        };
        assert_eq!(t.on_feedback(&ok, now), Verdict::Continue);
        let held = Feedback {
            status: Some(429),
            retry_after: Some(Duration::from_secs(3)),
            ..ok.clone()
        };
        assert_eq!(t.on_feedback(&held, now), Verdict::Continue);
        let long = Feedback {
            retry_after: Some(Duration::from_secs(3600)),
            ..held
        };
        assert!(matches!(t.on_feedback(&long, now), Verdict::Skip(_)));
        let reports = rec.reports.lock().unwrap().clone();
        assert_eq!(reports[0], ("h".to_owned(), false, None));
        assert_eq!(reports[1], ("h".to_owned(), true, None));
        assert!(reports[2].1 && reports[2].2.as_deref().is_some_and(|w| w.contains("3600")));
        // The backend's word is what the slot follows.
        let later = now + Duration::from_secs(3);
        rec.views.lock().unwrap().insert(
            "h".to_owned(),
            HostView {
                ready_at: later,
                rate: 4.0,
                holds: 1,
                held: Duration::from_secs(3),
            },
        );
        assert_eq!(t.ready_at(), later);
        assert_eq!(t.rate(), 4.0);
        assert_eq!(t.holds().0, 1);
    }
}
