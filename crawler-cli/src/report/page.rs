//! The page around the charts: the summary, the legend, a section per charted host (chart,
//! figures, counts by status) and a table of the hosts not charted.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use super::esc;
use super::read::{Overview, Series, Timeline, Totals};
use super::svg::{chart, duration};

/// Rows of the table of hosts not charted, at most.
const MAX_OTHER_ROWS: usize = 500;

/// What the page is drawn from.
pub(super) struct Parts<'a> {
    pub(super) record: &'a Path,
    pub(super) overview: &'a Overview,
    /// The charted hosts, busiest first.
    pub(super) charted: &'a [&'a str],
    pub(super) series: &'a HashMap<String, Series>,
    /// The other hosts, busiest first.
    pub(super) others: &'a [&'a str],
    pub(super) timeline: Timeline,
}

const STYLE: &str = "
body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', sans-serif; color: #1f2328;
  max-width: 1000px; margin: 24px auto; padding: 0 12px; }
h1 { font-size: 24px; margin-bottom: 4px; } h2 { font-size: 18px; margin: 28px 0 6px; }
.meta, .note { color: #59636e; } .warn { color: #9a6700; }
table { border-collapse: collapse; margin: 8px 0; }
td, th { padding: 2px 10px; border-bottom: 1px solid #d1d9e0; text-align: left; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
.figures span { margin-right: 14px; white-space: nowrap; }
.legend span { margin-right: 14px; white-space: nowrap; }
.sw { display: inline-block; width: 18px; height: 10px; margin-right: 4px; vertical-align: middle; }
svg.host-chart { display: block; max-width: 100%; height: auto; font: 11px system-ui, sans-serif; }
.grid { stroke: #eaeef2; stroke-width: 1; }
.tick, .unit { fill: #59636e; }
.hold { fill: #f0b429; fill-opacity: 0.28; }
.hold-label { fill: #7d4e00; font-size: 10px; }
.achieved { fill: none; stroke: #0969da; stroke-width: 1.6; }
.pace { fill: none; stroke: #bc4c00; stroke-width: 1.4; stroke-dasharray: 6 3; }
.estimate { fill: none; stroke: #8250df; stroke-width: 1.4; stroke-dasharray: 2 3; }
.quota { fill: none; stroke: #1a7f37; stroke-width: 1.6; }
.floor { fill: none; stroke: #cf222e; stroke-width: 1; stroke-dasharray: 4 4; }
.refusal { fill: #cf222e; } .retry { fill: #1f2328; } .failure { fill: #8c959f; }
.latency { fill: none; stroke: #57606a; stroke-width: 1.4; }
.latency-max { fill: none; stroke: #afb8c1; stroke-width: 1; }
.run { stroke: #59636e; stroke-dasharray: 3 3; } .skip { stroke: #cf222e; stroke-width: 2; }
.skip-label { fill: #cf222e; }
";

/// The whole page.
pub(super) fn page(p: &Parts<'_>) -> String {
    let o = p.overview;
    let hosts = o.hosts.len() + usize::try_from(o.other_hosts).unwrap_or(0);
    let mut s = String::with_capacity(64 * 1024 + p.charted.len() * 48 * 1024);
    s.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n");
    s.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n");
    let _ = writeln!(
        s,
        "<title>Politeness report: {hosts} host{}</title>",
        plural(hosts)
    );
    let _ = writeln!(s, "<style>{STYLE}</style>\n</head>\n<body>");
    s.push_str("<h1>A picture of politeness</h1>\n");
    let _ = writeln!(
        s,
        "<p class=\"meta\">From the politeness record <code>{}</code>.</p>",
        esc(&p.record.display().to_string())
    );
    summary(&mut s, p);
    if !p.charted.is_empty() {
        legend(&mut s);
    }
    for (i, host) in p.charted.iter().enumerate() {
        host_section(&mut s, p, i, host);
    }
    others(&mut s, p);
    s.push_str("</body>\n</html>\n");
    s
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn utc(ms: i64) -> String {
    let Ok(ms) = u64::try_from(ms) else {
        return "?".to_owned();
    };
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// Responses by status class: `2xx 120 · 4xx 3`.
fn classes(t: &Totals) -> String {
    let mut by = [0u64; 6];
    for (code, n) in &t.status {
        if let Some(slot) = by.get_mut(usize::from(code / 100)) {
            *slot += n;
        }
    }
    let parts: Vec<String> = by
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(c, n)| format!("{c}xx: {n}"))
        .collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

/// `HTTP/1.1: 3, HTTP/2: 120`, escaped.
fn counts(by: &std::collections::BTreeMap<String, u64>) -> String {
    by.iter()
        .map(|(k, n)| format!("{}: {n}", esc(k)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `Retry-After: 2 (6.1 s), 429: 1 (1.0 s)`.
fn by_trigger(t: &Totals) -> String {
    t.holds_by
        .iter()
        .map(|(trigger, (n, ms))| {
            format!(
                "<span class=\"trigger\">{}: {n} ({})</span>",
                esc(trigger),
                duration(*ms)
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn summary(s: &mut String, p: &Parts<'_>) {
    let o = p.overview;
    let t = o.total();
    let hosts = o.hosts.len() + usize::try_from(o.other_hosts).unwrap_or(0);
    s.push_str("<section id=\"summary\">\n<h2>Summary</h2>\n<table class=\"summary\">\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(s, "<tr><th>{k}</th><td>{v}</td></tr>");
    };
    match (o.start_ms, o.end_ms) {
        (Some(a), Some(b)) => row(
            "Recorded",
            format!(
                "from {} for {} ({} run{})",
                utc(a),
                duration((b - a) as f64),
                o.runs.len().max(1),
                plural(o.runs.len().max(1))
            ),
        ),
        _ => row("Recorded", "nothing yet".to_owned()),
    }
    row(
        "Hosts",
        if hosts > p.charted.len() {
            format!("{hosts} ({} busiest charted)", p.charted.len())
        } else {
            hosts.to_string()
        },
    );
    row(
        "Requests",
        format!(
            "{} (retries: {}, sub-requests of rendered pages: {})",
            t.sent, t.retries, t.subrequests
        ),
    );
    row("Responses", classes(&t));
    if !t.versions.is_empty() {
        row("HTTP versions", counts(&t.versions));
    }
    if !t.proxies.is_empty() {
        row("Through proxies", counts(&t.proxies));
    }
    row(
        "Refused (429, 503)",
        format!(
            "{} ({} without a response: timeouts, connection errors)",
            t.refusals(),
            t.failed.values().sum::<u64>()
        ),
    );
    row(
        "Holds",
        if t.holds_by.is_empty() {
            format!("{} totalling {}", t.holds, duration(t.held_ms))
        } else {
            format!(
                "{} totalling {}; by trigger: {}",
                t.holds,
                duration(t.held_ms),
                by_trigger(&t)
            )
        },
    );
    let skipped: Vec<String> = o
        .hosts
        .iter()
        .filter_map(|(h, t)| t.skipped.as_ref().map(|why| (h, why)))
        .take(20)
        .map(|(h, why)| format!("<code>{}</code>: {}", esc(h), esc(why)))
        .collect();
    if !skipped.is_empty() {
        row("Skipped", skipped.join("<br/>"));
    }
    s.push_str("</table>\n");
    if p.charted.is_empty() {
        s.push_str("<p class=\"note\">No request was recorded.</p>\n");
    }
    if o.bad_lines > 0 {
        let _ = writeln!(
            s,
            "<p class=\"warn\">{} unreadable line{} of the record skipped.</p>",
            o.bad_lines,
            plural(usize::try_from(o.bad_lines).unwrap_or(2))
        );
    }
    if o.truncated {
        s.push_str(
            "<p class=\"note\">The record ends with a partial line (the crawl was stopped \
             while writing it); it is left out.</p>\n",
        );
    }
    if o.newer_format {
        s.push_str(
            "<p class=\"warn\">Part of the record was written by a newer version; what this \
             version does not know is left out.</p>\n",
        );
    }
    s.push_str("</section>\n");
}

fn legend(s: &mut String) {
    s.push_str("<p class=\"legend\">");
    for (class, style, label) in [
        ("achieved", "background:#0969da", "requests per second"),
        ("pace", "border-top:2px dashed #bc4c00", "allowed pace"),
        ("estimate", "border-top:2px dotted #8250df", "learned limit"),
        ("quota", "background:#1a7f37", "RateLimit quota"),
        (
            "floor",
            "border-top:2px dashed #cf222e",
            "Crawl-delay ceiling",
        ),
        (
            "hold",
            "background:#f0b429;opacity:.5",
            "hold (its trigger)",
        ),
        ("refusal", "background:#cf222e", "refused (429, 503)"),
        (
            "retry",
            "background:#1f2328;border-radius:5px;width:8px",
            "retries",
        ),
        ("failure", "background:#8c959f;width:8px", "no response"),
    ] {
        let _ = write!(
            s,
            "<span class=\"key-{class}\"><span class=\"sw\" style=\"{style}\"></span>{label}</span>"
        );
    }
    s.push_str(
        "</p>\n<p class=\"note\">Time runs from the first record; hover a mark or a \
                band for details. The lower strip is the latency (mean and slowest).</p>\n",
    );
}

fn host_section(s: &mut String, p: &Parts<'_>, i: usize, host: &str) {
    let Some(t) = p.overview.hosts.get(host) else {
        return;
    };
    let _ = writeln!(
        s,
        "<section class=\"host\" id=\"host-{}\">\n<h2>{}</h2>",
        i + 1,
        esc(host)
    );
    let mean = if t.latency_n > 0 {
        duration(t.latency_sum_ms / t.latency_n as f64)
    } else {
        "-".to_owned()
    };
    let _ = write!(
        s,
        "<p class=\"figures\"><span>requests: {}</span><span>retries: {}</span>\
         <span>sub-requests: {}</span><span>refused: {}</span><span>holds: {} ({})</span>\
         <span>latency: mean {}, max {}</span>",
        t.sent,
        t.retries,
        t.subrequests,
        t.refusals(),
        t.holds,
        duration(t.held_ms),
        mean,
        duration(t.latency_max_ms)
    );
    if !t.versions.is_empty() {
        let _ = write!(s, "<span>HTTP versions: {}</span>", counts(&t.versions));
    }
    if !t.proxies.is_empty() {
        let _ = write!(s, "<span>through proxies: {}</span>", counts(&t.proxies));
    }
    if let Some(why) = &t.skipped {
        let _ = write!(s, "<span class=\"warn\">skipped: {}</span>", esc(why));
    }
    s.push_str("</p>\n");
    if !t.holds_by.is_empty() {
        let _ = writeln!(
            s,
            "<p class=\"figures\">Holds by trigger: {}</p>",
            by_trigger(t)
        );
    }
    if let Some(series) = p.series.get(host) {
        s.push_str(&chart(host, i, series, p.timeline, &p.overview.runs));
        s.push('\n');
        if series.holds_dropped > 0 {
            let _ = writeln!(
                s,
                "<p class=\"note\">{} more holds not drawn.</p>",
                series.holds_dropped
            );
        }
    }
    s.push_str("<table class=\"status\">\n<tr><th>Status</th><th class=\"n\">Count</th></tr>\n");
    for (code, n) in &t.status {
        let _ = writeln!(
            s,
            "<tr><td>{code}</td><td class=\"n\" data-status=\"{code}\">{n}</td></tr>"
        );
    }
    for (kind, n) in &t.failed {
        let _ = writeln!(
            s,
            "<tr><td>no response: {}</td><td class=\"n\">{n}</td></tr>",
            esc(kind)
        );
    }
    s.push_str("</table>\n</section>\n");
}

fn others(s: &mut String, p: &Parts<'_>) {
    let o = p.overview;
    if p.others.is_empty() && o.other_hosts == 0 {
        return;
    }
    s.push_str(
        "<section id=\"others\">\n<h2>Other hosts</h2>\n<table>\n<tr><th>Host</th>\
         <th class=\"n\">Requests</th><th class=\"n\">Retries</th>\
         <th class=\"n\">Sub-requests</th><th class=\"n\">Refused</th>\
         <th class=\"n\">Holds</th><th>Responses</th></tr>\n",
    );
    for host in p.others.iter().take(MAX_OTHER_ROWS) {
        let Some(t) = o.hosts.get(*host) else {
            continue;
        };
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}\
             </td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            esc(host),
            t.sent,
            t.retries,
            t.subrequests,
            t.refusals(),
            t.holds,
            classes(t)
        );
    }
    s.push_str("</table>\n");
    let more = p.others.len().saturating_sub(MAX_OTHER_ROWS) as u64 + o.other_hosts;
    if more > 0 {
        let _ = writeln!(
            s,
            "<p class=\"note\">And {more} more hosts (counted in the summary).</p>"
        );
    }
    s.push_str("</section>\n");
}
