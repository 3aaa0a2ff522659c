//! The lab's limiter emulations against the real servers, verdict by verdict.
//!
//! ```text
//! cargo bench --bench limiters              # every config (about 3 minutes)
//! cargo bench --bench limiters -- nginx     # configs whose name contains "nginx"
//! ```
//!
//! For each config a real server (nginx `limit_req`, or HAProxy with a stick table in front
//! of an open lab) and a lab running the equivalent scenario get the SAME arrival schedule:
//! every request is sent to both at the same planned instant. Schedules: constant rate at
//! 0.8x, 1x, 1.2x and 2x the limit, an on/off bursty client, and a Poisson client (fixed
//! seed), each a few hundred requests at most. Printed per schedule: accepted/refused on each
//! side and the share of requests whose verdicts agree. A server that is not installed is
//! skipped with a message.

#[allow(dead_code)]
#[path = "support/real.rs"]
mod real;

use std::time::Duration;

use crawler_lab::{Lab, LimitReqDelay, RetryAfter, Scenario};
use real::{Content, HaproxyLimit, NginxLimit, RealServer};

/// The limit every config allows, requests per second.
const RATE: f64 = 5.0;
/// HAProxy's counter period, seconds.
const PERIOD: u64 = 10;

struct Schedule {
    name: &'static str,
    /// Planned send times, ms from the start.
    at_ms: Vec<u64>,
}

/// splitmix64: a fixed-seed generator, so the Poisson client is the same on every run.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn schedules() -> Vec<Schedule> {
    let constant = |name, factor: f64, n: u64| Schedule {
        name,
        at_ms: (0..n)
            .map(|i| (i as f64 * 1000.0 / (RATE * factor)).round() as u64)
            .collect(),
    };
    // On/off: 25 requests at 4x the limit, then 4 s of silence, six times.
    let mut bursty = Vec::new();
    for b in 0..6u64 {
        let start = b * (1250 + 4000);
        bursty.extend((0..25u64).map(|i| start + i * 50));
    }
    // Poisson arrivals averaging 1.2x the limit.
    let mut rng = Rng(42);
    let mut t = 0.0;
    let poisson = (0..150)
        .map(|_| {
            let at = t;
            t += -(1.0 - rng.next_f64()).ln() * 1000.0 / (RATE * 1.2);
            at.round() as u64
        })
        .collect();
    vec![
        constant("constant 0.8x", 0.8, 120),
        constant("constant 1.0x", 1.0, 120),
        constant("constant 1.2x", 1.2, 120),
        constant("constant 2x", 2.0, 150),
        Schedule {
            name: "bursty on/off (25 at 4x, 4 s off)",
            at_ms: bursty,
        },
        Schedule {
            name: "Poisson 1.2x (seed 42)",
            at_ms: poisson,
        },
    ]
}

#[derive(Clone, Copy)]
enum Real {
    Nginx(NginxLimit),
    Haproxy(HaproxyLimit),
}

struct Config {
    name: String,
    real: Real,
    lab: Scenario,
}

fn configs() -> Vec<Config> {
    let mut out = Vec::new();
    for (burst, nodelay) in [(0, true), (5, true), (20, true), (5, false)] {
        let mode = if nodelay { " nodelay" } else { "" };
        out.push(Config {
            name: format!("nginx limit_req rate=5r/s burst={burst}{mode}"),
            real: Real::Nginx(NginxLimit {
                rate: RATE as u32,
                burst,
                nodelay,
                retry_after: Some(30),
            }),
            lab: Scenario::nginx_limit_req(
                RATE,
                burst,
                if nodelay {
                    LimitReqDelay::NoDelay
                } else {
                    LimitReqDelay::Delay(0)
                },
            )
            .retry_after(RetryAfter::Seconds(30)),
        });
    }
    let max = (RATE * PERIOD as f64) as u32;
    out.push(Config {
        name: format!("haproxy http_req_rate({PERIOD}s) gt {max}"),
        real: Real::Haproxy(HaproxyLimit {
            max,
            period_secs: PERIOD,
            retry_after: Some(30),
        }),
        lab: Scenario::haproxy_req_rate(max, Duration::from_secs(PERIOD))
            .retry_after(RetryAfter::Seconds(30)),
    });
    out
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("a plain-HTTP client builds")
}

/// The share of the real server's logged verdicts that the lab's emulation reproduces when
/// it is fed the arrival times the real server logged (its own clock, to the ms).
fn replay_agreement(cfg: &Config, log: &[real::Logged]) -> (usize, usize) {
    let Some(limit) = cfg.lab.rate_limit() else {
        return (0, 0);
    };
    let Some(t0) = log.first().map(|l| l.at_ms) else {
        return (0, 0);
    };
    let arrivals: Vec<Duration> = log
        .iter()
        .map(|l| Duration::from_millis(l.at_ms - t0))
        .collect();
    let verdicts = limit.verdicts(&arrivals);
    let agree = log
        .iter()
        .zip(&verdicts)
        .filter(|(l, v)| (l.status == 200) == **v)
        .count();
    (agree, log.len())
}

/// Sends the schedule to both URLs; returns each request's (real, lab) status, 0 on error.
async fn drive(real_url: String, lab_url: String, s: &Schedule) -> Vec<(u16, u16)> {
    let (a, b) = (client(), client());
    // Warm one connection to each, outside the schedule, so the first request does not pay
    // a connect the other side does not: through a path neither limiter sees.
    let start = tokio::time::Instant::now() + Duration::from_millis(200);
    let mut tasks = Vec::with_capacity(s.at_ms.len());
    for &at in &s.at_ms {
        let when = start + Duration::from_millis(at);
        let (a, b) = (a.clone(), b.clone());
        let (ra, rb) = (real_url.clone(), lab_url.clone());
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(when).await;
            let (x, y) = tokio::join!(a.get(ra).send(), b.get(rb).send());
            let status =
                |r: reqwest::Result<reqwest::Response>| r.map_or(0, |r| r.status().as_u16());
            (status(x), status(y))
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.unwrap_or((0, 0)));
    }
    out
}

struct Row {
    config: String,
    schedule: &'static str,
    n: usize,
    real_ok: usize,
    lab_ok: usize,
    agree: usize,
    replay_agree: usize,
    replay_n: usize,
}

async fn run_one(cfg: &Config, s: &Schedule) -> Result<Row, String> {
    let lab = Lab::builder()
        .books(100)
        .scenario(cfg.lab.clone())
        .start()
        .await
        .map_err(|e| e.to_string())?;
    let (server, backend, real_path) = match cfg.real {
        Real::Nginx(l) => (RealServer::nginx(l, &Content::Static)?, None, "/index.html"),
        Real::Haproxy(l) => {
            let backend = Lab::builder()
                .books(100)
                .start()
                .await
                .map_err(|e| e.to_string())?;
            let server = RealServer::haproxy(l, backend.addr())?;
            (server, Some(backend), "/catalogue/book-1.html")
        }
    };
    let got = drive(
        format!("{}{real_path}", server.url()),
        lab.url_for("/catalogue/book-1.html"),
        s,
    )
    .await;
    // Let the last log lines reach the file.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (replay_agree, replay_n) = replay_agreement(cfg, &server.log());
    lab.shutdown().await;
    if let Some(b) = backend {
        b.shutdown().await;
    }
    let ok = |s: u16| s == 200;
    Ok(Row {
        config: cfg.name.clone(),
        schedule: s.name,
        n: got.len(),
        real_ok: got.iter().filter(|g| ok(g.0)).count(),
        lab_ok: got.iter().filter(|g| ok(g.1)).count(),
        agree: got.iter().filter(|g| ok(g.0) == ok(g.1)).count(),
        replay_agree,
        replay_n,
    })
}

#[tokio::main]
async fn main() {
    // reqwest is built without a TLS provider; these plain-HTTP clients still need one set.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let have_nginx = real::which("nginx").is_some();
    let have_haproxy = real::which("haproxy").is_some();
    if !have_nginx {
        println!("nginx not found on PATH: skipping the nginx configs (apt-get install nginx)");
    }
    if !have_haproxy {
        println!(
            "haproxy not found on PATH: skipping the HAProxy config (apt-get install haproxy)"
        );
    }
    println!(
        "| config | schedule | requests | real accepted / refused | lab accepted / refused | verdicts agree (live) | agree (replayed on the real log's times) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    let (mut all, mut agree) = (0, 0);
    let mut replay = (0, 0);
    for cfg in configs() {
        if !filter.is_empty() && !filter.iter().any(|f| cfg.name.contains(f.as_str())) {
            continue;
        }
        match cfg.real {
            Real::Nginx(_) if !have_nginx => continue,
            Real::Haproxy(_) if !have_haproxy => continue,
            _ => {}
        }
        // The schedules of one config run at once, each against its own pair of servers.
        let runs: Vec<_> = schedules()
            .into_iter()
            .map(|s| {
                let cfg = Config {
                    name: cfg.name.clone(),
                    real: cfg.real,
                    lab: cfg.lab.clone(),
                };
                tokio::spawn(async move { run_one(&cfg, &s).await })
            })
            .collect();
        for r in runs {
            match r.await {
                Ok(Ok(row)) => {
                    all += row.n;
                    agree += row.agree;
                    replay.0 += row.replay_agree;
                    replay.1 += row.replay_n;
                    println!(
                        "| {} | {} | {} | {} / {} | {} / {} | {:.1}% | {:.1}% |",
                        row.config,
                        row.schedule,
                        row.n,
                        row.real_ok,
                        row.n - row.real_ok,
                        row.lab_ok,
                        row.n - row.lab_ok,
                        100.0 * row.agree as f64 / row.n.max(1) as f64,
                        100.0 * row.replay_agree as f64 / row.replay_n.max(1) as f64
                    );
                }
                Ok(Err(e)) => println!("| {} | error: {e} | | | | |", cfg.name),
                Err(e) => println!("| {} | panicked: {e} | | | | |", cfg.name),
            }
        }
    }
    if all > 0 {
        println!(
            "\noverall: {agree} of {all} verdicts agree ({:.1}%)",
            100.0 * agree as f64 / all as f64
        );
        println!(
            "replayed on the real servers' logged arrival times: {} of {} agree ({:.1}%)",
            replay.0,
            replay.1,
            100.0 * replay.0 as f64 / replay.1.max(1) as f64
        );
    }
}
