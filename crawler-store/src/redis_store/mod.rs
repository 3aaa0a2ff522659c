//! [`RedisStore`]: one crawl's frontier, seen set, leases and per-host budgets in Redis,
//! shared by every worker that opens the same job.
//!
//! This folder owns everything the crate says to Redis: the store's state and its public
//! handles, and the connection, the scripts and the reply decoding under them. Nothing
//! else in the crate talks to Redis, and nothing here decides politeness: the per-host
//! machine of crawler-sched does, on the state this store reads and commits.
//!
//! - `mod.rs`: [`RedisOptions`], [`RedisStore`] (joining a job, its counters) and the
//!   handles [`RedisBudget`] and [`RedisFleet`], over one shared `Inner`.
//! - `state`: the worker's view of each host's shared politeness state.
//! - `queue`: the [`QueueStore`](crawler_sched::QueueStore) methods (pushes, leases with
//!   the send they book, acknowledgements).
//! - `fleet`: [`SharedBudget`] for [`RedisBudget`], [`Fleet`] for [`RedisFleet`].
//! - `step`: one round trip: the script's arguments from what is buffered, and its reply.
//! - `replay`: the pushes of the worker's recent steps, queued again when a shard lost them.
//! - `clock`: the worker's estimate of the Redis server's clock, the fleet's clock.
//! - `job`: which job, and which run of it, a worker joined (epoch, token, steps).
//! - `layout`: where the job's keys live: a global part and shards, each under a hash tag
//!   of its own (a Redis Cluster spreads them over its masters).
//! - `link`: the connection (one server, or a cluster), driven by an I/O thread of its
//!   own, with retries, script loading and counters of round trips and commands.
//! - `lua`: the step and join scripts.
//! - `reply`: decoding the scripts' replies, and the byte layout of queue members.
//! - `robots`: the robots.txt files the workers fetched, shared (one fetch per origin and
//!   TTL for the fleet).
//!
//! The connection, the scripts and the reply decoding live here rather than in a `redis/`
//! folder beside this one: only this store uses them, and a crate-level module named
//! `redis` would make `redis::...` paths mean two things next to the redis crate.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crawler_core::{Feedback, Shutdown};
use crawler_sched::politeness::{HostState, Params};
use crawler_sched::{Fleet, FleetStatus, SharedBudget, Versioned};

use crate::error::Error;
use job::Job;
use layout::Layout;
use link::Link;
use lua::STEP;
use reply::server_ms;

#[cfg(test)]
mod booking_tests;
mod clock;
mod fleet;
mod job;
mod layout;
mod link;
mod lua;
mod queue;
mod replay;
mod reply;
mod robots;
mod state;
mod step;

pub use link::{
    redis_commands, redis_lease_answers, redis_lease_bytes, redis_round_trips,
    redis_round_trips_by_purpose,
};

/// How to reach Redis and which crawl to join.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// `redis://[:password@]host[:port][/db]`, or `rediss://` for TLS: one server.
    /// `redis+cluster://[:password@]host:port[,host:port...]` (or `rediss+cluster://`): a
    /// Redis Cluster, reached through any of the seed nodes listed.
    pub url: String,
    /// The job name: workers that give the same name crawl as one.
    pub job: String,
    /// How long a leased request may go without renewal before another worker takes it
    /// back (a worker renews its leases while it lives, so this is the time to notice a
    /// dead worker). Default 30 s.
    pub lease_timeout: Duration,
    /// How long an operation is retried while Redis is unreachable before the store gives
    /// up with an error. Default 60 s.
    pub retry_for: Duration,
    /// How often an idle worker asks for the fleet's state (work queued by others, expired
    /// leases). Default 200 ms.
    pub sync_every: Duration,
    /// Enforce a shared per-host budget with these default parameters (hosts may register
    /// their own through [`SharedBudget::register`]). `None`: leases ignore pacing.
    pub budget: Option<Params>,
    /// How long the job's keys live after the last step that touched them. Default 7 days.
    pub idle_ttl: Duration,
    /// How long before a host's slot its next request may be leased, at most (and never
    /// more than half the host's interval). The send is booked at the slot, and
    /// [`crawler_sched::FleetFrontier`] holds the request until then, so the fleet's sends
    /// are spaced as booked rather than by when each lease's reply arrived. Default 50 ms;
    /// zero leases only once the slot is due and sends at once.
    pub lease_ahead: Duration,
    /// The crawl's stop handle: while Redis is unreachable, a stop request (Ctrl-C,
    /// SIGTERM) ends the retries at once, and the store then fails fast. `None`: retries
    /// run for `retry_for`.
    pub stop: Option<Shutdown>,
}

impl RedisOptions {
    /// Options for joining `job` on the Redis server at `url`, with default timings and no
    /// shared budget.
    pub fn new(url: impl Into<String>, job: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            job: job.into(),
            lease_timeout: Duration::from_secs(30),
            retry_for: Duration::from_secs(60),
            sync_every: Duration::from_millis(200),
            budget: None,
            idle_ttl: Duration::from_secs(7 * 24 * 3600),
            lease_ahead: Duration::from_millis(50),
            stop: None,
        }
    }
}

/// One politeness state commit waiting to be sent.
struct Commit {
    host: String,
    expected: u64,
    state: HostState,
    skip: String,
    /// Routine outcomes folded into this state: queued again if the commit loses.
    folded: Vec<(Feedback, f64)>,
}

/// A change of a host's pacing record that needs no compare-and-set (see `lua`, step 4b).
#[derive(Debug, Clone)]
struct PacingOp {
    host: String,
    /// `p`: pool the host's limiter group (a refusal reached it), the host pacing it unless
    /// it is pooled already; `b`: book a new slot at
    /// `at` or the next free one after it (a held request that missed its own); `g`: give
    /// back the slot of a request that was not sent, if the next slot is still `at`, the
    /// one its lease left (nothing booked or moved it since).
    kind: &'static str,
    at: f64,
    /// The gap's share of the interval (see `state::gap_factor`).
    factor: f64,
}

/// An acknowledgement waiting to be sent.
struct Ack {
    lease: u64,
    /// The shard of the lease's host, where its record lives.
    shard: usize,
    /// Every push buffered before it has been confirmed: it may go in any step. (On a
    /// cluster, pushes to other shards and this acknowledgement would land in no set order
    /// within one step; a page's links must be queued before its lease goes.)
    ready: bool,
    /// The lease's host, when it has a shared budget.
    host: Option<String>,
}

/// A buffered push: host, fingerprint (absent: the request skips the seen set), member.
type Push = (String, Option<[u8; 16]>, Vec<u8>);

struct Inner {
    link: Link,
    layout: Layout,
    /// The pushes of this worker's recent steps, per shard, to queue again what a shard
    /// that rolled back lost (see `replay`).
    pushed: replay::PushLog,
    /// Which job, and which run of it, this worker joined.
    job: Job,
    worker: u32,
    timeout: Duration,
    idle_ttl: Duration,
    sync_every: Duration,
    default_params: Option<Params>,
    /// [`RedisOptions::lease_ahead`], ms.
    lease_ahead_ms: f64,
    /// Hosts whose fleet-wide concurrency was full at the last lease asked: until when no
    /// lease is asked for them again, and the wait that was (see `queue`).
    full: HashMap<String, (std::time::Instant, Duration)>,
    /// Per host, the slot a late held request was booked again for (see `Fleet::missed`).
    rebooked: HashMap<String, f64>,
    /// The last lease granted and the fleet time its send was booked for.
    booked: Option<(u64, f64)>,
    params: HashMap<String, Params>,
    pushes: Vec<Push>,
    acks: Vec<Ack>,
    /// The last lease number this worker handed out (its ids in Redis are `TOKEN:N`).
    next_lease: u64,
    commits: Vec<Commit>,
    stats: Option<String>,
    /// Requests leased before the frontier asked, by host (see `queue`).
    kept: HashMap<String, Kept>,
    /// Leases held, with the shard of each.
    open_leases: HashMap<u64, usize>,
    /// The host of each lease held (budget hosts only).
    lease_hosts: HashMap<u64, String>,
    /// Per host, this worker's share of the host's fleet-wide concurrency, as learnt from
    /// refusals (see `queue`).
    shares: HashMap<String, f64>,
    /// Per paced host, the slot of this worker's last lease (ms), the host's booking count
    /// after it, and this worker's turn (see [`SharedBudget::turn_ms`]), ms.
    turns: HashMap<String, (f64, u64, f64)>,
    /// Per paced host, this worker's last lease and the host's next slot its booking left
    /// (ms): the slot a request of it that is not sent gives back (see `RedisBudget::commit`).
    last_booked: HashMap<String, (u64, f64)>,
    last_renew: std::time::Instant,
    lens: HashMap<String, usize>,
    /// Each host's politeness state as last heard: its learning state with its pacing
    /// record laid over it (Redis counts requests in flight itself).
    states: HashMap<String, Versioned>,
    /// Each host's learning state as last heard, with its version.
    learned: HashMap<String, (HostState, u64)>,
    /// Each host's pacing record as last heard, and when its reply came (fleet ms).
    pacing: HashMap<String, state::Pacing>,
    /// Each host of a pooled limiter group, its pool as last heard (see `lua`, "pooled
    /// groups").
    pools: HashMap<String, crawler_sched::Pooled>,
    /// Each pool pacer's parameters: its own, with the pool's in-flight cap and `max_rate`.
    pool_params: HashMap<String, Params>,
    /// The names of the group the last pooling operation answered for.
    pool_members: Vec<String>,
    /// The pacer of the host the last read of one host's state found pooled (`lua`, step 8).
    peek_pacer: Option<String>,
    heard_at: HashMap<String, f64>,
    /// Pacing operations waiting for the next step.
    ops: Vec<PacingOp>,
    /// The slots the last step's `b` operations booked, by host.
    op_slots: HashMap<String, f64>,
    /// Results of the commits of the last step, by host: committed or not.
    committed: HashMap<String, bool>,
    /// Routine outcomes not yet committed, by host, with the fleet time they happened:
    /// folded into the next commit of the host's state (the next lease, or the next step).
    deferred: HashMap<String, Vec<(Feedback, f64)>>,
    /// The folded outcomes of the commits in flight in the current step.
    commits_sent: Vec<(String, Vec<(Feedback, f64)>)>,
    skipped_here: HashSet<String>,
    fleet: FleetStatus,
    /// Each shard's change counter, as of the last read of the whole fleet.
    gens: Vec<i64>,
    last_sync: Option<std::time::Instant>,
    dups: u64,
    reclaimed: u64,
    /// Fingerprints this worker met, a cache of the shared seen set that saves round
    /// trips. Only the shared set is the truth: this is forgotten on any doubt (Redis
    /// rolled back, or the link reconnected, maybe to a server that restarted).
    seen: HashSet<u128>,
    last_fp: Option<u128>,
    /// The link's reconnections as of the last step.
    reconnects_seen: u64,
    /// A failure met where it could not be returned (`queued`, `hosts`, fleet status),
    /// for [`Fleet::take_error`].
    error: Option<Error>,
    /// Why Redis is known to have lost the job: every later step fails with it at once.
    lost: Option<String>,
    /// Local clock origin, and the Redis server's clock minus ours (ms), as the round
    /// trips bound it.
    origin: std::time::Instant,
    clock: clock::ServerClock,
}

/// A lease to ask for, with the send it books.
struct LeaseAsk<'a> {
    host: &'a str,
    budget: bool,
    /// The learning state's version the worker holds: the reply carries the state only
    /// when it is another.
    expected: u64,
    /// How far ahead of the server's clock the host's next slot may be for the lease to be
    /// granted (ms).
    ahead: f64,
    /// The least time ahead of the server's clock the send is booked (ms): the look-ahead.
    look: f64,
    /// The gap's share of the interval (see `state::gap_factor`).
    factor: f64,
    /// The host's interval, slack and floor from the worker's machine, for a host whose
    /// pacing record does not exist yet: `iv,sl,cd`.
    init: String,
    concurrency: u32,
    /// The lease number this lease gets if granted.
    number: u64,
    /// The number of a second lease of the host, asked when it is open (see `queue`).
    extra: Option<u64>,
    /// The host's limiter group, for pooling (see `lua`): `site,own_gap,own_max_rate,
    /// known_pacer,known_version`, empty when it has none.
    pool: String,
}

/// What one step asks for besides flushing.
#[derive(Default)]
struct Ask<'a> {
    lease: Option<LeaseAsk<'a>>,
    sync: bool,
    /// A host whose shared state to read afresh.
    peek: Option<&'a str>,
}

/// A decoded lease answer.
struct Leased {
    code: i64,
    /// The lease number (granted leases only).
    id: u64,
    member: Vec<u8>,
    /// The host's requests in flight fleet-wide, as the answer counted them.
    in_flight: u64,
    /// The send time Redis booked (granted leases with a budget).
    at: f64,
    /// A second request of an open host, granted with the first: its lease number and
    /// queue member.
    extra: Option<(u64, Vec<u8>)>,
}

/// A request of an open host granted with another (see `lua`), kept for the frontier's next
/// lease of the host. It goes without a round trip within [`crawler_sched::CONFIRM_LEAD_MS`]
/// of its grant (the host's state came with it: as fresh as the read before a held
/// request's send), unless a hold or a skip was heard since; later, back to its queue.
struct Kept {
    lease: u64,
    member: Vec<u8>,
    /// The fleet time it was granted (ms).
    granted: f64,
}

/// A [`QueueStore`](crawler_sched::QueueStore) in Redis shared by a fleet of workers, and (through
/// [`RedisStore::budget`]) their shared per-host budget. See the [crate docs](crate#redis)
/// for the key layout, the round trips and the failure behaviour.
pub struct RedisStore {
    inner: Arc<Mutex<Inner>>,
}

/// The [`SharedBudget`] of a [`RedisStore`]'s job.
pub struct RedisBudget {
    inner: Arc<Mutex<Inner>>,
}

/// The [`Fleet`] view of a [`RedisStore`]'s job.
pub struct RedisFleet {
    inner: Arc<Mutex<Inner>>,
}

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // A panic while holding the lock leaves buffers that are still valid to send.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RedisStore {
    /// Connect and join the job (retrying for `retry_for` while Redis is unreachable).
    pub fn open(options: RedisOptions) -> Result<Self, Error> {
        if options.url.starts_with("rediss:") {
            // redis-rs takes rustls' process-wide provider; the workspace uses ring.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let mut link = Link::open(&options.url, options.retry_for, STEP.as_str(), options.stop)?;
        let origin = std::time::Instant::now();
        let time: Vec<String> = link.query(&redis::cmd("TIME"), "read the server's clock")?;
        let local = origin.elapsed().as_secs_f64() * 1_000.0;
        let server = server_ms(&time).ok_or_else(|| {
            Error::redis_reply(&link.shown, "TIME did not answer seconds and microseconds")
        })?;
        let (job, worker, layout) = Job::join(&mut link, &options.job, options.idle_ttl)?;
        let inner = Inner {
            reconnects_seen: link.reconnects,
            pushed: replay::PushLog::new(layout.shards.len()),
            link,
            gens: vec![0; layout.shards.len()],
            layout,
            job,
            worker,
            timeout: options.lease_timeout.max(Duration::from_millis(100)),
            idle_ttl: options.idle_ttl,
            sync_every: options.sync_every,
            default_params: options.budget,
            lease_ahead_ms: options.lease_ahead.as_secs_f64() * 1_000.0,
            booked: None,
            rebooked: HashMap::new(),
            full: HashMap::new(),
            params: HashMap::new(),
            pushes: Vec::new(),
            acks: Vec::new(),
            next_lease: 0,
            commits: Vec::new(),
            stats: None,
            kept: HashMap::new(),
            open_leases: HashMap::new(),
            lease_hosts: HashMap::new(),
            shares: HashMap::new(),
            turns: HashMap::new(),
            last_booked: HashMap::new(),
            last_renew: std::time::Instant::now(),
            lens: HashMap::new(),
            states: HashMap::new(),
            learned: HashMap::new(),
            pacing: HashMap::new(),
            pools: HashMap::new(),
            pool_params: HashMap::new(),
            pool_members: Vec::new(),
            peek_pacer: None,
            heard_at: HashMap::new(),
            ops: Vec::new(),
            op_slots: HashMap::new(),
            committed: HashMap::new(),
            deferred: HashMap::new(),
            commits_sent: Vec::new(),
            skipped_here: HashSet::new(),
            fleet: FleetStatus::default(),
            last_sync: None,
            dups: 0,
            reclaimed: 0,
            seen: HashSet::new(),
            last_fp: None,
            error: None,
            lost: None,
            origin,
            clock: clock::ServerClock::new(0.0, local, server),
        };
        Ok(Self {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    /// The job's shared per-host politeness state, for [`crawler_sched::SharedThrottle`].
    /// Sends are booked by this store's leases only when [`RedisOptions::budget`] was set.
    pub fn budget(&self) -> Arc<dyn SharedBudget> {
        Arc::new(RedisBudget {
            inner: Arc::clone(&self.inner),
        })
    }

    /// The fleet's shared robots.txt files, for the downloader: each origin's file is
    /// fetched once per TTL by the whole fleet, not by every worker.
    pub fn robots(&self) -> Arc<dyn crawler_core::RobotsShare> {
        Arc::new(robots::RedisRobots {
            inner: Arc::clone(&self.inner),
        })
    }

    /// The fleet view, for [`crawler_sched::FleetFrontier`].
    pub fn fleet(&self) -> Box<dyn Fleet> {
        Box::new(RedisFleet {
            inner: Arc::clone(&self.inner),
        })
    }

    /// This worker's number in the job (1 for the first to join).
    pub fn worker(&self) -> u32 {
        lock(&self.inner).worker
    }

    /// Round trips this store made to Redis so far: waits for a reply, however many
    /// cluster masters a step's scripts went to at once.
    pub fn round_trips(&self) -> u64 {
        lock(&self.inner).link.round_trips
    }

    /// Commands this store sent to Redis so far (one per script call: on a single server
    /// one per step, on a cluster one per shard a step touches).
    pub fn commands(&self) -> u64 {
        lock(&self.inner).link.commands
    }

    /// Whether this store talks to a Redis Cluster (`redis+cluster://`).
    pub fn is_cluster(&self) -> bool {
        lock(&self.inner).link.cluster
    }

    /// The key prefixes of this job: its global part first (epoch, worker counter,
    /// stats), then each shard's (queues, seen set, politeness states, leases), each
    /// under a cluster hash tag of its own. For inspecting a job with `redis-cli`.
    pub fn key_prefixes(&self) -> Vec<String> {
        let inner = lock(&self.inner);
        std::iter::once(inner.layout.global.clone())
            .chain(inner.layout.shards.iter().cloned())
            .collect()
    }

    /// Leases of other (dead) workers this worker returned to their queues.
    pub fn reclaimed(&self) -> u64 {
        lock(&self.inner).reclaimed
    }

    /// The job's epoch: a random identity written when the job was created in Redis.
    pub fn job_epoch(&self) -> String {
        lock(&self.inner).job.epoch.clone()
    }

    /// This worker's lease id prefix in Redis (random per opened store), so lease ids
    /// (`TOKEN:N`) never repeat across workers, restarts of a worker or of Redis.
    pub fn lease_token(&self) -> String {
        lock(&self.inner).job.token.clone()
    }

    /// Times this worker saw Redis roll back (its step generation went backwards) and
    /// forgot its local seen cache.
    pub fn rollbacks(&self) -> u64 {
        lock(&self.inner).job.rollbacks
    }

    /// Send everything buffered (pushes, acknowledgements, reports) now, and hear from
    /// every shard of the job (so a Redis that forgot or rolled back is noticed at once).
    pub fn flush(&self) -> Result<(), Error> {
        let mut inner = lock(&self.inner);
        // Everything learned so far goes too, and requests kept for a next lease go back.
        inner.fold_deferred(true);
        for (host, kept) in std::mem::take(&mut inner.kept) {
            inner.give_back(&host, kept);
        }
        inner.step(Ask {
            lease: None,
            sync: true,
            peek: None,
        })?;
        inner.drain()
    }

    /// Every worker's last saved stats (as saved by `QueueStore::checkpoint`), by worker.
    pub fn worker_stats(&self) -> Result<Vec<(u32, serde_json::Value)>, Error> {
        let mut inner = lock(&self.inner);
        let key = format!("{}stats", inner.layout.global);
        read_stats(&mut inner.link, &key)
    }

    /// Every worker's last saved stats of the job `job` at `url`, by worker, read without
    /// joining the job (no worker number is taken, nothing is leased): the fleet's figures
    /// while it runs, or once its workers are done. `retry_for` bounds the wait for an
    /// unreachable Redis.
    pub fn read_worker_stats(
        url: &str,
        job: &str,
        retry_for: Duration,
    ) -> Result<Vec<(u32, serde_json::Value)>, Error> {
        if url.starts_with("rediss:") {
            // As in `open`: redis-rs takes rustls' process-wide provider.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let mut link = Link::open(url, retry_for, STEP.as_str(), None)?;
        let key = format!("{}stats", Layout::new(job, 1).global);
        read_stats(&mut link, &key)
    }
}

/// The workers' stats saved under `key` (a hash of worker number to JSON), by worker.
fn read_stats(link: &mut Link, key: &str) -> Result<Vec<(u32, serde_json::Value)>, Error> {
    let map: HashMap<String, String> =
        link.query(redis::cmd("HGETALL").arg(key), "read the stats")?;
    let mut out = Vec::new();
    for (w, json) in map {
        let w = w.parse().unwrap_or(0);
        let v = serde_json::from_str(&json)
            .map_err(|e| Error::redis_reply(&link.shown, format!("worker {w}'s stats: {e}")))?;
        out.push((w, v));
    }
    out.sort_by_key(|(w, _)| *w);
    Ok(out)
}
