//! Serves a lab scenario until Ctrl-C:
//! `cargo run --release -p crawler-lab --example serve -- --scenario open --port 18080`.

use clap::Parser;

/// Serve a crawler-lab scenario on 127.0.0.1.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    lab: crawler_lab::cli::LabArgs,
}

#[tokio::main]
async fn main() -> Result<(), crawler_lab::Error> {
    crawler_lab::cli::run(Cli::parse().lab).await
}
