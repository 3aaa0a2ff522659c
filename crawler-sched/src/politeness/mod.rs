//! One politeness engine: the per-host state machine every crawl runs, local or fleet.
//!
//! - [`HostMachine`] (in `machine`): pure and typed, time in, decisions out. Holds
//!   (Retry-After, exhausted quotas, challenge pages, refusals without Retry-After, robots.txt
//!   outages), pacing (a GCRA token bucket under a ceiling), the learned limit and probing
//!   above it, RateLimit steering, the Crawl-delay floor, concurrency, and the audit record
//!   of every change with its trigger.
//! - [`Tuning`] (in `tuning`): every constant, documented, in one struct.
//! - [`Delivery`] (in `delivery`): what the server accepted per second over two minutes.
//! - [`LimiterGroups`] (in `groups`): which host names share a limiter, by evidence.
//! - [`worlds`]: the judge, random servers on virtual time.
//!
//! The local frontier runs a machine per host on tokio's clock
//! ([`Politeness`](crate::Politeness)); a fleet runs the same machine with its state in
//! Redis, committed by compare-and-set, so there is one source of truth for the rules.
//!
//! This folder owns every politeness rule and nothing else: no clock, no I/O but debug logs.
//! Time comes in as milliseconds and state goes out as data; the throttles
//! ([`Politeness`](crate::Politeness), [`SharedThrottle`](crate::SharedThrottle)) bring the
//! clock and the storage. The machine's methods are cut by responsibility in `machine/`;
//! `worlds` is the judge and `tests` the checks that run it on fresh draws.

mod audit;
mod delivery;
mod edge;
mod groups;
mod machine;
mod params;
mod state;
#[cfg(test)]
mod tests;
mod tuning;
pub mod worlds;

pub use audit::{Change, Phase, Trigger, Verdict, What};
pub use delivery::Delivery;
pub use edge::WindowEdge;
pub use groups::{
    ACTIVE_SHARER_MS, Join, JoinEvidence, LEAVE_POOL_CHANCE, Leave, LimiterGroups,
    QUOTA_TURN_TOLERANCE_MS, asks_hold,
};
pub use machine::HostMachine;
pub use params::{Millis, Mode, Params};
pub use state::HostState;
pub use tuning::{SEND_GAP_WEIGHT, Tuning};
