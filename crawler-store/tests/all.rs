//! The integration tests of crawler-store, in one test binary: each module is one area (a file
//! beside this one). One binary links once, where a binary per file linked the crate and
//! its dependencies once per file; run one area with `cargo test -p crawler-store --test all --
//! MODULE::`.
//!
//! Tests that re-run this binary as a child process name their child test with
//! [`test_path`].

#![allow(
    clippy::duplicate_mod,
    clippy::module_inception,
    reason = "each area includes the example spiders and helpers it uses as it did when it was \
              a binary of its own, and keeps its name"
)]

#[cfg(feature = "redis")]
#[path = "redis_cluster.rs"]
mod cluster;
#[cfg(feature = "sled")]
mod crash;
#[cfg(feature = "sled")]
mod frontier;
#[cfg(feature = "sled")]
mod job;
#[cfg(feature = "sled")]
mod queue;
#[cfg(feature = "redis")]
mod redis_booked;
#[cfg(feature = "redis")]
mod redis_memory;
#[cfg(feature = "redis")]
mod redis_robots;
#[cfg(feature = "sled")]
mod shared;

/// The name the test harness knows a test by (`module::name`), from the `module_path!()`
/// of the module that defines it, for `--exact` when a test re-runs this binary.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}
