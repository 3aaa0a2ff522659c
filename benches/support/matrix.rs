//! The politeness matrix: one crawl per cell (a limiter kind × an allowed rate × Retry-After
//! present or absent, plus RateLimit-header gateways), each against its own server, with
//! the crawler's DEFAULT settings: only the start URL and an output feed. Shared by
//! `benches/politeness_matrix.rs` (the full matrix, minutes per cell) and
//! `tests/politeness_matrix.rs` (a few cells, scaled). The including crate must declare
//! `mod books` (the books example's spider) at its root.

use std::time::Duration;

use crawler::lab::{Dialect, Lab, LimitReqDelay, RetryAfter, Scenario};
use crawler::prelude::*;

#[allow(unused_imports)]
use crate::real::{self, Content, HaproxyLimit, NginxLimit, RealServer};

/// Books in each cell's site: 10 minutes at 5 r/s is 3,000 pages; the site has 11,000.
pub const BOOKS: usize = 10_000;
/// Period of the HAProxy counter and the fixed window, seconds.
pub const PERIOD: u64 = 10;
/// Requests already in flight when a wait is announced are not violations for this long
/// (the lab's default grace).
pub const GRACE_MS: u64 = 100;

/// What limits a cell's server.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
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
pub struct Cell {
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
    pub fn new(kind: Kind, rate: u32, retry_after: Option<u64>) -> Self {
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

    /// Whether this cell passes on the zero-refusal, 97% goals of a header gateway.
    pub fn is_gateway(&self) -> bool {
        matches!(self.kind, Kind::Gateway(_))
    }

    /// The lab scenario of the cell.
    pub fn scenario(&self) -> Scenario {
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
pub fn full_matrix() -> Vec<Cell> {
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
pub struct Seen {
    /// Arrival, ms on the server's clock.
    pub at_ms: u64,
    /// Status answered.
    pub status: u16,
    /// From when a wait announced by this response counts (reply + grace), and when it ends.
    pub wait: Option<(u64, u64)>,
}

/// What one cell's crawl did, from the server's side.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
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
}

impl Outcome {
    /// Refusals per 1,000 pages.
    pub fn refusals_per_1000(&self) -> f64 {
        self.refusals as f64 * 1000.0 / self.pages.max(1) as f64
    }

    /// Steady rate as a share of the allowed rate, in percent.
    pub fn steady_pct(&self) -> f64 {
        100.0 * self.steady / self.allowed
    }

    /// The goals this cell misses (empty when it passes): zero violations; at most 3
    /// refusals per 1,000 pages and a steady rate of at least 90% of the allowed rate; for
    /// header gateways zero refusals and at least 97%.
    pub fn misses(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(e) = &self.error {
            out.push(format!("did not run: {e}"));
            return out;
        }
        if self.violations > 0 {
            out.push(format!("{} violations", self.violations));
        }
        out.extend(self.rate_misses());
        out
    }

    /// The refusal and rate goals this cell misses.
    pub fn rate_misses(&self) -> Vec<String> {
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
pub fn judge(cell: &Cell, seen: &[Seen], t0_ms: u64, secs: f64) -> Outcome {
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
        ..Outcome::default()
    }
}

/// Crawls `url` with the default settings for `secs`, then stops the crawl (as Ctrl-C
/// does). Returns the items scraped and the seconds it ran.
async fn crawl_for(url: String, secs: f64) -> Result<(u64, f64), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let engine = Crawl::new(crate::books::Books { start: url })
        .progress(false)
        .feed(dir.path().join("items.jsonl"))
        .map_err(|e| e.to_string())?
        .build()
        .map_err(|e| e.to_string())?;
    let stop = engine.shutdown_handle();
    let started = std::time::Instant::now();
    let run = tokio::spawn(engine.run());
    let deadline = tokio::time::sleep(Duration::from_secs_f64(secs));
    tokio::pin!(deadline);
    tokio::pin!(run);
    let stats = tokio::select! {
        done = &mut run => done,
        _ = &mut deadline => {
            stop.request();
            // A second request stops at once if the first has not within a minute (a held
            // host may sleep; it must not keep the matrix waiting).
            match tokio::time::timeout(Duration::from_secs(60), &mut run).await {
                Ok(done) => done,
                Err(_) => {
                    stop.request();
                    run.await
                }
            }
        }
    };
    let stats = stats
        .map_err(|e| format!("crawl panicked: {e}"))?
        .map_err(|e| e.to_string())?;
    Ok((
        stats.items_scraped,
        started.elapsed().as_secs_f64().min(secs),
    ))
}

/// Runs one cell against the lab for `secs` seconds.
pub async fn run_lab(cell: Cell, secs: f64) -> Outcome {
    let failed = |e: String| Outcome {
        name: cell.name.clone(),
        allowed: f64::from(cell.rate),
        gateway: cell.is_gateway(),
        error: Some(e),
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
    let result = crawl_for(lab.url(), secs).await;
    let requests = lab.recorder().requests();
    lab.shutdown().await;
    let (items, ran) = match result {
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
    let mut o = judge(&cell, &seen, t0_ms, ran);
    o.items = items;
    o
}

/// Runs an nginx or HAProxy cell against the real server, proxying to an open lab with the
/// book site; `None` for kinds with no real counterpart here, or when the server is not
/// installed.
pub async fn run_real(cell: Cell, secs: f64) -> Option<Outcome> {
    let kind = match cell.kind {
        Kind::Nginx(_) => "nginx",
        Kind::Haproxy => "haproxy",
        _ => return None,
    };
    let name = format!("{} (real {kind})", cell.name);
    let failed = |e: String| Outcome {
        name: name.clone(),
        allowed: f64::from(cell.rate),
        error: Some(e),
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
    let result = crawl_for(format!("{}/", server.url()), secs).await;
    // Let the last log lines reach the file.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = server.log();
    drop(server);
    backend.shutdown().await;
    let (items, ran) = match result {
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
    let mut o = judge(&cell, &seen, t0_ms, ran);
    o.name = name;
    o.items = items;
    Some(o)
}

/// Prints the outcomes as a markdown table, with pass/fail against the goals.
pub fn print_table(outcomes: &[Outcome]) {
    println!(
        "| cell | allowed r/s | requests | refusals | refusals / 1,000 pages | violations | steady r/s | steady % | items | verdict |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for o in outcomes {
        let misses = o.misses();
        let verdict = if misses.is_empty() {
            "pass".to_owned()
        } else {
            format!("FAIL: {}", misses.join("; "))
        };
        println!(
            "| {} | {:.0} | {} | {} | {:.1} | {} | {:.2} | {:.1}% | {} | {} |",
            o.name,
            o.allowed,
            o.requests,
            o.refusals,
            o.refusals_per_1000(),
            o.violations,
            o.steady,
            o.steady_pct(),
            o.items,
            verdict
        );
    }
}
