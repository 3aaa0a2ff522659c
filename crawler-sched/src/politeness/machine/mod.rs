//! The per-host politeness state machine: time and feedback in, decisions out.
//!
//! One [`HostMachine`] per host key decides when the next request may go and how many may
//! be in flight. It has no clock and does no I/O: every method takes the time as
//! milliseconds on the caller's clock ([`Millis`]), so the same machine runs a local crawl
//! (milliseconds since the slot was made), a fleet (the Redis server's clock) and the
//! paused-clock tests, and its whole state serialises for resume and for the fleet's
//! compare-and-set.
//!
//! The rules every mode obeys: holds (Retry-After on any status, an exhausted RateLimit
//! quota, challenge pages, refusals without Retry-After by growing backoff, robots.txt
//! outages), the Crawl-delay floor, skipping a host that asks for a wait beyond
//! `max_retry_after`, a streak of 403s. The modes differ only in how the pacing rate moves:
//! [`Mode::Adaptive`] learns the server's limit from what it accepted, [`Mode::AutoThrottle`]
//! is Scrapy's latency rule, [`Mode::Fixed`] a fixed delay.
//!
//! The machine's methods are cut by what they decide, one file each; they all work on the
//! [`HostMachine`] defined here and share nothing but its fields and the helpers marked
//! `pub(super)`. Pure: no clock, no I/O but debug logs, no randomness but its own generator.
//!
//! - `pacing`: when the next send may go (the GCRA bucket under the floors and the latency
//!   factor), rate changes with their audit records, holds, backoff and skips.
//! - `feedback`: [`HostMachine::on_feedback`], the rules every mode obeys (Crawl-delay,
//!   robots.txt outages, Retry-After, exhausted quotas, challenge pages, 403 streaks, runs
//!   of failures), and AutoThrottle.
//! - `control`: the adaptive controller: slow start, one multiplicative decrease per
//!   refusal episode down to the delivery rate, the climb under the ceiling, probes timed
//!   by the payback rule, RateLimit steering and the latency baseline.

use super::audit::{Change, Phase, Trigger};
use super::delivery::Delivery;
use super::params::{Millis, Mode, Params};
use super::state::HostState;

mod control;
mod feedback;
mod pacing;

/// One host's politeness machine: [`Params`] plus [`HostState`], and the audit records of
/// the changes not yet taken by the caller.
#[derive(Debug, Clone)]
pub struct HostMachine {
    params: Params,
    state: HostState,
    audit: Vec<Change>,
}

impl HostMachine {
    /// A fresh host at `now`.
    pub fn new(params: Params, now: Millis) -> Self {
        let rate = match params.mode {
            Mode::Adaptive => params.start_rate,
            Mode::AutoThrottle => params.start_rate.min(
                1_000.0
                    / params
                        .min_gap_ms
                        .max(1_000.0 / params.start_rate.max(1e-9))
                        .max(1.0),
            ),
            Mode::Fixed => 0.0,
        };
        let mut m = Self {
            state: HostState {
                rate,
                tat: now,
                hold_until: now,
                last_gap: 0.0,
                departure_floor: now,
                holds: 0,
                held_ms: 0.0,
                refusal_holds: 0,
                refusal_held_ms: 0.0,
                crawl_delay_ms: 0.0,
                backoff_level: 0,
                forbidden: 0,
                robots_down_since: None,
                in_flight: 0,
                phase: Phase::Discover,
                estimate: None,
                declared: None,
                ceiling: None,
                ceiling_at: None,
                probe_step: params.tuning.probe_step,
                last_cut: None,
                probe_from: None,
                probes_refused: 0,
                booked_at: None,
                departed_at: None,
                send_gap: 0.0,
                in_episode: false,
                backoff_at: None,
                calm_since: now,
                failures: 0,
                served_sent: None,
                troubled_since: None,
                lat_fast: None,
                lat_base: None,
                lat_min: (None, None),
                lat_cap: None,
                lat_cap_at: None,
                lat_cap_ref: None,
                lat_open: None,
                lat_half_at: now,
                eased_at: None,
                lat_eased: None,
                slow: false,
                lat_at: now,
                grown_at: now,
                born: now,
                long_hold_end: None,
                delivery: Delivery::default(),
                edge: None,
                quota_left: None,
                quota_turn_by: None,
                spent_until: None,
                steered_at: None,
                seed: 0x9e37_79b9_7f4a_7c15,
            },
            params,
            audit: Vec::new(),
        };
        if m.params.mode != Mode::Fixed {
            m.state.rate = m.clamp(m.state.rate);
        }
        m
    }

    /// A machine with a known state (restored, or read from the fleet's store). A rate over
    /// `max_rate` (a state saved while it paced a pooled limiter group, see
    /// [`HostMachine::set_pool`]) comes back under it: alone, the name keeps its own limit.
    pub fn with_state(params: Params, mut state: HostState) -> Self {
        if params.mode != Mode::Fixed {
            state.rate = state.rate.min(params.max_rate);
        }
        Self {
            params,
            state,
            audit: Vec::new(),
        }
    }

    /// `n` host names share this host's limiter (its limiter group, itself included): a
    /// quota announced in RateLimit headers is theirs together, and this host steers to
    /// its `1/n` of what is left.
    pub fn set_sharers(&mut self, n: u32) {
        self.params.sharers = n.max(1);
    }

    /// This machine now paces its whole limiter group (see
    /// [`LimiterGroups::pool`](super::LimiterGroups::pool)): its in-flight cap and
    /// `max_rate` become the sums over the group's live names, and a quota is the group's
    /// alone (no other machine shares it).
    pub fn set_pool(&mut self, concurrency: u32, max_rate: f64) {
        self.params.concurrency = concurrency.max(1);
        self.params.max_rate = max_rate.max(self.params.min_rate);
        self.params.sharers = 1;
    }

    /// Take over the pace of `others`, names of this machine's limiter group that were
    /// sending when a refusal pooled it: what the limiter saw was all of them, so their
    /// rates, refused paces and deliveries add to this machine's (each already took the
    /// refusal's decrease, the hold having reached it). Times stay this machine's own: the
    /// others may run on other clocks. Call [`HostMachine::set_pool`] first, so the sum is
    /// clamped by the group's `max_rate`.
    pub fn absorb(&mut self, others: &[HostMachine], now: Millis) {
        if others.is_empty() || self.params.mode == Mode::Fixed {
            return;
        }
        let own = self.state.rate.max(1e-9);
        let s = &mut self.state;
        let mut rate = s.rate;
        let mut inverse_gap = if s.send_gap > 0.0 {
            1.0 / s.send_gap
        } else {
            0.0
        };
        for o in others {
            let t = &o.state;
            rate += t.rate;
            if let Some(c) = s.ceiling.as_mut() {
                *c += t.ceiling.unwrap_or(t.rate);
            }
            if let Some(e) = s.estimate.as_mut() {
                *e += t.estimate.unwrap_or(t.rate);
            }
            if let Some(d) = s.declared.as_mut() {
                *d += t.declared.unwrap_or(t.rate);
            }
            if let Some(p) = s.probe_from.as_mut() {
                *p += t.probe_from.unwrap_or(t.rate);
            }
            if t.send_gap > 0.0 {
                inverse_gap += 1.0 / t.send_gap;
            }
        }
        if inverse_gap > 0.0 {
            s.send_gap = 1.0 / inverse_gap;
        }
        s.delivery.scale(rate / own);
        self.set_rate(rate, Trigger::LimiterGroup, now);
        if let Some(c) = self.state.ceiling {
            self.state.ceiling = Some(c.min(self.params.max_rate));
        }
    }

    /// A machine for `share` of this one's pace (the inverse of [`HostMachine::absorb`]):
    /// a name leaves a pooled limiter group's machine with its part of the pace, or the
    /// rest of the pool keeps the other part (see
    /// [`LimiterGroups::pool_refused`](super::LimiterGroups::pool_refused)). The rate, the
    /// refused paces and the deliveries are scaled by `share`; holds, episodes and times are
    /// kept; `in_flight` are the requests booked on it whose answers it will learn.
    pub fn share_of(&self, share: f64, in_flight: u32, now: Millis) -> HostMachine {
        let share = share.clamp(1e-3, 1.0);
        let mut m = self.clone();
        m.audit.clear();
        m.state.in_flight = in_flight;
        if m.params.mode == Mode::Fixed {
            return m;
        }
        let s = &mut m.state;
        for v in [
            s.ceiling.as_mut(),
            s.estimate.as_mut(),
            s.declared.as_mut(),
            s.probe_from.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            *v *= share;
        }
        if s.send_gap > 0.0 {
            s.send_gap /= share;
        }
        s.delivery.scale(share);
        let rate = s.rate * share;
        m.set_rate(rate, Trigger::LimiterGroup, now);
        m
    }

    /// The refusals this machine learned were another name's (it left the pool, see
    /// [`LimiterGroups::pool_refused`](super::LimiterGroups::pool_refused)): what they
    /// taught about the limit is forgotten (the ceiling, the estimate, the probe schedule,
    /// the episode they opened), and the rate probes up from where it is, at the payback
    /// rhythm of the holds refusals have cost (rule 4 of docs/politeness.md: slow start
    /// would risk a long hold for all the group's names at once). Holds stay: they are the
    /// server's word.
    pub fn forget_limit(&mut self, now: Millis) {
        if self.params.mode != Mode::Adaptive {
            return;
        }
        let s = &mut self.state;
        s.ceiling = None;
        s.ceiling_at = None;
        s.estimate = None;
        s.probe_from = None;
        s.probes_refused = 0;
        s.probe_step = self.params.tuning.probe_step;
        s.in_episode = false;
        s.phase = Phase::Settled;
        s.calm_since = s.calm_since.max(now);
    }

    /// `from`'s state and pending audit records, on a clock `shift` ms ahead of its own,
    /// under `params` (a host's own): the machine a slot takes over when a name leaves a
    /// pooled limiter group ([`HostMachine::share_of`]). With `pool`, the machine paces
    /// the rest of the pool: its in-flight cap and `max_rate` are the pool's sums (see
    /// [`HostMachine::set_pool`]). The rate comes back under the resulting `max_rate`.
    pub fn adopted(
        params: Params,
        from: &HostMachine,
        shift: f64,
        pool: Option<(u32, f64)>,
    ) -> HostMachine {
        let mut m = Self {
            params,
            state: from.state.clone(),
            audit: from.audit.clone(),
        };
        if let Some((c, r)) = pool {
            m.set_pool(c, r);
        }
        if m.params.mode != Mode::Fixed {
            m.state.rate = m.state.rate.min(m.params.max_rate);
        }
        m.shift(shift);
        for c in &mut m.audit {
            c.at += shift;
        }
        m
    }

    /// The machine's parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// The state.
    pub fn state(&self) -> &HostState {
        &self.state
    }

    /// Take the audit records made since the last call.
    pub fn take_audit(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.audit)
    }

    /// Move every instant of the state by `delta` ms (a restored state's clock origin
    /// differs from the new run's).
    pub fn shift(&mut self, delta: f64) {
        let s = &mut self.state;
        for t in [
            &mut s.tat,
            &mut s.hold_until,
            &mut s.departure_floor,
            &mut s.calm_since,
            &mut s.grown_at,
            &mut s.born,
            &mut s.lat_at,
            &mut s.lat_half_at,
        ] {
            *t += delta;
        }
        for t in [
            s.last_cut.as_mut(),
            s.booked_at.as_mut(),
            s.departed_at.as_mut(),
            s.backoff_at.as_mut(),
            s.robots_down_since.as_mut(),
            s.quota_turn_by.as_mut(),
            s.spent_until.as_mut(),
            s.ceiling_at.as_mut(),
            s.troubled_since.as_mut(),
            s.served_sent.as_mut(),
            s.steered_at.as_mut(),
            s.eased_at.as_mut(),
            s.lat_cap_at.as_mut(),
            s.long_hold_end.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            *t += delta;
        }
        if let Some(e) = s.edge.as_mut() {
            e.lo += delta;
            e.hi += delta;
        }
        s.delivery.shift(delta);
    }

    /// The gap the host's pace keeps between sends (ms): 0 for a host without a pace
    /// (fixed mode without a delay, and no Crawl-delay), whose sends need no spacing.
    pub fn interval_ms(&self) -> f64 {
        self.interval()
    }

    /// The pacing rate, requests/s (for a fixed delay of zero: unlimited, reported as the
    /// ceiling).
    pub fn rate(&self) -> f64 {
        let iv = self.interval();
        if iv <= 0.0 {
            self.params.max_rate
        } else {
            1_000.0 / iv
        }
    }

    /// Holds placed so far and their total length (ms).
    pub fn holds(&self) -> (u64, f64) {
        (self.state.holds, self.state.held_ms)
    }

    /// Requests allowed in flight now.
    pub fn concurrency(&self) -> u32 {
        let max = self.params.concurrency.max(1);
        if self.unwell() || self.state.in_episode {
            // A host that failed or refused comes back through one probe at a time: until
            // an answer is served, more in flight would only fail or be refused together.
            return 1;
        }
        match (self.params.mode, self.state.lat_cap) {
            // Our pages wait behind each other in the server's queue: no more in flight than
            // it serves at once (see `control`).
            (Mode::Adaptive, Some(cap)) => cap.clamp(1, max),
            _ => max,
        }
    }

    /// Whether forgetting this host now would change nothing a fresh machine would not do
    /// the same or more carefully: nothing in flight, no hold, the bucket full again, and
    /// nothing learned that a fresh start lacks (no refusal, no estimate, no declared budget,
    /// no Crawl-delay, no backoff or 403 streak, no robots.txt outage). A broad crawl drops
    /// such hosts once idle so its memory does not grow with every host it ever touched.
    pub fn is_pristine(&self, now: Millis) -> bool {
        let s = &self.state;
        s.in_flight == 0
            && s.hold_until <= now
            && s.spent_until.is_none_or(|t| t <= now)
            && s.tat <= now
            && s.holds == 0
            && s.phase == Phase::Discover
            && s.estimate.is_none()
            && s.ceiling.is_none()
            && s.failures == 0
            && s.declared.is_none()
            && s.crawl_delay_ms <= 0.0
            && s.backoff_level == 0
            && s.forbidden == 0
            && s.robots_down_since.is_none()
    }

    /// Whether the host is held for a run of failures (5xx, broken connections, timeouts)
    /// and no page has been served since.
    pub fn unwell(&self) -> bool {
        self.state.failures >= self.params.tuning.failure_streak
    }

    /// Whether another request may be in flight now.
    pub fn has_room(&self) -> bool {
        self.state.in_flight < self.concurrency()
    }
}
