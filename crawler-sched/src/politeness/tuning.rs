//! Every constant of the politeness machine, in one documented struct.
//!
//! Nothing here is a user setting: these are the machine's judgement, the same for a local
//! crawl and a fleet. They are values rather than `const`s so that tests and benchmarks can
//! state exactly which tuning they judge. `docs/politeness.md` explains each one in the
//! place where the behaviour uses it; none exists for one limiter or one benchmark case.

use serde::{Deserialize, Serialize};

/// The weight of the latest gap between two sends in the send gap (an exponential mean):
/// the pace the server saw, where a refusal's cut starts. A fifth smooths one late send
/// without hiding a pace that changed a few sends ago. The fleet's pacing script uses the
/// same value (crawler-store puts it into the script's text).
pub const SEND_GAP_WEIGHT: f64 = 0.2;

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
    /// Weight of the newest page in the fast latency average: about the last ten pages,
    /// enough to smooth one slow page, few enough to see a queue build within seconds.
    pub latency_fast: f64,
    /// The page latency baseline is the lowest the fast average has been over this window
    /// (ms), as BBR and TCP Vegas track the round trip: what a page costs the server when
    /// it is not queueing ours. Long enough to hold moments when the crawl sent less
    /// (slow start, the cuts of a latency episode); short enough that a server whose own
    /// level moved (a deploy, a cold cache) is judged against its new level within it.
    pub latency_window_ms: f64,
    /// Queueing the server may show before the crawl eases off, as a fraction of the
    /// baseline (on top of `latency_tolerance`): at 1, a page may take twice its unloaded
    /// time. Under it, a server with the usual jitter of its pages is not taken for a
    /// queueing one (the fast average of pages within ±50% of their mean stays within
    /// 1.3x of its lowest).
    pub latency_queue: f64,
    /// A latency episode cuts again only while the fast average keeps rising by more than
    /// this fraction since the last cut: a queue our pace is still growing. Flat latency
    /// after a cut is the server's level or a queue draining, which another cut does not
    /// help.
    pub latency_rising: f64,
    /// Queueing, as a fraction of the baseline, at which more requests in flight stop
    /// being added: while the fast average is within it, the in-flight cap a latency
    /// episode set grows by one every `slow_every_ms`; above it, it falls by one. A server
    /// whose workers are all busy answers our extra request after another's service time,
    /// so one request too many shows as a whole service time of queueing, far above it,
    /// and the usual jitter of pages (within ±50% of their mean) stays under it.
    pub latency_knee: f64,
    /// Consecutive 403s after which the host is slowed (its rate times `forbidden_cut`,
    /// one backoff hold).
    pub forbidden_slow_after: u32,
    /// What a 403 streak leaves of the rate: half, a step a server that blocks at a rate
    /// notices, where `decrease` (a refusal's) is for a limiter that says so.
    pub forbidden_cut: f64,
    /// RateLimit headers that stopped coming for this long (ms) return the host from
    /// steering to learning: a minute is several windows of every gateway the judge draws,
    /// and a header lost on one answer (a cached page, an error page) is not a policy gone.
    pub steering_quiet_ms: f64,
    /// After the in-flight cap moved down, it waits this many `slow_every_ms` before moving
    /// up again, so that most of the time is spent under the knee (a move up that queues is
    /// seen within one).
    pub cap_down_pause: f64,
    /// The mean refusal hold a probe's payback is judged by weighs the latest hold as one in
    /// this many (an exponential mean): a limiter that once asked for ten minutes and since
    /// asks for seconds is judged by its seconds after a handful of refusals.
    pub refusal_hold_memory: u32,
    /// Refused probes in a row double the wait before the next at most this many times
    /// (2^8 = 256 calms, over four hours at the shortest): a limit found again and again is
    /// asked about rarely, but still asked about (a limit can rise).
    pub probe_backoff_doublings: u32,
    /// The largest probe step (1.0: a probe at most doubles the rate): the step doubles after
    /// each probe that held, and a doubling is the most a limit unseen for a whole calm
    /// justifies.
    pub probe_step_max: f64,
    /// Growth is per elapsed time, counted up to this many send intervals between two
    /// answers: a longer gap is an idle queue, not time the pace was proven at.
    pub growth_gap_intervals: f64,
    /// The in-flight cap first engages at this share of the queue that opens a latency
    /// episode (half: a page already waits half its service time behind ours), at the
    /// number in flight then; the whole queue goes straight to Little's law.
    pub in_flight_engage: f64,
    /// Backoff holds are drawn from `(1 - backoff_jitter)` of the nominal length to all of
    /// it (equal jitter: hosts and workers backing off together do not come back in step,
    /// and no draw is so short it only buys another failure).
    pub backoff_jitter: f64,
    /// A hold's margin past its end is this share of the wait plus `hold_margin_floor_ms`,
    /// at most the `hold_margin` setting: proportional for short waits, so a one-second
    /// quota window does not lose a quarter of its budget to it.
    pub hold_margin_share: f64,
    /// The fixed part of a hold's margin (ms): transit and clock reading.
    pub hold_margin_floor_ms: f64,
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
            latency_window_ms: 300_000.0,
            latency_queue: 1.0,
            latency_rising: 0.1,
            latency_knee: 0.25,
            forbidden_slow_after: 5,
            forbidden_skip_after: 20,
            forbidden_cut: 0.5,
            steering_quiet_ms: 60_000.0,
            cap_down_pause: 3.0,
            refusal_hold_memory: 8,
            probe_backoff_doublings: 8,
            probe_step_max: 1.0,
            growth_gap_intervals: 2.0,
            in_flight_engage: 0.5,
            backoff_jitter: 0.5,
            hold_margin_share: 0.02,
            hold_margin_floor_ms: 5.0,
            late_send_ms: 2.0,
            audit_min_step: 0.05,
        }
    }
}
