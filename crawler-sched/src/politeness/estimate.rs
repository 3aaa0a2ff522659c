//! What the server accepted: a bounded log of recent sends and the limit it implies.
//!
//! A refusal says "too fast" but not "how fast is fine". The log of what was sent and
//! what came back answers that from evidence instead of blind halving:
//!
//! - [`SendLog::accepted_rate`]: requests accepted per second over a recent window.
//! - [`SendLog::fit_token_bucket`]: the range of refill rates `r` for which *some* token
//!   bucket (any burst) would have accepted exactly what was accepted and refused exactly
//!   what was refused. One refusal leaves that range wide (a large burst and a slow refill
//!   explain it as well as a small burst and a fast one); a second episode after a hold
//!   narrows it sharply, because the hold refilled the bucket at the true rate.
//!
//! nginx `limit_req`, most API gateways and CDN rate limits are token (leaky) buckets;
//! sliding and fixed windows behave like a bucket whose burst is the whole window, so the
//! fit brackets their sustainable rate too, if more loosely.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// How the server answered one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// Anything but a refusal (the request counted against the budget and was served).
    Accepted,
    /// 429 or 503: the limiter said no.
    Refused,
}

/// Recent sends of one host: (send time in ms on the machine's clock, answer), oldest
/// first, bounded in count and age.
///
/// Serialised compactly, since it travels with every commit of a fleet's shared state: the
/// first send time and the gaps after it, in tenths of a millisecond, and the positions of
/// the refused sends. A gap at a few requests a second is four or five digits where an
/// absolute time is fourteen, so a fleet can carry a log long enough for its bucket fit (600
/// sends, two minutes at 5 r/s, were not: a four-worker fleet's third refusal's fit saw one
/// episode, and a rate above the limit was taken for safe).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "CompactLog", into = "CompactLog")]
pub struct SendLog {
    entries: VecDeque<(f64, Answer)>,
}

/// The wire form of a [`SendLog`].
#[derive(Serialize, Deserialize)]
struct CompactLog {
    /// The first send time, tenths of a millisecond.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    t0: Option<i64>,
    /// Each later send's gap from the one before, tenths of a millisecond.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    d: Vec<i64>,
    /// Absolute send times, tenths of a millisecond: the form written before gaps were, still
    /// read so that a saved state (a resumed crawl, a fleet's Redis) keeps its log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    t: Vec<i64>,
    /// Indexes into the sends of the refused ones.
    r: Vec<u32>,
}

impl From<SendLog> for CompactLog {
    fn from(log: SendLog) -> Self {
        let mut r = Vec::new();
        // Rounded first, then differenced: the gaps add back up to the rounded times
        // exactly, with no drift along the log.
        let tenths: Vec<i64> = log
            .entries
            .iter()
            .enumerate()
            .map(|(i, (at, a))| {
                if *a == Answer::Refused {
                    r.push(u32::try_from(i).unwrap_or(u32::MAX));
                }
                (at * 10.0).round() as i64
            })
            .collect();
        let d = tenths.windows(2).map(|w| w[1] - w[0]).collect();
        Self {
            t0: tenths.first().copied(),
            d,
            t: Vec::new(),
            r,
        }
    }
}

impl From<CompactLog> for SendLog {
    fn from(c: CompactLog) -> Self {
        let times: Vec<i64> = match c.t0 {
            Some(t0) => std::iter::once(t0)
                .chain(c.d.iter().scan(t0, |t, gap| {
                    *t = t.saturating_add(*gap);
                    Some(*t)
                }))
                .collect(),
            None => c.t,
        };
        let mut entries: VecDeque<(f64, Answer)> = times
            .iter()
            .map(|&t| (t as f64 / 10.0, Answer::Accepted))
            .collect();
        for i in c.r {
            if let Some(e) = entries.get_mut(i as usize) {
                e.1 = Answer::Refused;
            }
        }
        Self { entries }
    }
}

/// The refill rates (requests/s) a token bucket could have and still explain the log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fit {
    /// Slowest consistent refill rate.
    pub lo: f64,
    /// Fastest consistent refill rate.
    pub hi: f64,
    /// Slowest rate of the contiguous run of consistent rates that ends at `hi`: the
    /// consistent set is a union of runs (one per bucket capacity, roughly), and the top
    /// run is the explanation with the smallest burst.
    pub top: f64,
    /// The smallest burst (requests beyond the first) a bucket refilling at `top` needs to
    /// accept what was accepted. Under one, every request must keep its spacing and arrival
    /// jitter alone can cause a refusal; from one up, the bucket absorbs it.
    pub burst: f64,
}

/// A fixed-window counter that explains the log: `limit` requests per `period_ms`, the
/// windows starting at `phase_ms` (mod the period) on the log's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowFit {
    /// The window's length (ms).
    pub period_ms: f64,
    /// Where the windows start, modulo the period (ms on the log's clock).
    pub phase_ms: f64,
    /// Requests each window accepts: the most any window accepted.
    pub limit: u32,
    /// Windows in which a refusal came with the window full.
    pub full_windows: usize,
}

impl WindowFit {
    /// The rate (requests/s) the counter sustains.
    pub fn rate(&self) -> f64 {
        f64::from(self.limit) * 1_000.0 / self.period_ms
    }
}

/// Window lengths a fixed-window fit tries (seconds): what rate-limit configurations
/// commonly use. Shorter windows are left to the bucket fit: at a few requests a second a
/// one-second counter and a bucket with a burst of its count are the same limit, and a
/// handful of requests a window would let coincidences fit.
const WINDOW_PERIODS_S: [f64; 5] = [5.0, 10.0, 15.0, 30.0, 60.0];
/// Window starts tried per period: a grid of a 480th of the window (21 ms at 10 s), each
/// send within half a step (and the arrival jitter) of a window's edge taken as possibly in
/// either window.
const WINDOW_PHASES: usize = 480;
/// Sends the fixed-window fit reads, the most recent (its cost is this times the grid).
const WINDOW_FIT_SENDS: usize = 1_024;

impl SendLog {
    /// Record a send answered with `answer`, forgetting what is beyond `capacity` entries
    /// or older than `horizon_ms` before `at`.
    pub fn record(&mut self, at: f64, answer: Answer, capacity: usize, horizon_ms: f64) {
        // Answers arrive in completion order; keep the log in send order, since a bucket
        // sees arrivals, and a late answer belongs a few places back at most.
        let pos = self
            .entries
            .iter()
            .rposition(|(t, _)| *t <= at)
            .map_or(0, |p| p + 1);
        self.entries.insert(pos, (at, answer));
        while self.entries.len() > capacity.max(1) {
            self.entries.pop_front();
        }
        while self
            .entries
            .front()
            .is_some_and(|(t, _)| *t < at - horizon_ms)
        {
            self.entries.pop_front();
        }
    }

    /// Number of sends remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Move every send time by `delta` ms (a restored log on a new clock).
    pub fn shift(&mut self, delta: f64) {
        for (t, _) in &mut self.entries {
            *t += delta;
        }
    }

    /// Forget everything (a new server limit: a rate change announced by headers, say).
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Accepted sends per second in `(at - window_ms, at]`, with the window shortened to
    /// start no earlier than `since` (the end of the last hold: idle time says nothing
    /// about capacity). `None` when less than a second of evidence is left.
    pub fn accepted_rate(&self, at: f64, window_ms: f64, since: f64) -> Option<f64> {
        let start = (at - window_ms).max(since);
        let span = at - start;
        if span < 1_000.0 {
            return None;
        }
        let n = self
            .entries
            .iter()
            .filter(|(t, a)| *t > start && *t <= at && *a == Answer::Accepted)
            .count();
        Some(n as f64 * 1_000.0 / span)
    }

    /// Refusal episodes remembered: runs of refused sends with accepted ones between them.
    pub fn episodes(&self) -> usize {
        let mut n = 0;
        let mut prev = Answer::Accepted;
        for (_, a) in &self.entries {
            if *a == Answer::Refused && prev == Answer::Accepted {
                n += 1;
            }
            prev = *a;
        }
        n
    }

    /// The gap (ms) from the send logged just before `at` to `at`, if one is logged.
    pub fn gap_before(&self, at: f64) -> Option<f64> {
        self.entries
            .iter()
            .rev()
            .map(|(t, _)| *t)
            .find(|t| *t < at)
            .map(|t| at - t)
    }

    /// Accepted sends logged in `(from, to)`.
    pub fn accepted_between(&self, from: f64, to: f64) -> usize {
        self.entries
            .iter()
            .filter(|(t, a)| *t > from && *t < to && *a == Answer::Accepted)
            .count()
    }

    /// The range of token-bucket refill rates, within `[min, max]` requests/s, that
    /// explain every answer in the log, or `None` when no bucket does (the limiter is of
    /// another kind, or the log holds no refusal to learn from).
    ///
    /// `jitter_ms` is how far an arrival at the server may be from the logged send time;
    /// it widens the tolerance, since a bucket judges arrivals.
    pub fn fit_token_bucket(&self, min: f64, max: f64, jitter_ms: f64) -> Option<Fit> {
        if !self.entries.iter().any(|(_, a)| *a == Answer::Refused) || min <= 0.0 || max <= min {
            return None;
        }
        // The consistent set can be very narrow (two long episodes pin the rate to a
        // fraction of a percent), narrower than any affordable grid step. So a coarse
        // geometric grid measures how close each rate comes to consistency (the margin
        // between the burst the accepts need and the burst the refusals allow), and fine
        // scans around its local maxima (a handful: the margin is piecewise smooth) find
        // the consistent rates.
        const COARSE: usize = 240;
        const FINE: usize = 48;
        const ZOOMS: usize = 4;
        let ratio = (max / min).powf(1.0 / (COARSE - 1) as f64);
        let grid: Vec<(f64, f64)> = (0..COARSE)
            .map(|i| {
                let r = min * ratio.powi(i as i32);
                (r, self.margin(r, jitter_ms))
            })
            .collect();
        let mut peaks: Vec<(f64, f64)> = grid
            .iter()
            .enumerate()
            .filter(|(i, (_, m))| {
                let left = i
                    .checked_sub(1)
                    .and_then(|j| grid.get(j))
                    .map_or(f64::NEG_INFINITY, |g| g.1);
                let right = grid.get(i + 1).map_or(f64::NEG_INFINITY, |g| g.1);
                // Strictly above the left neighbour: a plateau counts once.
                *m > left && *m >= right
            })
            .map(|(_, &g)| g)
            .collect();
        peaks.sort_by(|a, b| b.1.total_cmp(&a.1));
        let mut good: Vec<f64> = grid
            .iter()
            .filter(|(_, m)| *m > 0.0)
            .map(|(r, _)| *r)
            .collect();
        for &(r, _) in peaks.iter().take(16) {
            // Zoom in on the peak: a fine scan around it, then around the best rate that
            // scan found, a few times. Long episodes pin the rate to a tenth of a percent
            // or less, under one fine step; a scan that stops short of it finds no bucket
            // at all and the machine falls back on weaker evidence.
            let (mut lo, mut width) = (r / ratio, ratio * ratio);
            for _ in 0..ZOOMS {
                let step = width.powf(1.0 / (FINE - 1) as f64);
                let mut best = (f64::NEG_INFINITY, lo);
                for k in 0..FINE {
                    let x = lo * step.powi(k as i32);
                    let m = self.margin(x, jitter_ms);
                    if m > 0.0 {
                        good.push(x);
                    }
                    if m > best.0 {
                        best = (m, x);
                    }
                }
                width = step * step;
                lo = best.1 / step;
            }
        }
        if good.is_empty() {
            return None;
        }
        good.sort_by(f64::total_cmp);
        let lo = good[0];
        let hi = good[good.len() - 1];
        // The top run: consistent rates down from `hi` with no gap wider than a coarse
        // step between neighbours.
        let mut top = hi;
        for w in good.windows(2).rev() {
            if w[1] / w[0] > ratio * 1.0001 {
                break;
            }
            top = w[0];
        }
        let burst = self.bounds(top, jitter_ms).0;
        Some(Fit { lo, hi, top, burst })
    }

    /// The fixed-window counter (`limit` per window, refused requests not counted) that
    /// explains every answer in the log, when one does with at least three refusal episodes
    /// in full windows; the shortest such window of [`WINDOW_PERIODS_S`]. A counter of this
    /// kind refuses only once a window holds `limit` accepted requests, and until the window
    /// turns; a bucket or a sliding window refuses with a window's count anywhere, so three
    /// episodes and the rest of the log rarely fit one by chance.
    ///
    /// `jitter_ms` is how far an arrival may be from its logged send time.
    pub fn fit_fixed_window(&self, jitter_ms: f64) -> Option<WindowFit> {
        if self.episodes() < 3 {
            return None;
        }
        let skip = self.entries.len().saturating_sub(WINDOW_FIT_SENDS);
        let entries: Vec<(f64, bool)> = self
            .entries
            .iter()
            .skip(skip)
            .map(|(t, a)| (*t, *a == Answer::Refused))
            .collect();
        let (first, last) = (entries.first()?.0, entries.last()?.0);
        for period_s in WINDOW_PERIODS_S {
            let period = period_s * 1_000.0;
            if last - first < 3.0 * period {
                continue;
            }
            let step = period / WINDOW_PHASES as f64;
            let tolerance = jitter_ms + step / 2.0;
            // Window starts off the true one can explain the log too, with another limit: a
            // window starting early takes in the sends before the server's edge, one
            // starting late leaves its first sends to the window before. While the
            // episodes are alike (each the same pace into a fresh window) a whole arc of
            // starts fits, its limits a few apart, and which end is the truth depends on
            // the episodes; a fit is taken only once the starts that fit agree on the limit
            // to one request (the edge's own uncertainty), and then the limit most of them
            // give (the lower on a tie).
            let fits: Vec<WindowFit> = (0..WINDOW_PHASES)
                .filter_map(|j| {
                    let phase = (j as f64 + 0.5) * step;
                    window_consistent(&entries, period, phase, tolerance)
                })
                .collect();
            let lowest = fits.iter().map(|f| f.limit).min();
            let highest = fits.iter().map(|f| f.limit).max();
            if let (Some(lo), Some(hi)) = (lowest, highest) {
                if hi - lo > 1 {
                    return None;
                }
                let count = |l: u32| fits.iter().filter(|f| f.limit == l).count();
                let limit = if count(hi) > count(lo) { hi } else { lo };
                let at: Vec<WindowFit> =
                    fits.iter().filter(|f| f.limit == limit).copied().collect();
                return at.get(at.len() / 2).copied();
            }
        }
        None
    }

    /// How well a bucket refilling at `r`/s explains the log: positive when some burst
    /// accepts every accepted send and refuses every refused one.
    ///
    /// The bucket is nginx's: `excess = max(0, excess - r x elapsed + 1)` per arrival, the
    /// arrival refused when that exceeds the burst (and then nothing changes). `excess` 0
    /// is a full bucket, which is what the first logged send meets.
    fn margin(&self, r: f64, jitter_ms: f64) -> f64 {
        let (need, below) = self.bounds(r, jitter_ms);
        below - need
    }

    /// The bursts a bucket refilling at `r`/s may have: at least the first, under the
    /// second.
    fn bounds(&self, r: f64, jitter_ms: f64) -> (f64, f64) {
        let per_ms = r / 1_000.0;
        // The excess after the last accepted arrival, and when that was: nginx measures
        // from there, and clamps at zero only after adding the new request.
        let mut e: f64 = 0.0;
        let mut last: Option<f64> = None;
        // Some burst b with need <= b < below. nginx's burst is an integer, but arrival
        // times are only known to within the jitter, so a real b is asked for.
        let mut need = 0.0f64;
        let mut below = f64::INFINITY;
        for &(t, answer) in &self.entries {
            let dt = last.map_or(f64::INFINITY, |l| t - l);
            // Arrivals may be `jitter_ms` away from the logged send times: judge each
            // answer with the gap that favours it, and carry the nominal excess on.
            match answer {
                Answer::Accepted => {
                    let lenient = (e - per_ms * (dt + jitter_ms) + 1.0).max(0.0);
                    need = need.max(lenient);
                    e = (e - per_ms * dt + 1.0).max(0.0);
                    last = Some(t);
                }
                Answer::Refused => {
                    let strict = (e - per_ms * (dt - jitter_ms).max(0.0) + 1.0).max(0.0);
                    below = below.min(strict);
                }
            }
        }
        (need, below)
    }
}

/// Whether windows of `period` ms starting at `phase` (mod the period) explain `entries`
/// (send time, refused), each send within `tolerance` ms of an edge possibly in either
/// window: some limit no window's certain count exceeds, and that every refused send met
/// (its window's accepted sends before it, counting the uncertain ones), with nothing
/// certainly accepted after a refusal in the same window.
fn window_consistent(
    entries: &[(f64, bool)],
    period: f64,
    phase: f64,
    tolerance: f64,
) -> Option<WindowFit> {
    // The limit lies in `lo_limit..=hi_limit`: at least what a window certainly accepted,
    // at most what a refused send's window had possibly accepted before it.
    let mut lo_limit = 0u32;
    let mut hi_limit = u32::MAX;
    let mut full_windows = 0usize;
    let mut window = i64::MIN;
    let (mut certain, mut possible) = (0u32, 0u32);
    let mut refused_in_window = false;
    // Accepted sends near the end of the window before: possibly in this one.
    let mut carried = 0u32;
    // Accepted sends since the last refusal, and the longest such run that ended in one:
    // more than the limit means a window turned while the sends went on, which is what
    // tells the window's length. Episodes shorter than a window (a burst after each hold,
    // the limit spent in seconds) fit any longer window as well, and a sliding window
    // refuses them exactly so.
    let (mut run, mut longest_run) = (0u32, 0u32);
    for &(t, refused) in entries {
        let x = (t - phase) / period;
        let k = x.floor() as i64;
        let into = (x - x.floor()) * period;
        let near_start = into < tolerance;
        let near_end = period - into < tolerance;
        if k != window {
            lo_limit = lo_limit.max(certain);
            carried = if k == window + 1 { carried } else { 0 };
            window = k;
            certain = 0;
            possible = carried;
            carried = 0;
            refused_in_window = false;
        }
        if refused {
            longest_run = longest_run.max(run);
            run = 0;
            if near_start || near_end {
                // Which window it met is uncertain: it says nothing.
                continue;
            }
            hi_limit = hi_limit.min(possible);
            if !refused_in_window {
                refused_in_window = true;
                full_windows += 1;
            }
        } else {
            if refused_in_window && !near_end {
                // Accepted after a refusal in a window that was full: not this counter.
                return None;
            }
            possible += 1;
            run += 1;
            if near_end {
                carried += 1;
            }
            if !near_start && !near_end {
                certain += 1;
            }
        }
        if lo_limit > hi_limit {
            return None;
        }
    }
    lo_limit = lo_limit.max(certain);
    let fits = lo_limit <= hi_limit && lo_limit > 0 && full_windows >= 3;
    (fits && longest_run > lo_limit).then_some(WindowFit {
        period_ms: period,
        phase_ms: phase,
        limit: lo_limit,
        full_windows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Send at `rate` from `start` into an nginx bucket (r, burst) whose excess is `y`,
    /// logging the answers, until the first refusal; returns its time and the excess.
    fn episode(
        log: &mut SendLog,
        bucket: (f64, f64),
        state: (f64, Option<f64>),
        start: f64,
        rate: f64,
    ) -> (f64, (f64, Option<f64>)) {
        let (r, burst) = bucket;
        let (mut e, mut last) = state;
        let mut t = start;
        for _ in 0..100_000 {
            let dt = last.map_or(f64::INFINITY, |l| t - l);
            let cand = (e - r * dt / 1000.0 + 1.0).max(0.0);
            if cand <= burst {
                e = cand;
                last = Some(t);
                log.record(t, Answer::Accepted, 100_000, f64::INFINITY);
            } else {
                log.record(t, Answer::Refused, 100_000, f64::INFINITY);
                return (t, (e, last));
            }
            t += 1000.0 / rate;
        }
        (t, (e, last))
    }

    /// Send at `rate` from `start` into a fixed-window counter (`limit` per `period` ms,
    /// windows starting at `edge` mod the period), logging the answers, until the first
    /// refusal; returns its time.
    fn window_episode(log: &mut SendLog, counter: (u32, f64, f64), start: f64, rate: f64) -> f64 {
        let (limit, period, edge) = counter;
        let mut t = start;
        let mut used: Option<(i64, u32)> = None;
        for _ in 0..100_000 {
            let window = ((t - edge) / period).floor() as i64;
            let n = used.filter(|(w, _)| *w == window).map_or(0, |(_, n)| n);
            if n >= limit {
                log.record(t, Answer::Refused, 100_000, f64::INFINITY);
                return t;
            }
            used = Some((window, n + 1));
            log.record(t, Answer::Accepted, 100_000, f64::INFINITY);
            t += 1000.0 / rate;
        }
        t
    }

    #[test]
    fn a_fixed_window_counter_is_named_once_three_episodes_agree() {
        // 30 per 10 s, windows starting 3.7 s into every ten; episodes at falling rates,
        // each refusal answered by a 30 s hold (the rates a climb from above tries).
        let counter = (30, 10_000.0, 3_700.0);
        let mut log = SendLog::default();
        let mut t = 0.0;
        let mut fits = Vec::new();
        for rate in [4.5, 3.6, 3.3, 3.1] {
            t = window_episode(&mut log, counter, t, rate) + 30_000.0;
            fits.push(log.fit_fixed_window(5.0));
        }
        assert_eq!(fits[0], None, "one episode names nothing");
        assert_eq!(fits[1], None, "nor do two: {:?}", fits[1]);
        let fit = fits[3].expect("four episodes name the counter");
        assert_eq!(fit.period_ms, 10_000.0, "{fit:?}");
        assert_eq!(fit.limit, 30, "{fit:?}");
        assert!((fit.rate() - 3.0).abs() < 1e-9, "{fit:?}");
        let off = (fit.phase_ms - 3_700.0).rem_euclid(10_000.0);
        assert!(!(100.0..9_900.0).contains(&off), "edge at {fit:?}");
    }

    #[test]
    fn a_token_bucket_is_not_taken_for_a_fixed_window() {
        let bucket = (5.0, 20.0);
        let mut log = SendLog::default();
        let mut x = (0.0, None);
        let mut t = 0.0;
        for rate in [8.0, 6.0, 5.3, 5.1] {
            let (end, state) = episode(&mut log, bucket, x, t, rate);
            x = state;
            t = end + 30_000.0;
        }
        assert!(log.episodes() >= 4);
        assert_eq!(log.fit_fixed_window(5.0), None);
    }

    #[test]
    fn bursts_shorter_than_a_window_do_not_tell_its_length() {
        // After every 30 s hold, 30 requests at 10 r/s and a refusal, as a sliding window
        // of 30 per 10 s answers them (its count is empty again after the hold): a fixed
        // counter of 30 per 10, 15 or 30 s would too. No window is named.
        let mut log = SendLog::default();
        let mut t = 1_234.0;
        for _ in 0..5 {
            for _ in 0..30 {
                log.record(t, Answer::Accepted, 100_000, f64::INFINITY);
                t += 100.0;
            }
            log.record(t, Answer::Refused, 100_000, f64::INFINITY);
            t += 30_000.0;
        }
        assert_eq!(log.episodes(), 5);
        assert_eq!(log.fit_fixed_window(5.0), None);
    }

    #[test]
    fn episodes_are_runs_of_refusals() {
        let mut log = SendLog::default();
        assert_eq!(log.episodes(), 0);
        let answers = [
            Answer::Refused,
            Answer::Refused,
            Answer::Accepted,
            Answer::Accepted,
            Answer::Refused,
            Answer::Accepted,
            Answer::Refused,
            Answer::Refused,
        ];
        for (i, a) in answers.into_iter().enumerate() {
            log.record(i as f64 * 100.0, a, 100, f64::INFINITY);
        }
        assert_eq!(log.episodes(), 3);
        // Forgetting the oldest sends forgets their episode.
        log.record(2_000.0, Answer::Accepted, 6, f64::INFINITY);
        assert_eq!(log.episodes(), 2);
    }

    #[test]
    fn one_refusal_leaves_the_range_wide_a_second_episode_pins_the_rate() {
        let bucket = (5.0, 20.0);
        let mut log = SendLog::default();
        let (t, x) = episode(&mut log, bucket, (0.0, None), 0.0, 8.0);
        let one = log
            .fit_token_bucket(0.05, 20.0, 5.0)
            .expect("a bucket fits");
        assert!(
            one.lo < 2.0 && one.hi > 5.0,
            "one episode cannot tell: {one:?}"
        );
        // A 30 s hold, then a second episode at another rate.
        episode(&mut log, bucket, x, t + 30_000.0, 6.0);
        let two = log
            .fit_token_bucket(0.05, 20.0, 5.0)
            .expect("a bucket fits");
        assert!(two.lo > 4.6 && two.hi < 5.4, "{two:?}");
    }

    #[test]
    fn a_short_hold_pins_the_rate_in_one_more_episode() {
        // A hold shorter than the bucket's refill: the next episode starts part-full.
        let bucket = (1.0, 20.0);
        let mut log = SendLog::default();
        let (t, x) = episode(&mut log, bucket, (0.0, None), 0.0, 3.0);
        episode(&mut log, bucket, x, t + 4_000.0, 2.0);
        let fit = log
            .fit_token_bucket(0.05, 20.0, 5.0)
            .expect("a bucket fits");
        assert!(fit.lo > 0.85 && fit.hi < 1.15, "{fit:?}");
    }

    #[test]
    fn a_long_episode_pins_the_rate_to_a_fraction_of_a_percent() {
        // A fast first episode, a hold, then minutes just above the limit until the burst
        // drains: the consistent rates are a sliver around 3/s, far under one step of the
        // coarse grid, and the fit must still find them (and the burst).
        // The logged send times are off the arrivals by up to 4.5 ms either way (a busy
        // client's clock), which uses up most of the fit's tolerance.
        let bucket = (3.0, 20.0);
        let mut exact = SendLog::default();
        let (t, x) = episode(&mut exact, bucket, (0.0, None), 0.0, 6.0);
        let (end, _) = episode(&mut exact, bucket, x, t + 30_000.0, 3.06);
        assert!(end - t > 300_000.0, "the burst lasted {end} ms");
        let mut log = SendLog::default();
        for (i, &(at, answer)) in exact.entries.iter().enumerate() {
            let noise = (i * 7_919 % 10) as f64 - 4.5;
            log.record(at + noise, answer, 100_000, f64::INFINITY);
        }
        let fit = log
            .fit_token_bucket(0.05, 20.0, 5.0)
            .expect("a bucket fits");
        assert!(fit.lo > 2.98 && fit.hi < 3.02, "{fit:?}");
        assert!(fit.hi / fit.lo < 1.01, "{fit:?}");
        assert!((fit.burst - 20.0).abs() < 1.0, "{fit:?}");
    }

    #[test]
    fn accepted_rate_ignores_time_before_the_last_hold() {
        let mut log = SendLog::default();
        for i in 0..50 {
            log.record(f64::from(i) * 200.0, Answer::Accepted, 100, 1e9);
        }
        // 50 sends over 10 s at 5/s; measured since t = 5 s: 25 sends in 5 s.
        let r = log
            .accepted_rate(10_000.0, 60_000.0, 5_000.0)
            .unwrap_or(0.0);
        assert!((r - 4.8).abs() < 0.3, "{r}");
        assert_eq!(log.accepted_rate(10_000.0, 60_000.0, 9_500.0), None);
    }

    #[test]
    fn the_log_is_bounded_in_count_and_age() {
        let mut log = SendLog::default();
        for i in 0..1000 {
            log.record(f64::from(i) * 1000.0, Answer::Accepted, 64, 30_000.0);
        }
        assert!(log.len() <= 31, "{}", log.len());
        for i in 0..1000 {
            log.record(1e7 + f64::from(i), Answer::Accepted, 64, 1e9);
        }
        assert_eq!(log.len(), 64);
    }

    #[test]
    fn the_wire_form_round_trips_and_is_compact() {
        // Ten minutes at 5 r/s on a fleet's clock (milliseconds since 1970), with
        // refusals: the whole log a fleet carries with every commit.
        let mut log = SendLog::default();
        let start = 1_796_173_341_982.1;
        for i in 0..3_000 {
            let answer = if i % 700 == 699 {
                Answer::Refused
            } else {
                Answer::Accepted
            };
            let jitter = f64::from(i * 7_919 % 13) * 0.37;
            log.record(
                start + f64::from(i) * 200.0 + jitter,
                answer,
                4_096,
                600_000.0,
            );
        }
        let json = serde_json::to_string(&log).expect("a log serialises");
        let back: SendLog = serde_json::from_str(&json).expect("and reads back");
        assert_eq!(back.len(), log.len());
        for ((a, x), (b, y)) in log.entries.iter().zip(&back.entries) {
            assert!((a - b).abs() <= 0.05, "{a} read back as {b}");
            assert_eq!(x, y);
        }
        assert_eq!(back.episodes(), log.episodes());
        // Absolute times took 15 bytes a send (45 kB here); gaps take about 5.
        assert!(json.len() < 18_000, "{} bytes", json.len());
    }

    #[test]
    fn a_log_saved_with_absolute_times_still_reads() {
        let old = r#"{"t":[100000,102000,104005],"r":[2]}"#;
        let log: SendLog = serde_json::from_str(old).expect("the older form reads");
        assert_eq!(log.len(), 3);
        assert_eq!(log.gap_before(10_400.5), Some(200.5));
        assert_eq!(log.accepted_between(0.0, 1e9), 2);
        let empty: SendLog = serde_json::from_str(r#"{"r":[]}"#).expect("an empty log reads");
        assert!(empty.is_empty());
    }
}
