//! The built-in `monitor` extension (spidermon's item-count and error-ratio monitors): its
//! verdict is the crawl's close reason.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::extension::{CrawlHandle, Extension};
use crate::request::Request;
use crate::response::Response;

/// The close reason of a crawl whose share of error answers went over
/// `monitor_max_error_ratio`.
pub const MONITOR_ERROR_RATIO: &str = "monitor_error_ratio";
/// The close reason of a crawl that ran out of work with fewer items than
/// `monitor_min_items`.
pub const MONITOR_ITEM_COUNT: &str = "monitor_item_count";

/// Answers to see before the error ratio is judged: over the first few answers a ratio
/// says little (one 404 of the first two would be 50%).
pub const MONITOR_SAMPLE: u64 = 20;

/// The built-in `monitor` extension, named in the `extensions` setting (on by default) and
/// switched on by its bounds: it closes the crawl as `monitor_error_ratio` as soon as the
/// share of answers with a status of 400 or more goes over `monitor_max_error_ratio` (once
/// [`MONITOR_SAMPLE`] answers came), and as `monitor_item_count` when the crawl runs out of
/// work with fewer items than `monitor_min_items` (judged at `spider_idle`, so listed after
/// an extension that feeds an idle spider, it judges only the real end).
#[derive(Debug)]
pub struct Monitor {
    min_items: u64,
    max_error_ratio: f64,
    responses: AtomicU64,
    errors: AtomicU64,
}

impl Monitor {
    /// The monitor the settings ask for, or `None` when both its bounds are off (0): then
    /// it is not registered, and costs nothing.
    pub fn from_settings(settings: &crate::Settings) -> Option<Self> {
        (settings.monitor_min_items > 0 || settings.monitor_max_error_ratio > 0.0).then(|| Self {
            min_items: settings.monitor_min_items,
            max_error_ratio: settings.monitor_max_error_ratio,
            responses: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        })
    }
}

impl<I: 'static> Extension<I> for Monitor {
    fn name(&self) -> &str {
        "monitor"
    }

    // Called on a worker for every answer: two atomic counters, nothing slow.
    fn response_received(&self, response: &Response, _request: &Request, crawl: &CrawlHandle) {
        if self.max_error_ratio <= 0.0 {
            return;
        }
        let seen = self.responses.fetch_add(1, Ordering::Relaxed) + 1;
        let errors = if response.status() >= 400 {
            self.errors.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.errors.load(Ordering::Relaxed)
        };
        if seen >= MONITOR_SAMPLE && errors as f64 / seen as f64 > self.max_error_ratio {
            crawl.close_spider(MONITOR_ERROR_RATIO);
        }
    }

    // Out of work, about to close as `finished`: judge the item count (exact now).
    async fn spider_idle(&self, crawl: &CrawlHandle) -> Vec<Request> {
        if self.min_items > 0 && crawl.stats().items_scraped < self.min_items {
            crawl.close_spider(MONITOR_ITEM_COUNT);
        }
        Vec::new()
    }
}
