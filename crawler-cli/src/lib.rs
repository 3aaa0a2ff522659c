//! The crawler's command lines, kept out of the `crawler` library so that a spider project
//! compiles only what its spiders need.
//!
//! - [`Runner`]: a project's `main.rs` registers its spiders and gets Scrapy's verbs
//!   (`crawl`, `list`, `settings`, `check`, `shell`, `parse`), with a live progress display and the
//!   metrics endpoint.
//! - The `crawler` binary ([`run_standalone`]): `new` and `genspider` (scaffolding),
//!   `fetch`, `shell`, `robots`, `sitemap`, `settings`, `report` (see [`report`]), and with the
//!   `lab` feature `lab` (serve the bundled test site) and `bench`.
//!
//! Features: `lab` (the `lab` and `bench` verbs), `metrics` (the Prometheus endpoint of
//! `metrics_addr`), `mimalloc` (the binary's allocator). All are on by default for the
//! binary; a project's runner needs none of them.

#[cfg(feature = "lab")]
mod bench;
mod common;
#[cfg(feature = "metrics")]
pub mod metrics;
mod parse;
pub mod report;
mod runner;
mod scaffold;
mod serve;
mod shell;
mod sitemap;
mod tools;

pub use common::SettingsArgs;
pub use runner::{Contract, Runner};
pub use tools::{run_standalone, run_standalone_args};
