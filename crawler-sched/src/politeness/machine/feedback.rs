//! The outcome of a request: [`HostMachine::on_feedback`] and the rules every mode obeys
//! (Crawl-delay, robots.txt outages, Retry-After on any status, exhausted RateLimit quotas,
//! challenge pages, refusals without Retry-After, 403 streaks, runs of failures), then the
//! mode's own rule: AutoThrottle here, the adaptive controller in `control`.

use crawler_core::{FailureKind, Feedback};

use super::HostMachine;
use crate::politeness::audit::{Change, Phase, Trigger, Verdict, What};
use crate::politeness::edge::WindowEdge;
use crate::politeness::params::{Millis, Mode, ms};

impl HostMachine {
    /// A request ended at `now`: learn from it. `fb.latency` dates the send.
    pub fn on_feedback(&mut self, fb: &Feedback, now: Millis) -> Verdict {
        self.on_feedback_sent(fb, now - ms(fb.latency), now)
    }

    /// The hold a refusal or a Retry-After asks for, placed alone at `now` and before
    /// anything is learned from the answer, so that a fleet can publish it at once: the
    /// full commit of a busy host's state can take long enough that other workers' sends
    /// would leave after the refusal and before its hold reached them. Returns whether the
    /// hold moved.
    ///
    /// The answer itself must still go through [`on_feedback_sent`](Self::on_feedback_sent)
    /// at a later `now`: that places the hold it decides (from the Retry-After as here, or a
    /// backoff drawn at or above the shortest one placed here) and counts it once, with the
    /// time held so far; placing it early changes nothing else the answer decides.
    pub fn hold_ahead(&mut self, fb: &Feedback, now: Millis) -> bool {
        if !fb.sent {
            return false;
        }
        let refused = matches!(fb.status, Some(429 | 503));
        let wait = match fb.retry_after {
            Some(wait) => ms(wait),
            // The shortest backoff the answer can draw.
            None if refused => self.backoff_nominal() * (1.0 - self.params.tuning.backoff_jitter),
            None => return false,
        };
        if wait > self.params.max_wait_ms {
            // The answer skips the host instead.
            return false;
        }
        // A millisecond early, so that the answer's own hold (at a later `now`) always ends
        // after this one and is the one counted.
        let until = now - 1.0 + wait + self.hold_margin(wait);
        if until <= self.state.hold_until {
            return false;
        }
        self.state.held_ms += until - self.state.hold_until.max(now);
        self.state.hold_until = until;
        true
    }

    /// A request sent at `sent_at` ended at `now` (when the caller knows the departure
    /// better than `now - latency`: the answer may be read a while after it arrived).
    pub fn on_feedback_sent(&mut self, fb: &Feedback, sent_at: Millis, now: Millis) -> Verdict {
        let sent_at = sent_at.min(now);
        self.state.in_flight = self.state.in_flight.saturating_sub(1);
        if !fb.sent {
            // Nothing reached the host (a robots refusal from cache): give the slot back.
            self.give_back(now);
            return Verdict::Continue;
        }
        self.left_at(sent_at);
        if let Some(cd) = fb.crawl_delay {
            let cd = ms(cd);
            if cd > self.state.crawl_delay_ms {
                self.state.crawl_delay_ms = cd;
                // The slot booked before the floor was known (robots.txt's own send set it)
                // moves too: the first page waits the Crawl-delay after the latest send.
                let last = self.state.booked_at.unwrap_or(sent_at).max(sent_at);
                self.state.tat = self.state.tat.max(last + cd);
                self.audit.push(Change {
                    at: now,
                    trigger: Trigger::CrawlDelay,
                    what: What::CrawlDelay { floor_ms: cd },
                });
            }
        }
        let refused = matches!(fb.status, Some(429 | 503));
        if fb.robots_unavailable {
            // robots.txt refused (429, 503) is a refusal of the pace like any other: its
            // send took a slot, and in a fleet each worker fetches robots.txt in its own
            // slot, so it is refused exactly when the pace is too fast. The episode (and
            // its cut) is learned before the outage's hold.
            if refused {
                self.open_episode(fb, sent_at, now);
            }
            return self.robots_unavailable(fb, now);
        }
        self.state.robots_down_since = None;

        // A failure of a request sent before one the host has since served says nothing of
        // the host now: slow failures (timeouts) arrive together long after the pages sent
        // beside them were served, and in answer order they would look like a run.
        let failed = is_failure(fb) && self.state.served_sent.is_none_or(|s| sent_at >= s);
        let served = fb.status.is_some() && !refused && !is_failure(fb);
        if served {
            if self.state.failures >= self.params.tuning.failure_streak {
                // The host answers again after a run of failures that held it: it is well,
                // and the holds its outage grew are not what its limiter asks for. The next
                // backoff (a refusal without Retry-After) starts from the base, not from
                // the storm's last hold.
                self.state.backoff_level = 0;
                self.state.backoff_at = None;
            }
            self.state.failures = 0;
            self.state.troubled_since = None;
            self.state.served_sent =
                Some(self.state.served_sent.map_or(sent_at, |s| s.max(sent_at)));
        } else if refused || failed {
            let since = *self.state.troubled_since.get_or_insert(now);
            let give_up = self.params.tuning.give_up_ms;
            // Refusals give up only at the minimum rate: above it, slowing down is the
            // answer.
            let at_floor = self.state.rate <= self.clamp(0.0) * 1.000_001;
            if now - since > give_up && (failed || at_floor) {
                let reason = format!(
                    "no page served for {:.0}s: every answer was {} (the host is down or \
                     blocks this crawler)",
                    (now - since) / 1_000.0,
                    if refused { "a refusal" } else { "a failure" },
                );
                let trigger = if refused {
                    refusal_trigger(fb.status)
                } else {
                    Trigger::Failures
                };
                return self.skip(reason, trigger, now);
            }
        }
        // One episode per run of refusals: it opens with the first refusal of a request sent
        // after the last cut and closes at the first served answer to one sent after it.
        // A refusal inside an open episode means the hold was too short for the limiter to
        // recover: the next hold grows by the backoff, whatever Retry-After said.
        let fresh = refused && !self.answered_before(sent_at);
        let repeat = fresh && self.state.in_episode;
        if refused {
            self.open_episode(fb, sent_at, now);
        } else if served && self.state.in_episode && !self.answered_before(sent_at) {
            self.state.in_episode = false;
        }
        let mut verdict = Verdict::Continue;
        // A refusal that says its quota is spent until a reset is held until that reset
        // (below): a spent quota, not a limiter that needs longer to recover, so it does
        // not grow the backoff.
        let spent = fb
            .rate_limit
            .is_some_and(|rl| rl.remaining == 0 && rl.reset.or(rl.window).is_some());
        let grow = refused
            && !self.in_flight_at_backoff(sent_at)
            && (repeat || (fb.retry_after.is_none() && !spent));
        if let Some(wait) = fb.retry_after {
            let mut wait = ms(wait);
            if grow {
                // The requests in flight when a backoff began are refused with the one
                // that began it, and do not grow it again.
                wait = wait.max(self.backoff_wait(now));
            }
            verdict = self.hold(wait, now, Trigger::RetryAfter);
        } else if grow {
            let trigger = refusal_trigger(fb.status);
            verdict = self.backoff(now, trigger);
        }
        if verdict != Verdict::Continue {
            return verdict;
        }
        if let Some(rl) = fb.rate_limit {
            let whole = rl.reset.is_some_and(|r| r.subsec_nanos() == 0);
            if let Some(reset) = rl.reset {
                self.state.edge = Some(WindowEdge::observe(
                    self.state.edge,
                    ms(reset),
                    whole,
                    rl.window.map(ms),
                    sent_at,
                    now,
                ));
            }
            // What the quota allows beyond the requests already booked, and until when a
            // spent quota keeps the next send back (see `HostState::spent_until`). Nothing
            // left: the hold below is the server's own word, and the next window's quota
            // is unknown until an answer in it says.
            // A quota shared by the names of a limiter group: this name's part of it.
            let ours = rl.remaining / u64::from(self.params.sharers.max(1));
            let left = i64::try_from(ours).unwrap_or(i64::MAX) - i64::from(self.state.in_flight);
            self.state.quota_left = (rl.remaining > 0).then_some(left);
            self.state.quota_turn_by = rl
                .reset
                .and(self.state.edge)
                .map(|e| e.hi + if whole { 1_000.0 } else { 0.0 });
            self.state.spent_until = (rl.remaining > 0 && left <= 0)
                .then_some(self.state.quota_turn_by)
                .flatten();
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
            if self
                .state
                .forbidden
                .is_multiple_of(t.forbidden_slow_after.max(1))
            {
                let rate = self.state.rate * t.forbidden_cut;
                if self.params.mode == Mode::Adaptive {
                    self.set_rate(rate, Trigger::Forbidden, now);
                }
                return self.backoff(now, Trigger::Forbidden);
            }
        } else if fb.status.is_some() {
            self.state.forbidden = 0;
        }
        if failed {
            // A run of failures holds the host, growing with each run; requests in flight
            // when the hold began fail with the one that began it and do not grow it again.
            self.state.failures = self.state.failures.saturating_add(1);
            if self.state.failures >= self.params.tuning.failure_streak
                && !self.in_flight_at_backoff(sent_at)
            {
                return self.backoff(now, Trigger::Failures);
            }
            return Verdict::Continue;
        }
        if served && fb.retry_after.is_none() {
            // The backoff a limiter needed last time is where the next episode starts: it
            // falls by one step per longest backoff of calm, so a window limiter that needs
            // a minute to recover is not asked four times again in every episode.
            let cap = self.params.tuning.backoff_cap_ms;
            if self.state.backoff_at.is_none_or(|at| now - at >= cap) {
                self.state.backoff_level = self.state.backoff_level.saturating_sub(1);
                if self.state.backoff_level > 0 {
                    self.state.backoff_at = Some(now);
                }
            }
        }
        match self.params.mode {
            Mode::Adaptive => self.adapt(fb, refused, sent_at, now),
            Mode::AutoThrottle => self.autothrottle(fb, now),
            Mode::Fixed => {}
        }
        Verdict::Continue
    }

    /// A refusal (429, 503) of the request sent at `sent_at`: the first of a request sent
    /// after the last cut opens a refusal episode, and in adaptive mode its one decrease.
    fn open_episode(&mut self, fb: &Feedback, sent_at: Millis, now: Millis) {
        if self.state.in_episode || self.answered_before(sent_at) {
            return;
        }
        self.state.in_episode = true;
        // A refusal that comes with RateLimit headers is a spent quota, not a pace the
        // server cannot take: its hold until the reset is the whole answer.
        if self.params.mode == Mode::Adaptive && fb.rate_limit.is_none() {
            // Learn from the refusal before its hold moves the calm period.
            self.refused(now, refusal_trigger(fb.status));
        }
        self.state.last_cut = Some(now);
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

    /// A challenge page: resume at `soft_block_resume` of the rate, and climb back no
    /// higher than `decrease` of the rate that tripped it for as long as the ceiling is
    /// remembered: growing back to that rate would trip the block again.
    fn challenge(&mut self, sent_at: Millis, now: Millis) {
        if self.params.mode != Mode::Adaptive || self.answered_before(sent_at) {
            return;
        }
        let tripped = self.state.rate;
        let resumed = tripped * self.params.soft_resume;
        self.lower_ceiling(tripped * self.params.tuning.decrease, now);
        self.state.last_cut = Some(now);
        self.state.calm_since = self.state.calm_since.max(now);
        if self.state.phase != Phase::Steered {
            self.state.phase = Phase::Climb;
        }
        self.set_rate(resumed, Trigger::Challenge, now);
    }

    /// Scrapy's AutoThrottle: the delay moves halfway towards `latency / target`; a non-200
    /// response may raise the delay but never lower it.
    fn autothrottle(&mut self, fb: &Feedback, now: Millis) {
        let Some(status) = fb.status else {
            return;
        };
        if !super::control::is_page(fb) {
            // robots.txt, a sitemap, a redirect, a 304: not what a page takes.
            return;
        }
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
}

/// Whether an answer says the host is unwell rather than the page: a server error (5xx but
/// 501, which is the page's, and 503, a refusal), a refused or broken connection, a timeout.
fn is_failure(fb: &Feedback) -> bool {
    match fb.status {
        Some(s) => (500..600).contains(&s) && s != 501 && s != 503,
        None => matches!(
            fb.failure,
            Some(FailureKind::Connection | FailureKind::Timeout)
        ),
    }
}

fn refusal_trigger(status: Option<u16>) -> Trigger {
    if status == Some(503) {
        Trigger::Status503
    } else {
        Trigger::Status429
    }
}
