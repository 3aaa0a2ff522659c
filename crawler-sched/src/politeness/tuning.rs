//! Every constant of the politeness machine, in one documented struct.
//!
//! Nothing here is a user setting: these are the machine's judgement, the same for a local
//! crawl and a fleet. They are values rather than `const`s so that tests and benchmarks can
//! state exactly which tuning they judge. `docs/politeness.md` explains each one in the
//! place where the behaviour uses it; none exists for one limiter or one benchmark case.

use serde::{Deserialize, Serialize};

/// The constants of the per-host politeness machine (see [`HostMachine`](super::HostMachine)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tuning {
    /// Before the first refusal, the rate doubles every this many milliseconds of clean
    /// responses (slow start, as TCP's). Not faster: a window that lets its whole count
    /// through after an idle spell hides the excess for a while, and the faster the rate
    /// doubles meanwhile, the further above the limit the first refusal finds it.
    pub discover_doubling_ms: f64,
    /// The rate settles at this fraction of what the server is known to take: the delivery
    /// rate after a refusal, the lowest refused pace while climbing. A limiter without a
    /// burst refuses a request that arrives a little early, and arrivals jitter.
    pub margin: f64,
    /// Multiplicative decrease: after a refusal episode the rate is at most this fraction of
    /// the pace that was refused, so repeated episodes shrink it geometrically whatever the
    /// delivery rate says.
    pub decrease: f64,
    /// After an episode the rate climbs back by this fraction of the ceiling per minute,
    /// until it is `margin` under the ceiling (additive increase).
    pub climb_per_min: f64,
    /// The first probe above the ceiling raises the rate by this fraction; each probe that
    /// holds doubles the next step, a refused one resets it.
    pub probe_step: f64,
    /// The shortest calm (no refusal, no hold) before a probe (ms). The payback rule makes
    /// it longer: a probe waits at least the mean hold divided by its step, the time in
    /// which its gain pays back the hold it risks.
    pub probe_calm_ms: f64,
    /// How long (ms) the lowest refused pace caps the climb after the refusal that set it;
    /// then it is forgotten, and only probes find the limit.
    pub ceiling_memory_ms: f64,
    /// First backoff hold (ms): refusals without Retry-After, a run of failures, robots.txt
    /// outages. It doubles per repeat, drawn with full jitter.
    pub backoff_base_ms: f64,
    /// Longest backoff hold (ms).
    pub backoff_cap_ms: f64,
    /// Consecutive failed answers (5xx, refused or broken connections, timeouts) that hold
    /// the host: five, so that a site with a fifth of its pages broken is not taken for a
    /// server in trouble (five in a row by chance: one page in 3,000), while a server that
    /// fails everything is held after five answers.
    pub failure_streak: u32,
    /// How long (ms) a host may keep failing or refusing at the minimum rate before it is
    /// skipped for the run as blocking or down.
    pub give_up_ms: f64,
    /// While the server stays slower than twice its normal latency, the rate falls by
    /// `decrease` this often (ms).
    pub slow_every_ms: f64,
    /// Weight of the newest sample in the fast latency average.
    pub latency_fast: f64,
    /// How long (ms) the latency baseline takes to follow a lasting rise: a server that
    /// stays slow gets less for about this long, then its new latency is its normal.
    pub latency_memory_ms: f64,
    /// Little's law headroom for the in-flight window: `ceil(headroom x rate x latency)`.
    pub concurrency_headroom: f64,
    /// Consecutive 403s after which the host is slowed (halved rate, one backoff hold).
    pub forbidden_slow_after: u32,
    /// Consecutive 403s after which the host is skipped for the run (a hard block).
    pub forbidden_skip_after: u32,
    /// How late (ms) a send may leave after its booked slot before the next slot moves
    /// with it: the ordinary delay between booking a slot and writing the request.
    pub late_send_ms: f64,
    /// Rate changes at or below this relative step with a routine trigger (growth) are
    /// not written to the audit log.
    pub audit_min_step: f64,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            discover_doubling_ms: 20_000.0,
            margin: 0.95,
            decrease: 0.8,
            climb_per_min: 0.1,
            probe_step: 0.05,
            probe_calm_ms: 60_000.0,
            ceiling_memory_ms: 7_200_000.0,
            backoff_base_ms: 5_000.0,
            backoff_cap_ms: 60_000.0,
            failure_streak: 5,
            give_up_ms: 600_000.0,
            slow_every_ms: 10_000.0,
            latency_fast: 0.1,
            latency_memory_ms: 1_800_000.0,
            concurrency_headroom: 1.5,
            forbidden_slow_after: 5,
            forbidden_skip_after: 20,
            late_send_ms: 2.0,
            audit_min_step: 0.05,
        }
    }
}
