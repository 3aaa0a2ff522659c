//! The integration tests of crawler-http, in one test binary: each module is one area (a file
//! beside this one). One binary links once, where a binary per file linked the crate and
//! its dependencies once per file; run one area with `cargo test -p crawler-http --test all --
//! MODULE::`.

mod conditional;
mod failure_classes;
mod robots;
mod sitemap;
mod sitemap_bomb;
#[allow(clippy::unwrap_used)]
mod support;
mod unreachable;
