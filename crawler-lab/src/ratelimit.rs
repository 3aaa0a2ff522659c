//! Per-client limiter state, block triggers, and the headers that announce them.

use std::collections::VecDeque;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::limiters::{HttpReqRate, LimitReq, LimitReqOutcome, LimitReqParams};
use crate::scenario::{Block, Dialect, Limit, RetryAfter};
use crate::util::put;

/// What the server knows about one client key under one scenario.
#[derive(Debug)]
pub(crate) struct ClientState {
    tokens: f64,
    refilled_at: Duration,
    window_index: u64,
    window_used: u32,
    /// The client's node in an nginx `limit_req` zone.
    limit_req: LimitReq,
    /// The client's `http_req_rate` in a HAProxy stick table.
    req_rate: HttpReqRate,
    /// Arrivals within the last second, for the block triggers (at most threshold + 1 kept).
    arrivals: VecDeque<Duration>,
    soft_until: Duration,
    hard_until: Duration,
    /// End of the last announced wait, when the scenario enforces it.
    pub hold_until: Duration,
}

impl ClientState {
    pub(crate) fn new(limit: Option<Limit>, now: Duration) -> Self {
        let tokens = match limit {
            Some(Limit::TokenBucket { burst, .. }) => f64::from(burst),
            _ => 0.0,
        };
        Self {
            tokens,
            refilled_at: now,
            window_index: u64::MAX,
            window_used: 0,
            limit_req: LimitReq::default(),
            req_rate: HttpReqRate::default(),
            arrivals: VecDeque::new(),
            soft_until: Duration::ZERO,
            hard_until: Duration::ZERO,
            hold_until: Duration::ZERO,
        }
    }

    /// Notes an arrival and updates the block triggers; returns (soft, hard) block state.
    pub(crate) fn arrive(
        &mut self,
        now: Duration,
        soft: Option<Block>,
        hard: Option<Block>,
    ) -> (bool, bool) {
        let keep = soft
            .iter()
            .chain(hard.iter())
            .map(|b| b.threshold as usize + 1)
            .max()
            .unwrap_or(0);
        if keep == 0 {
            return (false, false);
        }
        while self
            .arrivals
            .front()
            .is_some_and(|&t| t + Duration::from_secs(1) <= now)
        {
            self.arrivals.pop_front();
        }
        self.arrivals.push_back(now);
        while self.arrivals.len() > keep {
            self.arrivals.pop_front();
        }
        let in_last_second = self.arrivals.len();
        if let Some(b) = soft
            && in_last_second > b.threshold as usize
            && now >= self.soft_until
        {
            self.soft_until = now + b.window;
        }
        if let Some(b) = hard
            && in_last_second > b.threshold as usize
            && now >= self.hard_until
        {
            self.hard_until = now + b.window;
        }
        (now < self.soft_until, now < self.hard_until)
    }

    pub(crate) fn hard_block_left(&self, now: Duration) -> Duration {
        self.hard_until.saturating_sub(now)
    }

    /// Admits or refuses one request; refusals consume nothing.
    pub(crate) fn admit(&mut self, limit: Limit, now: Duration) -> Verdict {
        self.evaluate(limit, now, true)
    }

    /// The verdict a request would get now, consuming nothing.
    pub(crate) fn peek(&mut self, limit: Limit, now: Duration) -> Verdict {
        self.evaluate(limit, now, false)
    }

    fn evaluate(&mut self, limit: Limit, now: Duration, consume: bool) -> Verdict {
        // The real limiters count whole milliseconds of their event loop's clock.
        let now_ms = now.as_millis() as u64;
        match limit {
            Limit::TokenBucket { rate, burst } => {
                let burst_f = f64::from(burst);
                let elapsed = now.saturating_sub(self.refilled_at).as_secs_f64();
                self.tokens = (self.tokens + rate * elapsed).min(burst_f);
                self.refilled_at = now;
                let allowed = self.tokens >= 1.0;
                if allowed && consume {
                    self.tokens -= 1.0;
                }
                Verdict {
                    allowed,
                    limit: burst,
                    remaining: self.tokens.floor() as u32,
                    reset: (burst_f - self.tokens) / rate,
                    retry_in: if self.tokens >= 1.0 {
                        0.0
                    } else {
                        (1.0 - self.tokens) / rate
                    },
                    window: burst_f / rate,
                    delay: Duration::ZERO,
                }
            }
            Limit::LimitReq { rate, burst, delay } => {
                let p = LimitReqParams::new(rate, burst, delay.nginx());
                let (allowed, delay_ms) = match self.limit_req.offer(&p, now_ms, consume) {
                    LimitReqOutcome::Accept { delay_ms, .. } => (true, delay_ms),
                    LimitReqOutcome::Refuse { .. } => (false, 0),
                };
                let left = self.limit_req.drained(&p, now_ms);
                // Requests that would pass back to back now: each adds 1000 to the excess.
                let remaining = ((p.burst - left).max(0) / 1000) as u32;
                Verdict {
                    allowed,
                    limit: burst + 1,
                    remaining,
                    reset: left as f64 / p.rate as f64,
                    retry_in: self.limit_req.retry_in_ms(&p, now_ms) as f64 / 1000.0,
                    window: f64::from(burst + 1) * 1000.0 / p.rate as f64,
                    delay: Duration::from_millis(delay_ms),
                }
            }
            Limit::HttpReqRate { max, period } => {
                let period_ms = (period.as_millis() as u64).max(2);
                let max = u64::from(max);
                let (allowed, rate) = if consume {
                    self.req_rate.track_and_check(period_ms, max, now_ms)
                } else {
                    let mut probe = self.req_rate;
                    probe.track_and_check(period_ms, max, now_ms)
                };
                Verdict {
                    allowed,
                    limit: max as u32,
                    remaining: max.saturating_sub(rate) as u32,
                    reset: self.req_rate.reset_in_ms(period_ms, now_ms) as f64 / 1000.0,
                    retry_in: if allowed {
                        0.0
                    } else {
                        self.req_rate.retry_in_ms(period_ms, max, now_ms) as f64 / 1000.0
                    },
                    window: period_ms as f64 / 1000.0,
                    delay: Duration::ZERO,
                }
            }
            Limit::Window { limit, window } => {
                let w = window.as_secs_f64();
                let t = now.as_secs_f64();
                let index = (t / w).floor() as u64;
                if index != self.window_index {
                    self.window_index = index;
                    self.window_used = 0;
                }
                let allowed = self.window_used < limit;
                if allowed && consume {
                    self.window_used += 1;
                }
                let reset = ((index + 1) as f64 * w - t).max(0.0);
                let remaining = limit - self.window_used;
                Verdict {
                    allowed,
                    limit,
                    remaining,
                    reset,
                    retry_in: if remaining > 0 { 0.0 } else { reset },
                    window: w,
                    delay: Duration::ZERO,
                }
            }
        }
    }
}

/// The limiter's answer to one request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Verdict {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    /// Seconds until the allowance is whole again.
    pub reset: f64,
    /// Seconds until one more request would be admitted.
    pub retry_in: f64,
    /// The policy's window in seconds.
    pub window: f64,
    /// How long an accepted request waits before it is served (nginx's delayed mode).
    pub delay: Duration,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Writes the `Retry-After` header line; returns the announced wait in seconds.
pub(crate) fn write_retry_after(ra: &RetryAfter, retry_in: f64, out: &mut Vec<u8>) -> Option<f64> {
    match ra {
        RetryAfter::Auto => {
            let secs = retry_in.ceil().max(1.0) as u64;
            put!(out, "Retry-After: {secs}\r\n");
            Some(secs as f64)
        }
        RetryAfter::Seconds(n) => {
            put!(out, "Retry-After: {n}\r\n");
            Some(*n as f64)
        }
        RetryAfter::HttpDate(n) => {
            let now = SystemTime::now();
            let at = now + Duration::from_secs(*n);
            put!(out, "Retry-After: {}\r\n", httpdate::fmt_http_date(at));
            // The date has whole seconds: the wait ends at the truncated instant.
            let at_secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as f64;
            Some((at_secs - unix_now()).max(0.0))
        }
        RetryAfter::Absent => None,
        RetryAfter::Malformed => {
            out.extend_from_slice(b"Retry-After: in a while\r\n");
            None
        }
    }
}

/// Writes the rate-limit header lines of a dialect; returns the announced wait in seconds when
/// nothing remains (a client told "0 left, resets in T" is asked to wait T).
pub(crate) fn write_ratelimit(dialect: Dialect, v: &Verdict, out: &mut Vec<u8>) -> Option<f64> {
    let reset = v.reset.ceil() as u64;
    let window = v.window.ceil().max(1.0) as u64;
    let announced = match dialect {
        Dialect::Ietf | Dialect::IetfWithPolicy => {
            put!(
                out,
                "RateLimit-Limit: {}\r\nRateLimit-Remaining: {}\r\nRateLimit-Reset: {reset}\r\n",
                v.limit,
                v.remaining
            );
            if dialect == Dialect::IetfWithPolicy {
                put!(out, "RateLimit-Policy: {};w={window}\r\n", v.limit);
            }
            reset as f64
        }
        Dialect::Structured => {
            let hourly = (f64::from(v.limit) * 3600.0 / v.window).floor() as u64;
            put!(
                out,
                "RateLimit-Policy: \"default\";q={};w={window}, \"hourly\";q={hourly};w=3600\r\nRateLimit: \"default\";r={};t={reset}\r\n",
                v.limit,
                v.remaining
            );
            reset as f64
        }
        Dialect::XUnix | Dialect::XDelta => {
            put!(
                out,
                "X-RateLimit-Limit: {}\r\nX-RateLimit-Remaining: {}\r\n",
                v.limit,
                v.remaining
            );
            if dialect == Dialect::XUnix {
                let at = (unix_now() + v.reset).ceil();
                put!(out, "X-RateLimit-Reset: {}\r\n", at as u64);
            } else {
                put!(out, "X-RateLimit-Reset: {reset}\r\n");
            }
            put!(out, "X-RateLimit-Reset-After: {:.3}\r\n", v.reset);
            // The announced wait is the earlier, exact one: `X-RateLimit-Reset` is rounded up
            // to a whole second, and a client that trusts `Reset-After` and comes back when the
            // quota has really reset is served, so it must not count as a violation.
            v.reset
        }
    };
    (v.remaining == 0).then_some(announced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_allows_the_burst_then_refills_at_the_rate() {
        let limit = Limit::TokenBucket {
            rate: 5.0,
            burst: 20,
        };
        let mut st = ClientState::new(Some(limit), Duration::ZERO);
        let allowed = (0..25)
            .filter(|_| st.admit(limit, Duration::ZERO).allowed)
            .count();
        assert_eq!(allowed, 20);
        assert!(!st.admit(limit, Duration::from_millis(150)).allowed);
        assert!(st.admit(limit, Duration::from_millis(210)).allowed);
    }

    #[test]
    fn window_resets_at_the_boundary() {
        let limit = Limit::Window {
            limit: 2,
            window: Duration::from_secs(1),
        };
        let mut st = ClientState::new(Some(limit), Duration::ZERO);
        let t = Duration::from_millis(300);
        assert_eq!(st.admit(limit, t).remaining, 1);
        let v = st.admit(limit, t);
        assert!(v.allowed && v.remaining == 0);
        assert!((v.reset - 0.7).abs() < 1e-9);
        assert!(!st.admit(limit, t).allowed);
        assert!(st.admit(limit, Duration::from_millis(1000)).allowed);
    }

    #[test]
    fn window_refusals_do_not_count() {
        let limit = Limit::Window {
            limit: 3,
            window: Duration::from_secs(1),
        };
        let mut st = ClientState::new(Some(limit), Duration::ZERO);
        let ms = Duration::from_millis;
        let first: Vec<bool> = [0, 10, 20, 30, 40, 990]
            .iter()
            .map(|&t| st.admit(limit, ms(t)).allowed)
            .collect();
        assert_eq!(first, [true, true, true, false, false, false]);
        // The next window starts fresh: three refusals above left no debt.
        let next: Vec<bool> = [1000, 1001, 1002, 1003]
            .iter()
            .map(|&t| st.admit(limit, ms(t)).allowed)
            .collect();
        assert_eq!(next, [true, true, true, false]);
    }

    #[test]
    fn limit_req_and_req_rate_verdicts_through_the_client_state() {
        let ms = Duration::from_millis;
        let nginx = Limit::LimitReq {
            rate: 5.0,
            burst: 0,
            delay: crate::LimitReqDelay::NoDelay,
        };
        let mut st = ClientState::new(Some(nginx), Duration::ZERO);
        assert!(st.admit(nginx, ms(0)).allowed);
        let v = st.admit(nginx, ms(150));
        assert!(!v.allowed);
        assert!((v.retry_in - 0.05).abs() < 1e-9, "{v:?}");
        // The refusal at 150 moved nothing: 200 is one full interval after 0.
        assert!(st.admit(nginx, ms(200)).allowed);

        let haproxy = Limit::HttpReqRate {
            max: 1,
            period: Duration::from_secs(1),
        };
        let mut st = ClientState::new(Some(haproxy), Duration::ZERO);
        assert!(st.admit(haproxy, ms(0)).allowed);
        // A peek counts nothing: the admit right after it reads the same rate.
        assert!(!st.peek(haproxy, ms(1000)).allowed);
        assert!(!st.admit(haproxy, ms(1000)).allowed);
        // That refusal counted: at 1001 the rate reads (1 * 999 + 2 * 1000) / 1000 = 2.
        assert!(!st.admit(haproxy, ms(1001)).allowed);
    }

    #[test]
    fn x_dialects_announce_the_exact_reset_after() {
        let v = Verdict {
            allowed: true,
            limit: 50,
            remaining: 0,
            reset: 0.25,
            retry_in: 0.25,
            window: 10.0,
            delay: Duration::ZERO,
        };
        for d in [Dialect::XUnix, Dialect::XDelta] {
            let mut out = Vec::new();
            // Reset rounds up to a whole second; the wait counted is the exact 0.25 s.
            assert_eq!(write_ratelimit(d, &v, &mut out), Some(0.25), "{d:?}");
            let text = String::from_utf8(out).expect("ascii");
            assert!(text.contains("X-RateLimit-Reset-After: 0.250"), "{text}");
        }
        let mut out = Vec::new();
        // The IETF trio has only whole seconds: that is the wait.
        assert_eq!(write_ratelimit(Dialect::Ietf, &v, &mut out), Some(1.0));
    }

    #[test]
    fn blocks_trigger_past_the_threshold_for_the_window() {
        let b = Block::new(3, Duration::from_secs(10));
        let mut st = ClientState::new(None, Duration::ZERO);
        let ms = Duration::from_millis;
        for i in 0..3 {
            assert_eq!(st.arrive(ms(i * 100), Some(b), None), (false, false));
        }
        assert_eq!(st.arrive(ms(300), Some(b), None), (true, false));
        assert_eq!(st.arrive(ms(9_000), Some(b), None), (true, false));
        assert_eq!(st.arrive(ms(10_400), Some(b), None), (false, false));
    }
}
