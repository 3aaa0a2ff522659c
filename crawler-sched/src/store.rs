//! Where the frontier keeps its queues, its seen set and its leases.
//!
//! The frontier's pacing state (the ready heap, each host's throttle) lives in memory; the
//! data that must survive a crash lives behind [`QueueStore`]: the in-memory [`MemoryStore`]
//! here, and persistent backends (sled, Redis) in crawler-store.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};

use crawler_core::Request;

use crate::error::Error;
use crate::fingerprint::{Fingerprint, FpBuild};

/// A queued request with its ordering keys.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Higher is served first within a host.
    pub priority: i32,
    /// Arrival order, increasing; earlier is served first among equal priorities.
    pub seq: u64,
    /// The request.
    pub request: Request,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    /// "Greater" means "served sooner": higher priority, then lower seq.
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority
            .cmp(&other.priority)
            .then(other.seq.cmp(&self.seq))
    }
}

/// Storage for the frontier's durable state.
///
/// A request moves: `push` (queued) → `lease` (handed to a worker, still stored) → `ack`
/// (done, forgotten). A persistent store returns unacknowledged leases to their queues when
/// it is reopened, so a crash loses nothing that was queued or in flight.
pub trait QueueStore: Send + 'static {
    /// Record a fingerprint; `false` if it was already recorded.
    fn insert_seen(&mut self, fp: Fingerprint) -> Result<bool, Error>;
    /// Add a request to a host's queue.
    fn push(&mut self, host: &str, entry: Entry) -> Result<(), Error>;
    /// Take the host's best request (highest priority, then oldest) under a new lease.
    fn lease(&mut self, host: &str) -> Result<Option<(u64, Request)>, Error>;
    /// Forget a leased request: it reached a terminal state.
    fn ack(&mut self, lease: u64) -> Result<(), Error>;
    /// Requests queued for one host (not counting leased ones).
    fn host_len(&self, host: &str) -> usize;
    /// Whether the store holds a request of `host` already leased for the next
    /// [`QueueStore::lease`] of the host, which it hands out only soon (a shared store that
    /// grants two requests of an open host in one round trip): the frontier serves the host
    /// first.
    fn leased_ahead(&self, _host: &str) -> bool {
        false
    }
    /// Requests queued across all hosts (not counting leased ones).
    fn queued(&self) -> usize;
    /// Hosts that have queued requests (used to rebuild scheduling state on resume).
    fn hosts(&self) -> Vec<String>;
    /// A sequence number larger than any stored, so new entries sort after old ones.
    fn next_seq(&self) -> u64;
    /// Save the crawl's stats and make everything durable (persistent stores).
    fn checkpoint(&mut self, _stats: &serde_json::Value) -> Result<(), Error> {
        Ok(())
    }
    /// Stats saved by [`QueueStore::checkpoint`] in an earlier run.
    fn saved_stats(&self) -> Option<serde_json::Value> {
        None
    }
    /// Send anything buffered (pushes, acknowledgements) to the backing store now, for
    /// stores that batch them (a shared store in Redis); others have nothing to do.
    fn send_buffered(&mut self) -> Result<(), Error> {
        Ok(())
    }
    /// Whether [`QueueStore::save_host_states`] keeps anything (persistent stores): the
    /// frontier serialises host states only for a store that does.
    fn keeps_host_states(&self) -> bool {
        false
    }
    /// Keep each host's politeness state (running holds, learned rates) for a resume.
    fn save_host_states(&mut self, _states: &[(String, serde_json::Value)]) -> Result<(), Error> {
        Ok(())
    }
    /// Host states kept by an earlier run.
    fn host_states(&self) -> Vec<(String, serde_json::Value)> {
        Vec::new()
    }
}

/// Lets a frontier choose its store at run time (memory, sled, Redis) behind one type.
impl QueueStore for Box<dyn QueueStore> {
    fn insert_seen(&mut self, fp: Fingerprint) -> Result<bool, Error> {
        (**self).insert_seen(fp)
    }
    fn push(&mut self, host: &str, entry: Entry) -> Result<(), Error> {
        (**self).push(host, entry)
    }
    fn lease(&mut self, host: &str) -> Result<Option<(u64, Request)>, Error> {
        (**self).lease(host)
    }
    fn ack(&mut self, lease: u64) -> Result<(), Error> {
        (**self).ack(lease)
    }
    fn host_len(&self, host: &str) -> usize {
        (**self).host_len(host)
    }
    fn leased_ahead(&self, host: &str) -> bool {
        (**self).leased_ahead(host)
    }
    fn queued(&self) -> usize {
        (**self).queued()
    }
    fn hosts(&self) -> Vec<String> {
        (**self).hosts()
    }
    fn next_seq(&self) -> u64 {
        (**self).next_seq()
    }
    fn checkpoint(&mut self, stats: &serde_json::Value) -> Result<(), Error> {
        (**self).checkpoint(stats)
    }
    fn saved_stats(&self) -> Option<serde_json::Value> {
        (**self).saved_stats()
    }
    fn send_buffered(&mut self) -> Result<(), Error> {
        (**self).send_buffered()
    }
    fn keeps_host_states(&self) -> bool {
        (**self).keeps_host_states()
    }
    fn save_host_states(&mut self, states: &[(String, serde_json::Value)]) -> Result<(), Error> {
        (**self).save_host_states(states)
    }
    fn host_states(&self) -> Vec<(String, serde_json::Value)> {
        (**self).host_states()
    }
}

/// The default, in-memory store.
#[derive(Default)]
pub struct MemoryStore {
    seen: HashSet<u128, FpBuild>,
    queues: HashMap<String, BinaryHeap<Entry>>,
    leases: HashMap<u64, ()>,
    next_lease: u64,
    queued: usize,
    max_seq: u64,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl QueueStore for MemoryStore {
    fn insert_seen(&mut self, fp: Fingerprint) -> Result<bool, Error> {
        Ok(self.seen.insert(fp.0))
    }

    fn push(&mut self, host: &str, entry: Entry) -> Result<(), Error> {
        self.max_seq = self.max_seq.max(entry.seq);
        match self.queues.get_mut(host) {
            Some(q) => q.push(entry),
            None => {
                self.queues
                    .insert(host.to_owned(), BinaryHeap::from([entry]));
            }
        }
        self.queued += 1;
        Ok(())
    }

    fn lease(&mut self, host: &str) -> Result<Option<(u64, Request)>, Error> {
        let Some(queue) = self.queues.get_mut(host) else {
            return Ok(None);
        };
        let Some(entry) = queue.pop() else {
            return Ok(None);
        };
        if queue.is_empty() {
            // An emptied queue goes, so memory follows the hosts with work, not every host
            // ever seen.
            self.queues.remove(host);
        }
        self.queued -= 1;
        self.next_lease += 1;
        // Memory leases need no payload: nothing survives the process anyway.
        self.leases.insert(self.next_lease, ());
        Ok(Some((self.next_lease, entry.request)))
    }

    fn ack(&mut self, lease: u64) -> Result<(), Error> {
        self.leases.remove(&lease);
        Ok(())
    }

    fn host_len(&self, host: &str) -> usize {
        self.queues.get(host).map_or(0, BinaryHeap::len)
    }

    fn queued(&self) -> usize {
        self.queued
    }

    fn hosts(&self) -> Vec<String> {
        self.queues
            .iter()
            .filter(|(_, q)| !q.is_empty())
            .map(|(h, _)| h.clone())
            .collect()
    }

    fn next_seq(&self) -> u64 {
        self.max_seq + 1
    }
}
