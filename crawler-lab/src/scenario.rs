//! Scenarios: how a lab server treats its clients (limits, overload, blocks, robots, faults).
//!
//! A [`Scenario`] is plain configuration. Start from a constructor ([`Scenario::open`],
//! [`Scenario::rate_limited`], [`Scenario::quota`], [`Scenario::chaos`]) or a name
//! ([`Scenario::by_name`]) and add behaviours with the builder-style modifiers; they compose, so
//! `Scenario::rate_limited(5.0, 20).ratelimit_headers(Dialect::XUnix).soft_block(..)` is one
//! server that does all three.

use std::time::Duration;

use crate::error::{Error, Kind};

/// How a refusal states when to come back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetryAfter {
    /// Delta-seconds computed from the limiter: the whole seconds until a request would be
    /// accepted again (at least 1). The default.
    Auto,
    /// `Retry-After: N` (delta-seconds), whatever the limiter would accept.
    Seconds(u64),
    /// `Retry-After: <HTTP-date>` naming the instant this many seconds after the response.
    HttpDate(u64),
    /// No `Retry-After` header.
    Absent,
    /// A header no parser should accept: `Retry-After: in a while`.
    Malformed,
}

/// A rate-limit header dialect, as seen in the wild. Values follow the scenario's [`Limit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// The IETF trio: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`
    /// (delta-seconds until the quota resets).
    Ietf,
    /// The IETF trio plus `RateLimit-Policy: 50;w=10`.
    IetfWithPolicy,
    /// The current draft's structured fields, as Cloudflare sends them:
    /// `RateLimit-Policy: "default";q=50;w=10, "hourly";q=18000;w=3600` and
    /// `RateLimit: "default";r=49;t=7`. The hourly policy is implied by the default one (it can
    /// never bind first), so it is true, but it tests parsing of several policies.
    Structured,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` as a Unix time in
    /// seconds (GitHub style), and `X-RateLimit-Reset-After` in fractional seconds.
    XUnix,
    /// Like [`Dialect::XUnix`] but `X-RateLimit-Reset` is delta-seconds.
    XDelta,
}

/// How nginx `limit_req` treats requests within the burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitReqDelay {
    /// `nodelay`: every request within the burst is served at once.
    NoDelay,
    /// `delay=N` (`Delay(0)` is plain `burst=B`): the first N requests of the excess are
    /// served at once, later ones wait `(excess − N) / rate` before being served.
    Delay(u32),
}

impl LimitReqDelay {
    /// The excess served without delay, in requests; `None` for `nodelay`.
    pub(crate) fn nginx(self) -> Option<u32> {
        match self {
            Self::NoDelay => None,
            Self::Delay(n) => Some(n),
        }
    }
}

/// What a client may send, per client key. Every kind refuses with the scenario's status
/// (429 by default) and Retry-After; which requests count differs, as it does between the
/// servers they imitate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// A token bucket per client key: `burst` tokens, refilled at `rate` per second. Header
    /// dialects report `limit = burst`, `remaining = whole tokens left`, `reset = seconds until
    /// the bucket is full` and a policy window of `burst / rate` seconds.
    TokenBucket {
        /// Tokens added per second.
        rate: f64,
        /// Bucket size: how many requests a fresh client may send at once.
        burst: u32,
    },
    /// A fixed-window quota per client key: `limit` requests per `window`, windows aligned to
    /// the lab's start. Refused requests do not count against the quota (as API gateways
    /// count only what they served), so a client that waits for the next window loses
    /// nothing. Header dialects report exactly this quota.
    Window {
        /// Requests allowed per window.
        limit: u32,
        /// Window length.
        window: Duration,
    },
    /// nginx `limit_req zone=... rate=R burst=B [nodelay | delay=N]`, emulated with nginx's
    /// own integer arithmetic: the key's `excess` in thousandths of a request drains at
    /// `rate` per millisecond-second, each request computes
    /// `excess = max(excess − rate × ms / 1000 + 1000, 0)` and is refused when that exceeds
    /// `burst × 1000`; a refused request changes nothing. A key's first request leaves excess
    /// 0, as nginx's new node does. Header dialects report `limit = burst + 1`.
    LimitReq {
        /// Requests per second (`30r/m` is 0.5).
        rate: f64,
        /// `burst`: requests beyond the rate tolerated at once.
        burst: u32,
        /// `nodelay`, or the delay mode.
        delay: LimitReqDelay,
    },
    /// HAProxy `stick-table type ip store http_req_rate(period)` with
    /// `http-request track-sc0 src` and
    /// `http-request deny deny_status 429 if { sc_http_req_rate(0) gt max }`: HAProxy's
    /// sliding-window approximation (this period's count plus the previous period's count
    /// times the fraction of this period still to come, floored). The request is counted
    /// before the check, so refused requests count too: a client that keeps sending while
    /// refused stays refused. Periods start at the key's first request and follow on from
    /// it, except after two idle periods, when the next starts at the next request (as
    /// HAProxy's counter does).
    HttpReqRate {
        /// The threshold: refused when the rate read is greater than this.
        max: u32,
        /// The counter's period (`http_req_rate(10s)`).
        period: Duration,
    },
}

impl Limit {
    /// The verdicts this limit gives one client key's requests arriving at these times
    /// (from any common origin, in order): `true` for served. Lets a benchmark replay the
    /// arrivals a real server logged and compare verdicts without network jitter.
    pub fn verdicts(&self, arrivals: &[Duration]) -> Vec<bool> {
        let mut st = crate::ratelimit::ClientState::new(Some(*self), Duration::ZERO);
        arrivals
            .iter()
            .map(|&at| st.admit(*self, at).allowed)
            .collect()
    }
}

/// A server whose latency grows with its load: each request waits
/// `base + per_request × (requests in flight − 1)` before it is answered, and a request that
/// would make more than `capacity` in flight is refused at once with 503 (and the scenario's
/// Retry-After). In flight counts all clients: capacity belongs to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overload {
    /// Most requests served at once; one more gets 503.
    pub capacity: usize,
    /// Latency of a request alone on the server.
    pub base: Duration,
    /// Extra latency for every other request in flight.
    pub per_request: Duration,
}

impl Overload {
    /// An overload model; see the type's docs.
    pub fn new(capacity: usize, base: Duration, per_request: Duration) -> Self {
        Self {
            capacity,
            base,
            per_request,
        }
    }
}

/// A block trigger: a client that sends more than `threshold` requests within any one second
/// is blocked for `window` (counted from the request that crossed the threshold).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Requests per second tolerated.
    pub threshold: u32,
    /// How long the block lasts.
    pub window: Duration,
}

impl Block {
    /// A block trigger; see the type's docs.
    pub fn new(threshold: u32, window: Duration) -> Self {
        Self { threshold, window }
    }
}

/// What `/robots.txt` answers. Every 200 variant ends with the `Sitemap:` line.
#[derive(Clone, Debug, PartialEq)]
pub enum Robots {
    /// `User-agent: *` / `Disallow: /private/`.
    Standard,
    /// The standard rules plus `Crawl-delay: N` (seconds, may be fractional).
    CrawlDelay(f64),
    /// Per-agent groups: `*` gets the standard rules; the named agent token gets
    /// `Disallow: /private/`, `Disallow: /category/`, `Allow: /category/travel/` and
    /// `Crawl-delay: 1`; `BadBot` gets `Disallow: /`.
    PerAgent(String),
    /// `/robots.txt` answers this status with a small HTML body (RFC 9309: 4xx means no rules,
    /// 5xx means assume everything is disallowed).
    Status(u16),
    /// `/robots.txt` sends nothing for this long, then the standard rules.
    Timeout(Duration),
    /// About 1 MiB of rules: the standard rules first, padding `Allow:` lines, and after
    /// 512 KiB a `User-agent: *` / `Disallow: /catalogue/` group that a parser honouring
    /// Google's 500 KiB limit never sees.
    Oversized,
    /// This exact text (the `Sitemap:` line is not added).
    Custom(String),
}

/// How the lab treats requests: see the [crate docs](crate) for the named scenarios.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub(crate) name: String,
    pub(crate) limit: Option<Limit>,
    pub(crate) refuse_status: u16,
    pub(crate) retry_after: RetryAfter,
    pub(crate) enforce_retry_after: bool,
    pub(crate) dialect: Option<Dialect>,
    pub(crate) overload: Option<Overload>,
    pub(crate) soft_block: Option<Block>,
    pub(crate) hard_block: Option<Block>,
    pub(crate) robots: Robots,
    pub(crate) chaos: Option<f64>,
    pub(crate) bad_sitemaps: bool,
    pub(crate) books: Option<usize>,
}

impl Default for Scenario {
    fn default() -> Self {
        Self::open()
    }
}

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
    /// A server with no limits: every page at full speed, standard robots.txt.
    pub fn open() -> Self {
        Self {
            name: "open".into(),
            limit: None,
            refuse_status: 429,
            retry_after: RetryAfter::Auto,
            enforce_retry_after: false,
            dialect: None,
            overload: None,
            soft_block: None,
            hard_block: None,
            robots: Robots::Standard,
            chaos: None,
            bad_sitemaps: false,
            books: None,
        }
    }

    /// A token bucket per client key (`rate` tokens per second, `burst` tokens), refusing with
    /// 429 and `Retry-After` from [`RetryAfter::Auto`] unless changed.
    pub fn rate_limited(rate: f64, burst: u32) -> Self {
        Self::open()
            .named("rate-limited")
            .limit(Limit::TokenBucket { rate, burst })
    }

    /// nginx `limit_req` per client key (see [`Limit::LimitReq`]): `rate` requests per
    /// second, `burst`, `nodelay` or a delay mode; 429 with Retry-After from
    /// [`RetryAfter::Auto`] unless changed.
    pub fn nginx_limit_req(rate: f64, burst: u32, delay: LimitReqDelay) -> Self {
        Self::open()
            .named("nginx-limit-req")
            .limit(Limit::LimitReq { rate, burst, delay })
    }

    /// HAProxy's stick-table request rate per client key (see [`Limit::HttpReqRate`]):
    /// refused when more than `max` requests per `period` are counted, refusals included.
    pub fn haproxy_req_rate(max: u32, period: Duration) -> Self {
        Self::open()
            .named("haproxy-req-rate")
            .limit(Limit::HttpReqRate { max, period })
    }

    /// A fixed-window quota per client key: `limit` requests per `window`.
    pub fn quota(limit: u32, window: Duration) -> Self {
        Self::open()
            .named("quota")
            .limit(Limit::Window { limit, window })
    }

    /// The chaos site: 2,000 books (unless the builder sets a size), about 20% of book pages
    /// answer with a fault chosen per path from the seed, and the sitemap index also lists the
    /// malformed sitemaps. See [`crate::FaultKind`].
    pub fn chaos() -> Self {
        let mut s = Self::open()
            .named("chaos")
            .chaos_rate(0.2)
            .bad_sitemaps(true);
        s.books = Some(2000);
        s
    }

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

    /// The scenario's name (a named scenario's name, the constructor's name, or
    /// [`Scenario::named`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Renames the scenario (shown by the CLI and in reports).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The rate limit, if any.
    pub fn rate_limit(&self) -> Option<Limit> {
        self.limit
    }

    /// Sets or replaces the rate limit.
    pub fn limit(mut self, limit: Limit) -> Self {
        self.limit = Some(limit);
        self
    }

    /// The status of refusals by the limit (429 by default; 503 is the other common one).
    pub fn status(mut self, status: u16) -> Self {
        self.refuse_status = status;
        self
    }

    /// How refusals (limit and overload) state when to come back.
    pub fn retry_after(mut self, retry_after: RetryAfter) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// Also refuse every request that arrives while an announced Retry-After window is open
    /// (by default, like nginx, the server answers as soon as the limit allows, and only the
    /// recorder counts the request as a violation).
    pub fn enforce_retry_after(mut self) -> Self {
        self.enforce_retry_after = true;
        self
    }

    /// Sends rate-limit headers in this dialect on every response, with values from the
    /// [`Limit`] (no limit: no headers).
    pub fn ratelimit_headers(mut self, dialect: Dialect) -> Self {
        self.dialect = Some(dialect);
        self
    }

    /// Adds the overload model.
    pub fn overload(mut self, overload: Overload) -> Self {
        self.overload = Some(overload);
        self
    }

    /// Answers a client that crossed the threshold with a 200 challenge page for the window.
    pub fn soft_block(mut self, block: Block) -> Self {
        self.soft_block = Some(block);
        self
    }

    /// Answers a client that crossed the threshold with 403 for the window.
    pub fn hard_block(mut self, block: Block) -> Self {
        self.hard_block = Some(block);
        self
    }

    /// What `/robots.txt` answers.
    pub fn robots(mut self, robots: Robots) -> Self {
        self.robots = robots;
        self
    }

    /// Makes this fraction (0.0 to 1.0) of book detail pages answer with a fault chosen per path
    /// from the seed.
    pub fn chaos_rate(mut self, fraction: f64) -> Self {
        self.chaos = Some(fraction.clamp(0.0, 1.0));
        self
    }

    /// Lists the malformed sitemaps (broken XML, entity expansion, 60,000 URLs, gzip bomb) in
    /// the sitemap index after the good ones.
    pub fn bad_sitemaps(mut self, on: bool) -> Self {
        self.bad_sitemaps = on;
        self
    }

    pub(crate) fn needs_client_state(&self) -> bool {
        self.limit.is_some() || self.soft_block.is_some() || self.hard_block.is_some()
    }

    pub(crate) fn validate(&self) -> Result<(), Error> {
        match self.limit {
            Some(Limit::TokenBucket { rate, burst })
                if !(rate > 0.0 && rate.is_finite()) || burst == 0 =>
            {
                return Err(Error::invalid(format!(
                    "scenario `{}`: a token bucket needs rate > 0 and burst >= 1 (got rate {rate}, burst {burst})",
                    self.name
                )));
            }
            Some(Limit::LimitReq { rate, .. }) if !(rate >= 0.001 && rate.is_finite()) => {
                return Err(Error::invalid(format!(
                    "scenario `{}`: limit_req needs a rate of at least 1 request per 1000 s (got {rate})",
                    self.name
                )));
            }
            Some(Limit::HttpReqRate { max, period })
                if max == 0 || period < Duration::from_millis(2) =>
            {
                return Err(Error::invalid(format!(
                    "scenario `{}`: http_req_rate needs max >= 1 and a period of at least 2 ms",
                    self.name
                )));
            }
            Some(Limit::Window { limit, window }) if limit == 0 || window.is_zero() => {
                return Err(Error::invalid(format!(
                    "scenario `{}`: a quota needs limit >= 1 and a non-zero window",
                    self.name
                )));
            }
            _ => {}
        }
        if !(100..=599).contains(&self.refuse_status) {
            return Err(Error::invalid(format!(
                "scenario `{}`: refusal status {} is not an HTTP status",
                self.name, self.refuse_status
            )));
        }
        if let Robots::Status(s) = self.robots
            && !(100..=599).contains(&s)
        {
            return Err(Error::invalid(format!(
                "scenario `{}`: robots.txt status {s} is not an HTTP status",
                self.name
            )));
        }
        if self.overload.is_some_and(|o| o.capacity == 0) {
            return Err(Error::invalid(format!(
                "scenario `{}`: overload capacity must be at least 1",
                self.name
            )));
        }
        Ok(())
    }
}
