//! A discrete-event simulation of one host behind a rate limiter, for judging the machine
//! on virtual time: ten minutes of crawling take milliseconds, so every limiter kind, rate
//! and Retry-After combination is checked on every test run.
//!
//! The limiters follow the real servers' arithmetic (the lab emulates them the same way,
//! and its benchmark compares the lab with real nginx and HAProxy):
//! nginx `limit_req` (millisecond leaky bucket, `nodelay`), HAProxy's `http_req_rate`
//! sliding window that counts refused requests, a fixed-window counter, and an API gateway
//! announcing its fixed-window quota in RateLimit headers.

use std::time::Duration;

use crawler_core::{Feedback, RateLimitReading};

use super::{HostMachine, Params, Verdict};

/// A server-side limiter, judging arrivals (ms).
#[derive(Debug, Clone)]
pub(crate) enum Limiter {
    /// nginx `limit_req rate=R burst=B nodelay`.
    Nginx {
        rate: f64,
        burst: u32,
        excess: i64,
        last: Option<i64>,
    },
    /// HAProxy `sc_http_req_rate(0) gt N` over `period` ms, refused requests counted.
    Sliding {
        limit: u32,
        period: f64,
        tick: f64,
        curr: u32,
        prev: u32,
    },
    /// `limit` per fixed window of `period` ms; refused requests not counted.
    Fixed {
        limit: u32,
        period: f64,
        index: i64,
        used: u32,
    },
    /// A gateway with a fixed-window quota that it announces in RateLimit headers, its
    /// reset in whole seconds rounded up (the IETF fields) or to the millisecond
    /// (`X-RateLimit-Reset-After`).
    Gateway {
        limit: u32,
        period: f64,
        index: i64,
        used: u32,
        exact: bool,
    },
}

impl Limiter {
    pub(crate) fn nginx(rate: f64, burst: u32) -> Self {
        Self::Nginx {
            rate,
            burst,
            excess: 0,
            last: None,
        }
    }

    pub(crate) fn sliding(rate: f64, period_s: f64) -> Self {
        Self::Sliding {
            limit: (rate * period_s).round() as u32,
            period: period_s * 1_000.0,
            tick: -1.0,
            curr: 0,
            prev: 0,
        }
    }

    pub(crate) fn fixed(rate: f64, period_s: f64) -> Self {
        Self::Fixed {
            limit: (rate * period_s).round() as u32,
            period: period_s * 1_000.0,
            index: -1,
            used: 0,
        }
    }

    pub(crate) fn gateway(rate: f64, period_s: f64, exact: bool) -> Self {
        Self::Gateway {
            limit: (rate * period_s).round() as u32,
            period: period_s * 1_000.0,
            index: -1,
            used: 0,
            exact,
        }
    }

    /// Judge an arrival at `t` ms: accepted, and the RateLimit reading a gateway sends.
    pub(crate) fn admit(&mut self, t: f64) -> (bool, Option<RateLimitReading>) {
        match self {
            Self::Nginx {
                rate,
                burst,
                excess,
                last,
            } => {
                // nginx: excess in 1/1000 requests, rate in requests per 1000 s, whole ms.
                let now = t.floor() as i64;
                let rate_m = (*rate * 1_000.0) as i64;
                let ms = last.map_or(60_000, |l| (now - l).abs());
                let e = (*excess - rate_m * ms / 1_000 + 1_000).max(0);
                if e > i64::from(*burst) * 1_000 {
                    return (false, None);
                }
                *excess = e;
                *last = Some(now);
                (true, None)
            }
            Self::Sliding {
                limit,
                period,
                tick,
                curr,
                prev,
            } => {
                // HAProxy's freq_ctr: the period starts at the first event, stays aligned
                // to it, restarts after two idle periods; the rate is read after counting
                // the request (refused or not) and floored.
                let now = t.floor();
                let p = *period;
                if *tick < 0.0 {
                    *tick = now;
                    *curr = 1;
                    *prev = 0;
                } else if now - *tick < p {
                    *curr += 1;
                } else {
                    *prev = *curr;
                    *curr = 1;
                    *tick += p;
                    if now - *tick >= p {
                        *prev = 0;
                        *tick = now;
                    }
                }
                let remain = (*tick + p - now).max(0.0);
                let rate = if *curr == 0 && *prev <= 1 {
                    f64::from(*prev)
                } else {
                    ((f64::from(*prev) * remain + f64::from(*curr) * p) / p).floor()
                };
                (rate <= f64::from(*limit), None)
            }
            Self::Fixed {
                limit,
                period,
                index,
                used,
            } => {
                let i = (t / *period).floor() as i64;
                if i != *index {
                    *index = i;
                    *used = 0;
                }
                if *used >= *limit {
                    return (false, None);
                }
                *used += 1;
                (true, None)
            }
            Self::Gateway {
                limit,
                period,
                index,
                used,
                exact,
            } => {
                let i = (t / *period).floor() as i64;
                if i != *index {
                    *index = i;
                    *used = 0;
                }
                let ok = *used < *limit;
                if ok {
                    *used += 1;
                }
                // Whole seconds, rounded up, as the IETF fields are, or exact.
                let left_ms = (i + 1) as f64 * *period - t;
                let reset = if *exact {
                    Duration::from_secs_f64(left_ms.max(0.0) / 1_000.0)
                } else {
                    Duration::from_secs((left_ms / 1_000.0).ceil() as u64)
                };
                let reading = RateLimitReading {
                    remaining: u64::from(*limit - *used),
                    reset: Some(reset),
                    limit: Some(u64::from(*limit)),
                    window: Some(Duration::from_secs_f64(*period / 1_000.0)),
                };
                (ok, Some(reading))
            }
        }
    }
}

/// One simulated host.
#[derive(Debug, Clone)]
pub(crate) struct Cell {
    pub name: String,
    pub limiter: Limiter,
    /// Requests/s the limiter sustains.
    pub allowed: f64,
    /// Retry-After on refusals (ms), or none.
    pub retry_after: Option<f64>,
    /// Spread (ms) of the transit from send to arrival, above a floor of 0.3 ms: 2 ms on
    /// a quiet loopback; a busy client (a debug build on two cores at 100 r/s) adds tens
    /// of ms of scheduling between its clock reading and the bytes leaving.
    pub transit_spread: f64,
    /// Seed of the transit and latency draws.
    pub seed: u64,
    /// How rough the client's machine is: none for the matrix, drawn per run by [`rough`].
    pub rough: Rough,
}

/// What a busy client adds to a quiet loopback, and where the crawl starts in the
/// limiter's windows: the lab runs 36 crawls (144 workers for a fleet) on two cores, and
/// a window limiter's edges fall wherever its clock puts them. On a quiet loopback every
/// draw of a cell ends the same way; a result that holds only there is not a result.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rough {
    /// The limiter's clock ahead of the crawl's (ms): where the crawl starts in a window.
    pub phase: f64,
    /// Chance that a send stalls on its way out (a scheduler that ran something else).
    pub stall_chance: f64,
    /// Longest such stall (ms), drawn uniformly.
    pub stall_ms: f64,
    /// Extra latency spread (ms) above the 25 ms of a quiet lab.
    pub latency_spread: f64,
    /// The crawl's start rate (requests/s), when not the default.
    pub start_rate: Option<f64>,
}

/// What the server saw.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome {
    pub sent: u64,
    pub accepted: u64,
    pub refused: u64,
    /// Requests that arrived inside a wait the server announced.
    pub violations: u64,
    /// Accepted requests/s over the last half.
    pub steady: f64,
    pub skipped: bool,
}

impl Outcome {
    pub(crate) fn refusals_per_1000(&self) -> f64 {
        self.refused as f64 * 1_000.0 / self.accepted.max(1) as f64
    }
}

/// Crawl `cell` for `duration_ms` with a machine of `params`; latency 15-40 ms.
pub(crate) fn run(cell: &Cell, params: &Params, duration_ms: f64) -> Outcome {
    run_audited(cell, params, duration_ms).0
}

/// [`run`], with the machine's audit records.
pub(crate) fn run_audited(
    cell: &Cell,
    params: &Params,
    duration_ms: f64,
) -> (Outcome, Vec<super::Change>) {
    let mut audit = Vec::new();
    let mut machine = HostMachine::new(params.clone(), 0.0);
    let mut limiter = cell.limiter.clone();
    let mut out = Outcome::default();
    // (answer time, send time, accepted, reading)
    let mut pending: Vec<(f64, f64, bool, Option<RateLimitReading>)> = Vec::new();
    let mut hold_until = f64::NEG_INFINITY;
    let mut last_arrival = f64::NEG_INFINITY;
    let mut seed: u64 = cell.seed;
    let mut t = 0.0;
    let mut steady_accepted = 0u64;
    for _ in 0..10_000_000 {
        let next_answer = pending.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
        let send_at = if machine.has_room() {
            machine.ready_at().max(t)
        } else {
            f64::INFINITY
        };
        if send_at.min(next_answer) >= duration_ms {
            break;
        }
        if send_at <= next_answer {
            t = send_at;
            machine.on_send(t);
            out.sent += 1;
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            // Loopback transit and scheduling: 0.3 to 2.3 ms.
            // The server judges requests in the order they arrive, so arrival times are
            // monotonic whatever the transit.
            let mut arrival =
                t + 0.3 + (seed >> 33) as f64 / (1u64 << 31) as f64 * cell.transit_spread;
            if cell.rough.stall_chance > 0.0 {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let u = (seed >> 33) as f64 / (1u64 << 31) as f64;
                if u < cell.rough.stall_chance {
                    arrival += u / cell.rough.stall_chance * cell.rough.stall_ms;
                }
            }
            let arrival = arrival.max(last_arrival);
            last_arrival = arrival;
            if arrival < hold_until {
                out.violations += 1;
            }
            let (ok, reading) = limiter.admit(arrival + cell.rough.phase);
            // An exhausted quota announces a wait (its reset, as sent: whole seconds): a
            // request arriving before it ends is a violation even if the window has in
            // fact turned, as the lab counts it.
            if let Some(r) = reading.filter(|r| r.remaining == 0)
                && let Some(reset) = r.reset
            {
                hold_until = hold_until.max(arrival + reset.as_secs_f64() * 1_000.0);
            }
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let latency = 15.0
                + (seed >> 33) as f64 / (1u64 << 31) as f64 * (25.0 + cell.rough.latency_spread);
            pending.push((t + latency, t, ok, reading));
        } else {
            let i = pending.iter().position(|p| p.0 == next_answer).unwrap_or(0);
            let (at, sent, ok, reading) = pending.swap_remove(i);
            t = at;
            // A busy client also reads its clock late: the send time the machine infers
            // (answer time minus latency) is off by up to the spread too.
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let noise = (cell.transit_spread - 2.0).max(0.0);
            let late = ((seed >> 33) as f64 / (1u64 << 31) as f64 - 0.5) * noise;
            let mut fb = Feedback {
                sent: true,
                status: Some(if ok { 200 } else { 429 }),
                latency: Duration::from_secs_f64((at - sent - late).max(0.0) / 1_000.0),
                rate_limit: reading,
                ..Default::default()
            };
            if ok {
                out.accepted += 1;
                if sent >= duration_ms / 2.0 {
                    steady_accepted += 1;
                }
            } else {
                out.refused += 1;
                let ra = match (&cell.limiter, reading) {
                    (Limiter::Gateway { .. }, Some(r)) => r.reset.map(|d| d.as_secs_f64() * 1e3),
                    _ => cell.retry_after,
                };
                if let Some(ra) = ra {
                    fb.retry_after = Some(Duration::from_secs_f64(ra / 1_000.0));
                    hold_until = hold_until.max(at + ra);
                }
            }
            let verdict = machine.on_feedback(&fb, t);
            audit.extend(machine.take_audit());
            if let Verdict::Skip(_) = verdict {
                out.skipped = true;
                break;
            }
        }
    }
    out.steady = steady_accepted as f64 / (duration_ms / 2_000.0);
    (out, audit)
}

/// The matrix of the politeness goal: limiter kind x allowed rate x Retry-After.
pub(crate) fn matrix() -> Vec<Cell> {
    let mut cells = Vec::new();
    for rate in [1.0, 3.0, 5.0] {
        for ra in [Some(30_000.0), None] {
            let tag = if ra.is_some() { "RA 30s" } else { "no RA" };
            let kinds: [(String, Limiter); 5] = [
                (
                    format!("nginx b0 {rate} r/s {tag}"),
                    Limiter::nginx(rate, 0),
                ),
                (
                    format!("nginx b5 {rate} r/s {tag}"),
                    Limiter::nginx(rate, 5),
                ),
                (
                    format!("nginx b20 {rate} r/s {tag}"),
                    Limiter::nginx(rate, 20),
                ),
                (
                    format!("haproxy 10s {rate} r/s {tag}"),
                    Limiter::sliding(rate, 10.0),
                ),
                (
                    format!("fixed 10s {rate} r/s {tag}"),
                    Limiter::fixed(rate, 10.0),
                ),
            ];
            for (name, limiter) in kinds {
                cells.push(Cell {
                    name,
                    limiter,
                    allowed: rate,
                    retry_after: ra,
                    transit_spread: 2.0,
                    seed: 7,
                    rough: Rough::default(),
                });
            }
        }
    }
    cells
}

/// Every cell of `cells` once per seed, the seed in its name.
pub(crate) fn seeded(cells: Vec<Cell>, seeds: &[u64]) -> Vec<Cell> {
    seeds
        .iter()
        .flat_map(|&seed| {
            cells.iter().map(move |c| Cell {
                name: format!("{} #{seed}", c.name),
                seed,
                ..c.clone()
            })
        })
        .collect()
}

/// The RateLimit-header cells: windows of 60 s, and of 10 s as the lab's benchmark uses
/// (a whole-second reset is a tenth of such a window).
pub(crate) fn gateways() -> Vec<Cell> {
    let mut cells = Vec::new();
    for (period, exact) in [(60.0, false), (10.0, false), (10.0, true)] {
        for rate in [1.0, 3.0, 5.0] {
            let tag = if exact { " exact" } else { "" };
            cells.push(Cell {
                name: format!("gateway {period}s{tag} {rate} r/s"),
                limiter: Limiter::gateway(rate, period, exact),
                allowed: rate,
                retry_after: None,
                transit_spread: 2.0,
                seed: 7,
                rough: Rough::default(),
            });
        }
    }
    cells
}

/// Every cell of `cells` on `draws` rough machines: per draw, a window phase anywhere in
/// the limiter's period, 2 to `2 + spread` ms of transit spread, 0 to 75 ms more latency
/// spread, up to 2% of sends stalled by up to `stall_ms`, and with `vary_start` a start
/// rate from 0.5 to 10 r/s instead of the default.
pub(crate) fn rough(
    cells: Vec<Cell>,
    draws: u64,
    spread: f64,
    stall_ms: f64,
    vary_start: bool,
) -> Vec<Cell> {
    let mut out = Vec::new();
    for draw in 1..=draws {
        for c in &cells {
            let mut seed = draw
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(c.name.len() as u64);
            let mut next = || {
                seed = seed
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (seed >> 33) as f64 / (1u64 << 31) as f64
            };
            let period = match c.limiter {
                Limiter::Sliding { period, .. }
                | Limiter::Fixed { period, .. }
                | Limiter::Gateway { period, .. } => period,
                Limiter::Nginx { .. } => 1_000.0,
            };
            let rough = Rough {
                phase: next() * period,
                stall_chance: next() * 0.02,
                stall_ms,
                latency_spread: next() * 75.0,
                // 0.5 to 10 r/s, even on a log scale: under and over every limit.
                start_rate: Some(0.5 * 20f64.powf(next())).filter(|_| vary_start),
            };
            out.push(Cell {
                name: format!("{} ~{draw}", c.name),
                transit_spread: 2.0 + next() * spread,
                seed: draw,
                rough,
                ..c.clone()
            });
        }
    }
    out
}
