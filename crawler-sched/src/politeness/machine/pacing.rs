//! Pacing and holds: when the next send may go (a GCRA token bucket under the Crawl-delay
//! and `download_delay` floors), every change of the rate or the estimate with its audit
//! record, holds, backoff and skips. Decides nothing about feedback: the other files call
//! these helpers.

use super::HostMachine;
use crate::politeness::Delivery;
use crate::politeness::audit::{Change, Trigger, Verdict, What};
use crate::politeness::params::{Millis, Mode};

impl HostMachine {
    /// The gap floor: Crawl-delay and `download_delay`.
    fn floor_ms(&self) -> f64 {
        self.state.crawl_delay_ms.max(self.params.min_gap_ms)
    }

    /// The nominal gap between sends (ms).
    pub(super) fn interval(&self) -> f64 {
        let pace = match self.params.mode {
            Mode::Fixed => 0.0,
            _ => 1_000.0 / self.state.rate.max(1e-9),
        };
        pace.max(self.floor_ms())
    }

    /// Sends allowed back to back: never under a delay floor, which would break it.
    fn burst(&self) -> u32 {
        if self.floor_ms() > 0.0 {
            1
        } else {
            self.params.burst.max(1)
        }
    }

    /// The earliest instant the next request may be sent.
    pub fn ready_at(&self) -> Millis {
        let slack = self.interval() * f64::from(self.burst() - 1);
        (self.state.tat - slack)
            .max(self.state.hold_until)
            .max(self.state.spent_until.unwrap_or(f64::NEG_INFINITY))
    }

    /// A request is being sent at `now`: book its slot.
    pub fn on_send(&mut self, now: Millis) {
        self.state.in_flight = self.state.in_flight.saturating_add(1);
        // From the latest booking, or the latest departure when a send left after its
        // booking (late): the gap the server saw. A gap across the end of a hold is the
        // hold's, not the pace's.
        let last = self
            .state
            .booked_at
            .map(|b| self.state.departed_at.map_or(b, |d| d.max(b)));
        if let Some(prev) = last.filter(|&p| p >= self.state.hold_until) {
            let gap = (now - prev).max(0.0);
            self.state.send_gap = if self.state.send_gap > 0.0 {
                (1.0 - super::super::SEND_GAP_WEIGHT) * self.state.send_gap
                    + super::super::SEND_GAP_WEIGHT * gap
            } else {
                gap
            };
        }
        self.state.booked_at = Some(now);
        if let Some(left) = self.state.quota_left.as_mut() {
            *left -= 1;
            if *left <= 0 && self.state.spent_until.is_none() {
                self.state.spent_until = self.state.quota_turn_by;
            }
        }
        let gap = self.gap();
        self.state.last_gap = gap;
        self.state.tat = self.state.tat.max(now) + gap;
    }

    /// A request booked earlier actually left at `sent_at` (its answer says when). A send
    /// that left late (the process starved of CPU between booking the slot and writing the
    /// request) must not shorten the gap to the next one, booked on time: behind a bucket
    /// with no burst that shorter gap is refused. So the next slot is at least one interval
    /// after the actual departure. The answer to a paced host's request usually arrives
    /// before the next slot, so this catches the late send in time; lateness within
    /// [`Tuning::late_send_ms`](crate::politeness::Tuning::late_send_ms) (the ordinary
    /// dispatch delay) moves nothing, so the pace does not drift down on every send.
    pub(super) fn left_at(&mut self, sent_at: Millis) {
        self.state.departed_at = Some(self.state.departed_at.map_or(sent_at, |d| d.max(sent_at)));
        let gap = match self.state.last_gap {
            g if g > 0.0 => g.min(self.interval()),
            _ => self.interval(),
        };
        let floor = sent_at + gap - self.params.tuning.late_send_ms;
        self.state.departure_floor = self.state.departure_floor.max(floor);
        if floor > self.state.tat {
            self.state.tat = floor;
        }
    }

    /// A booked request that will not be sent (refused by robots.txt from cache, or given
    /// back by a fleet worker) returns its slot, but only when it is the one booked request
    /// not yet answered: with another booked after it, the last gap booked is that one's,
    /// and rolling it back would hand its slot out a second time (two sends together,
    /// which a limiter without a burst refuses). Never before one gap after the latest
    /// departure either, which a send booked after it and already answered set.
    pub(super) fn give_back(&mut self, now: Millis) {
        if let Some(left) = self.state.quota_left.as_mut() {
            // Not sent: the quota was not spent.
            *left += 1;
            if *left > 0 {
                self.state.spent_until = None;
            }
        }
        if self.state.in_flight == 0 {
            let back = (self.state.tat - self.state.last_gap)
                .max(now)
                .max(self.state.departure_floor);
            self.state.tat = self.state.tat.min(back);
            self.state.last_gap = 0.0;
        }
    }

    /// How late (ms) a booked send may still leave. Later, it would shorten the gap to the
    /// next booked send by more than half the margin the pace keeps under the server's
    /// limit ([`Tuning::margin`](crate::politeness::Tuning::margin)), and a limiter without
    /// a burst would refuse that next send; a request held for a slot it has missed by
    /// more (a worker starved of CPU) takes a new slot instead ([`HostMachine::rebook`]).
    pub fn late_limit_ms(&self) -> f64 {
        let t = &self.params.tuning;
        (self.interval() * (1.0 - t.margin) / 2.0).max(t.late_send_ms)
    }

    /// Book a new slot, at `at` or the next free one after it, for a request that missed
    /// the slot it was booked for (it could not leave on time, see
    /// [`HostMachine::late_limit_ms`]). The missed slot stays spent: nothing was sent in it,
    /// so the gaps the server sees only widen. The request is in flight already, so the
    /// count does not change. Never inside a hold or a spent quota placed since the first
    /// booking (the fleet's script books by this rule too). Returns the new slot.
    pub fn rebook(&mut self, at: Millis) -> Millis {
        let slot = self
            .state
            .tat
            .max(at)
            .max(self.state.hold_until)
            .max(self.state.spent_until.unwrap_or(f64::NEG_INFINITY));
        let gap = self.gap();
        self.state.last_gap = gap;
        self.state.tat = slot + gap;
        slot
    }

    /// The gap booked for one send: the interval, randomised in fixed mode (0.5x to 1.5x,
    /// never below the Crawl-delay floor).
    fn gap(&mut self) -> f64 {
        let iv = self.interval();
        if self.params.mode == Mode::Fixed && self.params.randomize && iv > 0.0 {
            let f = 0.5 + self.random();
            (iv * f).max(self.state.crawl_delay_ms)
        } else {
            iv
        }
    }

    /// A uniform draw in [0, 1) from the machine's own generator (splitmix64).
    fn random(&mut self) -> f64 {
        self.state.seed = self.state.seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state.seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    pub(super) fn clamp(&self, rate: f64) -> f64 {
        // A declared budget caps the rate and also lowers the floor: min_rate never
        // exceeds what the server said it allows.
        let mut top = self.params.max_rate;
        let mut bottom = self.params.min_rate;
        if let Some(d) = self.state.declared {
            top = top.min(d);
            bottom = bottom.min(d);
        }
        rate.clamp(bottom.min(top), top)
    }

    pub(super) fn set_rate(&mut self, new: f64, trigger: Trigger, now: Millis) {
        let new = self.clamp(new);
        let old = self.state.rate;
        if (new - old).abs() <= 1e-9 {
            return;
        }
        self.state.rate = new;
        let routine = matches!(trigger, Trigger::Discover | Trigger::AutoThrottle)
            && (new - old).abs() / old.max(1e-9) <= self.params.tuning.audit_min_step;
        if !routine {
            self.audit.push(Change {
                at: now,
                trigger,
                what: What::Rate { old, new },
            });
        }
    }

    pub(super) fn set_estimate(&mut self, est: f64, trigger: Trigger, now: Millis) {
        self.state.estimate = Some(est);
        self.audit.push(Change {
            at: now,
            trigger,
            what: What::Estimate { rate: est },
        });
    }

    /// Hold the whole host for `wait` ms (plus the margin) from `now`; a wait longer than
    /// allowed skips the host instead.
    pub(super) fn hold(&mut self, wait: f64, now: Millis, trigger: Trigger) -> Verdict {
        if wait > self.params.max_wait_ms {
            let reason = format!(
                "{} asked for a wait of {:.0}s, more than max_retry_after ({:.0}s)",
                trigger.as_str(),
                wait / 1_000.0,
                self.params.max_wait_ms / 1_000.0
            );
            return self.skip(reason, trigger, now);
        }
        let margin = self.hold_margin(wait);
        let until = now + wait + margin;
        if until > self.state.hold_until {
            let extra = until - self.state.hold_until.max(now);
            if matches!(
                trigger,
                Trigger::Status429 | Trigger::Status503 | Trigger::RetryAfter
            ) {
                // An exponential mean: past `refusal_hold_memory` holds the total decays
                // by one hold's share before the new one is added.
                let memory = self.params.tuning.refusal_hold_memory.max(1);
                if self.state.refusal_holds >= memory {
                    let n = f64::from(memory);
                    self.state.refusal_held_ms *= (n - 1.0) / n;
                    self.state.refusal_holds = memory;
                } else {
                    self.state.refusal_holds += 1;
                }
                self.state.refusal_held_ms += wait + margin;
            }
            self.state.holds += 1;
            self.state.held_ms += extra;
            self.state.hold_until = until;
            // Calm is counted from the end of the hold: a probe's payback starts then.
            self.state.calm_since = self.state.calm_since.max(until);
            if wait + margin > Delivery::WINDOW_MS {
                self.state.long_hold_end = Some(until);
            }
            self.audit.push(Change {
                at: now,
                trigger,
                what: What::Hold {
                    until,
                    wait_ms: wait + margin,
                },
            });
        }
        Verdict::Continue
    }

    /// The margin a hold of `wait` ms gets past its end: it absorbs skew and transit, and is
    /// proportional for short waits, so a one-second quota window does not lose a quarter of
    /// its budget to it.
    pub(super) fn hold_margin(&self, wait: f64) -> f64 {
        let t = &self.params.tuning;
        self.params
            .hold_margin_ms
            .min(wait * t.hold_margin_share + t.hold_margin_floor_ms)
    }

    /// The mean length (ms) of the holds refusals asked for so far: what a refused probe
    /// will likely cost (0 before any). Holds for failures, quotas or challenge pages are
    /// not what a probe risks.
    pub(super) fn mean_refusal_hold_ms(&self) -> f64 {
        match self.state.refusal_holds {
            0 => 0.0,
            n => self.state.refusal_held_ms / f64::from(n),
        }
    }

    /// The nominal backoff hold at the current level (ms): base x 2^level, capped.
    pub(super) fn backoff_nominal(&self) -> f64 {
        let t = &self.params.tuning;
        (t.backoff_base_ms * 2f64.powi(self.state.backoff_level.min(30) as i32))
            .min(t.backoff_cap_ms)
    }

    /// A backoff hold, drawn with equal jitter (from half the nominal length to all of
    /// it, each host its own draw, so hosts and workers backing off together do not come
    /// back in step; a draw near zero, as full jitter allows, would only buy another
    /// failure); the level grows on repeats.
    pub(super) fn backoff(&mut self, now: Millis, trigger: Trigger) -> Verdict {
        let wait = self.backoff_wait(now);
        self.hold(wait, now, trigger)
    }

    /// Draw the next backoff hold's length (ms) and count it: the level grows.
    pub(super) fn backoff_wait(&mut self, now: Millis) -> f64 {
        let j = self.params.tuning.backoff_jitter;
        let wait = self.backoff_nominal() * (1.0 - j + j * self.random());
        self.state.backoff_level = self.state.backoff_level.saturating_add(1);
        self.state.backoff_at = Some(now);
        wait
    }

    /// Another host name behind the same limiter was held until `until`: hold this one
    /// too (the limiter counts them together, so its wait is theirs). When a refusal placed
    /// that hold, it opens a refusal episode here as well (one decrease, see `control`): the
    /// limiter refused the group's pace, of which this host is a part. Returns whether the
    /// hold moved.
    pub fn share_hold(&mut self, until: Millis, now: Millis, refusal: bool) -> bool {
        if until <= self.state.hold_until || until <= now {
            return false;
        }
        // Each name comes back at its own point in one of its own intervals: all of them
        // at the hold's end would be a burst the limiter refuses, and a new hold for all.
        let until = until + self.random() * self.interval();
        self.state.holds += 1;
        self.state.held_ms += until - self.state.hold_until.max(now);
        self.state.hold_until = until;
        self.state.calm_since = self.state.calm_since.max(until);
        self.audit.push(Change {
            at: now,
            trigger: Trigger::LimiterGroup,
            what: What::Hold {
                until,
                wait_ms: until - now,
            },
        });
        if refusal && !self.state.in_episode {
            self.state.in_episode = true;
            if self.params.mode == Mode::Adaptive {
                self.refused(now, Trigger::LimiterGroup);
            }
            self.state.last_cut = Some(now);
        }
        true
    }

    pub(super) fn skip(&mut self, reason: String, trigger: Trigger, now: Millis) -> Verdict {
        self.audit.push(Change {
            at: now,
            trigger,
            what: What::Skip {
                reason: reason.clone(),
            },
        });
        Verdict::Skip(reason)
    }
}
