//! The adaptive mode on an accepted answer: latency easing, RateLimit steering, discovery
//! growth, the climb back towards the estimate, and probes above it.

use crawler_core::{FailureKind, Feedback};

use super::HostMachine;
use crate::politeness::audit::{Phase, Trigger};
use crate::politeness::estimate::Answer;
use crate::politeness::params::Millis;

impl HostMachine {
    pub(super) fn adapt(&mut self, fb: &Feedback, refused: bool, sent_at: Millis, now: Millis) {
        let tuning = self.params.tuning.clone();
        let timed_out = fb.failure == Some(FailureKind::Timeout);
        if refused {
            // Learned before the hold (see `on_feedback`).
            return;
        }
        if fb.status.is_some() {
            self.record(sent_at, Answer::Accepted);
        }
        if timed_out {
            if !self.answered_before(sent_at) {
                self.state.last_cut = Some(now);
                self.state.calm_since = now;
                let rate = self.state.rate * tuning.cut;
                self.set_rate(rate, Trigger::Timeout, now);
            }
            return;
        }
        if fb.status.is_none() || fb.failure.is_some() {
            return;
        }
        // Latency is tracked whatever steers the rate.
        let lat = fb.latency.as_secs_f64();
        let fast = self.state.lat_fast.map_or(lat, |f| {
            (1.0 - tuning.latency_fast) * f + tuning.latency_fast * lat
        });
        let slow = self.state.lat_slow.map_or(lat, |s| {
            (1.0 - tuning.latency_slow) * s + tuning.latency_slow * lat
        });
        self.state.lat_fast = Some(fast);
        self.state.lat_slow = Some(slow);
        if fast > 2.0 * slow && (fast - slow) * 1_000.0 > self.params.latency_tolerance_ms {
            let spacing = fast.max(1.0) * 1_000.0;
            if self
                .state
                .last_cut
                .is_none_or(|c| now - spacing >= c && sent_at >= c)
            {
                self.state.last_cut = Some(now);
                self.state.calm_since = now;
                if self.state.phase == Phase::Discover {
                    // The server slows down before it refuses: its capacity is near.
                    self.state.phase = Phase::Settled;
                    self.set_estimate(self.state.rate, Trigger::Latency, now);
                }
                let rate = self.state.rate * tuning.ease;
                self.set_rate(rate, Trigger::Latency, now);
            }
            return;
        }
        if let Some(rl) = fb.rate_limit {
            self.steer(rl, now);
            return;
        }
        match self.state.phase {
            Phase::Steered => {}
            Phase::Discover => {
                // Exponential growth per elapsed time while the host keeps up; a gap longer
                // than two intervals (an idle queue) earns no growth.
                let dt = (now - self.state.grown_at).clamp(0.0, 2.0 * self.interval());
                self.state.grown_at = now;
                let rate = self.state.rate * 2f64.powf(dt / tuning.discover_doubling_ms);
                self.set_rate(rate, Trigger::Discover, now);
            }
            Phase::Settled | Phase::Probe => {
                let dt = (now - self.state.grown_at).clamp(0.0, 2.0 * self.interval());
                self.state.grown_at = now;
                let est = self.state.estimate.unwrap_or(self.state.rate);
                // Each refusal met on a climb without a trusted estimate moves the next
                // climb's stop a margin further under the lowest refused rate, so that a
                // limit approached from above is reached in a few refusals, not one per
                // margin.
                let margins = self.state.climb_refusals.clamp(1, 8);
                let ceiling = self.state.ceiling.map_or(self.params.max_rate, |c| {
                    c * tuning.ceiling_margin.powi(margins as i32)
                });
                // Confident: settle just under the estimate. Not yet: climb towards the
                // lowest rate that was refused, where the next refusal (if any) will
                // teach the fit what it lacks.
                let target = if self.state.confident {
                    (est * tuning.slack).min(ceiling)
                } else {
                    ceiling
                };
                if self.state.rate < target {
                    // Close a share of the gap per minute (quick from far below, careful
                    // near the ceiling), and never slower than a floor speed.
                    let per_min = if self.state.confident {
                        tuning.recover_per_min
                    } else {
                        tuning.climb_per_min
                    };
                    let gap = target - self.state.rate;
                    let step =
                        (gap * tuning.climb_share_per_min).max(est * per_min) * dt / 60_000.0;
                    let rate = (self.state.rate + step).min(target);
                    self.set_rate(rate, Trigger::Discover, now);
                } else {
                    // Room between the settled rate and the lowest refused rate means the
                    // estimate may be low (a window limiter seen as a slow bucket): probe
                    // sooner and in bigger steps, never past the refused rate. Without room,
                    // probes are rare and small.
                    // A verified bucket's room is its burst, drained at a high rate: no
                    // sign that the estimate is low.
                    let room = !self.state.verified
                        && self
                            .state
                            .ceiling
                            .is_some_and(|c| c > est * (1.0 + tuning.fast_probe_room));
                    let (calm, step) = if self.state.confident && room {
                        (tuning.fast_probe_calm_ms, tuning.fast_probe_step)
                    } else {
                        // A failed probe costs a hold and a successful one gains its step,
                        // so the calm before one is at least the hold it risks over that step
                        // (1,000 s under a 30 s Retry-After): a probe every five minutes
                        // lost a tenth of the crawl's rate each time one was refused.
                        let payback = self.mean_hold_ms() / tuning.probe_step;
                        (self.state.probe_calm_ms.max(payback), tuning.probe_step)
                    };
                    if now - self.state.calm_since >= calm {
                        // A rate that held through a calm period takes back one margin
                        // of those refusals on climbs added, so sporadic refusals over a
                        // long crawl do not keep lowering where climbs stop.
                        self.state.climb_refusals = self.state.climb_refusals.saturating_sub(1);
                        // The rate held through a calm period: it is safe. Probe a little
                        // above it in case the server allows more than was learned, but
                        // never at a rate that was refused: up to just under the lowest
                        // one, which every probe raises, so a server that raised its limit
                        // is still found.
                        self.state.calm_since = now;
                        let rate = self.state.rate;
                        let mut probe = rate * (1.0 + step);
                        if let Some(c) = self.state.ceiling.as_mut() {
                            let under = if room {
                                tuning.ceiling_margin
                            } else {
                                tuning.probe_under_ceiling
                            };
                            probe = probe.min(*c * under).max(rate);
                            *c = c.max(probe / tuning.ceiling_margin);
                        }
                        if let Some(p) = self.state.pinned {
                            probe = probe.min(p * tuning.probe_under_ceiling).max(rate);
                        }
                        if probe <= rate * (1.0 + 1e-6) {
                            // Already just under a refused rate: no probe this time (the
                            // ceiling has moved up for the next one), and a refusal at this
                            // rate is not a failed probe.
                            self.state.phase = Phase::Settled;
                            return;
                        }
                        self.state.safe_rate = Some(rate);
                        self.state.phase = Phase::Probe;
                        self.set_estimate(probe / tuning.slack, Trigger::Probe, now);
                        self.set_rate(probe, Trigger::Probe, now);
                    }
                }
            }
        }
    }

    /// RateLimit headers: pace to `remaining / seconds-to-reset`, never above a limit
    /// learned from refusals.
    fn steer(&mut self, rl: crawler_core::RateLimitReading, now: Millis) {
        let Some(reset) = rl.reset.or(rl.window) else {
            return;
        };
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
        let left = rl.remaining.saturating_sub(u64::from(self.state.in_flight));
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
        let learned = self
            .state
            .estimate
            .map_or(f64::INFINITY, |e| e * self.params.tuning.slack);
        self.set_rate(budget.min(learned), Trigger::RateLimit, now);
    }
}
