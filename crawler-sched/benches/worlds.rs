//! The politeness machine judged on fresh random worlds (`crawler_sched::politeness::worlds`):
//! `WORLDS` draws (default 240) of `MINUTES`-long crawls (default 30) with default settings,
//! new seeds on every run (printed; `WORLDS_BASE=N` repeats a run, `POLITENESS_SEED=N` runs
//! one draw with its audit), then the distribution of each goal of issue 29, overall and
//! per limiter family, and the focused families: a 5xx storm, a latency ramp, a limit that
//! doubles or halves, one limiter behind several host names.
//!
//! `cargo bench -p crawler-sched --bench worlds`

use std::time::Instant;

use crawler_core::Settings;
use crawler_sched::politeness::worlds::{self, Latency, Limiter, Ramp, RetryAfter, Storm, World};
use crawler_sched::politeness::{HostMachine, Params};

fn env<T: std::str::FromStr>(key: &str) -> Option<T> {
    std::env::var(key).ok().and_then(|s| s.parse().ok())
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * p).round() as usize;
    v[i]
}

fn main() {
    let params = Params::from_settings(&Settings::default());
    let n: u64 = env("WORLDS").unwrap_or(240);
    let minutes: f64 = env("MINUTES").unwrap_or(30.0);
    let duration = minutes * 60_000.0;
    if let Some(seed) = env::<u64>("POLITENESS_SEED") {
        let world = World::draw(seed, duration);
        let mut audit = Vec::new();
        let o = worlds::run_audited(&world, &params, duration, &mut audit);
        for (h, a) in &audit {
            println!(
                "{:>9.3}s host {h} {:<14} {:?}",
                a.at / 1e3,
                a.trigger.as_str(),
                a.what
            );
        }
        println!(
            "{world}\n{o:?}\nattainable {:.2}",
            world.attainable(&params)
        );
        return;
    }
    if std::env::var("CALIBRATE").is_ok() {
        calibrate(&params, minutes);
        return;
    }
    let base: u64 = env("WORLDS_BASE").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    println!(
        "worlds: {n} draws of {minutes} minutes, seeds {base}..{}",
        base + n
    );
    let started = Instant::now();
    struct Row {
        world: World,
        steady: f64,
        refusals_per_1000: f64,
        refused: u64,
        violations: u64,
        headers: bool,
    }
    let mut rows = Vec::new();
    for k in 0..n {
        let world = World::draw(base + k, duration);
        let o = worlds::run(&world, &params, duration);
        let attainable = world.attainable(&params);
        rows.push(Row {
            headers: matches!(world.limiter, Limiter::Gateway { .. }),
            steady: o.steady / attainable,
            refusals_per_1000: o.refusals_per_1000(),
            refused: o.refused,
            violations: o.violations,
            world,
        });
    }
    let elapsed = started.elapsed();
    // DRAWS_LOG=FILE writes one line per draw (tab-separated: seed, family, steady % of the
    // attainable rate, refusals, refusals per 1,000 pages, over the refusal goal, the world),
    // for classifying the misses.
    if let Some(path) = std::env::var_os("DRAWS_LOG") {
        let lines: String = rows
            .iter()
            .map(|r| {
                let d = diagnose(&r.world, &params, duration);
                format!(
                    "{}\t{}\t{:.1}\t{}\t{:.2}\t{}\t{}\t{}\t{}\t{:.3}\t{:.1}\n",
                    r.world.seed,
                    r.world.family(),
                    r.steady * 100.0,
                    r.refused,
                    r.refusals_per_1000,
                    over_goal(&r.world, r.refused, r.refusals_per_1000),
                    d,
                    r.world,
                    r.world.concurrency,
                    r.world.attainable(&params),
                    r.world.latency.base_ms,
                )
            })
            .collect();
        if let Err(e) = std::fs::write(&path, lines) {
            eprintln!("DRAWS_LOG: {e}");
        }
    }
    let summary = |name: &str, rows: &[&Row]| {
        // The steady rate is judged where the limit did not double: after a doubling the
        // second half is the time the probes take to find it (its own goal, below).
        let mut steady: Vec<f64> = rows
            .iter()
            .filter(|r| r.world.change.is_none_or(|(_, f)| f < 1.0))
            .map(|r| r.steady * 100.0)
            .collect();
        let mut refusals: Vec<f64> = rows.iter().map(|r| r.refusals_per_1000).collect();
        let violations: u64 = rows.iter().map(|r| r.violations).sum();
        let over = rows
            .iter()
            .filter(|r| over_goal(&r.world, r.refused, r.refusals_per_1000))
            .count();
        println!(
            "| {name} | {} | {violations} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {over} |",
            rows.len(),
            pct(&mut steady, 0.0),
            pct(&mut steady, 0.05),
            pct(&mut steady, 0.5),
            steady.iter().filter(|&&s| s >= 90.0).count() as f64 * 100.0
                / steady.len().max(1) as f64,
            steady.iter().filter(|&&s| s >= 75.0).count() as f64 * 100.0
                / steady.len().max(1) as f64,
            pct(&mut refusals, 0.5),
            pct(&mut refusals, 0.95),
        );
    };
    println!(
        "| draws | n | requests inside holds | steady % min | p5 | median | share >= 90% | share >= 75% | refusals/1000 median | p95 | over the refusal goal |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    summary("all", &rows.iter().collect::<Vec<_>>());
    for fam in worlds::FAMILIES {
        summary(
            fam,
            &rows
                .iter()
                .filter(|r| r.world.family() == fam)
                .collect::<Vec<_>>(),
        );
    }
    summary(
        "several host names",
        &rows
            .iter()
            .filter(|r| r.world.hosts > 1)
            .collect::<Vec<_>>(),
    );
    summary(
        "limit changes",
        &rows
            .iter()
            .filter(|r| r.world.change.is_some())
            .collect::<Vec<_>>(),
    );
    let headers: Vec<&Row> = rows.iter().filter(|r| r.headers).collect();
    println!(
        "RateLimit headers: {} draws, {} with a refusal, {} at >= 97% with 0 refusals, worst steady {:.1}%",
        headers.len(),
        headers.iter().filter(|r| r.refused > 0).count(),
        headers
            .iter()
            .filter(|r| r.refused == 0 && r.steady >= 0.97)
            .count(),
        headers
            .iter()
            .map(|r| r.steady * 100.0)
            .fold(f64::INFINITY, f64::min)
    );
    let mut worst: Vec<&Row> = rows.iter().collect();
    worst.sort_by(|a, b| a.steady.total_cmp(&b.steady));
    println!("worst draws:");
    for r in worst.iter().take(env("WORST").unwrap_or(8)) {
        let mut audit = Vec::new();
        let o = worlds::run_audited(&r.world, &params, duration, &mut audit);
        let count = |name: &str| {
            audit
                .iter()
                .filter(|(_, a)| a.trigger.as_str() == name)
                .count()
        };
        println!(
            "  {:.1}% {} refusals: {} [429/503 {} latency {} probe {} failures {} holds {}; per minute {:?}]",
            r.steady * 100.0,
            r.refused,
            r.world,
            count("429") + count("503"),
            count("latency"),
            count("probe"),
            count("failures"),
            audit
                .iter()
                .filter(|(_, a)| matches!(a.what, crawler_sched::politeness::What::Hold { .. }))
                .count(),
            o.per_minute
                .iter()
                .map(|m| (m * 10.0).round() / 10.0)
                .collect::<Vec<_>>()
        );
    }
    println!("({:.2} s for {n} crawls)", elapsed.as_secs_f64());

    focused(&params, base);
    costs(&params);
}

/// Where a draw's second half went (for `DRAWS_LOG`), tab-separated: refusals in the first
/// and the second half, the share of the second half host 0 was held, the accepted rate
/// while not held against the attainable rate (%), the last rate set on host 0 against
/// the attainable rate (%), the longest hold (s), probes, latency cuts.
fn diagnose(world: &World, params: &Params, duration: f64) -> String {
    let mut audit = Vec::new();
    let o = worlds::run_audited(world, params, duration, &mut audit);
    let half = duration / 2.0;
    let r1 = o.refused_at.iter().filter(|&&t| t < half).count();
    let r2 = o.refused_at.len() - r1;
    // Host 0's holds, merged, within the second half.
    let mut spans: Vec<(f64, f64)> = audit
        .iter()
        .filter(|(h, _)| *h == 0)
        .filter_map(|(_, a)| match a.what {
            crawler_sched::politeness::What::Hold { until, .. } => Some((a.at, until)),
            _ => None,
        })
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut held, mut end) = (0.0, half);
    for (a, b) in spans {
        let (a, b) = (a.max(end), b.min(duration));
        if b > a {
            held += b - a;
            end = b;
        }
    }
    let attainable = world.attainable(params);
    let unheld = o.steady * half / (half - held).max(1.0) / attainable * 100.0;
    let last_rate = audit
        .iter()
        .rev()
        .filter(|(h, _)| *h == 0)
        .find_map(|(_, a)| match a.what {
            crawler_sched::politeness::What::Rate { new, .. } => Some(new),
            _ => None,
        })
        .unwrap_or(0.0);
    let longest = audit
        .iter()
        .filter_map(|(_, a)| match a.what {
            crawler_sched::politeness::What::Hold { wait_ms, .. } => Some(wait_ms),
            _ => None,
        })
        .fold(0.0, f64::max);
    let count = |name: &str| {
        audit
            .iter()
            .filter(|(_, a)| a.trigger.as_str() == name)
            .count()
    };
    format!(
        "{r1}\t{r2}\t{:.2}\t{unheld:.0}\t{:.0}\t{:.0}\t{}\t{}",
        held / half,
        last_rate * f64::from(world.hosts.max(1)) / attainable * 100.0,
        longest / 1e3,
        count("probe"),
        count("latency"),
    )
}

/// Whether a draw is over the refusal goal: more than 5 refusals where the limit is under
/// 2 r/s (a crawl of a few thousand pages), else more than 3 per 1,000 pages.
fn over_goal(world: &World, refused: u64, per_1000: f64) -> bool {
    if world.final_allowed() < 2.0 {
        refused > 5
    } else {
        per_1000 > 3.0
    }
}

/// The focused families, each on fresh draws of its free parameters.
fn focused(params: &Params, base: u64) {
    let mut rng = worlds::Rng::new(base ^ 0xfeed);
    let draws = 40;
    // A 60-second storm of 500s behind an open server at 1-10 r/s.
    let (mut inside, mut back) = (Vec::new(), Vec::new());
    for k in 0..draws {
        let rate = rng.log_range(1.0, 10.0);
        let mut w = World::plain(
            base + k,
            Limiter::nginx(rate * 4.0, 50, true),
            RetryAfter::Absent,
        );
        w.storm = Some(Storm {
            start: 600_000.0,
            end: 660_000.0,
        });
        w.latency.base_ms = rng.log_range(5.0, 300.0);
        let o = worlds::run(&w, params, 1_200_000.0);
        inside.push(o.in_storm as f64);
        back.push(100.0 * o.after_storm / o.before_storm.max(1e-9));
    }
    println!(
        "storm of 500s (60 s): requests during it median {:.0}, max {:.0}; second minute after it vs two minutes before: min {:.0}%, median {:.0}%",
        pct(&mut inside.clone(), 0.5),
        pct(&mut inside, 1.0),
        pct(&mut back.clone(), 0.0),
        pct(&mut back, 0.5)
    );
    // A latency ramp from 50 ms to 2 s at a fixed limit of 5 r/s.
    let mut ratio = Vec::new();
    for k in 0..draws {
        let mut w = World::plain(
            base + k,
            Limiter::nginx(5.0, 10, true),
            RetryAfter::Secs(30.0),
        );
        w.latency = Latency {
            base_ms: 50.0,
            jitter_ms: 20.0,
            per_in_flight_ms: 0.0,
            ramp: Some(Ramp {
                start: 600_000.0,
                rise: rng.range(30_000.0, 300_000.0),
                end: 1_200_000.0,
                peak_ms: 2_000.0,
            }),
        };
        let o = worlds::run(&w, params, 1_500_000.0);
        if let Some((before, peak)) = o.ramp_rates {
            ratio.push(100.0 * peak / before.max(1e-9));
        }
    }
    println!(
        "latency ramp 50 ms -> 2 s (the server's own level): rate at the peak against before, median {:.0}%, max {:.0}%",
        pct(&mut ratio.clone(), 0.5),
        pct(&mut ratio, 1.0)
    );
    // Pages that cost the server work (20 ms - 2 s on 1-16 workers) behind an instant
    // robots.txt, no rate limit: share of what the server can serve within the crawl's own
    // limits, and how long our pages wait in its queue where it has fewer workers than the
    // crawl may send at once.
    let (mut share, mut waits) = (Vec::new(), Vec::new());
    let server_draws = env("SERVER_DRAWS").unwrap_or(200);
    for k in 0..server_draws {
        let w = World::draw_server(base + k, 1_800_000.0);
        let o = worlds::run(&w, params, 1_800_000.0);
        share.push(100.0 * o.steady / w.attainable(params));
        if let Some(s) = w.server.filter(|s| w.concurrency > s.workers) {
            waits.push(100.0 * o.median_queue_wait() / s.final_service_ms());
        }
    }
    println!(
        "server family ({server_draws} draws): share of what the server serves within the crawl's limits min {:.0}%, p5 {:.0}%, median {:.0}%, draws >= 80% {}/{}; median queue wait over service time (more in flight allowed than workers, {} draws): median {:.0}%, p95 {:.0}%, max {:.0}%, under 50% in {}/{}",
        pct(&mut share.clone(), 0.0),
        pct(&mut share.clone(), 0.05),
        pct(&mut share.clone(), 0.5),
        share.iter().filter(|s| **s >= 80.0).count(),
        share.len(),
        waits.len(),
        pct(&mut waits.clone(), 0.5),
        pct(&mut waits.clone(), 0.95),
        pct(&mut waits.clone(), 1.0),
        waits.iter().filter(|w| **w < 50.0).count(),
        waits.len(),
    );
    // Host names sharing an address or a site (World::draw_shared): requests inside any
    // limiter's announced waits, joins made on evidence, and for unrelated sites on one CDN
    // address the worst open site's rate against what it can reach alone.
    let shared_draws = env("SHARED_DRAWS").unwrap_or(200);
    let mut by_shape: std::collections::BTreeMap<&str, (u64, u64, u64, Vec<f64>, u64)> =
        Default::default();
    for k in 0..shared_draws {
        let w = World::draw_shared(base + k, 1_800_000.0);
        let o = worlds::run(&w, params, 1_800_000.0);
        let shape = w.sharing().unwrap_or("one");
        let e = by_shape.entry(shape).or_default();
        e.0 += 1;
        e.1 += o.violations;
        e.2 += o.joins;
        e.4 += o.leaves;
        if shape == "cdn" {
            let open = w.attainable_open(params);
            let worst = o
                .steady_by_name
                .iter()
                .skip(1)
                .fold(f64::INFINITY, |a, &b| a.min(b));
            e.3.push(100.0 * worst / open);
        } else if shape == "site-separate-limits" {
            // Each name behind its own limiter: what each allows, added up.
            let open = w.attainable_open(params);
            let allowed: f64 = std::iter::once(&w.limiter)
                .chain(&w.other_limiters)
                .map(|l| l.allowed().min(open))
                .sum();
            e.3.push(100.0 * o.steady / allowed);
            // SHARED_LOG=1 lists each draw of this family.
            if std::env::var_os("SHARED_LOG").is_some() {
                println!(
                    "  {w}: {:.0}%, {} refused, {} left the pool; per name {:.2?} of {:.2?}",
                    100.0 * o.steady / allowed,
                    o.refused,
                    o.leaves,
                    o.steady_by_name,
                    std::iter::once(&w.limiter)
                        .chain(&w.other_limiters)
                        .map(|l| l.allowed().min(open))
                        .collect::<Vec<_>>()
                );
            }
        } else {
            e.3.push(100.0 * o.steady / w.attainable(params));
        }
    }
    for (shape, (n, violations, joins, mut share, leaves)) in by_shape {
        let what = if shape == "cdn" {
            "worst open site against alone"
        } else {
            "steady against allowed"
        };
        println!(
            "shared {shape} ({n} draws): requests inside holds {violations}, joins {joins}, names that left their pool {leaves}; {what}: min {:.0}%, p5 {:.0}%, median {:.0}%",
            pct(&mut share, 0.0),
            pct(&mut share, 0.05),
            pct(&mut share, 0.5),
        );
    }
    // The limit doubles or halves at 10 minutes, behind a bucket or a window.
    let (mut up, mut down) = (Vec::new(), Vec::new());
    for k in 0..draws {
        let rate = rng.log_range(0.5, 8.0);
        let limiter = match k % 3 {
            0 => Limiter::nginx(rate, rng.int(0, 30), true),
            1 => Limiter::sliding(rate, rng.log_range(5.0, 60.0).round(), true),
            _ => Limiter::fixed(rate, rng.log_range(5.0, 60.0).round()),
        };
        let ra = if rng.chance(0.5) {
            RetryAfter::Absent
        } else {
            RetryAfter::Secs(rng.log_range(1.0, 60.0).round())
        };
        let factor = if k % 2 == 0 { 2.0 } else { 0.5 };
        let mut w = World::plain(base + k, limiter, ra);
        w.change = Some((600_000.0, factor));
        let o = worlds::run(&w, params, 1_800_000.0);
        if factor > 1.0 {
            // Minutes after the change until a minute at 90% of the new limit.
            let new = w.final_allowed().min(params.max_rate);
            let found = o
                .per_minute
                .iter()
                .enumerate()
                .skip(10)
                .find(|(_, r)| **r >= 0.9 * new)
                .map_or(f64::INFINITY, |(m, _)| m as f64 - 10.0 + 1.0);
            up.push(found);
        } else {
            down.push(o.refused_after_change as f64);
        }
        // FOCUS_LOG=1 lists each draw of the limit-change family.
        if std::env::var_os("FOCUS_LOG").is_some() {
            println!(
                "  x{factor} {w}: {} refusals after the change, per minute {:?}",
                o.refused_after_change,
                o.per_minute
                    .iter()
                    .map(|r| (r * 10.0).round() / 10.0)
                    .collect::<Vec<_>>()
            );
        }
    }
    println!(
        "limit doubled: minutes to 90% of the new limit, median {:.0}, p90 {:.0}, within 20 min {}/{}",
        pct(&mut up.clone(), 0.5),
        pct(&mut up.clone(), 0.9),
        up.iter().filter(|m| **m <= 20.0).count(),
        up.len()
    );
    println!(
        "limit halved: refusals after the change, median {:.0}, max {:.0}, at most 6 in {}/{}",
        pct(&mut down.clone(), 0.5),
        pct(&mut down.clone(), 1.0),
        down.iter().filter(|r| **r <= 6.0).count(),
        down.len()
    );
}

/// CPU per refusal and the size of a host's state.
fn costs(params: &Params) {
    use crawler_core::Feedback;
    use std::time::Duration;
    let mut m = HostMachine::new(params.clone(), 0.0);
    let ok = Feedback {
        sent: true,
        status: Some(200),
        latency: Duration::from_millis(30),
        ..Default::default()
    };
    let refused = Feedback {
        sent: true,
        status: Some(429),
        latency: Duration::from_millis(30),
        ..Default::default()
    };
    let mut t = 0.0;
    for _ in 0..20_000 {
        t = m.ready_at().max(t);
        m.on_send(t);
        let _ = m.on_feedback(&ok, t + 30.0);
    }
    let n = 20_000;
    let started = Instant::now();
    for _ in 0..n {
        let mut c = m.clone();
        c.on_send(t);
        let _ = c.on_feedback(&refused, t + 30.0);
        std::hint::black_box(&c);
    }
    let per = started.elapsed().as_secs_f64() / n as f64;
    let json = serde_json::to_string(m.state()).unwrap_or_default();
    println!(
        "CPU per refusal {:.1} us (a clone included); host state {} bytes as JSON",
        per * 1e6,
        json.len()
    );
}

/// The cells of `cargo bench --bench politeness_matrix -- --real` (the lab and the real
/// nginx and HAProxy), simulated with the same parameters: default settings, loopback
/// latency, `MINUTES` long, the mean of ten draws of transit and latency. The three columns
/// side by side are the calibration of the judge (BENCHMARKS.md, "Calibration: the judge,
/// the lab and the real servers").
fn calibrate(params: &Params, minutes: f64) {
    let duration = minutes * 60_000.0;
    println!(
        "| cell (simulated, {minutes} min, mean of 10 draws) | requests | refusals | steady % |"
    );
    println!("|---|---|---|---|");
    for rate in [1.0, 3.0, 5.0] {
        for ra in [Some(30.0), None] {
            let kinds = [
                ("nginx-b0", Limiter::nginx(rate, 0, true)),
                ("nginx-b5", Limiter::nginx(rate, 5, true)),
                ("nginx-b20", Limiter::nginx(rate, 20, true)),
                ("haproxy", Limiter::sliding(rate, 10.0, true)),
                ("window", Limiter::fixed(rate, 10.0)),
            ];
            for (kind, limiter) in kinds {
                let (mut sent, mut refused, mut steady) = (0.0, 0.0, 0.0);
                for seed in 1..=10u64 {
                    let mut w = World::plain(
                        seed,
                        limiter.clone(),
                        ra.map_or(RetryAfter::Absent, RetryAfter::Secs),
                    );
                    w.concurrency = 1;
                    w.latency.base_ms = 2.0;
                    w.latency.jitter_ms = 4.0;
                    let o = worlds::run(&w, params, duration);
                    sent += o.sent as f64 / 10.0;
                    refused += o.refused as f64 / 10.0;
                    steady += o.steady / rate * 10.0;
                }
                let tag = if ra.is_some() { "ra30" } else { "nora" };
                println!("| {kind}-{rate}rps-{tag} | {sent:.0} | {refused:.1} | {steady:.0}% |");
            }
        }
    }
}
