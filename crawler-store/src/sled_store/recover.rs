//! Recovery on open: the frontier tree back to "everything queued, nothing leased".

use std::path::Path;

use crate::error::Error;
use crate::keys::{self, CURSOR, LEASE};

/// Bring the frontier tree back to "everything queued, nothing leased". Every step is a
/// single-key write ordered so that a crash during recovery is recovered by the next open.
pub(super) fn recover(frontier: &sled::Tree, dir: &Path) -> Result<usize, Error> {
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
