//! The named scenarios: their table (name and one-line description) and how each is built.

use std::time::Duration;

use super::{Block, Dialect, Overload, RetryAfter, Robots, Scenario};
use crate::error::{Error, Kind};

/// Named scenarios and what they do, in the order the README lists them.
const NAMED: &[(&str, &str)] = &[
    ("open", "no limits; every page at full speed"),
    (
        "rate-limited-5rps",
        "token bucket per client, 5 r/s, burst 20; refusals are 429 with `Retry-After: 30`",
    ),
    (
        "rate-limited-5rps-http-date",
        "as rate-limited-5rps, Retry-After as an HTTP-date 30 s ahead",
    ),
    (
        "rate-limited-5rps-no-retry-after",
        "as rate-limited-5rps, 429 without Retry-After",
    ),
    (
        "rate-limited-5rps-malformed",
        "as rate-limited-5rps, `Retry-After: in a while`",
    ),
    (
        "rate-limited-5rps-503",
        "as rate-limited-5rps, refusals are 503 with `Retry-After: 30`",
    ),
    (
        "ratelimit-headers",
        "quota 50 requests per 10 s window per client; IETF `RateLimit-Limit/-Remaining/-Reset` and `RateLimit-Policy: 50;w=10` on every response; 429 past the quota",
    ),
    (
        "ratelimit-headers-ietf",
        "same quota, IETF trio only (no policy)",
    ),
    (
        "ratelimit-headers-structured",
        "same quota, `RateLimit-Policy: \"default\";q=50;w=10, \"hourly\";q=18000;w=3600` and `RateLimit: \"default\";r=R;t=T`",
    ),
    (
        "ratelimit-headers-x-unix",
        "same quota, `X-RateLimit-Limit/-Remaining`, `X-RateLimit-Reset` as Unix time, `X-RateLimit-Reset-After` fractional",
    ),
    (
        "ratelimit-headers-x-delta",
        "same quota, `X-RateLimit-Reset` as delta-seconds, `X-RateLimit-Reset-After` fractional",
    ),
    (
        "overload",
        "latency 10 ms + 20 ms per other request in flight; more than 16 in flight gets 503 with `Retry-After: 2`",
    ),
    (
        "soft-block",
        "more than 10 requests in any second: every answer is a 200 challenge page (\"Just a moment...\", \"unusual traffic\", cf-challenge) for 60 s",
    ),
    (
        "hard-block",
        "more than 10 requests in any second: 403 for 60 s",
    ),
    ("robots-crawl-delay", "robots.txt adds `Crawl-delay: 2`"),
    (
        "robots-agents",
        "robots.txt with per-agent groups (`*`, `crawler`, `BadBot`)",
    ),
    ("robots-404", "robots.txt answers 404 (no rules)"),
    ("robots-403", "robots.txt answers 403 (no rules, RFC 9309)"),
    (
        "robots-500",
        "robots.txt answers 500 (assume full disallow)",
    ),
    (
        "robots-503",
        "robots.txt answers 503 (assume full disallow)",
    ),
    (
        "robots-timeout",
        "robots.txt sends nothing for 30 s, then the standard rules",
    ),
    (
        "robots-oversized",
        "robots.txt of about 1 MiB; a `Disallow: /catalogue/` hides past 512 KiB",
    ),
    (
        "chaos",
        "2,000 books; about 20% of book pages are faults (deterministic per path and seed); the sitemap index also lists malformed sitemaps",
    ),
];

impl Scenario {
    /// A named scenario (see the crate docs); the error lists the valid names.
    pub fn by_name(name: &str) -> Result<Self, Error> {
        let five = || Self::rate_limited(5.0, 20).retry_after(RetryAfter::Seconds(30));
        let headers = |d: Dialect| Self::quota(50, Duration::from_secs(10)).ratelimit_headers(d);
        let block = || Block::new(10, Duration::from_secs(60));
        let scenario = match name {
            "open" => Self::open(),
            "rate-limited-5rps" => five(),
            "rate-limited-5rps-http-date" => five().retry_after(RetryAfter::HttpDate(30)),
            "rate-limited-5rps-no-retry-after" => five().retry_after(RetryAfter::Absent),
            "rate-limited-5rps-malformed" => five().retry_after(RetryAfter::Malformed),
            "rate-limited-5rps-503" => five().status(503),
            "ratelimit-headers" => headers(Dialect::IetfWithPolicy),
            "ratelimit-headers-ietf" => headers(Dialect::Ietf),
            "ratelimit-headers-structured" => headers(Dialect::Structured),
            "ratelimit-headers-x-unix" => headers(Dialect::XUnix),
            "ratelimit-headers-x-delta" => headers(Dialect::XDelta),
            "overload" => Self::open()
                .overload(Overload::new(
                    16,
                    Duration::from_millis(10),
                    Duration::from_millis(20),
                ))
                .retry_after(RetryAfter::Seconds(2)),
            "soft-block" => Self::open().soft_block(block()),
            "hard-block" => Self::open().hard_block(block()),
            "robots-crawl-delay" => Self::open().robots(Robots::CrawlDelay(2.0)),
            "robots-agents" => Self::open().robots(Robots::PerAgent("crawler".into())),
            "robots-404" => Self::open().robots(Robots::Status(404)),
            "robots-403" => Self::open().robots(Robots::Status(403)),
            "robots-500" => Self::open().robots(Robots::Status(500)),
            "robots-503" => Self::open().robots(Robots::Status(503)),
            "robots-timeout" => Self::open().robots(Robots::Timeout(Duration::from_secs(30))),
            "robots-oversized" => Self::open().robots(Robots::Oversized),
            "chaos" => Self::chaos(),
            _ => {
                return Err(Error::new(Kind::UnknownScenario {
                    name: name.into(),
                    valid: Self::names().join(", "),
                }));
            }
        };
        Ok(scenario.named(name))
    }

    /// The names [`Scenario::by_name`] accepts.
    pub fn names() -> Vec<&'static str> {
        NAMED.iter().map(|(n, _)| *n).collect()
    }

    /// Every named scenario with a one-line description.
    pub fn catalogue() -> &'static [(&'static str, &'static str)] {
        NAMED
    }
}
