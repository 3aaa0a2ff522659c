//! The politeness record: what each host was sent and answered, second by second, and every
//! politeness change with its trigger, appended to a JSON Lines file (by default
//! `JOB_DIR/politeness.jsonl`) for `crawler report` to draw.
//!
//! This module owns the file's format ([`RecordLine`]) and the [`Recorder`] that writes it.
//! The frontier feeds the recorder (it is where a request's host, its send, its outcome and
//! its host's throttle meet); drawing the report is the command line's business.
//!
//! The crawl's hot path only bumps counters in memory: outcomes are summed per host per
//! second and written once that second is over, through a buffered writer flushed at each
//! checkpoint (once a second), never synced. A write failure is logged once and ends the
//! recording, never the crawl.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crawler_core::Feedback;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::throttle::AuditRecord;

/// The record's file name inside a job directory.
pub const RECORD_FILE: &str = "politeness.jsonl";

/// The version of the record's format, written at the start of each run.
pub const RECORD_VERSION: u32 = 1;

/// Hosts with a second still open at once, at most: past it, every open second is written
/// out (a broad crawl touching thousands of hosts a second keeps its memory bounded; a
/// second may then span two lines, which readers add up).
const MAX_OPEN: usize = 4_096;

/// One line of the record.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "t", rename_all = "kebab-case")]
pub enum RecordLine {
    /// A run of the crawl began (a resumed job adds one per run).
    Run {
        /// When, milliseconds since the Unix epoch.
        unix_ms: i64,
        /// The format's version ([`RECORD_VERSION`]).
        version: u32,
    },
    /// A politeness change of a host (rate, hold, delay floor, estimate, skip) with its
    /// trigger.
    Audit(AuditRecord),
    /// What one host was sent and answered during one second.
    Second(Second),
}

impl<'de> Deserialize<'de> for RecordLine {
    /// Through a JSON value: serde's derived reading of an internally tagged enum buffers
    /// the line in a form that cannot read the status map's integer keys.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        #[derive(Deserialize)]
        struct Run {
            unix_ms: i64,
            version: u32,
        }
        let v = serde_json::Value::deserialize(d)?;
        let tag = v.get("t").and_then(serde_json::Value::as_str).unwrap_or("");
        let line = match tag {
            "run" => serde_json::from_value::<Run>(v).map(|r| Self::Run {
                unix_ms: r.unix_ms,
                version: r.version,
            }),
            "audit" => serde_json::from_value(v).map(Self::Audit),
            "second" => serde_json::from_value(v).map(Self::Second),
            other => return Err(D::Error::custom(format!("unknown line type '{other}'"))),
        };
        line.map_err(D::Error::custom)
    }
}

/// One host's traffic during one second. Several lines for the same host and second add up.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Second {
    /// The host key.
    pub host: String,
    /// The second, since the Unix epoch.
    pub unix_s: i64,
    /// Requests that reached the wire (retries included), counted in the second they were
    /// handed out for sending, as the host's `requests` are in the crawl's stats. One
    /// handed out and then refused before the wire (robots.txt from the cache, the address
    /// policy, a sub-request its page stopped waiting for) is taken back, and counted in
    /// `unsent` instead.
    #[serde(skip_serializing_if = "is_zero")]
    pub sent: u32,
    /// Requests handed out for sending but refused before the wire (see `sent`), counted
    /// in the second they were refused; the server never saw them.
    #[serde(skip_serializing_if = "is_zero")]
    pub unsent: u32,
    /// Of those, retries of an earlier attempt.
    #[serde(skip_serializing_if = "is_zero")]
    pub retries: u32,
    /// Of those, sub-requests: requests a page rendered in a browser made (its scripts,
    /// XHR, fetches), sent through this host's slot like any other.
    #[serde(skip_serializing_if = "is_zero")]
    pub subrequests: u32,
    /// Responses by HTTP status.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub status: BTreeMap<u16, u32>,
    /// Requests that ended without a response (timeouts, connection errors), by failure
    /// kind.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub failed: BTreeMap<String, u32>,
    /// Latencies summed over `latency_n` answers, milliseconds.
    #[serde(skip_serializing_if = "is_zero_f")]
    pub latency_sum_ms: f64,
    /// The slowest answer, milliseconds.
    #[serde(skip_serializing_if = "is_zero_f")]
    pub latency_max_ms: f64,
    /// Answers whose latency is counted.
    #[serde(skip_serializing_if = "is_zero")]
    pub latency_n: u32,
    /// The last quota the server's RateLimit headers stated during the second.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<Quota>,
    /// Responses by the HTTP version they came in (`HTTP/1.1`, `HTTP/2`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub versions: BTreeMap<String, u32>,
    /// Requests sent through each proxy, by its URL with any password redacted.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub proxies: BTreeMap<String, u32>,
}

/// A quota stated by RateLimit headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Quota {
    /// Requests left in the window.
    pub remaining: u64,
    /// The window's quota, when stated.
    pub limit: Option<u64>,
    /// The window, milliseconds, when stated.
    pub window_ms: Option<u64>,
    /// Time until the window resets, milliseconds, when stated.
    pub reset_ms: Option<u64>,
}

impl Quota {
    /// The sustained rate the quota allows, requests/s: the quota over its window, else
    /// what is left over the time to the reset.
    pub fn allowed_rate(&self) -> Option<f64> {
        match (self.limit, self.window_ms, self.reset_ms) {
            (Some(limit), Some(w), _) if w > 0 => Some(limit as f64 * 1_000.0 / w as f64),
            (_, _, Some(reset)) if reset > 0 => {
                Some(self.remaining as f64 * 1_000.0 / reset as f64)
            }
            _ => None,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_f(n: &f64) -> bool {
    *n == 0.0
}

fn unix_ms_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Appends the politeness record of a crawl to a file. See the [module docs](self).
pub struct Recorder {
    path: PathBuf,
    /// `None` once a write failed: the crawl goes on unrecorded.
    out: Option<BufWriter<File>>,
    /// The wall clock at `origin`, so the frontier's instants become Unix times.
    origin: Instant,
    origin_ms: i64,
    /// Each host's second still open.
    open: HashMap<String, Second>,
    /// The line being written, reused.
    line: Vec<u8>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("path", &self.path)
            .field("recording", &self.out.is_some())
            .finish()
    }
}

impl Recorder {
    /// Append to the record at `path` (made, with its directory, if missing), starting with
    /// a [`RecordLine::Run`] line.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        // A run killed mid-line (kill -9) left a partial last line: end it, so this run's
        // first line is not glued to it (readers skip the partial one).
        let ends_mid_line = if file.metadata()?.len() > 0 {
            file.seek(SeekFrom::End(-1))?;
            let mut last = [0u8; 1];
            file.read_exact(&mut last)?;
            last[0] != b'\n'
        } else {
            false
        };
        let mut out = BufWriter::with_capacity(64 * 1024, file);
        if ends_mid_line {
            out.write_all(b"\n")?;
        }
        let origin_ms = unix_ms_now();
        let mut recorder = Self {
            path: path.to_owned(),
            out: Some(out),
            origin: Instant::now(),
            origin_ms,
            open: HashMap::new(),
            line: Vec::new(),
        };
        recorder.write(&RecordLine::Run {
            unix_ms: origin_ms,
            version: RECORD_VERSION,
        });
        if let Some(out) = recorder.out.as_mut() {
            out.flush()?;
        }
        Ok(recorder)
    }

    /// Where the record is written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn unix_s(&self, at: Instant) -> i64 {
        let ms = if at >= self.origin {
            self.origin_ms
                .saturating_add(i64::try_from((at - self.origin).as_millis()).unwrap_or(0))
        } else {
            self.origin_ms
                .saturating_sub(i64::try_from((self.origin - at).as_millis()).unwrap_or(0))
        };
        ms.div_euclid(1_000)
    }

    /// The open second of `host` at `at`, after writing out an older one.
    fn second(&mut self, host: &str, at: Instant) -> Option<&mut Second> {
        // Nothing to keep once recording stopped.
        self.out.as_ref()?;
        let unix_s = self.unix_s(at);
        // The common case (the host's second is open) looks the host up without allocating
        // its name; a new second costs the allocations once.
        match self.open.get(host).map(|s| s.unix_s) {
            Some(open) if open == unix_s => {}
            Some(_) => {
                if let Some(done) = self.open.remove(host) {
                    self.write(&RecordLine::Second(done));
                }
                self.start(host, unix_s);
            }
            None => {
                if self.open.len() >= MAX_OPEN {
                    self.write_open(i64::MAX);
                }
                self.start(host, unix_s);
            }
        }
        self.open.get_mut(host)
    }

    fn start(&mut self, host: &str, unix_s: i64) {
        self.open.insert(
            host.to_owned(),
            Second {
                host: host.to_owned(),
                unix_s,
                ..Second::default()
            },
        );
    }

    /// A request was sent to `host` at `at`; `retry` when it repeats an earlier attempt,
    /// `sub` when a page being rendered made it.
    pub fn sent(&mut self, host: &str, retry: bool, sub: bool, at: Instant) {
        if let Some(s) = self.second(host, at) {
            s.sent = s.sent.saturating_add(1);
            s.retries = s.retries.saturating_add(u32::from(retry));
            s.subrequests = s.subrequests.saturating_add(u32::from(sub));
        }
    }

    /// A request counted by [`Recorder::sent`] went back unsent (the crawl had no room for
    /// it after all). Taken from the second of `at`: a second already written keeps it.
    pub fn unsent(&mut self, host: &str, retry: bool, sub: bool, at: Instant) {
        if let Some(s) = self.second(host, at) {
            s.sent = s.sent.saturating_sub(1);
            s.retries = s.retries.saturating_sub(u32::from(retry));
            s.subrequests = s.subrequests.saturating_sub(u32::from(sub));
        }
    }

    /// A request counted by [`Recorder::sent`] at `handed_out` was refused before the wire,
    /// decided at `at`: counted in `unsent` at `at`, and taken from `sent` when the second of
    /// `handed_out` is still open (it is, unless another event of the host's closed it in
    /// between: a refusal is decided within moments of its hand-out).
    pub fn refused_before_wire(
        &mut self,
        host: &str,
        retry: bool,
        sub: bool,
        handed_out: Instant,
        at: Instant,
    ) {
        let then = self.unix_s(handed_out);
        if let Some(s) = self.open.get_mut(host).filter(|s| s.unix_s == then) {
            s.sent = s.sent.saturating_sub(1);
            s.retries = s.retries.saturating_sub(u32::from(retry));
            s.subrequests = s.subrequests.saturating_sub(u32::from(sub));
        }
        if let Some(s) = self.second(host, at.max(handed_out)) {
            s.unsent = s.unsent.saturating_add(1);
        }
    }

    /// A request to `host` ended at `at` with `feedback`.
    pub fn outcome(&mut self, host: &str, feedback: &Feedback, at: Instant) {
        let Some(s) = self.second(host, at) else {
            return;
        };
        match (feedback.status, feedback.failure) {
            (Some(status), _) => *s.status.entry(status).or_default() += 1,
            (None, Some(kind)) => *s.failed.entry(kind.as_str().to_owned()).or_default() += 1,
            (None, None) => {}
        }
        if let Some(version) = feedback.http_version {
            let name = crawler_core::http_version_name(version);
            match s.versions.get_mut(name) {
                Some(n) => *n = n.saturating_add(1),
                None => {
                    s.versions.insert(name.to_owned(), 1);
                }
            }
        }
        if let Some(proxy) = &feedback.proxy {
            match s.proxies.get_mut(&**proxy) {
                Some(n) => *n = n.saturating_add(1),
                None => {
                    s.proxies.insert(proxy.to_string(), 1);
                }
            }
        }
        if feedback.sent {
            let ms = feedback.latency.as_secs_f64() * 1_000.0;
            s.latency_sum_ms += ms;
            s.latency_max_ms = s.latency_max_ms.max(ms);
            s.latency_n = s.latency_n.saturating_add(1);
        }
        if let Some(r) = feedback.rate_limit {
            let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
            s.quota = Some(Quota {
                remaining: r.remaining,
                limit: r.limit,
                window_ms: r.window.map(ms),
                reset_ms: r.reset.map(ms),
            });
        }
    }

    /// Politeness changes of a host, written as they come (they are few).
    pub fn audit(&mut self, records: Vec<AuditRecord>) {
        for r in records {
            self.write(&RecordLine::Audit(r));
        }
    }

    /// Write out the seconds that are over at `now` and flush the file (not sync: the
    /// record is a report, not a ledger).
    pub fn flush(&mut self, now: Instant) {
        let current = self.unix_s(now);
        self.write_open(current);
        self.flush_out();
    }

    /// Write out every open second before `before`.
    fn write_open(&mut self, before: i64) {
        let mut done: Vec<Second> = Vec::new();
        self.open.retain(|_, s| {
            if s.unix_s < before {
                done.push(std::mem::take(s));
                false
            } else {
                true
            }
        });
        done.sort_by(|a, b| (a.unix_s, &a.host).cmp(&(b.unix_s, &b.host)));
        for s in done {
            self.write(&RecordLine::Second(s));
        }
    }

    fn flush_out(&mut self) {
        if let Some(out) = self.out.as_mut()
            && let Err(e) = out.flush()
        {
            self.fail(&e);
        }
    }

    fn write(&mut self, line: &RecordLine) {
        let Some(out) = self.out.as_mut() else {
            return;
        };
        // The whole line in one write: the buffered writer then never flushes half a line,
        // so two processes appending to one record (fleet workers sharing a job directory
        // on one machine) interleave whole lines.
        self.line.clear();
        let written = serde_json::to_writer(&mut self.line, line)
            .map_err(std::io::Error::other)
            .and_then(|()| {
                self.line.push(b'\n');
                out.write_all(&self.line)
            });
        if let Err(e) = written {
            self.fail(&e);
        }
    }

    /// Stop recording after a write failure, saying so once.
    fn fail(&mut self, e: &std::io::Error) {
        tracing::warn!(
            path = %self.path.display(),
            "cannot write the politeness record, recording stops (the crawl goes on): {e}"
        );
        self.out = None;
        self.open.clear();
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.write_open(i64::MAX);
        self.flush_out();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::politeness::What;

    fn lines(path: &Path) -> Vec<RecordLine> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn seconds_are_summed_per_host_and_written_once_over() {
        let dir = std::env::temp_dir().join(format!("crawler-record-{}", std::process::id()));
        let path = dir.join("a").join(RECORD_FILE);
        let _ = std::fs::remove_file(&path);
        let mut r = Recorder::open(&path).expect("open");
        let t0 = Instant::now();
        let fb = |status, ms| Feedback {
            sent: true,
            status: Some(status),
            latency: Duration::from_millis(ms),
            ..Feedback::default()
        };
        r.sent("a", false, false, t0);
        r.sent("a", true, true, t0);
        r.outcome(
            "a",
            &Feedback {
                http_version: Some(http::Version::HTTP_2),
                proxy: Some("http://u:***@p:3128".into()),
                ..fb(200, 10)
            },
            t0,
        );
        r.outcome("a", &fb(429, 30), t0);
        r.audit(vec![AuditRecord {
            host: "a".into(),
            unix_ms: 5,
            trigger: "429".into(),
            what: What::Hold {
                until: 0.0,
                wait_ms: 1_000.0,
            },
        }]);
        r.flush(t0);
        // The second is not over: only the run and the audit line are out.
        assert_eq!(lines(&path).len(), 2);
        r.flush(t0 + Duration::from_secs(2));
        let got = lines(&path);
        let Some(RecordLine::Second(s)) = got.last() else {
            panic!("{got:?}");
        };
        assert_eq!((s.sent, s.retries, s.subrequests), (2, 1, 1));
        assert_eq!(s.status.get(&429), Some(&1));
        assert_eq!(s.latency_max_ms, 30.0);
        assert_eq!(s.latency_n, 2);
        assert_eq!(s.versions.get("HTTP/2"), Some(&1));
        assert_eq!(s.proxies.get("http://u:***@p:3128"), Some(&1));
        drop(r);
        // A partial line left by a kill is ended before the next run appends.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(b"{\"t\":\"sec"))
            .expect("append");
        drop(Recorder::open(&path).expect("reopen"));
        let runs = lines(&path)
            .iter()
            .filter(|l| matches!(l, RecordLine::Run { .. }))
            .count();
        assert_eq!(runs, 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_quota_gives_the_rate_it_allows() {
        let q = Quota {
            remaining: 5,
            limit: Some(60),
            window_ms: Some(3_000),
            reset_ms: Some(1_000),
        };
        assert_eq!(q.allowed_rate(), Some(20.0));
        let q = Quota {
            limit: None,
            window_ms: None,
            ..q
        };
        assert_eq!(q.allowed_rate(), Some(5.0));
    }
}
