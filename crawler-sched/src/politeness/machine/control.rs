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
//! 5. **Latency means queueing.** Only pages' latency counts (not robots.txt, sitemaps,
//!    redirects or 304s); the baseline is the lowest the fast average has been over
//!    `latency_window_ms`. Above `(1 + latency_queue)` x the baseline plus the tolerance, a
//!    latency episode opens: a step down by the margin, then `decrease` every
//!    `slow_every_ms` while the average keeps rising; when a cut leaves it flat, the level
//!    is the server's own (it becomes the baseline and the rate comes back); when the
//!    answers return to the baseline, the pace the episode opened at lowers the ceiling.
//!    With more than one request in flight allowed, the in-flight cap follows Little's law
//!    (`steer_in_flight`).
//! 6. **RateLimit headers** steer the rate to the quota left over the time left (this name's
//!    part of it, when a limiter group shares it), under the ceiling; when they stop coming
//!    the host returns to probing.

use crawler_core::{Feedback, RateLimitReading};

use super::HostMachine;
use crate::politeness::Delivery;
use crate::politeness::audit::{Phase, Trigger};
use crate::politeness::params::{Millis, Mode};

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
        // A refused probe: the rate that held before it held through a whole calm, so the
        // rate goes back there (the probe's step was the excess), and the next probe waits
        // twice as long.
        let probe_from = self
            .state
            .probe_from
            .take()
            .filter(|_| self.state.phase == Phase::Probe);
        if probe_from.is_some() {
            self.state.probes_refused = self.state.probes_refused.saturating_add(1);
        }
        let new = if let Some(from) = probe_from {
            from.min(pace).max(decrease * decrease * pace)
        } else if young {
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
        let slow = if is_page(fb) {
            self.latency(fb.latency.as_secs_f64(), now)
        } else {
            // robots.txt, a sitemap, a redirect, a 304: no page's latency; the judgement
            // of the pages stands.
            self.state.slow
        };
        if slow {
            return;
        }
        if let Some(rl) = fb.rate_limit {
            self.steer(rl, now);
            return;
        }
        if self.state.phase == Phase::Steered {
            // Headers that steered the rate stopped coming: back to learning, from here.
            let quiet_ms = self.params.tuning.steering_quiet_ms;
            let quiet = self.state.steered_at.is_none_or(|at| now - at > quiet_ms);
            if !quiet {
                return;
            }
            self.state.phase = Phase::Settled;
            self.state.declared = None;
            self.state.calm_since = now;
            let rate = self.state.rate;
            self.set_estimate(rate, Trigger::SteeringLost, now);
        }
        // Growth is per elapsed time; a gap longer than `growth_gap_intervals` (an idle
        // queue) earns none. Each moment counts once: a fleet folds its workers' answers in batches, each
        // worker's in its own order, and an answer dated before the last growth must not
        // move the mark back for the next answer to count that time again.
        let dt = (now - self.state.grown_at).clamp(
            0.0,
            self.params.tuning.growth_gap_intervals * self.interval(),
        );
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
                // The payback time, doubled for each probe refused in a row: a limit the
                // probes keep finding is worth asking less often.
                let payback = (self.mean_refusal_hold_ms() / step).max(t.probe_calm_ms)
                    * 2f64.powi(self.state.probes_refused.min(t.probe_backoff_doublings) as i32);
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
                    self.state.probe_step = (step * 2.0).min(t.probe_step_max);
                    self.state.probes_refused = 0;
                }
                if rate >= self.params.max_rate {
                    return;
                }
                self.state.calm_since = now;
                self.state.phase = Phase::Probe;
                self.state.probe_from = Some(rate);
                let step = self.state.probe_step.max(t.probe_step);
                self.set_rate(rate * (1.0 + step), Trigger::Probe, now);
            }
        }
    }

    /// Fold one page's latency (seconds) into the fast average and the baseline; while the
    /// server is queueing our pages, ease the rate. Returns whether it is (then nothing
    /// grows).
    fn latency(&mut self, lat: f64, now: Millis) -> bool {
        let t = &self.params.tuning;
        let fast = self
            .state
            .lat_fast
            .map_or(lat, |f| (1.0 - t.latency_fast) * f + t.latency_fast * lat);
        // The baseline: the lowest the fast average has been over the last window, kept as
        // the lowest of this half-window and of the one before (a windowed minimum in two
        // halves). Each moment counts once, as for growth: a fleet folds answers out of
        // time order, and an answer dated before the current half only lowers its minimum.
        let half = t.latency_window_ms / 2.0;
        let since = now - self.state.lat_half_at;
        let (cur, prev) = self.state.lat_min;
        self.state.lat_min = if since >= 2.0 * half {
            // Idle for a whole window: nothing older says what the server is now.
            (Some(fast), None)
        } else if since >= half {
            (Some(fast), cur)
        } else {
            (Some(cur.map_or(fast, |c| c.min(fast))), prev)
        };
        if since >= half {
            self.state.lat_half_at = now;
        }
        let base = match self.state.lat_min {
            (Some(c), Some(p)) => c.min(p),
            (c, p) => c.or(p).unwrap_or(fast),
        };
        self.state.lat_fast = Some(fast);
        self.state.lat_base = Some(base);
        self.state.lat_at = self.state.lat_at.max(now);
        self.steer_in_flight(fast, base, now);
        // Queueing: the fast average above the baseline by more than the share of it the
        // tuning allows, plus the user's tolerance for jitter.
        let t = &self.params.tuning;
        let tolerance = self.params.latency_tolerance_ms / 1_000.0;
        let (decrease, margin, every, first_step, rising, knee, queue) = (
            t.decrease,
            t.margin,
            t.slow_every_ms,
            t.probe_step,
            t.latency_rising,
            t.latency_knee,
            t.latency_queue,
        );
        if !self.state.slow {
            if fast <= base * (1.0 + queue) + tolerance {
                return false;
            }
            // A latency episode opens: a first step down by the margin (a server that
            // queues what exceeds its rate answers later instead of refusing; a little less
            // is what it needs).
            let pace = self.pace();
            self.state.slow = true;
            self.state.lat_open = Some((pace, self.state.rate));
            self.ease(fast, now, first_step);
            self.set_rate(margin * pace, Trigger::Latency, now);
            return true;
        }
        if fast <= base * (1.0 + knee) + tolerance {
            // The episode's cuts brought the answers back to the baseline: the pace it
            // opened at made the server queue, and bounds what it takes as a refused pace
            // does (the climb back stays under it).
            self.state.slow = false;
            if let Some((pace, _)) = self.state.lat_open.take() {
                self.lower_ceiling(pace, now);
            }
            return false;
        }
        // Every `slow_every_ms` while it lasts: `decrease` while the fast average keeps
        // rising (our pace still grows the queue); nothing while it falls (the queue
        // drains); and when it stayed flat, the cut did not shorten the answers: that is
        // the server's own level, which becomes the baseline, and the rate the episode
        // took away comes back.
        if self.state.eased_at.is_some_and(|at| now - at < every) {
            return true;
        }
        let last = self.state.lat_eased.unwrap_or(fast);
        if fast > last * (1.0 + rising) {
            self.ease(fast, now, first_step);
            let rate = decrease * self.state.rate;
            self.set_rate(rate, Trigger::Latency, now);
        } else if fast < last * (1.0 - rising) {
            self.state.eased_at = Some(now);
            self.state.lat_eased = Some(fast);
        } else {
            self.state.lat_min = (Some(fast), None);
            self.state.lat_base = Some(fast);
            self.state.lat_half_at = now;
            self.state.slow = false;
            if let Some((_, rate)) = self.state.lat_open.take() {
                let rate = rate.max(self.state.rate);
                self.set_rate(rate, Trigger::LatencyLevel, now);
            }
            return false;
        }
        true
    }

    /// A cut of a latency episode at `now`, the fast average then `fast`.
    fn ease(&mut self, fast: f64, now: Millis, first_step: f64) {
        self.state.eased_at = Some(now);
        self.state.lat_eased = Some(fast);
        self.state.calm_since = self.state.calm_since.max(now);
        self.state.probe_step = first_step;
        if self.state.phase != Phase::Steered {
            self.state.phase = Phase::Climb;
        }
    }

    /// The in-flight cap by Little's law: requests in flight are the server's throughput
    /// times their latency, so with more in flight than it serves at once the extra ones
    /// wait, and latency rises with every request added while throughput does not. A fast
    /// average above `1 + latency_queue / 2` times the baseline sets the cap at once to
    /// what the pace needs at the baseline latency; then every `slow_every_ms` it moves by one: down when the fast
    /// average rose by more than the knee since the last move (the request added last
    /// waited), else up (three times as slowly after a move down, so most of the time is
    /// spent under the knee), never above `concurrency_per_host`. One
    /// request at a time never queues behind our own, so a crawl with one in flight is
    /// never capped here.
    fn steer_in_flight(&mut self, fast: f64, base: f64, now: Millis) {
        let max = self.params.concurrency.max(1);
        if self.params.mode != Mode::Adaptive || max == 1 {
            return;
        }
        let t = &self.params.tuning;
        let (knee, queue, every) = (t.latency_knee, t.latency_queue, t.slow_every_ms);
        let cap = self.state.lat_cap.unwrap_or(max);
        // Little's law at the baseline: what the pace needs with no queue.
        let needed = (self.pace() * base * (1.0 + knee)).floor().max(1.0);
        let little = u32::try_from(needed as u64).unwrap_or(u32::MAX);
        // A queue as long as the one that opens a latency episode: at once to what the pace
        // needs with no queue. Half of it is already a page waiting half its service time
        // behind ours: one fewer than are in flight now (this answer's request included),
        // and the steps below find the rest (the baseline is the lowest of a jittery
        // average, so Little's law on it would cut too deep).
        let (new, wait) = if fast > base * (1.0 + queue) && little < cap {
            (little, every)
        } else if self.state.lat_cap.is_none() && fast > base * (1.0 + queue * t.in_flight_engage) {
            (self.state.in_flight.clamp(1, cap), every)
        } else if self.state.lat_cap.is_none() || self.state.lat_cap_at.is_some_and(|at| now < at) {
            return;
        } else if fast > self.state.lat_cap_ref.unwrap_or(fast) + knee * base {
            (cap.saturating_sub(1).max(1), t.cap_down_pause * every)
        } else {
            (cap + 1, every)
        };
        // Kept at the user's cap once there, not dropped: the baseline follows a queue that
        // lasts a whole window, so a cap that vanished could not be found again.
        self.state.lat_cap = Some(new.min(max));
        self.state.lat_cap_at = Some(now + wait);
        self.state.lat_cap_ref = Some(fast);
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

/// Whether an answer's latency is a page's: not robots.txt or a sitemap
/// ([`Feedback::cheap`]), not a redirect or a 304 (the server answers those without
/// building a page).
pub(super) fn is_page(fb: &Feedback) -> bool {
    !fb.cheap && fb.status.is_some_and(|s| !(300..400).contains(&s))
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
