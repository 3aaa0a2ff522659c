//! Key and value layouts of the `frontier` tree.
//!
//! The frontier's records share one tree:
//!
//! | key                                         | value                                   |
//! |---------------------------------------------|-----------------------------------------|
//! | `h` host-id u32                             | host name                               |
//! | `q` host-id u32, flipped priority u32, seq u64 | chunk: entries `seq u64, has-fp u8, fp u128, len u32, request JSON` |
//! | `c` chunk key                               | entries of that chunk already leased (u32) |
//! | `l` lease-id u64                            | origin (host, priority, chunk key, index), entry |
//! | `s` log-number u64                          | seen-log record: 16-byte fingerprints   |
//! | `w`                                         | seen watermark: entries with a seq up to it have their fingerprint in the `seen` buckets |
//!
//! All integers are big-endian so byte order is numeric order. The priority is stored as
//! `!(p ^ 0x8000_0000)`, which sorts the highest priority first; a chunk is keyed by the seq
//! of its first entry, so within a host and priority, chunks sort oldest first.

pub(crate) const HOST: u8 = b'h';
pub(crate) const CHUNK: u8 = b'q';
pub(crate) const CURSOR: u8 = b'c';
pub(crate) const LEASE: u8 = b'l';
pub(crate) const SEEN_LOG: u8 = b's';
pub(crate) const WATERMARK: &[u8] = b"w";

pub(crate) const CHUNK_KEY_LEN: usize = 17;

pub(crate) fn flip_priority(p: i32) -> u32 {
    !((p as u32) ^ 0x8000_0000)
}

pub(crate) fn unflip_priority(f: u32) -> i32 {
    ((!f) ^ 0x8000_0000) as i32
}

pub(crate) fn host_key(id: u32) -> [u8; 5] {
    let mut k = [HOST, 0, 0, 0, 0];
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

/// The prefix of every chunk of one host and priority.
pub(crate) fn stream_prefix(host: u32, priority: i32) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = CHUNK;
    k[1..5].copy_from_slice(&host.to_be_bytes());
    k[5..9].copy_from_slice(&flip_priority(priority).to_be_bytes());
    k
}

pub(crate) fn chunk_key(host: u32, priority: i32, first_seq: u64) -> [u8; CHUNK_KEY_LEN] {
    let mut k = [0u8; CHUNK_KEY_LEN];
    k[..9].copy_from_slice(&stream_prefix(host, priority));
    k[9..].copy_from_slice(&first_seq.to_be_bytes());
    k
}

/// (host id, priority, first seq) of a chunk key.
pub(crate) fn parse_chunk_key(k: &[u8]) -> Option<(u32, i32, u64)> {
    if k.len() != CHUNK_KEY_LEN || k[0] != CHUNK {
        return None;
    }
    Some((
        u32::from_be_bytes(k[1..5].try_into().ok()?),
        unflip_priority(u32::from_be_bytes(k[5..9].try_into().ok()?)),
        u64::from_be_bytes(k[9..17].try_into().ok()?),
    ))
}

pub(crate) fn cursor_key(chunk: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + chunk.len());
    k.push(CURSOR);
    k.extend_from_slice(chunk);
    k
}

pub(crate) fn lease_key(id: u64) -> [u8; 9] {
    let mut k = [LEASE, 0, 0, 0, 0, 0, 0, 0, 0];
    k[1..].copy_from_slice(&id.to_be_bytes());
    k
}

pub(crate) fn seen_log_key(n: u64) -> [u8; 9] {
    let mut k = [SEEN_LOG, 0, 0, 0, 0, 0, 0, 0, 0];
    k[1..].copy_from_slice(&n.to_be_bytes());
    k
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// One queued request as stored: its seq, its fingerprint (absent for requests that skip
/// the duplicate filter) and its JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredEntry<'a> {
    pub(crate) seq: u64,
    pub(crate) fp: Option<u128>,
    pub(crate) request: &'a [u8],
}

const ENTRY_HEADER: usize = 8 + 1 + 16 + 4;

/// Append one chunk entry: seq u64, has-fp u8, fp u128, length u32, request JSON.
pub(crate) fn put_entry(out: &mut Vec<u8>, e: StoredEntry<'_>) {
    out.extend_from_slice(&e.seq.to_be_bytes());
    out.push(u8::from(e.fp.is_some()));
    out.extend_from_slice(&e.fp.unwrap_or(0).to_be_bytes());
    out.extend_from_slice(&(e.request.len() as u32).to_be_bytes());
    out.extend_from_slice(e.request);
}

/// The entry at byte `at` of a chunk, and the offset of the next entry.
pub(crate) fn entry_at(chunk: &[u8], at: usize) -> Option<(StoredEntry<'_>, usize)> {
    let seq = u64_at(chunk, at)?;
    let has_fp = *chunk.get(at + 8)? != 0;
    let fp = u128::from_be_bytes(chunk.get(at + 9..at + 25)?.try_into().ok()?);
    let len = u32_at(chunk, at + 25)? as usize;
    let start = at + ENTRY_HEADER;
    let request = chunk.get(start..start + len)?;
    Some((
        StoredEntry {
            seq,
            fp: has_fp.then_some(fp),
            request,
        },
        start + len,
    ))
}

/// Where a leased request came from: enough to tell, after a crash, whether the queue still
/// holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseOrigin {
    pub(crate) host: u32,
    pub(crate) priority: i32,
    pub(crate) chunk: [u8; CHUNK_KEY_LEN],
    /// Index of the entry in its chunk.
    pub(crate) index: u32,
}

/// Lease record: its origin, then the entry in chunk format.
pub(crate) fn lease_value(origin: LeaseOrigin, e: StoredEntry<'_>) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + CHUNK_KEY_LEN + 4 + ENTRY_HEADER + e.request.len());
    v.extend_from_slice(&origin.host.to_be_bytes());
    v.extend_from_slice(&origin.priority.to_be_bytes());
    v.extend_from_slice(&origin.chunk);
    v.extend_from_slice(&origin.index.to_be_bytes());
    put_entry(&mut v, e);
    v
}

/// The origin and entry of a lease record.
pub(crate) fn parse_lease(v: &[u8]) -> Option<(LeaseOrigin, StoredEntry<'_>)> {
    let origin = LeaseOrigin {
        host: u32_at(v, 0)?,
        priority: u32_at(v, 4)? as i32,
        chunk: v.get(8..8 + CHUNK_KEY_LEN)?.try_into().ok()?,
        index: u32_at(v, 8 + CHUNK_KEY_LEN)?,
    };
    let (entry, end) = entry_at(v, 12 + CHUNK_KEY_LEN)?;
    (end == v.len()).then_some((origin, entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn higher_priority_sorts_first_and_round_trips() {
        let ps = [i32::MIN, -5, -1, 0, 1, 7, i32::MAX];
        for w in ps.windows(2) {
            assert!(chunk_key(1, w[1], 9) < chunk_key(1, w[0], 0));
        }
        for p in ps {
            assert_eq!(parse_chunk_key(&chunk_key(3, p, 42)), Some((3, p, 42)));
        }
        assert!(chunk_key(1, 0, 2) < chunk_key(1, 0, 10));
        assert!(chunk_key(1, i32::MIN, 0) < chunk_key(2, i32::MAX, 0));
    }

    #[test]
    fn entries_and_leases_round_trip() {
        let a = StoredEntry {
            seq: 5,
            fp: Some(u128::MAX - 3),
            request: b"{\"a\":1}",
        };
        let b = StoredEntry {
            seq: 6,
            fp: None,
            request: b"",
        };
        let mut c = Vec::new();
        put_entry(&mut c, a);
        put_entry(&mut c, b);
        let (got, next) = entry_at(&c, 0).unwrap();
        assert_eq!(got, a);
        let (got, end) = entry_at(&c, next).unwrap();
        assert_eq!((got, end), (b, c.len()));
        assert!(entry_at(&c, end).is_none());
        assert!(entry_at(&c[..c.len() - 1], 0).is_some());
        assert!(entry_at(&c[..next - 1], 0).is_none());
        let origin = LeaseOrigin {
            host: 9,
            priority: -3,
            chunk: chunk_key(9, -3, 2),
            index: 4,
        };
        let l = lease_value(origin, a);
        assert_eq!(parse_lease(&l), Some((origin, a)));
        assert_eq!(parse_lease(&l[..l.len() - 1]), None);
    }
}
