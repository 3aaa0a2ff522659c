//! The retry policy: which failures get another attempt, and when.

use std::time::Duration;

use tokio::time::Instant;

use super::worker::{Completion, Terminal};
use crawler_core::FailureKind;
use crawler_core::Request;
use crawler_core::Settings;

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
            FailureKind::Timeout
            | FailureKind::Connection
            | FailureKind::SoftBlock
            | FailureKind::Proxy => true,
            FailureKind::Status => status.is_some_and(|s| self.codes.contains(&s)),
            _ => false,
        }
    }

    /// When a sub-request that ended with this failure kind (and status), after `retries`
    /// attempts beyond its first, is sent again; `None` when it is not. The same rules as a
    /// page's: a browser's script refused with a 429 is worth the wait its host's hold
    /// imposes, or the page renders without it.
    pub(super) fn sub_retry(
        &self,
        kind: FailureKind,
        status: Option<u16>,
        retries: u32,
        now: Instant,
    ) -> Option<Instant> {
        (retries < self.times && self.retryable(kind, status)).then(|| now + self.backoff(retries))
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
    /// `unwell`: its host is held for a run of failures; a failure of the host's kind (5xx,
    /// connection, timeout) then costs the page no attempt and waits only for the host.
    pub(super) fn plan(
        &self,
        done: &mut Completion,
        now: Instant,
        unwell: bool,
    ) -> Option<(Request, Instant)> {
        let Terminal::Failed(kind) = done.terminal else {
            return None;
        };
        if !self.retryable(kind, done.status) {
            return None;
        }
        let hosts_fault = unwell
            && (matches!(kind, FailureKind::Timeout | FailureKind::Connection)
                || done.status.is_some_and(|s| (500..600).contains(&s)));
        if hosts_fault {
            let req = done.request.take()?;
            tracing::debug!(url = %req.url, reason = %kind, "host unwell: retried without spending an attempt");
            done.terminal = Terminal::Retrying;
            return Some((req, now));
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
    use crawler_core::Feedback;

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
            FailureKind::TooComplex,
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
        let (req, at) = p.plan(&mut c, now, false).expect("first retry");
        assert_eq!(req.retries, 1);
        assert!(req.dont_filter);
        assert_eq!(at, now + Duration::from_secs(7));
        assert!(matches!(c.terminal, Terminal::Retrying));

        let mut last = failed(FailureKind::Timeout, None, 2);
        assert!(p.plan(&mut last, now, false).is_none(), "retry_times is 2");
        assert!(matches!(
            last.terminal,
            Terminal::Failed(FailureKind::Timeout)
        ));
        let mut not_found = failed(FailureKind::Status, Some(404), 0);
        assert!(p.plan(&mut not_found, now, false).is_none());
    }

    /// A failure answered while its host is held for a run of failures is the host's: the
    /// page keeps its attempts (the host's hold makes it wait), so a storm of 500s does not
    /// use up the retries of the pages that met it. A page's own failure still counts.
    #[tokio::test(start_paused = true)]
    async fn a_failure_of_an_unwell_host_costs_the_page_no_attempt() {
        let p = policy();
        let now = Instant::now();
        for (kind, status) in [
            (FailureKind::Status, Some(500)),
            (FailureKind::Timeout, None),
            (FailureKind::Connection, None),
        ] {
            let mut out_of_attempts = failed(kind, status, 2);
            let (req, at) = p
                .plan(&mut out_of_attempts, now, true)
                .expect("retried while the host is unwell");
            assert_eq!(req.retries, 2, "{kind:?}: no attempt spent");
            assert_eq!(at, now, "{kind:?}: the host's hold is the wait");
        }
        // Not a failure of the host's kind: the page's own, as ever.
        let mut not_found = failed(FailureKind::Status, Some(404), 0);
        assert!(p.plan(&mut not_found, now, true).is_none());
        // A healthy host: attempts are spent.
        let mut last = failed(FailureKind::Status, Some(500), 2);
        assert!(p.plan(&mut last, now, false).is_none());
    }
}

/// docs/retries.md states the retry rules in tables a reader can check by eye; these tests
/// read the tables and check them against the code, so neither can change alone.
#[cfg(test)]
mod doc_tests {
    use std::collections::BTreeSet;

    use super::*;

    const DOC: &str = "docs/retries.md";
    const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/retries.md");

    fn doc() -> String {
        std::fs::read_to_string(PATH).unwrap_or_else(|e| panic!("{PATH}: {e}"))
    }

    /// Every failure kind (crawler-core's test keeps the list whole).
    fn all_kinds() -> Vec<FailureKind> {
        FailureKind::ALL.to_vec()
    }

    /// The body rows of the table whose header row starts with `header`, as trimmed cells.
    fn table(doc: &str, header: &str) -> Vec<Vec<String>> {
        let mut lines = doc.lines().skip_while(|l| !l.starts_with(header));
        assert!(lines.next().is_some(), "{DOC}: no table headed `{header}`");
        lines
            .skip(1) // the |---| line
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                l.trim()
                    .trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().to_owned())
                    .collect()
            })
            .collect()
    }

    /// The statuses an outcome cell names when it starts with one: `500, 502, 520-527, 530`,
    /// `429 with Retry-After`, `400, 401 and other 4xx`.
    fn statuses(outcome: &str) -> Option<Vec<u16>> {
        if !outcome.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        let mut codes = Vec::new();
        for token in outcome.split(',') {
            let head: String = token
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '-')
                .collect();
            if head.is_empty() {
                break;
            }
            let code = |s: &str| -> u16 {
                s.parse()
                    .unwrap_or_else(|_| panic!("{DOC}: bad status `{s}` in `{outcome}`"))
            };
            match head.split_once('-') {
                Some((a, b)) => codes.extend(code(a)..=code(b)),
                None => codes.push(code(&head)),
            }
        }
        Some(codes)
    }

    /// `Some(true)` for "yes…", `Some(false)` for "no…", `None` for anything else
    /// ("requeued", "as its status says").
    fn retried(cell: &str) -> Option<bool> {
        if cell.starts_with("yes") {
            Some(true)
        } else if cell.starts_with("no") {
            Some(false)
        } else {
            None
        }
    }

    /// The `failed:<reason>` names a terminal-state cell gives.
    fn failed_reasons(cell: &str) -> Vec<&str> {
        cell.split('`')
            .filter_map(|t| t.strip_prefix("failed:"))
            .collect()
    }

    #[test]
    fn the_per_reason_table_says_what_is_retried() {
        let doc = doc();
        let rows = table(&doc, "| Outcome |");
        assert!(rows.len() > 20, "{DOC}: the per-reason table is cut short");
        let policy = RetryPolicy::from(&Settings::default());
        let (mut yes, mut no) = (BTreeSet::new(), BTreeSet::new());
        let mut documented = BTreeSet::new();
        for row in &rows {
            let [outcome, retried_cell, _hold, terminal] = row.as_slice() else {
                panic!("{DOC}: a per-reason row without 4 cells: {row:?}");
            };
            let retried = retried(retried_cell);
            if let Some(codes) = statuses(outcome) {
                let retried = retried.unwrap_or_else(|| {
                    panic!("{DOC}: `{outcome}` says neither yes nor no: `{retried_cell}`")
                });
                for code in codes {
                    assert_eq!(
                        policy.retryable(FailureKind::Status, Some(code)),
                        retried,
                        "{DOC} says {code} is {}retried; the code disagrees",
                        if retried { "" } else { "not " }
                    );
                    // A status may have several rows (a redirect with and without its
                    // `Location`); they must agree, which the disjointness below checks.
                    if retried {
                        yes.insert(code);
                    } else {
                        no.insert(code);
                    }
                }
                continue;
            }
            for reason in failed_reasons(terminal) {
                let kind = all_kinds()
                    .into_iter()
                    .find(|k| k.as_str() == reason)
                    .unwrap_or_else(|| panic!("{DOC}: no failure kind is called `{reason}`"));
                documented.insert(reason);
                if kind == FailureKind::Status {
                    continue;
                }
                let retried = retried.unwrap_or_else(|| {
                    panic!("{DOC}: `{outcome}` says neither yes nor no: `{retried_cell}`")
                });
                assert_eq!(
                    policy.retryable(kind, None),
                    retried,
                    "{DOC} says `{outcome}` ({reason}) is {}retried; the code disagrees",
                    if retried { "" } else { "not " }
                );
            }
        }
        assert!(yes.is_disjoint(&no), "{yes:?} / {no:?}");
        let defaults: BTreeSet<u16> = Settings::default().retry_http_codes.into_iter().collect();
        assert_eq!(
            yes, defaults,
            "the statuses {DOC} marks retried are not the default retry_http_codes"
        );
        // 501 and 505-511 are not retried (issue 29), and the page says so.
        for code in std::iter::once(501).chain(505..=511) {
            assert!(
                no.contains(&code),
                "{DOC} does not say {code} is not retried"
            );
        }
        // Every way a request can fail on the wire or in the engine has its row (the spider's
        // own errors, `other` and the host skip, described in prose, excepted).
        for kind in all_kinds() {
            use FailureKind::*;
            // `robots_disallowed` is an errback's name for a refusal the stats count as
            // `disallowed`, never a `failed:` state.
            if matches!(kind, Status | Spider | Other | HostSkipped | Disallowed) {
                continue;
            }
            assert!(
                documented.contains(kind.as_str()),
                "{DOC} has no row ending `failed:{kind}`"
            );
        }
    }

    #[test]
    fn the_defaults_table_matches_the_settings() {
        let doc = doc();
        let rows = table(&doc, "| setting |");
        let defaults = Settings::default();
        let mut keys = BTreeSet::new();
        for row in &rows {
            let [key, value] = row.as_slice() else {
                panic!("{DOC}: a defaults row without 2 cells: {row:?}");
            };
            let key = key.trim_matches('`');
            let mut stated = Settings::default();
            stated
                .set(key, value)
                .unwrap_or_else(|e| panic!("{DOC}: `{key}` = `{value}`: {e}"));
            assert!(
                stated == defaults,
                "{DOC} says {key} defaults to {value}; the code's default differs"
            );
            keys.insert(key);
        }
        for key in [
            "retry_times",
            "retry_http_codes",
            "retry_backoff_base",
            "retry_backoff_cap",
            "max_retry_after",
            "robots_outage_max",
        ] {
            assert!(keys.contains(key), "{DOC}: the defaults table lacks {key}");
        }
    }

    #[test]
    fn the_prose_says_what_the_backoff_defaults_give() {
        // "up to 2 s, 4 s, 8 s … 60 s with the defaults": the first three retries' ceilings
        // and the cap.
        let doc = doc();
        let s = Settings::default();
        let ceiling = |n: u32| {
            s.retry_backoff_base
                .saturating_mul(1 << n)
                .min(s.retry_backoff_cap)
                .as_secs()
        };
        let stated = format!(
            "up to {} s, {} s, {} s … {} s with the defaults",
            ceiling(1),
            ceiling(2),
            ceiling(3),
            s.retry_backoff_cap.as_secs()
        );
        let flat = doc.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains(&stated), "{DOC} should say `{stated}`");
        // The first retry draws from a ceiling of base x 2, as the page says.
        let p = RetryPolicy::from(&s);
        assert!((0..200).all(|_| p.backoff(1) <= s.retry_backoff_base * 2));
    }
}
