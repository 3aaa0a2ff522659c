//! robots.txt (RFC 9309): fetched once per origin, cached, and consulted before every request.
//!
//! How a fetch of `/robots.txt` is read:
//!
//! | answer | verdict | trusted for |
//! |---|---|---|
//! | 2xx | the rules of the group matching our product token (else `*`) | the TTL (24 h) |
//! | 3xx | followed, up to 5 hops, across hosts; the rules apply to the first origin | — |
//! | more than 5 redirects, a loop, or a redirect to a non-http URL | unavailable: allow all (RFC 9309 §2.3.1.2) | the TTL |
//! | 4xx other than 429 | unavailable: allow all | the TTL |
//! | 429, 5xx, network error, timeout | unreachable: disallow all **for now** | the retry interval (60 s), then fetched again |
//!
//! The crawl's downloader reads "disallow for now" as *wait*, never as a refusal: the page
//! goes back to its host's queue, the host is held (by the robots.txt response's Retry-After,
//! else a growing backoff) and robots.txt is asked again when the hold ends; only an outage
//! longer than `robots_outage_max` skips the host, and a host found unreachable (connection
//! refused, no route) on 3 tries in a row has its pages end as `host_skipped`. The cache keeps at most
//! [`ROBOTS_MAX_ORIGINS`] origins, dropping the least recently used.
//!
//! Bodies over [`ROBOTS_MAX_BYTES`] are cut at the last line break before the limit, so a rule
//! is never read half-way (`Disallow: /private` cut to `Disallow: /p` would forbid too much).
//!
//! The folder: this file holds the verdict types ([`RobotsRules`], [`RobotsStatus`]) and the
//! product token; `origins.rs` the bounded set of cached origins, `cache.rs` the
//! [`RobotsCache`] that fetches once per origin and shares the fetch, `fetch.rs` the
//! retrieval (redirects, size cap) and its reading under RFC 9309, `parse.rs` the one
//! reading of a file (the group for our agent, its rules), `matching.rs` the verdict on a
//! URL and the rule that decided it, `report.rs` the one-off [`fetch_robots`] report.
//! `parse.rs` and `matching.rs` do no I/O. Nothing here paces requests: robots.txt goes out
//! as a send of the host's slot, which the downloader and the scheduler own.

mod cache;
mod fetch;
mod matching;
mod origins;
mod parse;
mod report;

use std::time::Duration;

use crawler_core::Url;
use tokio::time::Instant;

use parse::RobotsTxt;

pub use cache::{Check, RobotsCache};
pub use report::{RobotsReport, fetch_robots, robots_client};

/// robots.txt files larger than this are cut here (Google's limit is 500 KiB; RFC 9309 asks
/// for at least 500 KiB to be parsed).
pub const ROBOTS_MAX_BYTES: usize = 500 * 1024;
/// Redirects followed when fetching robots.txt (RFC 9309 asks for at least five).
pub const ROBOTS_MAX_REDIRECTS: usize = 5;
/// Origins whose verdicts a [`RobotsCache`] keeps; the least recently used goes first. At
/// the body cap each verdict is small (parsed rules), so this bounds the cache's memory on
/// crawls that touch millions of hosts.
pub const ROBOTS_MAX_ORIGINS: usize = 10_000;

/// How a [`RobotsCache`] fetches and how long it trusts what it fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RobotsOptions {
    /// How long a fetched (or unavailable) robots.txt is trusted. Default 24 h.
    pub ttl: Duration,
    /// How soon an unreachable robots.txt (429, 5xx, network error, timeout) is fetched again;
    /// until then the origin is treated as fully disallowed, as RFC 9309 asks. Default 60 s.
    pub retry_unreachable: Duration,
    /// Total time for one robots.txt fetch, redirects and body included. Default 30 s.
    pub fetch_timeout: Duration,
}

impl Default for RobotsOptions {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(24 * 3600),
            retry_unreachable: Duration::from_secs(60),
            fetch_timeout: Duration::from_secs(30),
        }
    }
}

/// What fetching an origin's robots.txt produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RobotsStatus {
    /// A 2xx body was read and its rules apply.
    Fetched {
        /// The final HTTP status.
        status: u16,
    },
    /// No usable robots.txt (4xx, too many redirects, a redirect that cannot be followed):
    /// everything is allowed.
    Unavailable {
        /// The final HTTP status, if a response arrived.
        status: Option<u16>,
        /// Why.
        reason: String,
    },
    /// The server could not be asked (429, 5xx, network error, timeout): everything is
    /// disallowed until the retry interval passes.
    Unreachable {
        /// The HTTP status, if a response arrived.
        status: Option<u16>,
        /// Why.
        reason: String,
    },
}

/// The verdict for one origin.
#[derive(Debug)]
pub struct RobotsRules {
    access: Access,
    status: RobotsStatus,
    expires: Instant,
    /// The Retry-After of an unreachable robots.txt's response, if it sent one.
    retry_after: Option<Duration>,
    /// The file was fetched but is not text (binary data): read as having no rules.
    not_text: bool,
}

/// What an origin lets us fetch: everything (no usable robots.txt), nothing (robots.txt
/// unreachable for now), or what its parsed file says. (Not core's crawl `Rules`, nor the
/// public [`RobotsRules`], which wraps this with the fetch's status and expiry.)
#[derive(Debug)]
enum Access {
    AllowAll,
    DisallowAll,
    Parsed(Box<RobotsTxt>),
}

impl RobotsRules {
    /// Whether the fetched file was not text (binary data), and so gave no rules.
    pub fn not_text(&self) -> bool {
        self.not_text
    }

    /// Whether `url` may be fetched.
    pub fn allowed(&self, url: &Url) -> bool {
        match &self.access {
            Access::AllowAll => true,
            Access::DisallowAll => false,
            Access::Parsed(r) => r.decide(url).allowed,
        }
    }

    /// The rule that decides `url`, as written (`Disallow: /private/`), when the file has one
    /// that matches: what a refusal message names.
    pub fn matched_rule(&self, url: &Url) -> Option<String> {
        match &self.access {
            Access::Parsed(r) => r.decide(url).rule.map(str::to_owned),
            _ => None,
        }
    }

    /// Whether `url` may be fetched, and what decided: the rule as written
    /// (`Disallow: /private/`), or why no rule did (no rule matches, no usable robots.txt,
    /// robots.txt unreachable). For the debug line per robots verdict.
    pub fn explain(&self, url: &Url) -> (bool, String) {
        match &self.access {
            Access::AllowAll => (true, format!("no usable robots.txt{}", self.why())),
            Access::DisallowAll => (false, format!("robots.txt unreachable{}", self.why())),
            Access::Parsed(r) => {
                let d = r.decide(url);
                let why = match d.rule {
                    Some(rule) => rule.to_owned(),
                    None if d.allowed => "no rule matches".to_owned(),
                    None => "an implied rule".to_owned(),
                };
                (d.allowed, why)
            }
        }
    }

    /// The fetch's reason, as `: REASON`, when it had one.
    fn why(&self) -> String {
        match &self.status {
            RobotsStatus::Unavailable { reason, .. } | RobotsStatus::Unreachable { reason, .. }
                if !reason.is_empty() =>
            {
                format!(": {reason}")
            }
            _ => String::new(),
        }
    }

    /// The Crawl-delay of the matching group, if any.
    pub fn crawl_delay(&self) -> Option<Duration> {
        match &self.access {
            Access::Parsed(r) => r
                .delay
                .filter(|d| d.is_finite() && *d > 0.0)
                .map(|d| Duration::from_secs_f32(d.min(86_400.0))),
            _ => None,
        }
    }

    /// Sitemap URLs listed in the file, absolute: a relative `Sitemap:` line is resolved
    /// against the robots.txt URL, and one that is not a URL is left out.
    pub fn sitemaps(&self) -> &[String] {
        match &self.access {
            Access::Parsed(r) => &r.sitemaps,
            _ => &[],
        }
    }

    /// The listed sitemaps that are absolute http(s) URLs.
    pub fn sitemap_urls(&self) -> Vec<Url> {
        self.sitemaps()
            .iter()
            .filter_map(|s| Url::parse(s.trim()).ok())
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .collect()
    }

    /// How the fetch went.
    pub fn status(&self) -> &RobotsStatus {
        &self.status
    }

    /// When this verdict stops being trusted and robots.txt is fetched again.
    pub fn expires(&self) -> Instant {
        self.expires
    }

    /// Whether robots.txt could not be read for now (429, 5xx, network error, timeout).
    pub fn is_unreachable(&self) -> bool {
        matches!(self.status, RobotsStatus::Unreachable { .. })
    }

    /// The HTTP status of the final robots.txt response, if one arrived.
    pub fn http_status(&self) -> Option<u16> {
        match &self.status {
            RobotsStatus::Fetched { status } => Some(*status),
            RobotsStatus::Unavailable { status, .. } | RobotsStatus::Unreachable { status, .. } => {
                *status
            }
        }
    }

    /// The wait an unreachable robots.txt's response asked for (its Retry-After, read
    /// against the server's clock).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

/// The product token robots.txt groups are matched against: the User-Agent up to the first
/// `/`, space or `(` (`mybot/1.0 (+https://…)` matches `User-agent: mybot`).
pub fn product_token(user_agent: &str) -> &str {
    let end = user_agent.find(['/', ' ', '(']).unwrap_or(user_agent.len());
    user_agent.get(..end).unwrap_or(user_agent).trim()
}

#[cfg(test)]
mod tests;
