//! Per-host pacing policies. A slot asks its throttle when it may send next; adaptive
//! policies (AutoThrottle, AIMD, RateLimit headers) implement the same trait.

use std::time::Duration;

use crawler_core::Feedback;
use rand::Rng;
use tokio::time::Instant;

/// Decides how fast one host is fetched.
pub trait Throttle: Send {
    /// Requests allowed in flight at once.
    fn concurrency(&self) -> usize;
    /// The earliest instant the next request may be sent.
    fn ready_at(&self) -> Instant;
    /// A request is being sent at `now`.
    fn on_send(&mut self, now: Instant);
    /// A request ended; learn from it.
    fn on_feedback(&mut self, feedback: &Feedback, now: Instant);
}

/// A fixed delay between sends (optionally randomised 0.5x to 1.5x), a fixed concurrency,
/// raised to robots.txt Crawl-delay when the host sets one, and held for Retry-After.
#[derive(Debug, Clone)]
pub struct FixedDelay {
    delay: Duration,
    randomize: bool,
    concurrency: usize,
    next: Instant,
    /// `next` before the latest send, restored when that send turns out not to have happened.
    before_send: Instant,
}

impl FixedDelay {
    /// A throttle that waits `delay` between sends with at most `concurrency` in flight.
    pub fn new(delay: Duration, randomize: bool, concurrency: usize, now: Instant) -> Self {
        Self {
            delay,
            randomize,
            concurrency: concurrency.max(1),
            next: now,
            before_send: now,
        }
    }

    fn jittered(&self) -> Duration {
        if self.randomize && !self.delay.is_zero() {
            self.delay.mul_f64(rand::rng().random_range(0.5..1.5))
        } else {
            self.delay
        }
    }

    /// The current base delay.
    pub fn delay(&self) -> Duration {
        self.delay
    }
}

impl Throttle for FixedDelay {
    fn concurrency(&self) -> usize {
        self.concurrency
    }

    fn ready_at(&self) -> Instant {
        self.next
    }

    fn on_send(&mut self, now: Instant) {
        self.before_send = self.next;
        self.next = self.next.max(now) + self.jittered();
    }

    fn on_feedback(&mut self, feedback: &Feedback, now: Instant) {
        if !feedback.sent {
            // Nothing reached the host (robots refusal from cache): the delay was not used.
            self.next = self.before_send.max(now.min(self.next));
        }
        if let Some(cd) = feedback.crawl_delay {
            if cd > self.delay {
                tracing::info!(old = ?self.delay, new = ?cd, trigger = "crawl-delay", "host delay raised");
                self.delay = cd;
            }
        }
        if let Some(wait) = feedback.retry_after {
            self.next = self.next.max(now + wait);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn randomised_delay_stays_within_half_to_one_and_a_half() {
        let start = Instant::now();
        let mut t = FixedDelay::new(Duration::from_secs(2), true, 1, start);
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
    }

    #[tokio::test(start_paused = true)]
    async fn unsent_requests_do_not_cost_a_delay_and_crawl_delay_is_a_floor() {
        let now = Instant::now();
        let mut t = FixedDelay::new(Duration::from_secs(1), false, 1, now);
        t.on_send(now);
        assert_eq!(t.ready_at(), now + Duration::from_secs(1));
        t.on_feedback(&Feedback::default(), now);
        assert_eq!(t.ready_at(), now, "a robots refusal is free");

        let fb = Feedback {
            sent: true,
            crawl_delay: Some(Duration::from_secs(5)),
            ..Default::default()
        };
        t.on_send(now);
        t.on_feedback(&fb, now);
        assert_eq!(t.delay(), Duration::from_secs(5));
        t.on_send(now + Duration::from_secs(1));
        assert_eq!(t.ready_at(), now + Duration::from_secs(6));
    }
}
