//! Scenarios: how a lab server treats its clients (limits, overload, blocks, robots, faults).
//!
//! A [`Scenario`] is plain configuration. Start from a constructor ([`Scenario::open`],
//! [`Scenario::rate_limited`], [`Scenario::quota`], [`Scenario::chaos`]) or a name
//! ([`Scenario::by_name`]) and add behaviours with the builder-style modifiers; they compose, so
//! `Scenario::rate_limited(5.0, 20).ratelimit_headers(Dialect::XUnix).soft_block(..)` is one
//! server that does all three.
//!
//! The folder owns configuration only: the behaviours a scenario composes ([`parts`]: limits,
//! refusals, header dialects, overload, blocks, robots.txt), the [`Scenario`] that holds them
//! with its constructors, modifiers and validation (this file), and the named scenarios
//! ([`named`]). No state and no clock: the live limiter state is the
//! [`handler`](crate::handler)'s and the arithmetic is [`crate::ratelimit`]'s.

use std::time::Duration;

use crate::error::Error;

mod named;
mod parts;

pub use parts::{Block, Dialect, Limit, LimitReqDelay, Overload, RetryAfter, Robots};

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
