//! [`SledStore`]: the frontier, seen set and leases of one crawl job, on sled.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crawler_core::Request;
use crawler_sched::{Entry, Fingerprint, QueueStore};
use sled::Batch;

use crate::cache::CacheStore;
use crate::db::{open_db, open_tree};
use crate::error::Error;
use crate::keys::{self, CHUNK, CURSOR, HOST, LEASE, SEEN_LOG};
use crate::options::StoreOptions;
use crate::seen::SeenSet;
use crate::validators::ValidatorStore;

/// Version of the on-disk layout, checked on open.
const FORMAT: &[u8] = b"crawler-store/1";
const META_FORMAT: &str = "format";
const META_SPIDER: &str = "spider";
const META_SETTINGS: &str = "settings";
const META_STATS: &str = "stats";

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
    /// Requests pushed since the last sync (seq, request JSON), newer than anything on disk.
    tail: Vec<(u64, Vec<u8>)>,
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

fn check_format(meta: &sled::Tree, dir: &Path) -> Result<(), Error> {
    let read = |e| Error::sled(dir, "read the job metadata", e);
    match meta.get(META_FORMAT).map_err(read)? {
        Some(f) if f == FORMAT => Ok(()),
        Some(f) => Err(Error::corrupt(
            dir,
            format!(
                "unknown layout {:?} (this version reads {:?})",
                String::from_utf8_lossy(&f),
                String::from_utf8_lossy(FORMAT)
            ),
        )),
        None => {
            meta.insert(META_FORMAT, FORMAT)
                .map_err(|e| Error::sled(dir, "write the job metadata", e))?;
            Ok(())
        }
    }
}

fn check_job(meta: &sled::Tree, dir: &Path, spider: &str, settings: &str) -> Result<(), Error> {
    let read = |e| Error::sled(dir, "read the job metadata", e);
    let text = |v: sled::IVec| String::from_utf8_lossy(&v).into_owned();
    match meta.get(META_SPIDER).map_err(read)?.map(text) {
        Some(stored) if stored != spider => {
            return Err(Error::mismatch_spider(dir, stored, spider));
        }
        Some(_) => {}
        None => {
            let mut b = Batch::default();
            b.insert(META_SPIDER, spider.as_bytes());
            b.insert(META_SETTINGS, settings.as_bytes());
            meta.apply_batch(b)
                .map_err(|e| Error::sled(dir, "write the job metadata", e))?;
            return Ok(());
        }
    }
    match meta.get(META_SETTINGS).map_err(read)?.map(text) {
        Some(stored) if stored != settings => Err(Error::mismatch_settings(dir, stored, settings)),
        _ => Ok(()),
    }
}

/// Bring the frontier tree back to "everything queued, nothing leased": cut consumed
/// entries off partly leased chunks, then return every lease to its queue. Each step is one
/// atomic batch and can be repeated, so a crash during recovery is recovered next time.
fn recover(frontier: &sled::Tree, dir: &Path) -> Result<usize, Error> {
    let read = |e| Error::sled(dir, "read the frontier", e);
    let write = |e| Error::sled(dir, "recover the frontier", e);
    let bad =
        |what: &str| Error::corrupt(dir, format!("a {what} record of the frontier is damaged"));

    let mut cursors = Vec::new();
    for kv in frontier.scan_prefix([CURSOR]) {
        let (k, v) = kv.map_err(read)?;
        let n = keys::u32_at(&v, 0).ok_or_else(|| bad("cursor"))?;
        cursors.push((k.subslice(1, k.len() - 1), n));
    }
    for (chunk_key, consumed) in cursors {
        let (host, priority, _) = keys::parse_chunk_key(&chunk_key).ok_or_else(|| bad("cursor"))?;
        let mut batch = Batch::default();
        batch.remove(keys::cursor_key(&chunk_key));
        if let Some(chunk) = frontier.get(&chunk_key).map_err(read)? {
            batch.remove(&chunk_key);
            let mut at = 0;
            for _ in 0..consumed {
                at = keys::entry_at(&chunk, at).ok_or_else(|| bad("chunk"))?.2;
            }
            if at < chunk.len() {
                let (first, _, _) = keys::entry_at(&chunk, at).ok_or_else(|| bad("chunk"))?;
                batch.insert(&keys::chunk_key(host, priority, first), &chunk[at..]);
            }
        }
        frontier.apply_batch(batch).map_err(write)?;
    }

    let mut leases = Vec::new();
    for kv in frontier.scan_prefix([LEASE]) {
        leases.push(kv.map_err(read)?);
    }
    let requeued = leases.len();
    for (lease_key, record) in leases {
        let (host, priority, seq, request) =
            keys::parse_lease(&record).ok_or_else(|| bad("lease"))?;
        let key = keys::chunk_key(host, priority, seq);
        // Normally no chunk starts at this seq (it was consumed); if one does (an earlier
        // recovery was cut short), merge rather than overwrite.
        let mut entries: Vec<(u64, Vec<u8>)> = vec![(seq, request.to_vec())];
        if let Some(existing) = frontier.get(key).map_err(read)? {
            let mut at = 0;
            while at < existing.len() {
                let (s, r, next) = keys::entry_at(&existing, at).ok_or_else(|| bad("chunk"))?;
                if s != seq {
                    entries.push((s, r.to_vec()));
                }
                at = next;
            }
            entries.sort_by_key(|e| e.0);
        }
        let mut chunk = Vec::new();
        for (s, r) in &entries {
            keys::put_entry(&mut chunk, *s, r);
        }
        let mut batch = Batch::default();
        batch.remove(lease_key);
        batch.insert(&key, chunk);
        frontier.apply_batch(batch).map_err(write)?;
    }
    Ok(requeued)
}

impl Queues {
    fn load(
        path: PathBuf,
        frontier: sled::Tree,
        seen_tree: sled::Tree,
        options: StoreOptions,
    ) -> Result<Self, Error> {
        let read = |e| Error::sled(&path, "read the frontier", e);
        let bad = |what: &str| {
            Error::corrupt(&path, format!("a {what} record of the frontier is damaged"))
        };

        let mut hosts: Vec<HostQueue> = Vec::new();
        let mut ids = HashMap::new();
        for kv in frontier.scan_prefix([HOST]) {
            let (k, v) = kv.map_err(read)?;
            let id = keys::u32_at(&k, 1).ok_or_else(|| bad("host"))?;
            let name = String::from_utf8(v.to_vec()).map_err(|_| bad("host"))?;
            let slot = id as usize;
            if hosts.len() <= slot {
                hosts.resize_with(slot + 1, HostQueue::default);
            }
            ids.insert(name.clone(), id);
            hosts[slot] = HostQueue {
                name,
                named: true,
                ..HostQueue::default()
            };
        }

        let (mut queued, mut max_seq) = (0, 0);
        for kv in frontier.scan_prefix([CHUNK]) {
            let (k, v) = kv.map_err(read)?;
            let (host, priority, _) = keys::parse_chunk_key(&k).ok_or_else(|| bad("chunk"))?;
            let h = hosts
                .get_mut(host as usize)
                .filter(|h| h.named)
                .ok_or_else(|| bad("chunk"))?;
            let (mut at, mut n) = (0, 0);
            while at < v.len() {
                let (seq, _, next) = keys::entry_at(&v, at).ok_or_else(|| bad("chunk"))?;
                max_seq = max_seq.max(seq);
                at = next;
                n += 1;
            }
            h.streams.entry(priority).or_default().on_disk += n;
            h.len += n;
            queued += n;
        }

        let mut log = Vec::new();
        let mut next_log = 0;
        for kv in frontier.scan_prefix([SEEN_LOG]) {
            let (k, v) = kv.map_err(read)?;
            next_log = keys::u64_at(&k, 1).ok_or_else(|| bad("seen-log"))? + 1;
            log.push(v);
        }
        let seen = SeenSet::open(seen_tree, log, &options, &path)?;

        Ok(Self {
            path,
            frontier,
            options,
            hosts,
            ids,
            seen,
            queued,
            max_seq,
            next_lease: 1,
            next_log,
            buffered: 0,
            dirty: Vec::new(),
        })
    }

    fn sled_err(&self, action: &'static str) -> impl Fn(sled::Error) -> Error + '_ {
        move |e| Error::sled(&self.path, action, e)
    }

    /// Write every buffered request, with the seen-log record of the fingerprints admitted
    /// since the last sync, in one atomic batch.
    ///
    /// Why one batch: a fingerprint on disk without its request would make a crash lose
    /// that URL for good (it would be filtered as seen when rediscovered), and a request on
    /// disk without its fingerprint could be admitted twice after a restart.
    fn sync(&mut self) -> Result<(), Error> {
        let log = self.seen.take_unlogged();
        if log.is_none() && self.dirty.is_empty() {
            return Ok(());
        }
        let mut batch = Batch::default();
        if let Some(record) = log {
            batch.insert(&keys::seen_log_key(self.next_log), record);
            self.next_log += 1;
        }
        let chunk_bytes = self.options.chunk_bytes.max(1);
        for id in std::mem::take(&mut self.dirty) {
            let Some(host) = self.hosts.get_mut(id as usize) else {
                continue;
            };
            host.dirty = false;
            if !host.named {
                batch.insert(&keys::host_key(id), host.name.as_bytes());
                host.named = true;
            }
            for (&priority, stream) in &mut host.streams {
                if stream.tail.is_empty() {
                    continue;
                }
                let mut chunk = Vec::new();
                let mut first = None;
                for (seq, request) in std::mem::take(&mut stream.tail) {
                    first.get_or_insert(seq);
                    keys::put_entry(&mut chunk, seq, &request);
                    stream.on_disk += 1;
                    if chunk.len() >= chunk_bytes {
                        let key = keys::chunk_key(id, priority, first.take().unwrap_or(seq));
                        batch.insert(&key, std::mem::take(&mut chunk));
                    }
                }
                if let Some(first) = first {
                    batch.insert(&keys::chunk_key(id, priority, first), chunk);
                }
            }
        }
        self.buffered = 0;
        self.frontier
            .apply_batch(batch)
            .map_err(self.sled_err("write queued requests"))
    }

    /// Merge the seen memtable into the on-disk set, then cut the seen log.
    fn merge_seen(&mut self) -> Result<(), Error> {
        // Every memtable fingerprint must be in the log before the merge starts, so a crash
        // during it replays the log (merging is idempotent).
        self.sync()?;
        self.seen.merge(&self.path)?;
        let mut batch = Batch::default();
        for k in self.frontier.scan_prefix([SEEN_LOG]).keys() {
            batch.remove(k.map_err(self.sled_err("read the seen log"))?);
        }
        self.frontier
            .apply_batch(batch)
            .map_err(self.sled_err("cut the seen log"))
    }

    fn host_id(&mut self, host: &str) -> u32 {
        if let Some(&id) = self.ids.get(host) {
            return id;
        }
        let id = self.hosts.len() as u32;
        self.hosts.push(HostQueue {
            name: host.to_owned(),
            ..HostQueue::default()
        });
        self.ids.insert(host.to_owned(), id);
        id
    }

    fn push(&mut self, host: &str, entry: Entry) -> Result<(), Error> {
        let request =
            serde_json::to_vec(&entry.request).map_err(|e| Error::encode(&self.path, e))?;
        let id = self.host_id(host);
        self.buffered += request.len() + 12;
        let Some(h) = self.hosts.get_mut(id as usize) else {
            return Err(Error::corrupt(&self.path, "host index out of range"));
        };
        let tail = &mut h.streams.entry(entry.priority).or_default().tail;
        // The frontier pushes in increasing seq order; keep the tail sorted all the same.
        let at = tail.partition_point(|(s, _)| *s <= entry.seq);
        tail.insert(at, (entry.seq, request));
        h.len += 1;
        if !h.dirty {
            h.dirty = true;
            self.dirty.push(id);
        }
        self.queued += 1;
        self.max_seq = self.max_seq.max(entry.seq);
        if self.buffered >= self.options.write_buffer_bytes {
            self.sync()?;
        }
        if self.seen.memtable_full() {
            self.merge_seen()?;
        }
        Ok(())
    }

    fn lease(&mut self, host: &str) -> Result<Option<(u64, Request)>, Error> {
        let Some(&id) = self.ids.get(host) else {
            return Ok(None);
        };
        let Some(h) = self.hosts.get(id as usize) else {
            return Ok(None);
        };
        let Some((&priority, stream)) = h.streams.last_key_value() else {
            return Ok(None);
        };
        if stream.on_disk == 0 {
            // The best request is still buffered: write the buffer, so that what is leased
            // is on disk first and the lease below can point into a chunk.
            self.sync()?;
        }
        let path = &self.path;
        let bad = |what: &str| Error::corrupt(path, format!("host {host}: {what}"));
        let Some(h) = self.hosts.get_mut(id as usize) else {
            return Ok(None);
        };
        let Some(stream) = h.streams.get_mut(&priority) else {
            return Ok(None);
        };
        let head = match stream.head {
            Some(head) => head,
            None => {
                let first = self
                    .frontier
                    .scan_prefix(keys::stream_prefix(id, priority))
                    .keys()
                    .next()
                    .transpose()
                    .map_err(|e| Error::sled(path, "read the frontier", e))?
                    .ok_or_else(|| bad("queued requests are counted but no chunk holds them"))?;
                Head {
                    key: first
                        .as_ref()
                        .try_into()
                        .map_err(|_| bad("a chunk key is damaged"))?,
                    cursor: 0,
                    offset: 0,
                }
            }
        };
        let chunk = self
            .frontier
            .get(head.key)
            .map_err(|e| Error::sled(path, "read the frontier", e))?
            .ok_or_else(|| bad("a chunk being consumed disappeared"))?;
        let (seq, bytes, next) =
            keys::entry_at(&chunk, head.offset).ok_or_else(|| bad("a chunk is damaged"))?;
        let request: Request = serde_json::from_slice(bytes)
            .map_err(|e| bad(&format!("a queued request does not decode: {e}")))?;

        // Lease record and queue position move in one atomic batch: after a crash either
        // the entry is still queued (no lease), or it is leased and no longer queued; the
        // lease record holds the whole request, so reopening puts it back.
        let lease = self.next_lease;
        let mut batch = Batch::default();
        batch.insert(
            &keys::lease_key(lease),
            keys::lease_value(id, priority, seq, bytes),
        );
        if next >= chunk.len() {
            batch.remove(&head.key);
            if head.cursor > 0 {
                batch.remove(keys::cursor_key(&head.key));
            }
            stream.head = None;
        } else {
            let cursor = head.cursor + 1;
            batch.insert(keys::cursor_key(&head.key), &cursor.to_be_bytes());
            stream.head = Some(Head {
                cursor,
                offset: next,
                ..head
            });
        }
        self.frontier
            .apply_batch(batch)
            .map_err(|e| Error::sled(path, "lease a request", e))?;
        self.next_lease += 1;
        stream.on_disk -= 1;
        if stream.on_disk == 0 && stream.tail.is_empty() {
            h.streams.remove(&priority);
        }
        h.len -= 1;
        self.queued -= 1;
        Ok(Some((lease, request)))
    }

    fn ack(&mut self, lease: u64) -> Result<(), Error> {
        // Requests pushed while this one was being handled (its links) reach the disk
        // before its acknowledgement, so no crash point has the parent done and the
        // children lost.
        self.sync()?;
        self.frontier
            .remove(keys::lease_key(lease))
            .map_err(self.sled_err("acknowledge a lease"))?;
        Ok(())
    }
}

impl QueueStore for SledStore {
    fn insert_seen(&mut self, fp: Fingerprint) -> Result<bool, crawler_sched::Error> {
        let q = self.queues();
        Ok(q.seen.insert(fp.0, &q.path)?)
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
}
