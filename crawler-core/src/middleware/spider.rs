//! Spider middlewares: the trait, and what it knows of the page. The stack that runs them
//! over a spider's output is crawler-engine's `SpiderWithMiddlewares`.

use url::Url;

use crate::request::Request;
use crate::response::Response;

/// What a spider middleware knows about the page whose output it sees.
#[derive(Debug, Clone)]
pub struct Page {
    /// The page's final URL (after redirects).
    pub url: Url,
    /// The HTTP status.
    pub status: u16,
    /// The request that fetched it.
    pub request: Request,
}

impl Page {
    /// What the middlewares are told about `page`, taken before the callback consumes it.
    pub fn of(page: &Response) -> Self {
        Self {
            url: page.url().clone(),
            status: page.status(),
            request: page.request().clone(),
        }
    }
}

/// A spider middleware: filters or transforms what the spider's callbacks return.
///
/// Generic over the item type, so a middleware can look into items (drop books over a
/// price); middlewares that only touch requests implement it for every `I`.
pub trait SpiderMiddleware<I>: Send + Sync + 'static {
    /// A short name for logs and stats.
    fn name(&self) -> &str;

    /// Filter or change the items and requests a callback produced for `page`.
    fn process_output(&self, page: &Page, items: &mut Vec<I>, requests: &mut Vec<Request>) {
        let _ = (page, items, requests);
    }

    /// Filter or change the spider's start requests.
    fn process_start_requests(&self, requests: &mut Vec<Request>) {
        let _ = requests;
    }

    /// The middleware's own counters, added to the crawl's middleware stats.
    fn counters(&self) -> Vec<(String, u64)> {
        Vec::new()
    }
}

/// A boxed spider middleware, as kept in a stack.
pub type BoxedSpiderMiddleware<I> = Box<dyn SpiderMiddleware<I>>;
