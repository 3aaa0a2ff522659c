//! The Spider trait: what a user writes.

use std::future::Future;

use serde::Serialize;

use crate::error::Result;
use crate::output::Output;
use crate::request::Request;
use crate::response::Response;
use crate::spider_args::SpiderContext;

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

    /// URLs to start from (parsed with the default callback).
    fn start_urls(&self) -> Vec<String> {
        Vec::new()
    }

    /// The first requests. By default, one GET per start URL; an invalid start URL is an error.
    fn start_requests(&self) -> Result<Vec<Request>> {
        self.start_urls().iter().map(|u| Request::get(u)).collect()
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

    /// Parse a successful (2xx) response.
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
}
