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

use crawler_core::{FailureKind, Feedback};

use super::audit::{Change, Phase, Trigger, Verdict, What};
use super::edge::WindowEdge;
use super::estimate::{Answer, SendLog};
use super::params::{Millis, Mode, Params, ms};
use super::state::HostState;

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
                holds: 0,
                held_ms: 0.0,
                crawl_delay_ms: 0.0,
                backoff_level: 0,
                forbidden: 0,
                robots_down_since: None,
                in_flight: 0,
                phase: Phase::Discover,
                estimate: None,
                ceiling: None,
                pinned: None,
                confident: false,
                declared: None,
                safe_rate: None,
                last_cut: None,
                calm_since: now,
                probe_calm_ms: params.tuning.probe_calm_ms,
                lat_fast: None,
                lat_slow: None,
                grown_at: now,
                active_since: now,
                last_episode: None,
                edge: None,
                log: SendLog::default(),
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

    /// A machine with a known state (restored, or read from the fleet's store).
    pub fn with_state(params: Params, state: HostState) -> Self {
        Self {
            params,
            state,
            audit: Vec::new(),
        }
    }

    /// The parameters.
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
            &mut s.calm_since,
            &mut s.grown_at,
            &mut s.active_since,
        ] {
            *t += delta;
        }
        if let Some(t) = s.last_cut.as_mut() {
            *t += delta;
        }
        if let Some(t) = s.robots_down_since.as_mut() {
            *t += delta;
        }
        if let Some((a, b)) = s.last_episode.as_mut() {
            *a += delta;
            *b += delta;
        }
        if let Some(e) = s.edge.as_mut() {
            e.lo += delta;
            e.hi += delta;
        }
        s.log.shift(delta);
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
        match self.params.mode {
            Mode::Adaptive => {
                // Little's law: enough in flight to sustain the rate at the current latency,
                // with headroom for jitter, but no more: a second request to a host that
                // answers within the pacing interval would only be refused alongside the
                // first.
                let lat = self.state.lat_fast.unwrap_or(0.0);
                let want = (self.params.tuning.concurrency_headroom * self.rate() * lat).ceil();
                (want as u32).clamp(1, max)
            }
            Mode::AutoThrottle | Mode::Fixed => max,
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
            && s.tat <= now
            && s.holds == 0
            && s.phase == Phase::Discover
            && s.estimate.is_none()
            && s.ceiling.is_none()
            && s.declared.is_none()
            && s.crawl_delay_ms <= 0.0
            && s.backoff_level == 0
            && s.forbidden == 0
            && s.robots_down_since.is_none()
    }

    /// Whether another request may be in flight now.
    pub fn has_room(&self) -> bool {
        self.state.in_flight < self.concurrency()
    }

    /// The gap floor: Crawl-delay and `download_delay`.
    fn floor_ms(&self) -> f64 {
        self.state.crawl_delay_ms.max(self.params.min_gap_ms)
    }

    /// The nominal gap between sends (ms).
    fn interval(&self) -> f64 {
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
        (self.state.tat - slack).max(self.state.hold_until)
    }

    /// A request is being sent at `now`: book its slot.
    pub fn on_send(&mut self, now: Millis) {
        self.state.in_flight = self.state.in_flight.saturating_add(1);
        let gap = self.gap();
        self.state.last_gap = gap;
        self.state.tat = self.state.tat.max(now) + gap;
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

    fn clamp(&self, rate: f64) -> f64 {
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

    fn set_rate(&mut self, new: f64, trigger: Trigger, now: Millis) {
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

    fn set_estimate(&mut self, est: f64, trigger: Trigger, now: Millis) {
        self.state.estimate = Some(est);
        self.audit.push(Change {
            at: now,
            trigger,
            what: What::Estimate { rate: est },
        });
    }

    /// Hold the whole host for `wait` ms (plus the margin) from `now`; a wait longer than
    /// allowed skips the host instead.
    fn hold(&mut self, wait: f64, now: Millis, trigger: Trigger) -> Verdict {
        if wait > self.params.max_wait_ms {
            let reason = format!(
                "{} asked for a wait of {:.0}s, more than max_retry_after ({:.0}s)",
                trigger.as_str(),
                wait / 1_000.0,
                self.params.max_wait_ms / 1_000.0
            );
            return self.skip(reason, trigger, now);
        }
        // The margin absorbs skew and transit; proportional for short waits, so a
        // one-second quota window does not lose a quarter of its budget to it.
        let margin = self.params.hold_margin_ms.min(wait / 50.0 + 5.0);
        let until = now + wait + margin;
        if until > self.state.hold_until {
            let extra = until - self.state.hold_until.max(now);
            self.state.holds += 1;
            self.state.held_ms += extra;
            self.state.hold_until = until;
            self.state.active_since = until;
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

    /// A backoff hold: base x 2^level, capped, with jitter; the level grows on repeats.
    fn backoff(&mut self, now: Millis, trigger: Trigger) -> Verdict {
        let t = &self.params.tuning;
        let nominal = (t.backoff_base_ms * 2f64.powi(self.state.backoff_level.min(30) as i32))
            .min(t.backoff_cap_ms);
        let jitter = t.backoff_jitter.clamp(0.0, 1.0);
        let wait = nominal * (1.0 - jitter * self.random());
        self.state.backoff_level = self.state.backoff_level.saturating_add(1);
        self.hold(wait, now, trigger)
    }

    fn skip(&mut self, reason: String, trigger: Trigger, now: Millis) -> Verdict {
        self.audit.push(Change {
            at: now,
            trigger,
            what: What::Skip {
                reason: reason.clone(),
            },
        });
        Verdict::Skip(reason)
    }

    /// A request ended at `now`: learn from it. `fb.latency` dates the send.
    pub fn on_feedback(&mut self, fb: &Feedback, now: Millis) -> Verdict {
        self.state.in_flight = self.state.in_flight.saturating_sub(1);
        if !fb.sent {
            // Nothing reached the host (a robots refusal from cache): give the slot back.
            self.state.tat = (self.state.tat - self.state.last_gap).max(now);
            self.state.last_gap = 0.0;
            return Verdict::Continue;
        }
        let sent_at = now - ms(fb.latency);
        if let Some(cd) = fb.crawl_delay {
            let cd = ms(cd);
            if cd > self.state.crawl_delay_ms {
                self.state.crawl_delay_ms = cd;
                self.audit.push(Change {
                    at: now,
                    trigger: Trigger::CrawlDelay,
                    what: What::CrawlDelay { floor_ms: cd },
                });
            }
        }
        if fb.robots_unavailable {
            return self.robots_unavailable(fb, now);
        }
        self.state.robots_down_since = None;

        let refused = matches!(fb.status, Some(429 | 503));
        if refused && self.params.mode == Mode::Adaptive {
            // Learn from the refusal before its hold moves the start of the active period.
            self.record(sent_at, Answer::Refused);
            self.refused(sent_at, now, refusal_trigger(fb.status));
        }
        let mut verdict = Verdict::Continue;
        if let Some(wait) = fb.retry_after {
            verdict = self.hold(ms(wait), now, Trigger::RetryAfter);
        } else if refused {
            let trigger = refusal_trigger(fb.status);
            verdict = self.backoff(now, trigger);
        }
        if verdict != Verdict::Continue {
            return verdict;
        }
        if let Some(rl) = fb.rate_limit
            && let Some(reset) = rl.reset
        {
            self.state.edge = Some(WindowEdge::observe(
                self.state.edge,
                ms(reset),
                reset.subsec_nanos() == 0,
                rl.window.map(ms),
                sent_at,
                now,
            ));
        }
        if let Some(rl) = fb.rate_limit
            && rl.remaining == 0
        {
            // The server asked for the whole announced reset, rounded up or not: the
            // narrowed edge only paces the requests before it.
            verdict = match rl.reset.or(rl.window) {
                Some(reset) => self.hold(ms(reset), now, Trigger::RateLimitExhausted),
                None => self.backoff(now, Trigger::RateLimitExhausted),
            };
            if verdict != Verdict::Continue {
                return verdict;
            }
        }
        if fb.soft_block {
            verdict = self.hold(self.params.soft_pause_ms, now, Trigger::Challenge);
            if verdict != Verdict::Continue {
                return verdict;
            }
            self.challenge(sent_at, now);
            return Verdict::Continue;
        }
        if fb.status == Some(403) {
            self.state.forbidden = self.state.forbidden.saturating_add(1);
            let t = &self.params.tuning;
            if self.state.forbidden >= t.forbidden_skip_after {
                let reason = format!(
                    "{} consecutive 403 responses: the host blocks this crawler",
                    self.state.forbidden
                );
                return self.skip(reason, Trigger::Forbidden, now);
            }
            if self.state.forbidden % t.forbidden_slow_after.max(1) == 0 {
                let rate = self.state.rate * 0.5;
                if self.params.mode == Mode::Adaptive {
                    self.set_rate(rate, Trigger::Forbidden, now);
                }
                return self.backoff(now, Trigger::Forbidden);
            }
        } else if fb.status.is_some() {
            self.state.forbidden = 0;
        }
        if !refused && fb.status.is_some() && fb.retry_after.is_none() {
            self.state.backoff_level = 0;
        }
        match self.params.mode {
            Mode::Adaptive => self.adapt(fb, refused, sent_at, now),
            Mode::AutoThrottle => self.autothrottle(fb, now),
            Mode::Fixed => {}
        }
        Verdict::Continue
    }

    fn robots_unavailable(&mut self, fb: &Feedback, now: Millis) -> Verdict {
        let since = *self.state.robots_down_since.get_or_insert(now);
        let down = now - since;
        if down > self.params.robots_outage_max_ms {
            let reason = format!(
                "robots.txt unavailable for {:.0}s (robots_outage_max is {:.0}s)",
                down / 1_000.0,
                self.params.robots_outage_max_ms / 1_000.0
            );
            return self.skip(reason, Trigger::RobotsUnavailable, now);
        }
        match fb.retry_after {
            Some(wait) => self.hold(ms(wait), now, Trigger::RobotsUnavailable),
            None => self.backoff(now, Trigger::RobotsUnavailable),
        }
    }

    fn challenge(&mut self, sent_at: Millis, now: Millis) {
        if self.params.mode != Mode::Adaptive || self.state.last_cut.is_some_and(|c| sent_at < c) {
            return;
        }
        // Growing back to the rate that tripped the block would trip it again.
        let resumed = self.state.rate * self.params.soft_resume;
        let est = self.state.estimate.map_or(resumed, |e| e.min(resumed));
        self.set_estimate(est, Trigger::Challenge, now);
        self.state.last_cut = Some(now);
        self.state.calm_since = now;
        if self.state.phase != Phase::Steered {
            self.state.phase = Phase::Settled;
        }
        self.set_rate(resumed, Trigger::Challenge, now);
    }

    /// Scrapy's AutoThrottle: the delay moves halfway towards `latency / target`; a non-200
    /// response may raise the delay but never lower it.
    fn autothrottle(&mut self, fb: &Feedback, now: Millis) {
        let Some(status) = fb.status else {
            return;
        };
        let delay = 1_000.0 / self.state.rate.max(1e-9);
        let target = ms(fb.latency) / self.params.autothrottle_target.max(1e-3);
        let max = self
            .params
            .autothrottle_max_delay_ms
            .max(self.params.min_gap_ms);
        let mut new = ((delay + target) / 2.0).clamp(self.params.min_gap_ms, max);
        if status != 200 && new < delay {
            new = delay;
        }
        self.set_rate(1_000.0 / new.max(1e-3), Trigger::AutoThrottle, now);
    }

    fn adapt(&mut self, fb: &Feedback, refused: bool, sent_at: Millis, now: Millis) {
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
            if self.state.last_cut.is_none_or(|c| sent_at >= c) {
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
                let ceiling = self
                    .state
                    .ceiling
                    .map_or(self.params.max_rate, |c| c * tuning.ceiling_margin);
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
                    let room = self
                        .state
                        .ceiling
                        .is_some_and(|c| c > est * (1.0 + tuning.fast_probe_room));
                    let (calm, step) = if self.state.confident && room {
                        (tuning.fast_probe_calm_ms, tuning.fast_probe_step)
                    } else {
                        (self.state.probe_calm_ms, tuning.probe_step)
                    };
                    if now - self.state.calm_since >= calm {
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

    fn record(&mut self, sent_at: Millis, answer: Answer) {
        let t = &self.params.tuning;
        self.state
            .log
            .record(sent_at, answer, t.log_capacity, t.log_horizon_ms);
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

    /// A 429 or 503: estimate the server's limit from what it accepted.
    fn refused(&mut self, sent_at: Millis, now: Millis, trigger: Trigger) {
        if self.state.last_cut.is_some_and(|c| sent_at < c) {
            // Sent before the last cut: the same episode, already answered.
            return;
        }
        let t = self.params.tuning.clone();
        let sent_rate = self.state.rate;
        self.state.last_cut = Some(now);
        self.state.calm_since = now;
        // The previous episode emptied the limiter when its first refused request arrived,
        // so what it accepted from then to this refusal (hold included) is what it
        // refilled: exactly the refill rate if the hold was too short to fill the whole
        // burst back, less if the bucket overflowed. Counts only, so arrival jitter cannot
        // spoil it as it can the fit. It is believed only right after a hold (a long calm
        // stretch below the limit lets the bucket overflow too) and when the burst the
        // previous episode needed at that rate is more than the hold could refill.
        let fresh = sent_at - self.state.active_since <= t.recent_window_ms;
        let refill = self
            .state
            .last_episode
            .filter(|_| fresh)
            .and_then(|(start, empty)| {
                let span = sent_at - empty;
                if span < 1_000.0 {
                    return None;
                }
                let log = &self.state.log;
                let w = log.accepted_between(empty, sent_at) as f64 * 1_000.0 / span;
                let burst =
                    log.accepted_between(start, empty) as f64 - w * (empty - start) / 1_000.0;
                let refilled = w * (self.state.active_since - empty) / 1_000.0;
                (w > 0.0 && refilled <= burst).then_some(w)
            });
        self.state.last_episode = Some((self.state.active_since, sent_at));
        let accepted_since_hold = self
            .state
            .log
            .accepted_between(self.state.active_since, sent_at);
        if accepted_since_hold < 2 {
            // Refused as soon as the last hold ended (or at the very start): no evidence
            // about the rate, only that the limiter had not recovered (a window still
            // full, a bucket still empty). The backoff grows and the estimate stays; the
            // rate is halved, blindly but once per hold, so that an unknown host is not
            // met again at the pace that was refused.
            let rate = self.state.rate * t.cut;
            self.set_rate(rate, trigger, now);
            return;
        }
        self.state.ceiling = Some(self.state.ceiling.map_or(sent_rate, |c| c.min(sent_rate)));
        let fit = self.state.log.fit_token_bucket(
            (self.params.min_rate * 0.5).max(0.01),
            sent_rate.max(self.params.max_rate) * 1.5,
            t.fit_jitter_ms,
        );
        // A fit narrow enough pins the rate for the probes to come; no bucket at all means
        // the limiter is of another kind and nothing is pinned.
        self.state.pinned = fit.filter(|f| f.hi <= t.pinned_fit * f.top).map(|f| f.hi);
        if self.state.phase == Phase::Probe
            && let Some(safe) = self.state.safe_rate
        {
            // A probe failed: the limit lies under the probe. Go back to the rate that held
            // (or under what a narrow fit now says, when a burst made a too-fast rate look
            // safe for a while), and probe half as often.
            self.state.probe_calm_ms *= 2.0;
            self.state.phase = Phase::Settled;
            let mut est = safe / t.slack;
            let mut slack = t.slack;
            if let Some(f) = fit.filter(|f| f.hi <= t.narrow_fit * f.top) {
                est = est.min(f.top);
                slack = fit_slack(&f, &t);
            }
            self.set_estimate(est, trigger, now);
            // Back to the rate that held, unless the fit now puts the limit under it (then
            // a margin under the fitted rate).
            self.set_rate(safe.min(est * slack), trigger, now);
            return;
        }
        let recent = self
            .state
            .log
            .accepted_rate(sent_at, t.recent_window_ms, self.state.active_since)
            .map(|a| a.min(sent_rate));
        tracing::debug!(
            ?fit,
            ?recent,
            sent_rate,
            "refusal: what the limit estimate sees"
        );
        // A narrow token-bucket fit is the limit, unless it explains a sustained rate
        // with a huge burst and a trickle of refill: that is a window limiter seen through
        // the bucket model, and the recent accepted rate is the better witness.
        let narrow = fit.filter(|f| {
            f.hi <= t.narrow_fit * f.top && recent.is_none_or(|r| f.top >= t.fit_floor * r)
        });
        // The refill witness, unless it is far below the recent accepted rate: a window
        // limiter refills nothing until its window turns, so after a long hold the witness
        // says little about it.
        let witness = refill
            .filter(|w| recent.is_some_and(|r| *w >= t.fit_floor * r))
            .map(|w| w.min(recent.unwrap_or(w)));
        let est = match (narrow, witness, recent) {
            (Some(f), _, _) => f.top,
            (None, Some(w), _) => w,
            // What the server accepted recently; a burst inflates it, so keep a margin
            // below, and the climb that follows finds the rest.
            (None, None, Some(r)) => r * t.guess,
            (None, None, None) => sent_rate * t.cut,
        };
        tracing::debug!(?refill, ?witness, est, "refusal: the estimate");
        self.state.confident = narrow.is_some() || witness.is_some();
        if self.state.phase != Phase::Steered {
            self.state.phase = Phase::Settled;
        }
        self.set_estimate(est, trigger, now);
        let slack = narrow.map_or(t.slack, |f| fit_slack(&f, &t));
        let rate = (est * slack).min(sent_rate);
        self.set_rate(rate, trigger, now);
    }
}

/// The margin under a fitted bucket's rate: small when the fit pins the rate and the bucket
/// has a burst to absorb arrival jitter, the full slack otherwise (every request must keep
/// its spacing, or the fit may still be a window limiter seen as a bucket).
fn fit_slack(fit: &super::estimate::Fit, t: &super::Tuning) -> f64 {
    if fit.burst >= 1.0 && fit.hi <= t.pinned_fit * fit.top {
        t.bursty_slack
    } else {
        t.slack
    }
}

fn refusal_trigger(status: Option<u16>) -> Trigger {
    if status == Some(503) {
        Trigger::Status503
    } else {
        Trigger::Status429
    }
}
