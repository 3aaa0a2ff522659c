//! The politeness matrix, scaled for CI: seven representative cells (nginx `limit_req`
//! burst 0 and 20, with and without Retry-After, HAProxy's sliding window that counts
//! refusals, a fixed window, a RateLimit-header gateway), all at 3 r/s, crawled at once for
//! about 150 s each with the crawler's DEFAULT settings. `MATRIX_TEST_SECS` changes the
//! duration. The unscaled matrix is `cargo bench --bench politeness_matrix`.
//!
//! Two tests share one run of the cells: zero violations is asserted always; the rate goals
//! (at most 3 refusals per 1,000 pages and a steady rate of at least 90% of the allowed rate;
//! gateways: no refusal and at least 97%) are the ten-minute matrix's, and an ignored test
//! asserts them here (`--ignored`): in 150 s a crawl of ~400 pages has room for one refusal
//! where learning a bucket takes two or three, and behind a window limiter the rate is still
//! climbing (session 11: the nginx and gateway cells at 96 to 100%, HAProxy and the fixed
//! window at 74 and 79%).

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;
#[allow(dead_code)]
#[path = "../benches/support/matrix.rs"]
mod matrix;
#[allow(dead_code)]
#[path = "../benches/support/real.rs"]
mod real;

use std::sync::OnceLock;

use crawler_lab::Dialect;
use matrix::{Cell, Kind, Outcome};

fn cells() -> Vec<Cell> {
    vec![
        Cell::new(Kind::Nginx(0), 3, Some(5)),
        Cell::new(Kind::Nginx(0), 3, None),
        Cell::new(Kind::Nginx(20), 3, Some(5)),
        Cell::new(Kind::Nginx(20), 3, None),
        Cell::new(Kind::Haproxy, 3, Some(5)),
        Cell::new(Kind::Window, 3, Some(5)),
        Cell::new(Kind::Gateway(Dialect::Ietf), 3, None),
    ]
}

/// Runs the cells once per test binary, whichever test asks first; the other waits.
fn outcomes() -> &'static [Outcome] {
    static RUN: OnceLock<Vec<Outcome>> = OnceLock::new();
    RUN.get_or_init(|| {
        let secs: f64 = std::env::var("MATRIX_TEST_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(150.0);
        // Its own runtime: each test has none, and the cells need real time and threads.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let runs: Vec<_> = cells()
                .into_iter()
                .map(|c| tokio::spawn(matrix::run_lab(c, secs)))
                .collect();
            let mut out = Vec::new();
            for r in runs {
                out.push(r.await.expect("cell runs"));
            }
            matrix::print_table(&out);
            out
        })
    })
}

#[test]
fn no_request_inside_an_announced_wait_in_any_cell() {
    let outcomes = outcomes();
    for o in outcomes {
        assert!(o.error.is_none(), "{}: {:?}", o.name, o.error);
        assert!(o.requests > 10, "{}: only {} requests", o.name, o.requests);
    }
    let bad: Vec<_> = outcomes
        .iter()
        .filter(|o| o.violations > 0)
        .map(|o| format!("{}: {} violations", o.name, o.violations))
        .collect();
    assert!(bad.is_empty(), "{bad:?}");
}

#[test]
#[ignore = "the ten-minute goals, which 150 s is too short to meet (see the module doc)"]
fn refusals_and_steady_rate_meet_the_goals_in_every_cell() {
    let bad: Vec<_> = outcomes()
        .iter()
        .filter_map(|o| {
            let m = o.rate_misses();
            (!m.is_empty()).then(|| format!("{}: {}", o.name, m.join("; ")))
        })
        .collect();
    assert!(bad.is_empty(), "{bad:#?}");
}
