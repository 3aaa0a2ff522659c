//! One host's chart, as an inline SVG: the request rate achieved against what the server
//! allowed, holds as shaded bands labelled with their trigger, refusals, retries and
//! failures as marks, and the latency in a strip below. No script: details are in `<title>`
//! tooltips.

use std::fmt::Write as _;

use super::esc;
use super::read::{Series, Timeline};

const WIDTH: f64 = 960.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const RATE_TOP: f64 = 22.0;
const RATE_H: f64 = 200.0;
const LAT_TOP: f64 = RATE_TOP + RATE_H + 34.0;
const LAT_H: f64 = 64.0;
const HEIGHT: f64 = LAT_TOP + LAT_H + 30.0;
const PLOT_W: f64 = WIDTH - LEFT - RIGHT;

/// A round number at or above `v`, for an axis's top.
fn nice_ceil(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let exp = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if m * exp >= v * 0.999_999 {
            return m * exp;
        }
    }
    10.0 * exp
}

/// Elapsed time, short: `45s`, `3m20s`, `2h05m`, `1d03h`.
pub(super) fn elapsed(ms: i64) -> String {
    let s = ms.max(0) / 1_000;
    match s {
        0..60 => format!("{s}s"),
        60..3_600 if s % 60 == 0 => format!("{}m", s / 60),
        60..3_600 => format!("{}m{:02}s", s / 60, s % 60),
        3_600..86_400 => format!("{}h{:02}m", s / 3_600, (s % 3_600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3_600),
    }
}

/// A duration in seconds, for tooltips: `850 ms`, `3.2 s`, `4m10s`.
pub(super) fn duration(ms: f64) -> String {
    if ms < 1_000.0 {
        format!("{ms:.0} ms")
    } else if ms < 60_000.0 {
        format!("{:.1} s", ms / 1_000.0)
    } else {
        elapsed(ms as i64)
    }
}

/// The step between time ticks: a round duration giving at most 8 ticks.
fn tick_step(span_ms: i64) -> i64 {
    const STEPS_S: [i64; 21] = [
        1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 10_800, 21_600, 43_200,
        86_400, 172_800, 604_800, 2_592_000,
    ];
    STEPS_S
        .iter()
        .map(|s| s * 1_000)
        .find(|step| span_ms / step <= 8)
        .unwrap_or(2_592_000_000)
}

struct Frame {
    timeline: Timeline,
    rate_max: f64,
    lat_max: f64,
}

impl Frame {
    fn x(&self, ms: i64) -> f64 {
        let t0 = self.timeline.start_ms;
        let span = (self.timeline.end_ms() - t0).max(1) as f64;
        LEFT + ((ms - t0) as f64 / span).clamp(0.0, 1.0) * PLOT_W
    }

    fn bucket_x(&self, i: usize, at: f64) -> f64 {
        let ms = self.timeline.start_ms as f64 + (i as f64 + at) * self.timeline.bucket_ms as f64;
        self.x(ms as i64)
    }

    fn y_rate(&self, v: f64) -> f64 {
        RATE_TOP + RATE_H - (v / self.rate_max).clamp(0.0, 1.05) * RATE_H
    }

    fn y_lat(&self, v: f64) -> f64 {
        LAT_TOP + LAT_H - (v / self.lat_max).clamp(0.0, 1.0) * LAT_H
    }
}

/// The chart of one host; `index` makes its element ids unique in the page, `runs` are the
/// starts of the record's runs (Unix ms).
pub(super) fn chart(
    host: &str,
    index: usize,
    series: &Series,
    timeline: Timeline,
    runs: &[i64],
) -> String {
    let secs = timeline.bucket_ms as f64 / 1_000.0;
    let achieved: Vec<f64> = series
        .buckets
        .iter()
        .map(|b| b.sent as f64 / secs)
        .collect();
    let top_achieved = achieved.iter().copied().fold(0.0, f64::max);
    let allowed = series
        .buckets
        .iter()
        .flat_map(|b| [b.pace, b.estimate, b.quota, b.floor_rate])
        .chain([series.pace_start])
        .flatten()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    // An allowed rate far above what was achieved would flatten the line that matters:
    // the axis stops at three times the achieved peak and the rest is clipped.
    let allowed_shown = if top_achieved > 0.0 {
        allowed.min(top_achieved * 3.0)
    } else {
        allowed
    };
    let lat_top = series
        .buckets
        .iter()
        .map(|b| b.latency_max_ms)
        .fold(0.0, f64::max);
    let f = Frame {
        timeline,
        rate_max: nice_ceil(top_achieved.max(allowed_shown) * 1.1),
        lat_max: nice_ceil(lat_top),
    };
    let mut s = String::with_capacity(32 * 1024);
    let _ = write!(
        s,
        r#"<svg class="host-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="requests per second to {host}">"#,
        host = esc(host)
    );
    let _ = write!(
        s,
        r#"<title>{}</title><defs><clipPath id="clip-{index}"><rect x="{LEFT}" y="{RATE_TOP}" width="{PLOT_W}" height="{RATE_H}"/></clipPath></defs>"#,
        esc(host)
    );
    axes(&mut s, &f);
    holds(&mut s, &f, series);
    let _ = write!(s, r#"<g clip-path="url(#clip-{index})">"#);
    steps(
        &mut s,
        &f,
        series,
        |b| b.quota,
        None,
        "quota",
        "RateLimit quota",
    );
    steps(
        &mut s,
        &f,
        series,
        |b| b.estimate,
        None,
        "estimate",
        "learned limit",
    );
    steps(
        &mut s,
        &f,
        series,
        |b| b.floor_rate,
        None,
        "floor",
        "Crawl-delay ceiling",
    );
    steps(
        &mut s,
        &f,
        series,
        |b| b.pace,
        series.pace_start,
        "pace",
        "allowed pace",
    );
    line(
        &mut s,
        "achieved",
        (0..achieved.len()).map(|i| {
            let v = achieved.get(i).copied().unwrap_or(0.0);
            Some((f.bucket_x(i, 0.5), f.y_rate(v)))
        }),
    );
    s.push_str("</g>");
    marks(&mut s, &f, series);
    latency(&mut s, &f, series);
    runs_and_skip(&mut s, &f, series, runs);
    s.push_str("</svg>");
    s
}

/// Grid, ticks and axis labels of both panels.
fn axes(s: &mut String, f: &Frame) {
    let right = LEFT + PLOT_W;
    for (top, h, max, unit) in [
        (RATE_TOP, RATE_H, f.rate_max, "req/s"),
        (LAT_TOP, LAT_H, f.lat_max, "ms"),
    ] {
        let ticks = if h > 100.0 { 4 } else { 2 };
        for k in 0..=ticks {
            let v = max * f64::from(k) / f64::from(ticks);
            let y = top + h - h * f64::from(k) / f64::from(ticks);
            let _ = write!(
                s,
                r#"<line class="grid" x1="{LEFT}" x2="{right}" y1="{y:.1}" y2="{y:.1}"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                LEFT - 6.0,
                y + 3.5,
                trim_num(v)
            );
        }
        let _ = write!(
            s,
            r#"<text class="unit" x="{:.1}" y="{:.1}">{unit}</text>"#,
            4.0,
            top - 8.0
        );
    }
    let span = f.timeline.end_ms() - f.timeline.start_ms;
    let step = tick_step(span);
    let mut t = 0;
    while t <= span {
        let x = f.x(f.timeline.start_ms + t);
        let _ = write!(
            s,
            r#"<line class="grid" x1="{x:.1}" x2="{x:.1}" y1="{RATE_TOP}" y2="{:.1}"/><text class="tick" x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LAT_TOP + LAT_H,
            LAT_TOP + LAT_H + 16.0,
            elapsed(t)
        );
        t += step;
    }
    let _ = write!(
        s,
        r#"<text class="unit" x="{:.1}" y="{:.1}">latency (mean, max)</text>"#,
        LEFT + 4.0,
        LAT_TOP - 6.0
    );
}

/// A tick value without trailing zeros: `50`, `12.5`, `6.25`.
fn trim_num(v: f64) -> String {
    let text = format!("{v:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Holds as shaded bands across both panels, each labelled with its trigger when there is
/// room for the word.
fn holds(s: &mut String, f: &Frame, series: &Series) {
    let end = f.timeline.end_ms();
    for h in &series.holds {
        let x1 = f.x(h.start_ms);
        let x2 = f.x(h.end_ms.min(end)).max(x1 + 1.0);
        let trigger = esc(&h.trigger);
        let _ = write!(
            s,
            r#"<rect class="hold" data-trigger="{trigger}" x="{x1:.1}" y="{RATE_TOP}" width="{:.1}" height="{:.1}"><title>hold for {} at +{}: {trigger}</title></rect>"#,
            x2 - x1,
            LAT_TOP + LAT_H - RATE_TOP,
            duration((h.end_ms - h.start_ms) as f64),
            elapsed(h.start_ms - f.timeline.start_ms),
        );
        // Across the band when it is wide enough, else along it when the text fits.
        if x2 - x1 >= 7.0 * h.trigger.chars().count() as f64 {
            let _ = write!(
                s,
                r#"<text class="hold-label" x="{:.1}" y="{:.1}">{trigger}</text>"#,
                x1 + 3.0,
                RATE_TOP + 11.0
            );
        } else if x2 - x1 >= 11.0 {
            let (x, y) = (x1 + 10.0, RATE_TOP + 4.0);
            let _ = write!(
                s,
                r#"<text class="hold-label" x="{x:.1}" y="{y:.1}" transform="rotate(90 {x:.1} {y:.1})">{trigger}</text>"#,
            );
        }
    }
}

/// A step line through the buckets' values (carried forward), from `start` when known.
fn steps(
    s: &mut String,
    f: &Frame,
    series: &Series,
    value: impl Fn(&super::read::Bucket) -> Option<f64>,
    start: Option<f64>,
    class: &str,
    label: &str,
) {
    let mut d = String::new();
    let mut current = start.filter(|v| v.is_finite());
    if let Some(v) = current {
        let _ = write!(d, "M{LEFT:.1} {:.1}", f.y_rate(v));
    }
    for (i, b) in series.buckets.iter().enumerate() {
        let Some(v) = value(b).filter(|v| v.is_finite()) else {
            continue;
        };
        let x = f.bucket_x(i, 0.0);
        match current {
            Some(_) => {
                let _ = write!(d, "H{x:.1}V{:.1}", f.y_rate(v));
            }
            None => {
                let _ = write!(d, "M{x:.1} {:.1}", f.y_rate(v));
            }
        }
        current = Some(v);
    }
    if current.is_none() {
        return;
    }
    let _ = write!(
        d,
        "H{:.1}",
        f.bucket_x(series.buckets.len().saturating_sub(1), 1.0)
    );
    let _ = write!(
        s,
        r#"<path class="{class}" d="{d}"><title>{label}</title></path>"#
    );
}

/// A polyline through points, broken where a point is missing.
fn line(s: &mut String, class: &str, points: impl Iterator<Item = Option<(f64, f64)>>) {
    let mut d = String::new();
    let mut pen = false;
    for p in points {
        match p {
            Some((x, y)) => {
                let _ = write!(d, "{}{x:.1} {y:.1}", if pen { "L" } else { "M" });
                pen = true;
            }
            None => pen = false,
        }
    }
    if !d.is_empty() {
        let _ = write!(s, r#"<path class="{class}" d="{d}"/>"#);
    }
}

/// Refusals (429, 503), retries and failures without a response, as marks along the foot
/// of the rate panel.
fn marks(s: &mut String, f: &Frame, series: &Series) {
    let foot = RATE_TOP + RATE_H;
    // Time since the start of the record at the start of bucket `i`.
    let at = |i: usize| i as i64 * f.timeline.bucket_ms;
    for (i, b) in series.buckets.iter().enumerate() {
        let x = f.bucket_x(i, 0.5);
        let refused = b.refused_429 + b.refused_503;
        if refused > 0 {
            let _ = write!(
                s,
                r#"<path class="refusal" d="M{:.1} {:.1}l4 -8l4 8z"><title>+{}: {refused} refused (429: {}, 503: {})</title></path>"#,
                x - 4.0,
                foot - 1.0,
                elapsed(at(i)),
                b.refused_429,
                b.refused_503
            );
        }
        if b.retries > 0 {
            let _ = write!(
                s,
                r#"<circle class="retry" cx="{x:.1}" cy="{:.1}" r="3"><title>+{}: {} retries sent</title></circle>"#,
                foot - 14.0,
                elapsed(at(i)),
                b.retries
            );
        }
        if b.failed > 0 {
            let _ = write!(
                s,
                r#"<rect class="failure" x="{:.1}" y="{:.1}" width="6" height="6"><title>+{}: {} without a response (timeout, connection)</title></rect>"#,
                x - 3.0,
                foot - 26.0,
                elapsed(at(i)),
                b.failed
            );
        }
    }
}

/// The latency strip: mean per bucket, and the slowest answer.
fn latency(s: &mut String, f: &Frame, series: &Series) {
    let point = |i: usize, v: Option<f64>| v.map(|v| (f.bucket_x(i, 0.5), f.y_lat(v)));
    line(
        s,
        "latency-max",
        series
            .buckets
            .iter()
            .enumerate()
            .map(|(i, b)| point(i, (b.latency_n > 0).then_some(b.latency_max_ms))),
    );
    line(
        s,
        "latency",
        series.buckets.iter().enumerate().map(|(i, b)| {
            point(
                i,
                (b.latency_n > 0).then(|| b.latency_sum_ms / b.latency_n as f64),
            )
        }),
    );
}

/// Where later runs of a resumed job began, and where the host was skipped.
fn runs_and_skip(s: &mut String, f: &Frame, series: &Series, runs: &[i64]) {
    for (n, &at) in runs.iter().enumerate().skip(1) {
        let x = f.x(at);
        let _ = write!(
            s,
            r#"<line class="run" x1="{x:.1}" x2="{x:.1}" y1="{RATE_TOP}" y2="{:.1}"><title>run {} started at +{}</title></line>"#,
            LAT_TOP + LAT_H,
            n + 1,
            elapsed(at - f.timeline.start_ms)
        );
    }
    if let Some((at, trigger, reason)) = &series.skip {
        let x = f.x(*at);
        let _ = write!(
            s,
            r#"<line class="skip" x1="{x:.1}" x2="{x:.1}" y1="{RATE_TOP}" y2="{:.1}"><title>skipped for the run ({}): {}</title></line><text class="skip-label" x="{:.1}" y="{:.1}">skipped</text>"#,
            LAT_TOP + LAT_H,
            esc(trigger),
            esc(reason),
            x + 3.0,
            RATE_TOP + RATE_H - 34.0
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_end_on_round_numbers_and_times_read_short() {
        assert_eq!(nice_ceil(0.0), 1.0);
        assert_eq!(nice_ceil(43.0), 50.0);
        assert_eq!(nice_ceil(101.0), 200.0);
        assert_eq!(nice_ceil(0.23), 0.25);
        assert_eq!(elapsed(45_000), "45s");
        assert_eq!(elapsed(200_000), "3m20s");
        assert_eq!(elapsed(7_500_000), "2h05m");
        assert_eq!(tick_step(60_000), 10_000);
        assert_eq!(trim_num(6.25), "6.25");
        assert_eq!(trim_num(50.0), "50");
        assert_eq!(trim_num(12.5), "12.5");
    }
}
