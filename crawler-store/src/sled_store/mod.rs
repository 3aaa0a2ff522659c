//! [`SledStore`]: the frontier, seen set and leases of one crawl job, on sled.
//!
//! This folder owns the sled job database's frontier: the on-disk layout of queues, leases
//! and seen marks (with the `keys` and `seen` modules), the in-memory index over it, and
//! the write order that makes every crash recoverable (see the crate docs). It must not
//! decide what to crawl or when: that is the frontier's (crawler-sched) job.
//!
//! - `mod.rs`: [`SledStore`] (opening, flushing, stats and host states, the
//!   [`QueueStore`] methods) and the in-memory index types.
//! - `meta`: the layout version and the job identity a directory records.
//! - `recover`: on open, every lease of an earlier run back to its queue.
//! - `queues`: loading the index, buffering pushes, writing chunks, merging the seen set.
//! - `lease`: handing a request out and acknowledging it, in crash-safe order.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crawler_core::Request;
use crawler_sched::{Entry, Fingerprint, QueueStore};

use crate::db::{open_db, open_tree};
use crate::error::Error;
use crate::http_cache::CacheStore;
use crate::http_cache::ValidatorStore;
use crate::keys;
use crate::options::StoreOptions;
use crate::seen::SeenSet;
use meta::{META_STATS, check_format, check_job};
use recover::recover;

mod lease;
mod meta;
mod queues;
mod recover;

/// A persistent [`QueueStore`] in a job directory: per-host priority queues, the seen set of
/// fingerprints, and leases, so a crawl can be paused, resumed and killed without losing a
/// request. See the [crate docs](crate) for the layout, the crash-safety argument and the
/// memory bound.
pub struct SledStore {
    path: PathBuf,
    db: sled::Db,
    meta: sled::Tree,
    host_state: sled::Tree,
    /// Behind a mutex only so that [`SledStore::flush`] can write buffered requests through
    /// `&self` (the frontier lends its store out immutably); the `&mut self` queue methods
    /// reach it with `get_mut`, which costs nothing.
    queues: Mutex<Queues>,
    requeued: usize,
}

/// The in-memory index: one small record per host and priority level, never per URL.
struct Queues {
    path: PathBuf,
    frontier: sled::Tree,
    options: StoreOptions,
    hosts: Vec<HostQueue>,
    ids: HashMap<String, u32>,
    seen: SeenSet,
    /// The fingerprint just recorded, to attach to the entry pushed next.
    last_seen: Option<u128>,
    /// Fingerprints of the requests leased in this run, by lease.
    leases: HashMap<u64, Option<u128>>,
    queued: usize,
    max_seq: u64,
    next_lease: u64,
    next_log: u64,
    /// Bytes of requests waiting in the tails.
    buffered: usize,
    /// Hosts with buffered requests or a name not yet written.
    dirty: Vec<u32>,
}

#[derive(Default)]
struct HostQueue {
    name: String,
    /// By priority; only non-empty streams are kept, so the last one is the one to serve.
    streams: BTreeMap<i32, Stream>,
    len: usize,
    dirty: bool,
    named: bool,
}

#[derive(Default)]
struct Stream {
    on_disk: usize,
    /// Position in the oldest on-disk chunk, once it is being consumed.
    head: Option<Head>,
    /// Requests pushed since the last sync, newer than anything on disk.
    tail: Vec<Buffered>,
}

struct Buffered {
    seq: u64,
    fp: Option<u128>,
    request: Vec<u8>,
}

#[derive(Clone, Copy)]
struct Head {
    key: [u8; keys::CHUNK_KEY_LEN],
    cursor: u32,
    offset: usize,
}

impl SledStore {
    /// Open (or create) the store in job directory `dir`, returning every unacknowledged
    /// lease of an earlier run to its queue (see [`SledStore::requeued_on_open`]).
    ///
    /// Fails with a clear error when `dir` is a file, is locked by another open store, or
    /// holds data that cannot be read.
    pub fn open(dir: &Path, options: StoreOptions) -> Result<Self, Error> {
        Self::open_inner(dir, options, None)
    }

    /// Like [`SledStore::open`], for a named job: a new directory records `spider` and
    /// `settings_digest` (any string that changes when settings change incompatibly); an
    /// existing one is refused, with both names in the message, unless they match.
    pub fn open_job(
        dir: &Path,
        spider: &str,
        settings_digest: &str,
        options: StoreOptions,
    ) -> Result<Self, Error> {
        Self::open_inner(dir, options, Some((spider, settings_digest)))
    }

    fn open_inner(
        dir: &Path,
        options: StoreOptions,
        job: Option<(&str, &str)>,
    ) -> Result<Self, Error> {
        let path = dir.to_owned();
        let db = open_db(dir, &options)?;
        let meta = open_tree(&db, dir, "meta")?;
        check_format(&meta, dir)?;
        if let Some((spider, settings)) = job {
            check_job(&meta, dir, spider, settings)?;
        }
        let frontier = open_tree(&db, dir, "frontier")?;
        let host_state = open_tree(&db, dir, "host_state")?;
        let seen_tree = open_tree(&db, dir, "seen")?;
        let requeued = recover(&frontier, dir)?;
        let queues = Queues::load(path.clone(), frontier, seen_tree, options)?;
        let store = Self {
            path,
            db,
            meta,
            host_state,
            queues: Mutex::new(queues),
            requeued,
        };
        if requeued > 0 {
            store.flush()?;
        }
        Ok(store)
    }

    /// How many leases of an earlier run (requests handed out and never acknowledged, for
    /// instance because the process was killed) were returned to their queues on open.
    pub fn requeued_on_open(&self) -> usize {
        self.requeued
    }

    /// The job directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Write buffered requests to sled and make everything durable on disk (fsync).
    ///
    /// Call it when pausing, at shutdown and after saving stats. Without it, a process kill
    /// loses at most the last `flush_every_ms` of writes and a power failure the same; what
    /// is lost is always a suffix of the history, so the rest stays consistent (see the
    /// crate docs).
    pub fn flush(&self) -> Result<(), Error> {
        self.lock().sync()?;
        self.db
            .flush()
            .map_err(|e| Error::sled(&self.path, "flush the job database", e))?;
        Ok(())
    }

    /// Store the crawl's stats so far (replacing what was stored).
    pub fn save_stats(&self, stats: &serde_json::Value) -> Result<(), Error> {
        let bytes = serde_json::to_vec(stats).map_err(|e| Error::encode(&self.path, e))?;
        self.meta
            .insert(META_STATS, bytes)
            .map_err(|e| Error::sled(&self.path, "save the stats", e))?;
        Ok(())
    }

    /// The stats saved by [`SledStore::save_stats`], if any.
    pub fn load_stats(&self) -> Result<Option<serde_json::Value>, Error> {
        let Some(bytes) = self
            .meta
            .get(META_STATS)
            .map_err(|e| Error::sled(&self.path, "load the stats", e))?
        else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::corrupt(&self.path, format!("the saved stats do not decode: {e}")))
    }

    /// Store the politeness state worth keeping for `host` (running holds, learned rate).
    pub fn save_host_state(&self, host: &str, state: &serde_json::Value) -> Result<(), Error> {
        let bytes = serde_json::to_vec(state).map_err(|e| Error::encode(&self.path, e))?;
        self.host_state
            .insert(host.as_bytes(), bytes)
            .map_err(|e| Error::sled(&self.path, "save a host's state", e))?;
        Ok(())
    }

    /// Every host state saved by [`SledStore::save_host_state`], sorted by host.
    pub fn load_host_states(&self) -> Result<Vec<(String, serde_json::Value)>, Error> {
        let mut out = Vec::new();
        for kv in self.host_state.iter() {
            let (k, v) = kv.map_err(|e| Error::sled(&self.path, "load host states", e))?;
            let host = String::from_utf8(k.to_vec())
                .map_err(|_| Error::corrupt(&self.path, "a host state key is not UTF-8"))?;
            let value = serde_json::from_slice(&v).map_err(|e| {
                Error::corrupt(
                    &self.path,
                    format!("the state of host {host} does not decode: {e}"),
                )
            })?;
            out.push((host, value));
        }
        Ok(out)
    }

    /// The conditional-request validators of this job (same database, tree `validators`).
    /// The handle is cheap to clone and usable from many tasks at once.
    pub fn validators(&self) -> Result<ValidatorStore, Error> {
        ValidatorStore::in_db(&self.db, &self.path)
    }

    /// The HTTP cache of this job (same database, trees `http_cache*`), keeping at most
    /// `max_bytes` of responses when given (oldest evicted first).
    pub fn http_cache(&self, max_bytes: Option<u64>) -> Result<CacheStore, Error> {
        CacheStore::in_db(&self.db, &self.path, max_bytes)
    }

    fn lock(&self) -> MutexGuard<'_, Queues> {
        // The queues hold no invariant a panic elsewhere could break half-way that sled's
        // own atomic batches do not already protect; carry on with the data.
        self.queues.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn queues(&mut self) -> &mut Queues {
        self.queues
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for SledStore {
    fn drop(&mut self) {
        // Best effort: a failure here is the same as a crash a moment earlier, which the
        // store is built to survive.
        let _ = self.flush();
    }
}

impl std::fmt::Debug for SledStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SledStore")
            .field("path", &self.path)
            .field("queued", &self.lock().queued)
            .finish_non_exhaustive()
    }
}

impl QueueStore for SledStore {
    fn insert_seen(&mut self, fp: Fingerprint) -> Result<bool, crawler_sched::Error> {
        Ok(self.queues().insert_seen(fp.0)?)
    }

    fn push(&mut self, host: &str, entry: Entry) -> Result<(), crawler_sched::Error> {
        Ok(self.queues().push(host, entry)?)
    }

    fn lease(&mut self, host: &str) -> Result<Option<(u64, Request)>, crawler_sched::Error> {
        Ok(self.queues().lease(host)?)
    }

    fn ack(&mut self, lease: u64) -> Result<(), crawler_sched::Error> {
        Ok(self.queues().ack(lease)?)
    }

    fn host_len(&self, host: &str) -> usize {
        let q = self.lock();
        q.ids
            .get(host)
            .and_then(|&id| q.hosts.get(id as usize))
            .map_or(0, |h| h.len)
    }

    fn queued(&self) -> usize {
        self.lock().queued
    }

    fn hosts(&self) -> Vec<String> {
        self.lock()
            .hosts
            .iter()
            .filter(|h| h.len > 0)
            .map(|h| h.name.clone())
            .collect()
    }

    fn next_seq(&self) -> u64 {
        self.lock().max_seq + 1
    }

    fn checkpoint(&mut self, stats: &serde_json::Value) -> Result<(), crawler_sched::Error> {
        self.save_stats(stats)?;
        Ok(self.flush()?)
    }

    fn saved_stats(&self) -> Option<serde_json::Value> {
        // Unreadable stats only cost the counters of the earlier run, never queued work.
        self.load_stats().ok().flatten()
    }

    fn keeps_host_states(&self) -> bool {
        true
    }

    fn save_host_states(
        &mut self,
        states: &[(String, serde_json::Value)],
    ) -> Result<(), crawler_sched::Error> {
        for (host, state) in states {
            self.save_host_state(host, state)?;
        }
        Ok(())
    }

    fn host_states(&self) -> Vec<(String, serde_json::Value)> {
        // Unreadable host states only cost what was learned about the hosts.
        self.load_host_states().unwrap_or_default()
    }
}
