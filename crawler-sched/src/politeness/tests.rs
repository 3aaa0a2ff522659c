//! The machine judged on virtual time.

use super::Params;
use super::sim::{self, Outcome};
use crawler_core::Settings;

/// Seeds of the transit and latency draws: a result from one draw is not a result.
const SEEDS: [u64; 3] = [7, 1_234, 99_991];

fn defaults() -> Params {
    Params::from_settings(&Settings::default())
}

/// An environment variable of the debugging and measuring aids, parsed.
fn env<T: std::str::FromStr>(key: &str) -> Option<T> {
    std::env::var(key).ok().and_then(|s| s.parse().ok())
}

/// The debugging aids' print of one run: every change the machine made, then the outcome.
fn print_audit(audit: &[super::Change], o: &sim::Outcome) {
    for a in audit {
        println!(
            "{:>9.3}s {:<14} {:?}",
            a.at / 1e3,
            a.trigger.as_str(),
            a.what
        );
    }
    println!("{o:?}");
}

/// `cells` on `draws` rough machines as the environment asks: `SPREAD` and `STALL_MS`
/// (default 4 and 10 ms), `VARY_START=1` to draw the start rate too.
fn rough_from_env(cells: Vec<sim::Cell>, draws: u64) -> Vec<sim::Cell> {
    sim::rough(
        cells,
        draws,
        env("SPREAD").unwrap_or(4.0),
        env("STALL_MS").unwrap_or(10.0),
        std::env::var("VARY_START").is_ok(),
    )
}

/// The default settings but for the start rate.
fn starting_at(start_rate: f64) -> Params {
    Params::from_settings(&Settings {
        start_rate,
        ..Settings::default()
    })
}

/// The matrix cells that `keep` picks, once per seed.
fn matrix_cells(keep: impl Fn(&sim::Cell) -> bool) -> Vec<sim::Cell> {
    sim::seeded(
        sim::matrix().into_iter().filter(|c| keep(c)).collect(),
        &SEEDS,
    )
}

fn table(cells: &[sim::Cell], minutes: f64) -> Vec<(String, f64, Outcome)> {
    let params = defaults();
    cells
        .iter()
        .map(|c| {
            let o = sim::run(c, &params, minutes * 60_000.0);
            println!(
                "| {} | {} | {} | {} | {:.1} | {} | {:.2} | {:.0}% |",
                c.name,
                o.sent,
                o.accepted,
                o.refused,
                o.refusals_per_1000(),
                o.violations,
                o.steady,
                100.0 * o.steady / c.allowed
            );
            (c.name.clone(), c.allowed, o)
        })
        .collect()
}

/// The politeness goal on virtual time: ten-minute crawls behind every limiter kind, rate
/// and Retry-After choice, with default settings, each with three draws of transit and
/// latency. No request ever lands inside an announced wait, in any cell, and every run
/// reaches a steady rate (the last half) of at least 90% of the allowed rate. At 3 and 5
/// r/s every run meets the whole goal: at most 3 refusals per 1,000 pages too. At 1 r/s a
/// ten-minute crawl is ~550 pages, so the two to five learning episodes are more than 3 per
/// 1,000 (see BENCHMARKS.md, "The refusal goal at 1 r/s"); there they are at most six. The
/// exception is a bucket with no burst: the refused gap tells its rate, so at 1 r/s its
/// runs meet the whole goal too (one refusal).
#[test]
fn matrix_of_limiters_reaches_ninety_percent_with_few_refusals() {
    let rows = table(&sim::seeded(sim::matrix(), &SEEDS), 10.0);
    let mut failed = Vec::new();
    for (name, allowed, o) in &rows {
        let whole_goal = *allowed >= 3.0 || name.starts_with("nginx b0 ");
        let refusals_ok = if whole_goal {
            o.refusals_per_1000() <= 3.0
        } else {
            o.refused <= 6
        };
        let rate_ok = o.steady >= 0.9 * allowed;
        if o.violations > 0 || !refusals_ok || !rate_ok || o.skipped {
            failed.push(name.clone());
        }
    }
    assert!(failed.is_empty(), "cells failing the goal: {failed:?}");
}

/// Once converged, at most one refusal per five minutes of steady crawling: an hour behind
/// each token bucket, refusals after the first ten minutes.
#[test]
fn converged_crawls_refuse_at_most_once_per_five_minutes() {
    let params = defaults();
    for cell in sim::matrix()
        .into_iter()
        .filter(|c| c.name.starts_with("nginx"))
    {
        let (_, audit) = sim::run_audited(&cell, &params, 3_600_000.0);
        let late = audit
            .iter()
            .filter(|a| {
                a.at > 600_000.0
                    && matches!(a.trigger, super::Trigger::Status429)
                    && matches!(a.what, super::What::Estimate { .. })
            })
            .count();
        assert!(
            late <= 10,
            "{}: {late} refusal episodes in 50 minutes",
            cell.name
        );
    }
}

/// RateLimit headers: no refusal and at least 97% of the quota, for windows of 60 s and of
/// 10 s (where a whole-second reset taken at face value costs a tenth of the window: the
/// machine narrows the window's edge from many readings, see `WindowEdge`).
#[test]
fn rate_limit_headers_mean_no_refusals_and_ninety_seven_percent() {
    let rows = table(&sim::seeded(sim::gateways(), &SEEDS), 10.0);
    for (name, allowed, o) in &rows {
        assert_eq!(o.refused, 0, "{name}");
        assert_eq!(
            o.violations, 0,
            "{name}: requests inside an announced reset"
        );
        assert!(o.steady >= 0.97 * allowed, "{name}: {:.2}", o.steady);
    }
}

/// Print one cell's audit (run with `--ignored --nocapture CELL=...`).
#[test]
#[ignore = "a debugging aid"]
fn audit_of_one_cell() {
    let want = std::env::var("CELL").unwrap_or_default();
    let seed = env("SEED").unwrap_or(7);
    let minutes: f64 = env("MINUTES").unwrap_or(10.0);
    // `START=r`: another start rate than the default.
    let params = env("START").map_or_else(defaults, starting_at);
    // `DRAW=n` (with `SPREAD`, `STALL_MS` and `VARY_START` as `rough_matrix` takes them):
    // the cell on the rough machine of that draw instead.
    let draw: u64 = env("DRAW").unwrap_or(0);
    let cells: Vec<sim::Cell> = if draw > 0 {
        let base = sim::matrix()
            .into_iter()
            .filter(|c| c.name == want)
            .collect();
        let mut rough = rough_from_env(base, draw);
        rough.drain(..rough.len().saturating_sub(1));
        rough
    } else {
        sim::seeded(
            sim::matrix().into_iter().chain(sim::gateways()).collect(),
            &[seed],
        )
    };
    for c in cells {
        if draw > 0 || c.name == format!("{want} #{seed}") {
            let params = c.rough.start_rate.map_or(params.clone(), starting_at);
            let (o, audit) = sim::run_audited(&c, &params, minutes * 60_000.0);
            print_audit(&audit, &o);
        }
    }
}

/// The lab's practice scenario: a token bucket of 50/s with a burst of 200 (four seconds'
/// worth), Retry-After 3 s, a crawl starting at 100/s with 8 in flight.
fn practice(transit_spread: f64) -> (Params, sim::Cell) {
    let params = Params::from_settings(&Settings {
        start_rate: 100.0,
        max_rate: 200.0,
        concurrency_per_host: 8,
        ..Settings::default()
    });
    let cell = sim::Cell {
        name: "practice".into(),
        limiter: sim::Limiter::nginx(50.0, 200),
        allowed: 50.0,
        retry_after: Some(3_000.0),
        transit_spread,
        seed: 7,
        rough: sim::Rough::default(),
    };
    (params, cell)
}

/// [`practice`] on rough machine number `draw` (stalls, latency spread; the bucket has
/// no window phase).
fn rough_practice(transit_spread: f64, draw: u64) -> (Params, sim::Cell) {
    let (params, mut cell) = practice(transit_spread);
    if let Some(last) = sim::rough(vec![cell.clone()], draw, 0.0, 10.0, false).last() {
        cell.rough = sim::Rough {
            phase: 0.0,
            ..last.rough
        };
    }
    cell.seed = draw;
    (params, cell)
}

/// `SPREAD` (2 ms), and `DRAW` for a rough machine.
#[test]
#[ignore = "a debugging aid"]
fn audit_of_the_practice_test() {
    let spread = env("SPREAD").unwrap_or(2.0);
    let (params, cell) = match env("DRAW") {
        Some(draw) => rough_practice(spread, draw),
        None => practice(spread),
    };
    let (o, audit) = sim::run_audited(&cell, &params, 60_000.0);
    print_audit(&audit, &o);
}

/// A large burst over a short hold, with the send times known only to tens of
/// milliseconds (a busy client): the token-bucket fit cannot narrow, and the recent
/// accepted rate is inflated by the burst. What the limiter accepted from the end of one
/// episode to the next (its refill) still pins the limit at the second episode, where the
/// recent rate alone took four episodes and stayed ~1.4x over.
#[test]
fn a_big_burst_and_a_noisy_clock_still_converge_in_two_episodes() {
    for spread in [2.0, 20.0, 40.0] {
        let (params, cell) = practice(spread);
        let (o, audit) = sim::run_audited(&cell, &params, 60_000.0);
        let episodes: Vec<f64> = audit
            .iter()
            .filter(|a| {
                matches!(a.trigger, super::Trigger::Status429)
                    && matches!(a.what, super::What::Estimate { .. })
            })
            .map(|a| a.at)
            .collect();
        assert_eq!(o.violations, 0, "spread {spread}");
        assert!(
            episodes.len() <= 2,
            "spread {spread}: episodes at {episodes:?}"
        );
        assert!(
            (0.85 * 50.0..=50.0).contains(&o.steady),
            "spread {spread}: steady {:.1}",
            o.steady
        );
    }
}

/// The practice scenario on rough machines: with tens of requests per second in flight,
/// the arrival jitter is half a gap and the send times the answers carry are read late.
/// Every run still learns the limit in at most three episodes (two in all but one run in a
/// hundred) and then keeps close to it.
/// A bucket fit with no burst blamed the refusals on jitter and kept the refused pace (an
/// episode every few seconds, one run in twenty), and a refusal dated just after its
/// episode's cut halved the rate a second time (a fifth under the limit for half a minute).
/// `DRAWS` sets the draws per spread (30).
#[test]
fn the_practice_scenario_converges_on_rough_machines() {
    let draws = env("DRAWS").unwrap_or(30u64);
    let (mut runs, mut three, mut lowest) = (0, 0, f64::INFINITY);
    let mut misses = Vec::new();
    for spread in [2.0, 5.0, 10.0, 20.0, 40.0] {
        for draw in 1..=draws {
            let (params, cell) = rough_practice(spread, draw);
            let (o, audit) = sim::run_audited(&cell, &params, 60_000.0);
            let episodes = audit
                .iter()
                .filter(|a| {
                    matches!(a.trigger, super::Trigger::Status429)
                        && matches!(a.what, super::What::Estimate { .. })
                })
                .count();
            runs += 1;
            three += usize::from(episodes == 3);
            lowest = lowest.min(o.steady);
            if o.violations > 0 || episodes > 3 || !(0.8 * 50.0..=50.0).contains(&o.steady) {
                misses.push(format!(
                    "spread {spread} draw {draw}: {} violations, {episodes} episodes, {:.1}/s",
                    o.violations, o.steady
                ));
            }
        }
    }
    println!("{runs} runs: {three} with a third episode, lowest steady {lowest:.1}/s");
    assert!(misses.is_empty(), "{misses:#?}");
    // A first fit can name a bucket with no burst just under the refused pace, and the
    // next episode the accepted rate, before the refill names the truth: rare.
    assert!(
        three * 100 <= runs,
        "{three} of {runs} runs took a third episode"
    );
}

/// Start conditions vary too: starting at half, three times and ten times the default
/// (for a host rule's start rate, say), every token-bucket and window cell at 3 and 5 r/s
/// stays free of violations and at 75% or more of the allowed rate. (The weakest: starting
/// at 10 r/s into HAProxy's counter, which counts the refusals of the overshoot too: 77%.)
#[test]
fn start_conditions_do_not_change_the_outcome() {
    for start in [0.5, 3.0, 10.0] {
        let params = starting_at(start);
        for cell in sim::matrix().into_iter().filter(|c| c.allowed >= 3.0) {
            let o = sim::run(&cell, &params, 600_000.0);
            println!(
                "start {start}: {} steady {:.0}% refused {}",
                cell.name,
                100.0 * o.steady / cell.allowed,
                o.refused
            );
            assert_eq!(o.violations, 0, "start {start}: {}", cell.name);
            assert!(
                o.steady >= 0.75 * cell.allowed,
                "start {start}: {} at {:.2}",
                cell.name,
                o.steady
            );
        }
    }
}

/// Settled just under the lowest refused rate, a calm period cannot raise the rate (a probe
/// stays under a refused rate), so no probe is made; a refusal at that rate is then an
/// ordinary one that lowers the rate, not a "failed probe" that returns to the same rate.
#[test]
fn a_probe_with_no_room_under_the_ceiling_is_not_a_probe() {
    use super::{HostMachine, Phase};
    use crawler_core::Feedback;
    use std::time::Duration;

    let params = defaults();
    let mut state = HostMachine::new(params.clone(), 0.0).state().clone();
    state.phase = Phase::Settled;
    state.confident = true;
    state.rate = 0.99;
    state.estimate = Some(0.99 / 0.95);
    state.ceiling = Some(1.0);
    state.calm_since = 0.0;
    let mut m = HostMachine::with_state(params, state);
    let answer = |status: u16| Feedback {
        sent: true,
        status: Some(status),
        latency: Duration::from_millis(20),
        ..Default::default()
    };
    // Calm for long enough to probe, at the settled pace.
    let mut t = 0.0;
    while t < 400_000.0 {
        m.on_send(t);
        let _ = m.on_feedback(&answer(200), t + 20.0);
        t += 1_010.0;
    }
    assert_ne!(m.state().phase, Phase::Probe, "{:?}", m.state());
    let before = m.rate();
    m.on_send(t);
    let _ = m.on_feedback(&answer(429), t + 20.0);
    assert!(
        m.rate() < before * 0.99,
        "a refusal at the settled rate lowers it: {before} -> {}",
        m.rate()
    );
}

/// Requests in flight when a refusal without Retry-After places a backoff are refused with
/// it: they neither double the hold nor cut the rate again. A new refusal after the hold
/// (a request booked since) does double it. With eight in flight at 20/s, each of them
/// doubling the hold turned one refusal into a 37-second hold.
#[test]
fn refusals_in_flight_do_not_stack_backoffs() {
    use super::HostMachine;
    use crawler_core::Feedback;
    use std::time::Duration;

    let refusal = Feedback {
        sent: true,
        status: Some(429),
        latency: Duration::from_millis(40),
        ..Default::default()
    };
    let mut m = HostMachine::new(defaults(), 0.0);
    // Eight sent 5 ms apart, the first answered at 40 ms.
    for i in 0..8 {
        m.on_send(f64::from(i) * 5.0);
    }
    let _ = m.on_feedback_sent(&refusal, 0.0, 40.0);
    let (first, rate) = (m.state().hold_until, m.rate());
    let base = m.params().tuning.backoff_base_ms;
    assert!(first > 40.0 && first <= 40.0 + base * 1.1, "{first}");
    // The other seven, answered 5 ms apart; the last three dated after the first answer
    // (a busy client reads its clock late).
    for i in 1..8 {
        let sent = if i < 5 {
            f64::from(i) * 5.0
        } else {
            41.0 + f64::from(i)
        };
        let _ = m.on_feedback_sent(&refusal, sent, 40.0 + f64::from(i) * 5.0);
    }
    assert_eq!(m.state().hold_until, first, "{:?}", m.state());
    assert_eq!(m.rate(), rate);
    // After the hold, a request booked and refused: a new refusal, a longer hold.
    let t = m.ready_at();
    m.on_send(t);
    let _ = m.on_feedback_sent(&refusal, t, t + 40.0);
    assert!(
        m.state().hold_until - (t + 40.0) > base * 1.2,
        "the second backoff doubles: {}",
        m.state().hold_until - (t + 40.0)
    );
}

/// Two requests close together at the very start (a fleet's workers, or robots.txt and the
/// first page) can be refused once by a burst-0 limiter whatever the rate it allows: that
/// refusal says nothing about the limit, and must not cap the rate near the start pace.
#[test]
fn an_early_refusal_does_not_cap_the_rate() {
    use super::HostMachine;
    use crawler_core::Feedback;
    use std::time::Duration;

    let answer = |status: u16| Feedback {
        sent: true,
        status: Some(status),
        latency: Duration::from_millis(20),
        retry_after: (status == 429).then(|| Duration::from_secs(1)),
        ..Default::default()
    };
    let mut m = HostMachine::new(defaults(), 0.0);
    m.on_send(0.0);
    let _ = m.on_feedback(&answer(200), 20.0);
    m.on_send(300.0);
    let _ = m.on_feedback(&answer(429), 320.0);
    // The server accepts everything from now on.
    let mut t: f64 = 320.0;
    while t < 300_000.0 {
        t = m.ready_at().max(t);
        m.on_send(t);
        let _ = m.on_feedback(&answer(200), t + 20.0);
        t += 20.0;
    }
    assert!(m.rate() > 3.0, "{}", m.rate());
}

/// Behind a bucket with no burst, the refused request's own gap is the limit: the rate
/// climbs back to 97% of that pace, not of the rate the machine had grown to by the time the
/// answer was read (nginx burst 0 at 5 r/s refused a 198 ms gap, 5.05/s, while the rate was
/// 5.12/s: 97% of it left 1 ms of spacing, and arrival jitter was refused minutes later). One
/// refusal on every draw, at 3 and 5 r/s, and a steady rate of 97% or more.
#[test]
fn the_refused_gap_not_the_rate_grown_since_is_the_ceiling() {
    let params = defaults();
    let cells = matrix_cells(|c| c.name.starts_with("nginx b0 ") && c.allowed >= 3.0);
    assert_eq!(cells.len(), 12);
    for cell in cells {
        let o = sim::run(&cell, &params, 600_000.0);
        assert_eq!(o.refused, 1, "{}: {o:?}", cell.name);
        assert!(
            o.steady >= 0.97 * cell.allowed,
            "{}: {:.2}",
            cell.name,
            o.steady
        );
    }
}

/// Behind a token bucket with a large burst, a probe above the limit is refused only once
/// the burst has drained, minutes later, and its hold then falls where it costs most. The
/// third episode's narrow fit explains every refusal of the log, which a window limiter's
/// rarely does: the bucket is verified, its rate trusted (1% under it: the burst absorbs jitter),
/// and the room its burst left under the refused rates calls for no fast probe. Before
/// verification the fast probe above it was refused at 292 s, its hold in the measured
/// half (92% on virtual time, 89.7% in the lab).
#[test]
fn a_verified_bucket_rate_is_not_probed_fast() {
    let params = defaults();
    let cells = matrix_cells(|c| c.name.starts_with("nginx b20 3 r/s RA"));
    assert_eq!(cells.len(), 3);
    for cell in cells {
        let (o, audit) = sim::run_audited(&cell, &params, 600_000.0);
        let fitted = audit
            .iter()
            .position(|a| {
                matches!(a.trigger, super::Trigger::Status429)
                    && matches!(a.what, super::What::Estimate { rate } if (rate - 3.0).abs() < 0.05)
            })
            .unwrap_or_else(|| panic!("{}: no refusal fitted the rate: {audit:?}", cell.name));
        // Only the rare probe goes above it, after a whole calm period.
        let fit_at = audit[fitted].at;
        for a in &audit[fitted..] {
            if let super::What::Rate { new, .. } = a.what {
                assert!(
                    new <= 3.0 || a.at - fit_at >= params.tuning.probe_calm_ms,
                    "{}: {new:.3}/s after the bucket was verified ({:?} at {:.0} s)",
                    cell.name,
                    a.trigger,
                    a.at / 1e3
                );
            }
        }
        let after = audit[fitted..]
            .iter()
            .filter(|a| matches!(a.what, super::What::Hold { .. }))
            .count();
        assert_eq!(
            after, 1,
            "{}: holds after the fit (its own only)",
            cell.name
        );
        assert_eq!(o.refused, 3, "{}", cell.name);
        assert!(o.steady >= 0.97 * 3.0, "{}: {:.2}", cell.name, o.steady);
    }
}

/// A send that leaves late (booked, then written tens of milliseconds later by a process
/// starved of CPU) does not shorten the gap to the next send: the next slot moves to one
/// interval after the actual departure, which its answer dates. A send on time, or late by
/// the ordinary dispatch delay, moves nothing.
#[test]
fn a_late_send_pushes_the_next_slot_back() {
    use super::HostMachine;
    use crawler_core::Feedback;
    use std::time::Duration;

    let answer = |latency_ms: u64| Feedback {
        sent: true,
        status: Some(200),
        latency: Duration::from_millis(latency_ms),
        ..Default::default()
    };
    let mut params = defaults();
    params.start_rate = 3.0;
    let interval = 1_000.0 / 3.0;
    // On time: booked at 0, left at 0, answered at 20.
    let mut m = HostMachine::new(params.clone(), 0.0);
    m.on_send(0.0);
    let _ = m.on_feedback(&answer(20), 20.0);
    let on_time = m.ready_at();
    assert!(on_time <= interval + 1e-6, "{on_time}");
    // One millisecond late: the ordinary dispatch delay, the slot stays.
    let mut m = HostMachine::new(params.clone(), 0.0);
    m.on_send(0.0);
    let _ = m.on_feedback(&answer(20), 21.0);
    assert!((m.ready_at() - on_time).abs() < 1e-6, "{}", m.ready_at());
    // Booked at 0, left at 100 (answered at 120 after 20 ms): the next send waits for a
    // whole interval after 100, as the server counts it.
    let mut m = HostMachine::new(params, 0.0);
    m.on_send(0.0);
    let _ = m.on_feedback(&answer(20), 120.0);
    let next = m.ready_at();
    assert!(next >= 100.0 + m.rate().recip() * 1_000.0 - 2.5, "{next}");
}

/// A booked request that is not sent (robots.txt refused it from cache, or a fleet worker
/// gave it back) returns its slot only when no other booked request could be handed out in
/// it: with one booked after it, or one answered since, rolling the last gap back would put
/// the next send on top of that one's (two sends together, refused behind a bucket with no
/// burst).
#[test]
fn a_slot_given_back_is_never_handed_out_twice() {
    use super::HostMachine;
    use crawler_core::Feedback;
    use std::time::Duration;

    let unsent = Feedback {
        sent: false,
        ..Default::default()
    };
    let answered = Feedback {
        sent: true,
        status: Some(200),
        latency: Duration::from_millis(30),
        ..Default::default()
    };
    let mut params = defaults();
    params.start_rate = 5.0;
    // Alone: booked at 0, given back at 1, the next may go at once.
    let mut m = HostMachine::new(params.clone(), 0.0);
    m.on_send(0.0);
    let _ = m.on_feedback(&unsent, 1.0);
    assert!(m.ready_at() <= 1.0, "{}", m.ready_at());
    // A booked at 0 and B at 200; A given back at 150: 200 stays B's, the next is at 400.
    let mut m = HostMachine::new(params.clone(), 0.0);
    m.on_send(0.0);
    m.on_send(200.0);
    let _ = m.on_feedback(&unsent, 150.0);
    assert!(m.ready_at() >= 400.0 - 1e-6, "{}", m.ready_at());
    // B sent at 200 and answered at 230, then A given back at 240: nothing before one gap
    // after B's departure.
    let mut m = HostMachine::new(params, 0.0);
    m.on_send(0.0);
    m.on_send(200.0);
    let _ = m.on_feedback_sent(&answered, 200.0, 230.0);
    let _ = m.on_feedback(&unsent, 240.0);
    assert!(m.ready_at() >= 400.0 - 2.5, "{}", m.ready_at());
}

/// The request that spends the last of a window's quota is booked and not answered yet
/// (its answer is slow, or in a fleet the worker holding it is starved of CPU): the next
/// send waits for that answer, or for the latest end of the wait it can announce, rather
/// than leave at the narrowed edge and land inside the wait the answer announces (a
/// whole-second reset read before the edge says one second). Once read, the answer's own
/// hold replaces the provisional one.
#[test]
fn a_quota_spent_by_an_unanswered_request_keeps_the_next_send_back() {
    use super::HostMachine;
    use crawler_core::{Feedback, RateLimitReading};
    use std::time::Duration;

    // A fixed window of 10 requests per 10 s, turning at whole multiples of 10 s; resets
    // in whole seconds, rounded up. Answers come 10 ms after their send.
    let reading = |remaining: u64, at: f64| {
        let edge = (at / 10_000.0).floor() * 10_000.0 + 10_000.0;
        Feedback {
            sent: true,
            status: Some(200),
            latency: Duration::from_millis(10),
            rate_limit: Some(RateLimitReading {
                remaining,
                reset: Some(Duration::from_secs(((edge - at) / 1_000.0).ceil() as u64)),
                limit: Some(10),
                window: None,
            }),
            ..Default::default()
        }
    };
    let mut params = defaults();
    params.start_rate = 1.0;
    let mut m = HostMachine::new(params, 0.0);
    let (mut window, mut used, mut t) = (0.0, 0u64, 0.0);
    // Two windows sent and answered, then the third window's last request left unanswered.
    loop {
        t = m.ready_at().max(t);
        let w = (t / 10_000.0).floor();
        if w != window {
            (window, used) = (w, 0);
        }
        assert!(used < 10, "sent beyond the quota at {t}");
        used += 1;
        m.on_send(t);
        if w >= 2.0 && used == 10 {
            break;
        }
        let _ = m.on_feedback_sent(&reading(10 - used, t), t, t + 10.0);
    }
    let last = t;
    let edge = (window + 1.0) * 10_000.0;
    // Answered on arrival, it will announce a wait until `last + ceil(edge - last)`.
    let announced = last + ((edge - last) / 1_000.0).ceil() * 1_000.0;
    assert!(
        m.ready_at() >= announced,
        "next send at {} inside the wait the answer to {last} announces (until {announced})",
        m.ready_at()
    );
    // The answer arrives: its hold (one second from its reading, plus the margin) replaces
    // the provisional wait.
    let _ = m.on_feedback_sent(&reading(0, last), last, last + 10.0);
    let next = m.ready_at();
    assert!(
        next >= last + 1_010.0 && next <= last + 1_050.0,
        "{next} after an answer at {}",
        last + 10.0
    );
}

/// A resume moves every instant of a saved state onto the new run's clock: one left behind
/// would hold a restored host for as long as the last run lasted, or not at all.
#[test]
fn a_shift_moves_every_instant_of_the_state() {
    use super::HostMachine;
    use crawler_core::{Feedback, RateLimitReading};
    use std::time::Duration;

    let mut m = HostMachine::new(defaults(), 0.0);
    m.on_send(0.0);
    m.on_send(1_000.0);
    let one_left = Feedback {
        sent: true,
        status: Some(200),
        latency: Duration::from_millis(10),
        rate_limit: Some(RateLimitReading {
            remaining: 1,
            reset: Some(Duration::from_secs(5)),
            limit: Some(10),
            window: None,
        }),
        ..Default::default()
    };
    let _ = m.on_feedback_sent(&one_left, 0.0, 10.0);
    let before = m.state().clone();
    assert!(before.spent_until.is_some() && before.quota_turn_by.is_some());
    m.shift(5_000.0);
    let after = m.state();
    let moved = |a: Option<f64>, b: Option<f64>| matches!((a, b), (Some(a), Some(b)) if (b - a - 5_000.0).abs() < 1e-9);
    assert!(moved(Some(before.tat), Some(after.tat)));
    assert!(moved(Some(before.hold_until), Some(after.hold_until)));
    assert!(moved(
        Some(before.departure_floor),
        Some(after.departure_floor)
    ));
    assert!(moved(before.quota_turn_by, after.quota_turn_by));
    assert!(moved(before.spent_until, after.spent_until));
    assert!(moved(before.edge.map(|e| e.hi), after.edge.map(|e| e.hi)));
}

/// A fleet publishes a refusal's hold before it learns from the refusal
/// (`HostMachine::hold_ahead`). The early hold must change nothing the answer then decides:
/// the same hold end, counted once, the same rate, estimate and backoff; and it must already
/// cover what the answer asks for from the moment it was placed.
#[test]
fn a_hold_placed_ahead_changes_nothing_the_answer_decides() {
    use super::HostMachine;
    use crawler_core::Feedback;
    use std::time::Duration;

    let answer = |status: u16, retry_after: Option<u64>| Feedback {
        sent: true,
        status: Some(status),
        latency: Duration::from_millis(20),
        retry_after: retry_after.map(Duration::from_secs),
        ..Default::default()
    };
    // A host crawled for a minute at its pace, every answer a 200.
    let mut warm = HostMachine::new(defaults(), 0.0);
    let mut t: f64 = 0.0;
    while t < 60_000.0 {
        t = warm.ready_at().max(t);
        warm.on_send(t);
        let _ = warm.on_feedback(&answer(200, None), t + 20.0);
        t += 20.0;
    }
    let cases = [
        (429, Some(30)),
        (429, None),
        (503, Some(3)),
        (503, None),
        (200, Some(5)),
    ];
    for (status, ra) in cases {
        let fb = answer(status, ra);
        let sent = warm.ready_at().max(t);
        let mut plain = HostMachine::with_state(defaults(), warm.state().clone());
        let mut ahead = HostMachine::with_state(defaults(), warm.state().clone());
        plain.on_send(sent);
        ahead.on_send(sent);
        let early = sent + 20.0;
        assert!(
            ahead.hold_ahead(&fb, early),
            "{status} {ra:?}: no hold ahead"
        );
        let held = ahead.state().hold_until;
        let least = ra.map_or(5_000.0 * 0.75, |s| s as f64 * 1_000.0);
        assert!(
            held >= early + least - 1.0,
            "{status} {ra:?}: {held} from {early}"
        );
        // The answer is read later, as a fleet's full commit is.
        let later = early + 35.0;
        let _ = plain.on_feedback_sent(&fb, sent, later);
        let _ = ahead.on_feedback_sent(&fb, sent, later);
        let (p, a) = (plain.state(), ahead.state());
        assert_eq!(a.hold_until, p.hold_until, "{status} {ra:?}");
        assert!(a.hold_until >= held, "{status} {ra:?}");
        assert_eq!(a.holds, p.holds, "{status} {ra:?}: the hold counted once");
        assert_eq!(a.rate, p.rate, "{status} {ra:?}");
        assert_eq!(a.estimate, p.estimate, "{status} {ra:?}");
        assert_eq!(a.backoff_level, p.backoff_level, "{status} {ra:?}");
        assert_eq!(a.active_since, p.active_since, "{status} {ra:?}");
        // Held from the early hold on: the 35 ms between the two count too.
        assert!(
            (a.held_ms - p.held_ms - 35.0).abs() < 2.0,
            "{status} {ra:?}: {} against {}",
            a.held_ms,
            p.held_ms
        );
    }
    // Nothing to hold: a plain answer, and a wait the answer turns into a skip.
    let mut m = HostMachine::with_state(defaults(), warm.state().clone());
    assert!(!m.hold_ahead(&answer(200, None), t));
    assert!(!m.hold_ahead(&answer(429, Some(100_000)), t));
    assert_eq!(m.state().hold_until, warm.state().hold_until);
}

/// The matrix's limiter cells at 3 and 5 r/s on rough machines (`sim::rough`): how often
/// each meets the whole goal when the start falls anywhere in the limiter's window and the
/// client is busy. `DRAWS` (default 10) per cell; `ALL=1` prints every run; `CELL=part`
/// keeps the cells whose name contains it; `ONE_RPS=1` adds the 1 r/s cells; `VARY_START=1`
/// draws the start rate too; `SPREAD` and `STALL_MS` set the roughness.
#[test]
#[ignore = "a measuring aid"]
fn rough_matrix() {
    let draws = env("DRAWS").unwrap_or(10);
    let all = std::env::var("ALL").is_ok();
    let one_rps = std::env::var("ONE_RPS").is_ok();
    let want = std::env::var("CELL").unwrap_or_default();
    let base: Vec<sim::Cell> = sim::matrix()
        .into_iter()
        .filter(|c| (c.allowed >= 3.0 || one_rps) && c.name.contains(want.as_str()))
        .collect();
    let params = defaults();
    let mut pass = 0;
    let mut runs = 0;
    let mut refusals = 0;
    let mut sum = 0.0;
    for c in &base {
        let (mut ok, mut worst, mut most) = (0, f64::INFINITY, 0);
        for r in rough_from_env(vec![c.clone()], draws) {
            let params = r.rough.start_rate.map_or(params.clone(), starting_at);
            let o = sim::run(&r, &params, 600_000.0);
            let pct = 100.0 * o.steady / r.allowed;
            let good = o.violations == 0 && o.refusals_per_1000() <= 3.0 && pct >= 90.0;
            ok += usize::from(good);
            worst = worst.min(pct);
            most = most.max(o.refused);
            refusals += o.refused;
            sum += pct;
            runs += 1;
            if all || !good {
                println!(
                    "  {} {:?} spread {:.1}: {} refused, {} violations, {pct:.1}%",
                    r.name, r.rough, r.transit_spread, o.refused, o.violations
                );
            }
        }
        pass += ok;
        println!(
            "{}: {ok}/{draws} pass, worst {worst:.1}%, most refusals {most}",
            c.name
        );
    }
    println!(
        "TOTAL {pass}/{runs} pass, {refusals} refusals, mean {:.2}%",
        sum / runs as f64
    );
}

/// A refusal costs a whole hold and a slow probe gains its step, so once settled the machine
/// waits the calm in which the step pays the hold back before probing: under a 30 s
/// Retry-After that is 1,000 s, not the five minutes a refusal with a few seconds of backoff
/// waits (a probe every five minutes lost a tenth of the rate each time one was refused).
#[test]
fn a_slow_probe_waits_for_the_calm_that_pays_back_its_hold() {
    let params = defaults();
    let first_probe_after_last_refusal = |name: &str| {
        let cell = sim::matrix()
            .into_iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no cell {name}"));
        let (_, audit) = sim::run_audited(&cell, &params, 1_800_000.0);
        let last_refusal = audit
            .iter()
            .filter(|a| matches!(a.trigger, super::Trigger::Status429))
            .map(|a| a.at)
            .fold(f64::NAN, f64::max);
        let probe = audit
            .iter()
            .find(|a| a.trigger == super::Trigger::Probe && a.at > last_refusal)
            .map(|a| a.at);
        (last_refusal, probe)
    };
    let (refused, probe) = first_probe_after_last_refusal("nginx b20 5 r/s RA 30s");
    let probe = probe.expect("a half-hour crawl probes once settled");
    assert!(
        probe - refused >= 990_000.0,
        "probed {:.0} s after the last refusal, under a 30 s Retry-After",
        (probe - refused) / 1e3
    );
    let (refused, probe) = first_probe_after_last_refusal("nginx b20 5 r/s no RA");
    let probe = probe.expect("a half-hour crawl probes once settled");
    assert!(
        (params.tuning.probe_calm_ms..990_000.0).contains(&(probe - refused)),
        "probed {:.0} s after the last refusal, with backoff holds of seconds",
        (probe - refused) / 1e3
    );
}

/// The matrix's limiter cells at 3 and 5 r/s on ten rough machines each (`sim::rough`: the
/// start anywhere in a window, a busy client's transit, latency and stalls): no request
/// inside a hold in any run, every fixed-window run meets the whole goal (its counter is
/// named once three episodes agree, so no fourth refusal and no rate a guess under it), and
/// nearly every other run does (the misses are jitter refusals behind a bucket with no burst
/// and a probe refused behind HAProxy: BENCHMARKS.md, "Politeness, session 11").
#[test]
fn rough_machines_meet_the_goal_in_nearly_every_run() {
    let params = defaults();
    let cells: Vec<sim::Cell> = sim::matrix()
        .into_iter()
        .filter(|c| c.allowed >= 3.0)
        .collect();
    let runs = sim::rough(cells, 10, 4.0, 10.0, false);
    let mut missed = Vec::new();
    for cell in &runs {
        let o = sim::run(cell, &params, 600_000.0);
        let pct = 100.0 * o.steady / cell.allowed;
        assert_eq!(o.violations, 0, "{}: {o:?}", cell.name);
        assert!(pct >= 80.0, "{}: {pct:.1}%", cell.name);
        if o.refusals_per_1000() > 3.0 || pct < 90.0 {
            assert!(
                !cell.name.starts_with("fixed"),
                "{}: {} refusals, {pct:.1}%",
                cell.name,
                o.refused
            );
            missed.push(format!("{} ({} refusals, {pct:.1}%)", cell.name, o.refused));
        }
    }
    assert!(
        missed.len() * 40 <= runs.len(),
        "{} of {} runs miss the goal: {missed:?}",
        missed.len(),
        runs.len()
    );
}

/// A measuring aid for rates above the matrix: each limiter kind at 20 and 50 r/s,
/// with Retry-After 3 s and without, started at 10 and at 100 r/s with 8 in flight, on 20
/// rough machines each (`SPREAD`, default 10 ms of transit spread; `MINUTES`, default 3).
/// Prints the misses of the rate goal per cell; `CELL=name ~draw` prints that run's audit.
/// A bucket with no burst cannot be served near its rate when arrivals jitter by a good part
/// of its interval; the other kinds can.
#[test]
#[ignore = "a measuring aid"]
fn high_rate_matrix() {
    let minutes: f64 = env("MINUTES").unwrap_or(3.0);
    let spread: f64 = env("SPREAD").unwrap_or(10.0);
    let want = std::env::var("CELL").unwrap_or_default();
    let (mut total, mut misses) = (0, 0);
    for rate in [20.0, 50.0] {
        for ra in [Some(3_000.0), None] {
            let tag = if ra.is_some() { "RA 3s" } else { "no RA" };
            let kinds = [
                ("nginx b0", sim::Limiter::nginx(rate, 0)),
                ("nginx b5", sim::Limiter::nginx(rate, 5)),
                (
                    "nginx 4s burst",
                    sim::Limiter::nginx(rate, (rate * 4.0) as u32),
                ),
                ("haproxy 10s", sim::Limiter::sliding(rate, 10.0)),
                ("fixed 10s", sim::Limiter::fixed(rate, 10.0)),
            ];
            for (kind, limiter) in kinds {
                for start in [10.0, 100.0] {
                    let params = Params::from_settings(&Settings {
                        start_rate: start,
                        max_rate: 200.0,
                        concurrency_per_host: 8,
                        ..Settings::default()
                    });
                    let name = format!("{kind} {rate} r/s {tag} start {start}");
                    let base = sim::Cell {
                        name: name.clone(),
                        limiter: limiter.clone(),
                        allowed: rate,
                        retry_after: ra,
                        transit_spread: spread,
                        seed: 1,
                        rough: sim::Rough::default(),
                    };
                    let (mut miss, mut worst, mut most) = (0, f64::INFINITY, 0);
                    for mut c in sim::rough(vec![base], 20, spread, 10.0, false) {
                        c.transit_spread = spread;
                        let (o, audit) = sim::run_audited(&c, &params, minutes * 60_000.0);
                        if c.name == want {
                            print_audit(&audit, &o);
                        }
                        total += 1;
                        let ok = o.violations == 0
                            && o.steady >= 0.9 * rate
                            && o.refusals_per_1000() <= 3.0;
                        miss += usize::from(!ok);
                        worst = worst.min(o.steady / rate);
                        most = most.max(o.refused);
                    }
                    misses += miss;
                    println!(
                        "{name}: {miss}/20 miss, worst {:.1}%, most refusals {most}",
                        worst * 100.0
                    );
                }
            }
        }
    }
    println!("{misses} of {total} runs miss");
}
