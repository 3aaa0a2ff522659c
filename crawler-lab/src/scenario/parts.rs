//! The behaviours a scenario composes: limits and how refusals say when to come back,
//! rate-limit header dialects, the overload model, block triggers and robots.txt variants.

use std::time::Duration;

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
    /// Only pages do this work: `/robots.txt` and sitemaps are static files, answered at
    /// once and not counted in flight, as most sites serve them in front of dynamic pages.
    pub pages_only: bool,
}

impl Overload {
    /// An overload model; see the type's docs.
    pub fn new(capacity: usize, base: Duration, per_request: Duration) -> Self {
        Self {
            capacity,
            base,
            per_request,
            pages_only: false,
        }
    }

    /// The same model for pages only: robots.txt and sitemaps are answered at once.
    pub fn pages(capacity: usize, base: Duration, per_request: Duration) -> Self {
        Self {
            pages_only: true,
            ..Self::new(capacity, base, per_request)
        }
    }

    /// Whether a request for `path` does the work.
    pub fn applies_to(&self, path: &str) -> bool {
        !(self.pages_only && (path == "/robots.txt" || path.contains("sitemap")))
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
