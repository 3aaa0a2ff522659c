//! A running job seen from outside its process: its politeness record
//! (`JOB_DIR/politeness.jsonl`, see [`crawler::sched::record`]) read as it grows, summed per
//! host into what the report draws (requests a second against the pace allowed, holds with
//! their trigger, refusals), and its feed's and failures file's lines counted.
//!
//! Each read picks up where the last one stopped, and reads at most [`READ_CAP`] bytes, so
//! a poll costs what was appended since, whatever the record's size. The lines are read as
//! plain JSON (not the record's Rust types), so a field the record gains later is ignored
//! rather than failing the view.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

/// Most bytes read from a file in one poll.
const READ_CAP: u64 = 16 << 20;
/// Seconds of per-second counts kept per host (the chart's width).
const SECONDS_KEPT: usize = 300;
/// Pace changes kept per host.
const PACES_KEPT: usize = 300;
/// Holds kept per host (the latest).
const HOLDS_KEPT: usize = 50;
/// Hosts followed at most (a broad crawl's others are summed into none: the view is for
/// watching, the report has them all).
const HOSTS_KEPT: usize = 200;

/// Lines of a growing file, counted incrementally.
#[derive(Debug, Default, Clone)]
pub(super) struct Counts {
    offset: u64,
    lines: u64,
}

impl Counts {
    /// The number of whole lines in `path` now (0 if it does not exist).
    pub(super) fn update(&mut self, path: &Path) -> u64 {
        let Ok(mut file) = File::open(path) else {
            return self.lines;
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.offset {
            // Cut back (a record cut off after a crash): count again.
            *self = Self::default();
        }
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return self.lines;
        }
        let mut buf = Vec::new();
        if file.take(READ_CAP).read_to_end(&mut buf).is_err() {
            return self.lines;
        }
        // Only up to the last newline: a line being written is counted once whole.
        if let Some(last) = buf.iter().rposition(|b| *b == b'\n') {
            self.lines += buf[..=last].iter().filter(|b| **b == b'\n').count() as u64;
            self.offset += last as u64 + 1;
        }
        self.lines
    }
}

/// A hold of a host, as the record's audit line states it.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Hold {
    /// When it began, ms since the Unix epoch.
    pub(super) at_ms: i64,
    /// When it ends, ms since the Unix epoch.
    pub(super) until_ms: i64,
    pub(super) trigger: String,
}

/// One host, summed from the record.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct HostLive {
    pub(super) host: String,
    /// Requests sent (retries included).
    pub(super) sent: u64,
    pub(super) retries: u64,
    /// Answers by status.
    pub(super) status: BTreeMap<u16, u64>,
    /// 429 and 503 answers.
    pub(super) refusals: u64,
    /// Requests that got no answer.
    pub(super) failed: u64,
    /// The pace allowed now, requests/s (the last rate change).
    pub(super) pace: Option<f64>,
    /// The learned estimate of the server's sustainable rate.
    pub(super) estimate: Option<f64>,
    /// The rate the last RateLimit quota allows.
    pub(super) quota_rate: Option<f64>,
    /// Holds so far.
    pub(super) holds: u64,
    /// The latest holds.
    pub(super) recent_holds: VecDeque<Hold>,
    /// Why the host was skipped, if it was.
    pub(super) skipped: Option<String>,
    /// Per second: `[unix_s, sent, refusals]`, the latest [`SECONDS_KEPT`].
    pub(super) seconds: VecDeque<[i64; 3]>,
    /// Pace changes: `[unix_ms, requests/s]`.
    pub(super) paces: VecDeque<(i64, f64)>,
}

/// A job's politeness record, read so far.
#[derive(Debug, Default)]
pub(super) struct RecordTail {
    offset: u64,
    hosts: BTreeMap<String, HostLive>,
    /// Runs of the crawl seen (a resumed job adds one).
    runs: u64,
    bad_lines: u64,
}

impl RecordTail {
    /// Read what was appended to `path` since the last call.
    pub(super) fn update(&mut self, path: &Path) {
        let Ok(mut file) = File::open(path) else {
            return;
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.offset {
            *self = Self::default();
        }
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = Vec::new();
        if file.take(READ_CAP).read_to_end(&mut buf).is_err() {
            return;
        }
        let Some(last) = buf.iter().rposition(|b| *b == b'\n') else {
            return;
        };
        self.offset += last as u64 + 1;
        for line in buf[..last].split(|b| *b == b'\n') {
            if line.is_empty() {
                continue;
            }
            match serde_json::from_slice::<Value>(line) {
                Ok(v) => self.add(&v),
                Err(_) => self.bad_lines += 1,
            }
        }
    }

    fn host(&mut self, name: &str) -> Option<&mut HostLive> {
        if !self.hosts.contains_key(name) && self.hosts.len() >= HOSTS_KEPT {
            return None;
        }
        Some(
            self.hosts
                .entry(name.to_owned())
                .or_insert_with(|| HostLive {
                    host: name.to_owned(),
                    ..HostLive::default()
                }),
        )
    }

    fn add(&mut self, v: &Value) {
        let int = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
        let float = |v: &Value, k: &str| v.get(k).and_then(Value::as_f64);
        let name = v.get("host").and_then(Value::as_str).unwrap_or_default();
        match v.get("t").and_then(Value::as_str) {
            Some("run") => self.runs += 1,
            Some("second") => {
                let Some(h) = self.host(name) else { return };
                let sent = int(v, "sent");
                h.sent += sent;
                h.retries += int(v, "retries");
                let mut refused = 0;
                if let Some(status) = v.get("status").and_then(Value::as_object) {
                    for (code, n) in status {
                        let n = n.as_u64().unwrap_or(0);
                        if let Ok(code) = code.parse::<u16>() {
                            *h.status.entry(code).or_default() += n;
                            if code == 429 || code == 503 {
                                refused += n;
                            }
                        }
                    }
                }
                h.refusals += refused;
                if let Some(failed) = v.get("failed").and_then(Value::as_object) {
                    h.failed += failed.values().filter_map(Value::as_u64).sum::<u64>();
                }
                if let Some(q) = v.get("quota") {
                    let limit = float(q, "limit");
                    let window = float(q, "window_ms").filter(|w| *w > 0.0);
                    if let (Some(limit), Some(window)) = (limit, window) {
                        h.quota_rate = Some(limit * 1000.0 / window);
                    }
                }
                let second = v.get("unix_s").and_then(Value::as_i64).unwrap_or(0);
                let (sent, refused) = (
                    i64::try_from(sent).unwrap_or(i64::MAX),
                    i64::try_from(refused).unwrap_or(i64::MAX),
                );
                // Several lines for one second add up (a busy second written in parts).
                match h.seconds.iter_mut().rev().find(|s| s[0] == second) {
                    Some(s) => {
                        s[1] += sent;
                        s[2] += refused;
                    }
                    None => {
                        h.seconds.push_back([second, sent, refused]);
                        if h.seconds.len() > SECONDS_KEPT {
                            h.seconds.pop_front();
                        }
                    }
                }
            }
            Some("audit") => {
                let at = v.get("unix_ms").and_then(Value::as_i64).unwrap_or(0);
                let trigger = v
                    .get("trigger")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let Some(h) = self.host(name) else { return };
                let Some(what) = v.get("what") else { return };
                match what.get("kind").and_then(Value::as_str) {
                    Some("rate") => {
                        // The pace before the first change ran from the host's first second.
                        if h.paces.is_empty()
                            && let (Some(old), Some(first)) =
                                (float(what, "old"), h.seconds.front())
                        {
                            h.paces.push_back((first[0] * 1000, old));
                        }
                        if let Some(rate) = float(what, "new") {
                            h.pace = Some(rate);
                            h.paces.push_back((at, rate));
                            if h.paces.len() > PACES_KEPT {
                                h.paces.pop_front();
                            }
                        }
                    }
                    Some("hold") => {
                        let wait = float(what, "wait_ms").unwrap_or(0.0);
                        h.holds += 1;
                        h.recent_holds.push_back(Hold {
                            at_ms: at,
                            until_ms: at + wait as i64,
                            trigger,
                        });
                        if h.recent_holds.len() > HOLDS_KEPT {
                            h.recent_holds.pop_front();
                        }
                    }
                    Some("estimate") => h.estimate = float(what, "rate"),
                    Some("skip") => {
                        h.skipped = what
                            .get("reason")
                            .and_then(Value::as_str)
                            .map(str::to_owned);
                    }
                    _ => {}
                }
            }
            _ => self.bad_lines += 1,
        }
    }

    /// The hosts, busiest first.
    pub(super) fn hosts(&self) -> Vec<&HostLive> {
        let mut hosts: Vec<&HostLive> = self.hosts.values().collect();
        hosts.sort_by(|a, b| b.sent.cmp(&a.sent).then(a.host.cmp(&b.host)));
        hosts
    }

    pub(super) fn runs(&self) -> u64 {
        self.runs
    }

    pub(super) fn bad_lines(&self) -> u64 {
        self.bad_lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn a_record_is_read_as_it_grows_and_summed_per_host() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("politeness.jsonl");
        let mut f = std::fs::File::create(&path).expect("record");
        writeln!(f, r#"{{"t":"run","unix_ms":1000,"version":1}}"#).expect("write");
        writeln!(
            f,
            r#"{{"t":"second","host":"a:80","unix_s":1,"sent":3,"status":{{"200":2,"429":1}}}}"#
        )
        .expect("write");
        // The second line of the same second adds up; a half-written line waits.
        write!(f, r#"{{"t":"second","host":"a:80","unix_s":1,"sent":2,"status":{{"503":1}},"failed":{{"timeout":1}}}}"#).expect("write");
        write!(f, "\n{{\"t\":\"sec").expect("write");
        f.flush().expect("flush");
        let mut tail = RecordTail::default();
        tail.update(&path);
        let h = tail.hosts()[0].clone();
        assert_eq!((h.sent, h.refusals, h.failed), (5, 2, 1));
        assert_eq!(h.seconds, VecDeque::from([[1, 5, 2]]));
        assert_eq!(tail.runs(), 1);

        writeln!(f, "ond\",\"host\":\"b:80\",\"unix_s\":2,\"sent\":9}}").expect("write");
        writeln!(f, r#"{{"t":"audit","host":"a:80","unix_ms":2500,"trigger":"429","what":{{"kind":"rate","old":4.0,"new":2.0}}}}"#).expect("write");
        writeln!(f, r#"{{"t":"audit","host":"a:80","unix_ms":2600,"trigger":"Retry-After","what":{{"kind":"hold","until":9,"wait_ms":3000.0}}}}"#).expect("write");
        writeln!(f, "not json").expect("write");
        f.flush().expect("flush");
        tail.update(&path);
        let hosts = tail.hosts();
        assert_eq!(hosts[0].host, "b:80", "busiest first");
        assert_eq!(hosts[0].sent, 9);
        let a = hosts[1];
        assert_eq!(a.pace, Some(2.0));
        assert_eq!(a.paces, VecDeque::from([(1000, 4.0), (2500, 2.0)]));
        assert_eq!(a.holds, 1);
        assert_eq!(a.recent_holds[0].until_ms, 5600);
        assert_eq!(a.recent_holds[0].trigger, "Retry-After");
        assert_eq!(tail.bad_lines(), 1);

        let mut lines = Counts::default();
        assert_eq!(lines.update(&path), 7);
        assert_eq!(lines.update(&path), 7, "counted once");
    }
}
