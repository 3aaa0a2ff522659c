//! How a job directory's database is sized and how often it reaches the disk.

/// Sizing and durability knobs for [`SledStore`](crate::SledStore) and the other sled-backed
/// stores.
///
/// The defaults keep a 10-million-URL frontier well under 1 GiB of memory.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// sled's page cache, in bytes (default 64 MiB). sled's own default is 1 GiB, which alone
    /// would break the crawler's memory goals, so it is never used.
    pub cache_capacity_bytes: u64,
    /// How often sled writes its buffers to the OS and fsyncs, in milliseconds (default 200).
    /// `None` writes only when a buffer fills or [`SledStore::flush`](crate::SledStore::flush)
    /// is called. This is the window a crash (process or machine) can lose; see the crate docs.
    pub flush_every_ms: Option<u64>,
    /// Queued requests are buffered in memory and written in chunks once this many bytes are
    /// waiting (default 4 MiB), or sooner when a lease or an acknowledgement needs them on disk.
    pub write_buffer_bytes: usize,
    /// Target size of one on-disk chunk of a host's queue (default 8 KiB).
    pub chunk_bytes: usize,
    /// Fingerprints held in memory before they are merged into the on-disk seen set
    /// (default 1,000,000, about 32 MiB).
    pub seen_memtable_len: usize,
    /// Seen URLs the Bloom filter in front of the on-disk seen set is first sized for
    /// (default 10,000,000, about 16 MiB). It grows when the crawl outgrows it.
    pub expected_urls: u64,
    /// Upper bound of the Bloom filter's memory (default 256 MiB). Past it the filter stops
    /// growing: answers stay exact, more lookups just go to disk.
    pub bloom_max_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            cache_capacity_bytes: 64 << 20,
            flush_every_ms: Some(200),
            write_buffer_bytes: 4 << 20,
            chunk_bytes: 8 << 10,
            seen_memtable_len: 1_000_000,
            expected_urls: 10_000_000,
            bloom_max_bytes: 256 << 20,
        }
    }
}
