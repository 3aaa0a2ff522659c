//! The integration tests of crawler-lab, in one test binary: each module is one area (a file
//! beside this one). One binary links once, where a binary per file linked the crate and
//! its dependencies once per file; run one area with `cargo test -p crawler-lab --test all --
//! MODULE::`.

#[allow(clippy::unwrap_used)]
mod common;
mod faults;
mod limiters;
mod members;
mod politeness;
mod site;
