//! The retry policy: which failures get another attempt, and when.

use std::time::Duration;

use tokio::time::Instant;

use super::worker::{Completion, Terminal};
use crate::fetch::FailureKind;
use crate::request::Request;
use crate::settings::Settings;

/// Which failures are worth another attempt, and how long to wait before it.
pub(super) struct RetryPolicy {
    times: u32,
    codes: Vec<u16>,
    base: Duration,
    cap: Duration,
}

impl From<&Settings> for RetryPolicy {
    fn from(s: &Settings) -> Self {
        Self {
            times: s.retry_times,
            codes: s.retry_http_codes.clone(),
            base: s.retry_backoff_base,
            cap: s.retry_backoff_cap,
        }
    }
}

impl RetryPolicy {
    /// Whether a failure of this kind (and status) can succeed on another attempt.
    fn retryable(&self, kind: FailureKind, status: Option<u16>) -> bool {
        match kind {
            FailureKind::Timeout | FailureKind::Connection | FailureKind::SoftBlock => true,
            FailureKind::Status => status.is_some_and(|s| self.codes.contains(&s)),
            _ => false,
        }
    }

    /// Full-jitter exponential backoff: uniform in [0, min(cap, base x 2^attempt)].
    fn backoff(&self, attempt: u32) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.cap);
        ceiling.mul_f64(rand_unit())
    }

    /// If `done` should be retried, take its request out and say when to send it again.
    pub(super) fn plan(&self, done: &mut Completion, now: Instant) -> Option<(Request, Instant)> {
        let Terminal::Failed(kind) = done.terminal else {
            return None;
        };
        if !self.retryable(kind, done.status) {
            return None;
        }
        let req = done.request.as_ref()?;
        if req.retries >= self.times {
            return None;
        }
        let mut req = done.request.take()?;
        req.retries += 1;
        req.dont_filter = true;
        // A server's Retry-After wins over our own guess; the host's slot holds it too.
        let wait = done
            .feedback
            .retry_after
            .unwrap_or_else(|| self.backoff(req.retries));
        tracing::debug!(url = %req.url, attempt = req.retries, ?wait, reason = %kind, "retrying");
        done.terminal = Terminal::Retrying;
        Some((req, now + wait))
    }
}

/// A uniform random number in [0, 1), from the standard library's randomly keyed hasher, so
/// core needs no RNG dependency for one jitter draw per retry.
fn rand_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fetch::Feedback;

    fn policy() -> RetryPolicy {
        RetryPolicy::from(&Settings::default())
    }

    fn failed(kind: FailureKind, status: Option<u16>, retries: u32) -> Completion {
        let mut c = Completion::new(Feedback::default(), Terminal::Failed(kind));
        c.status = status;
        let mut req = Request::get("http://example.com/x").unwrap();
        req.retries = retries;
        c.request = Some(req);
        c
    }

    #[test]
    fn only_what_can_succeed_is_retried() {
        let p = policy();
        let cdn = [520, 521, 522, 523, 524, 525, 526, 527, 530];
        for code in [408, 429, 500, 502, 503, 504].into_iter().chain(cdn) {
            assert!(p.retryable(FailureKind::Status, Some(code)), "{code}");
        }
        // 501 and 505-511 say something another attempt cannot change (issue 29).
        for code in [400, 401, 403, 404, 410, 501].into_iter().chain(505..=511) {
            assert!(!p.retryable(FailureKind::Status, Some(code)), "{code}");
        }
        assert!(p.retryable(FailureKind::Timeout, None));
        assert!(p.retryable(FailureKind::Connection, None));
        for kind in [
            FailureKind::TooLarge,
            FailureKind::TooManyRedirects,
            FailureKind::Dns,
            FailureKind::Decode,
        ] {
            assert!(!p.retryable(kind, None), "{kind}");
        }
    }

    #[test]
    fn backoff_is_full_jitter_under_the_cap() {
        let p = policy();
        for attempt in 0..12u32 {
            let ceiling = Duration::from_secs(1)
                .saturating_mul(1 << attempt)
                .min(Duration::from_secs(60));
            let draws: Vec<Duration> = (0..200).map(|_| p.backoff(attempt)).collect();
            assert!(draws.iter().all(|d| *d <= ceiling), "attempt {attempt}");
            // Full jitter spreads over the whole range, not just near the ceiling.
            assert!(draws.iter().any(|d| *d < ceiling / 2), "attempt {attempt}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_planned_until_attempts_run_out_and_retry_after_wins() {
        let p = policy();
        let now = Instant::now();
        let mut c = failed(FailureKind::Status, Some(503), 0);
        c.feedback.retry_after = Some(Duration::from_secs(7));
        let (req, at) = p.plan(&mut c, now).expect("first retry");
        assert_eq!(req.retries, 1);
        assert!(req.dont_filter);
        assert_eq!(at, now + Duration::from_secs(7));
        assert!(matches!(c.terminal, Terminal::Retrying));

        let mut last = failed(FailureKind::Timeout, None, 2);
        assert!(p.plan(&mut last, now).is_none(), "retry_times is 2");
        assert!(matches!(
            last.terminal,
            Terminal::Failed(FailureKind::Timeout)
        ));
        let mut not_found = failed(FailureKind::Status, Some(404), 0);
        assert!(p.plan(&mut not_found, now).is_none());
    }
}
