//! The persistent seen set: fingerprints of every request admitted to the frontier.
//!
//! Writing one sled key per fingerprint measured about 40,000 inserts/s at 10 million keys
//! (random keys defeat every cache) and took 775 MB of memory, far from the goals. So the set
//! is an LSM in miniature:
//!
//! - a *memtable* of recent fingerprints in memory (bounded by `seen_memtable_len`). They
//!   are durable without a write of their own: each queued entry carries its fingerprint,
//!   and the store writes a seen-log record when it acknowledges a request whose
//!   fingerprint is still only in the memtable (see `sled_store`);
//! - *buckets* on disk: tree `seen`, key = the fingerprint's top 16 bits, value = the sorted
//!   16-byte fingerprints of that bucket. When the memtable is full it is merged into the
//!   buckets in one sorted pass (each bucket read and rewritten once), then the log is cut;
//! - a *Bloom filter* over the buckets, so a new URL (the common case) is answered without
//!   touching the disk; only duplicates and the filter's ~1% false positives read a bucket.
//!
//! Answers are exact: a "maybe" from the filter is always checked against the bucket.

use std::collections::HashSet;
use std::path::Path;

use crate::error::Error;
use crate::options::StoreOptions;

const FP_LEN: usize = 16;
/// Bits per fingerprint in the Bloom filter: about 1% false positives with 7 probes.
const BLOOM_BITS_PER_KEY: u64 = 10;
const BLOOM_PROBES: u64 = 7;

type FpSet = HashSet<u128, crawler_sched::FingerprintBuildHasher>;

struct Bloom {
    bits: Vec<u64>,
    /// Number of bits minus one (the bit count is a power of two).
    mask: u64,
}

impl Bloom {
    fn with_capacity(keys: u64, max_bytes: u64) -> Self {
        let want = keys.max(1024).saturating_mul(BLOOM_BITS_PER_KEY);
        let cap = max_bytes.saturating_mul(8).max(1 << 16);
        let bits = want
            .min(cap)
            .next_power_of_two()
            .min(cap.next_power_of_two());
        let words = usize::try_from(bits / 64).unwrap_or(usize::MAX / 64);
        Self {
            bits: vec![0; words],
            mask: bits - 1,
        }
    }

    fn bit_len(&self) -> u64 {
        self.mask + 1
    }

    fn positions(&self, fp: u128) -> impl Iterator<Item = u64> + use<> {
        // Double hashing from the fingerprint's two halves, which are independent.
        let h1 = fp as u64;
        let h2 = ((fp >> 64) as u64) | 1;
        let mask = self.mask;
        (0..BLOOM_PROBES).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) & mask)
    }

    fn insert(&mut self, fp: u128) {
        for p in self.positions(fp) {
            if let Some(w) = self.bits.get_mut((p / 64) as usize) {
                *w |= 1 << (p % 64);
            }
        }
    }

    fn may_contain(&self, fp: u128) -> bool {
        self.positions(fp).all(|p| {
            self.bits
                .get((p / 64) as usize)
                .is_none_or(|w| w & (1 << (p % 64)) != 0)
        })
    }
}

pub(crate) struct SeenSet {
    buckets: sled::Tree,
    memtable: FpSet,
    bloom: Bloom,
    /// Fingerprints in the buckets.
    on_disk: u64,
    memtable_len: usize,
    bloom_max_bytes: u64,
}

fn bucket_of(fp: u128) -> [u8; 2] {
    ((fp >> 112) as u16).to_be_bytes()
}

fn fp_at(bytes: &[u8], i: usize) -> u128 {
    let mut b = [0u8; FP_LEN];
    if let Some(s) = bytes.get(i * FP_LEN..(i + 1) * FP_LEN) {
        b.copy_from_slice(s);
    }
    u128::from_be_bytes(b)
}

fn bucket_contains(bytes: &[u8], fp: u128) -> bool {
    let (mut lo, mut hi) = (0, bytes.len() / FP_LEN);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        match fp_at(bytes, mid).cmp(&fp) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Greater => hi = mid,
            std::cmp::Ordering::Equal => return true,
        }
    }
    false
}

/// Pack fingerprints as concatenated big-endian 16-byte values.
#[cfg(test)]
fn pack(fps: &[u128]) -> Vec<u8> {
    let mut out = Vec::with_capacity(fps.len() * FP_LEN);
    for fp in fps {
        out.extend_from_slice(&fp.to_be_bytes());
    }
    out
}

impl SeenSet {
    /// Load the set: build the Bloom filter from the buckets. The caller then puts back in
    /// the memtable what was not merged yet ([`SeenSet::remember`]).
    pub(crate) fn open(
        buckets: sled::Tree,
        options: &StoreOptions,
        path: &Path,
    ) -> Result<Self, Error> {
        let mut set = Self {
            buckets,
            memtable: FpSet::default(),
            bloom: Bloom::with_capacity(options.expected_urls, options.bloom_max_bytes),
            on_disk: 0,
            memtable_len: options.seen_memtable_len.max(1),
            bloom_max_bytes: options.bloom_max_bytes,
        };
        set.on_disk = set.count_on_disk(path)?;
        if set.on_disk > set.bloom.bit_len() / BLOOM_BITS_PER_KEY {
            set.bloom = Bloom::with_capacity(set.on_disk * 2, set.bloom_max_bytes);
        }
        set.fill_bloom(path)?;
        Ok(set)
    }

    /// Put a fingerprint found on disk (seen log, queued entries) back in the memtable.
    pub(crate) fn remember(&mut self, fp: u128) {
        self.memtable.insert(fp);
    }

    /// Put back the fingerprints of a seen-log record.
    pub(crate) fn remember_log(&mut self, record: &[u8], path: &Path) -> Result<(), Error> {
        if !record.len().is_multiple_of(FP_LEN) {
            return Err(Error::corrupt(
                path,
                "a seen-log record has a partial fingerprint",
            ));
        }
        for i in 0..record.len() / FP_LEN {
            self.memtable.insert(fp_at(record, i));
        }
        Ok(())
    }

    /// Whether `fp` is still only in memory (not merged into the buckets yet).
    pub(crate) fn in_memtable(&self, fp: u128) -> bool {
        self.memtable.contains(&fp)
    }

    fn count_on_disk(&self, path: &Path) -> Result<u64, Error> {
        let mut n = 0;
        for kv in self.buckets.iter() {
            let (_, v) = kv.map_err(|e| Error::sled(path, "read the seen set", e))?;
            n += (v.len() / FP_LEN) as u64;
        }
        Ok(n)
    }

    fn fill_bloom(&mut self, path: &Path) -> Result<(), Error> {
        for kv in self.buckets.iter() {
            let (_, v) = kv.map_err(|e| Error::sled(path, "read the seen set", e))?;
            for i in 0..v.len() / FP_LEN {
                self.bloom.insert(fp_at(&v, i));
            }
        }
        Ok(())
    }

    /// Record `fp`; `false` if it was recorded before (in this run or an earlier one).
    pub(crate) fn insert(&mut self, fp: u128, path: &Path) -> Result<bool, Error> {
        if self.memtable.contains(&fp) {
            return Ok(false);
        }
        if self.bloom.may_contain(fp) {
            let bucket = self
                .buckets
                .get(bucket_of(fp))
                .map_err(|e| Error::sled(path, "read the seen set", e))?;
            if bucket.is_some_and(|b| bucket_contains(&b, fp)) {
                return Ok(false);
            }
        }
        self.memtable.insert(fp);
        Ok(true)
    }

    pub(crate) fn memtable_full(&self) -> bool {
        self.memtable.len() >= self.memtable_len
    }

    /// Merge the memtable into the on-disk buckets. The caller must have made every
    /// memtable fingerprint durable first (so a crash half-way through loses nothing: they
    /// are put back on open and merging is idempotent), and cuts the log afterwards.
    pub(crate) fn merge(&mut self, path: &Path) -> Result<(), Error> {
        let mut fps: Vec<u128> = self.memtable.drain().collect();
        fps.sort_unstable();
        let mut start = 0;
        while start < fps.len() {
            let bucket = bucket_of(fps[start]);
            let end = start
                + fps[start..]
                    .iter()
                    .position(|&f| bucket_of(f) != bucket)
                    .unwrap_or(fps.len() - start);
            let new = &fps[start..end];
            let old = self
                .buckets
                .get(bucket)
                .map_err(|e| Error::sled(path, "read the seen set", e))?;
            let old = old.as_deref().unwrap_or(&[]);
            let old_len = old.len() / FP_LEN;
            let mut merged = Vec::with_capacity(old.len() + new.len() * FP_LEN);
            let (mut i, mut j) = (0, 0);
            while i < old_len || j < new.len() {
                let a = (i < old_len).then(|| fp_at(old, i));
                let b = new.get(j).copied();
                let next = match (a, b) {
                    (Some(a), Some(b)) if a == b => {
                        i += 1;
                        j += 1;
                        a
                    }
                    (Some(a), Some(b)) if a < b => {
                        i += 1;
                        a
                    }
                    (Some(a), None) => {
                        i += 1;
                        a
                    }
                    (_, Some(b)) => {
                        j += 1;
                        self.on_disk += 1;
                        b
                    }
                    (None, None) => break,
                };
                merged.extend_from_slice(&next.to_be_bytes());
            }
            self.buckets
                .insert(bucket, merged)
                .map_err(|e| Error::sled(path, "write the seen set", e))?;
            start = end;
        }
        if self.on_disk > self.bloom.bit_len() / BLOOM_BITS_PER_KEY
            && self.bloom.bit_len() < self.bloom_max_bytes.saturating_mul(8)
        {
            // Outgrown: a filter twice as large again, refilled from disk, keeps the false
            // positive rate (and so the disk reads) near 1%.
            self.bloom = Bloom::with_capacity(self.on_disk * 2, self.bloom_max_bytes);
            self.fill_bloom(path)?;
        } else {
            for fp in fps {
                self.bloom.insert(fp);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bloom_has_no_false_negatives_and_few_false_positives() {
        let mut b = Bloom::with_capacity(10_000, 1 << 20);
        let mut x: u128 = 0x1234_5678_9abc_def0_0fed_cba9_8765_4321;
        let mut inserted = Vec::new();
        for _ in 0..10_000 {
            x = x
                .wrapping_mul(0x2545_f491_4f6c_dd1d_2545_f491_4f6c_dd1d)
                .wrapping_add(1);
            b.insert(x);
            inserted.push(x);
        }
        assert!(inserted.iter().all(|&f| b.may_contain(f)));
        let false_pos = (0..10_000u128)
            .filter(|i| b.may_contain(i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)))
            .count();
        assert!(false_pos < 300, "{false_pos} false positives of 10,000");
    }

    #[test]
    fn bucket_search_finds_exactly_the_members() {
        let fps = [3u128, 9, 27, 81];
        let packed = pack(&fps);
        for f in fps {
            assert!(bucket_contains(&packed, f));
        }
        for f in [0u128, 4, 28, 100] {
            assert!(!bucket_contains(&packed, f));
        }
    }
}
