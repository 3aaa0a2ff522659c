//! The judge of the politeness policy: one crawl per cell of limiter kind × allowed rate ×
//! Retry-After, plus RateLimit-header gateways, all at once, each against its own lab
//! server, with the crawler's DEFAULT settings (only the start URL and an output feed).
//!
//! ```text
//! cargo bench --bench politeness_matrix                    # 36 cells, 10 minutes
//! cargo bench --bench politeness_matrix -- --minutes 2     # or MATRIX_MINUTES=2
//! cargo bench --bench politeness_matrix -- nginx-b0 window # cells whose name contains one
//! cargo bench --bench politeness_matrix -- --real          # nginx/HAProxy cells: lab and real server
//! ```
//!
//! Goals per cell: zero violations (requests inside an announced wait), at most 3 refusals
//! per 1,000 pages, a steady rate (requests/s over the last half of the crawl) of at least
//! 90% of the allowed rate; header gateways: zero refusals and at least 97%.

#[allow(dead_code)]
#[path = "../examples/books.rs"]
mod books;
#[allow(dead_code)]
#[path = "support/matrix.rs"]
mod matrix;
#[allow(dead_code)]
#[path = "support/real.rs"]
mod real;

use matrix::{Kind, Outcome};

#[tokio::main]
async fn main() {
    // reqwest is built without a TLS provider; the crawler's client still needs one set.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut minutes: f64 = std::env::var("MATRIX_MINUTES")
        .ok()
        .and_then(|m| m.parse().ok())
        .unwrap_or(10.0);
    let mut real = false;
    let mut filters = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--bench" => {}
            "--real" => real = true,
            "--minutes" => match args.next().and_then(|m| m.parse().ok()) {
                Some(m) => minutes = m,
                None => {
                    eprintln!("--minutes needs a number");
                    std::process::exit(2);
                }
            },
            _ => filters.push(a),
        }
    }
    let secs = (minutes * 60.0).max(10.0);
    let cells: Vec<_> = matrix::full_matrix()
        .into_iter()
        .filter(|c| filters.is_empty() || filters.iter().any(|f| c.name.contains(f.as_str())))
        .filter(|c| !real || matches!(c.kind, Kind::Nginx(_) | Kind::Haproxy))
        .collect();
    if cells.is_empty() {
        eprintln!("no cell matches {filters:?}");
        std::process::exit(2);
    }
    if real {
        for kind in ["nginx", "haproxy"] {
            if real::which(kind).is_none() {
                println!("{kind} not found on PATH: its real cells are skipped");
            }
        }
    }
    println!(
        "{} cells, {:.1} minutes each, all at once{}\n",
        cells.len(),
        secs / 60.0,
        if real { ", lab and real server" } else { "" }
    );
    let mut runs = Vec::new();
    for cell in cells {
        if real {
            let c = cell.clone();
            runs.push(tokio::spawn(async move { matrix::run_real(c, secs).await }));
        }
        runs.push(tokio::spawn(async move {
            Some(matrix::run_lab(cell, secs).await)
        }));
    }
    let mut outcomes: Vec<Outcome> = Vec::new();
    for r in runs {
        match r.await {
            Ok(Some(o)) => outcomes.push(o),
            Ok(None) => {}
            Err(e) => eprintln!("a cell panicked: {e}"),
        }
    }
    outcomes.sort_by(|a, b| a.name.cmp(&b.name));
    matrix::print_table(&outcomes);
    let passed = outcomes.iter().filter(|o| o.misses().is_empty()).count();
    println!("\n{passed} of {} cells pass", outcomes.len());
}
