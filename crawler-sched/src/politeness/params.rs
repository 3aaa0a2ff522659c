//! What a host's machine is configured with, in the machine's units (milliseconds).

use std::time::Duration;

use crawler_core::{Settings, ThrottleMode};
use serde::{Deserialize, Serialize};

use super::tuning::Tuning;

/// Milliseconds on the caller's clock (any origin; only differences matter).
pub type Millis = f64;

/// How the pacing rate moves; the rules around it are the same in every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Mode {
    /// Learn the server's limit from refusals, RateLimit headers and latency.
    Adaptive,
    /// Scrapy's AutoThrottle: the delay follows latency over a target concurrency.
    AutoThrottle,
    /// A fixed delay (optionally randomised) and a fixed concurrency.
    Fixed,
}

/// What a host's machine is configured with: the crawl's settings after any `[[hosts]]`
/// rule, in the machine's units.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// How the rate moves.
    pub mode: Mode,
    /// Rate a new host starts at, requests/s.
    pub start_rate: f64,
    /// Floor of the adaptive rate (never above a budget the server declared).
    pub min_rate: f64,
    /// Ceiling of every rate; a generous server never pushes past it.
    pub max_rate: f64,
    /// Sends allowed back to back after an idle spell (never under a delay floor).
    pub burst: u32,
    /// `download_delay`: the smallest gap between sends, and the fixed mode's delay (ms).
    pub min_gap_ms: f64,
    /// Fixed mode: draw each gap from 0.5x to 1.5x the delay (never under a floor).
    pub randomize: bool,
    /// Most requests in flight to the host (for a fleet: across all workers).
    pub concurrency: u32,
    /// Margin added to each hold (ms), proportional for short holds.
    pub hold_margin_ms: f64,
    /// Longest wait a host may ask for before it is skipped for the run (ms).
    pub max_wait_ms: f64,
    /// How long a challenge page holds the host (ms).
    pub soft_pause_ms: f64,
    /// Fraction of the rate kept after a challenge page.
    pub soft_resume: f64,
    /// Latency rise tolerated before easing off (ms).
    pub latency_tolerance_ms: f64,
    /// AutoThrottle's target concurrency.
    pub autothrottle_target: f64,
    /// AutoThrottle's longest delay (ms).
    pub autothrottle_max_delay_ms: f64,
    /// How long robots.txt may stay unavailable before the host is skipped (ms).
    pub robots_outage_max_ms: f64,
    /// Host names that share this host's limiter (its limiter group, itself included): a
    /// quota announced in RateLimit headers is the group's, so each name steers to its
    /// part of it. Set by the frontier, not by settings.
    #[serde(default = "one")]
    pub sharers: u32,
    /// The machine's constants.
    pub tuning: Tuning,
}

fn one() -> u32 {
    1
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

impl Params {
    /// The parameters `settings` give (apply [`Settings::for_host`] first for host rules).
    pub fn from_settings(s: &Settings) -> Self {
        Self {
            mode: match s.throttle {
                ThrottleMode::Adaptive => Mode::Adaptive,
                ThrottleMode::Autothrottle => Mode::AutoThrottle,
                ThrottleMode::Fixed => Mode::Fixed,
            },
            start_rate: s.start_rate,
            min_rate: s.min_rate,
            max_rate: s.max_rate,
            burst: s.burst.max(1),
            min_gap_ms: ms(s.download_delay),
            randomize: s.randomize_delay,
            concurrency: u32::try_from(s.concurrency_per_host.max(1)).unwrap_or(u32::MAX),
            hold_margin_ms: ms(s.hold_margin),
            max_wait_ms: ms(s.max_retry_after),
            soft_pause_ms: ms(s.soft_block_pause),
            soft_resume: s.soft_block_resume,
            latency_tolerance_ms: ms(s.latency_tolerance),
            autothrottle_target: s.autothrottle_target_concurrency,
            autothrottle_max_delay_ms: ms(s.autothrottle_max_delay),
            robots_outage_max_ms: ms(s.robots_outage_max),
            sharers: 1,
            tuning: Tuning::default(),
        }
    }
}
