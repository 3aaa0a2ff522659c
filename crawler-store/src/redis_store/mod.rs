//! [`RedisStore`]: one crawl's frontier, seen set, leases and per-host budgets in Redis,
//! shared by every worker that opens the same job.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crawler_core::{Feedback, Request, Shutdown};
use crawler_sched::politeness::{HostMachine, HostState, Params};
use crawler_sched::{
    Entry, Fingerprint, Fleet, FleetStatus, QueueStore, SharedBudget, Versioned, fingerprint,
};

use crate::error::Error;
use job::Job;
use link::Link;
use lua::STEP;
use reply::{MEMBER_HEADER, member, server_ms};

mod clock;
mod job;
mod link;
mod lua;
mod reply;
mod step;

pub use link::redis_round_trips;

/// Pushes buffered before they are sent without waiting for the next lease.
const PUSH_BATCH: usize = 256;
/// Fingerprints remembered locally as seen; past this the memory is cleared (the shared
/// seen set stays the truth, the local set only saves round trips and batching).
const LOCAL_SEEN_MAX: usize = 1 << 21;

/// How to reach Redis and which crawl to join.
#[derive(Debug, Clone)]
pub struct RedisOptions {
    /// `redis://[:password@]host[:port][/db]`, or `rediss://` for TLS.
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

struct Inner {
    link: Link,
    prefix: String,
    /// Which job, and which run of it, this worker joined.
    job: Job,
    worker: u32,
    timeout: Duration,
    idle_ttl: Duration,
    sync_every: Duration,
    default_params: Option<Params>,
    /// [`RedisOptions::lease_ahead`], ms.
    lease_ahead_ms: f64,
    /// The last lease granted and the fleet time its send was booked for.
    booked: Option<(u64, f64)>,
    params: HashMap<String, Params>,
    pushes: Vec<(String, Option<[u8; 16]>, Vec<u8>)>,
    acks: Vec<u64>,
    /// The last lease number this worker handed out (its ids in Redis are `TOKEN:N`).
    next_lease: u64,
    commits: Vec<Commit>,
    stats: Option<String>,
    open_leases: HashSet<u64>,
    last_renew: std::time::Instant,
    lens: HashMap<String, usize>,
    /// Each host's politeness state as last heard (Redis counts requests in flight itself).
    states: HashMap<String, Versioned>,
    /// Results of the commits of the last step, by host: committed or not.
    committed: HashMap<String, bool>,
    /// Routine outcomes not yet committed, by host, with the fleet time they happened:
    /// folded into the next commit of the host's state (the next lease, or the next step).
    deferred: HashMap<String, Vec<(Feedback, f64)>>,
    /// The folded outcomes of the commits in flight in the current step.
    commits_sent: Vec<(String, Vec<(Feedback, f64)>)>,
    skipped_here: HashSet<String>,
    fleet: FleetStatus,
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
    expected: u64,
    claim: f64,
    /// How far ahead of the server's clock the claim may be (ms).
    ahead: f64,
    /// The fleet time the send is booked for (budget leases).
    at: f64,
    state: String,
    concurrency: u32,
    /// The lease number this lease gets if granted.
    number: u64,
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
}

/// A [`QueueStore`] in Redis shared by a fleet of workers, and (through
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
        let mut link = Link::open(&options.url, options.retry_for, STEP, options.stop)?;
        let origin = std::time::Instant::now();
        let time: Vec<String> = link.query(&redis::cmd("TIME"), "read the server's clock")?;
        let local = origin.elapsed().as_secs_f64() * 1_000.0;
        let server = server_ms(&time).ok_or_else(|| {
            Error::redis_reply(&link.shown, "TIME did not answer seconds and microseconds")
        })?;
        let prefix = format!("crawler:{{{}}}:", options.job);
        let (job, worker) = Job::join(&mut link, &prefix, &options.job, options.idle_ttl)?;
        let inner = Inner {
            reconnects_seen: link.reconnects,
            link,
            prefix,
            job,
            worker,
            timeout: options.lease_timeout.max(Duration::from_millis(100)),
            idle_ttl: options.idle_ttl,
            sync_every: options.sync_every,
            default_params: options.budget,
            lease_ahead_ms: options.lease_ahead.as_secs_f64() * 1_000.0,
            booked: None,
            params: HashMap::new(),
            pushes: Vec::new(),
            acks: Vec::new(),
            next_lease: 0,
            commits: Vec::new(),
            stats: None,
            open_leases: HashSet::new(),
            last_renew: std::time::Instant::now(),
            lens: HashMap::new(),
            states: HashMap::new(),
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

    /// Round trips this store made to Redis so far.
    pub fn round_trips(&self) -> u64 {
        lock(&self.inner).link.round_trips
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

    /// Send everything buffered (pushes, acknowledgements, reports) now.
    pub fn flush(&self) -> Result<(), Error> {
        lock(&self.inner).step(Ask::default()).map(|_| ())
    }

    /// Every worker's last saved stats (as saved by `QueueStore::checkpoint`), by worker.
    pub fn worker_stats(&self) -> Result<Vec<(u32, serde_json::Value)>, Error> {
        let mut inner = lock(&self.inner);
        let key = format!("{}stats", inner.prefix);
        let map: HashMap<String, String> = inner
            .link
            .query(redis::cmd("HGETALL").arg(key), "read the stats")?;
        let mut out = Vec::new();
        for (w, json) in map {
            let w = w.parse().unwrap_or(0);
            let v = serde_json::from_str(&json).map_err(|e| {
                Error::redis_reply(&inner.link.shown, format!("worker {w}'s stats: {e}"))
            })?;
            out.push((w, v));
        }
        out.sort_by_key(|(w, _)| *w);
        Ok(out)
    }
}

impl Inner {
    fn key_arg(&self) -> Vec<Vec<u8>> {
        vec![
            self.prefix.as_bytes().to_vec(),
            self.worker.to_string().into_bytes(),
            self.timeout.as_millis().to_string().into_bytes(),
        ]
    }

    /// Keep a failure that could not be returned, for [`Fleet::take_error`].
    fn keep_error(&mut self, what: &str, e: Error) {
        tracing::error!("{what}: {e}");
        self.error.get_or_insert(e);
    }

    fn params_for(&self, host: &str) -> Option<&Params> {
        self.params.get(host).or(self.default_params.as_ref())
    }

    /// The Redis server's clock now, as estimated from the round trips so far (ms).
    fn now_ms(&self) -> f64 {
        self.origin.elapsed().as_secs_f64() * 1_000.0 + self.clock.offset_ms()
    }

    /// The host's state as last heard, or a fresh one on the fleet's clock.
    fn machine(&self, host: &str, params: &Params) -> (HostMachine, u64) {
        match self.states.get(host) {
            Some(v) => (
                HostMachine::with_state(params.clone(), v.state.clone()),
                v.version,
            ),
            None => (HostMachine::new(params.clone(), self.now_ms()), 0),
        }
    }

    fn remember(&mut self, host: &str, version: u64, state: &str) {
        if state.is_empty() {
            return;
        }
        match serde_json::from_str::<HostState>(state) {
            Ok(state) => {
                self.states
                    .insert(host.to_owned(), Versioned { state, version });
            }
            Err(e) => tracing::warn!(host, "unreadable politeness state in Redis: {e}"),
        }
    }

    /// Turn the routine outcomes waiting for each host (but `except`, whose lease will
    /// carry them) into state commits for this step.
    fn fold_deferred(&mut self, except: Option<&str>) {
        let hosts: Vec<String> = self
            .deferred
            .keys()
            .filter(|h| Some(h.as_str()) != except)
            .cloned()
            .collect();
        for host in hosts {
            let Some(params) = self.params_for(&host).cloned() else {
                self.deferred.remove(&host);
                continue;
            };
            let folded = self.deferred.remove(&host).unwrap_or_default();
            let (mut m, expected) = self.machine(&host, &params);
            for (fb, at) in &folded {
                let _ = m.on_feedback(fb, *at);
            }
            // Routine outcomes change little (discovery growth), but every change is logged
            // with its trigger, here as on a local crawl.
            crawler_sched::log_changes(&host, m.take_audit(), &mut Default::default());
            self.commits.push(Commit {
                host,
                expected,
                state: m.state().clone(),
                skip: String::new(),
                folded,
            });
        }
    }
}

impl QueueStore for RedisStore {
    /// Answers from local memory: a fingerprint this worker has not met is taken as new,
    /// and the shared seen set decides when the push reaches Redis (in the same atomic
    /// step as the queue insert). A request another worker queued first is then dropped
    /// there and counted as a duplicate in the stats this worker saves.
    fn insert_seen(&mut self, fp: Fingerprint) -> Result<bool, crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        if inner.seen.len() >= LOCAL_SEEN_MAX {
            inner.seen.clear();
        }
        let new = inner.seen.insert(fp.0);
        inner.last_fp = new.then_some(fp.0);
        Ok(new)
    }

    fn push(&mut self, host: &str, entry: Entry) -> Result<(), crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        // Only the request whose fingerprint was just admitted carries it; a retry or a
        // `dont_filter` request skips the shared seen set.
        let fp = inner
            .last_fp
            .take()
            .filter(|fp| !entry.request.dont_filter && fingerprint(&entry.request).0 == *fp)
            .map(u128::to_be_bytes);
        let m = member(&entry, inner.job.tag())
            .map_err(|e| Error::redis_reply(&inner.link.shown, format!("cannot encode: {e}")))?;
        inner.pushes.push((host.to_owned(), fp, m));
        *inner.lens.entry(host.to_owned()).or_default() += 1;
        if inner.pushes.len() >= PUSH_BATCH {
            inner.step(Ask::default())?;
        }
        Ok(())
    }

    /// With a budget, the send is booked in the host's shared state in the same atomic
    /// step as the lease: the worker runs the host's machine on the state it last heard,
    /// and Redis commits the result only if nobody changed the state in between and its
    /// own clock agrees the send is due (otherwise the fresher state comes back and the
    /// worker decides again).
    fn lease(&mut self, host: &str) -> Result<Option<(u64, Request)>, crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        let mut leased = None;
        // The changes of the outcomes this lease carries; logged once it is committed.
        let mut audit = Vec::new();
        for _ in 0..8 {
            let params = inner.params_for(host).cloned();
            let ask = match &params {
                Some(params) if !inner.skipped_here.contains(host) => {
                    let (mut m, expected) = inner.machine(host, params);
                    let now = inner.now_ms();
                    // Routine outcomes waiting for this host ride with the lease.
                    for (fb, at) in inner.deferred.get(host).into_iter().flatten() {
                        let _ = m.on_feedback(fb, *at);
                    }
                    audit = m.take_audit();
                    let claim = m.ready_at();
                    let ahead = crawler_sched::lease_ahead(&m, inner.lease_ahead_ms);
                    // The configured cap, fleet-wide: pacing keeps the rate, and every
                    // worker gets a share of the host's requests to parse.
                    let concurrency = params.concurrency.max(1);
                    if claim > now + ahead + 1.0 {
                        // Not due (less the look-ahead) by what this worker last heard; the
                        // throttle's ready time says when to come back. (Requests in flight fleet-wide are
                        // counted by Redis, which also gets this worker's acknowledgements
                        // in the same step.)
                        return Ok(None);
                    }
                    // Booked at the slot, and never sooner than the look-ahead from now, even
                    // when the slot has passed: the worker holds the request until then
                    // (FleetFrontier), so it leaves on time whatever the reply's delay. A
                    // send booked for now would leave late by that delay, and the next
                    // worker's, on time, would follow it closer than the interval.
                    let at = claim.max(now + ahead);
                    m.on_send(at);
                    let state = serde_json::to_string(m.state()).map_err(|e| {
                        inner.bad(&format!("cannot encode a politeness state: {e}"))
                    })?;
                    LeaseAsk {
                        host,
                        budget: true,
                        expected,
                        claim,
                        ahead,
                        at,
                        state,
                        concurrency,
                        number: inner.next_lease + 1,
                    }
                }
                _ => LeaseAsk {
                    host,
                    budget: false,
                    expected: 0,
                    claim: 0.0,
                    ahead: 0.0,
                    at: 0.0,
                    state: String::new(),
                    concurrency: u32::MAX,
                    number: inner.next_lease + 1,
                },
            };
            let booked = ask.budget.then_some(ask.at);
            let answer = inner.step(Ask {
                lease: Some(ask),
                sync: false,
                peek: None,
            })?;
            inner.booked = match (&answer, booked) {
                (Some(l), Some(at)) if l.code == 1 => Some((l.id, at)),
                _ => None,
            };
            if answer.as_ref().is_some_and(|l| l.code == 1) {
                // The lease's commit carried them.
                inner.deferred.remove(host);
                crawler_sched::log_changes(
                    host,
                    std::mem::take(&mut audit),
                    &mut Default::default(),
                );
            }
            match answer {
                Some(l) if l.code == 4 => continue,
                other => {
                    leased = other;
                    break;
                }
            }
        }
        let Some(leased) = leased else {
            return Ok(None);
        };
        if leased.code != 1 {
            return Ok(None);
        }
        let json = leased.member.get(MEMBER_HEADER..).unwrap_or_default();
        // The number is spent even if the request does not decode: ids never repeat.
        inner.next_lease = leased.id;
        let request: Request = serde_json::from_slice(json)
            .map_err(|e| inner.bad(&format!("a queued request of {host} does not decode: {e}")))?;
        inner.open_leases.insert(leased.id);
        Ok(Some((leased.id, request)))
    }

    fn send_buffered(&mut self) -> Result<(), crawler_sched::Error> {
        lock(&self.inner).step(Ask::default())?;
        Ok(())
    }

    /// Buffered: sent with the next round trip, after the pushes it follows.
    fn ack(&mut self, lease: u64) -> Result<(), crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        inner.open_leases.remove(&lease);
        inner.acks.push(lease);
        Ok(())
    }

    fn host_len(&self, host: &str) -> usize {
        lock(&self.inner).lens.get(host).copied().unwrap_or(0)
    }

    fn queued(&self) -> usize {
        let mut inner = lock(&self.inner);
        // Called by the engine every tick: a convenient time to renew leases of long
        // downloads.
        if !inner.open_leases.is_empty() && inner.last_renew.elapsed() >= inner.timeout / 4 {
            if let Err(e) = inner.step(Ask::default()) {
                inner.keep_error("cannot renew leases", e);
            }
        }
        inner.lens.values().sum()
    }

    fn hosts(&self) -> Vec<String> {
        let mut inner = lock(&self.inner);
        if let Err(e) = inner.sync_if_due() {
            inner.keep_error("cannot read the fleet's state", e);
        }
        inner
            .lens
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(h, _)| h.clone())
            .collect()
    }

    fn next_seq(&self) -> u64 {
        1
    }

    /// Saves this worker's stats (with duplicates found by the shared seen set moved from
    /// "enqueued" to "filtered") under its worker number, and sends everything buffered.
    fn checkpoint(&mut self, stats: &serde_json::Value) -> Result<(), crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        let mut stats = stats.clone();
        let dups = inner.dups;
        if let Some(n) = stats.get_mut("requests_enqueued") {
            *n = (n.as_u64().unwrap_or(0).saturating_sub(dups)).into();
        }
        if let Some(serde_json::Value::Object(f)) = stats.get_mut("filtered") {
            let d = f
                .get("duplicate")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            f.insert("duplicate".into(), (d + dups).into());
        }
        inner.stats = Some(stats.to_string());
        inner.step(Ask::default())?;
        Ok(())
    }
}

impl SharedBudget for RedisBudget {
    fn register(&self, host: &str, params: &Params) {
        let mut inner = lock(&self.inner);
        if inner.default_params.is_some() {
            inner.params.insert(host.to_owned(), params.clone());
        }
    }

    fn cached(&self, host: &str) -> Option<Versioned> {
        lock(&self.inner).states.get(host).cloned()
    }

    fn now_ms(&self) -> f64 {
        lock(&self.inner).now_ms()
    }

    fn lease_ahead_ms(&self) -> f64 {
        lock(&self.inner).lease_ahead_ms
    }

    fn defer(&self, host: &str, feedback: &Feedback, at: f64) {
        let mut inner = lock(&self.inner);
        if inner.params_for(host).is_some() {
            inner
                .deferred
                .entry(host.to_owned())
                .or_default()
                .push((feedback.clone(), at));
        }
    }

    fn commit(
        &self,
        host: &str,
        expected: u64,
        state: &HostState,
        skip: Option<&str>,
    ) -> Result<bool, crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        if inner.params_for(host).is_none() {
            return Ok(true);
        }
        if let Some(why) = skip {
            inner.skipped_here.insert(host.to_owned());
            tracing::warn!(host, "host skipped for the whole fleet: {why}");
        }
        inner.commits.push(Commit {
            host: host.to_owned(),
            expected,
            state: state.clone(),
            skip: skip.unwrap_or("").to_owned(),
            folded: Vec::new(),
        });
        inner.step(Ask::default())?;
        Ok(inner.committed.get(host).copied().unwrap_or(false))
    }
}

impl Fleet for RedisFleet {
    fn status(&self) -> FleetStatus {
        let mut inner = lock(&self.inner);
        let fresh = inner.step(Ask {
            lease: None,
            sync: true,
            peek: None,
        });
        if let Err(e) = fresh {
            // The last known state stands for this call; the engine takes the error next
            // (through `take_error`) and stops, so an idle worker never waits forever.
            inner.keep_error("cannot read the fleet's state", e);
        }
        inner.fleet
    }

    fn take_error(&self) -> Option<crawler_sched::Error> {
        lock(&self.inner).error.take().map(Into::into)
    }

    fn booked_at(&self, lease: u64) -> Option<f64> {
        let (id, at) = lock(&self.inner).booked?;
        (id == lease).then_some(at)
    }

    fn now_ms(&self) -> f64 {
        lock(&self.inner).now_ms()
    }

    /// One round trip that reads the host's state (and sends whatever is buffered).
    fn still_clear(&self, host: &str, at: f64) -> bool {
        let mut inner = lock(&self.inner);
        if inner.params_for(host).is_none() {
            return true;
        }
        let read = inner.step(Ask {
            lease: None,
            sync: false,
            peek: Some(host),
        });
        if let Err(e) = read {
            // Unknown is not clear: the request goes back to its queue, its lease open
            // until it is queued again, and the engine stops on the error.
            inner.keep_error("cannot read a host's politeness state", e);
            return false;
        }
        if inner.skipped_here.contains(host) {
            return false;
        }
        // A hold placed since the lease ends after the booked send; one placed before it
        // ended at or before it (the slot was booked after it).
        inner
            .states
            .get(host)
            .is_none_or(|v| v.state.hold_until <= at)
    }
}
