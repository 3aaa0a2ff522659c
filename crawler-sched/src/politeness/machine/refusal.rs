//! Refusals and the estimate: a 429 or 503 in adaptive mode, what the server accepted
//! before it (the send log), and the limit estimate, ceiling and pinned rate that follow.

use super::HostMachine;
use crate::politeness::Tuning;
use crate::politeness::audit::{Phase, Trigger};
use crate::politeness::estimate::{Answer, Fit};
use crate::politeness::params::Millis;

impl HostMachine {
    pub(super) fn record(&mut self, sent_at: Millis, answer: Answer) {
        let t = &self.params.tuning;
        self.state
            .log
            .record(sent_at, answer, t.log_capacity, t.log_horizon_ms);
    }

    /// A 429 or 503: estimate the server's limit from what it accepted.
    pub(super) fn refused(&mut self, sent_at: Millis, now: Millis, trigger: Trigger) {
        if self.answered_before(sent_at) {
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
            //
            // At the very start (no hold yet, nothing learned) a refusal of a request sent
            // at the pace says one thing: the limiter would not take that pace. Behind a
            // bucket with no burst it is the limit to within the arrival jitter, so it
            // becomes the ceiling and the discovery that follows stops under it, instead
            // of doubling past a pace already refused. Two sends closer than the pace (a
            // fleet's workers, robots.txt and the first page) say nothing about it.
            if let Some(pace) = self.refused_pace(sent_at, sent_rate)
                && self.state.holds == 0
                && self.state.ceiling.is_none()
            {
                self.state.ceiling = Some(pace);
                if self.state.phase == Phase::Discover {
                    self.state.phase = Phase::Settled;
                }
            }
            let rate = self.state.rate * t.cut;
            self.set_rate(rate, trigger, now);
            return;
        }
        // The refused rate is the pace the refused request left at, not the rate now: in
        // discovery the rate has grown by the time the answer is read (nginx burst 0 at
        // 5 r/s refused a 198 ms gap, 5.05/s, while the rate was 5.12/s), and a climb to
        // 97% of the rate now went to 99.4% of the limit, where arrival jitter alone was
        // refused minutes later.
        let refused = self.refused_pace(sent_at, sent_rate).unwrap_or(sent_rate);
        self.state.ceiling = Some(self.state.ceiling.map_or(refused, |c| c.min(refused)));
        let fit = self.state.log.fit_token_bucket(
            (self.params.min_rate * 0.5).max(0.01),
            sent_rate.max(self.params.max_rate) * 1.5,
            t.fit_jitter_ms,
        );
        // A fit narrow enough pins the rate for the probes to come; no bucket at all means
        // the limiter is of another kind and nothing is pinned. Only a long episode (the
        // burst drained slowly, just above the rate) pins: a couple of short episodes
        // behind a window limiter can leave a narrow fit too, under the window's rate, and
        // a pin there would stop every probe for good (a four-worker fleet behind HAProxy
        // at 3 r/s stayed at 83%). After a short episode a pin already made stays (moved
        // to the new fit when it is still narrow).
        let pinned_now = fit.filter(|f| f.hi <= t.pinned_fit * f.top).map(|f| f.hi);
        let long = sent_at - self.state.active_since >= t.pin_episode_ms;
        self.state.pinned = match fit {
            None => None,
            Some(_) if long => pinned_now,
            Some(_) => self.state.pinned.map(|p| pinned_now.unwrap_or(p)),
        };
        // A fixed-window counter that explains the log says its rate outright: the bucket
        // model reads such a counter as a bucket with a burst, a different one after every
        // episode, so the rate fell one guess at a time, a refusal (and a hold) each (four
        // behind a 30-per-10-s window with Retry-After, the fourth over 3 per 1,000 pages).
        // Not tried once the bucket fit is verified: that is a bucket.
        let verified_bucket = fit.is_some_and(|f| f.hi <= t.narrow_fit * f.top)
            && self.state.log.episodes() >= t.verified_episodes;
        let window = if verified_bucket {
            None
        } else {
            self.state.log.fit_fixed_window(t.fit_jitter_ms)
        };
        if let Some(w) = window {
            if self.state.phase == Phase::Probe {
                self.state.probe_calm_ms *= 2.0;
            }
            if self.state.phase != Phase::Steered {
                self.state.phase = Phase::Settled;
            }
            self.state.confident = true;
            self.state.verified = true;
            self.state.climb_refusals = 0;
            self.state.pinned = Some(w.rate());
            tracing::debug!(?w, "refusal: a fixed-window counter explains the log");
            self.set_estimate(w.rate(), trigger, now);
            self.set_rate((w.rate() * t.slack).min(sent_rate), trigger, now);
            return;
        }
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
            let narrow = fit.filter(|f| f.hi <= t.narrow_fit * f.top);
            if let Some(f) = narrow {
                est = est.min(f.top);
                slack = fit_slack(&f, &t);
            }
            self.state.verified =
                narrow.is_some() && self.state.log.episodes() >= t.verified_episodes;
            tracing::debug!(
                ?fit,
                safe,
                est,
                "refusal of a probe: back to the rate that held"
            );
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
        // The refill witness, unless it is far below the recent accepted rate: a window
        // limiter refills nothing until its window turns, so after a long hold the witness
        // says little about it.
        let witness = refill
            .filter(|w| recent.is_some_and(|r| *w >= t.fit_floor * r))
            .map(|w| w.min(recent.unwrap_or(w)));
        // A narrow token-bucket fit is the limit, unless it explains a sustained rate
        // with a huge burst and a trickle of refill (a window limiter seen through the
        // bucket model: the recent accepted rate is the better witness), or it has no burst
        // and puts the limit more than the slack above the pace just refused. Such a fit
        // blames the refusal on arrival jitter, which is a few per cent of a gap at a few
        // requests per second but half of one at a hundred (5 ms of 10): behind 50/s with a
        // burst of 200 the fit said 113/s and then 271/s, the rate stayed at the refused
        // pace, and the crawl was refused every eight seconds.
        let narrow = fit.filter(|f| {
            f.hi <= t.narrow_fit * f.top
                && recent.is_none_or(|r| f.top >= t.fit_floor * r)
                && (f.burst >= 1.0 || f.top * t.slack <= refused)
        });
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
        self.state.verified = narrow.is_some() && self.state.log.episodes() >= t.verified_episodes;
        self.state.climb_refusals = if self.state.confident {
            0
        } else {
            self.state.climb_refusals.saturating_add(1)
        };
        if self.state.phase != Phase::Steered {
            self.state.phase = Phase::Settled;
        }
        self.set_estimate(est, trigger, now);
        let slack = narrow.map_or(t.slack, |f| fit_slack(&f, &t));
        let rate = (est * slack).min(sent_rate);
        self.set_rate(rate, trigger, now);
    }
}

impl HostMachine {
    /// Whether an answer to the request sent at `sent_at` belongs to the episode the last
    /// cut already answered: sent before it, or read with nothing booked since (its send
    /// time is the caller's reading of the clock, late on a busy client, and a refusal
    /// dated just after the cut halved the rate a second time, as a new episode refused
    /// at once after its hold).
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

    /// The pace (requests/s) the request sent at `sent_at` left at: its gap from the send
    /// logged before it, when that gap is within 10% of the interval of `rate` (the pace
    /// then). A gap far from it says nothing of the pace: two sends closer than it (a
    /// fleet's workers, robots.txt and the first page), or the first send after an idle
    /// queue.
    fn refused_pace(&self, sent_at: Millis, rate: f64) -> Option<f64> {
        self.state
            .log
            .gap_before(sent_at)
            .filter(|gap| (900.0..=1_100.0).contains(&(*gap * rate)))
            .map(|gap| (1_000.0 / gap).min(rate))
    }
}

/// The margin under a fitted bucket's rate: small when the fit says the bucket has a burst
/// (it absorbs arrival jitter, so only the fit's own error needs a margin), the full slack
/// when it has none (every request must keep its spacing). The fit is narrow here (a wide
/// one is not used); it need not be pinned: behind a bucket whose rate the fit brackets to
/// a few percent, 5% under cost a fifth more probes above it, the last of them refused in
/// the second half of a ten-minute crawl (nginx burst 20 at 5 r/s: 91% steady, 99% now).
/// A window seen as a bucket is under its fit anyway, and the probes find the rest.
fn fit_slack(fit: &Fit, t: &Tuning) -> f64 {
    if fit.burst >= 1.0 {
        t.bursty_slack
    } else {
        t.slack
    }
}
