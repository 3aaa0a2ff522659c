//! Scrapy's generic spiders, as values a spider holds: what `CrawlSpider` and
//! `SitemapSpider` are in Scrapy.
//!
//! - [`LinkExtractor`]: which links of a page to consider (allow/deny patterns and domains,
//!   CSS regions, tags and attributes, ignored extensions, nofollow, meta refresh).
//! - [`Rules`]: `CrawlSpider`'s rules, extractor + callback + follow, applied from `parse`.
//! - [`SitemapSpider`]: start from sitemaps (named in code or found in robots.txt), with a
//!   callback per URL pattern and `<lastmod>` skipping on re-crawls.
//!
//! All three have one shape: built once (a builder or `new` that checks the patterns), held
//! in the spider's struct, called from `parse` with the page and the `Output`, and every
//! request they make goes through the engine like any other (robots.txt, the host's slot,
//! the stats). They read pages only: no I/O of their own.

mod links;
mod rules;
mod sitemaps;

/// A 200 HTML answer to `req` with `html` as its body, for the tests of this folder.
#[cfg(test)]
fn html_response(req: crawler_core::Request, html: &str) -> crawler_core::Response {
    let url = req.url.clone();
    let mut headers = crawler_core::HeaderMap::new();
    headers.insert(
        "content-type",
        crawler_core::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    crawler_core::Response::new(
        req,
        url,
        200,
        headers,
        crawler_core::Bytes::from(html.to_owned()),
    )
}

pub use links::{Extracted, IGNORED_EXTENSIONS, Link, LinkExtractor, LinkExtractorBuilder};
pub use rules::{FOLLOW_CALLBACK, RULE_META_KEY, Rule, RuleRequests, Rules};
pub use sitemaps::{
    Alternate, LASTMOD_META, ROBOTS_CALLBACK, SITEMAP_CALLBACK, SITEMAP_MAX_BYTES, SitemapEntry,
    SitemapSpider, SitemapSpiderBuilder, SitemapStats, SitemapStatsHandle,
};
