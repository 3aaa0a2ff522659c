//! The integration tests of crawler-browser, in one test binary: each module is one area (a
//! file beside this one), with real chromium and the lab on 127.0.0.1. Run one area with
//! `cargo test -p crawler-browser --test all -- MODULE::`.

mod crawl;
mod render;
