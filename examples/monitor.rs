//! monitor: two extensions subscribed to the crawl's signals.
//!
//! - [`Monitor`], in the manner of spidermon: it counts responses and error statuses as
//!   they arrive, closes the crawl as soon as the error ratio goes over its bound, and when
//!   the crawl runs out of work checks the items scraped against a minimum; either verdict
//!   becomes the crawl's close reason (`stats.close_reason`), which `main` turns into a
//!   failing exit status.
//! - [`IdleFeeder`], in the manner of scrapy-redis: the spider reads only the listing pages
//!   it is given; each time the crawl is idle, the feeder hands it the next batch of
//!   listing pages from a channel (another task, a queue, a file could fill it), and the
//!   crawl goes on until the channel is empty and closed.
//!
//! ```text
//! cargo run --release --example monitor
//! ```
//!
//! The monitor's two checks are also built in: `monitor_min_items` and
//! `monitor_max_error_ratio` in crawler.toml's `[extensions]` switch on the built-in
//! `monitor` extension (`crawler::core::Monitor`); this one shows how such an extension
//! is written.

use std::sync::atomic::{AtomicU64, Ordering};

use crawler::prelude::*;
use tokio::sync::{Mutex, mpsc};

/// A book, from its page.
#[derive(Debug, Serialize, serde::Deserialize)]
pub(crate) struct Book {
    /// Its page.
    pub url: String,
    /// Its title.
    pub title: String,
}

/// Reads the listing pages it is given and the books they link to; follows no "next" page
/// (the feeder hands those out).
pub(crate) struct Listings {
    /// The first listing pages.
    pub start: Vec<String>,
}

impl Spider for Listings {
    type Item = Book;

    fn name(&self) -> &str {
        "monitor"
    }

    fn start_urls(&self) -> Vec<String> {
        self.start.clone()
    }

    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        if page.callback() == Some("book") {
            out.item(Book {
                url: page.url().to_string(),
                title: page.text_of("div.product h1")?,
            });
            return Ok(());
        }
        for href in page.select("article.book h3 a").attrs("href") {
            out.follow(href).callback("book");
        }
        Ok(())
    }
}

/// A spidermon-style monitor: closes the crawl when too many answers are errors, or when
/// it ends with fewer items than expected. Its verdict is the close reason.
pub(crate) struct Monitor {
    /// Fewer items than this when the crawl runs out of work fails it.
    pub min_items: u64,
    /// A share of error answers (status 400 and over) above this, once `sample` answers
    /// came, fails it.
    pub max_error_ratio: f64,
    /// Answers to see before the ratio is judged.
    pub sample: u64,
    /// Answers seen.
    pub responses: AtomicU64,
    /// Error answers seen.
    pub errors: AtomicU64,
}

impl Monitor {
    /// A monitor with these bounds.
    pub(crate) fn new(min_items: u64, max_error_ratio: f64) -> Self {
        Self {
            min_items,
            max_error_ratio,
            sample: 20,
            responses: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }
}

/// The close reason of a crawl whose error ratio went over the bound.
pub(crate) const TOO_MANY_ERRORS: &str = "monitor_error_ratio";
/// The close reason of a crawl that ran out of work with too few items.
pub(crate) const TOO_FEW_ITEMS: &str = "monitor_item_count";

impl<I: Send + Sync + 'static> Extension<I> for Monitor {
    fn name(&self) -> &str {
        "monitor"
    }

    // Called on a worker for every answer: two atomic counters, nothing slow.
    fn response_received(&self, response: &Response, _request: &Request, crawl: &CrawlHandle) {
        let seen = self.responses.fetch_add(1, Ordering::Relaxed) + 1;
        let errors = if response.status() >= 400 {
            self.errors.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.errors.load(Ordering::Relaxed)
        };
        if seen >= self.sample && errors as f64 / seen as f64 > self.max_error_ratio {
            crawl.close_spider(TOO_MANY_ERRORS);
        }
    }

    // The crawl is out of work and about to close as `finished`: the moment to judge it.
    async fn spider_idle(&self, crawl: &CrawlHandle) -> Vec<Request> {
        let items = crawl.stats().items_scraped;
        if items < self.min_items {
            tracing::error!(items, min = self.min_items, "monitor: too few items");
            crawl.close_spider(TOO_FEW_ITEMS);
        }
        Vec::new()
    }

    async fn spider_closed(&self, reason: &str, stats: &Stats) -> Result<()> {
        tracing::info!(
            reason,
            items = stats.items_scraped,
            responses = self.responses.load(Ordering::Relaxed),
            errors = self.errors.load(Ordering::Relaxed),
            "monitor report"
        );
        Ok(())
    }
}

/// Feeds an idle crawl the next batch of URLs from a channel (the scrapy-redis way).
pub(crate) struct IdleFeeder {
    batches: Mutex<mpsc::Receiver<Vec<String>>>,
    /// Times the crawl was idle.
    pub idle: AtomicU64,
}

impl IdleFeeder {
    /// A feeder reading batches from `batches`; the crawl closes once it is empty and
    /// every sender is gone.
    pub(crate) fn new(batches: mpsc::Receiver<Vec<String>>) -> Self {
        Self {
            batches: Mutex::new(batches),
            idle: AtomicU64::new(0),
        }
    }
}

impl<I: Send + Sync + 'static> Extension<I> for IdleFeeder {
    fn name(&self) -> &str {
        "idle_feeder"
    }

    async fn spider_idle(&self, _crawl: &CrawlHandle) -> Vec<Request> {
        self.idle.fetch_add(1, Ordering::Relaxed);
        // Waits for the next batch (a stop request ends the wait); none left: the crawl
        // closes.
        let Some(batch) = self.batches.lock().await.recv().await else {
            return Vec::new();
        };
        batch
            .iter()
            .filter_map(|url| match Request::get(url) {
                Ok(req) => Some(req),
                Err(e) => {
                    tracing::warn!(url, "not a URL, skipped: {e}");
                    None
                }
            })
            .collect()
    }
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    crawler::init_logging();
    let lab = crawler_lab::Lab::builder().books(200).start().await?;
    println!("lab site with 200 books at {}", lab.url());
    let page = |n: u32| lab.url_for(&format!("/catalogue/page-{n}.html"));
    // The spider starts with the first listing page; the rest come in batches of three
    // when it is idle.
    let (tx, rx) = mpsc::channel(16);
    let pages: Vec<String> = (2..=lab.catalogue_pages()).map(page).collect();
    for batch in pages.chunks(3) {
        tx.send(batch.to_vec()).await?;
    }
    drop(tx);
    let stats = Crawl::new(Listings {
        start: vec![page(1)],
    })
    .extension(IdleFeeder::new(rx))
    .extension(Monitor::new(150, 0.1))
    .set("throttle", "fixed")
    .set("download_delay", "0s")
    .set("concurrency_per_host", "16")
    .feed("monitor.jsonl")?
    .run()
    .await?;
    println!("{stats}");
    lab.shutdown().await;
    if stats.close_reason != "finished" {
        return Err(format!("the monitor failed the crawl: {}", stats.close_reason).into());
    }
    Ok(())
}
