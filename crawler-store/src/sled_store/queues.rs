//! The in-memory index over the frontier tree: loading it on open, buffering pushes, writing
//! them as chunks, and merging the seen set.

use std::collections::HashMap;
use std::path::PathBuf;

use crawler_sched::Entry;

use super::{Buffered, HostQueue, Queues};
use crate::error::Error;
use crate::keys::{self, CHUNK, HOST, SEEN_LOG, StoredEntry, WATERMARK};
use crate::options::StoreOptions;
use crate::seen::SeenSet;

impl Queues {
    pub(super) fn load(
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

    pub(super) fn sled_err(&self, action: &'static str) -> impl Fn(sled::Error) -> Error + '_ {
        move |e| Error::sled(&self.path, action, e)
    }

    /// Write every buffered request to sled: new host names first, then chunks.
    ///
    /// Each chunk is one insert carrying its requests with their fingerprints, so a crash
    /// never leaves a request on disk without its fingerprint or the reverse. Single-key
    /// writes, not `apply_batch`: sled 0.34's batches measured 30,000/s and held on to
    /// memory (270 MB after 200,000 small batches); nothing here needs more than the
    /// prefix order of sled's log.
    pub(super) fn sync(&mut self) -> Result<(), Error> {
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

    pub(super) fn insert_seen(&mut self, fp: u128) -> Result<bool, Error> {
        let new = self.seen.insert(fp, &self.path)?;
        self.last_seen = new.then_some(fp);
        Ok(new)
    }

    pub(super) fn push(&mut self, host: &str, entry: Entry) -> Result<(), Error> {
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
}
