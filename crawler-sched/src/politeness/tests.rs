//! The machine judged on virtual time.

use super::Params;
use super::sim::{self, Outcome};
use crawler_core::Settings;

fn defaults() -> Params {
    Params::from_settings(&Settings::default())
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
/// and Retry-After choice, with default settings. No request ever lands inside an
/// announced wait, in any cell. The rate goal (steady at least 90% of the allowed rate) is
/// met in all but two cells today (nginx burst 20 with Retry-After 30 s at 3 and 5 r/s,
/// where a probe above the limit is refused only after the burst drains, late in the
/// crawl); this test holds that line (28 of 30 cells at 90%, every cell at 80%). Refusals:
/// at most 4 per 1,000 pages at 3 and 5 r/s; at 1 r/s a ten-minute crawl is ~550 pages and
/// the learning episodes (two to five) are more than 3 per 1,000.
#[test]
fn matrix_of_limiters_reaches_ninety_percent_with_few_refusals() {
    let rows = table(&sim::matrix(), 10.0);
    let mut failed = Vec::new();
    let mut at_ninety = 0;
    for (name, allowed, o) in &rows {
        let refusals_ok = if *allowed >= 3.0 {
            o.refusals_per_1000() <= 4.0
        } else {
            o.refused <= 6
        };
        if o.steady >= 0.9 * allowed {
            at_ninety += 1;
        }
        if o.violations > 0 || !refusals_ok || o.steady < 0.8 * allowed || o.skipped {
            failed.push(name.clone());
        }
    }
    assert!(failed.is_empty(), "cells failing the goal: {failed:?}");
    assert!(
        at_ninety >= 28,
        "{at_ninety} of {} cells at 90%",
        rows.len()
    );
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

#[test]
fn rate_limit_headers_mean_no_refusals_and_ninety_seven_percent() {
    let rows = table(&sim::gateways(), 10.0);
    for (name, allowed, o) in &rows {
        assert_eq!(o.refused, 0, "{name}");
        assert!(o.steady >= 0.97 * allowed, "{name}: {:.2}", o.steady);
    }
}

/// Print one cell's audit (run with `--ignored --nocapture CELL=...`).
#[test]
#[ignore = "a debugging aid"]
fn audit_of_one_cell() {
    let want = std::env::var("CELL").unwrap_or_default();
    let params = defaults();
    for c in sim::matrix().into_iter().chain(sim::gateways()) {
        if c.name == want {
            let (o, audit) = sim::run_audited(&c, &params, 600_000.0);
            for a in audit {
                println!(
                    "{:>9.1}s {:<14} {:?}",
                    a.at / 1e3,
                    a.trigger.as_str(),
                    a.what
                );
            }
            println!("{o:?}");
        }
    }
}

#[test]
#[ignore = "a debugging aid"]
fn audit_of_the_practice_test() {
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
    };
    let (o, audit) = sim::run_audited(&cell, &params, 60_000.0);
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

/// Start conditions vary too: starting at half, three times and ten times the default
/// (for a host rule's start rate, say), every token-bucket and window cell at 3 and 5 r/s
/// stays free of violations and at 75% or more of the allowed rate. (The weakest: starting
/// at 10 r/s into HAProxy's counter, which counts the refusals of the overshoot too: 77%.)
#[test]
fn start_conditions_do_not_change_the_outcome() {
    for start in [0.5, 3.0, 10.0] {
        let params = Params::from_settings(&Settings {
            start_rate: start,
            ..Settings::default()
        });
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
