//! Middlewares: small hooks around the downloader and around the spider's output.
//!
//! This folder owns the middleware traits (the contracts), the `referer` policy and the
//! registry of built-in names the settings use. The two stacks that run middlewares, and
//! their counters, are crawler-engine's (`Middlewares`, `SpiderWithMiddlewares`); the
//! built-in downloader middlewares live in crawler-http.
//!
//! - `downloader.rs`: [`DownloaderMiddleware`] and its object-safe form.
//! - `spider.rs`: [`SpiderMiddleware`] and [`Page`].
//! - `referer.rs`: [`RefererPolicy`], the built-in spider middleware.
//! - `registry.rs`: the built-in names, stack ordering, and the middleware settings' checks.
//!
//! Both stacks are decorators, so the engine loop needs no knowledge of them: the downloader
//! stack wraps any [`Downloader`](crate::Downloader) and is one itself, and the spider stack
//! wraps any [`Spider`](crate::Spider) and is one itself.
//!
//! # Order (Scrapy's convention)
//!
//! A stack is a list from the engine's side to the far side:
//!
//! - Downloader middlewares: `process_request` runs first to last (the first is nearest the
//!   engine), `process_response` last to first (the last is nearest the network, so it sees
//!   the response first). A request answered directly by middleware *k*
//!   ([`Action::Respond`]) skips the network and the request hooks after *k*; every
//!   response hook still runs on it, as in Scrapy.
//! - Spider middlewares: `process_output` and `process_start_requests` run last to first:
//!   the last middleware is nearest the spider and sees its output first.
//!
//! # Outcomes
//!
//! - [`Action::Drop`] ends the request as `failed` with reason `other` and a message naming
//!   the middleware. Nothing is sent, the host's slot learns nothing, and it is not retried.
//! - [`After::Retry`] turns the response into a `soft_block` failure: the engine retries
//!   those whatever the status (with its backoff, or the server's Retry-After), and counts
//!   the request as `failed: soft_block` once retries run out. The host's slot still learns
//!   what the server really said (status, latency, RateLimit headers).
//!
//! # Removing a header
//!
//! A request header whose value is empty is a marker meaning "do not send this header": the
//! downloader stack drops such headers before the network. The engine adds a `Referer` to
//! follow-up requests only when they have none, so a spider middleware removes it by setting
//! it empty (that is what the `referer` policy does).
//!
//! ```
//! use crawler_core::{Action, DownloaderMiddleware, Request};
//!
//! /// Tags every request so the server's logs show our crawl.
//! struct Tag;
//!
//! impl DownloaderMiddleware for Tag {
//!     fn name(&self) -> &str { "tag" }
//!     async fn process_request(&self, request: &mut Request) -> Action {
//!         request.headers.push(("X-Crawl-Tag".into(), "nightly".into()));
//!         Action::Continue
//!     }
//! }
//! ```

mod downloader;
mod referer;
mod registry;
mod spider;

pub use downloader::{
    Action, After, BoxedDownloaderMiddleware, DownloaderMiddleware, DynDownloaderMiddleware,
};
pub use referer::{REFERER_POLICIES, RefererPolicy};
pub(crate) use registry::settings_problem;
pub use registry::{
    DOWNLOADER_MIDDLEWARES, SPIDER_MIDDLEWARES, order_stack, order_stack_of, parse_header_line,
    spider_stack,
};
pub use spider::{BoxedSpiderMiddleware, Page, SpiderMiddleware};
