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
//! - `frontier`: host names, queue chunks, lease records, chunk cursors, the seen log and the
//!   seen watermark (key layout in the `keys` module). A host's queue is a run of *chunks*
//!   keyed by `host-id | flipped priority | first seq`, so key order is serving order:
//!   highest priority first, then oldest first. A chunk holds many requests (8 KiB by
//!   default), each with its fingerprint, because sled costs about as much per key as per
//!   kilobyte: one key per URL measured 50,000 inserts/s, chunks several times that.
//! - `seen`: the seen set, in 65,536 buckets of sorted fingerprints, with a memtable and a
//!   Bloom filter in memory (see the `seen` module).
//! - `meta` (layout version, job identity, stats), `host_state`, `validators`, `http_cache`,
//!   `http_cache_order`.
//!
//! Every write is a single-key insert or remove. sled 0.34's `apply_batch` and transactions
//! would give multi-key atomicity, but measured 30,000/s and held on to memory (270 MB after
//! 200,000 small batches), so the store orders its writes instead, as below.
//!
//! # Crash safety
//!
//! sled writes one log; after a crash it recovers a *prefix* of the writes it accepted
//! (everything up to some point, nothing after). The store orders its writes so that every
//! prefix is a state it can resume from without losing a request or admitting one twice:
//!
//! - Pushed requests are buffered in memory and written as chunks; each entry carries its
//!   fingerprint, so a request and its "seen" mark reach the disk in the same insert. A
//!   crash loses both or neither.
//! - An acknowledgement first writes that buffer, then (if the fingerprint is not yet merged
//!   into the `seen` buckets) a seen-log record, then deletes the lease. So whenever the ack
//!   of a page survives a crash, the links found on it survived too; when the ack is lost,
//!   the page's lease is still there and the page is fetched again, rediscovering its links.
//! - `lease` writes the lease record (holding the whole request and where it came from)
//!   before it advances the chunk's cursor. A crash between the two leaves the request both
//!   queued and leased; `open` sees that the cursor has not passed it and drops the lease
//!   record rather than queue it twice. Otherwise `open` returns every lease to its queue,
//!   ahead of the rest of its host: duplicates are limited to requests in flight at the
//!   crash (plus those finished within the loss window below).
//! - The seen memtable is merged into the buckets, then the watermark moves (entries with a
//!   seq above it have their fingerprint only in their chunk or the log), then the log is
//!   cut. A crash anywhere in between puts the same fingerprints back on open; merging twice
//!   is harmless.
//! - Recovery itself (returning leases, cutting consumed entries off chunks) uses the same
//!   ordering, and a crash during it is recovered by the next open.
//!
//! **Loss window.** sled keeps accepted writes in its own buffers and hands them to the OS
//! every `flush_every_ms` (200 ms by default; [`SledStore::flush`] at once), fsyncing as it
//! does. So a process kill (`kill -9`, OOM) loses the writes of the last `flush_every_ms` at
//! most: data that sled has not yet written is not in the OS page cache. A power failure
//! loses the same window (what was written was also fsynced). Either way the loss is a
//! suffix of the history, which the rules above turn into "some pages are fetched again",
//! never "a URL is lost". Call `flush` when pausing.
//!
//! # Memory
//!
//! In memory: per host, its name and one small record per priority level in use; requests
//! pushed since the last write (`write_buffer_bytes`, 4 MiB); the seen memtable
//! (`seen_memtable_len`, about 32 MiB); the Bloom filter (10 bits per seen URL, 16 MiB for
//! 10 million, growing with the crawl up to `bloom_max_bytes`, after which it stays exact
//! but reads the disk more); the fingerprints of requests in flight; and sled's cache
//! (`cache_capacity_bytes`, 64 MiB; sled's 1 GiB default is never used). Nothing grows
//! with the number of queued URLs. Measured: a 10-million-URL frontier peaked at about
//! 260 MiB RSS (see `benches/frontier.rs`).
//!
//! # Redis
//!
//! [`RedisStore`] is the backend for a fleet: several worker processes (on one machine or
//! many) that open the same job name on one Redis server, or on a Redis Cluster, crawl as
//! one crawler. They share the frontier, the seen set, leases with a visibility timeout,
//! and one budget per host ([`RedisStore::budget`], a `crawler_sched::SharedBudget`), so N
//! workers together stay within what one polite crawler would send.
//!
//! **One server or a cluster.** `redis://` (or `rediss://`) names one server;
//! `redis+cluster://[:password@]host:port[,host:port...]` (or `rediss+cluster://`) names a
//! Redis Cluster by one or more seed nodes (any one reachable is enough; the cluster tells
//! the client about the others). The same keys, scripts and code serve both; a malformed
//! cluster URL is an error that says what is wrong ([`Error::is_redis_unavailable`]).
//!
//! **Keys.** A job's keys are split so that a cluster spreads them over its masters while
//! no command or script ever touches two slots. Under `crawler:{JOB}:` (the braces are a
//! cluster hash tag) sit only the job's global parts: `epoch` (its random identity),
//! `ready`, `meta` (the worker counter and the job's shard count) and `stats` (each
//! worker's last saved stats). Everything else lives in 24 *shards*, `crawler:{JOB/N}:`
//! (a suffix on `N` places each shard's slot in its own 24th of the slot space, so the
//! shards spread evenly over 1, 2, 3, 4, 6, 8, 12 or 24 masters). A host belongs to one
//! shard (a stable hash of its name), which holds `q:HOST` (a ZSET whose members sort in
//! serving order: flipped priority, seq, worker run tag, request JSON), `b:HOST` (a HASH
//! with the host's politeness state as JSON, its version, the fleet's requests in flight
//! and a skip flag), `hosts` (the shard's hosts with work), `seen` (a SET of the 16-byte
//! fingerprints of its hosts' requests), `leases` (a ZSET of lease id by expiry) and
//! `lease` (a HASH of lease id to host and member), and its own copy of the `epoch`,
//! `steps` (each worker's count of steps applied in the shard), `gen` (a change counter)
//! and `meta` (the reclaim counter). So a host's queue insert and its seen mark, its lease
//! and the send it books, its acknowledgement and its release are each one script in one
//! slot. The seen set is sharded by the request's host rather than by fingerprint for that
//! reason: the insert stays atomic, and a huge host's seen URLs sit with its queue, on one
//! master anyway. Every key lives `idle_ttl` after the last step that touched it (the
//! global ones after the last stats checkpoint).
//!
//! **One script, one round trip.** Every exchange with Redis is one EVALSHA of a single
//! Lua script (reloaded automatically after a Redis restart or a failover) carrying one
//! section per shard the step concerns. A section applies, atomically and in this order:
//! buffered pushes (seen-set insert and queue insert together), buffered
//! acknowledgements, lease renewals, politeness state commits, pacing updates (a late
//! departure, a missed slot booked again), reclaiming expired leases of dead workers, and
//! then, if asked, a lease (with the send it books) or a read of the shard's part of the
//! fleet's state. On one server a step is one call with all its
//! sections; on a cluster it is one call per shard, all sent at once over multiplexed
//! connections, so it still costs one round trip of wall time. So a handed-out request
//! costs one round trip, and acknowledgements, new links, routine outcomes (folded into
//! the host's state once a second, or at once when they move its pace) and the worker's
//! stats ride along with the next one. (On a cluster an acknowledgement waits one more step when pushes to
//! other shards precede it, so a page's links are always queued before its lease goes.)
//! One acknowledgement goes at once: that of a paced host whose whole fleet-wide
//! concurrency the worker holds (one request at a time, by default), since no worker can
//! lease the host's next slot before it arrives.
//! Holds (Retry-After, 429/503, an exhausted RateLimit quota, a challenge page) are
//! committed at once, so every worker respects them from its next lease on.
//! [`redis_round_trips`] counts the waits, [`redis_commands`] the calls.
//!
//! **Done means done.** A worker ends only when the fleet has nothing queued and nothing
//! leased. A cluster's shards are read one call each, not at one instant, so an empty
//! read is read again and trusted only if no shard's change counter moved in between.
//!
//! **Budget.** The fleet runs the same per-host machine as a local crawl
//! (`crawler_sched::politeness::HostMachine`), and its serialised state is the contract.
//! Redis keeps two records per host: the *learning state* (the machine's state as JSON,
//! about 1 KB, with a version) and a *pacing record* (a dozen numbers: the next slot, the
//! interval and burst slack, the Crawl-delay floor, the hold's end, the RateLimit quota,
//! requests in flight). A lease books its send in the pacing record inside the script, by
//! the machine's own GCRA step (slot = the next slot or now, whichever is later; the next
//! slot moves on by one interval), refusing while the host is held, its next slot is more
//! than a few intervals off, or `concurrency_per_host` requests are in flight fleet-wide;
//! it never reads or bumps the learning state's version, so leases of several workers on
//! one host take consecutive slots and none loses a race. The learning state changes by
//! compare-and-set only on outcomes that teach something (refusals, holds, a Crawl-delay,
//! rate changes, and routine answers folded in batches), computed once by the worker that
//! saw them; such a commit rewrites the pacing fields the machine derives from it (the
//! interval, the hold, the quota) in the same script. A worker reads the learning state
//! with the pacing record laid over it, and a lease's answer carries the learning state only
//! when it changed since the worker last heard it (about 80 bytes sent and 150-300 received
//! per lease, [`redis_lease_bytes`]).
//!
//! **Booked send times.** A lease may come up to `lease_ahead` (50 ms, at most half the
//! host's interval) before the host's slot; it books the send at the slot, and the worker's
//! `FleetFrontier` holds the request until the fleet's clock reaches it, re-reading the
//! host's state 10 ms before (a hold another worker placed since the lease keeps the request
//! back, and it is queued again). Sending when each lease's reply arrived instead let the
//! replies' jitter between workers shrink the gaps at the server below the booked interval,
//! which a limiter without a burst refuses. A request still held when the worker stops goes
//! back to its queue at once.
//!
//! **Seen set.** Fingerprints are stored as 16 raw bytes in Redis SETs: exact (no URL is
//! ever wrongly dropped), about 70-90 bytes of Redis memory per URL (some 800 MB for 10
//! million). A Bloom filter (a bitmap with k hashes, about 1.2 bytes per URL at 1% false
//! positives) would cut that by 60x at the price of silently skipping ~1% of new URLs; it
//! is not implemented. Each worker also remembers the fingerprints it has met (up to 2
//! million, then it starts afresh), so links it sees again cost no round trip. That memory
//! is only a cache of the shared set: it is forgotten on any doubt (Redis lost some of the
//! worker's confirmed steps, or the link reconnected), so a link whose queueing Redis lost
//! is queued again when its page is fetched again.
//!
//! **When Redis forgets.** Durability must not depend on how Redis is configured (RDB
//! snapshots, AOF `everysec`, failover, a restart without persistence, eviction). The first
//! worker to join a job writes a random *job epoch* into the job's global part and into
//! every shard; every step checks each shard's copy it touches atomically before doing
//! anything. Missing or different means Redis (or one master of a cluster) lost the job:
//! the step changes nothing and the worker stops with an error naming the lost epoch and
//! the shard ([`Error::is_redis_lost`]), so an empty Redis never reads as "queue empty,
//! nothing leased", and a crawl never ends successfully with pages missing. Each step also
//! counts itself, per shard, under the worker's random token (`steps`); fewer steps than
//! the worker last read means a rollback that lost some of its confirmed updates, and the
//! worker forgets its seen cache (the seen set only grows, so a rollback that keeps all of
//! a worker's steps keeps every fingerprint it remembers) and queues again the links it
//! had queued in the steps that shard lost (it keeps the pushes of its last few minutes of
//! steps, up to 32 MiB). That matters on a cluster, where each master fails over on its
//! own: a page's links may be lost on one master while its acknowledgement survives on
//! another, and nothing else would queue them again. A loss older than what the worker
//! keeps stops it with an error naming the shard and what was lost. (On one server a
//! rollback takes a page's acknowledgement back together with its links, so the page is
//! fetched again.) Lease ids are `TOKEN:N`, made by the worker, so
//! they never repeat across workers, worker restarts or Redis restarts, and a stale
//! acknowledgement can never delete another worker's lease; a retried step that had
//! already granted its lease gets the same lease back rather than a second one.
//!
//! **Failures.** A worker renews its leases while it runs; a killed worker's leases expire
//! after `lease_timeout` and any worker returns them to their queues. While Redis (or a
//! cluster master, until its replica takes over) is unreachable or restarting, every call
//! retries with backoff (50 ms doubling to 2 s) and
//! the crawl pauses; buffered pushes and acknowledgements stay in memory until Redis takes
//! them. After `retry_for` the store gives up with an error naming the (password-redacted)
//! URL, and the crawl stops with its leases open, to be taken back by the fleet. A retried
//! round trip can apply twice; every part of the script is idempotent or errs towards
//! fetching a page again, never towards losing one.
//!
//! The connection is async and multiplexed (one connection per server, or per master of a
//! cluster, through the `redis` crate's connection and cluster clients), driven by a small
//! I/O thread of the store's own: the frontier's store is synchronous, so a call hands its
//! scripts over and waits, whatever runtime the engine runs on. The waits and retries
//! run on the engine's thread but never hold it uncontrollably: each attempt is bounded (2 s to connect, 3 s per command), the
//! pauses between attempts check the crawl's stop handle ([`RedisOptions::stop`]) every
//! 50 ms, and on a multi-threaded Tokio runtime they run in `block_in_place`, so the
//! signal listener and the downloads in flight go on. A stop request (Ctrl-C, SIGTERM)
//! during an outage ends the retries at once, and a link that gave up fails every later
//! call at once, so stopping never costs one `retry_for` per call. Failures met where the
//! frontier cannot return them (`queued`, `hosts`, the fleet's status) are handed to the
//! engine through `Fleet::take_error`, so an idle worker stops too.
//!
//! **Items and stats.** Items go to each worker's own feeds (give each worker its own file,
//! and keep it when the worker is started again: fleet workers append);
//! each worker's stats cover what it did and are saved under its worker number
//! ([`RedisStore::worker_stats`], or [`RedisStore::read_worker_stats`] without joining the
//! job), so the fleet's totals are their sum (the facade's `fleet_stats`).

#[cfg(feature = "sled")]
mod db;
// Without the `sled` feature the job directory's error kinds are never made (the type keeps
// them, so `is_job_mismatch` and friends answer the same everywhere).
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
mod error;
#[cfg(feature = "sled")]
mod http_cache;
// The sled store's key tags; the Redis store uses only some of them.
#[cfg_attr(not(feature = "sled"), allow(dead_code))]
mod keys;
mod options;
#[cfg(feature = "redis")]
mod redis_store;
#[cfg(feature = "sled")]
mod seen;
#[cfg(feature = "sled")]
mod sled_store;

pub use error::Error;
#[cfg(feature = "sled")]
pub use http_cache::{CacheStore, CachedResponse, SledConditional, ValidatorStore, Validators};
pub use options::StoreOptions;
#[cfg(feature = "redis")]
pub use redis_store::{
    RedisBudget, RedisFleet, RedisOptions, RedisStore, redis_commands, redis_lease_answers,
    redis_lease_bytes, redis_round_trips, redis_round_trips_by_purpose,
};
#[cfg(feature = "sled")]
pub use sled_store::SledStore;
