//! The in-memory frontier: de-duplication, filters, per-host queues and slots, and the ready
//! heap that says which host may send next.
//!
//! This folder owns the frontier's in-memory bookkeeping. It must not store requests itself
//! (the queues, the seen set and the leases live behind [`QueueStore`]) nor decide when a
//! host may send (each host's [`Throttle`](crate::Throttle) does, on the time it is given).
//!
//! - `mod.rs`: [`Frontier`], its filters, pushes, skips, retries and the ready heap.
//! - `config`: [`FrontierConfig`] and the slot keys (host, registrable domain, IP address).
//! - `hosts`: the per-host slots: made on first use, dropped once idle with nothing
//!   learned, and their running figures for [`HostStats`].
//! - `groups`: limiter groups: the host names behind one limiter share its holds, and
//!   once refused are paced as one slot.
//! - `scheduler`: crawler-core's [`Scheduler`] for [`Frontier`].
//! - `tests`: the frontier's tests.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use crawler_core::{FilterReason, HostStats, Lease, Request, Scheduler};
use tokio::time::Instant;

use crate::error::Error;
use crate::record::Recorder;
use crate::store::{Entry, MemoryStore, QueueStore};
use hosts::Host;

mod config;
mod groups;
mod hosts;
mod scheduler;
#[cfg(test)]
mod tests;

pub use config::{FrontierConfig, ThrottleFactory, host_key, is_allowed_domain};

/// The [`Scheduler`]: filters and de-duplication, per-host slots, and the ready heap, over a
/// [`QueueStore`] that holds the queues (in memory by default).
pub struct Frontier<S: QueueStore = MemoryStore> {
    config: FrontierConfig,
    store: S,
    /// Live host slots; an idle host with nothing learned is dropped (see
    /// [`Frontier::prune_idle`]), so a broad crawl keeps only the hosts it is working on.
    hosts: slab::Slab<Host>,
    host_ids: HashMap<String, usize>,
    /// Hosts that went idle (nothing queued, nothing in flight), oldest first, with when.
    idle: VecDeque<(Instant, usize)>,
    /// Figures of dropped hosts, the busiest [`RETIRED_KEPT`](hosts::RETIRED_KEPT) of them, for the final stats.
    retired: Vec<HostStats>,
    /// (ready at, tie-breaker, host index): the next host allowed to send is on top.
    ready: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    /// Store lease id to host index.
    leases: HashMap<u64, usize>,
    /// With a politeness record only: when each lease was handed out, and whether it was a
    /// retry and a sub-request, to take it back from the record's `sent` should it never
    /// reach the wire.
    handed_out: HashMap<u64, (Instant, bool, bool)>,
    seq: u64,
    error: Option<Error>,
    /// Politeness state kept by an earlier run, applied when a host's slot is created.
    restored: HashMap<String, serde_json::Value>,
    /// Retries waiting for their time: (not before, tie-breaker, request).
    delayed: BinaryHeap<Reverse<(Instant, u64, DelayedRequest)>>,
    /// Requests of skipped hosts, waiting for the engine to count them.
    skipped: Vec<(Request, String)>,
    /// Where sends, outcomes and politeness changes are recorded, when they are.
    recorder: Option<Recorder>,
    /// Limiter groups: which slots share holds.
    groups: groups::Groups,
}

/// A request in the retry heap; ordered by the heap's other fields only.
struct DelayedRequest(Request, Lease);

impl PartialEq for DelayedRequest {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for DelayedRequest {}
impl PartialOrd for DelayedRequest {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for DelayedRequest {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl Frontier<MemoryStore> {
    /// An empty in-memory frontier.
    pub fn new(config: FrontierConfig) -> Self {
        Self::with_store(config, MemoryStore::new())
    }
}

impl<S: QueueStore> Frontier<S> {
    /// A frontier over `store`, picking up any requests it already holds (a resumed crawl).
    pub fn with_store(config: FrontierConfig, store: S) -> Self {
        let seq = store.next_seq();
        let mut f = Self {
            config,
            store,
            hosts: slab::Slab::new(),
            host_ids: HashMap::new(),
            idle: VecDeque::new(),
            retired: Vec::new(),
            ready: BinaryHeap::new(),
            leases: HashMap::new(),
            handed_out: HashMap::new(),
            seq,
            error: None,
            delayed: BinaryHeap::new(),
            skipped: Vec::new(),
            restored: HashMap::new(),
            recorder: None,
            groups: groups::Groups::default(),
        };
        f.restored = f.store.host_states().into_iter().collect();
        let now = Instant::now();
        for host in f.store.hosts() {
            let id = f.host_id(host, None, now);
            f.reschedule(id, now);
        }
        f
    }

    /// Record every host's sends, outcomes and politeness changes with `recorder` (see
    /// [`crate::record`]).
    pub fn record_to(&mut self, recorder: Recorder) {
        self.recorder = Some(recorder);
    }

    /// The queue store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Hosts with their queued and in-flight counts.
    pub fn hosts(&self) -> impl Iterator<Item = (&str, usize, usize)> {
        self.hosts
            .iter()
            .map(|(_, h)| (h.key.as_str(), self.store.host_len(&h.key), h.in_flight))
    }

    /// The slot key of the host a request leased by [`Scheduler::next`] belongs to, while
    /// its lease is open.
    pub fn lease_host(&self, lease: Lease) -> Option<&str> {
        let id = self.leases.get(&lease.0)?;
        self.hosts.get(*id).map(|h| h.key.as_str())
    }

    /// Put a request handed out by [`Scheduler::next`] but never sent back in its host's
    /// queue at once and close its lease (the store applies both together), then flush the
    /// store: for a request given back while the crawl stops, when no later `next` would
    /// release a delayed retry. [`Scheduler::complete`] must have been called for it.
    pub fn requeue_now(&mut self, lease: Lease, request: Request, now: Instant) {
        self.push(request, now);
        self.acknowledge(lease);
        if let Err(e) = self.store.send_buffered() {
            self.failed(e);
        }
    }

    /// Give every host the store has work for a place in the ready heap, including hosts
    /// whose work another process queued in a shared store (see
    /// [`FleetFrontier`](crate::FleetFrontier)). Hosts skipped for the run stay skipped.
    pub fn refresh_hosts(&mut self, now: Instant) {
        for host in self.store.hosts() {
            let id = self.host_id(host, None, now);
            if self.hosts.get(id).is_some_and(|h| h.skipped.is_none()) {
                self.reschedule(id, now);
            }
        }
    }

    pub(super) fn failed(&mut self, e: Error) {
        tracing::error!("frontier store failed: {e}");
        self.error.get_or_insert(e);
    }

    pub(super) fn filter(&self, req: &Request) -> Option<FilterReason> {
        if self.config.depth_limit > 0 && req.depth > self.config.depth_limit {
            return Some(FilterReason::Depth);
        }
        if req.url.as_str().len() > self.config.max_url_length {
            return Some(FilterReason::UrlTooLong);
        }
        if !is_allowed_domain(&req.url, &self.config.allowed_domains) {
            return Some(FilterReason::Offsite);
        }
        None
    }

    /// Queue a request for its host, or set it aside if the host is skipped.
    pub(super) fn push(&mut self, request: Request, now: Instant) {
        let key = self.config.key(&request.url);
        let id = self.host_id(key, Some(&request.url), now);
        if let Some(why) = self.hosts.get(id).and_then(|h| h.skipped.clone()) {
            self.skipped.push((request, why));
            return;
        }
        self.seq += 1;
        let entry = Entry {
            priority: request.priority,
            seq: self.seq,
            request,
        };
        let key = self
            .hosts
            .get(id)
            .map(|h| h.key.clone())
            .unwrap_or_default();
        if let Err(e) = self.store.push(&key, entry) {
            self.failed(e);
        }
        self.reschedule(id, now);
    }

    /// Stop crawling a host: everything it has queued is set aside with the reason.
    pub(super) fn skip_host(&mut self, id: usize, why: String) {
        let Some(host) = self.hosts.get_mut(id) else {
            return;
        };
        host.skipped = Some(why.clone());
        let key = host.key.clone();
        // Retries waiting for their time go too: they would only wait to be skipped.
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.delayed)
            .into_iter()
            .partition(|Reverse((_, _, DelayedRequest(r, _)))| self.config.key(&r.url) == key);
        self.delayed = others.into_iter().collect();
        for Reverse((_, _, DelayedRequest(r, lease))) in mine {
            self.skipped.push((r, why.clone()));
            if let Err(e) = self.store.ack(lease.0) {
                self.failed(e);
            }
        }
        loop {
            match self.store.lease(&key) {
                Ok(Some((lease, req))) => {
                    self.skipped.push((req, why.clone()));
                    if let Err(e) = self.store.ack(lease) {
                        self.failed(e);
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    self.failed(e);
                    break;
                }
            }
        }
    }

    /// Move retries whose time has come into their host queues.
    pub(super) fn release_delayed(&mut self, now: Instant) {
        while self
            .delayed
            .peek()
            .is_some_and(|Reverse((at, _, _))| *at <= now)
        {
            if let Some(Reverse((_, _, DelayedRequest(req, lease)))) = self.delayed.pop() {
                self.push(req, now);
                self.acknowledge(lease);
            }
        }
    }

    /// Put a host in the ready heap if it has work and room for another request.
    pub(super) fn reschedule(&mut self, id: usize, now: Instant) {
        let (room, ready_at) = (self.has_room(id), self.ready_at_of(id));
        let Some(host) = self.hosts.get_mut(id) else {
            return;
        };
        if host.scheduled || !room || self.store.host_len(&host.key) == 0 {
            return;
        }
        host.scheduled = true;
        if ready_at <= now && self.store.leased_ahead(&host.key) {
            // The store holds the host's next request already, for a short while: first in
            // line.
            let first = self
                .ready
                .peek()
                .map_or(now, |Reverse((at, _, _))| (*at).min(now));
            self.ready.push(Reverse((first, 0, id)));
            return;
        }
        self.seq += 1;
        self.ready.push(Reverse((ready_at.max(now), self.seq, id)));
    }
}
