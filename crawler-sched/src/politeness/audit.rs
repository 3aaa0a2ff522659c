//! The machine's vocabulary of decisions: where the search stands, why something changed,
//! what changed, and what the slot should do.

use serde::{Deserialize, Serialize};

use super::params::Millis;

/// Where the adaptive rate stands in its search for the server's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    /// No refusal yet: the rate grows exponentially.
    Discover,
    /// After a refusal: climbing back towards a margin under the lowest refused pace.
    #[serde(alias = "Recover")]
    Climb,
    /// Settled under the ceiling (or without one); probes after a calm that pays back.
    Settled,
    /// A probe above the last rate that held is running.
    Probe,
    /// RateLimit headers steer the rate.
    Steered,
}

/// Why the machine changed something: every audit record names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    /// Clean responses: discovery growth.
    Discover,
    /// A 429 response.
    Status429,
    /// A 503 response.
    Status503,
    /// A request timed out.
    Timeout,
    /// A Retry-After header.
    RetryAfter,
    /// RateLimit headers steered the rate.
    RateLimit,
    /// RateLimit headers said the quota is spent.
    RateLimitExhausted,
    /// Latency rose above its baseline.
    Latency,
    /// A latency episode's cut did not shorten the answers: the server's own level moved,
    /// and the rate the episode took away came back.
    LatencyLevel,
    /// A challenge (soft block) page.
    Challenge,
    /// Consecutive 403 responses.
    Forbidden,
    /// robots.txt could not be fetched.
    RobotsUnavailable,
    /// robots.txt Crawl-delay.
    CrawlDelay,
    /// A calm period passed: probe above the settled rate.
    Probe,
    /// State restored from an earlier run.
    Restored,
    /// AutoThrottle's latency rule.
    AutoThrottle,
    /// A run of failed answers (5xx, refused or broken connections, timeouts).
    Failures,
    /// A hold placed on another host name behind the same limiter.
    LimiterGroup,
    /// RateLimit headers stopped coming: back to learning.
    SteeringLost,
}

impl Trigger {
    /// The stable name used in logs and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Discover => "discover",
            Self::Status429 => "429",
            Self::Status503 => "503",
            Self::Timeout => "timeout",
            Self::RetryAfter => "Retry-After",
            Self::RateLimit => "RateLimit",
            Self::RateLimitExhausted => "RateLimit exhausted",
            Self::Latency => "latency",
            Self::LatencyLevel => "latency level",
            Self::Challenge => "challenge page",
            Self::Forbidden => "403 streak",
            Self::RobotsUnavailable => "robots.txt unavailable",
            Self::CrawlDelay => "crawl-delay",
            Self::Probe => "probe",
            Self::Restored => "restored",
            Self::AutoThrottle => "autothrottle",
            Self::Failures => "failures",
            Self::LimiterGroup => "limiter group",
            Self::SteeringLost => "RateLimit headers gone",
        }
    }
}

/// What changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum What {
    /// The pacing rate moved (requests/s).
    Rate {
        /// Before.
        old: f64,
        /// After.
        new: f64,
    },
    /// The host is held until `until` (a wait of `wait_ms` including the margin).
    Hold {
        /// End of the hold.
        until: Millis,
        /// Length of the hold.
        wait_ms: f64,
    },
    /// The delay floor from robots.txt rose (ms).
    CrawlDelay {
        /// The new floor.
        floor_ms: f64,
    },
    /// The learned estimate of the server's sustainable rate (requests/s).
    Estimate {
        /// The estimate.
        rate: f64,
    },
    /// The host is skipped for the run.
    Skip {
        /// Why.
        reason: String,
    },
}

/// One audit record: at `at`, `what` changed because of `trigger`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// When (the machine's clock).
    pub at: Millis,
    /// The cause.
    pub trigger: Trigger,
    /// The change.
    pub what: What,
}

/// What the slot should do after a feedback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Keep crawling the host.
    Continue,
    /// Stop crawling the host for this run, for the given reason.
    Skip(String),
}
