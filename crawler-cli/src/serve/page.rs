//! The dashboard: one server-rendered page (the jobs as they are when it is asked for) with
//! a little inline script that keeps it current from the JSON API: the jobs with their
//! state, items, errors and elapsed time; for the job chosen, each host's requests a second
//! against the pace allowed, its holds shaded with their trigger and its refusals marked
//! (the report's charts, live), and the log's tail. No build step and nothing fetched from
//! elsewhere; everything taken from a job is escaped (text nodes, never markup).

use std::fmt::Write as _;

use super::jobs::Service;

/// Text for HTML (element content and quoted attributes).
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

pub(super) fn html(svc: &Service) -> String {
    let mut rows = String::new();
    for job in svc.jobs().iter().rev() {
        let _ = write!(
            rows,
            "<tr data-id=\"{id}\"><td><a href=\"#job={id}\">{id}</a></td><td>{spider}</td>\
             <td class=\"state {state}\">{state}</td><td></td><td></td><td>{elapsed}</td><td></td></tr>",
            id = esc(&job.id),
            spider = esc(&job.spider),
            state = job.state.as_str(),
            elapsed = job
                .elapsed_s()
                .map(|s| format!("{s:.0} s"))
                .unwrap_or_default(),
        );
    }
    let options: String = svc
        .cfg
        .spiders
        .iter()
        .map(|s| format!("<option>{}</option>", esc(s)))
        .collect();
    PAGE.replace("{{project}}", &esc(&svc.cfg.project))
        .replace("{{node}}", &esc(&svc.cfg.node_name))
        .replace("{{max_jobs}}", &svc.cfg.max_jobs.to_string())
        .replace("{{spiders}}", &options)
        .replace("{{rows}}", &rows)
}

const PAGE: &str = r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>crawler serve: {{project}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#234;color:#fff;padding:8px 16px}header b{font-size:16px}
main{display:flex;gap:16px;padding:12px 16px;flex-wrap:wrap}
section{background:#fff;border:1px solid #ddd;border-radius:4px;padding:8px 12px}
#jobs-box{flex:1 1 520px}#detail{flex:2 1 640px}
table{border-collapse:collapse;width:100%}td,th{padding:3px 6px;border-bottom:1px solid #eee;text-align:left}
.state.running{color:#06c}.state.finished{color:#080}.state.failed{color:#c00}.state.cancelled{color:#888}.state.paused{color:#b60}
textarea{width:100%;height:3.2em;font:12px monospace}pre{background:#111;color:#ddd;padding:6px;max-height:300px;overflow:auto;font-size:11px;white-space:pre-wrap}
.host{margin:8px 0}.host h4{margin:4px 0;font-weight:600}.legend span{margin-right:12px}
svg{background:#fff;border:1px solid #eee}button{margin-right:4px}#msg{color:#c00}
</style></head><body>
<header><b>crawler serve</b> project <b>{{project}}</b> on {{node}}, at most {{max_jobs}} jobs at once</header>
<main>
<section id="jobs-box">
<h3>Schedule a job</h3>
<form id="schedule"><label>Spider <select name="spider">{{spiders}}</select></label>
<label>Priority <input name="priority" value="0" size="4"></label>
<p>Arguments (KEY=VALUE a line)<textarea name="args"></textarea>
Settings (KEY=VALUE a line)<textarea name="settings"></textarea></p>
<button type="submit" id="schedule-button">Schedule</button> <span id="msg"></span></form>
<h3>Jobs</h3>
<table><thead><tr><th>job</th><th>spider</th><th>state</th><th>items</th><th>errors</th><th>elapsed</th><th></th></tr></thead>
<tbody id="jobs">{{rows}}</tbody></table>
</section>
<section id="detail"><h3 id="detail-title">Choose a job</h3>
<div id="detail-stats"></div>
<div class="legend"><span style="color:#06c">&#9632; requests/s</span><span style="color:#c60">&#9472; pace allowed</span><span style="color:#c00">&#9679; refusals (429, 503)</span><span style="color:#e9b">&#9632; hold</span></div>
<div id="hosts"></div><h4>Log</h4><pre id="log"></pre></section>
</main>
<script>
"use strict";
const WINDOW = 120;
const $ = (id) => document.getElementById(id);
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
function svgEl(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  return e;
}
function chosen() { const m = location.hash.match(/job=([A-Za-z0-9_.-]+)/); return m ? m[1] : null; }
async function post(url, body) {
  const r = await fetch(url, {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"}, body});
  return r.json();
}
async function act(id, action) { await post("/api/jobs/" + encodeURIComponent(id) + "/" + action, ""); refresh(); }
function secs(s) { return s === null || s === undefined ? "" : (s < 120 ? s.toFixed(0) + " s" : (s / 60).toFixed(1) + " min"); }
function renderJobs(data) {
  const body = $("jobs");
  body.textContent = "";
  for (const j of data.jobs) {
    const tr = el("tr", {"data-id": j.id});
    const a = el("a", {href: "#job=" + j.id}, j.id);
    const td = el("td"); td.appendChild(a); tr.appendChild(td);
    tr.appendChild(el("td", {}, j.spider));
    tr.appendChild(el("td", {class: "state " + j.state, title: j.outcome || ""}, j.state));
    tr.appendChild(el("td", {class: "items"}, j.items));
    tr.appendChild(el("td", {class: "errors"}, j.failures));
    tr.appendChild(el("td", {}, secs(j.elapsed_s)));
    const actions = el("td");
    const add = (label, action) => { const b = el("button", {type: "button"}, label); b.onclick = () => act(j.id, action); actions.appendChild(b); };
    if (j.state === "running" || j.state === "pending") add("pause", "pause");
    if (j.state === "paused") add("resume", "resume");
    if (j.state === "failed") add("retry", "resume");
    if (!["finished", "failed", "cancelled"].includes(j.state)) add("cancel", "cancel");
    tr.appendChild(actions);
    body.appendChild(tr);
  }
}
function chart(h) {
  const W = 600, H = 140, now = Math.floor(Date.now() / 1000);
  const last = h.seconds.length ? h.seconds[h.seconds.length - 1][0] : now;
  // The last WINDOW seconds, or the whole crawl while it is younger (at least 10 s).
  const first = h.seconds.length ? h.seconds[0][0] : now;
  const end = Math.max(now, last), span = Math.max(10, Math.min(WINDOW, end - first + 1)), start = end - span;
  const pts = h.seconds.filter(s => s[0] >= start);
  // The record's rate changes, or the pace the settings start the host at.
  const paces = h.paces.length ? h.paces.filter(p => p[1] > 0) : (h.pace ? [[0, h.pace]] : []);
  let top = 1;
  for (const s of pts) top = Math.max(top, s[1]);
  for (const p of paces) top = Math.max(top, p[1]);
  top *= 1.15;
  const x = (t) => ((t - start) / span) * W, y = (v) => H - (v / top) * H;
  const svg = svgEl("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, class: "host-chart",
    "data-host": h.host, "data-points": pts.length, "data-last": last, "data-holds": h.holds});
  for (const hold of h.recent_holds) {
    const a = Math.max(start, hold.at_ms / 1000), b = Math.min(end, hold.until_ms / 1000);
    if (b <= start || a >= end) continue;
    const r = svgEl("rect", {x: x(a), y: 0, width: Math.max(1, x(b) - x(a)), height: H, fill: "#f5d0e0", class: "hold"});
    const t = svgEl("title", {}); t.textContent = "hold: " + hold.trigger; r.appendChild(t);
    svg.appendChild(r);
  }
  if (pts.length) {
    svg.appendChild(svgEl("polyline", {fill: "none", stroke: "#06c", "stroke-width": 2, class: "rate",
      points: pts.map(s => x(s[0]).toFixed(1) + "," + y(s[1]).toFixed(1)).join(" ")}));
  }
  if (paces.length) {
    const steps = [];
    let prev = null;
    for (const p of paces) {
      const t = Math.max(start, p[0] / 1000);
      if (prev !== null) steps.push(x(t).toFixed(1) + "," + y(prev).toFixed(1));
      steps.push(x(t).toFixed(1) + "," + y(p[1]).toFixed(1));
      prev = p[1];
    }
    steps.push(W + "," + y(prev).toFixed(1));
    svg.appendChild(svgEl("polyline", {fill: "none", stroke: "#c60", "stroke-dasharray": "4 3", class: "pace", points: steps.join(" ")}));
  }
  for (const s of pts) if (s[2] > 0) svg.appendChild(svgEl("circle", {cx: x(s[0]), cy: y(s[1]), r: 3, fill: "#c00", class: "refusal"}));
  const label = svgEl("text", {x: 4, y: 12, "font-size": 10, fill: "#666"}); label.textContent = top.toFixed(1) + "/s";
  svg.appendChild(label);
  return svg;
}
function renderJob(j) {
  $("detail-title").textContent = "Job " + j.id + " (" + j.spider + "): " + j.state;
  $("detail-stats").textContent = j.items + " items, " + j.failures + " errors, " + secs(j.elapsed_s) +
    (j.outcome ? ", " + j.outcome : "") + (j.runs > 1 ? ", " + j.runs + " runs" : "");
  const box = $("hosts");
  box.textContent = "";
  for (const h of (j.record ? j.record.hosts : [])) {
    const d = el("div", {class: "host"});
    const pace = h.pace ? h.pace.toFixed(2) + "/s allowed" : "pace not set";
    d.appendChild(el("h4", {}, h.host + ": " + h.sent + " sent, " + pace + ", " + h.holds + " holds, " +
      h.refusals + " refusals" + (h.skipped ? ", skipped: " + h.skipped : "")));
    d.appendChild(chart(h));
    box.appendChild(d);
  }
  const log = $("log");
  const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  log.textContent = j.log_tail || "";
  if (atEnd) log.scrollTop = log.scrollHeight;
}
async function refresh() {
  try {
    const data = await (await fetch("/api/jobs")).json();
    if (data.status === "ok") renderJobs(data);
    const id = chosen();
    if (id) {
      const r = await (await fetch("/api/jobs/" + encodeURIComponent(id))).json();
      if (r.status === "ok") renderJob(r.job);
    }
  } catch (e) { $("msg").textContent = "service unreachable: " + e; }
}
$("schedule").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = ev.target, body = new URLSearchParams();
  body.append("project", "{{project}}");
  body.append("spider", f.spider.value);
  body.append("priority", f.priority.value || "0");
  for (const line of f.args.value.split("\n")) { const t = line.trim(); if (!t) continue; const i = t.indexOf("="); body.append(i < 0 ? t : t.slice(0, i), i < 0 ? "" : t.slice(i + 1)); }
  for (const line of f.settings.value.split("\n")) { const t = line.trim(); if (t) body.append("setting", t); }
  const r = await post("/schedule.json", body.toString());
  $("msg").textContent = r.status === "ok" ? "" : r.message;
  if (r.status === "ok") location.hash = "job=" + r.jobid;
  refresh();
});
window.addEventListener("hashchange", refresh);
refresh();
setInterval(refresh, 1000);
</script></body></html>
"##;
