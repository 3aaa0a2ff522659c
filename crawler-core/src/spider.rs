//! The Spider trait: what a user writes.

use std::future::Future;

use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};
use crate::failed::FailedRequest;
use crate::output::Output;
use crate::request::Request;
use crate::response::Response;
use crate::spider_args::SpiderContext;
use crate::stats::Stats;
use crate::statuses::AllowedStatuses;

/// A spider: where to start, and how to turn pages into items and more requests.
///
/// A spider is a plain struct. `parse` is written as an ordinary `async fn` in the impl; the
/// trait only promises the future is `Send`, so the engine can run many pages at once.
///
/// Several page kinds are handled by naming a callback on the request
/// (`out.follow(href).callback("book")`) and matching on [`Response::callback`] in `parse`.
/// An error returned by `parse` (`?`) fails the page: the engine logs it with the page's URL
/// and the callback's name and counts it in the stats; [`Context`](crate::Context) adds what
/// the spider was doing.
///
/// ```
/// use crawler_core::{Output, Response, Result, Spider};
///
/// #[derive(serde::Serialize)]
/// struct Book { title: String, price: String }
///
/// struct Books;
///
/// impl Spider for Books {
///     type Item = Book;
///     fn name(&self) -> &str { "books" }
///     fn start_urls(&self) -> Vec<String> { vec!["http://127.0.0.1:8080/".into()] }
///     async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
///         match page.callback() {
///             Some("book") => out.item(Book {
///                 title: page.text_of("div.product h1")?,
///                 price: page.text_of("p.price")?,
///             }),
///             _ => {
///                 for href in page.select("article.book h3 a").attrs("href") {
///                     out.follow(href).callback("book");
///                 }
///                 out.follow_all(page.select("li.next a").attrs("href"));
///             }
///         }
///         Ok(())
///     }
/// }
/// ```
pub trait Spider: Send + Sync + 'static {
    /// The items this spider produces.
    type Item: Serialize + Send + 'static;

    /// A short unique name, used by `crawl NAME`, in logs and in job directories.
    fn name(&self) -> &str;

    /// Called once before the crawl starts (before [`start_requests`](Spider::start_requests)),
    /// with the spider's arguments (`crawl NAME -a key=value`, [`Crawl::arg`] in code) and
    /// the crawl's effective settings. Keep what the spider needs in its own fields. An
    /// argument the spider never reads here is refused as unknown; an error stops the crawl
    /// before its first request.
    ///
    /// [`custom_settings`](Spider::custom_settings) is read before this hook, so it cannot
    /// depend on the arguments.
    ///
    /// ```
    /// use crawler_core::{Output, Response, Result, Spider, SpiderContext};
    ///
    /// struct Books { start: String, limit: usize, user_agent: String }
    ///
    /// impl Spider for Books {
    ///     type Item = String;
    ///     fn name(&self) -> &str { "books" }
    ///     fn open(&mut self, ctx: &SpiderContext) -> Result<()> {
    ///         if let Some(url) = ctx.arg("url") {
    ///             self.start = url.to_owned();
    ///         }
    ///         self.limit = ctx.parse_arg("limit")?.unwrap_or(self.limit);
    ///         self.user_agent = ctx.settings().user_agent.clone();
    ///         Ok(())
    ///     }
    ///     fn start_urls(&self) -> Vec<String> { vec![self.start.clone()] }
    ///     async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
    ///         out.item(page.text_of("title")?);
    ///         Ok(())
    ///     }
    /// }
    /// ```
    ///
    /// [`Crawl::arg`]: https://docs.rs/crawler/latest/crawler/struct.Crawl.html#method.arg
    fn open(&mut self, ctx: &SpiderContext<'_>) -> Result<()> {
        let _ = ctx;
        Ok(())
    }

    /// Called once when the crawl opens (Scrapy's `spider_opened`), after
    /// [`open`](Spider::open) and the feeds and pipelines, before the first request:
    /// [`start_requests`](Spider::start_requests) comes after it, so it may prepare what
    /// they read. Open a connection, read a file of URLs, check a service is up. An error
    /// fails the crawl before any request is sent, with a message naming the spider.
    /// Every run of a job opens the spider, a resumed one included (whose start requests
    /// are not queued again).
    ///
    /// ```
    /// use std::sync::OnceLock;
    /// use crawler_core::{Output, Response, Result, Spider};
    ///
    /// struct FromFile { path: String, urls: OnceLock<Vec<String>> }
    ///
    /// impl Spider for FromFile {
    ///     type Item = String;
    ///     fn name(&self) -> &str { "from_file" }
    ///     async fn opened(&self) -> Result<()> {
    ///         let text = std::fs::read_to_string(&self.path)?;
    ///         let _ = self.urls.set(text.lines().map(str::to_owned).collect());
    ///         Ok(())
    ///     }
    ///     fn start_urls(&self) -> Vec<String> { self.urls.get().cloned().unwrap_or_default() }
    ///     async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
    ///         out.item(page.url().to_string());
    ///         Ok(())
    ///     }
    /// }
    /// ```
    fn opened(&self) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }

    /// URLs to start from (parsed with the default callback).
    fn start_urls(&self) -> Vec<String> {
        Vec::new()
    }

    /// The first requests. By default, one GET per start URL; an invalid start URL is an error.
    fn start_requests(&self) -> Result<Vec<Request>> {
        self.start_urls().iter().map(Request::get).collect()
    }

    /// Domains this spider may visit; links elsewhere are filtered as offsite. Empty = any.
    /// A domain also allows its subdomains.
    fn allowed_domains(&self) -> Vec<String> {
        Vec::new()
    }

    /// The spider's own settings as `key = value` pairs, applied over the project's settings
    /// file and under the environment and command line.
    fn custom_settings(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    /// Non-2xx statuses whose answers reach the callback instead of failing the request
    /// (Scrapy's spider attribute `handle_httpstatus_list`): none by default. Retries come
    /// first (an allowed 503 is retried, and its host is held, as any 503), then the last
    /// answer goes to the request's callback with [`Response::status`] set and its body.
    /// A redirect status listed here is handed over instead of followed. A request's own
    /// [`Request::allow_statuses`] replaces this list; this list replaces the
    /// `allowed_statuses` setting's (unless the setting says `"all"`).
    ///
    /// ```
    /// use crawler_core::{AllowedStatuses, Output, Response, Result, Spider};
    ///
    /// struct Gone;
    ///
    /// impl Spider for Gone {
    ///     type Item = String;
    ///     fn name(&self) -> &str { "gone" }
    ///     fn allowed_statuses(&self) -> AllowedStatuses { AllowedStatuses::list([404, 410]) }
    ///     async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
    ///         if page.status() == 404 {
    ///             out.item(format!("missing: {}", page.url()));
    ///         }
    ///         Ok(())
    ///     }
    /// }
    /// ```
    fn allowed_statuses(&self) -> AllowedStatuses {
        AllowedStatuses::default()
    }

    /// The callback names [`parse`](Spider::parse) dispatches on ([`Response::callback`]),
    /// besides the default `parse`: what `parse URL --callback NAME` accepts, and lists when
    /// a name is not among them. Empty (the default): not declared, so any name is run.
    fn callbacks(&self) -> Vec<&str> {
        Vec::new()
    }

    /// Parse a successful (2xx) response, or one whose status the spider, the request or the
    /// settings allow ([`Spider::allowed_statuses`]).
    fn parse(
        &self,
        page: Response,
        out: &mut Output<Self::Item>,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Called instead of [`parse`](Spider::parse) when the server answered 304 Not Modified
    /// to a conditional request and the HTTP cache holds no copy to replay (with the cache
    /// on, `parse` sees the cached page instead, and [`Response::is_revalidated`] says so).
    ///
    /// `page` is the 304 itself: its request, and the headers the server sent, but no body.
    /// The default does nothing: the page is unchanged since the last crawl, so its items
    /// were already produced then. Override it to emit something anyway (from your own
    /// records) or to count unchanged pages.
    fn not_modified(
        &self,
        page: Response,
        out: &mut Output<Self::Item>,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = (page, out);
        async { Ok(()) }
    }

    /// Called when a request that named an errback ([`Request::errback`], Scrapy's
    /// `errback=`) ends without a page for its callback: after its retries (a timeout, a
    /// refused connection, a DNS error, a status the spider does not handle…), or refused
    /// before it was sent (robots.txt, a forbidden address). Dispatch on
    /// [`FailedRequest::errback`] as `parse` does on [`Response::callback`]. It may emit
    /// items and requests like a callback (an item saying the page is gone, a request to a
    /// mirror); the failure is still counted in the stats as what it was, but not listed in
    /// the failures file unless the errback returns an error. Requests without an errback
    /// fail as ever. A request given up unsent with its host (counted `skipped_host`: a
    /// Retry-After over `max_retry_after`, an unreachable robots.txt) reaches it too, as
    /// [`FailureKind::HostSkipped`](crate::FailureKind::HostSkipped) with no attempt made and
    /// the cause as its message. Spider middlewares do not see its output.
    ///
    /// The default returns an error (the request named an errback the spider does not
    /// implement), so the failure is listed in the failures file and counted as a spider
    /// error.
    ///
    /// ```
    /// use crawler_core::{FailedRequest, Output, Request, Response, Result, Spider};
    ///
    /// struct Products;
    ///
    /// impl Spider for Products {
    ///     type Item = String;
    ///     fn name(&self) -> &str { "products" }
    ///     fn start_requests(&self) -> Result<Vec<Request>> {
    ///         Ok(vec![Request::get("http://127.0.0.1:8080/p/1")?.errback("gone")])
    ///     }
    ///     async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
    ///         out.item(page.text_of("h1")?);
    ///         Ok(())
    ///     }
    ///     async fn errback(&self, failed: FailedRequest, out: &mut Output<String>) -> Result<()> {
    ///         let (url, kind) = (failed.url(), failed.kind());
    ///         out.item(format!("{url} failed: {kind} ({:?})", failed.status()));
    ///         Ok(())
    ///     }
    /// }
    /// ```
    fn errback(
        &self,
        failure: FailedRequest,
        out: &mut Output<Self::Item>,
    ) -> impl Future<Output = Result<()>> + Send {
        let _ = out;
        let message = format!(
            "the request names the errback '{}', but the spider does not implement \
             Spider::errback ({} failed: {})",
            failure.errback().unwrap_or_default(),
            failure.url(),
            failure.message()
        );
        async move { Err(Error::new(ErrorKind::Other, message)) }
    }

    /// Called once when the crawl ends, after the feeds are written and the pipelines are
    /// closed (Scrapy's `closed(reason)`), with the reason it closed
    /// ([`Stats::close_reason`]: `finished`, `stopped`, a close setting's name, the
    /// reason given to [`Output::close_spider`]…) and the final stats, the spider's own
    /// counters ([`Output::stats`]) included. Write a summary, flush a connection, check
    /// counts. An error is logged; the crawl's result does not change.
    fn closed(&self, reason: &str, stats: &Stats) -> impl Future<Output = Result<()>> + Send {
        let _ = (reason, stats);
        async { Ok(()) }
    }
}
