//! The politeness matrix: one crawl per cell (a limiter kind × an allowed rate × Retry-After
//! present or absent, plus RateLimit-header gateways), each against its own server, with
//! the crawler's DEFAULT settings: only the start URL and an output feed. Used by
//! `benches/politeness_matrix.rs` (minutes per cell, real time: a benchmark, not a CI test;
//! CI judges the machine on virtual time, `crawler_sched::politeness::worlds`). The including
//! crate must declare `mod books` (the books example's spider) at its root.

use std::time::Duration;

use crawler::prelude::*;
use crawler_lab::{Dialect, Lab, LimitReqDelay, RetryAfter, Scenario};

#[allow(unused_imports)]
use crate::real::{self, Content, HaproxyLimit, NginxLimit, RealServer};

/// Books in each cell's site: 10 minutes at 5 r/s is 3,000 pages; the site has 11,000.
pub(crate) const BOOKS: usize = 10_000;
/// Period of the HAProxy counter and the fixed window, seconds.
pub(crate) const PERIOD: u64 = 10;
/// The span over which the aggregate rate is checked against the limit, seconds: long
/// enough that a burst's credit and one window's quota are a small part of it.
pub(crate) const PEAK_WINDOW_SECS: u64 = 60;
/// Requests already in flight when a wait is announced are not violations for this long
/// (the lab's default grace).
pub(crate) const GRACE_MS: u64 = 100;

/// What limits a cell's server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Kind {
    /// nginx `limit_req` with this burst, `nodelay`.
    Nginx(u32),
    /// HAProxy `http_req_rate(10s)` with a deny above rate × 10 (refusals count).
    Haproxy,
    /// A fixed window of rate × 10 requests per 10 s (refusals do not count).
    Window,
    /// The same quota as the window, announced in RateLimit headers of this dialect.
    Gateway(Dialect),
}

/// One cell of the matrix.
#[derive(Clone, Debug)]
pub(crate) struct Cell {
    /// Short name: filters match substrings of it.
    pub name: String,
    /// The limiter.
    pub kind: Kind,
    /// Requests per second the server allows.
    pub rate: u32,
    /// `Retry-After: N` on refusals, or none (gateways announce through their headers).
    pub retry_after: Option<u64>,
}

impl Cell {
    /// A cell named from its parameters.
    pub(crate) fn new(kind: Kind, rate: u32, retry_after: Option<u64>) -> Self {
        let k = match kind {
            Kind::Nginx(b) => format!("nginx-b{b}"),
            Kind::Haproxy => "haproxy".into(),
            Kind::Window => "window".into(),
            Kind::Gateway(Dialect::Ietf) => "gateway-ietf".into(),
            Kind::Gateway(d) => format!("gateway-{d:?}").to_lowercase(),
        };
        let ra = match (kind, retry_after) {
            (Kind::Gateway(_), _) => String::new(),
            (_, Some(s)) => format!("-ra{s}"),
            (_, None) => "-nora".into(),
        };
        Self {
            name: format!("{k}-{rate}rps{ra}"),
            kind,
            rate,
            retry_after,
        }
    }

    /// The most requests the server accepts in any [`PEAK_WINDOW_SECS`], as requests/s:
    /// the rate plus a token bucket's burst; a fixed window (and a gateway's) can accept a
    /// whole extra quota when the span straddles its boundaries; HAProxy's sliding counter
    /// holds any span to its rate. A fleet sending more than this in some span sent more
    /// than the limit allows, whatever the server answered.
    pub(crate) fn peak_limit(&self) -> f64 {
        let rate = f64::from(self.rate);
        let span = PEAK_WINDOW_SECS as f64;
        let extra = match self.kind {
            Kind::Nginx(b) => f64::from(b),
            Kind::Haproxy => 0.0,
            Kind::Window | Kind::Gateway(_) => rate * PERIOD as f64,
        };
        rate + extra / span
    }

    /// Whether this cell passes on the zero-refusal, 97% goals of a header gateway.
    pub(crate) fn is_gateway(&self) -> bool {
        matches!(self.kind, Kind::Gateway(_))
    }

    /// The lab scenario of the cell.
    pub(crate) fn scenario(&self) -> Scenario {
        let rate = f64::from(self.rate);
        let quota = self.rate * PERIOD as u32;
        let s = match self.kind {
            Kind::Nginx(b) => Scenario::nginx_limit_req(rate, b, LimitReqDelay::NoDelay),
            Kind::Haproxy => Scenario::haproxy_req_rate(quota, Duration::from_secs(PERIOD)),
            Kind::Window => Scenario::quota(quota, Duration::from_secs(PERIOD)),
            Kind::Gateway(d) => {
                return Scenario::quota(quota, Duration::from_secs(PERIOD))
                    .ratelimit_headers(d)
                    .named(self.name.clone());
            }
        };
        s.retry_after(
            self.retry_after
                .map_or(RetryAfter::Absent, RetryAfter::Seconds),
        )
        .named(self.name.clone())
    }
}

/// The full matrix: nginx burst 0, 5, 20 nodelay, HAProxy, fixed window × 1, 3, 5 r/s ×
/// Retry-After 30 s or absent; IETF and X-RateLimit gateways at 1, 3, 5 r/s.
pub(crate) fn full_matrix() -> Vec<Cell> {
    let mut cells = Vec::new();
    for kind in [
        Kind::Nginx(0),
        Kind::Nginx(5),
        Kind::Nginx(20),
        Kind::Haproxy,
        Kind::Window,
    ] {
        for rate in [1, 3, 5] {
            for ra in [Some(30), None] {
                cells.push(Cell::new(kind, rate, ra));
            }
        }
    }
    for d in [Dialect::Ietf, Dialect::XUnix] {
        for rate in [1, 3, 5] {
            cells.push(Cell::new(Kind::Gateway(d), rate, None));
        }
    }
    cells
}

/// One request as a server saw it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seen {
    /// Arrival, ms on the server's clock.
    pub at_ms: u64,
    /// Status answered.
    pub status: u16,
    /// From when a wait announced by this response counts (reply + grace), and when it ends.
    pub wait: Option<(u64, u64)>,
}

/// What one cell's crawl did, from the server's side.
#[derive(Clone, Debug, Default)]
pub(crate) struct Outcome {
    /// The cell's name (with " (real nginx)" or " (real haproxy)" against a real server).
    pub name: String,
    /// Allowed rate, r/s.
    pub allowed: f64,
    /// Whether the zero-refusal, 97% goals apply.
    pub gateway: bool,
    /// Requests the server received.
    pub requests: u64,
    /// Refusals (429 or 503).
    pub refusals: u64,
    /// Requests answered with a page (not refused).
    pub pages: u64,
    /// Requests inside a wait the server had announced.
    pub violations: u64,
    /// Requests/s over the last half of the crawl.
    pub steady: f64,
    /// Items the crawl scraped.
    pub items: u64,
    /// Seconds the crawl ran.
    pub secs: f64,
    /// Why the cell could not run, if it could not.
    pub error: Option<String>,
    /// Workers crawling the cell: 1 for a single crawler, N for a Redis fleet.
    pub workers: usize,
    /// Pages each worker fetched (its own count), to show every worker took part.
    pub worker_pages: Vec<u64>,
    /// The most requests (refused or not) the server received in any
    /// [`PEAK_WINDOW_SECS`], as requests/s.
    pub peak: f64,
    /// The most the server accepts in such a span, as requests/s ([`Cell::peak_limit`]).
    pub peak_limit: f64,
}

impl Outcome {
    /// Refusals per 1,000 pages.
    pub(crate) fn refusals_per_1000(&self) -> f64 {
        self.refusals as f64 * 1000.0 / self.pages.max(1) as f64
    }

    /// Steady rate as a share of the allowed rate, in percent.
    pub(crate) fn steady_pct(&self) -> f64 {
        100.0 * self.steady / self.allowed
    }

    /// The goals this cell misses (empty when it passes): zero violations; at most 3
    /// refusals per 1,000 pages and a steady rate of at least 90% of the allowed rate; for
    /// header gateways zero refusals and at least 97%.
    pub(crate) fn misses(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(e) = &self.error {
            out.push(format!("did not run: {e}"));
            return out;
        }
        if self.violations > 0 {
            out.push(format!("{} violations", self.violations));
        }
        out.extend(self.rate_misses());
        if self.workers > 1 && self.peak > self.peak_limit {
            out.push(format!(
                "fleet sent {:.2} r/s over {PEAK_WINDOW_SECS} s (limit {:.2})",
                self.peak, self.peak_limit
            ));
        }
        out
    }

    /// The refusal and rate goals this cell misses.
    pub(crate) fn rate_misses(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.error.is_some() {
            return out;
        }
        let (max_refusals, min_pct) = if self.gateway {
            (0.0, 97.0)
        } else {
            (3.0, 90.0)
        };
        if self.refusals_per_1000() > max_refusals {
            out.push(format!(
                "{:.1} refusals per 1,000 pages (goal <= {max_refusals})",
                self.refusals_per_1000()
            ));
        }
        if self.steady_pct() < min_pct {
            out.push(format!(
                "steady {:.0}% of the allowed rate (goal >= {min_pct}%)",
                self.steady_pct()
            ));
        }
        out
    }
}

/// Derives an outcome from what the server saw during a crawl of `secs` seconds that
/// started at `t0_ms` on the server's clock.
pub(crate) fn judge(cell: &Cell, seen: &[Seen], t0_ms: u64, secs: f64) -> Outcome {
    let refused = |s: u16| s == 429 || s == 503;
    let requests = seen.len() as u64;
    let refusals = seen.iter().filter(|s| refused(s.status)).count() as u64;
    // Violations: arrivals after some wait started counting and before the latest end of
    // the waits started so far (the lab recorder's rule).
    let mut waits: Vec<(u64, u64)> = seen.iter().filter_map(|s| s.wait).collect();
    waits.sort_unstable();
    let mut arrivals: Vec<u64> = seen.iter().map(|s| s.at_ms).collect();
    arrivals.sort_unstable();
    let (mut next, mut open_until, mut violations) = (0, 0, 0);
    for &at in &arrivals {
        while next < waits.len() && waits[next].0 <= at {
            open_until = open_until.max(waits[next].1);
            next += 1;
        }
        if at < open_until {
            violations += 1;
        }
    }
    let half_ms = (secs * 500.0) as u64;
    let from = t0_ms + half_ms;
    let to = t0_ms + 2 * half_ms;
    let late = arrivals.iter().filter(|&&a| a >= from && a < to).count();
    // The busiest span: for each arrival, the arrivals within the span that starts there.
    let span_ms = PEAK_WINDOW_SECS * 1000;
    let (mut end, mut busiest) = (0, 0);
    for (i, &at) in arrivals.iter().enumerate() {
        while end < arrivals.len() && arrivals[end] < at + span_ms {
            end += 1;
        }
        busiest = busiest.max(end - i);
    }
    Outcome {
        name: cell.name.clone(),
        allowed: f64::from(cell.rate),
        gateway: cell.is_gateway(),
        requests,
        refusals,
        pages: requests - refusals,
        violations,
        steady: late as f64 / (half_ms.max(1) as f64 / 1000.0),
        secs,
        workers: 1,
        peak: busiest as f64 / PEAK_WINDOW_SECS as f64,
        peak_limit: cell.peak_limit(),
        ..Outcome::default()
    }
}

/// A fleet of workers sharing one crawl through Redis: `workers` engines with the same
/// `redis_url` and `job_name` (one job per cell, so cells sharing one redis-server never see
/// each other's frontier or host budgets).
#[derive(Clone, Debug)]
pub(crate) struct Fleet {
    /// `redis://127.0.0.1:PORT/`.
    pub redis_url: String,
    /// Workers per cell.
    pub workers: usize,
}

/// What a crawl (one crawler, or every worker of a fleet) did, from its own side.
struct Crawled {
    items: u64,
    secs: f64,
    /// Pages each worker fetched (one entry for a single crawler).
    fetched: Vec<u64>,
}

/// Crawls `url` with the default settings for `secs`, then stops the crawl (as Ctrl-C
/// does). With a fleet, its workers run as engines in this process, each with its own
/// Redis connection, lease token and cached host state (shared state goes through Redis
/// only, as between processes); `job` names the fleet's crawl in Redis.
async fn crawl_for(
    url: String,
    secs: f64,
    fleet: Option<(&Fleet, &str)>,
) -> Result<Crawled, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let workers = fleet.map_or(1, |(f, _)| f.workers.max(1));
    let mut runs = Vec::new();
    let mut stops = Vec::new();
    let ended = std::sync::Arc::new(tokio::sync::Notify::new());
    let started = std::time::Instant::now();
    for w in 0..workers {
        let mut crawl = Crawl::new(crate::books::Books { start: url.clone() })
            .progress(false)
            .feed(dir.path().join(format!("items-{w}.jsonl")))
            .map_err(|e| e.to_string())?;
        if let Some((f, job)) = fleet {
            crawl = crawl
                .set("redis_url", f.redis_url.clone())
                .set("job_name", job);
        }
        let engine = crawl.build().map_err(|e| e.to_string())?;
        stops.push(engine.shutdown_handle());
        let ended = ended.clone();
        runs.push(tokio::spawn(async move {
            let stats = engine.run().await;
            ended.notify_one();
            stats
        }));
    }
    // A worker that ends before the deadline (none should: the site outlasts it; one that
    // fails does) ends the wait for all, so an error shows at once.
    tokio::select! {
        _ = ended.notified() => {}
        _ = tokio::time::sleep(Duration::from_secs_f64(secs)) => {}
    }
    for stop in &stops {
        stop.request();
    }
    let mut crawled = Crawled {
        items: 0,
        secs: started.elapsed().as_secs_f64().min(secs),
        fetched: Vec::new(),
    };
    let mut errors = Vec::new();
    for (run, stop) in runs.iter_mut().zip(&stops) {
        // A second request stops at once if the first has not within a minute (a held
        // host may sleep; it must not keep the matrix waiting).
        let done = match tokio::time::timeout(Duration::from_secs(60), &mut *run).await {
            Ok(done) => done,
            Err(_) => {
                stop.request();
                match tokio::time::timeout(Duration::from_secs(30), &mut *run).await {
                    Ok(done) => done,
                    Err(_) => {
                        run.abort();
                        errors.push("a worker did not stop within 90 s".to_owned());
                        continue;
                    }
                }
            }
        };
        match done {
            Ok(Ok(stats)) => {
                crawled.items += stats.items_scraped;
                crawled.fetched.push(stats.fetched);
            }
            Ok(Err(e)) => errors.push(e.to_string()),
            Err(e) => errors.push(format!("crawl panicked: {e}")),
        }
    }
    if errors.is_empty() {
        Ok(crawled)
    } else {
        Err(errors.join("; "))
    }
}

/// Runs one cell against the lab for `secs` seconds.
pub(crate) async fn run_lab(cell: Cell, secs: f64) -> Outcome {
    run_lab_fleet(cell, secs, None).await
}

/// Runs one cell against the lab for `secs` seconds, with one crawler or, given a fleet,
/// with its workers sharing one crawl (the job named after the cell). The lab sees every
/// worker as one client (all connect from 127.0.0.1), so its limiter, its announced waits
/// and its record are the fleet's.
pub(crate) async fn run_lab_fleet(cell: Cell, secs: f64, fleet: Option<Fleet>) -> Outcome {
    let failed = |e: String| Outcome {
        name: cell.name.clone(),
        allowed: f64::from(cell.rate),
        gateway: cell.is_gateway(),
        error: Some(e),
        workers: fleet.as_ref().map_or(1, |f| f.workers.max(1)),
        ..Outcome::default()
    };
    let lab = match Lab::builder()
        .books(BOOKS)
        .scenario(cell.scenario())
        .start()
        .await
    {
        Ok(lab) => lab,
        Err(e) => return failed(e.to_string()),
    };
    let job = format!("matrix-{}", cell.name);
    let result = crawl_for(lab.url(), secs, fleet.as_ref().map(|f| (f, job.as_str()))).await;
    let requests = lab.recorder().requests();
    lab.shutdown().await;
    // With MATRIX_RECORD_DIR set, the lab's record of the cell as CSV (arrival and reply ms
    // on the lab's clock, status), to look at the spacing behind refusals.
    if let Some(dir) = std::env::var_os("MATRIX_RECORD_DIR") {
        let suffix = fleet
            .as_ref()
            .map_or(String::new(), |f| format!("-fleet{}", f.workers));
        let mut csv = String::from("at_ms,replied_ms,status\n");
        for r in &requests {
            csv.push_str(&format!(
                "{},{},{}\n",
                r.at.as_millis(),
                r.replied_at.as_millis(),
                r.status
            ));
        }
        let path = std::path::Path::new(&dir).join(format!("{}{suffix}.csv", cell.name));
        // Made here rather than asked for: a ten-minute run that finds no directory at the
        // end has nothing to show for it.
        let written = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, csv));
        if let Err(e) = written {
            eprintln!("could not write {}: {e}", path.display());
        }
    }
    let crawled = match result {
        Ok(r) => r,
        Err(e) => return failed(e),
    };
    // The lab's clock starts with the lab; the crawl starts with its first request.
    let t0_ms = requests.first().map_or(0, |r| r.at.as_millis() as u64);
    let seen: Vec<Seen> = requests
        .iter()
        .map(|r| Seen {
            at_ms: r.at.as_millis() as u64,
            status: r.status,
            wait: r.wait_until.map(|u| {
                (
                    r.replied_at.as_millis() as u64 + GRACE_MS,
                    u.as_millis() as u64,
                )
            }),
        })
        .collect();
    let mut o = judge(&cell, &seen, t0_ms, crawled.secs);
    o.items = crawled.items;
    o.workers = fleet.map_or(1, |f| f.workers.max(1));
    o.worker_pages = crawled.fetched;
    o
}

/// Runs an nginx or HAProxy cell against the real server, proxying to an open lab with the
/// book site, with one crawler or, given a fleet, with its workers sharing one crawl (as in
/// [`run_lab_fleet`]); `None` for kinds with no real counterpart here, or when the server is
/// not installed.
pub(crate) async fn run_real(cell: Cell, secs: f64, fleet: Option<Fleet>) -> Option<Outcome> {
    let kind = match cell.kind {
        Kind::Nginx(_) => "nginx",
        Kind::Haproxy => "haproxy",
        _ => return None,
    };
    let name = format!("{} (real {kind})", cell.name);
    let workers = fleet.as_ref().map_or(1, |f| f.workers.max(1));
    let failed = |e: String| Outcome {
        name: name.clone(),
        allowed: f64::from(cell.rate),
        error: Some(e),
        workers,
        ..Outcome::default()
    };
    // Skipped (the caller says so once) rather than failed: CI does not install them.
    real::which(kind)?;
    let backend = match Lab::builder().books(BOOKS).start().await {
        Ok(lab) => lab,
        Err(e) => return Some(failed(e.to_string())),
    };
    let server = match cell.kind {
        Kind::Nginx(burst) => RealServer::nginx(
            NginxLimit {
                rate: cell.rate,
                burst,
                nodelay: true,
                retry_after: cell.retry_after,
            },
            &Content::Proxy(backend.addr()),
        ),
        _ => RealServer::haproxy(
            HaproxyLimit {
                max: cell.rate * PERIOD as u32,
                period_secs: PERIOD,
                retry_after: cell.retry_after,
            },
            backend.addr(),
        ),
    };
    let server = match server {
        Ok(s) => s,
        Err(e) => {
            backend.shutdown().await;
            return Some(failed(e));
        }
    };
    let job = format!("matrix-real-{}", cell.name);
    let result = crawl_for(
        format!("{}/", server.url()),
        secs,
        fleet.as_ref().map(|f| (f, job.as_str())),
    )
    .await;
    // Let the last log lines reach the file.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = server.log();
    drop(server);
    backend.shutdown().await;
    let crawled = match result {
        Ok(r) => r,
        Err(e) => return Some(failed(e)),
    };
    let wait_ms = cell.retry_after.map(|s| s * 1000);
    let seen: Vec<Seen> = log
        .iter()
        .map(|l| Seen {
            at_ms: l.at_ms,
            status: l.status,
            wait: wait_ms
                .filter(|_| l.status == 429)
                .map(|w| (l.at_ms + GRACE_MS, l.at_ms + w)),
        })
        .collect();
    let t0_ms = seen.first().map_or(0, |s| s.at_ms);
    let mut o = judge(&cell, &seen, t0_ms, crawled.secs);
    o.name = name;
    o.items = crawled.items;
    o.workers = workers;
    o.worker_pages = crawled.fetched;
    Some(o)
}

/// Prints the outcomes as a markdown table, with pass/fail against the goals.
pub(crate) fn print_table(outcomes: &[Outcome]) {
    println!(
        "| cell | allowed r/s | requests | refusals | refusals / 1,000 pages | violations | steady r/s | steady % | peak {PEAK_WINDOW_SECS} s r/s (limit) | items | verdict |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for o in outcomes {
        let misses = o.misses();
        let verdict = if misses.is_empty() {
            "pass".to_owned()
        } else {
            format!("FAIL: {}", misses.join("; "))
        };
        println!(
            "| {} | {:.0} | {} | {} | {:.1} | {} | {:.2} | {:.1}% | {:.2} ({:.2}) | {} | {} |",
            o.name,
            o.allowed,
            o.requests,
            o.refusals,
            o.refusals_per_1000(),
            o.violations,
            o.steady,
            o.steady_pct(),
            o.peak,
            o.peak_limit,
            o.items,
            verdict
        );
    }
}

/// "pass" or "FAIL".
fn verdict(ok: bool) -> &'static str {
    if ok { "pass" } else { "FAIL" }
}

/// How many outcomes pass each goal: violations, refusals, steady rate, aggregate rate,
/// and all of them.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Passing {
    /// Zero requests inside an announced wait.
    pub violations: usize,
    /// Refusals per 1,000 pages at most 3 (0 for gateways).
    pub refusals: usize,
    /// Steady rate at least 90% of the allowed rate (97% for gateways).
    pub steady: usize,
    /// Never more sent in any span than the server accepts in it.
    pub aggregate: usize,
    /// Every goal.
    pub all: usize,
}

impl Outcome {
    /// Each goal on its own: (violations, refusals, steady, aggregate).
    pub(crate) fn goals(&self) -> (bool, bool, bool, bool) {
        if self.error.is_some() {
            return (false, false, false, false);
        }
        let (max_refusals, min_pct) = if self.gateway {
            (0.0, 97.0)
        } else {
            (3.0, 90.0)
        };
        (
            self.violations == 0,
            self.refusals_per_1000() <= max_refusals,
            self.steady_pct() >= min_pct,
            self.peak <= self.peak_limit,
        )
    }
}

/// Counts the outcomes passing each goal.
pub(crate) fn passing(outcomes: &[Outcome]) -> Passing {
    let mut p = Passing::default();
    for o in outcomes {
        let (v, r, s, a) = o.goals();
        p.violations += usize::from(v);
        p.refusals += usize::from(r);
        p.steady += usize::from(s);
        p.aggregate += usize::from(a);
        p.all += usize::from(v && r && s && a);
    }
    p
}

/// Prints fleet outcomes as a markdown table, one pass/fail column per goal: the figures are
/// the lab's, so fleet-wide; "pages per worker" is each worker's own count.
pub(crate) fn print_fleet_table(outcomes: &[Outcome]) {
    println!(
        "| cell | workers | pages per worker | requests | refusals | refusals / 1,000 pages | violations | steady r/s | steady % | peak {PEAK_WINDOW_SECS} s r/s (limit) | violations goal | refusals goal | steady goal | aggregate goal |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|");
    for o in outcomes {
        if let Some(e) = &o.error {
            println!(
                "| {} | {} | | | | | | | | | did not run: {e} | | | |",
                o.name, o.workers
            );
            continue;
        }
        let (v, r, s, a) = o.goals();
        let per_worker: Vec<String> = o.worker_pages.iter().map(u64::to_string).collect();
        println!(
            "| {} | {} | {} | {} | {} | {:.1} | {} | {:.2} | {:.1}% | {:.2} ({:.2}) | {} | {} | {} | {} |",
            o.name,
            o.workers,
            per_worker.join(" / "),
            o.requests,
            o.refusals,
            o.refusals_per_1000(),
            o.violations,
            o.steady,
            o.steady_pct(),
            o.peak,
            o.peak_limit,
            verdict(v),
            verdict(r),
            verdict(s),
            verdict(a),
        );
    }
}
