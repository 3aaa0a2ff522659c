//! One synchronous Redis connection with retries, script loading and a round-trip counter.
//!
//! Synchronous because the frontier's `QueueStore` is: its methods are called from the
//! engine's loop and must answer before it goes on. A round trip on a local network is tens
//! of microseconds, and the store sends at most one per handed-out request (see the crate
//! docs), so blocking is cheaper than a channel to an async task.
//!
//! During an outage a call retries (the crawl pauses: workers wait for Redis rather than
//! lose work), but never uncontrollably: every attempt is bounded (`CONNECT_TIMEOUT`,
//! `IO_TIMEOUT`), the pauses between attempts are sliced and check the crawl's
//! [`Shutdown`], and on a multi-threaded runtime the waiting is done in
//! `block_in_place`, so the signal listener and the downloads in flight keep running.
//! So Ctrl-C or SIGTERM during an outage ends the retries within about one attempt, and
//! once a link has given up (after `retry_for`, or on a stop request) every later call
//! fails at once: stopping never costs one `retry_for` per call.
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crawler_core::Shutdown;
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use crate::error::Error;

/// Round trips made by every Redis link of this process.
static PROCESS_ROUND_TRIPS: AtomicU64 = AtomicU64::new(0);

/// Round trips to Redis made by this process so far (all stores), for benchmarks and logs.
pub fn redis_round_trips() -> u64 {
    PROCESS_ROUND_TRIPS.load(Ordering::Relaxed)
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

pub(crate) struct Link {
    client: redis::Client,
    conn: Option<redis::Connection>,
    /// The URL without its password, for messages.
    pub(crate) shown: String,
    retry_for: Duration,
    script: redis::Script,
    source: &'static str,
    pub(crate) round_trips: u64,
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
        let client = redis::Client::open(url).map_err(|e| Error::redis_config(&shown, e))?;
        let mut link = Self {
            client,
            conn: None,
            shown,
            retry_for,
            script: redis::Script::new(script),
            source: script,
            round_trips: 0,
            reconnects: 0,
            stop,
            given_up: None,
            connected_once: false,
        };
        link.query::<Value>(&redis::cmd("PING"), "connect")?;
        Ok(link)
    }

    /// Run `f` on the connection (made if needed); `f` counts the round trips it makes.
    /// A connection that failed is dropped: after a restart the server needs a fresh one.
    fn with_conn<T>(
        &mut self,
        f: impl FnOnce(&mut redis::Connection, &mut u64) -> Result<T, RedisError>,
    ) -> Result<T, RedisError> {
        let mut conn = match self.conn.take() {
            Some(c) => c,
            None => {
                let c = self.client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
                c.set_read_timeout(Some(IO_TIMEOUT))?;
                c.set_write_timeout(Some(IO_TIMEOUT))?;
                if self.connected_once {
                    self.reconnects += 1;
                }
                self.connected_once = true;
                c
            }
        };
        let mut trips = 0;
        let out = f(&mut conn, &mut trips);
        self.round_trips += trips;
        PROCESS_ROUND_TRIPS.fetch_add(trips, Ordering::Relaxed);
        if out.is_ok() {
            self.conn = Some(conn);
        }
        out
    }

    /// Run one command, retrying what a reconnection can fix for up to `retry_for`.
    pub(crate) fn query<T: redis::FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
        what: &'static str,
    ) -> Result<T, Error> {
        self.retrying(what, |link| {
            link.with_conn(|conn, trips| {
                *trips += 1;
                cmd.query(conn)
            })
        })
    }

    /// Run the step script with `args` (EVALSHA, loading the script when the server lacks
    /// it: after a restart Redis has forgotten every script).
    pub(crate) fn step(&mut self, args: &[Vec<u8>], what: &'static str) -> Result<Value, Error> {
        let hash = self.script.get_hash().to_owned();
        let source = self.source;
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&hash).arg(0);
        for a in args {
            cmd.arg(a.as_slice());
        }
        self.retrying(what, |link| {
            link.with_conn(|conn, trips| {
                *trips += 1;
                match cmd.query::<Value>(conn) {
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        *trips += 2;
                        let loaded: String =
                            redis::cmd("SCRIPT").arg("LOAD").arg(source).query(conn)?;
                        if loaded != hash {
                            return Err(RedisError::from((
                                ErrorKind::Client,
                                "the server hashed the script differently",
                            )));
                        }
                        cmd.query::<Value>(conn)
                    }
                    other => other,
                }
            })
        })
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
        self.conn = None;
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
                            // Drop the connection: a broken one would fail again, and after a
                            // restart the server needs a fresh one (and the script loaded
                            // again).
                            self.conn = None;
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

/// Errors that a reconnection, or simply waiting, can fix.
fn transient(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::NoScript
            )
        )
}
