//! Everything that touches the wire: the reqwest downloader, robots.txt, and the parsing of
//! what servers say in headers.
//!
//! [`HttpDownloader`] implements crawler-core's `Downloader`. For each request it consults
//! robots.txt (fetched once per origin as a send of the host's own slot, then cached; an
//! unreadable robots.txt holds the host instead of refusing its pages), sends the request
//! with the configured User-Agent and timeouts, streams the body under `max_body_size`, and
//! classifies the outcome (response, robots refusal, back to the queue, or a named failure)
//! together with the feedback the host's politeness slot needs (status, latency, Retry-After
//! on any status read against the server's `Date`, RateLimit quotas, challenge pages,
//! Crawl-delay). It follows no redirect: a 3xx goes back to the engine, which queues the next
//! hop as a new request through the target's robots.txt and slot.
//!
//! ```
//! use crawler_core::Settings;
//! use crawler_http::HttpDownloader;
//!
//! let mut settings = Settings::default();
//! settings.user_agent = "examplebot/1.0 (+https://example.com/bot)".into();
//! let downloader = HttpDownloader::new(&settings).expect("client builds");
//! # drop(downloader);
//! ```

mod challenge;
mod dns;
mod downloader;
mod error;
mod error_chain;
mod guard;
mod headers;
mod lastmod;
mod middlewares;
mod robots;
mod sitemap;
mod tap;

pub use dns::{DNS_CACHE_NAMES, MAX_LOOKUPS_IN_FLIGHT, MIN_TTL, NEGATIVE_TTL, Resolver};
pub use downloader::{
    HttpDownloader, MAX_BODY_META, NOT_PAGE_META, ROBOTS_SITEMAPS_META, fetch_once_with,
};
pub use error::Error;
pub use guard::{
    AddressPolicy, PROXY_ENV_VARS, is_private, private_ok, process_env, unchecked_proxy,
};
pub use headers::{
    MAX_CLOCK_OFFSET, RETRY_AFTER_CEILING, parse_rate_limit, parse_retry_after, retry_after,
    server_clock_offset, server_now,
};
pub use lastmod::parse_lastmod;
pub use middlewares::{
    COOKIEJAR_META, Cookies, DONT_MERGE_COOKIES_META, DefaultHeaders, HttpAuth, MAX_COOKIE_BYTES,
    MAX_COOKIES_PER_DOMAIN, MAX_COOKIES_TOTAL, UserAgent, downloader_stack,
};
pub use robots::{
    Check, ROBOTS_MAX_BYTES, ROBOTS_MAX_ORIGINS, ROBOTS_MAX_REDIRECTS, RobotsCache, RobotsOptions,
    RobotsReport, RobotsRules, RobotsStatus, fetch_robots, product_token, robots_client,
};
pub use sitemap::{
    Alternate, SITEMAP_MAX_BYTES, SITEMAP_MAX_URLS, SitemapEntry, SitemapError, SitemapErrorKind,
    SitemapKind, SitemapLimits, SitemapParse, fetch_sitemap, parse_sitemap,
};
