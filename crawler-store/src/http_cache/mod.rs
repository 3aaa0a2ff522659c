//! The HTTP cache's storage: crawler-core's [`ConditionalStore`] over sled, validators and
//! whole pages for the downloader, keyed by the fingerprint of a GET of the URL (the same key
//! the frontier's seen set uses), so they survive between crawls. The cache's rules (what is
//! replayed, what is revalidated, which headers are sent) are the downloader's
//! (crawler-http's `downloader/http_cache.rs`); this folder only keeps what they store.
//!
//! - `pages.rs`: whole responses by request fingerprint ([`CacheStore`]).
//! - `validators.rs`: ETag / Last-Modified per URL ([`ValidatorStore`]).
//! - here: [`SledConditional`], the two behind the trait.

use std::path::Path;

use crawler_core::{CachedPage, ConditionalStore, Request, Url};

use crate::error::Error;
use crate::options::StoreOptions;
use crate::sled_store::SledStore;

mod pages;
mod validators;

pub use pages::{CacheStore, CachedResponse};
pub use validators::{ValidatorStore, Validators};

/// Validators (and optionally the HTTP cache) in sled, for `HttpDownloader::with_store`.
///
/// ```
/// use crawler_core::{ConditionalStore, Url, Validators};
/// use crawler_store::{SledConditional, StoreOptions};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = tempfile::tempdir()?;
/// let url = Url::parse("http://books.test/a")?;
/// let v = Validators {
///     etag: Some("\"1\"".into()),
///     last_modified: None,
///     fetched_at_unix: 1_700_000_000,
///     content_hash: 7,
///     body_len: 3,
/// };
/// {
///     let store = SledConditional::open(dir.path(), None, SledConditional::options())?;
///     store.put_validators(&url, &v)?;
/// }
/// // A later run finds them again.
/// let store = SledConditional::open(dir.path(), None, SledConditional::options())?;
/// assert_eq!(store.validators(&url)?, Some(v));
/// assert!(!store.keeps_responses());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct SledConditional {
    validators: ValidatorStore,
    cache: Option<CacheStore>,
    /// The database these trees live in, when this adapter opened it: kept so it is flushed
    /// and closed when the adapter goes.
    _owner: Option<SledStore>,
}

impl SledConditional {
    /// Wrap stores opened elsewhere (e.g. [`SledStore::validators`] and
    /// [`SledStore::http_cache`] of a job's database); `cache` turns the HTTP cache on.
    pub fn new(validators: ValidatorStore, cache: Option<CacheStore>) -> Self {
        Self {
            validators,
            cache,
            _owner: None,
        }
    }

    /// Store options sized for a database that holds only validators and the HTTP cache:
    /// a 32 MiB page cache and a frontier (unused) that reserves next to nothing.
    pub fn options() -> StoreOptions {
        StoreOptions {
            cache_capacity_bytes: 32 << 20,
            write_buffer_bytes: 64 << 10,
            seen_memtable_len: 1024,
            expected_urls: 1024,
            bloom_max_bytes: 1 << 20,
            ..StoreOptions::default()
        }
    }

    /// Open (or create) a database of its own in `dir`. `http_cache` turns the HTTP cache on,
    /// keeping at most that many bytes of responses when `Some(Some(n))`.
    pub fn open(
        dir: &Path,
        http_cache: Option<Option<u64>>,
        options: StoreOptions,
    ) -> Result<Self, Error> {
        let db = SledStore::open(dir, options)?;
        let validators = db.validators()?;
        let cache = match http_cache {
            Some(max_bytes) => Some(db.http_cache(max_bytes)?),
            None => None,
        };
        Ok(Self {
            validators,
            cache,
            _owner: Some(db),
        })
    }
}

/// The storage key of a URL: the fingerprint of a GET of it, fragment ignored.
fn key(url: &Url) -> [u8; 16] {
    crawler_sched::fingerprint(&Request::new(url.clone())).to_bytes()
}

impl ConditionalStore for SledConditional {
    fn validators(&self, url: &Url) -> crawler_core::Result<Option<Validators>> {
        self.validators
            .get(key(url))
            .map_err(crawler_core::Error::from)
    }

    fn put_validators(&self, url: &Url, v: &Validators) -> crawler_core::Result<()> {
        self.validators
            .put(key(url), v)
            .map_err(crawler_core::Error::from)
    }

    fn keeps_responses(&self) -> bool {
        self.cache.is_some()
    }

    fn cached(&self, url: &Url) -> crawler_core::Result<Option<CachedPage>> {
        let Some(cache) = &self.cache else {
            return Ok(None);
        };
        let page = cache.get(key(url)).map_err(crawler_core::Error::from)?;
        Ok(page.map(|p| CachedPage {
            url: p.url,
            status: p.status,
            headers: p.headers,
            body: p.body,
            stored_at_unix: p.stored_at_unix,
        }))
    }

    fn put_cached(&self, url: &Url, page: &CachedPage) -> crawler_core::Result<()> {
        let Some(cache) = &self.cache else {
            return Ok(());
        };
        let stored = CachedResponse {
            url: page.url.clone(),
            status: page.status,
            headers: page.headers.clone(),
            body: page.body.clone(),
            stored_at_unix: page.stored_at_unix,
        };
        cache
            .put(key(url), &stored)
            .map_err(crawler_core::Error::from)
    }

    fn flush(&self) -> crawler_core::Result<()> {
        self.validators.flush().map_err(crawler_core::Error::from)?;
        if let Some(cache) = &self.cache {
            cache.flush().map_err(crawler_core::Error::from)?;
        }
        Ok(())
    }
}

impl Drop for SledConditional {
    fn drop(&mut self) {
        // Best effort, like the store's own drop: a failure here equals a crash a moment
        // earlier, which costs only some revalidations next time.
        let _ = ConditionalStore::flush(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_round_trip_and_fragments_share_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            SledConditional::open(dir.path(), Some(None), SledConditional::options()).unwrap();
        let url = Url::parse("http://books.test/a#x").unwrap();
        let page = CachedPage {
            url: "http://books.test/a".into(),
            status: 200,
            headers: vec![("ETag".into(), "\"9\"".into())],
            body: b"<html>hi</html>".to_vec(),
            stored_at_unix: 5,
        };
        store.put_cached(&url, &page).unwrap();
        let plain = Url::parse("http://books.test/a").unwrap();
        assert_eq!(store.cached(&plain).unwrap(), Some(page));
        assert!(store.keeps_responses());
        let other = Url::parse("http://books.test/b").unwrap();
        assert_eq!(store.cached(&other).unwrap(), None);
    }
}
