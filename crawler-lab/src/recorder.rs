//! The request recorder and the politeness report derived from it.
//!
//! Entries are small (no bodies, no header maps; repeated strings such as client keys and
//! user agents are interned), and their number is capped, so a long benchmark cannot grow the
//! lab without bound: past the cap, requests are counted as `dropped` and not stored.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;

use crate::faults::FaultKind;

/// One request as the server saw it, and what it answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecordedRequest {
    /// When the request head arrived, on the lab's monotonic clock (since the lab started).
    pub at: Duration,
    /// When the response head was sent (later than `at` when the server made it wait).
    pub replied_at: Duration,
    /// Client key: the `X-Lab-Client` header if present, else the peer IP.
    pub client: String,
    /// Request method.
    pub method: String,
    /// Path and query, as sent.
    pub path: String,
    /// Response status.
    pub status: u16,
    /// `User-Agent` request header.
    pub user_agent: Option<String>,
    /// `If-None-Match` request header.
    pub if_none_match: Option<String>,
    /// `If-Modified-Since` request header.
    pub if_modified_since: Option<String>,
    /// `Referer` request header.
    pub referer: Option<String>,
    /// `Cookie` request header.
    pub cookie: Option<String>,
    /// `Authorization` request header.
    pub authorization: Option<String>,
    /// `X-Crawl-Tag` request header (a tag clients may send to mark requests for tests).
    pub tag: Option<String>,
    /// Body bytes the response carried (or was meant to carry, for faults and streams).
    pub bytes: u64,
    /// The end of the wait this response announced (`Retry-After`, or rate-limit headers
    /// with nothing remaining), on the lab clock.
    pub wait_until: Option<Duration>,
    /// The fault served, if any.
    pub fault: Option<FaultKind>,
    /// Whether the response was a soft-block challenge page.
    pub challenge: bool,
}

/// What the connection handler hands the recorder; borrowed so recording allocates only the
/// stored path and validator strings.
pub(crate) struct Observation<'a> {
    pub at: Duration,
    pub replied_at: Duration,
    pub client: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub user_agent: Option<&'a str>,
    pub if_none_match: Option<&'a str>,
    pub if_modified_since: Option<&'a str>,
    pub referer: Option<&'a str>,
    pub cookie: Option<&'a str>,
    pub authorization: Option<&'a str>,
    pub tag: Option<&'a str>,
    pub bytes: u64,
    pub wait_until: Option<Duration>,
    pub fault: Option<FaultKind>,
    pub challenge: bool,
}

const NONE: u32 = u32::MAX;

struct Entry {
    at: Duration,
    replied_at: Duration,
    wait_until: Option<Duration>,
    bytes: u64,
    path: Box<str>,
    if_none_match: Option<Box<str>>,
    if_modified_since: Option<Box<str>>,
    client: u32,
    method: u32,
    user_agent: u32,
    // Interned like the user agent: a crawl sends few distinct cookies, credentials and tags,
    // and referers repeat (every link of a listing page names it).
    referer: u32,
    cookie: u32,
    authorization: u32,
    tag: u32,
    status: u16,
    fault: Option<FaultKind>,
    challenge: bool,
}

#[derive(Default)]
struct Interner {
    ids: HashMap<Arc<str>, u32>,
    strings: Vec<Arc<str>>,
}

impl Interner {
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        let s: Arc<str> = Arc::from(s);
        self.strings.push(s.clone());
        self.ids.insert(s, id);
        id
    }

    fn get(&self, id: u32) -> &str {
        self.strings.get(id as usize).map_or("", |s| s)
    }
}

#[derive(Default)]
struct State {
    entries: Vec<Entry>,
    strings: Interner,
    dropped: u64,
}

struct Inner {
    grace: Duration,
    limit: usize,
    state: Mutex<State>,
}

/// A handle on the lab's request log. Cheap to clone; all clones see the same log.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("grace", &self.inner.grace)
            .field("len", &self.len())
            .finish()
    }
}

impl Recorder {
    pub(crate) fn new(grace: Duration, limit: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                grace,
                limit,
                state: Mutex::new(State::default()),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves a consistent Vec; keep recording.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn record(&self, o: &Observation<'_>) {
        let mut st = self.lock();
        if st.entries.len() >= self.inner.limit {
            st.dropped += 1;
            return;
        }
        let client = st.strings.intern(o.client);
        let method = st.strings.intern(o.method);
        let user_agent = o.user_agent.map_or(NONE, |ua| st.strings.intern(ua));
        let referer = o.referer.map_or(NONE, |v| st.strings.intern(v));
        let cookie = o.cookie.map_or(NONE, |v| st.strings.intern(v));
        let authorization = o.authorization.map_or(NONE, |v| st.strings.intern(v));
        let tag = o.tag.map_or(NONE, |v| st.strings.intern(v));
        st.entries.push(Entry {
            at: o.at,
            replied_at: o.replied_at,
            wait_until: o.wait_until,
            bytes: o.bytes,
            path: o.path.into(),
            if_none_match: o.if_none_match.map(Into::into),
            if_modified_since: o.if_modified_since.map(Into::into),
            client,
            method,
            user_agent,
            referer,
            cookie,
            authorization,
            tag,
            status: o.status,
            fault: o.fault,
            challenge: o.challenge,
        });
    }

    /// A snapshot of every stored request, in the order responses were sent.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        let st = self.lock();
        let opt = |id: u32| (id != NONE).then(|| st.strings.get(id).to_owned());
        st.entries
            .iter()
            .map(|e| RecordedRequest {
                at: e.at,
                replied_at: e.replied_at,
                client: st.strings.get(e.client).to_owned(),
                method: st.strings.get(e.method).to_owned(),
                path: e.path.to_string(),
                status: e.status,
                user_agent: (e.user_agent != NONE).then(|| st.strings.get(e.user_agent).to_owned()),
                if_none_match: e.if_none_match.as_deref().map(str::to_owned),
                if_modified_since: e.if_modified_since.as_deref().map(str::to_owned),
                referer: opt(e.referer),
                cookie: opt(e.cookie),
                authorization: opt(e.authorization),
                tag: opt(e.tag),
                bytes: e.bytes,
                wait_until: e.wait_until,
                fault: e.fault,
                challenge: e.challenge,
            })
            .collect()
    }

    /// How many requests are stored.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether no request is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many requests hit a path (exact match on path and query).
    pub fn count_path(&self, path: &str) -> usize {
        self.lock()
            .entries
            .iter()
            .filter(|e| &*e.path == path)
            .count()
    }

    /// How many requests hit paths starting with `prefix`.
    pub fn count_prefix(&self, prefix: &str) -> usize {
        self.lock()
            .entries
            .iter()
            .filter(|e| e.path.starts_with(prefix))
            .count()
    }

    /// Forgets every request (the `dropped` count too).
    pub fn clear(&self) {
        let mut st = self.lock();
        st.entries.clear();
        st.dropped = 0;
    }

    /// The allowance for requests already in flight when a wait was announced.
    pub fn grace(&self) -> Duration {
        self.inner.grace
    }

    /// Derived politeness checks over everything stored.
    pub fn report(&self) -> Report {
        let st = self.lock();
        let grace = self.inner.grace;
        let mut per_client: BTreeMap<u32, Vec<&Entry>> = BTreeMap::new();
        for e in &st.entries {
            per_client.entry(e.client).or_default().push(e);
        }
        let clients = per_client
            .into_iter()
            .map(|(id, mut entries)| {
                entries.sort_by_key(|e| e.at);
                (
                    st.strings.get(id).to_owned(),
                    client_report(&entries, grace),
                )
            })
            .collect();
        Report {
            requests: st.entries.len() as u64,
            dropped: st.dropped,
            grace_ms: grace.as_millis() as u64,
            clients,
        }
    }
}

/// Politeness checks over the recorded requests, per client key.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Report {
    /// Requests stored.
    pub requests: u64,
    /// Requests not stored because the recorder was full.
    pub dropped: u64,
    /// The allowance, in milliseconds, after a wait was announced during which requests
    /// already in flight are not violations.
    pub grace_ms: u64,
    /// Checks per client key.
    pub clients: BTreeMap<String, ClientReport>,
}

/// One request that arrived while a wait the server had announced to its client was open.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Violation {
    /// Arrival, seconds on the lab clock.
    pub at: f64,
    /// The request's path.
    pub path: String,
    /// When the open wait ends, seconds on the lab clock.
    pub wait_until: f64,
}

/// Checks for one client key.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClientReport {
    /// Requests received.
    pub requests: u64,
    /// Most requests that arrived within any one second (a sliding window).
    pub max_per_second: u64,
    /// Requests per second between the first and last arrival (over at least one second).
    pub mean_rate: f64,
    /// First arrival, seconds on the lab clock.
    pub first_at: f64,
    /// Last arrival, seconds on the lab clock.
    pub last_at: f64,
    /// Requests that arrived while a wait announced to this client was open: from
    /// `replied_at + grace` of the announcing response until the end of the wait.
    pub violations: u64,
    /// The first few violations, for diagnostics.
    pub violation_samples: Vec<Violation>,
    /// Responses with status 429.
    pub status_429: u64,
    /// Responses with status 503.
    pub status_503: u64,
    /// Requests carrying `If-None-Match` or `If-Modified-Since`.
    pub conditional: u64,
    /// Conditional requests answered 304.
    pub not_modified: u64,
    /// Soft-block challenge pages served.
    pub challenges: u64,
    /// Fault responses served.
    pub faults: u64,
    /// Responses per status.
    pub statuses: BTreeMap<u16, u64>,
}

const SAMPLES: usize = 10;

/// `entries` must be sorted by arrival.
fn client_report(entries: &[&Entry], grace: Duration) -> ClientReport {
    let mut r = ClientReport {
        requests: entries.len() as u64,
        ..ClientReport::default()
    };
    let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
        return r;
    };
    r.first_at = first.at.as_secs_f64();
    r.last_at = last.at.as_secs_f64();
    r.mean_rate = entries.len() as f64 / (r.last_at - r.first_at).max(1.0);

    let second = Duration::from_secs(1);
    let mut lo = 0;
    for (hi, e) in entries.iter().enumerate() {
        while entries[lo].at + second <= e.at {
            lo += 1;
        }
        r.max_per_second = r.max_per_second.max((hi - lo + 1) as u64);
    }

    // Waits, ordered by when they start counting; a request violates when it arrives after
    // some wait started and before the latest end among the waits started so far (each of
    // those started before it, so being before the max end means being inside one of them).
    let mut waits: Vec<(Duration, Duration)> = entries
        .iter()
        .filter_map(|e| e.wait_until.map(|until| (e.replied_at + grace, until)))
        .filter(|(from, until)| from < until)
        .collect();
    waits.sort_unstable();
    let mut next = 0;
    let mut open_until = Duration::ZERO;
    for e in entries {
        while next < waits.len() && waits[next].0 <= e.at {
            open_until = open_until.max(waits[next].1);
            next += 1;
        }
        if e.at < open_until {
            r.violations += 1;
            if r.violation_samples.len() < SAMPLES {
                r.violation_samples.push(Violation {
                    at: e.at.as_secs_f64(),
                    path: e.path.to_string(),
                    wait_until: open_until.as_secs_f64(),
                });
            }
        }
        match e.status {
            429 => r.status_429 += 1,
            503 => r.status_503 += 1,
            _ => {}
        }
        if e.if_none_match.is_some() || e.if_modified_since.is_some() {
            r.conditional += 1;
            if e.status == 304 {
                r.not_modified += 1;
            }
        }
        r.challenges += u64::from(e.challenge);
        r.faults += u64::from(e.fault.is_some());
        *r.statuses.entry(e.status).or_default() += 1;
    }
    r
}

impl Report {
    /// The checks for one client key.
    pub fn client(&self, key: &str) -> Option<&ClientReport> {
        self.clients.get(key)
    }

    /// Violations summed over all clients.
    pub fn total_violations(&self) -> u64 {
        self.clients.values().map(|c| c.violations).sum()
    }

    /// The report as pretty JSON (what `GET /_lab/report` serves).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(at_ms: u64, status: u16, wait_ms: Option<u64>) -> Observation<'static> {
        Observation {
            at: Duration::from_millis(at_ms),
            replied_at: Duration::from_millis(at_ms),
            client: "c",
            method: "GET",
            path: "/",
            status,
            user_agent: Some("ua"),
            if_none_match: None,
            if_modified_since: None,
            referer: None,
            cookie: None,
            authorization: None,
            tag: None,
            bytes: 10,
            wait_until: wait_ms.map(|w| Duration::from_millis(at_ms + w)),
            fault: None,
            challenge: false,
        }
    }

    #[test]
    fn violations_count_only_inside_an_open_wait_after_the_grace() {
        let r = Recorder::new(Duration::from_millis(100), 100);
        r.record(&obs(0, 429, Some(1000)));
        r.record(&obs(50, 429, None)); // in flight when the 429 left: within the grace
        r.record(&obs(500, 200, None)); // inside the wait
        r.record(&obs(1200, 200, None)); // after it
        let report = r.report();
        let c = report.client("c").expect("client");
        assert_eq!(c.violations, 1);
        assert_eq!(c.violation_samples[0].at, 0.5);
        assert_eq!(c.status_429, 2);
        assert_eq!(c.max_per_second, 3);
    }

    #[test]
    fn the_cap_counts_dropped_requests() {
        let r = Recorder::new(Duration::ZERO, 2);
        for i in 0..5 {
            r.record(&obs(i, 200, None));
        }
        assert_eq!(r.len(), 2);
        assert_eq!(r.report().dropped, 3);
        assert_eq!(r.requests()[1].user_agent.as_deref(), Some("ua"));
    }
}
