//! One synchronous Redis connection with retries, script loading and a round-trip counter.
//!
//! Synchronous because the frontier's `QueueStore` is: its methods are called from the
//! engine's loop and must answer before it goes on. A round trip on a local network is tens
//! of microseconds, and the store sends at most one per handed-out request (see the crate
//! docs), so blocking is cheaper than a channel to an async task. During an outage the call
//! blocks, which pauses the crawl: that is the intent (workers pause and retry, then give up
//! with a clear error once `retry_for` has passed).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use crate::error::Error;

/// Round trips made by every Redis link of this process.
static PROCESS_ROUND_TRIPS: AtomicU64 = AtomicU64::new(0);

/// Round trips to Redis made by this process so far (all stores), for benchmarks and logs.
pub fn redis_round_trips() -> u64 {
    PROCESS_ROUND_TRIPS.load(Ordering::Relaxed)
}

/// How long one command may take before the connection is judged broken.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
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
}

/// The URL with any password replaced, fit for logs and error messages.
pub(crate) fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            u.to_string()
        }
        Err(_) => "<unparsable redis URL>".to_owned(),
    }
}

impl Link {
    /// Parse `url` and connect (retrying for up to `retry_for`).
    pub(crate) fn open(
        url: &str,
        retry_for: Duration,
        script: &'static str,
    ) -> Result<Self, Error> {
        let shown = redact(url);
        let client = redis::Client::open(url).map_err(|e| Error::redis_config(&shown, e))?;
        let mut link = Self {
            client,
            conn: None,
            shown,
            retry_for,
            script: redis::Script::new(script),
            source: script,
            round_trips: 0,
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
                let c = self.client.get_connection_with_timeout(IO_TIMEOUT)?;
                c.set_read_timeout(Some(IO_TIMEOUT))?;
                c.set_write_timeout(Some(IO_TIMEOUT))?;
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

    fn retrying<T>(
        &mut self,
        what: &'static str,
        mut op: impl FnMut(&mut Self) -> Result<T, RedisError>,
    ) -> Result<T, Error> {
        let started = Instant::now();
        let mut wait = BACKOFF_FIRST;
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            match op(self) {
                Ok(v) => {
                    if attempt > 1 {
                        tracing::info!(redis = %self.shown, attempts = attempt, "Redis is reachable again");
                    }
                    return Ok(v);
                }
                Err(e) if transient(&e) && started.elapsed() < self.retry_for => {
                    // Drop the connection: a broken one would fail again, and after a restart
                    // the server needs a fresh one (and the script loaded again).
                    self.conn = None;
                    tracing::warn!(
                        redis = %self.shown,
                        attempt,
                        "Redis unreachable during {what} ({e}); pausing {wait:?} and retrying"
                    );
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(BACKOFF_CAP);
                }
                Err(e) => {
                    self.conn = None;
                    return Err(Error::redis(&self.shown, what, started.elapsed(), e));
                }
            }
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
