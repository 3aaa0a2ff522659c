//! The integration tests of crawler, in one test binary: each module is one area (a file
//! beside this one). One binary links once, where a binary per file linked the crate and
//! its dependencies once per file; run one area with `cargo test -p crawler --test all --
//! MODULE::`. `log_level.rs` stays a binary of its own: it sets the process-wide logger.
//!
//! Tests that re-run this binary as a child process name their child test with
//! [`test_path`].

#![allow(
    clippy::duplicate_mod,
    clippy::module_inception,
    reason = "each area includes the example spiders and helpers it uses as it did when it was \
              a binary of its own, and keeps its name"
)]

mod address_policy;
mod chaos;
mod close;
mod durability;
mod errors;
mod examples;
mod feeds;
mod files;
#[cfg(feature = "redis")]
mod fleet_durability;
mod hostile;
mod lab_crawl;
mod many_hosts;
mod middlewares;
mod network;
mod object_feeds;
mod object_outputs;
mod politeness;
mod proxy;
mod recrawl;
#[cfg(feature = "redis")]
mod redis_fleet;
#[cfg(feature = "redis")]
mod redis_fleet_pool;
mod request_path;
mod resume;
mod retries;
mod rules;
mod scrapy_parity;
mod scrapy_port;
mod settings;
mod sitemaps;
mod spider_api;
mod spider_hooks;
mod unreachable_host;
mod warc;

/// The name the test harness knows a test by (`module::name`), from the `module_path!()`
/// of the module that defines it, for `--exact` when a test re-runs this binary.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}
mod dns;
mod signals;
