//! Reading a politeness record in two bounded passes: the first sums every host's totals
//! and finds the time span, the second buckets the charted hosts' traffic on a timeline of
//! at most [`MAX_POINTS`] points. Memory depends on the number of hosts charted and the
//! points per chart, never on the length of the crawl.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crawler::sched::politeness::What;
use crawler::sched::record::{RecordLine, Second};

/// Points on a chart's time axis, at most: a long crawl is summed into wider buckets.
pub(super) const MAX_POINTS: usize = 720;
/// Holds drawn per host, at most (holds with the same trigger that touch are merged first).
pub(super) const MAX_HOLDS: usize = 400;
/// Hosts whose totals are kept one by one; the rest are summed as "other hosts".
const MAX_TRACKED: usize = 100_000;

/// The longest host key kept (a DNS name is at most 253 bytes, plus a port).
const MAX_HOST_LEN: usize = 260;
/// Run starts kept for the charts.
const MAX_RUNS: usize = 1_000;
/// A line longer than this is not a record line (the longest real ones are a few KiB).
const MAX_LINE: usize = 1024 * 1024;
/// The last millisecond of the year 9999: times are clamped to [0, this], so no arithmetic
/// on a hostile record's times can overflow.
const MAX_MS: i64 = 253_402_300_799_999;

/// Latencies above a day, and rates above a million a second, are not a crawl's: they are
/// clamped so that a hostile record cannot blow the axes up.
const MAX_LATENCY_MS: f64 = 86_400_000.0;
const MAX_RATE: f64 = 1_000_000.0;

fn latency(ms: f64) -> f64 {
    ms.clamp(0.0, MAX_LATENCY_MS)
}

/// A rate from the record, when it is one.
fn rate(r: f64) -> Option<f64> {
    r.is_finite().then(|| r.clamp(0.0, MAX_RATE))
}

/// A record's time, clamped to what a crawl can have seen.
fn clamp_ms(ms: i64) -> i64 {
    ms.clamp(0, MAX_MS)
}

/// The end of a wait of `wait_ms` from `start`.
fn after(start: i64, wait_ms: f64) -> i64 {
    clamp_ms(start.saturating_add(wait_ms.clamp(0.0, MAX_MS as f64) as i64))
}

/// Add `from`'s counts to `to`, keeping at most `cap` keys (text of at most 200 characters).
fn add_capped(to: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u32>, cap: usize) {
    for (key, n) in from {
        if let Some(v) = to.get_mut(key) {
            *v += u64::from(*n);
        } else if to.len() < cap {
            to.insert(key.chars().take(200).collect(), u64::from(*n));
        }
    }
}

/// A host's figures over the whole record.
#[derive(Debug, Clone, Default)]
pub(super) struct Totals {
    pub(super) sent: u64,
    pub(super) retries: u64,
    /// Of the requests sent, those a page being rendered made.
    pub(super) subrequests: u64,
    pub(super) status: BTreeMap<u16, u64>,
    pub(super) failed: BTreeMap<String, u64>,
    /// Responses by HTTP version.
    pub(super) versions: BTreeMap<String, u64>,
    /// Requests by the proxy they went through (passwords redacted in the record).
    pub(super) proxies: BTreeMap<String, u64>,
    pub(super) latency_sum_ms: f64,
    pub(super) latency_n: u64,
    pub(super) latency_max_ms: f64,
    pub(super) holds: u64,
    /// Time under holds, overlaps counted once.
    pub(super) held_ms: f64,
    /// Holds by trigger: how many, and their total length (overlaps counted in each).
    pub(super) holds_by: BTreeMap<String, (u64, f64)>,
    hold_until: i64,
    /// Why the host was skipped, if it was.
    pub(super) skipped: Option<String>,
}

impl Totals {
    fn add(&mut self, s: &Second) {
        self.sent += u64::from(s.sent);
        self.retries += u64::from(s.retries);
        self.subrequests += u64::from(s.subrequests);
        for (code, n) in &s.status {
            // HTTP statuses are three digits; anything else a hostile file holds is counted
            // under 0, so the table cannot grow past 501 rows.
            let code = if (100..=599).contains(code) { *code } else { 0 };
            *self.status.entry(code).or_default() += u64::from(*n);
        }
        for (kind, n) in &s.failed {
            // Failure kinds are a handful of fixed names; a hostile file cannot grow this
            // beyond a few entries per host that matter.
            if self.failed.len() < 32 || self.failed.contains_key(kind) {
                *self.failed.entry(kind.clone()).or_default() += u64::from(*n);
            }
        }
        // A handful of versions and the crawl's few proxies; the caps only guard against a
        // hostile file.
        add_capped(&mut self.versions, &s.versions, 8);
        add_capped(&mut self.proxies, &s.proxies, 32);
        self.latency_sum_ms +=
            latency(s.latency_sum_ms / f64::from(s.latency_n.max(1))) * f64::from(s.latency_n);
        self.latency_n += u64::from(s.latency_n);
        self.latency_max_ms = self.latency_max_ms.max(latency(s.latency_max_ms));
    }

    fn hold(&mut self, start: i64, wait_ms: f64, trigger: &str) {
        self.holds += 1;
        // Triggers are a fixed vocabulary; the cap only guards against a hostile file.
        let trigger: String = trigger.chars().take(100).collect();
        if self.holds_by.len() < 32 || self.holds_by.contains_key(&trigger) {
            let by = self.holds_by.entry(trigger).or_default();
            by.0 += 1;
            by.1 += wait_ms.max(0.0);
        }
        let end = start.saturating_add(wait_ms.max(0.0) as i64);
        let from = start.max(self.hold_until);
        if end > from {
            self.held_ms += (end - from) as f64;
            self.hold_until = end;
        }
    }

    fn merge(&mut self, o: &Totals) {
        self.sent += o.sent;
        self.retries += o.retries;
        self.subrequests += o.subrequests;
        for (code, n) in &o.status {
            *self.status.entry(*code).or_default() += n;
        }
        for (kind, n) in &o.failed {
            *self.failed.entry(kind.clone()).or_default() += n;
        }
        for (version, n) in &o.versions {
            *self.versions.entry(version.clone()).or_default() += n;
        }
        for (proxy, n) in &o.proxies {
            *self.proxies.entry(proxy.clone()).or_default() += n;
        }
        self.latency_sum_ms += o.latency_sum_ms;
        self.latency_n += o.latency_n;
        self.latency_max_ms = self.latency_max_ms.max(o.latency_max_ms);
        self.holds += o.holds;
        self.held_ms += o.held_ms;
        for (trigger, (n, ms)) in &o.holds_by {
            if self.holds_by.len() < 32 || self.holds_by.contains_key(trigger) {
                let by = self.holds_by.entry(trigger.clone()).or_default();
                by.0 += n;
                by.1 += ms;
            }
        }
    }

    /// Responses with a status, and requests that ended without one.
    pub(super) fn answered(&self) -> u64 {
        self.status.values().sum::<u64>() + self.failed.values().sum::<u64>()
    }

    /// 429 and 503 answers.
    pub(super) fn refusals(&self) -> u64 {
        self.status.get(&429).copied().unwrap_or(0) + self.status.get(&503).copied().unwrap_or(0)
    }
}

/// What the first pass learns.
#[derive(Debug, Default)]
pub(super) struct Overview {
    /// Each run's start, Unix ms.
    pub(super) runs: Vec<i64>,
    /// Totals of each host (up to [`MAX_TRACKED`] hosts).
    pub(super) hosts: HashMap<String, Totals>,
    /// Totals of the hosts past [`MAX_TRACKED`], summed, and how many they are.
    pub(super) other: Totals,
    pub(super) other_hosts: u64,
    /// The span of everything recorded, Unix ms.
    pub(super) start_ms: Option<i64>,
    pub(super) end_ms: Option<i64>,
    /// Lines read as record lines.
    pub(super) lines: u64,
    /// Lines that are not record lines (corrupt, overlong, another format).
    pub(super) bad_lines: u64,
    /// Whether the file ends with a partial line (a crawl killed while writing).
    pub(super) truncated: bool,
    /// Whether a run was written by a newer format than this reader knows.
    pub(super) newer_format: bool,
}

impl Overview {
    fn span(&mut self, from: i64, to: i64) {
        self.start_ms = Some(self.start_ms.map_or(from, |s| s.min(from)));
        self.end_ms = Some(self.end_ms.map_or(to, |e| e.max(to)));
    }

    fn host(&mut self, host: &str) -> &mut Totals {
        // A host key is a name and a port; a longer one comes from a hostile file and is
        // counted with the hosts beyond the cap rather than kept.
        if host.len() > MAX_HOST_LEN
            || (!self.hosts.contains_key(host) && self.hosts.len() >= MAX_TRACKED)
        {
            self.other_hosts += 1;
            return &mut self.other;
        }
        self.hosts.entry(host.to_owned()).or_default()
    }

    /// Every host's totals summed.
    pub(super) fn total(&self) -> Totals {
        let mut t = self.other.clone();
        for h in self.hosts.values() {
            t.merge(h);
        }
        t
    }
}

/// Read every line of the record at `path`, handing the record lines to `each`; returns
/// (lines read, bad lines, whether the last line was partial).
fn for_each_line(
    path: &Path,
    mut each: impl FnMut(RecordLine),
) -> std::io::Result<(u64, u64, bool)> {
    let mut reader = BufReader::with_capacity(256 * 1024, File::open(path)?);
    let (mut good, mut bad, mut truncated) = (0u64, 0u64, false);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let limit = u64::try_from(MAX_LINE).unwrap_or(u64::MAX) + 1;
        let n = (&mut reader).take(limit).read_until(b'\n', &mut buf)?;
        if n == 0 {
            break;
        }
        let complete = buf.last() == Some(&b'\n');
        if !complete && buf.len() > MAX_LINE {
            // Overlong: drop the rest of it too.
            reader.skip_until(b'\n')?;
            bad += 1;
            continue;
        }
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_str::<RecordLine>(text) {
            Ok(line) => {
                good += 1;
                each(line);
            }
            // A last line cut short is what a kill leaves: expected, not corruption.
            Err(_) if !complete => truncated = true,
            Err(_) => bad += 1,
        }
    }
    Ok((good, bad, truncated))
}

/// The first pass: totals per host, runs and the time span.
pub(super) fn overview(path: &Path) -> std::io::Result<Overview> {
    let mut o = Overview::default();
    let (good, bad, truncated) = for_each_line(path, |line| match line {
        RecordLine::Run { unix_ms, version } => {
            let unix_ms = clamp_ms(unix_ms);
            if o.runs.len() < MAX_RUNS {
                o.runs.push(unix_ms);
            }
            o.newer_format |= version > crawler::sched::record::RECORD_VERSION;
            o.span(unix_ms, unix_ms);
        }
        RecordLine::Audit(a) => {
            let at = clamp_ms(a.unix_ms);
            o.span(at, at);
            let t = o.host(&a.host);
            match &a.what {
                What::Hold { wait_ms, .. } => t.hold(at, *wait_ms, &a.trigger),
                What::Skip { reason } => {
                    t.skipped = Some(reason.chars().take(500).collect());
                }
                _ => {}
            }
        }
        RecordLine::Second(s) => {
            let from = clamp_ms(s.unix_s.saturating_mul(1_000));
            o.span(from, from + 1_000);
            o.host(&s.host).add(&s);
        }
    })?;
    o.lines = good;
    o.bad_lines = bad;
    o.truncated = truncated;
    o.runs.sort_unstable();
    Ok(o)
}

/// The time axis shared by every chart.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeline {
    pub(super) start_ms: i64,
    pub(super) bucket_ms: i64,
    pub(super) buckets: usize,
}

impl Timeline {
    pub(super) fn new(start_ms: i64, end_ms: i64) -> Self {
        let span = (end_ms - start_ms).max(1_000);
        let points = i64::try_from(MAX_POINTS).unwrap_or(720);
        // Whole seconds: the record's resolution.
        let bucket_ms = ((span + points * 1_000 - 1) / (points * 1_000)).max(1) * 1_000;
        let buckets = usize::try_from((span + bucket_ms - 1) / bucket_ms)
            .unwrap_or(MAX_POINTS)
            .clamp(1, MAX_POINTS);
        Self {
            start_ms,
            bucket_ms,
            buckets,
        }
    }

    pub(super) fn end_ms(&self) -> i64 {
        self.start_ms + self.bucket_ms * self.buckets as i64
    }

    pub(super) fn index(&self, ms: i64) -> usize {
        let i = (ms - self.start_ms).div_euclid(self.bucket_ms);
        usize::try_from(i.max(0))
            .unwrap_or(0)
            .min(self.buckets.saturating_sub(1))
    }
}

/// One host's traffic in one bucket of the timeline.
#[derive(Debug, Clone, Default)]
pub(super) struct Bucket {
    pub(super) sent: u64,
    pub(super) retries: u64,
    pub(super) refused_429: u64,
    pub(super) refused_503: u64,
    pub(super) failed: u64,
    pub(super) latency_sum_ms: f64,
    pub(super) latency_n: u64,
    pub(super) latency_max_ms: f64,
    /// The rate the server's RateLimit quota allowed, last stated in the bucket.
    pub(super) quota: Option<f64>,
    /// The pace the host was set to, last set in the bucket.
    pub(super) pace: Option<f64>,
    /// The learned estimate of the server's limit, last set in the bucket.
    pub(super) estimate: Option<f64>,
    /// The ceiling robots.txt's Crawl-delay put on the rate, last raised in the bucket.
    pub(super) floor_rate: Option<f64>,
}

/// A hold on a host.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Hold {
    pub(super) start_ms: i64,
    pub(super) end_ms: i64,
    pub(super) trigger: String,
}

/// A charted host's series.
#[derive(Debug, Clone, Default)]
pub(super) struct Series {
    pub(super) buckets: Vec<Bucket>,
    /// The pace before the first change (the start rate).
    pub(super) pace_start: Option<f64>,
    pub(super) holds: Vec<Hold>,
    /// Holds not drawn past [`MAX_HOLDS`].
    pub(super) holds_dropped: u64,
    /// When the host was skipped, the trigger and why.
    pub(super) skip: Option<(i64, String, String)>,
}

impl Series {
    fn add_hold(&mut self, hold: Hold) {
        if let Some(last) = self.holds.last_mut()
            && last.trigger == hold.trigger
            && hold.start_ms <= last.end_ms
        {
            last.end_ms = last.end_ms.max(hold.end_ms);
            return;
        }
        if self.holds.len() >= MAX_HOLDS {
            self.holds_dropped += 1;
            return;
        }
        self.holds.push(hold);
    }
}

/// The second pass: the series of the `charted` hosts on `timeline`.
pub(super) fn series(
    path: &Path,
    charted: &HashSet<&str>,
    timeline: Timeline,
) -> std::io::Result<HashMap<String, Series>> {
    let mut out: HashMap<String, Series> = charted
        .iter()
        .map(|h| {
            (
                (*h).to_owned(),
                Series {
                    buckets: vec![Bucket::default(); timeline.buckets],
                    ..Series::default()
                },
            )
        })
        .collect();
    for_each_line(path, |line| match line {
        RecordLine::Run { .. } => {}
        RecordLine::Audit(a) => {
            let Some(s) = out.get_mut(&a.host) else {
                return;
            };
            let at = clamp_ms(a.unix_ms);
            let i = timeline.index(at);
            match a.what {
                What::Rate { old, new } => {
                    // The first change's old rate is the rate the host started at.
                    if s.pace_start.is_none() {
                        s.pace_start = rate(old);
                    }
                    if let Some(b) = s.buckets.get_mut(i) {
                        b.pace = rate(new);
                    }
                }
                What::Estimate { rate: r } => {
                    if let Some(b) = s.buckets.get_mut(i) {
                        b.estimate = rate(r);
                    }
                }
                What::CrawlDelay { floor_ms } => {
                    if let Some(b) = s.buckets.get_mut(i)
                        && floor_ms > 0.0
                    {
                        b.floor_rate = rate(1_000.0 / floor_ms);
                    }
                }
                What::Hold { wait_ms, .. } => s.add_hold(Hold {
                    start_ms: at,
                    end_ms: after(at, wait_ms),
                    trigger: a.trigger.chars().take(100).collect(),
                }),
                What::Skip { reason } => {
                    if s.skip.is_none() {
                        s.skip = Some((
                            at,
                            a.trigger.chars().take(100).collect(),
                            reason.chars().take(500).collect(),
                        ));
                    }
                }
            }
        }
        RecordLine::Second(sec) => {
            let Some(s) = out.get_mut(&sec.host) else {
                return;
            };
            let Some(b) = s
                .buckets
                .get_mut(timeline.index(sec.unix_s.saturating_mul(1_000)))
            else {
                return;
            };
            b.sent += u64::from(sec.sent);
            b.retries += u64::from(sec.retries);
            b.refused_429 += u64::from(sec.status.get(&429).copied().unwrap_or(0));
            b.refused_503 += u64::from(sec.status.get(&503).copied().unwrap_or(0));
            b.failed += sec.failed.values().map(|&n| u64::from(n)).sum::<u64>();
            b.latency_sum_ms += latency(sec.latency_sum_ms / f64::from(sec.latency_n.max(1)))
                * f64::from(sec.latency_n);
            b.latency_n += u64::from(sec.latency_n);
            b.latency_max_ms = b.latency_max_ms.max(latency(sec.latency_max_ms));
            if let Some(q) = sec.quota.and_then(|q| q.allowed_rate()).and_then(rate) {
                b.quota = Some(q);
            }
        }
    })?;
    Ok(out)
}
