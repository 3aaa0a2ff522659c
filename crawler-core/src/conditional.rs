//! What earlier crawls remembered about URLs: validators for conditional requests and
//! incremental re-crawls, and whole responses for the development HTTP cache.
//!
//! The downloader (crawler-http) reads and writes these through [`ConditionalStore`], so it
//! needs no database crate; crawler-store implements the trait over sled, and
//! [`MemoryConditional`] keeps everything in memory (tests, one-off runs).
//!
//! ```
//! use crawler_core::{ConditionalStore, MemoryConditional, Url, Validators};
//!
//! let store = MemoryConditional::with_cache();
//! let url = Url::parse("http://example.com/a#top").unwrap();
//! let v = Validators {
//!     etag: Some("\"abc\"".into()),
//!     last_modified: Some("Wed, 21 Oct 2015 07:28:00 GMT".into()),
//!     fetched_at_unix: 1_700_000_000,
//!     content_hash: 42,
//!     body_len: 5,
//! };
//! store.put_validators(&url, &v).unwrap();
//! // The fragment is not part of the key: it never reaches the server.
//! let same = Url::parse("http://example.com/a").unwrap();
//! assert_eq!(store.validators(&same).unwrap(), Some(v.clone()));
//! assert_eq!(v.version_time(), 1_445_412_480);
//! ```

use std::collections::HashMap;
use std::sync::Mutex;

use url::Url;

use crate::error::Result;

/// What the last successful fetch of a URL told us, to ask "has it changed?" next time.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Validators {
    /// The `ETag` response header, sent back as `If-None-Match`.
    pub etag: Option<String>,
    /// The `Last-Modified` response header, sent back as `If-Modified-Since`.
    pub last_modified: Option<String>,
    /// When the last successful fetch (200, or 304 confirming it) happened, Unix seconds.
    pub fetched_at_unix: i64,
    /// xxh3 of the body, to tell a real change from a re-served identical page.
    pub content_hash: u64,
    /// The body's length in bytes.
    pub body_len: u64,
}

impl Validators {
    /// The time of the version we hold, in Unix seconds, to compare with a sitemap `lastmod`:
    /// the server's `Last-Modified` when it sent a readable one, else our fetch time.
    ///
    /// The server's own clock comes first because `lastmod` is written by that clock too: a
    /// page changed after we fetched it always has a newer `Last-Modified` than the copy we
    /// hold, whatever the skew between our clock and the server's.
    pub fn version_time(&self) -> i64 {
        self.last_modified
            .as_deref()
            .and_then(parse_http_date)
            .unwrap_or(self.fetched_at_unix)
    }
}

/// A stored response, replayed by the HTTP cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedPage {
    /// The final URL (after redirects).
    pub url: String,
    /// The HTTP status.
    pub status: u16,
    /// Response headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body as received (content encodings already decoded).
    pub body: Vec<u8>,
    /// When it was stored, Unix seconds.
    pub stored_at_unix: i64,
}

/// Storage for validators and (optionally) whole responses, keyed by request URL.
///
/// Implementations key GET requests by their URL without the fragment (which never reaches
/// a server). Methods take `&self` and are called from many download tasks at once; they
/// should be quick (an embedded database lookup), since they run on the async workers.
/// Errors are logged by the caller and the request goes on without the stored data.
pub trait ConditionalStore: Send + Sync + 'static {
    /// The validators stored for `url`.
    fn validators(&self, url: &Url) -> Result<Option<Validators>>;

    /// Store (replace) the validators for `url`.
    fn put_validators(&self, url: &Url, validators: &Validators) -> Result<()>;

    /// Whether whole responses are kept (the HTTP cache is on).
    fn keeps_responses(&self) -> bool {
        false
    }

    /// The response stored for `url`, if the HTTP cache is on and holds one.
    fn cached(&self, _url: &Url) -> Result<Option<CachedPage>> {
        Ok(None)
    }

    /// Store (replace) the response for `url`; ignored unless the HTTP cache is on.
    fn put_cached(&self, _url: &Url, _page: &CachedPage) -> Result<()> {
        Ok(())
    }

    /// Make every write so far durable.
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Whether this store is a recorded crawl that answers every request itself (a replay
    /// from WARC files, `replay_warc`): the downloader then sends nothing to the network,
    /// answers with [`ConditionalStore::recorded`], and fails a request it has no answer
    /// for as `not_archived`.
    fn replays_all(&self) -> bool {
        false
    }

    /// The response recorded for `method` on `url`: by default the cached page of a GET
    /// (the HTTP cache keys only GETs), nothing for other methods.
    fn recorded(&self, method: &str, url: &Url) -> Result<Option<CachedPage>> {
        if method.eq_ignore_ascii_case("GET") {
            self.cached(url)
        } else {
            Ok(None)
        }
    }
}

/// The storage key of a URL: its canonical form ([`canonical_url`]), the same one request
/// fingerprints are made of.
pub fn conditional_key(url: &Url) -> String {
    canonical_url(url)
}

/// The canonical form of a URL, for de-duplication and for keys of stored validators:
/// scheme and host lower case, default port dropped, fragment dropped (it never reaches a
/// server), path and query kept as they are (query order can carry meaning, so it is not
/// sorted).
pub fn canonical_url(url: &Url) -> String {
    // The url crate already lower-cases scheme and host and drops default ports when parsing.
    let mut u = url.clone();
    u.set_fragment(None);
    u.into()
}

/// An in-memory [`ConditionalStore`]: everything is lost when it is dropped.
#[derive(Debug, Default)]
pub struct MemoryConditional {
    validators: Mutex<HashMap<String, Validators>>,
    pages: Option<Mutex<HashMap<String, CachedPage>>>,
}

impl MemoryConditional {
    /// Validators only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Validators and whole responses (an in-memory HTTP cache).
    pub fn with_cache() -> Self {
        Self {
            validators: Mutex::default(),
            pages: Some(Mutex::default()),
        }
    }

    /// How many URLs have validators.
    pub fn len(&self) -> usize {
        lock(&self.validators).len()
    }

    /// Whether no validators are stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Plain maps: a panic elsewhere cannot leave them half-updated.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ConditionalStore for MemoryConditional {
    fn validators(&self, url: &Url) -> Result<Option<Validators>> {
        Ok(lock(&self.validators).get(&conditional_key(url)).cloned())
    }

    fn put_validators(&self, url: &Url, validators: &Validators) -> Result<()> {
        lock(&self.validators).insert(conditional_key(url), validators.clone());
        Ok(())
    }

    fn keeps_responses(&self) -> bool {
        self.pages.is_some()
    }

    fn cached(&self, url: &Url) -> Result<Option<CachedPage>> {
        Ok(self
            .pages
            .as_ref()
            .and_then(|p| lock(p).get(&conditional_key(url)).cloned()))
    }

    fn put_cached(&self, url: &Url, page: &CachedPage) -> Result<()> {
        if let Some(p) = &self.pages {
            lock(p).insert(conditional_key(url), page.clone());
        }
        Ok(())
    }
}

/// An HTTP-date (RFC 9110 §5.6.7, any of its three forms) in Unix seconds; `None` when it
/// does not parse, and the caller falls back to the fetch time.
pub(crate) fn parse_http_date(s: &str) -> Option<i64> {
    let t = httpdate::parse_http_date(s.trim()).ok()?;
    let secs = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
    i64::try_from(secs).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_dates_parse_and_garbage_falls_back_to_the_fetch_time() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(parse_http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        assert_eq!(
            parse_http_date("Mon, 29 Feb 2016 12:00:00 GMT"),
            Some(1_456_747_200)
        );
        for bad in [
            "",
            "yesterday",
            "Sun, 06 Nov 1994 08:49:37 PST",
            "Sun, 32 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad}");
        }
        let v = Validators {
            etag: None,
            last_modified: Some("soon".into()),
            fetched_at_unix: 77,
            content_hash: 0,
            body_len: 0,
        };
        assert_eq!(v.version_time(), 77);
    }

    #[test]
    fn memory_store_keeps_pages_only_with_a_cache() {
        let url = Url::parse("http://example.com/x").unwrap();
        let page = CachedPage {
            url: url.to_string(),
            status: 200,
            headers: vec![("etag".into(), "\"1\"".into())],
            body: b"hi".to_vec(),
            stored_at_unix: 1,
        };
        let plain = MemoryConditional::new();
        plain.put_cached(&url, &page).unwrap();
        assert!(!plain.keeps_responses());
        assert_eq!(plain.cached(&url).unwrap(), None);
        let cache = MemoryConditional::with_cache();
        cache.put_cached(&url, &page).unwrap();
        assert_eq!(cache.cached(&url).unwrap(), Some(page));
    }
}
