//! The middleware stacks: [`Middlewares`] around a downloader and [`SpiderWithMiddlewares`]
//! over a spider's output, and [`MiddlewareStats`], where both report what they counted at
//! each stage. A stack only calls its hooks and the downloader or spider it wraps: no
//! network, no clock, no scheduler here. The traits it runs are crawler-core's.
//!
//! - `downloader.rs`: [`Middlewares`].
//! - `spider.rs`: [`SpiderWithMiddlewares`].
//! - `stack.rs`: what both stacks share, written once: stages, names, counters.
//! - `stats.rs`: [`MiddlewareStats`].

mod downloader;
mod spider;
mod stack;
mod stats;

pub use downloader::Middlewares;
pub use spider::SpiderWithMiddlewares;
pub use stats::MiddlewareStats;

/// A 200 answer to `req` with an empty page, for the tests of both stacks.
#[cfg(test)]
fn ok(req: &crawler_core::Request) -> crawler_core::Response {
    crawler_core::Response::new(
        req.clone(),
        req.url.clone(),
        200,
        crawler_core::HeaderMap::new(),
        crawler_core::Bytes::from_static(b"<html></html>"),
    )
}
