//! The store's connection to Redis: one multiplexed async connection to a single server,
//! or a Redis Cluster connection (one multiplexed connection per master, the slot map
//! refreshed on `MOVED` and failovers), driven by a small I/O thread of the store's own;
//! with retries, script loading, and counters of round trips and commands.
//!
//! The frontier's `QueueStore` is synchronous: its methods are called from the engine's
//! loop and must answer before it goes on. So the connection runs on a current-thread
//! Tokio runtime in a thread of its own, and a call hands its futures over and waits for
//! the answer. That works whatever runtime (or none) the caller is on, and lets one step
//! send its scripts to several masters at once: a step costs one round trip of wall time
//! however many shards it touches ([`Link::round_trips`] counts those waits,
//! [`Link::commands`] the scripts and commands sent).
//!
//! **Cluster mode** is chosen by the URL's scheme: `redis+cluster://` (or
//! `rediss+cluster://` for TLS) followed by one or more seed nodes separated by commas,
//! with the credentials (if any) written once, before the first: see [`cluster_seeds`].
//!
//! During an outage a call retries (the crawl pauses: workers wait for Redis rather than
//! lose work), but never uncontrollably: every attempt is bounded (`CONNECT_TIMEOUT`,
//! `IO_TIMEOUT`), the pauses between attempts are sliced and check the crawl's
//! [`Shutdown`], and on a multi-threaded runtime the waiting is done in
//! `block_in_place`, so the signal listener and the downloads in flight keep running.
//! So Ctrl-C or SIGTERM during an outage ends the retries within about one attempt, and
//! once a link has given up (after `retry_for`, or on a stop request) every later call
//! fails at once: stopping never costs one `retry_for` per call. Of a step's scripts, only
//! those that failed are sent again.
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crawler_core::Shutdown;
use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

use crate::error::Error;

/// Round trips made by every Redis link of this process.
static PROCESS_ROUND_TRIPS: AtomicU64 = AtomicU64::new(0);
/// Commands (scripts included) sent by every Redis link of this process.
static PROCESS_COMMANDS: AtomicU64 = AtomicU64::new(0);

/// Round trips to Redis made by this process so far (all stores), for benchmarks and logs.
/// A step that sends scripts to several cluster masters at once waits once: one round trip.
pub fn redis_round_trips() -> u64 {
    PROCESS_ROUND_TRIPS.load(Ordering::Relaxed)
}

/// Commands (one script call each, mostly) sent to Redis by this process so far (all
/// stores). On a single server a step is one command; on a cluster, one per shard it
/// touches, sent at once.
pub fn redis_commands() -> u64 {
    PROCESS_COMMANDS.load(Ordering::Relaxed)
}

/// Why a round trip was made.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Purpose {
    /// A lease (with whatever was buffered).
    Lease = 0,
    /// A read of the whole fleet's state (an idle worker's poll).
    FleetRead = 1,
    /// A read of one host's state (a held request's check before its send).
    HostRead = 2,
    /// Buffered writes alone (politeness commits, acknowledgements, pushes, renewals).
    Write = 3,
    /// Joining, stats, anything else.
    Other = 4,
}

const PURPOSES: [&str; 5] = ["lease", "fleet read", "host read", "write", "other"];
static BY_PURPOSE: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

/// Round trips to Redis made by this process so far, by purpose: `lease`, `fleet read`
/// (an idle worker's poll of every shard), `host read` (a held request's check of its
/// host's state just before its send), `write` (buffered updates sent alone: politeness
/// commits, acknowledgements, pushes) and `other` (joining, stats).
pub fn redis_round_trips_by_purpose() -> [(&'static str, u64); 5] {
    std::array::from_fn(|i| (PURPOSES[i], BY_PURPOSE[i].load(Ordering::Relaxed)))
}

/// Lease answers by code: not granted because the queue was empty (0), granted (1), not
/// yet (2: the host's next slot is further off than the lease may reach, or it is held),
/// host skipped (3), and code 2 with the host's fleet-wide concurrency in flight (`full`).
const ANSWERS: [&str; 5] = ["empty", "granted", "not yet", "skipped", "full"];
static LEASE_ANSWERS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];
/// Bytes of the lease part of the steps that asked for one: sent (the lease's arguments)
/// and received (the answer without the request itself).
static LEASE_BYTES: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

/// Lease answers this process received so far, by kind: `empty` (nothing queued),
/// `granted`, `not yet` (the host's next slot is further off than a lease may reach, or it
/// is held: the worker asks again later), `skipped` and `full` (the host's fleet-wide
/// concurrency was in flight). A lease books its send in Redis itself, so there is no
/// answer for a lost race.
pub fn redis_lease_answers() -> [(&'static str, u64); 5] {
    std::array::from_fn(|i| (ANSWERS[i], LEASE_ANSWERS[i].load(Ordering::Relaxed)))
}

/// Bytes of politeness and lease bookkeeping per lease asked, summed over the leases this
/// process asked for: (leases, bytes sent, bytes received). Sent: the lease's arguments
/// (host, versions, look-ahead, pacing defaults, lease id); received: the answer without
/// the request itself (code, counts, the host's pacing record, and the learning state only
/// when it changed since this worker last heard it).
pub fn redis_lease_bytes() -> (u64, u64, u64) {
    let asked = LEASE_ANSWERS
        .iter()
        .map(|a| a.load(Ordering::Relaxed))
        .sum();
    (
        asked,
        LEASE_BYTES[0].load(Ordering::Relaxed),
        LEASE_BYTES[1].load(Ordering::Relaxed),
    )
}

/// Count one lease answer of `code` (`full`: refused for concurrency) whose lease part
/// took `sent` and `received` bytes.
pub(crate) fn count_lease(code: i64, full: bool, sent: usize, received: usize) {
    let code = if full { 4 } else { code };
    if let Some(a) = usize::try_from(code)
        .ok()
        .and_then(|c| LEASE_ANSWERS.get(c))
    {
        a.fetch_add(1, Ordering::Relaxed);
    }
    LEASE_BYTES[0].fetch_add(sent as u64, Ordering::Relaxed);
    LEASE_BYTES[1].fetch_add(received as u64, Ordering::Relaxed);
}

/// How long one command may take before the connection is judged broken. Every step is one
/// short script, so this is generous, and it bounds how long a stop request can wait on a
/// server that hangs rather than refuses.
const IO_TIMEOUT: Duration = Duration::from_secs(3);
/// How long connecting may take (a server that is down refuses at once; a black hole does
/// not answer at all).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest uninterrupted pause: a stop request is noticed within this.
const PAUSE_SLICE: Duration = Duration::from_millis(50);
/// Backoff between reconnection attempts: from the first to the cap, doubling.
const BACKOFF_FIRST: Duration = Duration::from_millis(50);
const BACKOFF_CAP: Duration = Duration::from_secs(2);

/// The seed nodes of a `redis+cluster://` (or `rediss+cluster://`) URL, each as a plain
/// `redis://` (or `rediss://`) URL carrying the credentials; `Ok(None)` for any other
/// scheme (a single server). `Err` names what is malformed.
///
/// `redis+cluster://[[user]:password@]host:port[,host:port...][/[0]]`: any one reachable
/// seed is enough (the cluster tells the client about the others), so listing several
/// survives one being down. A cluster has database 0 only.
pub(crate) fn cluster_seeds(url: &str) -> Result<Option<Vec<String>>, String> {
    let (scheme, rest) = if let Some(r) = url.strip_prefix("redis+cluster://") {
        ("redis", r)
    } else if let Some(r) = url.strip_prefix("rediss+cluster://") {
        ("rediss", r)
    } else {
        return Ok(None);
    };
    let (nodes, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !matches!(path, "" | "0") {
        return Err(format!(
            "a cluster has database 0 only, not {path:?} (drop the path)"
        ));
    }
    let (auth, nodes) = match nodes.rsplit_once('@') {
        Some((a, n)) => (format!("{a}@"), n),
        None => (String::new(), nodes),
    };
    let mut seeds = Vec::new();
    for node in nodes.split(',').map(str::trim) {
        if node.is_empty() {
            return Err("an empty seed node (two commas, or none at all)".into());
        }
        // `host:port`, or `[v6]:port`: the port is what follows the last colon.
        let port = node
            .rsplit_once(':')
            .filter(|(host, _)| !host.is_empty() && !host.ends_with(':'))
            .map(|(_, p)| p);
        match port.map(str::parse::<u16>) {
            Some(Ok(p)) if p > 0 => seeds.push(format!("{scheme}://{auth}{node}/")),
            _ => return Err(format!("seed node {node:?} is not host:port")),
        }
    }
    Ok(Some(seeds))
}

/// What the link connects to.
#[derive(Clone)]
enum Target {
    Single(redis::Client),
    Cluster(ClusterClient),
}

/// A live connection; clones share it (both kinds are multiplexed).
#[derive(Clone)]
enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Target {
    async fn connect(self) -> Result<Conn, RedisError> {
        match self {
            Target::Single(client) => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(IO_TIMEOUT));
                let c = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                Ok(Conn::Single(c))
            }
            Target::Cluster(client) => Ok(Conn::Cluster(client.get_async_connection().await?)),
        }
    }
}

impl Conn {
    async fn send(&mut self, cmd: &Cmd) -> Result<Value, RedisError> {
        let call = async {
            match self {
                Conn::Single(c) => cmd.query_async(c).await,
                Conn::Cluster(c) => cmd.query_async(c).await,
            }
        };
        match tokio::time::timeout(IO_TIMEOUT, call).await {
            Ok(r) => r,
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no reply within {IO_TIMEOUT:?}"),
            ))),
        }
    }

    /// EVALSHA; on NOSCRIPT (a server that restarted, or a master that was a replica a
    /// moment ago, has forgotten it) EVAL with the source, which also caches it there.
    /// `true` with the reply when it took that second round trip.
    async fn script(
        &mut self,
        hash: &str,
        source: &str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
    ) -> (Result<Value, RedisError>, bool) {
        let call = |verb: &str, body: &str| {
            let mut cmd = redis::cmd(verb);
            cmd.arg(body).arg(keys.len());
            for k in keys {
                cmd.arg(k.as_slice());
            }
            for a in args {
                cmd.arg(a.as_slice());
            }
            cmd
        };
        match self.send(&call("EVALSHA", hash)).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                (self.send(&call("EVAL", source)).await, true)
            }
            other => (other, false),
        }
    }
}

/// The thread that drives the connection: a current-thread runtime that lives as long as
/// the link (dropping the sender ends it, in its own thread).
struct IoThread {
    handle: tokio::runtime::Handle,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl IoThread {
    fn start() -> std::io::Result<Self> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("redis-io".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let _ = tx.send(Ok(rt.handle().clone()));
                rt.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        let handle = rx
            .recv()
            .map_err(|_| std::io::Error::other("the Redis I/O thread did not start"))??;
        Ok(Self {
            handle,
            _stop: stop,
        })
    }

    /// Run `fut` on the I/O thread and wait for it.
    fn run<T: Send + 'static>(&self, fut: impl Future<Output = T> + Send + 'static) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().ok()
    }
}

fn io_thread_gone() -> RedisError {
    RedisError::from((ErrorKind::Client, "the Redis I/O thread stopped"))
}

/// One script call of a step: the keys that route it and its arguments.
#[derive(Clone)]
pub(crate) struct Call {
    pub(crate) keys: Vec<Vec<u8>>,
    pub(crate) args: Vec<Vec<u8>>,
}

pub(crate) struct Link {
    target: Target,
    conn: Option<Conn>,
    io: IoThread,
    /// Whether this is a Redis Cluster.
    pub(crate) cluster: bool,
    /// The URL without its password, for messages.
    pub(crate) shown: String,
    retry_for: Duration,
    hash: String,
    source: &'static str,
    /// Waits for Redis (a step sending scripts to several masters at once is one).
    pub(crate) round_trips: u64,
    /// Commands sent (each script call is one).
    pub(crate) commands: u64,
    /// Connections made after the first: each one may be to a server that restarted.
    pub(crate) reconnects: u64,
    /// The crawl's stop handle: a stop request ends retries.
    stop: Option<Shutdown>,
    /// Why the link gave up, once it has; later calls fail at once with it.
    given_up: Option<String>,
    connected_once: bool,
}

impl Link {
    /// Parse `url` and connect (retrying for up to `retry_for`).
    pub(crate) fn open(
        url: &str,
        retry_for: Duration,
        script: &'static str,
        stop: Option<Shutdown>,
    ) -> Result<Self, Error> {
        // The one redaction rule of the project, so a Redis URL shows as every other does.
        let shown = crawler_core::redact::redact_url(url);
        let target = match cluster_seeds(url).map_err(|d| Error::redis_cluster_url(&shown, d))? {
            Some(seeds) => {
                let client = ClusterClient::builder(seeds)
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(IO_TIMEOUT)
                    // This link retries (and reconnects) itself, with the stop checks.
                    .retries(2)
                    .build()
                    .map_err(|e| Error::redis_config(&shown, e))?;
                Target::Cluster(client)
            }
            None => Target::Single(
                redis::Client::open(url).map_err(|e| Error::redis_config(&shown, e))?,
            ),
        };
        let io = IoThread::start().map_err(|e| Error::redis_config(&shown, e.into()))?;
        let mut link = Self {
            cluster: matches!(target, Target::Cluster(_)),
            target,
            conn: None,
            io,
            shown,
            retry_for,
            hash: redis::Script::new(script).get_hash().to_owned(),
            source: script,
            round_trips: 0,
            commands: 0,
            reconnects: 0,
            stop,
            given_up: None,
            connected_once: false,
        };
        link.query::<Value>(&redis::cmd("PING"), "connect")?;
        Ok(link)
    }

    /// The connection, made if needed (one round trip then).
    fn conn(&mut self) -> Result<Conn, RedisError> {
        if let Some(c) = &self.conn {
            return Ok(c.clone());
        }
        let target = self.target.clone();
        let c = self
            .io
            .run(async move {
                match tokio::time::timeout(CONNECT_TIMEOUT * 2, target.connect()).await {
                    Ok(r) => r,
                    Err(_) => Err(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "connecting took too long",
                    ))),
                }
            })
            .ok_or_else(io_thread_gone)??;
        if self.connected_once {
            self.reconnects += 1;
        }
        self.connected_once = true;
        self.conn = Some(c.clone());
        Ok(c)
    }

    fn count(&mut self, trips: u64, commands: u64, purpose: Purpose) {
        self.round_trips += trips;
        self.commands += commands;
        BY_PURPOSE[purpose as usize].fetch_add(trips, Ordering::Relaxed);
        PROCESS_ROUND_TRIPS.fetch_add(trips, Ordering::Relaxed);
        PROCESS_COMMANDS.fetch_add(commands, Ordering::Relaxed);
    }

    /// Run one command (routed by its first key in a cluster), retrying what a
    /// reconnection can fix for up to `retry_for`.
    pub(crate) fn query<T: redis::FromRedisValue>(
        &mut self,
        cmd: &Cmd,
        what: &'static str,
    ) -> Result<T, Error> {
        let value = self.retrying(what, |link| {
            let mut conn = link.conn()?;
            let cmd = cmd.clone();
            link.count(1, 1, Purpose::Other);
            link.io
                .run(async move { conn.send(&cmd).await })
                .ok_or_else(io_thread_gone)?
        })?;
        T::from_redis_value(value).map_err(|e| Error::redis_reply(&self.shown, e.to_string()))
    }

    /// Run the step script once per call, all calls at once (each routed by its first key
    /// in a cluster), with `extra` (a command whose reply does not matter) alongside,
    /// retrying those that failed for up to `retry_for`. The replies are in the order of
    /// `calls`.
    pub(crate) fn scripts(
        &mut self,
        calls: &[Call],
        extra: Option<&Cmd>,
        what: &'static str,
        purpose: Purpose,
    ) -> Result<Vec<Value>, Error> {
        let mut done: Vec<Option<Value>> = vec![None; calls.len()];
        let mut extra = extra.cloned();
        self.retrying(what, |link| {
            let conn = link.conn()?;
            let pending: Vec<usize> = (0..calls.len()).filter(|&i| done[i].is_none()).collect();
            let jobs: Vec<(usize, Call)> = pending.iter().map(|&i| (i, calls[i].clone())).collect();
            let (hash, source) = (link.hash.clone(), link.source);
            let side = extra.clone();
            let sent = pending.len() as u64 + u64::from(side.is_some());
            let (replies, side) = link
                .io
                .run(async move {
                    let side = async {
                        match side {
                            Some(cmd) => Some(conn.clone().send(&cmd).await),
                            None => None,
                        }
                    };
                    let mut set = tokio::task::JoinSet::new();
                    for (i, call) in jobs {
                        let mut conn = conn.clone();
                        let hash = hash.clone();
                        set.spawn(async move {
                            let (r, reloaded) =
                                conn.script(&hash, source, &call.keys, &call.args).await;
                            (i, r, reloaded)
                        });
                    }
                    let side = side.await;
                    let mut out = Vec::new();
                    while let Some(joined) = set.join_next().await {
                        if let Ok(r) = joined {
                            out.push(r);
                        }
                    }
                    (out, side)
                })
                .ok_or_else(io_thread_gone)?;
            let reloads = replies.iter().filter(|(_, _, r)| *r).count() as u64;
            link.count(1 + u64::from(reloads > 0), sent + reloads, purpose);
            let mut first_error = None;
            match side {
                Some(Err(e)) => {
                    first_error = Some(e);
                }
                Some(Ok(_)) => extra = None,
                None => {}
            }
            for (i, r, _) in replies {
                match r {
                    Ok(v) => done[i] = Some(v),
                    Err(e) => {
                        first_error.get_or_insert(e);
                    }
                }
            }
            match first_error {
                Some(e) => Err(e),
                None if done.iter().any(Option::is_none) => Err(io_thread_gone()),
                None => Ok(()),
            }
        })?;
        Ok(done.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// Whether the crawl was asked to stop.
    fn stopping(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.requested() > 0)
    }

    fn retrying<T>(
        &mut self,
        what: &'static str,
        mut op: impl FnMut(&mut Self) -> Result<T, RedisError>,
    ) -> Result<T, Error> {
        if let Some(why) = &self.given_up {
            return Err(Error::redis_given_up(&self.shown, what, why));
        }
        let started = Instant::now();
        let first = match op(self) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        self.drop_conn(&first);
        if !transient(&first) {
            return Err(Error::redis(&self.shown, what, started.elapsed(), first));
        }
        // The rest may wait for seconds: off the runtime's worker if it has others, so the
        // signal listener and the downloads in flight go on meanwhile.
        let multi = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let go = || self.retry_after_failure(what, started, first, &mut op);
        if multi {
            tokio::task::block_in_place(go)
        } else {
            go()
        }
    }

    /// Drop a connection that failed: after a restart the server needs a fresh one, and
    /// after a failover a fresh cluster connection reads the new slot map at once. Errors
    /// that leave the connection sound (a script error, a wrong reply) keep it.
    fn drop_conn(&mut self, e: &RedisError) {
        if transient(e) {
            self.conn = None;
        }
    }

    fn retry_after_failure<T>(
        &mut self,
        what: &'static str,
        started: Instant,
        first: RedisError,
        op: &mut impl FnMut(&mut Self) -> Result<T, RedisError>,
    ) -> Result<T, Error> {
        let mut wait = BACKOFF_FIRST;
        let mut attempt = 1u32;
        let mut last = first;
        loop {
            let gave_up = if self.stopping() {
                Error::redis_stopped(&self.shown, what, started.elapsed(), last)
            } else if started.elapsed() >= self.retry_for {
                Error::redis(&self.shown, what, started.elapsed(), last)
            } else {
                tracing::warn!(
                    redis = %self.shown,
                    attempt,
                    "Redis unreachable during {what} ({last}); pausing {wait:?} and retrying"
                );
                self.pause(wait);
                if !self.stopping() {
                    wait = (wait * 2).min(BACKOFF_CAP);
                    attempt += 1;
                    match op(self) {
                        Ok(v) => {
                            tracing::info!(
                                redis = %self.shown,
                                attempts = attempt,
                                "Redis is reachable again"
                            );
                            return Ok(v);
                        }
                        Err(e) => {
                            self.drop_conn(&e);
                            if !transient(&e) {
                                return Err(Error::redis(&self.shown, what, started.elapsed(), e));
                            }
                            last = e;
                        }
                    }
                }
                continue;
            };
            self.given_up = Some(gave_up.to_string());
            return Err(gave_up);
        }
    }

    /// Sleep for `wait`, or until a stop is requested.
    fn pause(&self, wait: Duration) {
        let until = Instant::now() + wait;
        while !self.stopping() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(PAUSE_SLICE));
        }
    }
}

/// Errors that a reconnection, or simply waiting, can fix: an outage, a restart, and in a
/// cluster a failover in progress (no master for a slot yet, a demoted master that refuses
/// writes, a slot map that moved).
fn transient(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_cluster_error()
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::ReadOnly
                        | ServerErrorKind::NoScript
                )
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_urls_name_their_seeds() {
        assert_eq!(cluster_seeds("redis://127.0.0.1:6379/"), Ok(None));
        assert_eq!(
            cluster_seeds("redis+cluster://127.0.0.1:7000,127.0.0.1:7001"),
            Ok(Some(vec![
                "redis://127.0.0.1:7000/".into(),
                "redis://127.0.0.1:7001/".into()
            ]))
        );
        assert_eq!(
            cluster_seeds("rediss+cluster://:pw@a.example:7000,[::1]:7001/"),
            Ok(Some(vec![
                "rediss://:pw@a.example:7000/".into(),
                "rediss://:pw@[::1]:7001/".into()
            ]))
        );
        for bad in [
            "redis+cluster://",
            "redis+cluster://a:1,,b:2",
            "redis+cluster://a",
            "redis+cluster://a:x",
            "redis+cluster://a:0",
            "redis+cluster://a:1/2",
        ] {
            assert!(cluster_seeds(bad).is_err(), "{bad}");
        }
    }
}
