//! The adaptive controller, whole (`docs/politeness.md` is its one-page explanation):
//!
//! 1. **Slow start.** Until the first refusal the rate doubles every
//!    `discover_doubling_ms` of clean answers.
//! 2. **One decrease per refusal episode.** A refusal of a request sent after the last cut
//!    opens an episode: the refused pace becomes the ceiling (if lower), and the rate drops
//!    to the smaller of `decrease` x that pace (multiplicative decrease) and `margin` x the
//!    delivery rate, what the server accepted per second over the last two minutes, holds
//!    included. Answers to requests already in flight belong to the same episode.
//! 3. **Climb.** Below `margin` x the ceiling the rate climbs by `climb_per_min` of the
//!    ceiling per minute. The ceiling is forgotten `ceiling_memory_ms` after it was set.
//! 4. **Probe.** At the top, a probe raises the rate by its step once the host has been
//!    calm for the payback time (the mean hold divided by the step, at least
//!    `probe_calm_ms`). A probe that holds through the next calm doubles the next step (and
//!    forgets the ceiling, when it held at or above it: the limit rose); a refused one is an
//!    episode like any other and resets the step.
//! 5. **Latency.** A server answering slower than twice its normal latency (plus the
//!    tolerance) opens a latency episode: a step down by the margin, then `decrease` every
//!    `slow_every_ms` while it stays slow and is not getting better, and no growth: a server
//!    that stays slow gets less for as long as it stays slow. The pace the episode opened
//!    at lowers the ceiling (a server that queues past a pace bounds what it takes as a
//!    refusal does), and the rate climbs back under it.
//! 6. **RateLimit headers** steer the rate to the quota left over the time left (this name's
//!    part of it, when a limiter group shares it), under the ceiling; when they stop coming
//!    the host returns to probing.

use crawler_core::{Feedback, RateLimitReading};

use super::HostMachine;
use crate::politeness::Delivery;
use crate::politeness::audit::{Phase, Trigger};
use crate::politeness::params::Millis;

impl HostMachine {
    /// The lowest refused pace, while it is remembered.
    pub(super) fn ceiling_in_force(&self, now: Millis) -> Option<f64> {
        let memory = self.params.tuning.ceiling_memory_ms;
        self.state
            .ceiling
            .filter(|_| self.state.ceiling_at.is_none_or(|at| now - at <= memory))
    }

    /// Lower the ceiling to `pace` (or set it, when none is in force).
    pub(super) fn lower_ceiling(&mut self, pace: f64, now: Millis) {
        let c = self.ceiling_in_force(now).map_or(pace, |c| c.min(pace));
        self.state.ceiling = Some(c);
        self.state.ceiling_at = Some(now);
    }

    /// What the server delivered per second over the delivery window, holds included, but
    /// measured from the end of the last hold longer than the window: a hold shorter than
    /// the window is part of what the limiter needs to recover (a window turning, a bucket
    /// refilling) and counts as time; a longer one is the server's pause, not its pace.
    fn delivered(&mut self, now: Millis) -> f64 {
        let since = self
            .state
            .born
            .max(self.state.long_hold_end.unwrap_or(f64::MIN));
        self.state.delivery.rate(now, since)
    }

    /// The pace the server saw (requests/s): the rate, or the pace requests actually left
    /// at when the queue kept them slower.
    fn pace(&self) -> f64 {
        let paced = self.state.rate;
        if self.state.send_gap > 0.0 {
            paced.min(1_000.0 / self.state.send_gap)
        } else {
            paced
        }
    }

    /// A 429 or 503: one multiplicative decrease per episode, never above what the server
    /// delivered.
    pub(super) fn refused(&mut self, now: Millis, trigger: Trigger) {
        let t = &self.params.tuning;
        let (decrease, margin, first_step) = (t.decrease, t.margin, t.probe_step);
        let pace = self.pace();
        let delivered = self.delivered(now);
        self.state.calm_since = self.state.calm_since.max(now);
        self.state.probe_step = first_step;
        self.lower_ceiling(pace, now);
        // The delivery rate, within one to two decreases of the refused pace: a starved host
        // has delivered little, which says nothing of the limit. A host younger than the
        // delivery window has been in slow start for most of it, so one decrease is all.
        let young = now - self.state.born < Delivery::WINDOW_MS;
        let new = if young {
            decrease * pace
        } else {
            (margin * delivered).clamp(decrease * decrease * pace, decrease * pace)
        };
        tracing::debug!(pace, delivered, new, "refusal episode");
        if self.state.phase != Phase::Steered {
            self.state.phase = Phase::Climb;
        }
        let new = self.clamp(new);
        self.set_estimate(new, trigger, now);
        self.set_rate(new, trigger, now);
    }

    /// An answer in adaptive mode that was not a refusal.
    pub(super) fn adapt(&mut self, fb: &Feedback, refused: bool, sent_at: Millis, now: Millis) {
        // Any status under 500 is a page the server served (a 404 too: the limiter took it).
        let served = fb.status.is_some_and(|s| s < 500);
        if refused || !served {
            return;
        }
        self.state.delivery.accepted(sent_at);
        if self.latency(fb.latency.as_secs_f64(), now) {
            return;
        }
        if let Some(rl) = fb.rate_limit {
            self.steer(rl, now);
            return;
        }
        if self.state.phase == Phase::Steered {
            // Headers that steered the rate stopped coming: back to learning, from here.
            let quiet = self.state.steered_at.is_none_or(|at| now - at > 60_000.0);
            if !quiet {
                return;
            }
            self.state.phase = Phase::Settled;
            self.state.declared = None;
            self.state.calm_since = now;
            let rate = self.state.rate;
            self.set_estimate(rate, Trigger::SteeringLost, now);
        }
        // Growth is per elapsed time; a gap longer than two intervals (an idle queue) earns
        // none. Each moment counts once: a fleet folds its workers' answers in batches, each
        // worker's in its own order, and an answer dated before the last growth must not
        // move the mark back for the next answer to count that time again.
        let dt = (now - self.state.grown_at).clamp(0.0, 2.0 * self.interval());
        self.state.grown_at = self.state.grown_at.max(now);
        let t = self.params.tuning.clone();
        match self.state.phase {
            Phase::Steered => {}
            Phase::Discover => {
                let rate = self.state.rate * 2f64.powf(dt / t.discover_doubling_ms);
                self.set_rate(rate, Trigger::Discover, now);
            }
            Phase::Climb => match self.ceiling_in_force(now) {
                Some(c) if self.state.rate < t.margin * c => {
                    // The climb risks a hold as a probe does, so it is slower the longer
                    // the holds: full speed while the payback time of a first probe step is
                    // within the shortest calm, proportionally slower beyond it.
                    let payback = self.mean_refusal_hold_ms() / t.probe_step;
                    let speed = t.climb_per_min * (t.probe_calm_ms / payback.max(1.0)).min(1.0);
                    let rate = (self.state.rate + speed * c * dt / 60_000.0).min(t.margin * c);
                    self.set_rate(rate, Trigger::Discover, now);
                }
                _ => {
                    self.state.phase = Phase::Settled;
                    self.state.calm_since = self.state.calm_since.max(now);
                }
            },
            Phase::Settled | Phase::Probe => {
                let step = self.state.probe_step.max(t.probe_step);
                let payback = (self.mean_refusal_hold_ms() / step).max(t.probe_calm_ms);
                if now - self.state.calm_since < payback {
                    return;
                }
                let rate = self.state.rate;
                if self.state.phase == Phase::Probe {
                    // The last probe held through a whole calm: the limit is above it, and
                    // the next step is twice as long. Held at or above the lowest refused
                    // pace, it shows that pace is no longer the limit (the limit rose): the
                    // ceiling is forgotten.
                    if self.ceiling_in_force(now).is_some_and(|c| rate >= c) {
                        self.state.ceiling = None;
                    }
                    self.state.probe_step = (step * 2.0).min(1.0);
                }
                if rate >= self.params.max_rate {
                    return;
                }
                self.state.calm_since = now;
                self.state.phase = Phase::Probe;
                let step = self.state.probe_step.max(t.probe_step);
                self.set_rate(rate * (1.0 + step), Trigger::Probe, now);
            }
        }
    }

    /// Fold one latency sample (seconds) into the fast average and the baseline; while the
    /// server is slow, ease the rate. Returns whether it is slow (then nothing grows).
    fn latency(&mut self, lat: f64, now: Millis) -> bool {
        let t = &self.params.tuning;
        let fast = self
            .state
            .lat_fast
            .map_or(lat, |f| (1.0 - t.latency_fast) * f + t.latency_fast * lat);
        // The baseline is the lowest the fast average has been, and follows a lasting rise
        // only over `latency_memory_ms`: a server that stays slow gets less until then.
        let dt = (now - self.state.lat_at).max(0.0);
        let follow = (dt / t.latency_memory_ms.max(1.0)).min(1.0);
        let base = self
            .state
            .lat_base
            .map_or(fast, |b| (b + (fast - b).max(0.0) * follow).min(fast));
        self.state.lat_fast = Some(fast);
        self.state.lat_base = Some(base);
        // Each moment counts once, as for growth: a fleet folds answers out of time order.
        self.state.lat_at = self.state.lat_at.max(now);
        let slow = fast > 2.0 * (base + self.params.latency_tolerance_ms / 1_000.0);
        if !slow {
            self.state.slow = false;
            return false;
        }
        // A latency episode: a first step down by the margin (a server that queues what
        // exceeds its rate answers later instead of refusing; a little less is what it
        // needs), and while it stays slow and is not getting better the rate keeps falling
        // by `decrease` every `slow_every_ms`.
        let t = &self.params.tuning;
        let (decrease, margin, every, first_step) =
            (t.decrease, t.margin, t.slow_every_ms, t.probe_step);
        // Again only while it stays slow and is not getting better: a server that queued
        // what we sent too fast is still slow while it drains the queue.
        let due = !self.state.slow
            || (self.state.eased_at.is_none_or(|at| now - at >= every)
                && self.state.lat_eased.is_none_or(|l| fast >= l));
        if due {
            let pace = self.pace();
            let first = !self.state.slow;
            let new = if self.state.slow {
                decrease * self.state.rate
            } else {
                margin * pace
            };
            self.state.slow = true;
            self.state.eased_at = Some(now);
            self.state.lat_eased = Some(fast);
            self.state.calm_since = self.state.calm_since.max(now);
            self.state.probe_step = first_step;
            if first {
                // The pace the server began to queue at bounds what it takes, as a refused
                // pace does: the climb back stays under it.
                self.lower_ceiling(pace, now);
            }
            if self.state.phase != Phase::Steered {
                self.state.phase = Phase::Climb;
            }
            self.set_rate(new, Trigger::Latency, now);
        }
        true
    }

    /// RateLimit headers: pace to `remaining / seconds-to-reset`, never above the ceiling.
    fn steer(&mut self, rl: RateLimitReading, now: Millis) {
        let Some(reset) = rl.reset.or(rl.window) else {
            return;
        };
        self.state.steered_at = Some(now);
        // Time left in the window: the narrowed edge when the reset is what it brackets
        // (whole-second resets are rounded up by servers, so a reading alone is up to a
        // second long).
        let secs = match (rl.reset, self.state.edge) {
            (Some(r), Some(e)) => (e.wait(now) / 1_000.0).min(r.as_secs_f64()),
            _ => reset.as_secs_f64(),
        };
        if rl.remaining == 0 || secs <= 0.0 {
            return;
        }
        // Requests already in flight will spend quota too. The remaining requests are
        // spread so that the last one goes a gap before the window turns, not on the edge:
        // the next window's first request is the one that goes on the edge (after the
        // exhausted quota's hold), so every window's whole quota is used.
        // A quota shared by the names of a limiter group: this name's part of it.
        let ours = rl.remaining / u64::from(self.params.sharers.max(1));
        let left = ours.saturating_sub(u64::from(self.state.in_flight));
        if left == 0 {
            // What is in flight spends the rest of the quota: nothing more until the window
            // turns (the rate stays; a rate of zero would be booked into the next send).
            let wait = secs * 1_000.0;
            if wait <= self.params.max_wait_ms {
                let _ = self.hold(wait, now, Trigger::RateLimit);
            }
            return;
        }
        let budget = (left + 1) as f64 / secs;
        self.state.phase = Phase::Steered;
        self.state.declared = Some(budget.max(1e-3));
        let ceiling = self
            .ceiling_in_force(now)
            .map_or(f64::INFINITY, |c| c * self.params.tuning.margin);
        self.set_rate(budget.min(ceiling), Trigger::RateLimit, now);
    }
}

impl HostMachine {
    /// Whether an answer to the request sent at `sent_at` belongs to the episode the last
    /// cut already answered: sent before it, or read with nothing booked since (its send
    /// time is the caller's reading of the clock, late on a busy client, and a refusal
    /// dated just after the cut would count as a new episode refused at once).
    pub(super) fn answered_before(&self, sent_at: Millis) -> bool {
        self.state
            .last_cut
            .is_some_and(|c| sent_at < c || self.state.booked_at.is_some_and(|b| b < c))
    }

    /// Whether the request sent at `sent_at` was in flight when the last backoff hold was
    /// placed (sent before it, or nothing booked since), by the same reading as
    /// [`Self::answered_before`].
    pub(super) fn in_flight_at_backoff(&self, sent_at: Millis) -> bool {
        self.state
            .backoff_at
            .is_some_and(|b| sent_at < b || self.state.booked_at.is_some_and(|k| k < b))
    }
}
