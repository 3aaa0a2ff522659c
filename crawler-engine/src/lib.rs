//! The crawl loop of the crawler framework: the [`Engine`] that asks a scheduler which
//! request may go out, downloads it, runs the spider and its pipelines, writes the feeds,
//! retries and sends redirects back through the frontier (so robots.txt and the host's
//! slot apply to every hop), and accounts for every request in the crawl's stats.
//!
//! It builds on the contracts of crawler-core (spider, request, response, output, pipeline,
//! the `Downloader` and `Scheduler` traits, error, stats) and knows no HTTP client,
//! frontier or database: crawler-http, crawler-sched and crawler-store plug in through those
//! traits, and the `crawler` facade puts them together.
//!
//! - `engine/`: the engine and its loop, workers, settling, retries, redirects, sub-requests,
//!   the feed thread and the request log.
//! - `middleware/`: the downloader and spider middleware stacks and their counters.
//! - `feed_writer.rs`: writing one feed, torn tails cut on resume, batches;
//!   `feed_store.rs`: its objects (S3, GCS, Azure); `feed_xml.rs`: its XML items;
//!   `feed_parquet.rs`: its Parquet files.
//! - `failures.rs`: the failures file, a record per request that ended failed.
//! - `warc/`: WARC archives of every exchange (the `warc` setting).
//! - `files/`: the files and images pipelines (items' files fetched through the crawl,
//!   stored by content).

mod engine;
mod failures;
mod feed_parquet;
mod feed_store;
mod feed_writer;
mod feed_xml;
pub mod files;
mod middleware;
pub mod warc;

pub use engine::{Engine, FINAL_HOSTS, PROGRESS_HOSTS, Progress};
pub use middleware::{MiddlewareStats, Middlewares, SpiderWithMiddlewares};
