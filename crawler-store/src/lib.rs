//! Persistence backends of the crawler framework.
//!
//! [`SledStore`] keeps a crawl job's frontier in a job directory with [sled]: per-host
//! priority queues, the seen set of request fingerprints, and leases on the requests handed to
//! workers. Plug it into the scheduler with `crawler_sched::Frontier::with_store`; a crawl
//! can then be paused, resumed, or killed with `kill -9` without losing a queued URL.
//! [`ValidatorStore`] (conditional requests) and [`CacheStore`] (an HTTP cache) live in the
//! same database or on their own, and are shared by many tasks through `&self`.
//!
//! ```
//! use crawler_core::{Feedback, Next, Request, Scheduler, Settings, ThrottleMode};
//! use crawler_sched::{Frontier, FrontierConfig};
//! use crawler_store::{SledStore, StoreOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let settings = Settings { throttle: ThrottleMode::Fixed, ..Settings::default() };
//! let config = || FrontierConfig::from_settings(&settings, vec![]);
//! let now = tokio::time::Instant::now();
//!
//! // First run: queue two pages, start one, then "crash" (drop without acknowledging).
//! let store = SledStore::open_job(dir.path(), "books", "v1", StoreOptions::default())?;
//! let mut frontier = Frontier::with_store(config(), store);
//! frontier.enqueue(Request::get("http://books.test/1")?, now);
//! frontier.enqueue(Request::get("http://books.test/2")?, now);
//! assert!(matches!(frontier.next(now), Next::Ready(..)));
//! drop(frontier);
//!
//! // Resume: the unfinished lease is back in its queue, and the seen set still holds.
//! let store = SledStore::open_job(dir.path(), "books", "v1", StoreOptions::default())?;
//! assert_eq!(store.requeued_on_open(), 1);
//! let mut frontier = Frontier::with_store(config(), store);
//! assert_eq!(frontier.queued(), 2);
//! frontier.enqueue(Request::get("http://books.test/1")?, now); // a duplicate: filtered
//! let now = tokio::time::Instant::now();
//! let Next::Ready(lease, request) = frontier.next(now) else { panic!("nothing ready") };
//! assert_eq!(request.url.path(), "/1");
//! frontier.complete(lease, &Feedback::default(), now);
//! frontier.acknowledge(lease);
//! assert_eq!(frontier.queued(), 1);
//!
//! // Another spider may not take over the job directory.
//! drop(frontier);
//! let err = SledStore::open_job(dir.path(), "quotes", "v1", StoreOptions::default()).unwrap_err();
//! assert!(err.is_job_mismatch());
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! One sled database per job directory, with trees:
//!
//! - `frontier`: host names, queue chunks, lease records, chunk cursors and the seen log, in
//!   one tree so that the updates that must be atomic together are single `apply_batch`
//!   calls (key layout in the `keys` module). A host's queue is a run of *chunks* keyed by
//!   `host-id | flipped priority | first seq`, so key order is serving order: highest
//!   priority first, then oldest first. Chunks hold many requests (8 KiB by default),
//!   because sled costs about as much per key as per kilobyte: one key per URL measured
//!   50,000 inserts/s; chunks reach several times that.
//! - `seen`: the seen set, in 65,536 buckets of sorted fingerprints, with a memtable and a
//!   Bloom filter in memory (see the `seen` module).
//! - `meta`, `host_state`, `validators`, `http_cache`, `http_cache_order`.
//!
//! # Crash safety
//!
//! sled writes a single log; after a crash it recovers a *prefix* of the writes it was given
//! (everything up to some point, nothing after). The store keeps its writes in an order in
//! which every prefix is a consistent state:
//!
//! - Requests pushed are buffered in memory and written in one atomic batch together with
//!   their fingerprints (a "seen-log" record). Losing a buffer in a crash loses both the
//!   requests and their fingerprints, never one without the other.
//! - An acknowledgement first writes that buffer, then deletes the lease. So whenever the
//!   ack of a page survives a crash, the links found on it survived too; when the ack is
//!   lost, the page's lease is still there and the page is fetched again, rediscovering
//!   its links.
//! - `lease` moves a request from its chunk to a lease record in one atomic batch (the lease
//!   record carries the whole request). `open` returns every lease record to its queue, so a
//!   request in flight at a crash is fetched again: duplicates are limited to requests in
//!   flight, plus those completed within the loss window below.
//! - The seen memtable is merged into the `seen` buckets only after its log is written, and
//!   the log is cut only after the merge; merging twice is harmless.
//!
//! **Loss window.** sled hands its log buffers to the OS every `flush_every_ms` (200 ms by
//! default) and fsyncs them; [`SledStore::flush`] does so at once. A process kill (`kill
//! -9`, a panic, OOM) loses what was accepted since sled's last write to the OS (at most
//! `flush_every_ms`), and a power failure at most the same since that write was fsynced.
//! Either way what is lost is a suffix of the history, which the rules above turn into
//! "some pages are fetched again", never "a URL is lost". Call `flush` when pausing.
//!
//! # Memory
//!
//! In memory: per host, its name and one small record per priority level in use; requests
//! pushed since the last write (`write_buffer_bytes`, 4 MiB); the seen memtable
//! (`seen_memtable_len`, about 32 MiB); the Bloom filter (10 bits per seen URL, 16 MiB for
//! 10 million, capped by `bloom_max_bytes`); and sled's cache (`cache_capacity_bytes`, 64
//! MiB; sled's 1 GiB default is never used). Nothing grows with the number of queued URLs.

mod cache;
mod conditional;
mod db;
mod error;
mod keys;
mod options;
mod seen;
mod sled_store;
mod validators;

pub use cache::{CacheStore, CachedResponse};
pub use conditional::SledConditional;
pub use error::Error;
pub use options::StoreOptions;
pub use sled_store::SledStore;
pub use validators::{ValidatorStore, Validators};
