//! The HTTP cache: whole responses stored by request fingerprint, replayed offline.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::db::{open_db, open_tree};
use crate::error::Error;
use crate::options::StoreOptions;

/// A stored response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedResponse {
    /// The final URL (after redirects).
    pub url: String,
    /// The HTTP status.
    pub status: u16,
    /// Response headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body as received (decoded of transfer and content encodings).
    pub body: Vec<u8>,
    /// When it was stored (Unix seconds).
    pub stored_at_unix: i64,
}

/// The part of a [`CachedResponse`] stored as JSON; the body follows it raw, because a JSON
/// array of numbers would triple its size.
#[derive(Serialize, Deserialize)]
struct Head {
    url: String,
    status: u16,
    headers: Vec<(String, String)>,
    stored_at_unix: i64,
}

/// Responses by request fingerprint, optionally within a byte budget (oldest stored first
/// out). Cheap to clone; every method takes `&self`, so many tasks can share one cache.
#[derive(Clone, Debug)]
pub struct CacheStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// fingerprint → u64 insertion number, u32 head length, head JSON, body.
    responses: sled::Tree,
    /// insertion number → fingerprint: the eviction order.
    order: sled::Tree,
    path: PathBuf,
    max_bytes: Option<u64>,
    /// Bytes of stored values; kept in memory, recounted on open.
    bytes: AtomicU64,
    /// For insertion numbers; also keeps a standalone database open while handles exist.
    db: sled::Db,
}

impl CacheStore {
    /// Open a standalone cache in `dir`, keeping at most `max_bytes` of responses if given.
    pub fn open(dir: &Path, options: StoreOptions, max_bytes: Option<u64>) -> Result<Self, Error> {
        let db = open_db(dir, &options)?;
        Self::build(&db, dir, max_bytes)
    }

    pub(crate) fn in_db(db: &sled::Db, dir: &Path, max_bytes: Option<u64>) -> Result<Self, Error> {
        Self::build(db, dir, max_bytes)
    }

    fn build(db: &sled::Db, dir: &Path, max_bytes: Option<u64>) -> Result<Self, Error> {
        let responses = open_tree(db, dir, "http_cache")?;
        let order = open_tree(db, dir, "http_cache_order")?;
        let mut bytes = 0;
        for kv in responses.iter() {
            let (_, v) = kv.map_err(|e| Error::sled(dir, "read the HTTP cache", e))?;
            bytes += v.len() as u64;
        }
        Ok(Self {
            inner: Arc::new(Inner {
                responses,
                order,
                path: dir.to_owned(),
                max_bytes,
                bytes: AtomicU64::new(bytes),
                db: db.clone(),
            }),
        })
    }

    /// The response stored for fingerprint `fp`.
    pub fn get(&self, fp: [u8; 16]) -> Result<Option<CachedResponse>, Error> {
        let s = &self.inner;
        let Some(v) = s
            .responses
            .get(fp)
            .map_err(|e| Error::sled(&s.path, "read the HTTP cache", e))?
        else {
            return Ok(None);
        };
        let bad = |d: String| Error::corrupt(&s.path, format!("a cached response is damaged: {d}"));
        let head_len = crate::keys::u32_at(&v, 8).ok_or_else(|| bad("too short".into()))? as usize;
        let head_bytes = v
            .get(12..12 + head_len)
            .ok_or_else(|| bad("truncated".into()))?;
        let head: Head = serde_json::from_slice(head_bytes).map_err(|e| bad(e.to_string()))?;
        Ok(Some(CachedResponse {
            url: head.url,
            status: head.status,
            headers: head.headers,
            body: v[12 + head_len..].to_vec(),
            stored_at_unix: head.stored_at_unix,
        }))
    }

    /// Store (replace) the response for fingerprint `fp`, evicting the oldest responses if
    /// the budget is exceeded.
    pub fn put(&self, fp: [u8; 16], response: &CachedResponse) -> Result<(), Error> {
        let s = &self.inner;
        let head = serde_json::to_vec(&Head {
            url: response.url.clone(),
            status: response.status,
            headers: response.headers.clone(),
            stored_at_unix: response.stored_at_unix,
        })
        .map_err(|e| Error::encode(&s.path, e))?;
        let n =
            s.db.generate_id()
                .map_err(|e| Error::sled(&s.path, "write the HTTP cache", e))?;
        let mut v = Vec::with_capacity(12 + head.len() + response.body.len());
        v.extend_from_slice(&n.to_be_bytes());
        v.extend_from_slice(&(head.len() as u32).to_be_bytes());
        v.extend_from_slice(&head);
        v.extend_from_slice(&response.body);
        let new_len = v.len() as u64;
        let write = |e| Error::sled(&s.path, "write the HTTP cache", e);
        s.order.insert(n.to_be_bytes(), &fp).map_err(write)?;
        if let Some(old) = s.responses.insert(fp, v).map_err(write)? {
            s.bytes.fetch_sub(old.len() as u64, Ordering::Relaxed);
            if let Some(old_n) = crate::keys::u64_at(&old, 0) {
                s.order.remove(old_n.to_be_bytes()).map_err(write)?;
            }
        }
        s.bytes.fetch_add(new_len, Ordering::Relaxed);
        self.evict(fp)
    }

    /// Drop the oldest responses (never `keep`, the one just stored) while over budget.
    fn evict(&self, keep: [u8; 16]) -> Result<(), Error> {
        let s = &self.inner;
        let Some(max) = s.max_bytes else {
            return Ok(());
        };
        let err = |e| Error::sled(&s.path, "evict from the HTTP cache", e);
        // Bounded: each round removes one order record, and there are finitely many.
        while s.bytes.load(Ordering::Relaxed) > max {
            let Some((n, fp)) = s.order.pop_min().map_err(err)? else {
                break;
            };
            if fp.as_ref() == keep {
                s.order.insert(n, fp).map_err(err)?;
                break;
            }
            // A stale order record (the response was replaced since) must not evict the
            // newer response.
            let current = s.responses.get(&fp).map_err(err)?;
            if current.is_some_and(|v| crate::keys::u64_at(&v, 0) == crate::keys::u64_at(&n, 0))
                && let Some(old) = s.responses.remove(&fp).map_err(err)?
            {
                s.bytes.fetch_sub(old.len() as u64, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Bytes of responses stored.
    pub fn stored_bytes(&self) -> u64 {
        self.inner.bytes.load(Ordering::Relaxed)
    }

    /// Make every write so far durable on disk.
    pub fn flush(&self) -> Result<(), Error> {
        self.inner
            .responses
            .flush()
            .map_err(|e| Error::sled(&self.inner.path, "flush the HTTP cache", e))?;
        Ok(())
    }
}
