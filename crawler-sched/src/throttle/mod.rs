//! The frontier's view of a host's pacing: the [`Throttle`] trait, and [`Politeness`], the
//! local implementation that runs the per-host [`HostMachine`] on tokio's clock.
//!
//! The fleet implements [`Throttle`] over the same machine with its state in Redis
//! (see the `shared` module); the throttle modes (`adaptive`, `autothrottle`, `fixed`)
//! are policies of that one machine, not separate implementations.
//!
//! This folder owns the translation between tokio's clock and the machine's milliseconds,
//! saving and restoring a host's state, and the audit log. It must not decide anything
//! about pacing itself: every rule lives in the machine ([`crate::politeness`]). The tests
//! are in `tests.rs`.

use std::collections::VecDeque;
use std::time::Duration;

use crawler_core::{Feedback, Settings};
use tokio::time::Instant;

pub use crate::politeness::Verdict;
use crate::politeness::{Change, HostMachine, HostState, Params, What};

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
    /// Whether the host's slot may be dropped now because a fresh slot would behave the same
    /// or more carefully (nothing running, nothing learned). `false` keeps it.
    fn forgettable(&self, _now: Instant) -> bool {
        false
    }
    /// The most recent politeness changes of the host (rate, holds, estimate, skip), each
    /// with its trigger, oldest first.
    fn audit(&self) -> Vec<AuditRecord> {
        Vec::new()
    }
    /// The audit records made after the first `seen` (those still kept), and how many the
    /// host has made in all: a recorder passes back the count it got to get only what is
    /// new.
    fn audit_since(&self, _seen: u64) -> (u64, Vec<AuditRecord>) {
        (0, Vec::new())
    }
    /// When the host's latest hold ends (an instant in the past once it is over), for the
    /// frontier to share with the other host names behind the same limiter. `None` when the
    /// throttle does not take part in limiter groups.
    fn held_until(&self) -> Option<Instant> {
        None
    }
    /// Another host name behind the same limiter is held until `until`: hold this one too.
    /// `refusal` says a 429 or 503 placed that hold (the limiter refused the group's pace).
    /// A hold that ends no later than this host's own changes nothing.
    fn share_hold(&mut self, _until: Instant, _now: Instant, _refusal: bool) {}
    /// `n` host names are behind this host's limiter now (its limiter group, itself
    /// included): a quota its RateLimit headers announce is theirs together.
    fn set_sharers(&mut self, _n: usize) {}
    /// Whether the host is held for a run of failures (its failures are its own, not its
    /// pages': see [`crawler_core::Scheduler::host_unwell`]).
    fn unwell(&self) -> bool {
        false
    }
    /// The machine that paces this host, for a limiter group paced as one
    /// ([`LimiterGroups::pool`](crate::politeness::LimiterGroups::pool)). `None`: the
    /// frontier does not pool this throttle's host (a fleet's, whose pacing lives in Redis,
    /// where [`SharedThrottle`](crate::SharedThrottle) pools its group itself).
    fn pacing_machine(&self) -> Option<&HostMachine> {
        None
    }
    /// Pace the host's whole limiter group from now on: `concurrency` and `max_rate` are
    /// the sums over its live names, and the machines of `others` (names that were sending
    /// when a refusal reached the group) add their pace to this one's (see
    /// [`HostMachine::absorb`]).
    fn pool(
        &mut self,
        _concurrency: usize,
        _max_rate: f64,
        _others: &[HostMachine],
        _now: Instant,
    ) {
    }
    /// `now` on the clock of [`Throttle::pacing_machine`] (milliseconds).
    fn machine_clock(&self, _now: Instant) -> f64 {
        0.0
    }
    /// Take `machine` (on a clock reading `at` ms `now`) as this host's from now on, under
    /// this host's own parameters: a name left its pooled limiter group with its part of
    /// the pool's pace, or the rest of the pool goes on here. With `pool`, the machine
    /// paces the rest of the pool (its in-flight cap and `max_rate` sums). See
    /// [`HostMachine::adopted`].
    fn adopt(
        &mut self,
        _machine: &HostMachine,
        _at: f64,
        _now: Instant,
        _pool: Option<(usize, f64)>,
    ) {
    }
}

/// One politeness change of a host, for logs, reports and metrics.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AuditRecord {
    /// The host key.
    pub host: String,
    /// Wall-clock time of the change, milliseconds since the Unix epoch.
    pub unix_ms: i64,
    /// What caused it (`429`, `Retry-After`, `RateLimit`, `latency`, `crawl-delay`, …).
    pub trigger: String,
    /// What changed.
    pub what: What,
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Build the throttle `settings` ask for (after any `[[hosts]]` rule), for a new host.
pub fn throttle_for(settings: &Settings, host: &str, now: Instant) -> Box<dyn Throttle> {
    Box::new(Politeness::new(host, Params::from_settings(settings), now))
}

/// How many audit records a host keeps in memory (the log has them all).
const AUDIT_KEPT: usize = 256;

/// A host's latest audit records (at most 256) and how many it made in all.
#[derive(Debug, Default)]
pub struct AuditLog {
    kept: VecDeque<AuditRecord>,
    total: u64,
}

impl AuditLog {
    /// The records kept, oldest first.
    pub fn records(&self) -> Vec<AuditRecord> {
        self.kept.iter().cloned().collect()
    }

    /// The records made after the first `seen` that are still kept, and the total made.
    pub fn since(&self, seen: u64) -> (u64, Vec<AuditRecord>) {
        let new = usize::try_from(self.total.saturating_sub(seen)).unwrap_or(usize::MAX);
        let skip = self.kept.len().saturating_sub(new);
        (self.total, self.kept.iter().skip(skip).cloned().collect())
    }

    fn push(&mut self, record: AuditRecord) {
        if self.kept.len() >= AUDIT_KEPT {
            self.kept.pop_front();
        }
        self.kept.push_back(record);
        self.total += 1;
    }
}

/// A host's [`HostMachine`] on tokio's clock: milliseconds since the slot was made.
pub struct Politeness {
    host: String,
    machine: HostMachine,
    origin: Instant,
    audit: AuditLog,
}

impl Politeness {
    /// The throttle of `host` with `params`, starting at `now`.
    pub fn new(host: &str, params: Params, now: Instant) -> Self {
        Self {
            host: host.to_owned(),
            machine: HostMachine::new(params, 0.0),
            origin: now,
            audit: AuditLog::default(),
        }
    }

    /// The machine (for tests and reports).
    pub fn machine(&self) -> &HostMachine {
        &self.machine
    }

    fn at(&self, now: Instant) -> f64 {
        if now >= self.origin {
            (now - self.origin).as_secs_f64() * 1_000.0
        } else {
            -((self.origin - now).as_secs_f64() * 1_000.0)
        }
    }

    fn instant(&self, ms: f64) -> Instant {
        if ms >= 0.0 {
            self.origin + Duration::from_secs_f64(ms / 1_000.0)
        } else {
            self.origin
                .checked_sub(Duration::from_secs_f64(-ms / 1_000.0))
                .unwrap_or(self.origin)
        }
    }

    /// Log the machine's changes with their triggers and keep the latest.
    fn drain_audit(&mut self) {
        let changes = self.machine.take_audit();
        log_changes(&self.host, changes, &mut self.audit);
    }
}

/// Log each change with its trigger, and keep the latest `AUDIT_KEPT` in `kept`.
pub fn log_changes(host: &str, changes: Vec<Change>, kept: &mut AuditLog) {
    for Change { trigger, what, .. } in changes {
        match &what {
            What::Rate { old, new } => tracing::info!(
                host = %host, trigger = trigger.as_str(),
                old = format!("{old:.3}"), new = format!("{new:.3}"), "rate changed"
            ),
            What::Hold { wait_ms, .. } => tracing::info!(
                host = %host, trigger = trigger.as_str(),
                wait = ?Duration::from_secs_f64(wait_ms / 1_000.0), "host held"
            ),
            What::CrawlDelay { floor_ms } => tracing::info!(
                host = %host, trigger = trigger.as_str(),
                floor = ?Duration::from_secs_f64(floor_ms / 1_000.0), "host delay floor raised"
            ),
            What::Estimate { rate } => tracing::info!(
                host = %host, trigger = trigger.as_str(),
                estimate = format!("{rate:.3}"), "server limit estimated"
            ),
            What::Skip { reason } => tracing::warn!(
                host = %host, trigger = trigger.as_str(), "skipping host for this run: {reason}"
            ),
        }
        kept.push(AuditRecord {
            host: host.to_owned(),
            unix_ms: unix_ms(),
            trigger: trigger.as_str().to_owned(),
            what,
        });
    }
}

impl Throttle for Politeness {
    fn concurrency(&self) -> usize {
        self.machine.concurrency() as usize
    }

    fn ready_at(&self) -> Instant {
        self.instant(self.machine.ready_at())
    }

    fn on_send(&mut self, now: Instant) {
        let at = self.at(now);
        self.machine.on_send(at);
    }

    fn on_feedback(&mut self, feedback: &Feedback, now: Instant) -> Verdict {
        let at = self.at(now);
        // The downloader's own reading of when the request left: `now - latency` would be
        // late by however long the engine took to read the answer, and a send dated late
        // pushes the host's next slot back (see `HostMachine::on_feedback_sent`).
        let verdict = match feedback.sent_at {
            Some(sent) => self.machine.on_feedback_sent(feedback, self.at(sent), at),
            None => self.machine.on_feedback(feedback, at),
        };
        self.drain_audit();
        verdict
    }

    fn rate(&self) -> f64 {
        self.machine.rate()
    }

    fn holds(&self) -> (u64, Duration) {
        let (n, ms) = self.machine.holds();
        (n, Duration::from_secs_f64(ms.max(0.0) / 1_000.0))
    }

    /// The whole machine state with its clock moved so that `now` is 0, and the wall
    /// time, so a restore can count the time the process was down against holds and
    /// calm periods alike.
    fn save(&self, now: Instant) -> serde_json::Value {
        let mut m = self.machine.clone();
        m.shift(-self.at(now));
        let mut state = m.state().clone();
        // Requests in flight at a crash are lost or come back as new sends.
        state.in_flight = 0;
        serde_json::json!({ "machine": state, "saved_at_ms": unix_ms() })
    }

    fn restore(&mut self, saved: &serde_json::Value, now: Instant) {
        let Some(state) = saved
            .get("machine")
            .and_then(|m| serde_json::from_value::<HostState>(m.clone()).ok())
        else {
            return;
        };
        let saved_at = saved
            .get("saved_at_ms")
            .and_then(serde_json::Value::as_i64)
            .unwrap_or_else(unix_ms);
        let down = (unix_ms() - saved_at).max(0) as f64;
        let mut m = HostMachine::with_state(self.machine.params().clone(), state);
        // Saved times are relative to the save; the process was down for `down` ms.
        m.shift(self.at(now) - down);
        self.machine = m;
        tracing::info!(host = %self.host, "politeness state from the last run restored");
    }

    fn forgettable(&self, now: Instant) -> bool {
        self.machine.is_pristine(self.at(now))
    }

    fn audit(&self) -> Vec<AuditRecord> {
        self.audit.records()
    }

    fn audit_since(&self, seen: u64) -> (u64, Vec<AuditRecord>) {
        self.audit.since(seen)
    }

    fn unwell(&self) -> bool {
        self.machine.unwell()
    }

    fn held_until(&self) -> Option<Instant> {
        Some(self.instant(self.machine.state().hold_until))
    }

    fn set_sharers(&mut self, n: usize) {
        self.machine
            .set_sharers(u32::try_from(n).unwrap_or(u32::MAX));
    }

    fn pacing_machine(&self) -> Option<&HostMachine> {
        Some(&self.machine)
    }

    fn pool(&mut self, concurrency: usize, max_rate: f64, others: &[HostMachine], now: Instant) {
        self.machine
            .set_pool(u32::try_from(concurrency).unwrap_or(u32::MAX), max_rate);
        let at = self.at(now);
        self.machine.absorb(others, at);
        self.drain_audit();
    }

    fn machine_clock(&self, now: Instant) -> f64 {
        self.at(now)
    }

    fn adopt(&mut self, machine: &HostMachine, at: f64, now: Instant, pool: Option<(usize, f64)>) {
        let pool = pool.map(|(c, r)| (u32::try_from(c).unwrap_or(u32::MAX), r));
        self.machine = HostMachine::adopted(
            self.machine.params().clone(),
            machine,
            self.at(now) - at,
            pool,
        );
        self.drain_audit();
    }

    fn share_hold(&mut self, until: Instant, now: Instant, refusal: bool) {
        // Each slot has its own clock origin: a hold passed from one slot to another goes
        // through an `Instant` and may come back a rounding off; a sub-millisecond move is
        // the same hold, not a new one.
        let until = self.at(until);
        if until <= self.machine.state().hold_until + 0.5 {
            return;
        }
        if self.machine.share_hold(until, self.at(now), refusal) {
            self.drain_audit();
        }
    }
}

#[cfg(test)]
mod tests;
