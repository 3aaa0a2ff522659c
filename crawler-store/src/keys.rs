//! Key and value layouts of the `frontier` tree.
//!
//! One tree holds every record whose updates must be atomic together, because sled's
//! `apply_batch` is atomic within one tree:
//!
//! | key                                         | value                                   |
//! |---------------------------------------------|-----------------------------------------|
//! | `h` host-id u32                             | host name                               |
//! | `q` host-id u32, flipped priority u32, seq u64 | chunk: entries `seq u64, len u32, request JSON` |
//! | `c` chunk key                               | entries of that chunk already leased (u32) |
//! | `l` lease-id u64                            | host-id u32, priority i32, seq u64, request JSON |
//! | `s` log-number u64                          | seen-log record: 16-byte fingerprints   |
//!
//! All integers are big-endian so byte order is numeric order. The priority is stored as
//! `!(p ^ 0x8000_0000)`, which sorts the highest priority first; a chunk is keyed by the seq
//! of its first entry, so within a host and priority, chunks sort oldest first.

pub(crate) const HOST: u8 = b'h';
pub(crate) const CHUNK: u8 = b'q';
pub(crate) const CURSOR: u8 = b'c';
pub(crate) const LEASE: u8 = b'l';
pub(crate) const SEEN_LOG: u8 = b's';

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

/// Append one chunk entry.
pub(crate) fn put_entry(out: &mut Vec<u8>, seq: u64, request: &[u8]) {
    out.extend_from_slice(&seq.to_be_bytes());
    out.extend_from_slice(&(request.len() as u32).to_be_bytes());
    out.extend_from_slice(request);
}

/// The entry at byte `at` of a chunk: (seq, request JSON, offset of the next entry).
pub(crate) fn entry_at(chunk: &[u8], at: usize) -> Option<(u64, &[u8], usize)> {
    let seq = u64_at(chunk, at)?;
    let len = u32_at(chunk, at + 8)? as usize;
    let start = at + 12;
    let body = chunk.get(start..start + len)?;
    Some((seq, body, start + len))
}

/// Lease record: where the request came from, and the request itself.
pub(crate) fn lease_value(host: u32, priority: i32, seq: u64, request: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + request.len());
    v.extend_from_slice(&host.to_be_bytes());
    v.extend_from_slice(&priority.to_be_bytes());
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend_from_slice(request);
    v
}

/// (host id, priority, seq, request JSON) of a lease record.
pub(crate) fn parse_lease(v: &[u8]) -> Option<(u32, i32, u64, &[u8])> {
    Some((
        u32_at(v, 0)?,
        u32_at(v, 4)? as i32,
        u64_at(v, 8)?,
        v.get(16..)?,
    ))
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
        let mut c = Vec::new();
        put_entry(&mut c, 5, b"{\"a\":1}");
        put_entry(&mut c, 6, b"");
        let (s, b, next) = entry_at(&c, 0).unwrap();
        assert_eq!((s, b), (5, &b"{\"a\":1}"[..]));
        let (s, b, end) = entry_at(&c, next).unwrap();
        assert_eq!((s, b, end), (6, &b""[..], c.len()));
        assert!(entry_at(&c, end).is_none());
        assert!(entry_at(&c[..c.len() - 1], next - 1).is_none());
        let l = lease_value(9, -3, 77, b"xyz");
        assert_eq!(parse_lease(&l), Some((9, -3, 77, &b"xyz"[..])));
    }
}
