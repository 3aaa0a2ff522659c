//! The `lab` command: serve a scenario until Ctrl-C.
//!
//! The root `crawler` binary mounts [`LabArgs`] as `crawler lab`; this crate's `serve` example
//! runs it standalone: `cargo run --release -p crawler-lab --example serve -- --port 18080`.

use crate::error::{Error, Kind};
use crate::lab::Lab;
use crate::scenario::Scenario;

/// Options of `crawler lab`.
#[derive(clap::Args, Clone, Debug)]
pub struct LabArgs {
    /// Scenario to serve (see `--list`).
    #[arg(long, default_value = "open", value_name = "NAME")]
    pub scenario: String,
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 8080, value_name = "P")]
    pub port: u16,
    /// Catalogue size, 100 to 100000 (default: 1000, or 2000 for chaos).
    #[arg(long, value_name = "N")]
    pub books: Option<usize>,
    /// Seed of every generated value.
    #[arg(long, default_value_t = 1, value_name = "S")]
    pub seed: u64,
    /// List the named scenarios and exit.
    #[arg(long)]
    pub list: bool,
}

/// Serves until Ctrl-C, printing the URL and scenario, then a short report.
pub async fn run(args: LabArgs) -> Result<(), Error> {
    if args.list {
        for (name, what) in Scenario::catalogue() {
            println!("{name:34} {what}");
        }
        return Ok(());
    }
    let scenario = Scenario::by_name(&args.scenario)?;
    let description = Scenario::catalogue()
        .iter()
        .find(|(n, _)| *n == args.scenario)
        .map_or("", |(_, d)| *d);
    let mut builder = Lab::builder()
        .scenario(scenario)
        .seed(args.seed)
        .port(args.port);
    if let Some(books) = args.books {
        builder = builder.books(books);
    }
    let lab = builder.start().await?;
    println!(
        "crawler-lab: scenario `{}` ({description})",
        lab.scenario_name()
    );
    println!(
        "serving {} books (seed {}) at {}",
        lab.books(),
        lab.seed(),
        lab.url()
    );
    println!(
        "report: {}_lab/report   reset: {}_lab/reset   Ctrl-C to stop",
        lab.url(),
        lab.url()
    );
    let signal = tokio::signal::ctrl_c().await;
    let report = lab.recorder().report();
    lab.shutdown().await;
    signal.map_err(|e| Error::new(Kind::Signal(e)))?;
    println!(
        "stopped after {} requests from {} clients ({} violations of announced waits)",
        report.requests,
        report.clients.len(),
        report.total_violations()
    );
    Ok(())
}
