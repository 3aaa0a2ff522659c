//! Handing a queued request out under a lease, and acknowledging it: each a run of
//! single-key writes ordered so that any crash point is recoverable (see `recover`).

use crawler_core::Request;

use super::{Head, Queues};
use crate::error::Error;
use crate::keys::{self, LeaseOrigin};

impl Queues {
    pub(super) fn lease(&mut self, host: &str) -> Result<Option<(u64, Request)>, Error> {
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

    pub(super) fn ack(&mut self, lease: u64) -> Result<(), Error> {
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
