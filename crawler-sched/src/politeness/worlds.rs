//! The judge: fresh random worlds on virtual time, for judging the machine.
//!
//! A [`World`] is one server (or several host names behind one limiter) drawn at random
//! from families of limiters and faults: nginx `limit_req` with and without `nodelay`,
//! sliding windows that count refused requests or not, fixed windows, gateways announcing
//! their quota in RateLimit headers, limits from 0.5 to 20 r/s, Retry-After absent, zero,
//! 1-300 s or an HTTP-date, the limit halved or doubled mid-crawl, one limiter behind 1-5
//! host names, a quota on one path only, latency from 5 to 500 ms with jitter, stalls and
//! load-dependent slow-down, 5xx storms, refused connections and timeouts. [`run`] crawls
//! it with one [`HostMachine`] per host name, the way the frontier drives them: thirty
//! minutes take milliseconds, so every test run judges the machine on new draws.
//!
//! No list of cells is the judge: [`World::draw`] takes a seed, the tests and the
//! benchmark draw new seeds on every run and print them, and `POLITENESS_SEED` replays one.
//! The limiters follow the real servers' arithmetic (nginx's millisecond leaky bucket,
//! HAProxy's `freq_ctr`); the lab emulates the same ones, and the lab benchmark compares
//! draws behind the lab with the same parameters behind real nginx and HAProxy.

use std::fmt;
use std::time::Duration;

use crawler_core::{FailureKind, Feedback, RateLimitReading};

use super::{HostMachine, Params, Verdict};

/// A deterministic generator (splitmix64): a seed is a whole world and its run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    /// A uniform draw in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [lo, hi).
    pub fn range(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Even on a log scale in [lo, hi).
    pub fn log_range(&mut self, lo: f64, hi: f64) -> f64 {
        lo * (hi / lo).powf(self.unit())
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// An integer in [lo, hi].
    pub fn int(&mut self, lo: u32, hi: u32) -> u32 {
        lo + ((self.unit() * f64::from(hi - lo + 1)) as u32).min(hi - lo)
    }
}

/// A server-side limiter, judging arrivals (ms on the server's clock).
#[derive(Debug, Clone)]
pub enum Limiter {
    /// nginx `limit_req rate=R burst=B`, with `nodelay` (refuse or serve at once) or
    /// without (requests within the burst are delayed until their turn).
    Nginx {
        /// Requests/s.
        rate: f64,
        /// `burst=`.
        burst: u32,
        /// `nodelay`.
        nodelay: bool,
        /// Excess in thousandths of a request.
        excess: i64,
        /// Last accepted arrival (whole ms).
        last: Option<i64>,
    },
    /// HAProxy `sc_http_req_rate(0) gt N` over `period` ms (its `freq_ctr`).
    Sliding {
        /// Requests per period.
        limit: u32,
        /// The period (ms).
        period: f64,
        /// Whether refused requests count too (`http-request track-sc0` before the deny).
        count_refused: bool,
        /// Start of the current period.
        tick: f64,
        /// Requests counted in the current period.
        curr: u32,
        /// Requests counted in the previous one.
        prev: u32,
    },
    /// `limit` per fixed window of `period` ms; refused requests not counted.
    Fixed {
        /// Requests per window.
        limit: u32,
        /// The window (ms).
        period: f64,
        /// The current window's index.
        index: i64,
        /// Requests accepted in it.
        used: u32,
    },
    /// A gateway with a fixed-window quota that it announces in RateLimit headers, its
    /// reset in whole seconds rounded up (the IETF fields) or to the millisecond.
    Gateway {
        /// Requests per window.
        limit: u32,
        /// The window (ms).
        period: f64,
        /// The current window's index.
        index: i64,
        /// Requests accepted in it.
        used: u32,
        /// Millisecond resets (else whole seconds, rounded up).
        exact: bool,
    },
}

/// A limiter's answer to one arrival.
#[derive(Debug, Clone, Copy)]
pub struct Admission {
    /// Served (else refused with 429).
    pub ok: bool,
    /// The RateLimit reading a gateway sends.
    pub reading: Option<RateLimitReading>,
    /// How long the server queued the request before serving it (nginx without `nodelay`).
    pub delay_ms: f64,
}

impl Limiter {
    /// nginx `limit_req`.
    pub fn nginx(rate: f64, burst: u32, nodelay: bool) -> Self {
        Self::Nginx {
            rate,
            burst,
            nodelay,
            excess: 0,
            last: None,
        }
    }

    /// HAProxy's sliding window of `period_s` at `rate`.
    pub fn sliding(rate: f64, period_s: f64, count_refused: bool) -> Self {
        Self::Sliding {
            limit: ((rate * period_s).round() as u32).max(1),
            period: period_s * 1_000.0,
            count_refused,
            tick: -1.0,
            curr: 0,
            prev: 0,
        }
    }

    /// A fixed window of `period_s` at `rate`.
    pub fn fixed(rate: f64, period_s: f64) -> Self {
        Self::Fixed {
            limit: ((rate * period_s).round() as u32).max(1),
            period: period_s * 1_000.0,
            index: -1,
            used: 0,
        }
    }

    /// A gateway announcing a fixed window of `period_s` at `rate`.
    pub fn gateway(rate: f64, period_s: f64, exact: bool) -> Self {
        Self::Gateway {
            limit: ((rate * period_s).round() as u32).max(1),
            period: period_s * 1_000.0,
            index: -1,
            used: 0,
            exact,
        }
    }

    /// The rate the limiter sustains (requests/s).
    pub fn allowed(&self) -> f64 {
        match self {
            Self::Nginx { rate, .. } => *rate,
            Self::Sliding { limit, period, .. }
            | Self::Fixed { limit, period, .. }
            | Self::Gateway { limit, period, .. } => f64::from(*limit) * 1_000.0 / period,
        }
    }

    /// Scale the limit by `factor` (an operator changed the configuration).
    pub fn scale(&mut self, factor: f64) {
        match self {
            Self::Nginx { rate, .. } => *rate *= factor,
            Self::Sliding { limit, .. }
            | Self::Fixed { limit, .. }
            | Self::Gateway { limit, .. } => {
                *limit = ((f64::from(*limit) * factor).round() as u32).max(1);
            }
        }
    }

    /// The window length, for window limiters (ms).
    pub fn period(&self) -> Option<f64> {
        match self {
            Self::Nginx { .. } => None,
            Self::Sliding { period, .. }
            | Self::Fixed { period, .. }
            | Self::Gateway { period, .. } => Some(*period),
        }
    }

    /// Judge an arrival at `t` ms.
    pub fn admit(&mut self, t: f64) -> Admission {
        let plain = |ok| Admission {
            ok,
            reading: None,
            delay_ms: 0.0,
        };
        match self {
            Self::Nginx {
                rate,
                burst,
                nodelay,
                excess,
                last,
            } => {
                // nginx: excess in 1/1000 requests, rate in requests per 1000 s, whole ms.
                let now = t.floor() as i64;
                let rate_m = ((*rate * 1_000.0) as i64).max(1);
                let ms = last.map_or(60_000, |l| (now - l).abs());
                let e = (*excess - rate_m * ms / 1_000 + 1_000).max(0);
                if e > i64::from(*burst) * 1_000 {
                    return plain(false);
                }
                *excess = e;
                *last = Some(now);
                let delay_ms = if *nodelay {
                    0.0
                } else {
                    // Served when the excess has drained: excess / rate.
                    e as f64 * 1_000.0 / rate_m as f64
                };
                Admission {
                    ok: true,
                    reading: None,
                    delay_ms,
                }
            }
            Self::Sliding {
                limit,
                period,
                count_refused,
                tick,
                curr,
                prev,
            } => {
                // HAProxy's freq_ctr: the period starts at the first event, stays aligned
                // to it, restarts after two idle periods; the rate is read with this
                // request counted and floored.
                let now = t.floor();
                let p = *period;
                if *tick < 0.0 {
                    *tick = now;
                    *curr = 0;
                    *prev = 0;
                } else if now - *tick >= p {
                    *prev = *curr;
                    *curr = 0;
                    *tick += p;
                    if now - *tick >= p {
                        *prev = 0;
                        *tick = now;
                    }
                }
                let remain = (*tick + p - now).max(0.0);
                let read = |c: u32| ((f64::from(*prev) * remain + f64::from(c) * p) / p).floor();
                let ok = read(*curr + 1) <= f64::from(*limit);
                if ok || *count_refused {
                    *curr += 1;
                }
                plain(ok)
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
                    return plain(false);
                }
                *used += 1;
                plain(true)
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
                let left_ms = (i + 1) as f64 * *period - t;
                let reset = if *exact {
                    Duration::from_secs_f64(left_ms.max(0.0) / 1_000.0)
                } else {
                    Duration::from_secs((left_ms / 1_000.0).ceil() as u64)
                };
                Admission {
                    ok,
                    reading: Some(RateLimitReading {
                        remaining: u64::from(limit.saturating_sub(*used)),
                        reset: Some(reset),
                        limit: Some(u64::from(*limit)),
                        window: Some(Duration::from_secs_f64(*period / 1_000.0)),
                    }),
                    delay_ms: 0.0,
                }
            }
        }
    }
}

/// What a refusal says about when to come back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RetryAfter {
    /// Nothing.
    Absent,
    /// `Retry-After: 0`.
    Zero,
    /// `Retry-After: N` seconds.
    Secs(f64),
    /// `Retry-After: <HTTP-date>` N seconds ahead, whole seconds as the date has them.
    Date(f64),
}

/// Latency of the world's server.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    /// Base latency (ms).
    pub base_ms: f64,
    /// Uniform jitter on top (ms).
    pub jitter_ms: f64,
    /// Extra latency per request the server is working on (ms): load-dependent slow-down.
    pub per_in_flight_ms: f64,
    /// A ramp of the base latency: from `start` ms it climbs linearly to `peak_ms` at
    /// `start + rise`, stays until `end`, then returns to the base at once.
    pub ramp: Option<Ramp>,
}

/// A latency ramp (ms on the crawl's clock).
#[derive(Debug, Clone, Copy)]
pub struct Ramp {
    /// When the climb begins.
    pub start: f64,
    /// How long the climb takes.
    pub rise: f64,
    /// When latency returns to the base.
    pub end: f64,
    /// The latency at the top.
    pub peak_ms: f64,
}

/// A span of the crawl (ms) during which the server answers every page with 500.
#[derive(Debug, Clone, Copy)]
pub struct Storm {
    /// Start.
    pub start: f64,
    /// End.
    pub end: f64,
}

/// A server that does work for every page: `workers` serve pages in the order they
/// arrive, each for its service time, and what exceeds them waits in the queue (a page's
/// latency is its wait plus its service). robots.txt is a static file: answered at once,
/// outside the workers, as most sites serve it in front of dynamic pages.
#[derive(Debug, Clone, Copy)]
pub struct Server {
    /// Pages served at once.
    pub workers: u32,
    /// Mean service time of a page (ms).
    pub service_ms: f64,
    /// Each page's service time is drawn uniformly within this fraction of the mean.
    pub jitter: f64,
    /// The service time scaled by a factor at an instant (ms): the server's own level
    /// moves (a deploy, a cold cache, its other clients), not the crawl's doing.
    pub change: Option<(f64, f64)>,
}

impl Server {
    /// The mean service time at the end of the crawl (ms).
    pub fn final_service_ms(&self) -> f64 {
        self.service_ms * self.change.map_or(1.0, |(_, f)| f)
    }

    /// Pages per second the server can serve at the end of the crawl.
    pub fn capacity(&self) -> f64 {
        f64::from(self.workers.max(1)) * 1_000.0 / self.final_service_ms().max(1e-3)
    }
}

/// One random world: a server and the machine it is crawled from.
#[derive(Debug, Clone)]
pub struct World {
    /// The seed it was drawn from (and its run's draws).
    pub seed: u64,
    /// The limiter, shared by every host name.
    pub limiter: Limiter,
    /// What refusals say about coming back (gateways say it in their resets).
    pub retry_after: RetryAfter,
    /// The limit scaled by a factor at an instant (ms), if it changes.
    pub change: Option<(f64, f64)>,
    /// Host names behind the limiter; they resolve to one address, so their holds are
    /// shared (the frontier's limiter group).
    pub hosts: u32,
    /// The share of requests the limiter counts (a quota on one path only), 1 for all.
    pub counted_share: f64,
    /// Latency.
    pub latency: Latency,
    /// Spread of the transit from send to arrival (ms), above 0.3 ms: a busy client.
    pub transit_ms: f64,
    /// Chance that a send stalls on its way out, and the longest stall (ms).
    pub stall: (f64, f64),
    /// A 5xx storm.
    pub storm: Option<Storm>,
    /// Chance per request of a refused connection.
    pub refused_conn: f64,
    /// Chance per request of a timeout (the answer never comes; the client gives up).
    pub timeouts: f64,
    /// The client's phase in the limiter's windows (ms).
    pub phase: f64,
    /// Requests in flight the crawl allows per host (`concurrency_per_host`: 1, the default,
    /// to 8).
    pub concurrency: u32,
    /// The crawl's start rate.
    pub start_rate: f64,
    /// Pages that cost the server work, queued on its workers (`None`: latency alone).
    pub server: Option<Server>,
    /// Each host name's site, address and limiter (empty: every name of one site on one
    /// address behind `limiter`).
    pub names: Vec<NameSpec>,
    /// Limiters besides `limiter`, for names that name them (index 1 on).
    pub other_limiters: Vec<Limiter>,
}

/// Where one host name of a world lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NameSpec {
    /// Its registrable domain (names with one share holds from the start).
    pub site: u32,
    /// The address it resolves to.
    pub address: u32,
    /// Its limiter: 0 is the world's `limiter`, `k` is `other_limiters[k - 1]`.
    pub limiter: usize,
}

/// The shapes of host names the judge draws besides one site behind one limiter.
pub const SHARED_FAMILIES: [&str; 3] = ["cdn", "site-on-addresses", "site-separate-limits"];

/// How long a request that times out holds its slot (ms): `download_timeout`'s default.
const TIMEOUT_MS: f64 = 30_000.0;

/// The families a world is drawn from, by name (for reports).
pub const FAMILIES: [&str; 5] = ["bucket", "nginx-delay", "sliding", "fixed", "gateway"];

impl World {
    /// Draw a world from `seed`: every family, rate and fault the judge knows, each with
    /// its own chance. `duration_ms` places mid-crawl changes.
    pub fn draw(seed: u64, duration_ms: f64) -> Self {
        let mut r = Rng::new(seed);
        let rate = r.log_range(0.5, 20.0);
        let family = r.int(0, FAMILIES.len() as u32 - 1);
        let limiter = match family {
            0 => Limiter::nginx(rate, r.int(0, 50), true),
            1 => Limiter::nginx(rate, r.int(1, 50), false),
            2 => Limiter::sliding(rate, r.log_range(5.0, 120.0).round(), r.chance(0.5)),
            3 => Limiter::fixed(rate, r.log_range(5.0, 60.0).round()),
            _ => Limiter::gateway(rate, r.log_range(1.0, 60.0).round(), r.chance(0.5)),
        };
        let retry_after = match r.unit() {
            u if u < 0.3 => RetryAfter::Absent,
            u if u < 0.4 => RetryAfter::Zero,
            u if u < 0.9 => RetryAfter::Secs(r.log_range(1.0, 300.0).round()),
            _ => RetryAfter::Date(r.log_range(1.0, 300.0).round()),
        };
        let change = r.chance(0.25).then(|| {
            (
                duration_ms * r.range(0.3, 0.5),
                if r.chance(0.5) { 0.5 } else { 2.0 },
            )
        });
        let hosts = if r.chance(0.25) { r.int(2, 5) } else { 1 };
        let counted_share = if r.chance(0.1) {
            r.range(0.3, 0.9)
        } else {
            1.0
        };
        let base_ms = r.log_range(5.0, 500.0);
        let latency = Latency {
            base_ms,
            jitter_ms: base_ms * r.range(0.0, 1.0),
            per_in_flight_ms: if r.chance(0.2) {
                r.range(5.0, 100.0)
            } else {
                0.0
            },
            ramp: None,
        };
        let storm = r.chance(0.15).then(|| {
            let start = duration_ms * r.range(0.2, 0.6);
            Storm {
                start,
                end: start + 60_000.0,
            }
        });
        Self {
            seed,
            limiter,
            retry_after,
            change,
            hosts,
            counted_share,
            latency,
            transit_ms: r.range(0.0, 6.0),
            stall: (r.range(0.0, 0.02), r.range(0.0, 20.0)),
            storm,
            refused_conn: if r.chance(0.1) {
                r.range(0.0, 0.02)
            } else {
                0.0
            },
            timeouts: if r.chance(0.1) {
                r.range(0.0, 0.01)
            } else {
                0.0
            },
            phase: r.range(0.0, 120_000.0),
            // `concurrency_per_host` is 1 by default; users raise it.
            concurrency: [1, 2, 4, 8][r.int(0, 3) as usize],
            start_rate: 1.0,
            server: None,
            names: Vec::new(),
            other_limiters: Vec::new(),
        }
    }

    /// Draw a world of the `server` family from `seed`: no rate limit, pages that take
    /// 20 ms to 2 s of service on 1-16 workers behind an instant robots.txt, jitter, the
    /// service time halved or doubled mid-crawl in some, and a crawl allowing 1-16 requests
    /// in flight. What a polite crawler must do here is serve itself at the server's pace
    /// without growing its queue.
    pub fn draw_server(seed: u64, duration_ms: f64) -> Self {
        let mut r = Rng::new(seed ^ 0x5e4e_e4a1);
        let service_ms = r.log_range(20.0, 2_000.0);
        let server = Server {
            workers: [1, 2, 4, 8, 16][r.int(0, 4) as usize],
            service_ms,
            jitter: r.range(0.0, 0.5),
            change: r.chance(0.3).then(|| {
                (
                    duration_ms * r.range(0.2, 0.4),
                    if r.chance(0.5) { 0.5 } else { 2.0 },
                )
            }),
        };
        let net = r.range(0.5, 5.0);
        let mut world = Self::plain(
            seed,
            Limiter::nginx(10_000.0, 10_000, true),
            RetryAfter::Absent,
        );
        world.latency = Latency {
            base_ms: net,
            jitter_ms: net * 0.5,
            per_in_flight_ms: 0.0,
            ramp: None,
        };
        world.transit_ms = r.range(0.0, 3.0);
        world.concurrency = [1, 2, 4, 8, 16][r.int(0, 4) as usize];
        world.server = Some(server);
        world
    }

    /// Draw a world of host names that share an address or a site, from `seed`:
    /// - `cdn`: 5-20 unrelated sites on one address, one of them behind a limiter drawn as
    ///   [`World::draw`] draws them, the others open;
    /// - `site-on-addresses`: 2-4 names of one site on as many addresses behind one
    ///   account-wide limiter;
    /// - `site-separate-limits`: 2-4 names of one site on one address, each behind a
    ///   limiter of its own.
    pub fn draw_shared(seed: u64, duration_ms: f64) -> Self {
        let mut world = Self::draw(seed, duration_ms);
        let mut r = Rng::new(seed ^ 0x0c0d_e5a7);
        world.change = None;
        world.counted_share = 1.0;
        world.storm = None;
        let open = || Limiter::nginx(10_000.0, 10_000, true);
        match r.int(0, 2) {
            0 => {
                let n = r.int(5, 20);
                world.hosts = n;
                world.names = (0..n)
                    .map(|i| NameSpec {
                        site: i,
                        address: 0,
                        limiter: i as usize,
                    })
                    .collect();
                world.other_limiters = (1..n).map(|_| open()).collect();
                // Unrelated sites: one's load does not slow the others' pages, and the open
                // ones are judged on what grouping costs them, not on faults.
                world.latency.per_in_flight_ms = 0.0;
                world.timeouts = 0.0;
                world.refused_conn = 0.0;
            }
            1 => {
                let n = r.int(2, 4);
                world.hosts = n;
                world.names = (0..n)
                    .map(|i| NameSpec {
                        site: 0,
                        address: i,
                        limiter: 0,
                    })
                    .collect();
            }
            _ => {
                let n = r.int(2, 4);
                world.hosts = n;
                world.names = (0..n)
                    .map(|i| NameSpec {
                        site: 0,
                        address: 0,
                        limiter: i as usize,
                    })
                    .collect();
                let mut l = world.limiter.clone();
                world.other_limiters = (1..n)
                    .map(|_| {
                        l.scale(r.range(0.5, 2.0));
                        l.clone()
                    })
                    .collect();
            }
        }
        world
    }

    /// The shape of its host names: one of [`SHARED_FAMILIES`], or `None` for one site
    /// behind one limiter.
    pub fn sharing(&self) -> Option<&'static str> {
        if self.names.is_empty() {
            return None;
        }
        let sites = self.names.iter().map(|n| n.site).max().unwrap_or(0);
        Some(if sites > 0 {
            SHARED_FAMILIES[0]
        } else if self.other_limiters.is_empty() {
            SHARED_FAMILIES[1]
        } else {
            SHARED_FAMILIES[2]
        })
    }

    /// Name `i`'s site, address and limiter.
    pub fn name(&self, i: usize) -> NameSpec {
        self.names.get(i).copied().unwrap_or(NameSpec {
            site: 0,
            address: 0,
            limiter: 0,
        })
    }

    /// The rate name `i` alone can reach (requests/s) when its limiter is its own and
    /// open: the crawl's ceiling, or what its in-flight cap allows at the mean latency.
    pub fn attainable_open(&self, params: &Params) -> f64 {
        let latency = (self.latency.base_ms + self.latency.jitter_ms / 2.0) / 1e3;
        params
            .max_rate
            .min(f64::from(self.concurrency) / latency.max(1e-3))
    }

    /// The family's name.
    pub fn family(&self) -> &'static str {
        if self.server.is_some() {
            return "server";
        }
        match self.limiter {
            Limiter::Nginx { nodelay: true, .. } => FAMILIES[0],
            Limiter::Nginx { nodelay: false, .. } => FAMILIES[1],
            Limiter::Sliding { .. } => FAMILIES[2],
            Limiter::Fixed { .. } => FAMILIES[3],
            Limiter::Gateway { .. } => FAMILIES[4],
        }
    }

    /// The rate allowed at the end of the crawl (after any change), requests/s.
    pub fn final_allowed(&self) -> f64 {
        let mut l = self.limiter.clone();
        if let Some((_, f)) = self.change {
            l.scale(f);
        }
        l.allowed() / self.counted_share
    }

    /// The rate a crawl with `params` can reach here (requests/s): the limit at the end of
    /// the crawl, under the crawl's own ceiling (`max_rate` per host name) and what its
    /// in-flight cap allows at the server's mean latency.
    pub fn attainable(&self, params: &Params) -> f64 {
        let hosts = f64::from(self.hosts.max(1));
        let service = self.server.map_or(0.0, |s| s.final_service_ms());
        let latency = (self.latency.base_ms
            + self.latency.jitter_ms / 2.0
            + self.latency.per_in_flight_ms * f64::from(self.concurrency)
            + service)
            / 1e3;
        // A request holds its in-flight slot for its latency, or for the whole timeout.
        let occupancy = (1.0 - self.timeouts) * latency + self.timeouts * TIMEOUT_MS / 1e3;
        let by_latency = f64::from(self.concurrency) / occupancy.max(1e-3) * hosts;
        let by_server = self.server.map_or(f64::INFINITY, |s| s.capacity());
        self.final_allowed()
            .min(params.max_rate * hosts)
            .min(by_latency)
            .min(by_server)
    }

    /// A plain world: one host, no faults, 25 ms of latency, for focused tests.
    pub fn plain(seed: u64, limiter: Limiter, retry_after: RetryAfter) -> Self {
        Self {
            seed,
            limiter,
            retry_after,
            change: None,
            hosts: 1,
            counted_share: 1.0,
            latency: Latency {
                base_ms: 15.0,
                jitter_ms: 25.0,
                per_in_flight_ms: 0.0,
                ramp: None,
            },
            transit_ms: 2.0,
            stall: (0.0, 0.0),
            storm: None,
            refused_conn: 0.0,
            timeouts: 0.0,
            phase: 0.0,
            concurrency: 8,
            start_rate: 1.0,
            server: None,
            names: Vec::new(),
            other_limiters: Vec::new(),
        }
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = &self.limiter;
        write!(
            f,
            "seed {} {} {:.2} r/s",
            self.seed,
            self.family(),
            l.allowed()
        )?;
        match l {
            Limiter::Nginx { burst, .. } => write!(f, " burst {burst}")?,
            Limiter::Sliding {
                period,
                count_refused,
                ..
            } => write!(
                f,
                " {:.0}s{}",
                period / 1e3,
                if *count_refused {
                    " counting refused"
                } else {
                    ""
                }
            )?,
            Limiter::Fixed { period, .. } => write!(f, " {:.0}s", period / 1e3)?,
            Limiter::Gateway { period, exact, .. } => write!(
                f,
                " {:.0}s{}",
                period / 1e3,
                if *exact { " exact" } else { "" }
            )?,
        }
        write!(f, ", RA {:?}", self.retry_after)?;
        if let Some((at, factor)) = self.change {
            write!(f, ", x{factor} at {:.0}s", at / 1e3)?;
        }
        if self.hosts > 1 {
            write!(f, ", {} hosts", self.hosts)?;
        }
        if self.counted_share < 1.0 {
            write!(f, ", {:.0}% counted", self.counted_share * 100.0)?;
        }
        write!(
            f,
            ", latency {:.0}+{:.0} ms",
            self.latency.base_ms, self.latency.jitter_ms
        )?;
        if self.latency.per_in_flight_ms > 0.0 {
            write!(f, " +{:.0}/in-flight", self.latency.per_in_flight_ms)?;
        }
        if let Some(s) = self.server {
            write!(
                f,
                ", pages {:.0} ms ±{:.0}% on {} workers, {} in flight",
                s.service_ms,
                s.jitter * 100.0,
                s.workers,
                self.concurrency
            )?;
            if let Some((at, factor)) = s.change {
                write!(f, ", service x{factor} at {:.0}s", at / 1e3)?;
            }
        }
        if let Some(s) = self.storm {
            write!(f, ", 500s {:.0}-{:.0}s", s.start / 1e3, s.end / 1e3)?;
        }
        if self.refused_conn > 0.0 {
            write!(f, ", {:.1}% refused conns", self.refused_conn * 100.0)?;
        }
        if self.timeouts > 0.0 {
            write!(f, ", {:.1}% timeouts", self.timeouts * 100.0)?;
        }
        Ok(())
    }
}

/// What the server saw, and what the crawl got.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Requests that reached the server.
    pub sent: u64,
    /// Served (any answer but a refusal, a 5xx, or a failure).
    pub accepted: u64,
    /// Refused by the limiter (429).
    pub refused: u64,
    /// Requests that arrived inside a wait the server announced (to any host name of the
    /// limiter).
    pub violations: u64,
    /// Accepted requests/s over the last half, all host names together, leaving out a
    /// storm and the minute after it.
    pub steady: f64,
    /// Accepted requests/s over the last half of the time before the limit changed.
    pub before_change: f64,
    /// Requests that arrived during a 5xx storm.
    pub in_storm: u64,
    /// Accepted requests/s over the second minute after a storm ended (the first may
    /// still be held by the last backoff, up to its cap).
    pub after_storm: f64,
    /// Accepted requests/s over the two minutes before a storm began.
    pub before_storm: f64,
    /// Refusals after the limit changed.
    pub refused_after_change: u64,
    /// When each refusal was answered (ms), for telling a crawl's learning from its
    /// steady state.
    pub refused_at: Vec<f64>,
    /// Accepted requests/s over the last fifth of a ramp's peak, and before it began.
    pub ramp_rates: Option<(f64, f64)>,
    /// Whether a host was skipped.
    pub skipped: bool,
    /// Accepted requests/s per minute of the crawl.
    pub per_minute: Vec<f64>,
    /// Server worlds: how long each page sent in the last half waited in the server's
    /// queue before a worker took it (ms).
    pub queue_waits: Vec<f64>,
    /// Accepted requests/s of each host name over the last half.
    pub steady_by_name: Vec<f64>,
    /// Limiter groups joined on evidence (different sites on one address).
    pub joins: u64,
    /// Names that left their group's pool (its refusals kept falling on them alone).
    pub leaves: u64,
}

impl Outcome {
    /// The median of [`Outcome::queue_waits`] (ms), 0 without any.
    pub fn median_queue_wait(&self) -> f64 {
        let mut w = self.queue_waits.clone();
        if w.is_empty() {
            return 0.0;
        }
        w.sort_by(f64::total_cmp);
        w[w.len() / 2]
    }
}

impl Outcome {
    /// Refusals per 1,000 accepted pages.
    pub fn refusals_per_1000(&self) -> f64 {
        self.refused as f64 * 1_000.0 / self.accepted.max(1) as f64
    }
}

/// A request on its way.
struct Pending {
    answer_at: f64,
    host: usize,
    /// The machine its send was booked on: its own, or its pooled group's pacer.
    booked: usize,
    sent: f64,
    feedback: Feedback,
}

/// Crawl `world` for `duration_ms` with machines of `params` (its concurrency and start
/// rate from the world). `audit` collects every machine's changes with the host's index.
pub fn run(world: &World, params: &Params, duration_ms: f64) -> Outcome {
    run_audited(world, params, duration_ms, &mut Vec::new())
}

/// [`run`], with the machines' audit records.
pub fn run_audited(
    world: &World,
    params: &Params,
    duration_ms: f64,
    audit: &mut Vec<(usize, super::Change)>,
) -> Outcome {
    let mut params = params.clone();
    params.concurrency = world.concurrency;
    params.start_rate = world.start_rate;
    let n = world.hosts.max(1) as usize;
    let mut machines: Vec<HostMachine> = (0..n)
        .map(|_| HostMachine::new(params.clone(), 0.0))
        .collect();
    // The frontier's limiter groups, by the same rules: names of one site from the start,
    // other sites on one address on evidence; a group a refusal reached paced as one.
    let mut groups = super::LimiterGroups::default();
    for i in 0..n {
        let spec = world.name(i);
        groups.enter(
            i,
            &format!("site{}.test", spec.site),
            &[format!("address{}", spec.address)],
            (params.concurrency, params.max_rate),
        );
    }
    let mut name_in_flight = vec![0u32; n];
    let mut rng = Rng::new(world.seed.wrapping_mul(31).wrapping_add(7));
    let mut limiters: Vec<Limiter> = std::iter::once(world.limiter.clone())
        .chain(world.other_limiters.iter().cloned())
        .collect();
    let mut changed = world.change.is_none();
    let mut out = Outcome::default();
    let mut pending: Vec<Pending> = Vec::new();
    // The waits the server announced (to any host name of the limiter): which limiter,
    // when the client read the announcement, and until when it asked to wait. A request
    // sent before the announcement could be read is not inside it, whenever it arrives.
    let mut holds: Vec<(usize, f64, f64)> = Vec::new();
    let mut last_arrival = f64::NEG_INFINITY;
    let mut accepted_at: Vec<f64> = Vec::new();
    let mut accepted_by_name: Vec<Vec<f64>> = vec![Vec::new(); n];
    let mut t = 0.0;
    let mut skipped = vec![false; n];
    // Server worlds: when each worker is free again, and whether each host name has read
    // its robots.txt (its first send).
    let mut busy: Vec<f64> = vec![0.0; world.server.map_or(0, |s| s.workers.max(1) as usize)];
    let mut robots_read = vec![world.server.is_none(); n];
    for _ in 0..50_000_000u64 {
        let next_answer = pending
            .iter()
            .map(|p| p.answer_at)
            .fold(f64::INFINITY, f64::min);
        // As the frontier does: a name of a pooled group sends when the group's pacer has a
        // slot and room, its own cap has room, and its own `max_rate` gap has passed; the
        // name that waited longest goes first.
        let (host, send_at, _) = (0..n)
            .filter(|&i| !skipped[i])
            .filter_map(|i| {
                let Some(p) = groups.pacer(i) else {
                    let m = &machines[i];
                    return m
                        .has_room()
                        .then(|| (i, m.ready_at().max(t), f64::NEG_INFINITY));
                };
                let own_cap = groups.caps(i).map_or(1, |c| c.0);
                if skipped[p] || !machines[p].has_room() || name_in_flight[i] >= own_cap {
                    return None;
                }
                let ready = machines[p]
                    .ready_at()
                    .max(machines[i].state().hold_until)
                    .max(groups.own_floor(i));
                Some((
                    i,
                    ready.max(t),
                    groups.sent_at(i).unwrap_or(f64::NEG_INFINITY),
                ))
            })
            .fold((usize::MAX, f64::INFINITY, f64::INFINITY), |a, b| {
                if (b.1, b.2) < (a.1, a.2) { b } else { a }
            });
        if send_at.min(next_answer) >= duration_ms {
            break;
        }
        if send_at <= next_answer {
            t = send_at;
            let booked = groups.pacer(host).unwrap_or(host);
            machines[booked].on_send(t);
            name_in_flight[host] += 1;
            groups.sent(host, t);
            let lim = world.name(host).limiter.min(limiters.len() - 1);
            if !changed
                && let Some((at, factor)) = world.change
                && t >= at
            {
                limiters[0].scale(factor);
                changed = true;
            }
            let mut arrival = t + 0.3 + rng.unit() * world.transit_ms;
            if world.stall.0 > 0.0 && rng.chance(world.stall.0) {
                arrival += rng.unit() * world.stall.1;
            }
            let arrival = arrival.max(last_arrival);
            last_arrival = arrival;
            out.sent += 1;
            let server_t = arrival + world.phase;
            holds.retain(|&(_, _, until)| until > t);
            if holds
                .iter()
                .any(|&(l, known, until)| l == lim && known <= t && arrival < until)
            {
                out.violations += 1;
            }
            let mut fb = Feedback {
                sent: true,
                ..Default::default()
            };
            let mut latency = world.latency.base_ms + rng.unit() * world.latency.jitter_ms;
            if let Some(r) = world.latency.ramp
                && t >= r.start
                && t < r.end
            {
                let up = ((t - r.start) / r.rise.max(1.0)).min(1.0);
                latency += (r.peak_ms - world.latency.base_ms) * up;
            }
            latency += world.latency.per_in_flight_ms * pending.len() as f64;
            if world.server.is_some() && !robots_read[host] {
                // robots.txt: a static file, answered at once beside the workers.
                robots_read[host] = true;
                fb.status = Some(200);
                fb.cheap = true;
                fb.latency = Duration::from_secs_f64(latency.max(0.0) / 1e3);
                pending.push(Pending {
                    answer_at: arrival + latency,
                    host,
                    booked,
                    sent: t,
                    feedback: fb,
                });
                continue;
            }
            if let Some(server) = world.server {
                let mut service =
                    server.service_ms * (1.0 + server.jitter * (2.0 * rng.unit() - 1.0));
                if let Some((at, factor)) = server.change
                    && arrival >= at
                {
                    service *= factor;
                }
                let (w, free) = busy
                    .iter()
                    .copied()
                    .enumerate()
                    .fold((0, f64::INFINITY), |a, b| if b.1 < a.1 { b } else { a });
                let start = free.max(arrival);
                busy[w] = start + service;
                latency += start - arrival + service;
                if t >= duration_ms / 2.0 {
                    out.queue_waits.push(start - arrival);
                }
            }
            let in_storm = world
                .storm
                .is_some_and(|s| arrival >= s.start && arrival < s.end);
            if in_storm {
                out.in_storm += 1;
            }
            if rng.chance(world.refused_conn) {
                fb.failure = Some(FailureKind::Connection);
                latency = 1.0;
            } else if rng.chance(world.timeouts) {
                fb.failure = Some(FailureKind::Timeout);
                latency = TIMEOUT_MS;
            } else {
                let counted = world.counted_share >= 1.0 || rng.chance(world.counted_share);
                let adm = if counted {
                    limiters[lim].admit(server_t)
                } else {
                    Admission {
                        ok: true,
                        reading: None,
                        delay_ms: 0.0,
                    }
                };
                latency += adm.delay_ms;
                // An exhausted quota announces a wait (its reset, as sent).
                if let Some(rd) = adm.reading.filter(|r| r.remaining == 0)
                    && let Some(reset) = rd.reset
                {
                    holds.push((
                        lim,
                        arrival + latency,
                        arrival + reset.as_secs_f64() * 1_000.0,
                    ));
                }
                fb.rate_limit = adm.reading;
                if !adm.ok {
                    fb.status = Some(429);
                    out.refused += 1;
                    out.refused_at.push(arrival + latency);
                    if changed && world.change.is_some() {
                        out.refused_after_change += 1;
                    }
                    let answer = arrival + latency;
                    let wait = match (&limiters[lim], world.retry_after, adm.reading) {
                        (Limiter::Gateway { .. }, _, Some(r)) => {
                            r.reset.map(|d| d.as_secs_f64() * 1e3)
                        }
                        (_, RetryAfter::Absent, _) => None,
                        (_, RetryAfter::Zero, _) => Some(0.0),
                        (_, RetryAfter::Secs(s), _) => Some(s * 1e3),
                        (_, RetryAfter::Date(s), _) => {
                            // The date is whole seconds; read against a `Date` header
                            // that is whole seconds too.
                            let end = ((answer + s * 1e3) / 1e3).floor() * 1e3;
                            holds.push((lim, answer, end));
                            Some((end - (answer / 1e3).floor() * 1e3).max(0.0))
                        }
                    };
                    if let Some(w) = wait {
                        fb.retry_after = Some(Duration::from_secs_f64(w / 1e3));
                        holds.push((lim, answer, answer + w));
                    }
                } else if in_storm {
                    fb.status = Some(500);
                    fb.failure = Some(FailureKind::Status);
                } else {
                    fb.status = Some(200);
                    out.accepted += 1;
                    accepted_at.push(t);
                    accepted_by_name[host].push(t);
                }
            }
            fb.latency = Duration::from_secs_f64(latency.max(0.0) / 1e3);
            pending.push(Pending {
                answer_at: arrival + latency,
                host,
                booked,
                sent: t,
                feedback: fb,
            });
        } else {
            let i = pending
                .iter()
                .position(|p| p.answer_at == next_answer)
                .unwrap_or(0);
            let p = pending.swap_remove(i);
            t = p.answer_at;
            // A busy client reads its clock late: the send time it dates is off a little.
            let late = (rng.unit() - 0.5) * world.transit_ms;
            let q = p.booked;
            name_in_flight[p.host] = name_in_flight[p.host].saturating_sub(1);
            let pooled = groups.pacer(p.host) == Some(q);
            if let Some(rl) = p.feedback.rate_limit.filter(|_| !pooled) {
                // A quota is shared by the names of the group that sent within its window.
                let window = rl
                    .window
                    .or(rl.reset)
                    .map_or(60_000.0, |w| w.as_secs_f64() * 1e3);
                let sharers = groups.active_sharers(p.host, window, t);
                machines[q].set_sharers(sharers);
            }
            let before = machines[q].state().hold_until;
            let verdict = machines[q].on_feedback_sent(&p.feedback, p.sent + late, t);
            let held = machines[q].state().hold_until;
            let refusal = matches!(p.feedback.status, Some(429 | 503));
            // The evidence joins groups, as the frontier does.
            let mut joins = 0;
            if refusal {
                joins += groups
                    .refused(p.host, |s| machines[s].state().hold_until > t)
                    .len();
            }
            if let Some(rl) = p.feedback.rate_limit
                && let (Some(limit), Some(reset)) = (rl.limit, rl.reset)
            {
                joins += groups
                    .quota(p.host, limit, t + reset.as_secs_f64() * 1e3)
                    .len();
            }
            out.joins += joins as u64;
            // As the frontier does: a hold this answer placed, extended or asked for reaches
            // the rest of the group; a join aligns the joined names on the latest hold.
            // A name paced apart (it left its group's pool) shares the hold, not the
            // refusal: its limiter is its own. A spent quota (no refusal) is no wait for a
            // name announcing another limit: its quota is its own.
            let spread = (held > before || super::asks_hold(&p.feedback)) && held > t;
            if spread {
                for &j in groups.group(p.host).to_vec().iter() {
                    if j != q && (refusal || !groups.quota_apart(p.host, j)) {
                        let r = refusal && !groups.paced_apart(p.host, j);
                        machines[j].share_hold(held, t, r);
                    }
                }
            }
            if joins > 0 {
                let group_held = groups
                    .group(p.host)
                    .iter()
                    .map(|&j| machines[j].state().hold_until)
                    .fold(held, f64::max);
                for &j in groups.group(p.host).to_vec().iter() {
                    let r = refusal && !groups.paced_apart(p.host, j);
                    machines[j].share_hold(group_held, t, r);
                }
            }
            // A refusal that reached the group pools it, as the frontier does: the machine
            // that learned it paces every name from now on, their rates added to its own.
            if refusal || spread {
                let absorbed = groups.pool(q, t);
                if groups.pacer(q) == Some(q) {
                    let (c, r) = groups.pool_caps(q);
                    machines[q].set_pool(c, r);
                    let others: Vec<HostMachine> =
                        absorbed.iter().map(|&j| machines[j].clone()).collect();
                    machines[q].absorb(&others, t);
                }
            }
            // A pool's refusals that keep falling on one name say its limiter is its own:
            // it leaves the pool with its part of the pace, as the frontier does.
            if refusal && let Some(l) = groups.pool_refused(p.host) {
                let pool = machines[l.pacer].clone();
                // Every answer of the leaving name goes to its own machine from now on; the
                // pool's other answers go to the successor.
                let mine = name_in_flight[l.name];
                let moved = pending
                    .iter()
                    .filter(|x| x.host == l.name && x.booked == l.pacer)
                    .count() as u32;
                for x in &mut pending {
                    if x.booked == l.pacer || x.host == l.name {
                        x.booked = if x.host == l.name {
                            l.name
                        } else {
                            l.successor.unwrap_or(l.name)
                        };
                    }
                }
                machines[l.name] = HostMachine::adopted(
                    params.clone(),
                    &pool.share_of(l.share, mine, t),
                    0.0,
                    None,
                );
                if let Some(s) = l.successor {
                    let left = pool.state().in_flight.saturating_sub(moved);
                    let mut rest = pool.share_of(1.0 - l.share, left, t);
                    rest.forget_limit(t);
                    machines[s] =
                        HostMachine::adopted(params.clone(), &rest, 0.0, Some(groups.pool_caps(s)));
                }
                out.leaves += 1;
            }
            if let Some(pc) = groups.pacer(p.host) {
                // Joins may have brought names in: the caps are the live names' sums.
                let (c, r) = groups.pool_caps(pc);
                machines[pc].set_pool(c, r);
            }
            for (j, m) in machines.iter_mut().enumerate() {
                audit.extend(m.take_audit().into_iter().map(|c| (j, c)));
            }
            if let Verdict::Skip(_) = verdict {
                // The frontier drops a skipped host's queue; the others go on (a pooled
                // group's machine gave up on the group's limiter: all its names).
                out.skipped = true;
                skipped[p.host] = true;
                if groups.pacer(p.host) == Some(q) {
                    for j in groups.pool_members(p.host) {
                        skipped[j] = true;
                    }
                }
            }
        }
    }
    let rate_between = |a: f64, b: f64| {
        if b <= a {
            return 0.0;
        }
        accepted_at.iter().filter(|&&s| s >= a && s < b).count() as f64 * 1_000.0 / (b - a)
    };
    out.steady = rate_between(duration_ms / 2.0, duration_ms);
    out.steady_by_name = accepted_by_name
        .iter()
        .map(|a| {
            let half = duration_ms / 2.0;
            a.iter().filter(|&&s| s >= half).count() as f64 * 1_000.0 / half.max(1.0)
        })
        .collect();
    if let Some(st) = world.storm {
        let (a, b) = (
            st.start.max(duration_ms / 2.0),
            (st.end + 60_000.0).min(duration_ms),
        );
        if b > a {
            let half = duration_ms / 2.0;
            let total = out.steady * half / 1_000.0;
            let lost = rate_between(a, b) * (b - a) / 1_000.0;
            out.steady = (total - lost) * 1_000.0 / (half - (b - a)).max(1.0);
        }
    }
    if let Some((at, _)) = world.change {
        out.before_change = rate_between(at / 2.0, at);
    }
    if let Some(s) = world.storm {
        out.before_storm = rate_between(s.start - 120_000.0, s.start);
        out.after_storm = rate_between(s.end + 60_000.0, s.end + 120_000.0);
    }
    if let Some(r) = world.latency.ramp {
        let peak = rate_between(r.end - (r.end - r.start - r.rise) / 5.0, r.end);
        out.ramp_rates = Some((rate_between(r.start - 120_000.0, r.start), peak));
    }
    out.per_minute = (0..(duration_ms / 60_000.0).ceil() as usize)
        .map(|m| rate_between(m as f64 * 60_000.0, (m as f64 + 1.0) * 60_000.0))
        .collect();
    out
}
