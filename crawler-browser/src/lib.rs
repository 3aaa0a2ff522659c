//! Pages rendered by a real browser, under the crawl's politeness.
//!
//! [`Rendering`] is a download handler: it wraps the crawl's downloader and, for a fetched
//! HTML page whose request asks for it ([`Request::render`](crawler_core::Request::render)
//! or [`RenderOptions`](crawler_core::RenderOptions)), or whose host the
//! [`BrowserConfig`] renders, loads the page in a headless chromium driven over the
//! DevTools protocol. Every request the page makes (scripts, styles, XHR, fetch) is paused
//! and sent through the crawl as a sub-request: robots.txt of its origin, the slot of its
//! host (holds, Retry-After, pacing), the stats. Images, media and fonts are refused
//! without a request by default. The spider gets an ordinary `Response` whose body is the
//! rendered DOM.
//!
//! Nothing waits without a deadline: tabs are bounded ([`BrowserConfig::tabs`]), a page's
//! whole render is bounded ([`BrowserConfig::page_timeout`]), and a browser that crashes or
//! is killed is replaced and the page rendered again. Memory is bounded too: the engine
//! hands out no new page while the tabs and [`BrowserConfig::queue`] pages in front of them
//! are taken, so the rest wait in the frontier, unfetched; [`Monitor::browser_memory`]
//! measures the browser's processes ([`ProcessTreeMemory`]).
//!
//! ```no_run
//! use crawler_browser::{BrowserConfig, Rendering};
//! use crawler_core::Settings;
//! use crawler_http::HttpDownloader;
//!
//! let settings = Settings::default();
//! let http = HttpDownloader::new(&settings).expect("client builds");
//! let downloader = Rendering::new(http, BrowserConfig::from_settings(&settings).tabs(4));
//! # drop(downloader);
//! ```

mod config;
mod error;
mod memory;
mod page;
mod pool;
mod render;

pub use config::BrowserConfig;
pub use error::{Error, Result};
pub use memory::ProcessTreeMemory;
pub use render::{Monitor, Rendering};
