//! [`RedisStore`]: one crawl's frontier, seen set, leases and per-host budgets in Redis,
//! shared by every worker that opens the same job.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crawler_core::{FailureKind, Feedback, Request};
use crawler_sched::{
    BudgetParams, Entry, Fingerprint, Fleet, FleetStatus, HostView, QueueStore, SharedBudget,
    fingerprint,
};
use redis::Value;
use tokio::time::Instant;

use crate::error::Error;
use crate::redis_link::Link;
use crate::redis_lua::STEP;

/// Bytes before the request JSON in a queue member: flipped priority, seq, worker.
const MEMBER_HEADER: usize = 4 + 8 + 4;
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
    pub budget: Option<BudgetParams>,
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
        }
    }
}

/// One budget outcome waiting to be sent.
struct Report {
    host: String,
    skip: String,
    nums: [f64; 9],
    params: BudgetParams,
}

struct Inner {
    link: Link,
    prefix: String,
    worker: u32,
    timeout: Duration,
    sync_every: Duration,
    default_params: Option<BudgetParams>,
    params: HashMap<String, BudgetParams>,
    pushes: Vec<(String, Option<[u8; 16]>, Vec<u8>)>,
    acks: Vec<u64>,
    reports: Vec<Report>,
    stats: Option<String>,
    open_leases: HashSet<u64>,
    last_renew: std::time::Instant,
    lens: HashMap<String, usize>,
    views: HashMap<String, HostView>,
    skipped_here: HashSet<String>,
    fleet: FleetStatus,
    last_sync: Option<std::time::Instant>,
    dups: u64,
    reclaimed: u64,
    seen: HashSet<u128>,
    last_fp: Option<u128>,
}

/// What one step asks for besides flushing.
#[derive(Default)]
struct Ask<'a> {
    lease: Option<&'a str>,
    sync: bool,
}

/// A decoded lease answer.
struct Leased {
    code: i64,
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
        let mut link = Link::open(&options.url, options.retry_for, STEP)?;
        let prefix = format!("crawler:{{{}}}:", options.job);
        let worker: i64 = link.query(
            redis::cmd("HINCRBY")
                .arg(format!("{prefix}meta"))
                .arg("workers")
                .arg(1),
            "join the job",
        )?;
        tracing::info!(redis = %link.shown, job = %options.job, worker, "joined the crawl");
        let inner = Inner {
            link,
            prefix,
            worker: u32::try_from(worker).unwrap_or(u32::MAX),
            timeout: options.lease_timeout.max(Duration::from_millis(100)),
            sync_every: options.sync_every,
            default_params: options.budget,
            params: HashMap::new(),
            pushes: Vec::new(),
            acks: Vec::new(),
            reports: Vec::new(),
            stats: None,
            open_leases: HashSet::new(),
            last_renew: std::time::Instant::now(),
            lens: HashMap::new(),
            views: HashMap::new(),
            skipped_here: HashSet::new(),
            fleet: FleetStatus::default(),
            last_sync: None,
            dups: 0,
            reclaimed: 0,
            seen: HashSet::new(),
            last_fp: None,
        };
        Ok(Self {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    /// The job's shared per-host budget, for [`crawler_sched::SharedThrottle`]. It is
    /// enforced by this store's leases only when [`RedisOptions::budget`] was set.
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

    fn params_for(&self, host: &str) -> Option<&BudgetParams> {
        self.params.get(host).or(self.default_params.as_ref())
    }

    /// One round trip: send what is buffered, plus a lease or a sync if asked; apply the
    /// answer. Buffers are cleared only after Redis confirmed, so an outage loses nothing.
    fn step(&mut self, ask: Ask<'_>) -> Result<Option<Leased>, Error> {
        let renew = self.last_renew.elapsed() >= self.timeout / 4 && !self.open_leases.is_empty();
        let mut args = self.key_arg();
        args.push(self.stats.clone().unwrap_or_default().into_bytes());
        args.push(self.pushes.len().to_string().into_bytes());
        for (host, fp, member) in &self.pushes {
            args.push(host.clone().into_bytes());
            args.push(fp.map(|f| f.to_vec()).unwrap_or_default());
            args.push(member.clone());
        }
        args.push(self.acks.len().to_string().into_bytes());
        args.extend(self.acks.iter().map(|a| a.to_string().into_bytes()));
        if renew {
            args.push(self.open_leases.len().to_string().into_bytes());
            args.extend(self.open_leases.iter().map(|a| a.to_string().into_bytes()));
        } else {
            args.push(b"0".to_vec());
        }
        args.push(self.reports.len().to_string().into_bytes());
        for r in &self.reports {
            args.push(r.host.clone().into_bytes());
            args.push(r.skip.clone().into_bytes());
            args.extend(r.nums.iter().map(|n| n.to_string().into_bytes()));
            push_params(&mut args, &r.params);
        }
        let lease_params = ask.lease.and_then(|h| self.params_for(h).cloned());
        let drain = ask.lease.is_some_and(|h| self.skipped_here.contains(h));
        args.push(ask.lease.unwrap_or("").as_bytes().to_vec());
        args.push(if drain { b"1".to_vec() } else { b"0".to_vec() });
        args.push(if lease_params.is_some() {
            b"1".to_vec()
        } else {
            b"0".to_vec()
        });
        push_params(&mut args, &lease_params.unwrap_or_else(neutral_params));
        args.push(if ask.sync {
            b"1".to_vec()
        } else {
            b"0".to_vec()
        });

        let what = if ask.lease.is_some() {
            "lease a request"
        } else if ask.sync {
            "read the fleet's state"
        } else {
            "write buffered updates"
        };
        let reply = self.link.step(&args, what)?;
        let sent_at = Instant::now();
        self.pushes.clear();
        self.acks.clear();
        self.reports.clear();
        self.stats = None;
        if renew {
            self.last_renew = std::time::Instant::now();
        }
        self.apply(reply, ask, sent_at)
    }

    fn bad(&self, detail: &str) -> Error {
        Error::redis_reply(&self.link.shown, detail)
    }

    fn apply(&mut self, reply: Value, ask: Ask<'_>, at: Instant) -> Result<Option<Leased>, Error> {
        let Value::Array(parts) = reply else {
            return Err(self.bad("the step script did not return an array"));
        };
        let [dups, reclaimed, lease, views, sync] = <[Value; 5]>::try_from(parts)
            .map_err(|_| self.bad("the step script returned the wrong number of parts"))?;
        self.dups += int(&dups).unsigned_abs();
        let reclaimed = int(&reclaimed).unsigned_abs();
        if reclaimed > 0 {
            tracing::info!(
                reclaimed,
                "leases of a stopped worker returned to their queues"
            );
            self.reclaimed += reclaimed;
        }
        if let Value::Array(views) = views {
            for v in views {
                if let Value::Array(f) = v {
                    let host = text(f.first());
                    let view = HostView {
                        ready_at: at + ms(int_at(&f, 1)),
                        rate: float_at(&f, 2),
                        holds: int_at(&f, 3).unsigned_abs(),
                        held: ms(int_at(&f, 4)),
                    };
                    self.views.insert(host, view);
                }
            }
        }
        if ask.sync {
            if let Value::Array(s) = sync {
                self.last_sync = Some(std::time::Instant::now());
                let leased = usize::try_from(int_at(&s, 0)).unwrap_or(0);
                for n in self.lens.values_mut() {
                    *n = 0;
                }
                let mut queued = 0;
                for chunk in s.get(1..).unwrap_or_default().chunks(3) {
                    let host = text(chunk.first());
                    let n = usize::try_from(int_at(chunk, 1)).unwrap_or(0);
                    if int_at(chunk, 2) == 0 {
                        queued += n;
                    }
                    self.lens.insert(host, n);
                }
                // Pushes still buffered here are work too.
                for (host, _, _) in &self.pushes {
                    *self.lens.entry(host.clone()).or_default() += 1;
                }
                self.fleet = FleetStatus { queued, leased };
            }
        }
        let Some(host) = ask.lease else {
            return Ok(None);
        };
        let Value::Array(l) = lease else {
            return Err(self.bad("the lease answer is not an array"));
        };
        let code = int_at(&l, 0);
        let left = usize::try_from(int_at(&l, 3)).unwrap_or(0);
        tracing::debug!(
            worker = self.worker,
            host,
            code,
            left,
            ready_in_ms = int_at(&l, 4),
            "lease answer"
        );
        self.lens.insert(host.to_owned(), left);
        if code >= 0 && self.params_for(host).is_some() {
            let view = HostView {
                ready_at: at + ms(int_at(&l, 4)) + Duration::from_millis(1),
                rate: float_at(&l, 5),
                holds: int_at(&l, 6).unsigned_abs(),
                held: ms(int_at(&l, 7)),
            };
            self.views.insert(host.to_owned(), view);
        }
        let member = match l.get(2) {
            Some(Value::BulkString(b)) => b.clone(),
            _ => Vec::new(),
        };
        Ok(Some(Leased {
            code,
            id: int_at(&l, 1).unsigned_abs(),
            member,
        }))
    }

    fn sync_if_due(&mut self) -> Result<(), Error> {
        let due = self
            .last_sync
            .is_none_or(|t| t.elapsed() >= self.sync_every);
        if due {
            self.step(Ask {
                lease: None,
                sync: true,
            })?;
        } else if !self.open_leases.is_empty() && self.last_renew.elapsed() >= self.timeout / 4 {
            self.step(Ask::default())?;
        }
        Ok(())
    }
}

fn neutral_params() -> BudgetParams {
    BudgetParams::from_settings(&crawler_core::Settings::default())
}

fn push_params(args: &mut Vec<Vec<u8>>, p: &BudgetParams) {
    let nums = [
        p.start_rate,
        p.min_rate,
        p.max_rate,
        f64::from(p.burst.max(1)),
        p.min_gap.as_secs_f64() * 1000.0,
        p.hold_margin.as_secs_f64() * 1000.0,
        p.soft_block_pause.as_secs_f64() * 1000.0,
        p.soft_block_resume,
        p.latency_tolerance.as_secs_f64() * 1000.0,
    ];
    args.extend(nums.iter().map(|n| n.to_string().into_bytes()));
}

fn ms(n: i64) -> Duration {
    Duration::from_millis(n.max(0).unsigned_abs())
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

fn int_at(v: &[Value], i: usize) -> i64 {
    v.get(i).map_or(0, int)
}

fn float_at(v: &[Value], i: usize) -> f64 {
    match v.get(i) {
        Some(Value::BulkString(b)) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0.0),
        Some(Value::Int(n)) => *n as f64,
        _ => 0.0,
    }
}

fn text(v: Option<&Value>) -> String {
    match v {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        _ => String::new(),
    }
}

/// The queue member of an entry: bytes sort in serving order (priority high to low, then
/// seq), then the worker (two workers may use the same seq), then the request.
fn member(entry: &Entry, worker: u32) -> Result<Vec<u8>, serde_json::Error> {
    let json = serde_json::to_vec(&entry.request)?;
    let mut m = Vec::with_capacity(MEMBER_HEADER + json.len());
    // Order-preserving map of i32 to u32, then inverted so that higher priority is smaller.
    let prio = !((entry.priority as u32) ^ 0x8000_0000);
    m.extend_from_slice(&prio.to_be_bytes());
    m.extend_from_slice(&entry.seq.to_be_bytes());
    m.extend_from_slice(&worker.to_be_bytes());
    m.extend_from_slice(&json);
    Ok(m)
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
        let m = member(&entry, inner.worker)
            .map_err(|e| Error::redis_reply(&inner.link.shown, format!("cannot encode: {e}")))?;
        inner.pushes.push((host.to_owned(), fp, m));
        *inner.lens.entry(host.to_owned()).or_default() += 1;
        if inner.pushes.len() >= PUSH_BATCH {
            inner.step(Ask::default())?;
        }
        Ok(())
    }

    fn lease(&mut self, host: &str) -> Result<Option<(u64, Request)>, crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        let Some(leased) = inner.step(Ask {
            lease: Some(host),
            sync: false,
        })?
        else {
            return Ok(None);
        };
        if leased.code != 1 {
            return Ok(None);
        }
        let json = leased.member.get(MEMBER_HEADER..).unwrap_or_default();
        let request: Request = serde_json::from_slice(json)
            .map_err(|e| inner.bad(&format!("a queued request of {host} does not decode: {e}")))?;
        inner.open_leases.insert(leased.id);
        Ok(Some((leased.id, request)))
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
                tracing::error!("cannot renew leases: {e}");
            }
        }
        inner.lens.values().sum()
    }

    fn hosts(&self) -> Vec<String> {
        let mut inner = lock(&self.inner);
        if let Err(e) = inner.sync_if_due() {
            tracing::error!("cannot read the fleet's state: {e}");
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
    fn register(&self, host: &str, params: &BudgetParams) {
        let mut inner = lock(&self.inner);
        if inner.default_params.is_some() {
            inner.params.insert(host.to_owned(), params.clone());
        }
    }

    fn view(&self, host: &str) -> Option<HostView> {
        lock(&self.inner).views.get(host).copied()
    }

    fn report(
        &self,
        host: &str,
        fb: &Feedback,
        urgent: bool,
        skip: Option<&str>,
    ) -> Result<(), crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        let Some(params) = inner.params_for(host).cloned() else {
            return Ok(());
        };
        let msf = |d: Duration| d.as_secs_f64() * 1000.0;
        let (rl_rem, rl_reset) = fb.rate_limit.map_or((0.0, -1.0), |rl| {
            // No stated reset: the policy window, or "unknown" as for no reading.
            let reset = rl.reset.or(rl.window).map_or(-1.0, msf);
            (rl.remaining as f64, reset)
        });
        let nums = [
            f64::from(u8::from(fb.sent)),
            f64::from(fb.status.unwrap_or(0)),
            msf(fb.latency),
            f64::from(u8::from(fb.failure == Some(FailureKind::Timeout))),
            fb.retry_after.map_or(-1.0, msf),
            rl_rem,
            rl_reset,
            f64::from(u8::from(fb.soft_block)),
            fb.crawl_delay.map_or(0.0, msf),
        ];
        if let Some(why) = skip {
            inner.skipped_here.insert(host.to_owned());
            tracing::warn!(host, "host skipped for the whole fleet: {why}");
        }
        inner.reports.push(Report {
            host: host.to_owned(),
            skip: skip.unwrap_or("").to_owned(),
            nums,
            params,
        });
        if urgent {
            inner.step(Ask::default())?;
        }
        Ok(())
    }
}

impl Fleet for RedisFleet {
    fn status(&self) -> FleetStatus {
        let mut inner = lock(&self.inner);
        let fresh = inner.step(Ask {
            lease: None,
            sync: true,
        });
        if let Err(e) = fresh {
            // The last known state stands; the store reports the outage on its next call.
            tracing::error!("cannot read the fleet's state: {e}");
        }
        inner.fleet
    }
}
