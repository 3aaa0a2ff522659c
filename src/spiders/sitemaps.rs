//! The sitemap spider: [`SitemapSpider`] and its builder, stats and the meta keys it sets.

use std::fmt;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crawler_core::{Error, ErrorKind, Output, Request, Response, Result, Url, parse_http_url};
pub use crawler_http::{Alternate, SITEMAP_MAX_BYTES, SitemapEntry};
use crawler_http::{
    MAX_BODY_META, NOT_PAGE_META, ROBOTS_SITEMAPS_META, SitemapKind, SitemapLimits, SitemapParse,
    parse_sitemap,
};
use regex::Regex;

/// The callback of sitemap requests (reserved: a spider's own callbacks must not use it).
pub const SITEMAP_CALLBACK: &str = "sitemap:file";
/// The callback of robots.txt requests made for their `Sitemap:` lines (reserved).
pub const ROBOTS_CALLBACK: &str = "sitemap:robots";
/// Request meta key of page requests: the entry's `<lastmod>`, Unix seconds, when it had one.
pub const LASTMOD_META: &str = "sitemap_lastmod";
/// Request meta key of sitemap requests: how many indexes lie above this sitemap.
const DEPTH_META: &str = "sitemap_depth";
/// Bodies smaller than this are parsed in place; larger (or gzipped, which can inflate to
/// 50 MB) go to the blocking pool so they never stall an async worker.
const INLINE_PARSE_BYTES: usize = 64 * 1024;
/// Levels of sitemap indexes followed below the start sitemaps, by default.
const DEFAULT_MAX_DEPTH: u32 = 3;
/// Sitemap files requested in all, by default.
const DEFAULT_MAX_SITEMAPS: usize = 1_000;
/// Error messages kept for [`SitemapStats::errors`]; the count goes on past it.
const MAX_ERROR_MESSAGES: usize = 100;

type EntryFilter = dyn Fn(&SitemapEntry) -> bool + Send + Sync;

/// Builds a [`SitemapSpider`]; patterns and URLs are checked in [`build`](Self::build).
#[derive(Default)]
#[must_use]
pub struct SitemapSpiderBuilder {
    sitemaps: Vec<String>,
    robots: Vec<String>,
    rules: Vec<(String, Option<String>)>,
    follow: Vec<String>,
    filter: Option<Arc<EntryFilter>>,
    alternates: bool,
    max_depth: Option<u32>,
    max_sitemaps: Option<usize>,
    keep_unchanged: bool,
    priority: i32,
}

impl SitemapSpiderBuilder {
    /// Start from this sitemap (an index, a urlset or a text file; gzipped or not).
    pub fn sitemap(mut self, url: impl Into<String>) -> Self {
        self.sitemaps.push(url.into());
        self
    }

    /// Start from the `Sitemap:` lines of the robots.txt of the site of `url` (any URL of
    /// the site). With robots obeyed, the lines come from the robots.txt the crawler reads
    /// anyway, so discovery costs no extra request.
    pub fn robots(mut self, url: impl Into<String>) -> Self {
        self.robots.push(url.into());
        self
    }

    /// Entries whose URL matches `pattern` (a [regex](https://docs.rs/regex), searched
    /// anywhere in the URL) are parsed by `callback`. Rules are tried in order; the first
    /// match wins. With rules, entries no rule matches are ignored (and counted); without
    /// any, every entry goes to the default callback.
    pub fn rule(mut self, pattern: impl Into<String>, callback: impl Into<String>) -> Self {
        self.rules.push((pattern.into(), Some(callback.into())));
        self
    }

    /// Like [`rule`](Self::rule), sending matches to the default callback (`None`).
    pub fn rule_default(mut self, pattern: impl Into<String>) -> Self {
        self.rules.push((pattern.into(), None));
        self
    }

    /// Follow only the sitemaps of an index whose URL matches one of these patterns
    /// (default: all of them).
    pub fn follow(mut self, pattern: impl Into<String>) -> Self {
        self.follow.push(pattern.into());
        self
    }

    /// Keep only the page entries for which `keep` returns true (it sees the URL, lastmod
    /// and alternates); the rest are counted in [`SitemapStats::filtered`].
    pub fn filter(mut self, keep: impl Fn(&SitemapEntry) -> bool + Send + Sync + 'static) -> Self {
        self.filter = Some(Arc::new(keep));
        self
    }

    /// Also request each entry's alternate-language versions (`<xhtml:link
    /// rel="alternate">`), with the entry's callback. Default off.
    pub fn alternates(mut self, on: bool) -> Self {
        self.alternates = on;
        self
    }

    /// How many levels of sitemap indexes are followed below the start sitemaps (default 3);
    /// deeper ones are counted in [`SitemapStats::too_deep`].
    pub fn max_depth(mut self, depth: u32) -> Self {
        self.max_depth = Some(depth);
        self
    }

    /// Request at most this many sitemap files in all (start sitemaps, those robots.txt
    /// lists and those indexes list), so a site with endless sitemap indexes cannot grow the
    /// frontier without bound. Default 1,000.
    pub fn max_sitemaps(mut self, n: usize) -> Self {
        self.max_sitemaps = Some(n);
        self
    }

    /// Request entries even when their `<lastmod>` says they have not changed since the
    /// last fetch (default: skip them, when the crawl keeps validators).
    pub fn keep_unchanged(mut self, keep: bool) -> Self {
        self.keep_unchanged = keep;
        self
    }

    /// Priority of the page requests (sitemaps get one more, so discovery runs ahead).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Check the URLs and compile the patterns.
    pub fn build(self) -> Result<SitemapSpider> {
        let compile = |p: &str| {
            Regex::new(p).map_err(|e| {
                Error::new(
                    ErrorKind::Settings,
                    format!("invalid sitemap pattern '{p}'"),
                )
                .with_source(e)
            })
        };
        let mut starts = Vec::new();
        for s in &self.sitemaps {
            starts.push(Start::Sitemap(parse_http_url(s)?));
        }
        for s in &self.robots {
            let site = parse_http_url(s)?;
            let robots = site.join("/robots.txt").map_err(|e| {
                Error::new(ErrorKind::Url, format!("no robots.txt URL for '{s}'")).with_source(e)
            })?;
            starts.push(Start::Robots(robots));
        }
        let rules = self
            .rules
            .iter()
            .map(|(p, cb)| Ok((compile(p)?, cb.clone())))
            .collect::<Result<Vec<_>>>()?;
        let follow = self
            .follow
            .iter()
            .map(|p| compile(p))
            .collect::<Result<Vec<_>>>()?;
        let limits = SitemapLimits {
            alternates: self.alternates,
            ..SitemapLimits::default()
        };
        let counters = Counters::default();
        let roots = starts
            .iter()
            .filter(|s| matches!(s, Start::Sitemap(_)))
            .count();
        counters.issued.store(roots as u64, Ordering::Relaxed);
        Ok(SitemapSpider {
            starts,
            rules,
            follow,
            filter: self.filter,
            skip_unchanged: !self.keep_unchanged,
            priority: self.priority,
            limits,
            max_depth: self.max_depth.unwrap_or(DEFAULT_MAX_DEPTH),
            max_sitemaps: self.max_sitemaps.unwrap_or(DEFAULT_MAX_SITEMAPS),
            counters: Arc::new(counters),
        })
    }
}

#[derive(Debug, Clone)]
enum Start {
    Sitemap(Url),
    Robots(Url),
}

/// Sitemap spider mode: start from sitemaps instead of links.
///
/// A [`SitemapSpider`] is a value a spider holds, like [`Rules`](crate::spiders::Rules): it
/// makes the start requests (sitemaps named in code, and the `Sitemap:` lines of sites'
/// robots.txt), and from `parse` it turns each sitemap into requests: indexes into requests
/// for their sitemaps (to a depth limit), urlsets into requests for their pages, each with
/// the callback of the first [rule](SitemapSpiderBuilder::rule) its URL matches.
///
/// Sitemaps travel the normal engine path: robots.txt is checked, the host's slot paces them,
/// the stats count them. Their bodies may be up to 50 MB ([`SITEMAP_MAX_BYTES`], more than
/// `max_body_size` lets a page be), are parsed as a stream off the async workers, and bad
/// files (malformed XML, entity tricks, gzip bombs, more than 50,000 URLs) end in an error
/// that names the sitemap and the position: counted as a spider error, logged, and the
/// entries read before it are still used.
///
/// **Incremental re-crawls.** When the crawl keeps validators (`cache_dir` or `job_dir`), an
/// entry whose `<lastmod>` is not newer than the copy fetched last time is skipped without
/// any request (see [`Validators::version_time`](crawler_core::Validators::version_time)).
///
/// ```no_run
/// use crawler::prelude::*;
/// use crawler::spiders::SitemapSpider;
///
/// struct Books { sitemaps: SitemapSpider }
///
/// impl Spider for Books {
///     type Item = String;
///     fn name(&self) -> &str { "books" }
///     fn start_requests(&self) -> Result<Vec<Request>> { Ok(self.sitemaps.start_requests()) }
///     async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
///         if self.sitemaps.handle(&page, out).await? {
///             return Ok(()); // a sitemap: its entries are queued
///         }
///         if page.callback() == Some("book") {
///             out.item(page.text_of("h1")?);
///         }
///         Ok(())
///     }
/// }
///
/// # fn main() -> Result<()> {
/// let sitemaps = SitemapSpider::builder()
///     .robots("https://books.example/")           // its robots.txt lists the sitemaps
///     .rule(r"/catalogue/book-\d+\.html$", "book") // everything else is ignored
///     .build()?;
/// let spider = Books { sitemaps };
/// # Ok(()) }
/// ```
pub struct SitemapSpider {
    starts: Vec<Start>,
    rules: Vec<(Regex, Option<String>)>,
    follow: Vec<Regex>,
    filter: Option<Arc<EntryFilter>>,
    skip_unchanged: bool,
    priority: i32,
    /// What one sitemap file may hold (the parser's limits).
    limits: SitemapLimits,
    /// Levels of indexes followed below the start sitemaps.
    max_depth: u32,
    /// Sitemap requests made in all.
    max_sitemaps: usize,
    counters: Arc<Counters>,
}

impl fmt::Debug for SitemapSpider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SitemapSpider")
            .field("starts", &self.starts)
            .field("rules", &self.rules.len())
            .field("limits", &self.limits)
            .field("max_depth", &self.max_depth)
            .field("max_sitemaps", &self.max_sitemaps)
            .finish_non_exhaustive()
    }
}

impl SitemapSpider {
    /// Start building one.
    pub fn builder() -> SitemapSpiderBuilder {
        SitemapSpiderBuilder::default()
    }

    /// The first requests: one per start sitemap, and one per robots.txt to read.
    pub fn start_requests(&self) -> Vec<Request> {
        self.starts
            .iter()
            .map(|s| match s {
                Start::Sitemap(url) => self.sitemap_request(url.clone(), 0),
                Start::Robots(url) => {
                    let mut r = Request::new(url.clone())
                        .callback(ROBOTS_CALLBACK)
                        .priority(self.priority.saturating_add(1));
                    r.meta.insert(ROBOTS_SITEMAPS_META.to_owned(), true.into());
                    r
                }
            })
            .collect()
    }

    /// Whether `page` is one of this helper's (a sitemap or a robots.txt it asked for).
    pub fn is_sitemap(&self, page: &Response) -> bool {
        matches!(page.callback(), Some(SITEMAP_CALLBACK | ROBOTS_CALLBACK))
    }

    /// Handle `page` if it is a sitemap or robots.txt this helper asked for: queue the
    /// requests it leads to and return `Ok(true)`. Other pages return `Ok(false)` untouched.
    ///
    /// A sitemap that could not be read to its end (malformed XML, over the size or URL
    /// limits) still has its readable entries queued, and then returns an error naming the
    /// sitemap and the position, which the engine counts as a spider error.
    pub async fn handle<I>(&self, page: &Response, out: &mut Output<I>) -> Result<bool> {
        match page.callback() {
            Some(ROBOTS_CALLBACK) => {
                self.robots_page(page, out);
                Ok(true)
            }
            Some(SITEMAP_CALLBACK) => {
                self.sitemap_page(page, out, |entry, out| self.page_entry(page, entry, out))
                    .await?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Like [`handle`](Self::handle), for a spider that lists a site's sitemap entries
    /// rather than fetching the pages they name (the `crawler sitemap` command): robots.txt
    /// and indexes still lead to sitemap requests (within the depth limit and
    /// [`max_sitemaps`](SitemapSpiderBuilder::max_sitemaps)), and each page entry that a
    /// rule matches and the filter keeps becomes the item `item(entry)` instead of a
    /// request. Nothing is fetched for an entry, so `<lastmod>` skipping does not apply and
    /// alternates are not requested (the entry carries them).
    ///
    /// As with `handle`, a sitemap that could not be read to its end still has its readable
    /// entries turned into items before the error is returned.
    pub async fn handle_as_items<I>(
        &self,
        page: &Response,
        out: &mut Output<I>,
        item: impl Fn(&SitemapEntry) -> I + Send + Sync,
    ) -> Result<bool> {
        match page.callback() {
            Some(ROBOTS_CALLBACK) => {
                self.robots_page(page, out);
                Ok(true)
            }
            Some(SITEMAP_CALLBACK) => {
                self.sitemap_page(page, out, |entry, out| {
                    if self.chosen(entry).is_some() {
                        out.item(item(entry));
                    }
                })
                .await?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// A handle on this helper's counters that stays valid after the spider is handed to a
    /// crawl.
    pub fn stats_handle(&self) -> SitemapStatsHandle {
        SitemapStatsHandle(Arc::clone(&self.counters))
    }

    /// The counters so far.
    pub fn stats(&self) -> SitemapStats {
        self.counters.snapshot()
    }

    /// Take one of the `max_sitemaps` sitemap requests, if any is left.
    fn reserve_sitemap(&self) -> bool {
        let max = self.max_sitemaps as u64;
        let taken = self
            .counters
            .issued
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok();
        if !taken {
            self.counters.too_many.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    fn sitemap_request(&self, url: Url, depth: u32) -> Request {
        let mut r = Request::new(url)
            .callback(SITEMAP_CALLBACK)
            .priority(self.priority.saturating_add(1));
        r.meta.insert(DEPTH_META.to_owned(), depth.into());
        r.meta
            .insert(MAX_BODY_META.to_owned(), self.limits.max_bytes.into());
        // A sitemap is not a page: its latency must not set the host's page baseline.
        r.meta.insert(NOT_PAGE_META.to_owned(), true.into());
        r
    }

    fn robots_page<I>(&self, page: &Response, out: &mut Output<I>) {
        self.counters.robots.fetch_add(1, Ordering::Relaxed);
        // Bounded by the body, which the robots cache caps at 500 KiB (or max_body_size).
        for line in page.text().lines() {
            let line = line.split('#').next().unwrap_or("").trim();
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            if !key.trim().eq_ignore_ascii_case("sitemap") {
                continue;
            }
            match page.urljoin(value.trim()) {
                Ok(url) if self.reserve_sitemap() => out.request(self.sitemap_request(url, 0)),
                Ok(_) => {}
                Err(e) => self
                    .counters
                    .error(format!("robots.txt {}: {e}", page.url())),
            }
        }
    }

    /// Read a sitemap: an index's sitemaps are requested (the one place `max_depth` and
    /// `max_sitemaps` are enforced, with [`Self::robots_page`]), a urlset's entries go to
    /// `entry`.
    async fn sitemap_page<I>(
        &self,
        page: &Response,
        out: &mut Output<I>,
        mut entry: impl FnMut(&SitemapEntry, &mut Output<I>) + Send,
    ) -> Result<()> {
        let depth: u32 = page.meta(DEPTH_META).unwrap_or(0);
        let parse = self.parse(page).await?;
        let c = &self.counters;
        c.sitemaps.fetch_add(1, Ordering::Relaxed);
        c.invalid.fetch_add(parse.skipped as u64, Ordering::Relaxed);
        c.dropped.fetch_add(parse.dropped as u64, Ordering::Relaxed);
        match parse.kind {
            SitemapKind::Index => {
                tracing::info!(
                    "sitemap index {}: {} sitemaps",
                    page.url(),
                    parse.entries.len()
                );
                for entry in &parse.entries {
                    self.child_sitemap(entry, depth, out);
                }
            }
            SitemapKind::UrlSet | SitemapKind::Text => {
                for e in &parse.entries {
                    entry(e, out);
                }
            }
            SitemapKind::Unknown => {}
        }
        let mut problems = Vec::new();
        if let Some(e) = &parse.error {
            problems.push(e.to_string());
        }
        if parse.dropped > 0 {
            problems.push(format!(
                "sitemap {}: {} entries past the {}-URL limit were dropped",
                page.url(),
                parse.dropped,
                self.limits.max_urls
            ));
        }
        if problems.is_empty() {
            return Ok(());
        }
        for p in &problems {
            c.error(p.clone());
        }
        Err(Error::msg(problems.join("; ")))
    }

    async fn parse(&self, page: &Response) -> Result<SitemapParse> {
        let url = page.url().to_string();
        let body = page.body().clone();
        let limits = self.limits.clone();
        if body.len() < INLINE_PARSE_BYTES && !body.starts_with(&[0x1f, 0x8b]) {
            return Ok(parse_sitemap(&url, &body, &limits));
        }
        tokio::task::spawn_blocking(move || parse_sitemap(&url, &body, &limits))
            .await
            .map_err(|e| Error::msg(format!("sitemap {}: parser crashed: {e}", page.url())))
    }

    fn child_sitemap<I>(&self, entry: &SitemapEntry, depth: u32, out: &mut Output<I>) {
        let c = &self.counters;
        if depth >= self.max_depth {
            c.too_deep.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if !self.follow.is_empty() && !self.follow.iter().any(|r| r.is_match(&entry.loc)) {
            c.filtered.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // A sitemap's own lastmod is not trusted for skipping: skipping a file would hide
        // every entry in it, including changed ones whose file date was not updated.
        match Url::parse(&entry.loc) {
            Ok(url) if self.reserve_sitemap() => out.request(self.sitemap_request(url, depth + 1)),
            Ok(_) => {}
            Err(_) => {
                c.invalid.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Count a page entry, and whether the filter keeps it and a rule matches it: then its
    /// URL and the matching rule's callback.
    fn chosen(&self, entry: &SitemapEntry) -> Option<(Url, Option<String>)> {
        let c = &self.counters;
        c.entries.fetch_add(1, Ordering::Relaxed);
        if self.filter.as_ref().is_some_and(|keep| !keep(entry)) {
            c.filtered.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let callback = if self.rules.is_empty() {
            None
        } else {
            match self.rules.iter().find(|(r, _)| r.is_match(&entry.loc)) {
                Some((_, cb)) => cb.clone(),
                None => {
                    c.unmatched.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            }
        };
        let Ok(url) = Url::parse(&entry.loc) else {
            c.invalid.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        Some((url, callback))
    }

    fn page_entry<I>(&self, page: &Response, entry: &SitemapEntry, out: &mut Output<I>) {
        let Some((url, callback)) = self.chosen(entry) else {
            return;
        };
        let c = &self.counters;
        if self.unchanged(page, &url, entry.lastmod) {
            c.skipped_unchanged.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let alternates: Vec<Url> = entry
            .alternates
            .iter()
            .filter_map(|a| Url::parse(&a.href).ok())
            .filter(|a| *a != url)
            .collect();
        for u in std::iter::once(url).chain(alternates) {
            let mut r = Request::new(u).priority(self.priority);
            r.callback.clone_from(&callback);
            if let Some(t) = entry.lastmod {
                r.meta.insert(LASTMOD_META.to_owned(), t.into());
            }
            c.requested.fetch_add(1, Ordering::Relaxed);
            out.request(r);
        }
    }

    /// Whether the copy fetched last time is at least as new as the entry's lastmod.
    fn unchanged(&self, page: &Response, url: &Url, lastmod: Option<i64>) -> bool {
        let (true, Some(lastmod), Some(history)) = (self.skip_unchanged, lastmod, page.history())
        else {
            return false;
        };
        match history.validators(url) {
            Ok(Some(v)) => lastmod <= v.version_time(),
            Ok(None) => false,
            Err(e) => {
                tracing::warn!(%url, "stored validators unreadable, fetching: {e}");
                false
            }
        }
    }
}

/// Counters shared by the helper and its handles.
#[derive(Default)]
struct Counters {
    robots: AtomicU64,
    sitemaps: AtomicU64,
    entries: AtomicU64,
    requested: AtomicU64,
    skipped_unchanged: AtomicU64,
    filtered: AtomicU64,
    unmatched: AtomicU64,
    invalid: AtomicU64,
    dropped: AtomicU64,
    too_deep: AtomicU64,
    /// Sitemap requests made so far (start sitemaps included), against `max_sitemaps`.
    issued: AtomicU64,
    too_many: AtomicU64,
    errors: AtomicU64,
    messages: Mutex<Vec<String>>,
}

impl Counters {
    fn error(&self, message: String) {
        tracing::warn!("{message}");
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut m = self.messages.lock().unwrap_or_else(|p| p.into_inner());
        if m.len() < MAX_ERROR_MESSAGES {
            m.push(message);
        }
    }

    fn snapshot(&self) -> SitemapStats {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SitemapStats {
            robots: n(&self.robots),
            sitemaps: n(&self.sitemaps),
            entries: n(&self.entries),
            requested: n(&self.requested),
            skipped_unchanged: n(&self.skipped_unchanged),
            filtered: n(&self.filtered),
            unmatched: n(&self.unmatched),
            invalid: n(&self.invalid),
            dropped: n(&self.dropped),
            too_deep: n(&self.too_deep),
            sitemap_requests: n(&self.issued),
            too_many: n(&self.too_many),
            errors: self
                .messages
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            error_count: n(&self.errors),
        }
    }
}

/// Reads a [`SitemapSpider`]'s counters from outside the crawl.
#[derive(Clone)]
pub struct SitemapStatsHandle(Arc<Counters>);

impl SitemapStatsHandle {
    /// The counters now.
    pub fn get(&self) -> SitemapStats {
        self.0.snapshot()
    }
}

impl fmt::Debug for SitemapStatsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

/// What a [`SitemapSpider`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct SitemapStats {
    /// robots.txt files read for their `Sitemap:` lines.
    pub robots: u64,
    /// Sitemap files parsed (indexes included).
    pub sitemaps: u64,
    /// Page entries read from urlsets and text sitemaps.
    pub entries: u64,
    /// Page requests made (alternates included).
    pub requested: u64,
    /// Entries not requested because their lastmod is not newer than the last fetch.
    pub skipped_unchanged: u64,
    /// Entries (and index sitemaps) refused by the filter or the follow patterns.
    pub filtered: u64,
    /// Entries no rule matched.
    pub unmatched: u64,
    /// Entries whose URL was unusable (relative, not http(s), unsupported entities).
    pub invalid: u64,
    /// Entries past the 50,000-URL limit of a file.
    pub dropped: u64,
    /// Sitemaps of indexes nested deeper than the depth limit.
    pub too_deep: u64,
    /// Sitemap requests made (start sitemaps, robots.txt `Sitemap:` lines and the sitemaps
    /// of indexes), at most `max_sitemaps`.
    pub sitemap_requests: u64,
    /// Sitemaps not requested because `max_sitemaps` were requested already.
    pub too_many: u64,
    /// Sitemaps that could not be read to their end (malformed, too large, too many URLs).
    pub error_count: u64,
    /// The first error messages, each naming the sitemap (and the byte position for
    /// malformed XML).
    pub errors: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crawler_core::{ConditionalStore, MemoryConditional, Validators};

    fn page(req: Request, body: &str) -> Response {
        let url = req.url.clone();
        Response::new(req, url, 200, Default::default(), body.to_owned().into())
    }

    fn spider() -> SitemapSpider {
        SitemapSpider::builder()
            .sitemap("http://s.test/sitemap.xml")
            .rule(r"/book-\d+", "book")
            .rule_default(r"/page-")
            .max_depth(1)
            .filter(|e| !e.loc.contains("book-13"))
            .build()
            .unwrap()
    }

    #[tokio::test]
    async fn urlsets_map_rules_filter_and_skip_unchanged() {
        let s = spider();
        let start = s.start_requests().remove(0);
        assert_eq!(start.callback.as_deref(), Some(SITEMAP_CALLBACK));
        let xml = r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
            <url><loc>http://s.test/book-11</loc><lastmod>2024-01-01</lastmod></url>
            <url><loc>http://s.test/book-12</loc><lastmod>2024-03-01</lastmod></url>
            <url><loc>http://s.test/book-13</loc></url>
            <url><loc>http://s.test/page-1</loc></url>
            <url><loc>http://s.test/about</loc></url>
        </urlset>"#;
        let history = Arc::new(MemoryConditional::new());
        let seen = |unix| Validators {
            etag: None,
            last_modified: None,
            fetched_at_unix: unix,
            content_hash: 0,
            body_len: 0,
        };
        // book-11 fetched after its lastmod; book-12 changed since.
        let feb = 1_706_745_600;
        history
            .put_validators(&Url::parse("http://s.test/book-11").unwrap(), &seen(feb))
            .unwrap();
        history
            .put_validators(&Url::parse("http://s.test/book-12").unwrap(), &seen(feb))
            .unwrap();
        let p = page(start, xml).with_history(history);
        let mut out: Output<()> = Output::new(p.url().clone(), 0);
        assert!(s.handle(&p, &mut out).await.unwrap());
        let got: Vec<(&str, Option<&str>)> = out
            .requests()
            .iter()
            .map(|r| (r.url.path(), r.callback.as_deref()))
            .collect();
        assert_eq!(got, [("/book-12", Some("book")), ("/page-1", None)]);
        assert_eq!(out.requests()[0].meta[LASTMOD_META], 1_709_251_200);
        let st = s.stats();
        assert_eq!(
            (
                st.entries,
                st.skipped_unchanged,
                st.filtered,
                st.unmatched,
                st.requested
            ),
            (5, 1, 1, 1, 2)
        );
    }

    #[tokio::test]
    async fn indexes_follow_to_the_depth_limit_and_errors_name_the_position() {
        let s = spider();
        let index = r#"<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
            <sitemap><loc>http://s.test/a.xml.gz</loc></sitemap></sitemapindex>"#;
        let p = page(s.start_requests().remove(0), index);
        let mut out: Output<()> = Output::new(p.url().clone(), 0);
        assert!(s.handle(&p, &mut out).await.unwrap());
        let child = out.requests()[0].clone();
        assert_eq!(child.url.as_str(), "http://s.test/a.xml.gz");
        assert_eq!(child.meta[MAX_BODY_META], SITEMAP_MAX_BYTES);
        // One level below the start is the limit: the child's own index is not followed.
        let p = page(child, index);
        let mut out: Output<()> = Output::new(p.url().clone(), 1);
        assert!(s.handle(&p, &mut out).await.unwrap());
        assert!(out.requests().is_empty());
        assert_eq!(s.stats().too_deep, 1);

        let broken = r#"<urlset><url><loc>http://s.test/page-1</loc></url><url><loc>http://s.test/page-2</loc></uurl></urlset>"#;
        let p = page(s.start_requests().remove(0), broken);
        let mut out: Output<()> = Output::new(p.url().clone(), 0);
        let e = s.handle(&p, &mut out).await.unwrap_err().to_string();
        assert!(e.contains("sitemap http://s.test/sitemap.xml"), "{e}");
        assert!(e.contains("at byte"), "{e}");
        assert_eq!(out.requests().len(), 1, "entries before the fault are kept");
        assert_eq!(s.stats().error_count, 1);
    }

    #[tokio::test]
    async fn listing_turns_entries_into_items_and_still_follows_indexes() {
        let s = spider();
        let xml = r#"<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
            <url><loc>http://s.test/book-11</loc><lastmod>2024-01-01</lastmod></url>
            <url><loc>http://s.test/book-13</loc></url>
            <url><loc>http://s.test/about</loc></url>
        </urlset>"#;
        let p = page(s.start_requests().remove(0), xml);
        let mut out: Output<String> = Output::new(p.url().clone(), 0);
        let listed = s.handle_as_items(&p, &mut out, |e| e.loc.clone()).await;
        assert!(listed.unwrap());
        // The filter and the rules still choose; no page is requested.
        assert_eq!(out.items(), ["http://s.test/book-11"]);
        assert!(out.requests().is_empty());
        let st = s.stats();
        assert_eq!(
            (st.entries, st.filtered, st.unmatched, st.requested),
            (3, 1, 1, 0)
        );

        let index = r#"<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
            <sitemap><loc>http://s.test/a.xml</loc></sitemap></sitemapindex>"#;
        let p = page(s.start_requests().remove(0), index);
        let mut out: Output<String> = Output::new(p.url().clone(), 0);
        assert!(
            s.handle_as_items(&p, &mut out, |e| e.loc.clone())
                .await
                .unwrap()
        );
        assert_eq!(out.requests()[0].url.as_str(), "http://s.test/a.xml");
        assert_eq!(s.stats().sitemap_requests, 2, "the start sitemap and a.xml");
    }

    #[tokio::test]
    async fn an_endless_index_stops_at_max_sitemaps() {
        let s = SitemapSpider::builder()
            .sitemap("http://s.test/index-0.xml")
            .max_depth(1000)
            .max_sitemaps(25)
            .build()
            .unwrap();
        // Every index lists ten more indexes: without the cap the requests grow tenfold a level.
        let mut pending = s.start_requests();
        let mut requested = pending.len();
        for level in 0..4 {
            let mut next = Vec::new();
            for req in pending.drain(..) {
                let body: String = (0..10)
                    .map(|i| {
                        format!(
                            "<sitemap><loc>http://s.test/index-{level}-{i}-{}.xml</loc></sitemap>",
                            req.url.path().len()
                        )
                    })
                    .collect();
                let xml = format!(
                    r#"<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{body}</sitemapindex>"#
                );
                let p = page(req, &xml);
                let mut out: Output<()> = Output::new(p.url().clone(), 0);
                s.handle(&p, &mut out).await.unwrap();
                next.extend(out.requests().iter().cloned());
            }
            requested += next.len();
            pending = next;
        }
        assert_eq!(requested, 25);
        assert!(s.stats().too_many > 0);
    }

    #[tokio::test]
    async fn robots_lines_become_sitemap_requests_and_other_pages_pass() {
        let s = SitemapSpider::builder()
            .robots("http://s.test/any/page")
            .build()
            .unwrap();
        let req = s.start_requests().remove(0);
        assert_eq!(req.url.as_str(), "http://s.test/robots.txt");
        assert_eq!(req.meta[ROBOTS_SITEMAPS_META], true);
        let p = page(
            req,
            "User-agent: *\nSITEMAP: /a.xml # ours\nsitemap:http://o.test/b.xml\nDisallow: /x\n",
        );
        let mut out: Output<()> = Output::new(p.url().clone(), 0);
        assert!(s.handle(&p, &mut out).await.unwrap());
        let urls: Vec<&str> = out.requests().iter().map(|r| r.url.as_str()).collect();
        assert_eq!(urls, ["http://s.test/a.xml", "http://o.test/b.xml"]);
        let other = page(Request::get("http://s.test/x").unwrap(), "");
        assert!(!s.handle(&other, &mut out).await.unwrap());
        assert!(
            SitemapSpider::builder().rule("(", "x").build().is_err(),
            "bad patterns fail in build"
        );
    }
}
