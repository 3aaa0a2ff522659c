//! The core of the crawler framework: the vocabulary and contracts every crate shares.
//!
//! A [`Spider`] turns [`Response`]s into items and more [`Request`]s through an [`Output`].
//! The engine (crawler-engine) drives a crawl: it asks a [`Scheduler`] (crawler-sched) which
//! request may go out now, hands it to a [`Downloader`] (crawler-http), passes successful
//! pages to the spider, runs items through [`Pipeline`]s into feeds, and accounts for every
//! request in [`Stats`]. This crate runs no crawl and knows no HTTP client or database; those
//! plug in through the traits. Its one [`Error`] is the crawl's, spider callbacks included.
//!
//! ```
//! use crawler_core::{Output, Request, Response, Result, Spider};
//!
//! struct Titles;
//!
//! impl Spider for Titles {
//!     type Item = String;
//!     fn name(&self) -> &str { "titles" }
//!     fn start_urls(&self) -> Vec<String> { vec!["http://127.0.0.1:8080/".into()] }
//!     async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
//!         out.item(page.text_of("title")?);
//!         out.follow_all(page.select("a").attrs("href"));
//!         Ok(())
//!     }
//! }
//!
//! let reqs = Titles.start_requests().unwrap();
//! assert_eq!(reqs[0].url.as_str(), "http://127.0.0.1:8080/");
//! ```

pub mod address;
mod charset;
mod conditional;
pub mod dns;
// docs/retries.md checked against the code.
#[cfg(test)]
mod docs_check;
mod error;
mod exchange;
mod extension;
mod failed;
mod feed;
mod fetch;
mod form;
pub mod matching;
mod middleware;
mod monitor;
mod output;
mod parse;
mod pipeline;
pub mod redact;
mod redirect;
mod render;
mod request;
mod response;
mod robots_share;
mod select;
mod settings;
mod shutdown;
mod spider;
mod spider_args;
mod stats;
mod statuses;
mod subrequest;

pub use conditional::{
    CachedPage, ConditionalStore, MemoryConditional, Validators, canonical_url, conditional_key,
};
pub use error::{Context, Error, ErrorKind, Result};
pub use exchange::{Exchange, ExchangeTap};
pub use extension::{
    CrawlHandle, DynExtension, EXTENSIONS, Extension, ExtensionHeaders, HeadersHook,
    SharedExtension, extension_stack,
};
pub use failed::FailedRequest;
pub use feed::{
    FeedFormat, FeedSpec, OBJECT_SCHEMES, STDOUT_FEED, batch_problem, expand_batch_path,
    expand_feed_path, feed_problem, feed_time, has_batch_placeholder, local_location,
    location_problem, object_scheme,
};
pub use fetch::http_version_name;
pub use fetch::{
    Admission, ClockOffset, Download, Downloader, Failure, FailureKind, Feedback, Fetched,
    FilterReason, HostStats, Lease, Next, RateLimitReading, Scheduler,
};
pub use form::FormRequest;
pub use middleware::{
    Action, After, BoxedDownloaderMiddleware, BoxedSpiderMiddleware, DOWNLOADER_MIDDLEWARES,
    DownloaderMiddleware, DynDownloaderMiddleware, Page, REFERER_POLICIES, RefererPolicy,
    SPIDER_MIDDLEWARES, SpiderMiddleware, order_stack, order_stack_of, parse_header_line,
    spider_stack,
};
pub use monitor::{MONITOR_ERROR_RATIO, MONITOR_ITEM_COUNT, MONITOR_SAMPLE, Monitor};
pub use output::{Counters, Follow, Output};
pub use parse::ParseLimits;
pub use pipeline::{BoxFuture, DynPipeline, Pipeline, PipelineContext, Processed};
pub use redirect::{DONT_REDIRECT_META, REDIRECTS, redirect};
pub use render::{RENDER_META, RenderOptions};
pub use request::{PROXY_META, Request, parse_http_url};
pub use response::{AfterAck, BodyOrigin, Response};
pub use robots_share::{RobotsShare, SharedRobots};
pub use select::{IntoNodes, Node, Selection, check_css, check_xpath, looks_like_xpath};
pub use settings::{
    FeedFsync, HOST_RULE_KEYS, HostKeyMode, HostRule, LogFormat, SECTIONS, Section, Settings,
    ThrottleMode, section_of, settings_markdown, text_form as settings_text,
};
pub use settings::{HttpVersion, TlsVersion};
pub use shutdown::Shutdown;
pub use spider::Spider;
pub use spider_args::{SpiderContext, open_spider, parse_spider_arg};
pub use stats::{CLOSE_ERROR, CLOSE_FINISHED, CLOSE_STOPPED, ProxyStats, Stats};
pub use statuses::{
    AllowedStatuses, HANDLE_HTTPSTATUS_ALL_META, HANDLE_HTTPSTATUS_LIST_META, StatusRules,
};
pub use subrequest::{SUBREQUEST_META, SubRequest, SubRequests};

/// Re-exported so middlewares can build a [`Response`] without depending on these crates.
pub use bytes::Bytes;
/// Re-exported so middlewares can build a [`Response`] without depending on these crates.
pub use http::{HeaderMap, HeaderValue};
/// Re-exported so users and crates agree on one version.
pub use url::Url;
