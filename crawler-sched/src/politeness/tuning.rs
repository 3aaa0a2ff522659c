//! Every constant of the politeness machine, in one documented struct.
//!
//! Nothing here is a user setting: these are the machine's judgement, the same for a local
//! crawl and a fleet. They are values rather than `const`s so that tests and the lab's
//! benchmarks can state exactly which tuning they judge, and so that the fleet can carry
//! them with the state it commits.

use serde::{Deserialize, Serialize};

/// The constants of the per-host politeness machine (see [`HostMachine`](super::HostMachine)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Tuning {
    /// Before the first refusal, the rate doubles every this many milliseconds of clean
    /// responses (exponential discovery, like TCP's slow start). Faster finds the limit
    /// sooner; slower overshoots a token bucket's burst by less.
    pub discover_doubling_ms: f64,
    /// Fraction of the estimated server limit the rate settles at. A limiter with no burst
    /// refuses a request that arrives a millisecond early, and arrivals jitter, so exactly
    /// 100% is never safe; 5% under covers tens of milliseconds of jitter at 5 r/s.
    pub slack: f64,
    /// Fraction of a fitted bucket's rate the pace settles at when the fit says the bucket
    /// has a burst of at least one request: the burst absorbs arrival jitter, so only the
    /// fit's own error needs a margin.
    pub bursty_slack: f64,
    /// Window (ms) of the recent accepted rate, the estimate when the fit cannot tell.
    pub recent_window_ms: f64,
    /// The recent accepted rate includes any burst the server granted, so a guess from it
    /// keeps this fraction.
    pub guess: f64,
    /// Arrival jitter (ms) the token-bucket fit tolerates between a send and its arrival.
    pub fit_jitter_ms: f64,
    /// A fit is trusted when its top run spans at most this ratio.
    pub narrow_fit: f64,
    /// ... and when it is not below this fraction of the recent accepted rate.
    pub fit_floor: f64,
    /// Without a trusted estimate, the rate climbs towards this fraction of the lowest
    /// refused rate.
    pub ceiling_margin: f64,
    /// While climbing, this share of the distance to the target is closed per minute.
    pub climb_share_per_min: f64,
    /// Climb speed without a trusted estimate: at least this fraction of the estimate per
    /// minute.
    pub climb_per_min: f64,
    /// After a refusal, climbing back is linear: this fraction of the estimated limit per
    /// minute of calm, until the rate is back at `slack` of the estimate.
    pub recover_per_min: f64,
    /// Calm (no refusal, no easing) needed before probing above a settled estimate, in
    /// milliseconds. A refusal costs a whole hold, so probing is rare: at most one failed
    /// probe per this period, and never sooner than the mean hold divided by
    /// `probe_step` (the calm in which a probe's step pays back the hold it risks: 1,000 s
    /// under a 30 s Retry-After). Fast probes (`fast_probe_calm_ms`) are not weighed so:
    /// they come only while the estimate may be far low.
    pub probe_calm_ms: f64,
    /// Each probe raises the rate by this fraction.
    pub probe_step: f64,
    /// A probe goes no higher than this fraction of the lowest refused rate (the ceiling),
    /// which every probe that holds raises: a refused rate is not tried again until the
    /// rates under it have held.
    pub probe_under_ceiling: f64,
    /// A token-bucket fit whose consistent refill rates span at most this ratio pins the
    /// server's rate: probes go no higher than its fastest rate. Two long episodes of a
    /// real bucket pin its rate to a percent or less, while a window limiter read as a
    /// bucket leaves a wider range (or, after a few episodes, no bucket at all); probing
    /// above a pinned rate would only drain the burst and cost a hold.
    pub pinned_fit: f64,
    /// Only a refusal episode at least this long (ms from the end of the last hold) pins a
    /// rate: a real bucket's pinning episode is the probe that drains its burst slowly,
    /// minutes long, while short episodes behind a window limiter can fit a narrow bucket
    /// under the window's rate.
    pub pin_episode_ms: f64,
    /// A narrow fit that explains at least this many refusal episodes of the log is a real
    /// bucket's: a window limiter seen through the bucket model leaves a narrow fit after
    /// two short episodes (under the window's rate), but rarely one that explains a third
    /// (on virtual time, one draw of a fixed window at 1 r/s in 60 runs). Its
    /// rate is trusted, and the room its burst left between it and the lowest refused rate
    /// (a burst drained at a high rate) does not call for fast probes, which would only
    /// drain the burst again and cost a hold (nginx burst 20 at 3 r/s with Retry-After:
    /// the fast probe refused at 292 s, its hold in the measured half, 89.7% in the lab).
    pub verified_episodes: usize,
    /// When the lowest refused rate is more than this fraction above the estimate, the
    /// estimate may be low (a window limiter seen as a slow bucket), and probes come sooner.
    pub fast_probe_room: f64,
    /// Calm before a probe when there is room (ms).
    pub fast_probe_calm_ms: f64,
    /// Step of a probe when there is room.
    pub fast_probe_step: f64,
    /// Multiplicative decrease when a refusal arrives and nothing better is known
    /// (the fit has too little data and the accepted rate is unreadable).
    pub cut: f64,
    /// Gentler decrease when latency climbs well above its baseline.
    pub ease: f64,
    /// Weight of the newest sample in the fast latency average.
    pub latency_fast: f64,
    /// Weight of the newest sample in the slow (baseline) latency average.
    pub latency_slow: f64,
    /// Little's law headroom for the in-flight window: `ceil(headroom x rate x latency)`.
    pub concurrency_headroom: f64,
    /// First backoff hold for a refusal without Retry-After or a robots.txt outage (ms).
    pub backoff_base_ms: f64,
    /// Longest backoff hold (ms).
    pub backoff_cap_ms: f64,
    /// A backoff hold is drawn from `[1 - jitter, 1]` of its nominal length, so that many
    /// hosts or workers backing off together do not come back in step.
    pub backoff_jitter: f64,
    /// Consecutive 403s after which the host is slowed (halved rate, one backoff hold).
    pub forbidden_slow_after: u32,
    /// Consecutive 403s after which the host is skipped for the run (a hard block).
    pub forbidden_skip_after: u32,
    /// How late (ms) a send may leave after its booked slot before the next slot moves
    /// with it: the ordinary delay between booking a slot and writing the request. A send
    /// later than this (a process starved of CPU) pushes the next one back, so that the
    /// gap between the two as the server sees them is not shortened.
    pub late_send_ms: f64,
    /// Sends remembered for the limit estimate (bounded memory per host).
    pub log_capacity: usize,
    /// Sends older than this are forgotten by the limit estimate (ms).
    pub log_horizon_ms: f64,
    /// Rates at or below this relative step are routine and not written to the audit
    /// log unless their trigger is not a plain success.
    pub audit_min_step: f64,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            discover_doubling_ms: 10_000.0,
            slack: 0.95,
            bursty_slack: 0.99,
            recent_window_ms: 10_000.0,
            guess: 0.9,
            fit_jitter_ms: 5.0,
            narrow_fit: 1.15,
            fit_floor: 0.5,
            ceiling_margin: 0.97,
            climb_per_min: 0.05,
            climb_share_per_min: 2.0,
            recover_per_min: 0.10,
            probe_calm_ms: 300_000.0,
            probe_step: 0.03,
            probe_under_ceiling: 0.99,
            pinned_fit: 1.01,
            pin_episode_ms: 60_000.0,
            verified_episodes: 3,
            fast_probe_room: 0.08,
            fast_probe_calm_ms: 60_000.0,
            fast_probe_step: 0.05,
            cut: 0.5,
            ease: 0.85,
            latency_fast: 0.3,
            latency_slow: 0.05,
            concurrency_headroom: 1.5,
            backoff_base_ms: 5_000.0,
            backoff_cap_ms: 60_000.0,
            backoff_jitter: 0.25,
            forbidden_slow_after: 5,
            forbidden_skip_after: 20,
            late_send_ms: 2.0,
            log_capacity: 4096,
            log_horizon_ms: 600_000.0,
            audit_min_step: 0.05,
        }
    }
}
