//! [`SharedThrottle`]: a host's [`Throttle`] whose machine state lives in a [`SharedBudget`],
//! read from the last state heard and changed by compare-and-set.
//!
//! Once a refusal reaches the host's limiter group (a 429 or 503, or an answer asking for a
//! hold), the throttle asks the budget to pool the group ([`SharedBudget::pool`]): from then
//! on the pool's pacer's shared state paces every name of it, as a local crawl's pacer's
//! machine does (docs/politeness.md, "Limiter groups"). A pooled name's outcomes teach the
//! pacer's state; its own state keeps its holds and its own `max_rate` gap.

use std::sync::Arc;
use std::time::Duration;

use crawler_core::Feedback;
use tokio::time::Instant;

use super::{Pooled, SharedBudget, lease_ahead};
use crate::politeness::{ACTIVE_SHARER_MS, HostMachine, HostState, Params, Verdict, asks_hold};
use crate::throttle::{AuditLog, AuditRecord, Throttle};

/// How many times an outcome is recomputed when other workers keep committing first.
const COMMIT_TRIES: usize = 16;

/// A [`Throttle`] whose [`HostMachine`] state lives in a [`SharedBudget`].
pub struct SharedThrottle {
    host: String,
    budget: Arc<dyn SharedBudget>,
    params: Params,
    /// Until the backend first answers for this host: a fresh machine from now.
    fresh: HostState,
    audit: AuditLog,
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
            audit: AuditLog::default(),
        }
    }

    /// The state that paces this host, with the host it belongs to and its version: its
    /// pooled group's pacer's under the pool's parameters, or its own; and the pool.
    fn pacing(&self) -> (String, HostMachine, u64, Option<Pooled>) {
        let Some(pool) = self.budget.pooled(&self.host) else {
            let (m, v) = self.machine();
            return (self.host.clone(), m, v, None);
        };
        let params = pool.params(&self.params);
        let (state, version) = match self.budget.cached(&pool.pacer) {
            Some(v) => (v.state, v.version),
            None => (self.fresh.clone(), 0),
        };
        (
            pool.pacer.clone(),
            HostMachine::with_state(params, state),
            version,
            Some(pool),
        )
    }

    /// The gap of this name's own `max_rate` (ms), which it keeps in a pooled group.
    fn own_gap(&self) -> f64 {
        if self.params.max_rate.is_finite() && self.params.max_rate > 0.0 {
            1_000.0 / self.params.max_rate
        } else {
            0.0
        }
    }

    /// A refusal reached this host's limiter group: pool it, unless it is pooled already
    /// (one round trip). Returns the names whose pace the pacer takes over when this name
    /// formed the pool and paces it (see [`Self::absorb`]), else nothing.
    fn pool_group(&mut self) -> Vec<String> {
        if self.budget.pooled(&self.host).is_some() {
            return Vec::new();
        }
        match self.budget.pool(&self.host) {
            Ok(Some((pool, formed))) if pool.pacer == self.host => formed,
            Ok(_) => Vec::new(),
            Err(e) => {
                tracing::warn!(host = %self.host, "cannot pool the limiter group: {e}");
                Vec::new()
            }
        }
    }

    /// This name formed its group's pool and paces it: its state takes over the pace of
    /// the names of `formed` that were sending (as [`HostMachine::absorb`] does locally:
    /// the limiter saw them all).
    fn absorb(&mut self, formed: &[String]) {
        let now = self.budget.now_ms();
        let others: Vec<HostMachine> = formed
            .iter()
            .filter(|n| **n != self.host)
            .filter_map(|n| self.budget.cached(n))
            .filter(|v| {
                v.state
                    .booked_at
                    .is_some_and(|b| now - b <= ACTIVE_SHARER_MS)
            })
            .map(|v| HostMachine::with_state(self.params.clone(), v.state))
            .collect();
        for _ in 0..COMMIT_TRIES {
            let (_, mut m, version, _) = self.pacing();
            m.absorb(&others, now);
            match self.budget.commit(&self.host, version, m.state(), None) {
                Ok(true) => {
                    let changes = m.take_audit();
                    crate::throttle::log_changes(&self.host, changes, &mut self.audit);
                    return;
                }
                Ok(false) => continue,
                Err(e) => {
                    tracing::error!(host = %self.host, "cannot commit a pool's pace: {e}");
                    return;
                }
            }
        }
    }

    /// Teach the outcome to the state that paces the host (its pool's, when pooled) and
    /// commit it. `refusal`: a refusal or an answer asking for a hold, which reaches the
    /// limiter group (pooled right after the hold goes out, so every name's lease meets
    /// the hold on the pacer from then on, before the slower learning commit).
    fn learn(&mut self, feedback: &Feedback, refusal: bool) -> Verdict {
        if routine(feedback) {
            let (target, mut m, _, _) = self.pacing();
            let booked = m.state().tat;
            let at = self.budget.now_ms();
            let verdict = super::apply_feedback(&mut m, feedback, at, at);
            // A send that left late moves the host's next slot (the spacing the server
            // sees): every worker must know before it books that slot, not with this
            // worker's next commit. A slot moved to a moment already past (a host without a
            // pace: every send "leaves late" by its dispatch delay) holds nobody back.
            if verdict == Verdict::Continue && (m.state().tat <= booked || m.state().tat <= at) {
                self.budget.defer(&target, feedback, at);
                return verdict;
            }
        }
        // A hold goes out first, on its own: learning from a refusal fits the whole send
        // log, and until its commit lands the other workers keep sending.
        for _ in 0..COMMIT_TRIES {
            let (target, mut m, version, _) = self.pacing();
            if !m.hold_ahead(feedback, self.budget.now_ms()) {
                break;
            }
            match self.budget.commit(&target, version, m.state(), None) {
                Ok(false) => continue,
                Ok(true) | Err(_) => break,
            }
        }
        let formed = if refusal {
            self.pool_group()
        } else {
            Vec::new()
        };
        let verdict = self.commit_learning(feedback);
        if !formed.is_empty() {
            self.absorb(&formed);
        }
        verdict
    }

    /// Teach the outcome to the state that paces the host and commit it.
    fn commit_learning(&mut self, feedback: &Feedback) -> Verdict {
        let mut verdict = Verdict::Continue;
        for _ in 0..COMMIT_TRIES {
            let (target, mut m, version, _) = self.pacing();
            let at = self.budget.now_ms();
            verdict = super::apply_feedback(&mut m, feedback, at, at);
            let skip = match &verdict {
                Verdict::Skip(why) => Some(why.as_str()),
                Verdict::Continue => None,
            };
            match self.budget.commit(&target, version, m.state(), skip) {
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

    /// When the next request may be leased: the slot, less the look-ahead the budget
    /// allows (the request then waits for its slot in [`FleetFrontier`](super::FleetFrontier)),
    /// plus this worker's turn among those sharing the host ([`SharedBudget::turn_ms`]).
    fn ready_at(&self) -> Instant {
        let (_, m, _, pool) = self.pacing();
        let ahead = lease_ahead(&m, self.budget.lease_ahead_ms());
        let mut at = m.ready_at();
        // A pooled name: the pool's next slot, after its own hold and one gap of its own
        // `max_rate` after its own last booking; turns are a name's own (none in a pool).
        let turn = match &pool {
            Some(p) => {
                at = at.max(self.machine().0.state().hold_until).max(
                    p.own_booked
                        .map_or(f64::NEG_INFINITY, |b| b + self.own_gap()),
                );
                0.0
            }
            None => self.budget.turn_ms(&self.host),
        };
        let wait = at - ahead + turn - self.budget.now_ms();
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
        // A refusal, or an answer asking for a hold, reaches the limiter group.
        let refusal = matches!(feedback.status, Some(429 | 503)) || asks_hold(feedback);
        self.learn(feedback, refusal)
    }

    fn rate(&self) -> f64 {
        self.pacing().1.rate()
    }

    fn holds(&self) -> (u64, Duration) {
        let (n, ms) = self.pacing().1.holds();
        (n, Duration::from_secs_f64(ms.max(0.0) / 1_000.0))
    }

    fn audit(&self) -> Vec<AuditRecord> {
        self.audit.records()
    }

    fn unwell(&self) -> bool {
        self.pacing().1.unwell()
    }

    /// The end of the host's latest hold, as the fleet last told this worker (a pooled
    /// name's or its pool's, whichever ends later): limiter groups work in the fleet as
    /// locally, since the hold this worker spreads to a sibling is committed to the
    /// sibling's shared state, which every worker leases against.
    fn held_until(&self) -> Option<Instant> {
        let mut until = self.machine().0.state().hold_until;
        if let (_, m, _, Some(_)) = self.pacing() {
            until = until.max(m.state().hold_until);
        }
        let wait = until - self.budget.now_ms();
        let now = Instant::now();
        Some(if wait > 0.0 {
            now + Duration::from_secs_f64(wait / 1_000.0)
        } else {
            now.checked_sub(Duration::from_secs_f64(-wait / 1_000.0))
                .unwrap_or(now)
        })
    }

    fn set_sharers(&mut self, n: usize) {
        // The group is this worker's view: the split is local, as the parameters are.
        self.params.sharers = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
    }

    fn share_hold(&mut self, until: Instant, now: Instant, refusal: bool) {
        let fleet_now = self.budget.now_ms();
        let until = fleet_now + until.saturating_duration_since(now).as_secs_f64() * 1_000.0;
        for _ in 0..COMMIT_TRIES {
            let (mut m, version) = self.machine();
            // A hold passed through an `Instant` may come back a rounding off: a
            // sub-millisecond move is the same hold, not a new one.
            if until <= m.state().hold_until + 0.5 || !m.share_hold(until, fleet_now, refusal) {
                return;
            }
            match self.budget.commit(&self.host, version, m.state(), None) {
                Ok(true) => {
                    let changes = m.take_audit();
                    crate::throttle::log_changes(&self.host, changes, &mut self.audit);
                    return;
                }
                Ok(false) => continue,
                Err(e) => {
                    tracing::error!(host = %self.host, "cannot commit a limiter group's hold: {e}");
                    return;
                }
            }
        }
    }

    fn audit_since(&self, seen: u64) -> (u64, Vec<AuditRecord>) {
        self.audit.since(seen)
    }
}
