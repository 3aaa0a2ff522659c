//! [`SledStore`]: the frontier, seen set and leases of one crawl job, on sled.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crawler_core::Request;
use crawler_sched::{Entry, Fingerprint, QueueStore};

use crate::cache::CacheStore;
use crate::db::{open_db, open_tree};
use crate::error::Error;
use crate::keys::{
    self, CHUNK, CURSOR, HOST, LEASE, LeaseOrigin, SEEN_LOG, StoredEntry, WATERMARK,
};
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
            // Settings first: the spider name is what marks the directory as claimed, so a
            // crash between the two writes leaves a directory that is claimed afresh.
            let write = |e| Error::sled(dir, "write the job metadata", e);
            meta.insert(META_SETTINGS, settings.as_bytes())
                .map_err(write)?;
            meta.insert(META_SPIDER, spider.as_bytes()).map_err(write)?;
            return Ok(());
        }
    }
    match meta.get(META_SETTINGS).map_err(read)?.map(text) {
        Some(stored) if stored != settings => Err(Error::mismatch_settings(dir, stored, settings)),
        _ => Ok(()),
    }
}

/// Bring the frontier tree back to "everything queued, nothing leased". Every step is a
/// single-key write ordered so that a crash during recovery is recovered by the next open.
fn recover(frontier: &sled::Tree, dir: &Path) -> Result<usize, Error> {
    let read = |e| Error::sled(dir, "read the frontier", e);
    let write = |e| Error::sled(dir, "recover the frontier", e);
    let bad =
        |what: &str| Error::corrupt(dir, format!("a {what} record of the frontier is damaged"));
    let cursor_of = |chunk: &[u8]| -> Result<u32, Error> {
        match frontier.get(keys::cursor_key(chunk)).map_err(read)? {
            Some(v) => keys::u32_at(&v, 0).ok_or_else(|| bad("cursor")),
            None => Ok(0),
        }
    };

    // 1. Decide for each lease, while the cursors still tell what was consumed, whether
    // its request is still queued: `lease` writes the lease record before it advances the
    // cursor, and a crash between the two leaves the request in its chunk as well.
    let mut leases = Vec::new();
    for kv in frontier.scan_prefix([LEASE]) {
        let (key, record) = kv.map_err(read)?;
        let (origin, _) = keys::parse_lease(&record).ok_or_else(|| bad("lease"))?;
        let still_queued = frontier.contains_key(origin.chunk).map_err(read)?
            && cursor_of(&origin.chunk)? <= origin.index;
        leases.push((key, record, still_queued));
    }

    // 2. Cut the consumed entries off partly leased chunks, re-keyed by their new first
    // seq, so that the requests returned below (older) sort before them.
    let mut cursors = Vec::new();
    for kv in frontier.scan_prefix([CURSOR]) {
        let (k, v) = kv.map_err(read)?;
        let n = keys::u32_at(&v, 0).ok_or_else(|| bad("cursor"))?;
        cursors.push((k.subslice(1, k.len() - 1), n));
    }
    for (chunk_key, consumed) in cursors {
        let (host, priority, _) = keys::parse_chunk_key(&chunk_key).ok_or_else(|| bad("cursor"))?;
        if let Some(chunk) = frontier.get(&chunk_key).map_err(read)? {
            let mut at = 0;
            for _ in 0..consumed {
                at = keys::entry_at(&chunk, at).ok_or_else(|| bad("chunk"))?.1;
            }
            // Insert the rest before removing the whole, and the cursor last: a crash in
            // between leaves the cursor, and the next open repeats this step (writing the
            // same key again), or finds the old chunk gone and only drops the cursor.
            if at < chunk.len() {
                let (first, _) = keys::entry_at(&chunk, at).ok_or_else(|| bad("chunk"))?;
                let rest = keys::chunk_key(host, priority, first.seq);
                frontier.insert(rest, &chunk[at..]).map_err(write)?;
            }
            frontier.remove(&chunk_key).map_err(write)?;
        }
        frontier
            .remove(keys::cursor_key(&chunk_key))
            .map_err(write)?;
    }

    // 3. Return the leases to their queues, each as a chunk keyed by its own seq. A crash
    // after step 2 is safe: the old chunk key is gone, so the lease is returned next time.
    let mut requeued = 0;
    for (lease_key, record, still_queued) in leases {
        if !still_queued {
            let (origin, entry) = keys::parse_lease(&record).ok_or_else(|| bad("lease"))?;
            let key = keys::chunk_key(origin.host, origin.priority, entry.seq);
            // Normally no chunk starts at this seq (it was consumed); one does if an earlier
            // recovery stopped after this write: merge rather than overwrite.
            let existing = frontier.get(key).map_err(read)?;
            let mut entries = vec![entry];
            if let Some(existing) = &existing {
                let mut at = 0;
                while at < existing.len() {
                    let (e, next) = keys::entry_at(existing, at).ok_or_else(|| bad("chunk"))?;
                    if e.seq != entry.seq {
                        entries.push(e);
                    }
                    at = next;
                }
                entries.sort_by_key(|e| e.seq);
            }
            let mut chunk = Vec::new();
            for e in entries {
                keys::put_entry(&mut chunk, e);
            }
            frontier.insert(key, chunk).map_err(write)?;
            requeued += 1;
        }
        frontier.remove(lease_key).map_err(write)?;
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

        let watermark = match frontier.get(WATERMARK).map_err(read)? {
            Some(v) => keys::u64_at(&v, 0).ok_or_else(|| bad("watermark"))?,
            None => 0,
        };
        let mut seen = SeenSet::open(seen_tree, &options, &path)?;
        let (mut queued, mut max_seq) = (0, watermark);
        for kv in frontier.scan_prefix([CHUNK]) {
            let (k, v) = kv.map_err(read)?;
            let (host, priority, _) = keys::parse_chunk_key(&k).ok_or_else(|| bad("chunk"))?;
            let h = hosts
                .get_mut(host as usize)
                .filter(|h| h.named)
                .ok_or_else(|| bad("chunk"))?;
            let (mut at, mut n) = (0, 0);
            while at < v.len() {
                let (e, next) = keys::entry_at(&v, at).ok_or_else(|| bad("chunk"))?;
                max_seq = max_seq.max(e.seq);
                // Queued after the last merge: its fingerprint lives only here and in
                // the memtable, which was lost with the process.
                if let Some(fp) = e.fp.filter(|_| e.seq > watermark) {
                    seen.remember(fp);
                }
                at = next;
                n += 1;
            }
            h.streams.entry(priority).or_default().on_disk += n;
            h.len += n;
            queued += n;
        }
        let mut next_log = 0;
        for kv in frontier.scan_prefix([SEEN_LOG]) {
            let (k, v) = kv.map_err(read)?;
            next_log = keys::u64_at(&k, 1).ok_or_else(|| bad("seen-log"))? + 1;
            seen.remember_log(&v, &path)?;
        }

        Ok(Self {
            path,
            frontier,
            options,
            hosts,
            ids,
            seen,
            last_seen: None,
            leases: HashMap::new(),
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

    /// Write every buffered request to sled: new host names first, then chunks.
    ///
    /// Each chunk is one insert carrying its requests with their fingerprints, so a crash
    /// never leaves a request on disk without its fingerprint or the reverse. Single-key
    /// writes, not `apply_batch`: sled 0.34's batches measured 30,000/s and held on to
    /// memory (270 MB after 200,000 small batches); nothing here needs more than the
    /// prefix order of sled's log.
    fn sync(&mut self) -> Result<(), Error> {
        if self.dirty.is_empty() {
            return Ok(());
        }
        let chunk_bytes = self.options.chunk_bytes.max(1);
        let dirty = std::mem::take(&mut self.dirty);
        for &id in &dirty {
            let Some(host) = self.hosts.get_mut(id as usize) else {
                continue;
            };
            if !host.named {
                self.frontier
                    .insert(keys::host_key(id), host.name.as_bytes())
                    .map_err(|e| Error::sled(&self.path, "write a host name", e))?;
                host.named = true;
            }
        }
        for id in dirty {
            let Some(host) = self.hosts.get_mut(id as usize) else {
                continue;
            };
            host.dirty = false;
            for (&priority, stream) in &mut host.streams {
                let mut chunk = Vec::new();
                let mut first = None;
                let tail = std::mem::take(&mut stream.tail);
                let last = tail.len().saturating_sub(1);
                for (i, t) in tail.iter().enumerate() {
                    first.get_or_insert(t.seq);
                    keys::put_entry(
                        &mut chunk,
                        StoredEntry {
                            seq: t.seq,
                            fp: t.fp,
                            request: &t.request,
                        },
                    );
                    if chunk.len() >= chunk_bytes || i == last {
                        let key = keys::chunk_key(id, priority, first.take().unwrap_or(t.seq));
                        self.frontier
                            .insert(key, std::mem::take(&mut chunk))
                            .map_err(|e| Error::sled(&self.path, "write queued requests", e))?;
                    }
                }
                stream.on_disk += tail.len();
            }
        }
        self.buffered = 0;
        Ok(())
    }

    /// Merge the seen memtable into the on-disk set, then move the watermark and cut the
    /// seen log. A crash anywhere in here puts the same fingerprints back on open (from the
    /// log and from entries above the old watermark), and merging again is harmless.
    fn merge_seen(&mut self) -> Result<(), Error> {
        self.sync()?;
        self.seen.merge(&self.path)?;
        self.frontier
            .insert(WATERMARK, &self.max_seq.to_be_bytes())
            .map_err(self.sled_err("write the seen watermark"))?;
        for k in self.frontier.scan_prefix([SEEN_LOG]).keys() {
            let k = k.map_err(self.sled_err("read the seen log"))?;
            self.frontier
                .remove(k)
                .map_err(self.sled_err("cut the seen log"))?;
        }
        Ok(())
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

    fn insert_seen(&mut self, fp: u128) -> Result<bool, Error> {
        let new = self.seen.insert(fp, &self.path)?;
        self.last_seen = new.then_some(fp);
        Ok(new)
    }

    fn push(&mut self, host: &str, entry: Entry) -> Result<(), Error> {
        let request =
            serde_json::to_vec(&entry.request).map_err(|e| Error::encode(&self.path, e))?;
        // The frontier records a request's fingerprint just before pushing it (unless the
        // request skips the duplicate filter); the entry carries it, which is what makes it
        // durable (see `sync`). Checked, so that a caller with another call order still
        // gets a correct, if less compact, store.
        let fp = self
            .last_seen
            .take()
            .filter(|&fp| crawler_sched::fingerprint(&entry.request).0 == fp);
        let id = self.host_id(host);
        self.buffered += request.len() + 29;
        let Some(h) = self.hosts.get_mut(id as usize) else {
            return Err(Error::corrupt(&self.path, "host index out of range"));
        };
        let tail = &mut h.streams.entry(entry.priority).or_default().tail;
        // The frontier pushes in increasing seq order; keep the tail sorted all the same.
        let at = tail.partition_point(|t| t.seq <= entry.seq);
        tail.insert(
            at,
            Buffered {
                seq: entry.seq,
                fp,
                request,
            },
        );
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
            // has a place on disk that the lease can point to.
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
        let (entry, next) =
            keys::entry_at(&chunk, head.offset).ok_or_else(|| bad("a chunk is damaged"))?;
        let request: Request = serde_json::from_slice(entry.request)
            .map_err(|e| bad(&format!("a queued request does not decode: {e}")))?;

        // Crash safety without a multi-key transaction: the lease record (which carries
        // the whole entry) is written first, then the queue position moves. A crash
        // between the two leaves the entry both queued and leased; recovery sees that the
        // cursor has not passed the lease's index and drops the lease record instead of
        // queuing the request twice. A crash before the first write loses nothing, and
        // after the second the lease is returned to its queue on open.
        let lease = self.next_lease;
        let origin = LeaseOrigin {
            host: id,
            priority,
            chunk: head.key,
            index: head.cursor,
        };
        let write = |e| Error::sled(path, "lease a request", e);
        self.frontier
            .insert(keys::lease_key(lease), keys::lease_value(origin, entry))
            .map_err(write)?;
        if next >= chunk.len() {
            self.frontier.remove(head.key).map_err(write)?;
            if head.cursor > 0 {
                self.frontier
                    .remove(keys::cursor_key(&head.key))
                    .map_err(write)?;
            }
            stream.head = None;
        } else {
            let cursor = head.cursor + 1;
            self.frontier
                .insert(keys::cursor_key(&head.key), &cursor.to_be_bytes())
                .map_err(write)?;
            stream.head = Some(Head {
                cursor,
                offset: next,
                ..head
            });
        }
        self.next_lease += 1;
        self.leases.insert(lease, entry.fp);
        stream.on_disk -= 1;
        if stream.on_disk == 0 && stream.tail.is_empty() {
            h.streams.remove(&priority);
        }
        h.len -= 1;
        self.queued -= 1;
        Ok(Some((lease, request)))
    }

    fn ack(&mut self, lease: u64) -> Result<(), Error> {
        // Requests pushed while this one was handled (the links found on its page) reach
        // the disk before its acknowledgement, so no crash point has the parent done and
        // the children lost.
        self.sync()?;
        // The lease record may be the last on-disk copy of a fingerprint not merged yet;
        // keep it in the seen log before the record goes.
        if let Some(fp) = self.leases.remove(&lease).flatten()
            && self.seen.in_memtable(fp)
        {
            self.frontier
                .insert(keys::seen_log_key(self.next_log), &fp.to_be_bytes())
                .map_err(self.sled_err("write the seen log"))?;
            self.next_log += 1;
        }
        self.frontier
            .remove(keys::lease_key(lease))
            .map_err(self.sled_err("acknowledge a lease"))?;
        Ok(())
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
