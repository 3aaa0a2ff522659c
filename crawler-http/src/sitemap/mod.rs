//! Sitemaps (<https://www.sitemaps.org/protocol.html>): streaming parse and bounded fetch.
//!
//! [`parse_sitemap`] reads a `<urlset>` or `<sitemapindex>` (or a plain-text sitemap, one URL
//! a line) with quick-xml's event reader, so memory holds the current element and the entries
//! kept, never a tree of the file. Hostile files are bounded:
//!
//! - gzip is detected by its magic bytes (not the file name) and inflated through a streaming
//!   decoder that stops at [`SitemapLimits::max_bytes`] (50 MB by default, the protocol's
//!   limit), so a compression bomb ends with [`SitemapErrorKind::TooLarge`];
//! - at most [`SitemapLimits::max_urls`] entries (50,000) are kept; the rest are counted in
//!   [`SitemapParse::dropped`];
//! - DTDs are never read: a `<!DOCTYPE>` (with any entity declarations in it) is skipped, and a
//!   reference to an entity other than the five predefined ones (`&amp;` …) or a character
//!   reference makes its `<loc>` invalid, so "billion laughs" and external-entity tricks expand
//!   nothing and cost nothing beyond the bytes of the file;
//! - malformed XML stops the parse with an error that names the sitemap URL and the byte
//!   offset (in the decompressed XML), while the entries read before it are still returned.
//!
//! ```
//! use crawler_http::{SitemapKind, SitemapLimits, parse_sitemap};
//!
//! let xml = br#"<?xml version="1.0" encoding="UTF-8"?>
//! <urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
//!   <url><loc>https://example.com/a?x=1&amp;y=2</loc><lastmod>2024-05-17</lastmod></url>
//!   <url><loc>/relative</loc></url>
//! </urlset>"#;
//! let parsed = parse_sitemap("https://example.com/sitemap.xml", xml, &SitemapLimits::default());
//! assert_eq!(parsed.kind, SitemapKind::UrlSet);
//! assert_eq!(parsed.entries[0].loc, "https://example.com/a?x=1&y=2");
//! assert_eq!(parsed.entries[0].lastmod, Some(1_715_904_000));
//! assert_eq!(parsed.skipped, 1);
//! assert!(parsed.error.is_none());
//! ```
//!
//! The folder: this file holds the types and limits; `parse.rs` is the bounded parse (bytes
//! in, entries out: no I/O, no clock), `fetch.rs` one bounded download handed to the parser.
//! Only `parse.rs` reads XML and only `fetch.rs` sends requests; neither consults robots.txt
//! or a host's pacing. Walking sitemaps (robots.txt `Sitemap:` lines, indexes, the depth and
//! count limits) is `crawler::spiders::SitemapSpider`'s, through the engine like every
//! request of a crawl; the `crawler sitemap` command runs it too.

mod fetch;
mod parse;

use std::fmt;
use std::time::Duration;

pub use fetch::fetch_sitemap;
pub use parse::parse_sitemap;

/// The protocol's limit on the uncompressed size of one sitemap file: 50 MB (52,428,800 bytes).
pub const SITEMAP_MAX_BYTES: u64 = 50 * 1024 * 1024;
/// The protocol's limit on the URLs in one sitemap file.
pub const SITEMAP_MAX_URLS: usize = 50_000;

/// Limits for parsing and fetching one sitemap file. The defaults follow the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SitemapLimits {
    /// Most bytes read from one file, after decompression (and, when fetching, before it).
    /// Default [`SITEMAP_MAX_BYTES`].
    pub max_bytes: u64,
    /// Most entries kept from one file; the rest are counted in [`SitemapParse::dropped`].
    /// Default [`SITEMAP_MAX_URLS`].
    pub max_urls: usize,
    /// Collect `<xhtml:link rel="alternate" hreflang=".." href=".."/>` links. Default false.
    pub alternates: bool,
    /// Total time for fetching one sitemap, body included. Default 60 s.
    pub fetch_timeout: Duration,
}

impl Default for SitemapLimits {
    fn default() -> Self {
        Self {
            max_bytes: SITEMAP_MAX_BYTES,
            max_urls: SITEMAP_MAX_URLS,
            alternates: false,
            fetch_timeout: Duration::from_secs(60),
        }
    }
}

/// What a sitemap file turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SitemapKind {
    /// A `<urlset>`: entries are pages.
    UrlSet,
    /// A `<sitemapindex>`: entries are other sitemaps.
    Index,
    /// A plain-text sitemap: one URL a line.
    Text,
    /// Nothing readable (empty, another XML vocabulary, or a failed fetch).
    Unknown,
}

/// An alternate-language version of a page (`<xhtml:link rel="alternate">`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alternate {
    /// The language (and optional region) code, e.g. `de-CH`, or `x-default`.
    pub hreflang: String,
    /// The absolute http(s) URL of that version.
    pub href: String,
}

/// One `<url>` of a urlset or one `<sitemap>` of an index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SitemapEntry {
    /// The absolute http(s) URL, normalised by the `url` crate (entities decoded).
    pub loc: String,
    /// `<lastmod>` as seconds since the Unix epoch (UTC); `None` if absent or unreadable.
    pub lastmod: Option<i64>,
    /// Alternate versions, when [`SitemapLimits::alternates`] is on.
    pub alternates: Vec<Alternate>,
}

/// The result of parsing one sitemap file: everything usable, plus what went wrong.
///
/// An error does not discard the entries read before it, so a crawl can use a sitemap that is
/// cut short or broken half-way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SitemapParse {
    /// What the file is.
    pub kind: SitemapKind,
    /// The valid entries, in file order, at most [`SitemapLimits::max_urls`].
    pub entries: Vec<SitemapEntry>,
    /// Entries beyond [`SitemapLimits::max_urls`], not kept (the caller should warn).
    pub dropped: usize,
    /// Entries skipped because their `<loc>` was missing, relative, not http(s), too long, or
    /// used an entity that is not predefined.
    pub skipped: usize,
    /// Entries kept whose `<lastmod>` was present but unreadable (their `lastmod` is `None`).
    pub bad_lastmod: usize,
    /// Why parsing stopped early, if it did.
    pub error: Option<SitemapError>,
}

impl SitemapParse {
    fn failed(url: &str, kind: SitemapErrorKind) -> Self {
        Self {
            kind: SitemapKind::Unknown,
            entries: Vec::new(),
            dropped: 0,
            skipped: 0,
            bad_lastmod: 0,
            error: Some(SitemapError {
                url: url.to_owned(),
                kind,
            }),
        }
    }
}

/// A sitemap that could not be read to its end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sitemap {url}: {kind}")]
pub struct SitemapError {
    /// The sitemap's URL.
    pub url: String,
    /// What went wrong.
    pub kind: SitemapErrorKind,
}

impl SitemapError {
    /// The byte offset in the (decompressed) XML where a malformed-XML error was found.
    pub fn position(&self) -> Option<u64> {
        match self.kind {
            SitemapErrorKind::Xml { position, .. } => Some(position),
            _ => None,
        }
    }
}

/// The classes of [`SitemapError`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SitemapErrorKind {
    /// The XML is malformed at `position` (a byte offset in the decompressed document).
    Xml {
        /// Byte offset of the fault.
        position: u64,
        /// The parser's explanation.
        message: String,
    },
    /// The document is larger than the limit (after decompression); the rest was not read.
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The gzip stream is corrupt or truncated.
    Gzip {
        /// The decoder's explanation.
        message: String,
    },
    /// The root element is neither `<urlset>` nor `<sitemapindex>` (or there is none).
    NotSitemap {
        /// The root element's name, if there was one.
        root: Option<String>,
    },
    /// The server answered with a non-2xx status.
    Status {
        /// The HTTP status.
        status: u16,
    },
    /// The download failed (connection, timeout, …).
    Fetch {
        /// What failed.
        message: String,
    },
}

impl fmt::Display for SitemapErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Xml { position, message } => {
                write!(f, "malformed XML at byte {position}: {message}")
            }
            Self::TooLarge { limit } => write!(
                f,
                "larger than {limit} bytes after decompression; the rest was ignored"
            ),
            Self::Gzip { message } => write!(f, "corrupt gzip data: {message}"),
            Self::NotSitemap { root: Some(root) } => write!(
                f,
                "root element <{root}> is neither <urlset> nor <sitemapindex>"
            ),
            Self::NotSitemap { root: None } => f.write_str("no root element"),
            Self::Status { status } => write!(f, "HTTP status {status}"),
            Self::Fetch { message } => write!(f, "download failed: {message}"),
        }
    }
}
