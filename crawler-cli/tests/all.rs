//! The integration tests of crawler-cli, in one test binary: each module is one area (a file
//! beside this one). One binary links once, where a binary per file linked the crate and
//! its dependencies once per file; run one area with `cargo test -p crawler-cli --test all --
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

mod cli;
mod output;
mod parse;
mod report;
mod runner;
mod secrets;
#[cfg(feature = "serve")]
mod serve;
mod shell;
#[allow(dead_code, clippy::unwrap_used)]
mod support;

/// The name the test harness knows a test by (`module::name`), from the `module_path!()`
/// of the module that defines it, for `--exact` when a test re-runs this binary.
pub fn test_path(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}
