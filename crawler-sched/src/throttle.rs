//! Per-host pacing. A slot asks its [`Throttle`] when it may send next and tells it how each
//! request went. Three policies share one set of rules that are never optional: holds for
//! Retry-After, exhausted RateLimit quotas and challenge pages; robots.txt Crawl-delay as a
//! floor; and skipping a host that asks for a wait longer than `max_retry_after`.

use std::time::Duration;

use crawler_core::{FailureKind, Feedback, Settings, ThrottleMode};
use rand::Rng;
use tokio::time::Instant;

/// What a slot should do after a feedback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Keep crawling the host.
    Continue,
    /// Stop crawling the host for this run, for the given reason.
    Skip(String),
}

/// Decides how fast one host is fetched.
pub trait Throttle: Send {
    /// Requests allowed in flight at once.
    fn concurrency(&self) -> usize;
    /// The earliest instant the next request may be sent.
    fn ready_at(&self) -> Instant;
    /// A request is being sent at `now`.
    fn on_send(&mut self, now: Instant);
    /// A request ended; learn from it.
    fn on_feedback(&mut self, feedback: &Feedback, now: Instant) -> Verdict;
    /// The rate the host is paced at now, requests/s.
    fn rate(&self) -> f64;
    /// Holds placed so far and their total length.
    fn holds(&self) -> (u64, Duration);
    /// What is worth keeping across a restart (a hold still running, what was learned about
    /// the host), for a persistent frontier. `Null` when nothing is.
    fn save(&self, _now: Instant) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// Take back what [`Throttle::save`] kept.
    fn restore(&mut self, _state: &serde_json::Value, _now: Instant) {}
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Build the throttle `settings` ask for, for a new host.
pub fn throttle_for(settings: &Settings, host: &str, now: Instant) -> Box<dyn Throttle> {
    let rules = Rules::from_settings(settings, host, now);
    match settings.throttle {
        ThrottleMode::Fixed => Box::new(FixedDelay::new(
            rules,
            settings.download_delay,
            settings.randomize_delay,
            settings.concurrency_per_host,
        )),
        ThrottleMode::Adaptive => Box::new(Adaptive::new(rules, settings)),
        ThrottleMode::Autothrottle => Box::new(AutoThrottle::new(rules, settings)),
    }
}

/// The rules every policy obeys: holds, Crawl-delay, skipping.
#[derive(Debug, Clone)]
pub struct Rules {
    host: String,
    hold_until: Instant,
    holds: u64,
    held: Duration,
    margin: Duration,
    max_wait: Duration,
    crawl_delay: Duration,
    soft_block_pause: Duration,
    /// 429/503 without Retry-After in a row (reset by a 2xx/3xx).
    refusals: u32,
    /// 403s in a row (reset by a 2xx/3xx).
    forbidden: u32,
    /// When robots.txt became unreadable, while it still is.
    robots_down_since: Option<Instant>,
    /// robots.txt failures in the current outage.
    robots_failures: u32,
    robots_outage_max: Duration,
}

/// 403s in a row after which a host is skipped for the run: the server has decided.
const FORBIDDEN_STREAK: u32 = 8;
/// First backoff after a refusal without a stated wait; it doubles on every repeat.
const REFUSAL_BACKOFF: Duration = Duration::from_secs(2);
/// The longest such backoff.
const REFUSAL_BACKOFF_CAP: Duration = Duration::from_secs(60);

/// 2 s, 4 s, ... up to 60 s for the `n`th failure in a row, with equal jitter (between half
/// and all of it) so hosts held together do not all come back at once.
fn jittered_backoff(n: u32) -> Duration {
    let full = REFUSAL_BACKOFF
        .saturating_mul(1u32 << n.saturating_sub(1).min(10))
        .min(REFUSAL_BACKOFF_CAP);
    full.mul_f64(rand::rng().random_range(0.5..=1.0))
}

impl Rules {
    /// Rules from the crawl settings for `host`.
    pub fn from_settings(settings: &Settings, host: &str, now: Instant) -> Self {
        Self {
            host: host.to_owned(),
            hold_until: now,
            holds: 0,
            held: Duration::ZERO,
            margin: settings.hold_margin,
            max_wait: settings.max_retry_after,
            crawl_delay: Duration::ZERO,
            soft_block_pause: settings.soft_block_pause,
            refusals: 0,
            forbidden: 0,
            robots_down_since: None,
            robots_failures: 0,
            robots_outage_max: settings.robots_outage_max,
        }
    }

    /// Hold the whole host for `wait` (plus the margin) from `now`.
    fn hold(&mut self, wait: Duration, now: Instant, trigger: &str) -> Verdict {
        if wait > self.max_wait {
            let why = format!(
                "{trigger} asked for a wait of {:.0}s, more than max_retry_after ({:.0}s)",
                wait.as_secs_f64(),
                self.max_wait.as_secs_f64()
            );
            tracing::warn!(host = %self.host, "skipping host for this run: {why}");
            return Verdict::Skip(why);
        }
        // The margin absorbs skew and transit; proportional for short waits, so a one-second
        // quota window does not lose a quarter of its budget to it.
        let margin = self.margin.min(wait / 50 + Duration::from_millis(5));
        let until = now + wait + margin;
        if until > self.hold_until {
            let extra = until - self.hold_until.max(now);
            self.holds += 1;
            self.held += extra;
            self.hold_until = until;
            tracing::info!(host = %self.host, trigger, wait = ?(wait + margin), "host held");
        }
        Verdict::Continue
    }

    /// Apply what every policy must: Crawl-delay, Retry-After, an exhausted quota, a
    /// challenge page.
    fn observe(&mut self, fb: &Feedback, now: Instant) -> Verdict {
        if let Some(cd) = fb.crawl_delay {
            if cd > self.crawl_delay {
                tracing::info!(host = %self.host, old = ?self.crawl_delay, new = ?cd, trigger = "crawl-delay", "host delay floor raised");
                self.crawl_delay = cd;
            }
        }
        let mut verdict = Verdict::Continue;
        if let Some(wait) = fb.retry_after {
            verdict = self.hold(wait, now, "Retry-After");
        }
        if let Some(rl) = fb.rate_limit {
            // Exhausted without a reset: the policy window is the honest wait; with neither,
            // the refusal backoff below covers a following 429.
            if let Some(reset) = rl.reset.or(rl.window)
                && rl.remaining == 0
                && verdict == Verdict::Continue
            {
                verdict = self.hold(reset, now, "RateLimit exhausted");
            }
        }
        if fb.soft_block && verdict == Verdict::Continue {
            verdict = self.hold(self.soft_block_pause, now, "challenge page");
        }
        if verdict != Verdict::Continue {
            return verdict;
        }
        verdict = self.observe_outages(fb, now);
        verdict
    }

    /// Refusals without a stated wait, streaks of 403s and robots.txt outages: each holds
    /// the whole host by a backoff that grows while the condition lasts.
    fn observe_outages(&mut self, fb: &Feedback, now: Instant) -> Verdict {
        if fb.robots_unavailable {
            let since = *self.robots_down_since.get_or_insert(now);
            let down = now.saturating_duration_since(since);
            if down > self.robots_outage_max {
                let why = format!(
                    "robots.txt unavailable for {:.0}s, more than robots_outage_max ({:.0}s)",
                    down.as_secs_f64(),
                    self.robots_outage_max.as_secs_f64()
                );
                tracing::warn!(host = %self.host, "skipping host for this run: {why}");
                return Verdict::Skip(why);
            }
            self.robots_failures += 1;
            if fb.retry_after.is_none() {
                let wait = jittered_backoff(self.robots_failures);
                return self.hold(wait, now, "robots.txt unavailable");
            }
            return Verdict::Continue;
        }
        if fb.sent && fb.status.is_some() {
            // robots.txt (or a page) came through: the outage is over.
            self.robots_down_since = None;
            self.robots_failures = 0;
        }
        match fb.status {
            Some(429 | 503) if fb.retry_after.is_none() && !fb.soft_block => {
                self.refusals += 1;
                let wait = jittered_backoff(self.refusals);
                self.hold(wait, now, "refusal without Retry-After")
            }
            Some(403) if !fb.soft_block => {
                self.forbidden += 1;
                if self.forbidden >= FORBIDDEN_STREAK {
                    let why = format!("{} responses in a row were 403 Forbidden", self.forbidden);
                    tracing::warn!(host = %self.host, "skipping host for this run: {why}");
                    return Verdict::Skip(why);
                }
                let wait = jittered_backoff(self.forbidden);
                self.hold(wait, now, "403 streak")
            }
            Some(s) if (200..400).contains(&s) => {
                self.refusals = 0;
                self.forbidden = 0;
                Verdict::Continue
            }
            _ => Verdict::Continue,
        }
    }

    /// A running hold (as wall-clock time left, since a restart resets the monotonic clock)
    /// and the Crawl-delay.
    fn save(&self, now: Instant) -> serde_json::Value {
        let left = self.hold_until.saturating_duration_since(now).as_millis() as i64;
        serde_json::json!({
            "hold_ms": left,
            "saved_at_ms": unix_ms(),
            "crawl_delay_ms": self.crawl_delay.as_millis() as u64,
        })
    }

    fn restore(&mut self, state: &serde_json::Value, now: Instant) {
        let num = |k: &str| {
            state
                .get(k)
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(0)
        };
        // The time the process was down counts against the hold.
        let left = num("hold_ms") - (unix_ms() - num("saved_at_ms")).max(0);
        if left > 0 {
            let until = now + Duration::from_millis(left as u64);
            if until > self.hold_until {
                self.hold_until = until;
                tracing::info!(host = %self.host, left_ms = left, "hold from the last run still running");
            }
        }
        self.crawl_delay = self
            .crawl_delay
            .max(Duration::from_millis(num("crawl_delay_ms").max(0) as u64));
    }

    /// The gap floor from Crawl-delay and the given minimum.
    fn floor(&self, min_gap: Duration) -> Duration {
        self.crawl_delay.max(min_gap)
    }
}

/// A fixed delay between sends (optionally randomised 0.5x to 1.5x) and a fixed concurrency.
#[derive(Debug, Clone)]
pub struct FixedDelay {
    rules: Rules,
    delay: Duration,
    randomize: bool,
    concurrency: usize,
    next: Instant,
    /// `next` before the latest send, restored when that send turns out not to have happened.
    before_send: Instant,
}

impl FixedDelay {
    /// A throttle that waits `delay` between sends with at most `concurrency` in flight.
    pub fn new(rules: Rules, delay: Duration, randomize: bool, concurrency: usize) -> Self {
        let now = rules.hold_until;
        Self {
            rules,
            delay,
            randomize,
            concurrency: concurrency.max(1),
            next: now,
            before_send: now,
        }
    }

    fn gap(&self) -> Duration {
        let delay = self.rules.floor(self.delay);
        if self.randomize && !delay.is_zero() {
            delay.mul_f64(rand::rng().random_range(0.5..1.5))
        } else {
            delay
        }
    }
}

impl Throttle for FixedDelay {
    fn concurrency(&self) -> usize {
        self.concurrency
    }

    fn ready_at(&self) -> Instant {
        self.next.max(self.rules.hold_until)
    }

    fn on_send(&mut self, now: Instant) {
        self.before_send = self.next;
        self.next = self.next.max(now) + self.gap();
    }

    fn on_feedback(&mut self, feedback: &Feedback, now: Instant) -> Verdict {
        if !feedback.sent {
            // Nothing reached the host (a robots refusal from cache): the delay was not used.
            self.next = self.before_send.max(now.min(self.next));
        }
        self.rules.observe(feedback, now)
    }

    fn rate(&self) -> f64 {
        1.0 / self.rules.floor(self.delay).as_secs_f64().max(1e-3)
    }

    fn holds(&self) -> (u64, Duration) {
        (self.rules.holds, self.rules.held)
    }

    fn save(&self, now: Instant) -> serde_json::Value {
        self.rules.save(now)
    }

    fn restore(&mut self, state: &serde_json::Value, now: Instant) {
        self.rules.restore(state, now);
    }
}

/// Additive increase, in requests/s gained per second of clean responses.
const INCREASE_PER_SEC: f64 = 0.25;
/// Multiplicative decrease on 429, 503 and timeouts.
const CUT: f64 = 0.5;
/// Gentler decrease when latency climbs above its baseline.
const EASE: f64 = 0.85;
/// After a calm minute, the ceiling learned from a refusal is raised this much, so a server
/// whose limit went up is found again, slowly.
const CEILING_RELAX: f64 = 1.1;
/// How far under a learned limit the rate settles.
const SLACK: f64 = 0.9;
/// The shortest calm period before a probe above a learned ceiling. A probe that fails
/// costs a refusal and its hold, so the period grows to ten times the longest Retry-After
/// seen and doubles after each failed probe.
const CALM: Duration = Duration::from_secs(60);

/// The adaptive policy: AIMD on the rate, steered by RateLimit headers when a host sends
/// them, easing off when latency rises, with a token-bucket (GCRA) pacer under `max_rate`.
#[derive(Debug, Clone)]
pub struct Adaptive {
    rules: Rules,
    rate: f64,
    min_rate: f64,
    max_rate: f64,
    /// After a refusal, the rate may not grow past this until calm returns.
    learned_ceiling: f64,
    burst: u32,
    min_gap: Duration,
    max_concurrency: usize,
    latency_tolerance: f64,
    /// Theoretical arrival time of the GCRA pacer: the next send is due at
    /// `tat - (burst - 1) x interval`.
    tat: Instant,
    in_flight: usize,
    /// Fast and slow moving averages of latency, in seconds.
    lat_fast: Option<f64>,
    lat_slow: Option<f64>,
    /// Responses to requests sent before this instant do not cut again: one overload
    /// episode is one decrease, however many requests were in flight.
    last_cut: Option<Instant>,
    /// Whether the host has spoken in RateLimit headers (then they steer, and silence or an
    /// unreadable header holds the rate instead of growing it).
    steered: bool,
    soft_resume: f64,
    /// The last rate that held through a calm period.
    safe_rate: Option<f64>,
    /// Calm needed before probing above the learned ceiling.
    probe_after: Duration,
}

impl Adaptive {
    /// The rules' state plus what was learned: the rate, the ceiling and safe rate from
    /// refusals, whether headers steer, how long to stay calm before probing.
    fn save_state(&self, now: Instant) -> serde_json::Value {
        let mut v = self.rules.save(now);
        if let Some(map) = v.as_object_mut() {
            map.insert("rate".into(), self.rate.into());
            if self.learned_ceiling.is_finite() {
                map.insert("ceiling".into(), self.learned_ceiling.into());
            }
            if let Some(safe) = self.safe_rate {
                map.insert("safe".into(), safe.into());
            }
            map.insert("steered".into(), self.steered.into());
            map.insert("probe_after_s".into(), self.probe_after.as_secs().into());
        }
        v
    }

    fn restore_state(&mut self, state: &serde_json::Value, now: Instant) {
        self.rules.restore(state, now);
        let num = |k: &str| {
            state
                .get(k)
                .and_then(serde_json::Value::as_f64)
                .filter(|n| n.is_finite() && *n > 0.0)
        };
        if let Some(c) = num("ceiling") {
            self.learned_ceiling = c;
        }
        self.safe_rate = num("safe");
        self.steered = state
            .get("steered")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        if let Some(p) = num("probe_after_s") {
            self.probe_after = Duration::from_secs_f64(p).max(CALM);
        }
        if let Some(r) = num("rate") {
            self.set_rate(r, "restored");
        }
    }

    /// An adaptive throttle starting at `start_rate`.
    pub fn new(rules: Rules, s: &Settings) -> Self {
        let now = rules.hold_until;
        let max_rate = s.max_rate;
        Self {
            rules,
            rate: s.start_rate.clamp(s.min_rate, max_rate),
            min_rate: s.min_rate,
            max_rate,
            learned_ceiling: f64::INFINITY,
            burst: s.burst.max(1),
            min_gap: s.download_delay,
            max_concurrency: s.concurrency_per_host.max(1),
            latency_tolerance: s.latency_tolerance.as_secs_f64(),
            tat: now,
            in_flight: 0,
            lat_fast: None,
            lat_slow: None,
            last_cut: None,
            steered: false,
            soft_resume: s.soft_block_resume,
            safe_rate: None,
            probe_after: CALM,
        }
    }

    fn interval(&self) -> Duration {
        Duration::from_secs_f64(1.0 / self.rate).max(self.rules.floor(self.min_gap))
    }

    fn set_rate(&mut self, new: f64, trigger: &str) {
        let new = new.clamp(
            self.min_rate,
            self.max_rate.min(self.learned_ceiling.max(self.min_rate)),
        );
        if (new - self.rate).abs() > 1e-9 {
            // Small steps are routine; log the ones that tell a story.
            if (new - self.rate).abs() / self.rate > 0.05 || trigger != "success" {
                tracing::info!(host = %self.rules.host, trigger, old = format!("{:.3}", self.rate), new = format!("{new:.3}"), "rate changed");
            }
            self.rate = new;
        }
    }

    fn cut(&mut self, sent_at: Instant, now: Instant, factor: f64, trigger: &str) {
        if self.last_cut.is_some_and(|c| sent_at < c) {
            return;
        }
        if factor == CUT {
            if let Some(safe) = self
                .safe_rate
                .filter(|s| self.rate <= s * CEILING_RELAX * 1.05)
            {
                // A probe just above a rate that held failed: the limit lies between the two.
                // Go back under the safe rate rather than halving, and probe half as often.
                self.learned_ceiling = safe;
                self.probe_after = self.probe_after.saturating_mul(2);
                self.last_cut = Some(now);
                self.set_rate(safe * SLACK, trigger);
                return;
            }
            if self.learned_ceiling.is_finite() && self.rate >= 0.98 * self.learned_ceiling {
                // Refused while holding at the limit learned from an earlier refusal: that
                // limit is a little high, not wildly wrong; lower it instead of halving.
                self.learned_ceiling *= 0.9;
                self.last_cut = Some(now);
                self.set_rate(self.learned_ceiling, trigger);
                return;
            }
            // What we sent at was too much: remember, and stay a little under the cut rate.
            // Exactly at a token bucket's rate, every stall on either side wastes refill
            // while the bucket is full, so the burst erodes until a refusal; 10% slack keeps
            // the server's bucket topped up.
            self.learned_ceiling = self.learned_ceiling.min(self.rate * CUT * SLACK);
        }
        self.last_cut = Some(now);
        self.set_rate(self.rate * factor, trigger);
    }
}

impl Throttle for Adaptive {
    fn concurrency(&self) -> usize {
        // Little's law: enough in flight to sustain the rate at the current latency.
        // The 1.5 leaves headroom for latency jitter without piling requests onto a host
        // that answers faster than the pacing interval (where one in flight is enough, and a
        // second would only be refused alongside the first).
        let lat = self.lat_fast.unwrap_or(0.0);
        ((1.5 * self.rate * lat).ceil() as usize).clamp(1, self.max_concurrency)
    }

    fn ready_at(&self) -> Instant {
        let slack = self.interval() * (self.burst - 1);
        self.tat
            .checked_sub(slack)
            .unwrap_or(self.tat)
            .max(self.rules.hold_until)
    }

    fn on_send(&mut self, now: Instant) {
        self.in_flight += 1;
        self.tat = self.tat.max(now) + self.interval();
    }

    fn on_feedback(&mut self, fb: &Feedback, now: Instant) -> Verdict {
        self.in_flight = self.in_flight.saturating_sub(1);
        if !fb.sent {
            // A robots refusal from cache: give the slot back.
            self.tat = self
                .tat
                .checked_sub(self.interval())
                .unwrap_or(self.tat)
                .max(now);
        }
        let verdict = self.rules.observe(fb, now);
        if let Some(wait) = fb.retry_after {
            self.probe_after = self.probe_after.max(wait.saturating_mul(10));
        }
        let sent_at = now.checked_sub(fb.latency).unwrap_or(now);
        let refused = matches!(fb.status, Some(429 | 503));
        let timed_out = fb.failure == Some(FailureKind::Timeout);

        if fb.soft_block {
            if self.last_cut.is_none_or(|c| sent_at >= c) {
                // Growing back to the rate that tripped the block would trip it again.
                self.learned_ceiling = self.learned_ceiling.min(self.rate * self.soft_resume);
                self.last_cut = Some(now);
                let resumed = self.rate * self.soft_resume;
                self.set_rate(resumed, "challenge page");
            }
        } else if refused || timed_out {
            let trigger = if timed_out {
                "timeout"
            } else if fb.status == Some(429) {
                "429"
            } else {
                "503"
            };
            self.cut(sent_at, now, CUT, trigger);
        } else if let Some(rl) = fb.rate_limit {
            self.steered = true;
            // Without a stated reset, the policy window is the longest the quota can last.
            let reset = rl.reset.or(rl.window).unwrap_or(Duration::ZERO);
            let mut secs = reset.as_secs_f64();
            // Whole-second resets are rounded up by servers (the IETF fields are integers):
            // the true time left is half a second less on average. Pacing on the rounded
            // value would leave a sixth of a 3-second window unused; an exhausted quota
            // still holds for the full stated reset.
            if reset.subsec_nanos() == 0 && secs >= 1.0 {
                secs -= 0.5;
            }
            if rl.remaining > 0 && secs > 0.0 {
                // Requests already in flight will spend quota too.
                let left = rl.remaining.saturating_sub(self.in_flight as u64) as f64;
                let target = (left / secs).max(self.min_rate);
                // The header states the server's budget; it replaces what AIMD learned.
                self.learned_ceiling = f64::INFINITY;
                self.set_rate(target, "RateLimit");
            }
        } else if fb.status.is_some() && fb.failure.is_none() {
            let lat = fb.latency.as_secs_f64();
            let fast = self.lat_fast.map_or(lat, |f| 0.7 * f + 0.3 * lat);
            let slow = self.lat_slow.map_or(lat, |s| 0.95 * s + 0.05 * lat);
            self.lat_fast = Some(fast);
            self.lat_slow = Some(slow);
            if fast > 2.0 * slow && fast - slow > self.latency_tolerance {
                let spacing = Duration::from_secs_f64(fast.max(1.0));
                if self
                    .last_cut
                    .is_none_or(|c| now.checked_sub(spacing).is_some_and(|t| t >= c))
                {
                    self.cut(sent_at, now, EASE, "latency");
                }
            } else if !self.steered {
                let calm = self.probe_after;
                if self.learned_ceiling.is_finite()
                    && self
                        .last_cut
                        .is_none_or(|c| now.checked_sub(calm).is_some_and(|t| t >= c))
                {
                    // The rate held through a calm period, so it is safe; probe a little
                    // above it in case the server's limit is higher than we learned.
                    self.safe_rate = Some(self.rate);
                    self.learned_ceiling = self.rate * CEILING_RELAX;
                    self.last_cut = Some(now);
                }
                let step = INCREASE_PER_SEC / self.rate;
                self.set_rate(self.rate + step, "success");
            }
        }
        verdict
    }

    fn rate(&self) -> f64 {
        1.0 / self.interval().as_secs_f64()
    }

    fn holds(&self) -> (u64, Duration) {
        (self.rules.holds, self.rules.held)
    }

    fn save(&self, now: Instant) -> serde_json::Value {
        self.save_state(now)
    }

    fn restore(&mut self, state: &serde_json::Value, now: Instant) {
        self.restore_state(state, now);
    }
}

/// Scrapy's AutoThrottle: the delay moves halfway towards `latency / target_concurrency` on
/// each response, within `download_delay` and `autothrottle_max_delay`; a non-200 response
/// may raise the delay but never lower it.
#[derive(Debug, Clone)]
pub struct AutoThrottle {
    rules: Rules,
    delay: Duration,
    min_delay: Duration,
    max_delay: Duration,
    target: f64,
    concurrency: usize,
    next: Instant,
}

impl AutoThrottle {
    /// An AutoThrottle starting at a delay of `1 / start_rate`.
    pub fn new(rules: Rules, s: &Settings) -> Self {
        let now = rules.hold_until;
        let start = Duration::from_secs_f64(1.0 / s.start_rate);
        Self {
            rules,
            delay: start.clamp(
                s.download_delay,
                s.autothrottle_max_delay.max(s.download_delay),
            ),
            min_delay: s.download_delay,
            max_delay: s.autothrottle_max_delay.max(s.download_delay),
            target: s.autothrottle_target_concurrency,
            concurrency: s.concurrency_per_host.max(1),
            next: now,
        }
    }

    /// The current delay.
    pub fn delay(&self) -> Duration {
        self.delay
    }
}

impl Throttle for AutoThrottle {
    fn concurrency(&self) -> usize {
        self.concurrency
    }

    fn ready_at(&self) -> Instant {
        self.next.max(self.rules.hold_until)
    }

    fn on_send(&mut self, now: Instant) {
        self.next = self.next.max(now) + self.rules.floor(self.delay);
    }

    fn on_feedback(&mut self, fb: &Feedback, now: Instant) -> Verdict {
        let verdict = self.rules.observe(fb, now);
        if let Some(status) = fb.status {
            let target = Duration::from_secs_f64(fb.latency.as_secs_f64() / self.target);
            let mut new = (self.delay + target) / 2;
            new = new.clamp(self.min_delay, self.max_delay);
            if status != 200 && new < self.delay {
                new = self.delay;
            }
            if new != self.delay {
                tracing::debug!(host = %self.rules.host, status, old = ?self.delay, new = ?new, trigger = "autothrottle", "delay changed");
                self.delay = new;
            }
        }
        verdict
    }

    fn rate(&self) -> f64 {
        1.0 / self.rules.floor(self.delay).as_secs_f64().max(1e-3)
    }

    fn holds(&self) -> (u64, Duration) {
        (self.rules.holds, self.rules.held)
    }

    fn save(&self, now: Instant) -> serde_json::Value {
        self.rules.save(now)
    }

    fn restore(&mut self, state: &serde_json::Value, now: Instant) {
        self.rules.restore(state, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crawler_core::RateLimitReading;

    fn settings() -> Settings {
        Settings {
            start_rate: 10.0,
            max_rate: 20.0,
            concurrency_per_host: 4,
            ..Default::default()
        }
    }

    fn ok(latency_ms: u64) -> Feedback {
        Feedback {
            sent: true,
            status: Some(200),
            latency: Duration::from_millis(latency_ms),
            ..Default::default()
        }
    }

    fn status(code: u16, retry_after: Option<u64>) -> Feedback {
        Feedback {
            sent: true,
            status: Some(code),
            latency: Duration::from_millis(5),
            retry_after: retry_after.map(Duration::from_secs),
            ..Default::default()
        }
    }

    fn adaptive(s: &Settings) -> Adaptive {
        Adaptive::new(Rules::from_settings(s, "h", Instant::now()), s)
    }

    /// Send and answer `n` requests as fast as the throttle allows, with the clock paused.
    async fn drive(t: &mut dyn Throttle, n: usize, fb: impl Fn() -> Feedback) -> Instant {
        for _ in 0..n {
            tokio::time::sleep_until(t.ready_at()).await;
            let now = Instant::now();
            t.on_send(now);
            t.on_feedback(&fb(), now);
        }
        Instant::now()
    }

    #[tokio::test(start_paused = true)]
    async fn paces_at_the_rate_and_grows_additively_on_success() {
        let s = Settings {
            start_rate: 2.0,
            ..settings()
        };
        let mut t = adaptive(&s);
        let start = Instant::now();
        let end = drive(&mut t, 20, || ok(5)).await;
        // 20 sends at 2/s and growing: well under 10 s, and never faster than the ceiling.
        let took = (end - start).as_secs_f64();
        assert!(took > 4.0 && took < 10.0, "{took}");
        assert!(t.rate() > 2.5 && t.rate() < 5.0, "{}", t.rate());
    }

    #[tokio::test(start_paused = true)]
    async fn never_exceeds_max_rate() {
        let s = Settings {
            start_rate: 50.0,
            max_rate: 5.0,
            ..settings()
        };
        let mut t = adaptive(&s);
        let start = Instant::now();
        let end = drive(&mut t, 51, || ok(1)).await;
        assert!(
            (end - start).as_secs_f64() >= 10.0 - 1e-6,
            "51 sends at 5/s need 10 s"
        );
        assert!((t.rate() - 5.0).abs() < 1e-6);
    }

    #[tokio::test(start_paused = true)]
    async fn refusal_cuts_holds_and_caps_growth() {
        let mut t = adaptive(&settings());
        let now = Instant::now();
        t.on_send(now);
        assert_eq!(
            t.on_feedback(&status(429, Some(30)), now),
            Verdict::Continue
        );
        assert!(
            (t.rate() - 4.5).abs() < 1e-6,
            "halved from 10, with 10% slack"
        );
        assert_eq!(
            t.ready_at(),
            now + Duration::from_secs(30) + Duration::from_millis(250)
        );
        assert_eq!(t.holds().0, 1);
        // A second refusal to a request sent before the cut does not cut again.
        t.on_feedback(
            &Feedback {
                latency: Duration::from_millis(100),
                ..status(429, None)
            },
            now + Duration::from_millis(50),
        );
        assert!((t.rate() - 4.5).abs() < 1e-6);
        // Growth after the hold stops at the learned ceiling (below the refused rate).
        tokio::time::sleep_until(t.ready_at()).await;
        drive(&mut t, 100, || ok(5)).await;
        assert!(t.rate() <= 4.5 + 1e-6, "{}", t.rate());
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_beyond_the_maximum_skips_the_host() {
        let s = Settings {
            max_retry_after: Duration::from_secs(60),
            ..settings()
        };
        let mut t = adaptive(&s);
        let now = Instant::now();
        t.on_send(now);
        match t.on_feedback(&status(503, Some(3600)), now) {
            Verdict::Skip(why) => assert!(why.contains("max_retry_after"), "{why}"),
            v => panic!("expected a skip, got {v:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limit_headers_steer_and_exhaustion_holds() {
        let mut t = adaptive(&settings());
        let now = Instant::now();
        t.on_send(now);
        let rl = |remaining, reset| Feedback {
            rate_limit: Some(RateLimitReading {
                remaining,
                reset: Some(Duration::from_secs(reset)),
                limit: Some(100),
                window: None,
            }),
            ..ok(5)
        };
        t.on_feedback(&rl(30, 10), now);
        // 30 left over a whole-second 10 s reset, which really means about 9.5 s.
        assert!((t.rate() - 30.0 / 9.5).abs() < 1e-6, "{}", t.rate());
        // Silence after headers: hold the rate, never accelerate.
        t.on_send(now);
        t.on_feedback(&ok(5), now);
        assert!((t.rate() - 30.0 / 9.5).abs() < 1e-6);
        t.on_send(now);
        t.on_feedback(&rl(0, 7), now);
        assert!(t.ready_at() >= now + Duration::from_secs(7));
        // A generous quota never pushes past max_rate.
        t.on_send(now);
        t.on_feedback(&rl(10_000, 1), now);
        assert!((t.rate() - 20.0).abs() < 1e-6);
    }

    #[tokio::test(start_paused = true)]
    async fn rising_latency_eases_off_before_errors() {
        let s = Settings {
            start_rate: 4.0,
            ..settings()
        };
        let mut t = adaptive(&s);
        drive(&mut t, 40, || ok(20)).await;
        let before = t.rate();
        drive(&mut t, 10, || ok(400)).await;
        assert!(t.rate() < before, "{} !< {before}", t.rate());
    }

    #[tokio::test(start_paused = true)]
    async fn challenge_pages_pause_then_resume_slower() {
        let s = Settings {
            soft_block_pause: Duration::from_secs(120),
            ..settings()
        };
        let mut t = adaptive(&s);
        let now = Instant::now();
        t.on_send(now);
        t.on_feedback(
            &Feedback {
                soft_block: true,
                ..ok(5)
            },
            now,
        );
        assert!(t.ready_at() >= now + Duration::from_secs(120));
        assert!(
            (t.rate() - 2.5).abs() < 1e-6,
            "a quarter of 10: {}",
            t.rate()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn crawl_delay_is_a_floor() {
        let mut t = adaptive(&settings());
        let now = Instant::now();
        t.on_send(now);
        t.on_feedback(
            &Feedback {
                crawl_delay: Some(Duration::from_secs(3)),
                ..ok(5)
            },
            now,
        );
        assert!(t.rate() <= 1.0 / 3.0 + 1e-6);
    }

    #[tokio::test(start_paused = true)]
    async fn autothrottle_follows_latency_and_errors_only_raise() {
        let s = Settings {
            throttle: ThrottleMode::Autothrottle,
            start_rate: 1.0,
            ..settings()
        };
        let mut t = AutoThrottle::new(Rules::from_settings(&s, "h", Instant::now()), &s);
        let now = Instant::now();
        t.on_feedback(&ok(200), now);
        assert_eq!(t.delay(), Duration::from_millis(600), "(1s + 0.2s) / 2");
        t.on_feedback(
            &Feedback {
                latency: Duration::from_millis(10),
                ..status(500, None)
            },
            now,
        );
        assert_eq!(
            t.delay(),
            Duration::from_millis(600),
            "a 500 cannot lower the delay"
        );
        t.on_feedback(&ok(10), now);
        assert_eq!(t.delay(), Duration::from_millis(305));
    }

    #[tokio::test(start_paused = true)]
    async fn fixed_delay_is_randomised_within_half_to_one_and_a_half() {
        let s = Settings {
            throttle: ThrottleMode::Fixed,
            ..Default::default()
        };
        let now = Instant::now();
        let mut t = FixedDelay::new(
            Rules::from_settings(&s, "h", now),
            Duration::from_secs(2),
            true,
            1,
        );
        let mut prev = t.ready_at();
        for _ in 0..200 {
            t.on_send(prev);
            let gap = t.ready_at() - prev;
            assert!(
                gap >= Duration::from_secs(1) && gap <= Duration::from_secs(3),
                "{gap:?}"
            );
            prev = t.ready_at();
        }
        // A robots refusal from cache costs no delay.
        let before = t.ready_at();
        t.on_send(before);
        t.on_feedback(&Feedback::default(), before);
        assert_eq!(t.ready_at(), before);
    }
}

#[cfg(test)]
mod probe_tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_returns_just_under_the_safe_rate() {
        let s = Settings {
            start_rate: 10.0,
            max_rate: 20.0,
            ..Default::default()
        };
        let mut t = Adaptive::new(Rules::from_settings(&s, "h", Instant::now()), &s);
        let refuse = |ra: u64| Feedback {
            sent: true,
            status: Some(429),
            retry_after: Some(Duration::from_secs(ra)),
            ..Default::default()
        };
        let ok = Feedback {
            sent: true,
            status: Some(200),
            latency: Duration::from_millis(2),
            ..Default::default()
        };
        let now = Instant::now();
        t.on_send(now);
        t.on_feedback(&refuse(3), now);
        assert!((t.rate() - 4.5).abs() < 1e-6);
        // Calm for longer than ten times the Retry-After: the rate is marked safe and a
        // probe above it begins.
        let mut at = now;
        for _ in 0..400 {
            at = t.ready_at().max(at);
            tokio::time::sleep_until(at).await;
            t.on_send(at);
            t.on_feedback(&ok, at);
        }
        assert!(t.rate() > 4.5 + 1e-6, "probing above 4.5: {}", t.rate());
        let probing = t.rate();
        t.on_send(at);
        t.on_feedback(&refuse(3), at);
        assert!(
            (t.rate() - 4.5 * 0.9).abs() < 1e-6,
            "back to 90% of the safe rate, not half of {probing}: {}",
            t.rate()
        );
    }
}

#[cfg(test)]
mod ceiling_tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_refusal_at_the_learned_limit_lowers_it_a_little() {
        let s = Settings {
            start_rate: 10.0,
            max_rate: 20.0,
            ..Default::default()
        };
        let mut t = Adaptive::new(Rules::from_settings(&s, "h", Instant::now()), &s);
        let refuse = Feedback {
            sent: true,
            status: Some(429),
            ..Default::default()
        };
        let now = Instant::now();
        t.on_send(now);
        t.on_feedback(&refuse, now);
        assert!((t.rate() - 4.5).abs() < 1e-6);
        let later = now + Duration::from_secs(5);
        t.on_send(later);
        t.on_feedback(&refuse, later);
        assert!(
            (t.rate() - 4.05).abs() < 1e-6,
            "90% of 4.5, not half: {}",
            t.rate()
        );
    }
}

#[cfg(test)]
mod outage_tests {
    use super::*;

    fn fixed(s: &Settings) -> FixedDelay {
        FixedDelay::new(
            Rules::from_settings(s, "h", Instant::now()),
            Duration::ZERO,
            false,
            4,
        )
    }

    fn fb(status: u16) -> Feedback {
        Feedback {
            sent: true,
            status: Some(status),
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_without_retry_after_holds_by_a_growing_backoff_in_every_mode() {
        let s = Settings::default();
        for mode in [
            ThrottleMode::Fixed,
            ThrottleMode::Adaptive,
            ThrottleMode::Autothrottle,
        ] {
            let s = Settings {
                throttle: mode,
                ..s.clone()
            };
            let mut t = throttle_for(&s, "h", Instant::now());
            let now = Instant::now();
            let mut last = Duration::ZERO;
            for n in 1..=6u32 {
                t.on_send(now);
                assert_eq!(t.on_feedback(&fb(429), now), Verdict::Continue);
                let held = t.ready_at() - now;
                let full = Duration::from_secs(2 * (1 << (n - 1))).min(Duration::from_secs(60));
                // Equal jitter: between half and all of 2 s x 2^(n-1), capped at 60 s, plus
                // the hold margin.
                assert!(held >= full / 2, "{mode:?} refusal {n}: {held:?}");
                assert!(
                    held <= full + s.hold_margin,
                    "{mode:?} refusal {n}: {held:?}"
                );
                last = held;
            }
            assert!(
                last >= Duration::from_secs(30),
                "{mode:?}: grows to the cap"
            );
        }
        // A success ends the streak: the next refusal starts from 2 s again.
        let mut t = fixed(&s);
        let now = Instant::now();
        for _ in 0..5 {
            t.on_send(now);
            t.on_feedback(&fb(429), now);
        }
        let later = t.ready_at();
        t.on_send(later);
        t.on_feedback(&fb(200), later);
        t.on_send(later);
        t.on_feedback(&fb(503), later);
        assert!(t.ready_at() - later <= Duration::from_secs(2) + s.hold_margin);
    }

    #[tokio::test(start_paused = true)]
    async fn robots_outage_holds_then_skips_after_the_bound() {
        let s = Settings {
            robots_outage_max: Duration::from_secs(60),
            ..Settings::default()
        };
        let mut t = fixed(&s);
        let down = Feedback {
            robots_unavailable: true,
            ..fb(503)
        };
        let start = Instant::now();
        let mut now = start;
        let mut holds = 0;
        loop {
            t.on_send(now);
            match t.on_feedback(&down, now) {
                Verdict::Continue => {
                    assert!(t.ready_at() > now, "held after a robots.txt failure");
                    holds += 1;
                    now = t.ready_at();
                }
                Verdict::Skip(why) => {
                    assert!(why.contains("robots.txt unavailable"), "{why}");
                    assert!(now - start > Duration::from_secs(60));
                    break;
                }
            }
            assert!(holds < 50, "bounded");
        }
        // A Retry-After on the robots.txt response is the hold instead of the backoff.
        let mut t = fixed(&s);
        let now = Instant::now();
        t.on_send(now);
        let asked = Feedback {
            retry_after: Some(Duration::from_secs(7)),
            ..down.clone()
        };
        t.on_feedback(&asked, now);
        let held = t.ready_at() - now;
        assert!(
            held >= Duration::from_secs(7) && held < Duration::from_secs(8),
            "{held:?}"
        );
        // robots.txt readable again: the outage clock restarts.
        t.on_send(t.ready_at());
        t.on_feedback(&fb(200), t.ready_at());
        assert!(t.rules.robots_down_since.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_streak_of_403s_slows_then_skips_the_host() {
        let s = Settings::default();
        let mut t = fixed(&s);
        let now = Instant::now();
        for n in 1..FORBIDDEN_STREAK {
            t.on_send(now);
            assert_eq!(t.on_feedback(&fb(403), now), Verdict::Continue, "403 #{n}");
            assert!(t.ready_at() > now, "slowed after 403 #{n}");
        }
        t.on_send(now);
        match t.on_feedback(&fb(403), now) {
            Verdict::Skip(why) => assert!(why.contains("403"), "{why}"),
            v => panic!("expected a skip, got {v:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_exhausted_quota_without_a_reset_holds_for_the_policy_window() {
        let s = Settings::default();
        let mut t = fixed(&s);
        let now = Instant::now();
        t.on_send(now);
        let spent = Feedback {
            rate_limit: Some(crawler_core::RateLimitReading {
                remaining: 0,
                reset: None,
                limit: Some(50),
                window: Some(Duration::from_secs(10)),
            }),
            ..fb(200)
        };
        t.on_feedback(&spent, now);
        let held = t.ready_at() - now;
        assert!(held >= Duration::from_secs(10), "{held:?}");
    }
}
