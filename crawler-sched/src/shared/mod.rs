//! Politeness shared by a fleet: one per-host budget for many worker processes.
//!
//! When several processes crawl as one (a shared frontier in Redis, say), each host's rate,
//! token bucket and holds must be shared too, or N workers send N times the host's budget.
//! The fleet runs the very same [`HostMachine`] as a local crawl; only where its state
//! lives differs:
//!
//! - [`SharedBudget`]: the contract a shared backend implements (crawler-store implements
//!   it on Redis). The backend keeps each host's [`HostState`] with a version, and a
//!   worker changes it by compare-and-set: it computes the next state in Rust from the
//!   version it holds and commits it only if nobody committed in between (otherwise it
//!   recomputes from the fresher state). The backend's clock is the fleet's clock. A send
//!   is booked in the same atomic step as the lease that hands the request out, so no
//!   worker can send outside the budget; the backend may book it without the
//!   compare-and-set (crawler-store books it in a small pacing record of the host's, by the
//!   machine's rule, so leases never race), as long as what it hands back as the state
//!   includes every send booked.
//! - [`SharedThrottle`]: a [`Throttle`](crate::Throttle) over that state: ready time, rate and holds from
//!   the last state heard (no round trip), every outcome committed at once.
//! - [`FleetFrontier`]: a [`Frontier`](crate::Frontier) that knows it is one of many: it picks up hosts that
//!   other workers queued work for, and does not report "nothing left" while the fleet still
//!   has work queued or leased (a lease of a killed worker comes back when it expires).
//!   A request the store leased ahead of its slot ([`lease_ahead`]) is held here and handed
//!   out at the booked time, never before, so the fleet's sends are spaced as booked.
//!
//! This folder owns the fleet's side of politeness and of the frontier, and only the
//! contracts a backend implements: no Redis here (crawler-store implements [`SharedBudget`]
//! and [`Fleet`]), and no rule of its own (the rules are the machine's, in
//! [`crate::politeness`]).
//!
//! - `mod.rs`: the [`SharedBudget`] contract, [`Versioned`] and [`lease_ahead`].
//! - `throttle`: [`SharedThrottle`], the [`Throttle`](crate::Throttle) over the shared state.
//! - `fleet`: the [`Fleet`] contract and [`FleetFrontier`].

use crawler_core::Feedback;

use crate::error::Error;
use crate::politeness::{HostMachine, HostState, Params, Verdict};

mod fleet;
mod throttle;

pub use fleet::{CONFIRM_LEAD_MS, Fleet, FleetFrontier, FleetStatus, Missed};
pub use throttle::SharedThrottle;

/// A host's machine state as the shared store holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned {
    /// The state.
    pub state: HostState,
    /// Its version: every commit adds one.
    pub version: u64,
}

/// A limiter group a fleet paces as one slot, as one of its names last heard (see
/// [`SharedBudget::pool`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Pooled {
    /// The name whose shared state paces the group (maybe the name itself).
    pub pacer: String,
    /// The pool's in-flight cap: the sum over its names.
    pub concurrency: u32,
    /// The pool's `max_rate`: the sum over its names.
    pub max_rate: f64,
    /// The name's own last booking (fleet ms): its next send keeps one gap of its own
    /// `max_rate` after it.
    pub own_booked: Option<f64>,
}

impl Pooled {
    /// The pacer's parameters for the pool: `own` (the pacer's), with the pool's in-flight
    /// cap and `max_rate`, and its quota the pool's alone (as
    /// [`HostMachine::set_pool`](crate::politeness::HostMachine::set_pool)).
    pub fn params(&self, own: &Params) -> Params {
        let mut p = own.clone();
        p.concurrency = self.concurrency.max(1);
        p.max_rate = self.max_rate.max(p.min_rate);
        p.sharers = 1;
        p
    }
}

/// A per-host politeness state shared by every worker of a crawl.
///
/// Implementations keep each host's [`HostState`] where all workers see it, with a
/// version, and must book sends in the same atomic step as the lease that hands a
/// request out (their `QueueStore::lease`), because a throttle hears of a send only after
/// the fact.
pub trait SharedBudget: Send + Sync + 'static {
    /// Use `params` for `host` from now on (its first request, or a `[[hosts]]` rule).
    fn register(&self, host: &str, params: &Params);
    /// The host's state as last heard, if any (no round trip).
    fn cached(&self, host: &str) -> Option<Versioned>;
    /// The fleet's clock now (the shared store's time, in ms), as estimated locally.
    fn now_ms(&self) -> f64;
    /// How long before a host's slot its next request may be leased at most (ms; see
    /// [`lease_ahead`]): the backend books the send at the slot and the worker holds the
    /// request until then. 0 (the default): a lease only once the slot is due.
    fn lease_ahead_ms(&self) -> f64 {
        0.0
    }
    /// How long after the host's next slot this worker's turn to lease comes (ms): the
    /// slots between are the other workers' (a backend that learns how many of the host's
    /// slots the others book between two of this worker's). Asking for a lease then finds
    /// the next free slot about one look-ahead off, so the lease's own answer is as fresh as
    /// the read before the send would be ([`CONFIRM_LEAD_MS`]); asking at the next slot
    /// finds it taken, and the request is held for a later one and read again. 0 (the
    /// default): no turns.
    fn turn_ms(&self, _host: &str) -> f64 {
        0.0
    }
    /// Queue a routine outcome (nothing every worker must know at once) that happened at
    /// fleet time `at`: the backend folds it into the host's state with its next commit
    /// (the next lease of the host, typically), saving a round trip per request.
    fn defer(&self, host: &str, feedback: &Feedback, at: f64);
    /// The host's pooled limiter group, as last heard (no round trip); `None` while the
    /// host is paced alone (the default: a backend without pools).
    fn pooled(&self, _host: &str) -> Option<Pooled> {
        None
    }
    /// A refusal reached the host's limiter group: pace the group as one slot from now on,
    /// on this host's shared state unless the group is pooled already (one round trip,
    /// atomic, so every worker agrees on the pacer). Returns the pool, with the group's
    /// names when this call formed it (empty when it was pooled already), or `None` when
    /// the host has no group of two names or more in the fleet (or the backend pools
    /// nothing, the default).
    fn pool(&self, _host: &str) -> Result<Option<(Pooled, Vec<String>)>, Error> {
        Ok(None)
    }
    /// Replace version `expected` of the host's state with `state` (and mark the host
    /// skipped for the whole fleet with `skip`), atomically. `Ok(false)` when another
    /// worker committed first; the cache then holds the fresher state.
    fn commit(
        &self,
        host: &str,
        expected: u64,
        state: &HostState,
        skip: Option<&str>,
    ) -> Result<bool, Error>;
}

/// The largest share of a host's interval a lease may be taken ahead of its slot: well
/// under one interval, so a worker never holds one slot while the next is already due.
const AHEAD_SHARE: f64 = 0.5;

/// How long before the host's next slot (`machine.ready_at()`) a fleet worker may lease its
/// next request (ms): `max_ms`, but at most half the host's interval.
///
/// Why lease early at all: a send is booked in the shared store at the lease, but reaches
/// the server when the lease's reply has come back and the worker got round to sending, so
/// the replies' jitter between workers would shrink the gaps between the fleet's sends
/// below the booked interval (and a limiter without a burst refuses any request that comes
/// early). Leased a little ahead and sent at the slot it booked, each request leaves on
/// its own timer, and consecutive sends are spaced as booked whatever the replies' delays.
pub fn lease_ahead(machine: &HostMachine, max_ms: f64) -> f64 {
    let rate = machine.rate();
    if max_ms <= 0.0 || rate <= 0.0 || !rate.is_finite() {
        return 0.0;
    }
    max_ms.min(AHEAD_SHARE * 1_000.0 / rate)
}

/// Apply to `machine` an outcome read at fleet time `at`, dating its send by the
/// downloader's own reading when it has one (brought to the fleet's clock through
/// `fleet_now`, the fleet time of this moment), else as `at` less the latency. Read late (a
/// busy worker, or a routine outcome folded into a later commit), `at` less the latency
/// would date the send late, and the machine would push the host's next slot back for it.
pub fn apply_feedback(
    machine: &mut HostMachine,
    feedback: &Feedback,
    at: f64,
    fleet_now: f64,
) -> Verdict {
    match feedback.sent_at {
        Some(sent) => {
            let ago = tokio::time::Instant::now()
                .saturating_duration_since(sent)
                .as_secs_f64()
                * 1_000.0;
            machine.on_feedback_sent(feedback, fleet_now - ago, at)
        }
        None => machine.on_feedback(feedback, at),
    }
}
