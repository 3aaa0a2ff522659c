//! robots.txt shared by the workers of a fleet: fetched once per origin and TTL for the
//! whole fleet, not once per worker. Each worker of a fleet crawls every host, so with a
//! cache of its own each would fetch each origin's robots.txt itself: a hundred workers, a
//! hundred fetches of one file a day, each in one of the host's paced slots.
//!
//! The downloader (crawler-http) reads and writes the files through [`RobotsShare`];
//! crawler-store implements it over Redis for a fleet. Only answers that decide the rules
//! (a 2xx file, or a 4xx, "no rules") are shared: an outage (5xx, 429, no answer) is waited
//! out in the host's slot, held by the shared politeness state, and asked again.

use std::time::Duration;

use crate::Result;

/// A robots.txt as a worker fetched it: what another needs to judge it the same way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRobots {
    /// The final answer's status (after redirects).
    pub status: u16,
    /// The body as read (at most the robots.txt size cap).
    pub body: Vec<u8>,
    /// Whether the body was cut at the size cap.
    pub truncated: bool,
}

/// Where a fleet's workers keep the robots.txt files they fetched, by origin
/// (`scheme://host[:port]`). The calls may block (a network store waits out an outage);
/// the downloader makes them off the async runtime.
pub trait RobotsShare: Send + Sync + 'static {
    /// The file another worker fetched for `origin`, and for how much longer it is trusted.
    fn get(&self, origin: &str) -> Result<Option<(SharedRobots, Duration)>>;

    /// Share the file fetched for `origin`, trusted for `ttl`.
    fn put(&self, origin: &str, robots: &SharedRobots, ttl: Duration) -> Result<()>;
}
