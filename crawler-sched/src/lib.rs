//! What is fetched next, and when: the frontier and the per-host politeness slots.
//!
//! [`Frontier`] implements crawler-core's `Scheduler`: it fingerprints requests to drop
//! duplicates, filters offsite, too-deep and too-long URLs, keeps one priority queue per host
//! key, and hands out a request only when that host's [`Throttle`] allows a send. Waiting is
//! expressed as "not before T", so a host that must wait never blocks the others.
//!
//! For a fleet of workers sharing one frontier (crawler-store's Redis backend), the
//! `shared` module adds [`SharedBudget`] (the contract of a per-host budget kept where
//! every worker sees it), [`SharedThrottle`] (a [`Throttle`] paced by it) and
//! [`FleetFrontier`] (a frontier that finds work queued by other workers and waits for the
//! fleet's leases before it calls the crawl done).
//!
//! With a [`Recorder`] ([`Frontier::record_to`]), the frontier also appends each host's
//! traffic and politeness changes to a file, the politeness record that `crawler report`
//! draws (see [`record`]).
//!
//! ```
//! use crawler_core::{Next, Request, Scheduler, Settings};
//! use crawler_sched::{Frontier, FrontierConfig};
//!
//! let settings = Settings::default();
//! let mut frontier = Frontier::new(FrontierConfig::from_settings(&settings, vec![]));
//! let now = tokio::time::Instant::now();
//! frontier.enqueue(Request::get("http://books.example/").unwrap(), now);
//! assert!(matches!(frontier.next(now), Next::Ready(..)));
//! ```

mod error;
mod fingerprint;
mod frontier;
pub mod politeness;
pub mod record;
mod resolve;
mod shared;
mod store;
mod throttle;

pub use error::Error;
pub use fingerprint::{
    Fingerprint, FingerprintBuildHasher, PassThrough, canonical_url, fingerprint,
};
pub use frontier::{Frontier, FrontierConfig, ThrottleFactory, host_key, is_allowed_domain};
pub use record::Recorder;
pub use resolve::IpKeys;
pub use shared::{
    CONFIRM_LEAD_MS, Fleet, FleetFrontier, FleetStatus, Missed, Pooled, SharedBudget,
    SharedThrottle, Versioned, apply_feedback, lease_ahead,
};
pub use store::{Entry, MemoryStore, QueueStore};
pub use throttle::{
    AuditLog, AuditRecord, Politeness, Throttle, Verdict, log_changes, throttle_for,
};
