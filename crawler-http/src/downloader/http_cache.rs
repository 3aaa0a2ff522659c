//! Conditional requests and the HTTP cache: validators read and written, If-None-Match /
//! If-Modified-Since added, cached pages replayed. Storage errors are logged, never fatal.

use std::sync::Arc;
use std::time::SystemTime;

use crawler_core::{BodyOrigin, CachedPage, ConditionalStore, Request, Response, Url, Validators};

use super::HttpDownloader;

impl HttpDownloader {
    /// Hand responses what earlier runs stored, for spiders that skip unchanged pages.
    pub(super) fn attach(&self, response: Response) -> Response {
        match &self.store {
            Some(store) => response.with_history(Arc::clone(store)),
            None => response,
        }
    }

    /// A cached page as the response to `req`. The server's fresh headers on a 304 (a new
    /// Date, ETag or Cache-Control) win over the stored ones, as RFC 9111 §4.3.4 asks.
    pub(super) fn replay(
        &self,
        req: &Request,
        page: CachedPage,
        origin: BodyOrigin,
        fresh: &http::HeaderMap,
    ) -> Response {
        let mut headers = http::HeaderMap::new();
        for (k, v) in &page.headers {
            if let (Ok(k), Ok(v)) = (
                http::HeaderName::from_bytes(k.as_bytes()),
                http::HeaderValue::from_str(v),
            ) {
                headers.append(k, v);
            }
        }
        for (k, v) in fresh {
            // A 304 has no body: its framing headers describe nothing we replay.
            if !matches!(
                k.as_str(),
                "content-length" | "transfer-encoding" | "content-encoding"
            ) {
                headers.insert(k.clone(), v.clone());
            }
        }
        let url = Url::parse(&page.url).unwrap_or_else(|_| req.url.clone());
        let response = Response::new(
            req.clone(),
            url,
            page.status,
            headers,
            bytes::Bytes::from(page.body),
        );
        self.attach(response.with_origin(origin))
    }
}

pub(super) fn read_cached(store: &dyn ConditionalStore, url: &Url) -> Option<CachedPage> {
    store.cached(url).unwrap_or_else(|e| {
        tracing::warn!(%url, "HTTP cache unreadable, fetching: {e}");
        None
    })
}

pub(super) fn read_validators(store: &dyn ConditionalStore, url: &Url) -> Option<Validators> {
    store.validators(url).unwrap_or_else(|e| {
        tracing::warn!(%url, "stored validators unreadable, fetching unconditionally: {e}");
        None
    })
}

/// The first value of header `name` in a stored header list.
pub(super) fn header_of<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// `req` with If-None-Match / If-Modified-Since added, or `None` when there is nothing to
/// send or the request already carries its own (the spider's choice wins).
pub(super) fn conditional_headers(
    req: &Request,
    etag: Option<&str>,
    last_modified: Option<&str>,
) -> Option<Request> {
    if etag.is_none() && last_modified.is_none()
        || req.header_value("if-none-match").is_some()
        || req.header_value("if-modified-since").is_some()
    {
        return None;
    }
    let mut r = req.clone();
    if let Some(tag) = etag {
        r.headers.push(("If-None-Match".to_owned(), tag.to_owned()));
    }
    if let Some(date) = last_modified {
        r.headers
            .push(("If-Modified-Since".to_owned(), date.to_owned()));
    }
    Some(r)
}

fn unix(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Record what a response says about its URL: a 200's validators (and the page itself when
/// the HTTP cache is on); a 304 refreshes the fetch time (and any validators it repeats).
/// Storage errors are logged, never fatal: the crawl goes on without them.
#[allow(clippy::too_many_arguments)]
pub(super) fn remember(
    store: &dyn ConditionalStore,
    req: &Request,
    final_url: &Url,
    status: u16,
    headers: &http::HeaderMap,
    body: &[u8],
    stored: Option<Validators>,
    now: SystemTime,
) {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let validators = match (status, stored) {
        (200, _) => Validators {
            etag: text("etag"),
            last_modified: text("last-modified"),
            fetched_at_unix: unix(now),
            content_hash: xxhash_rust::xxh3::xxh3_64(body),
            body_len: body.len() as u64,
        },
        (304, Some(old)) => Validators {
            etag: text("etag").or(old.etag),
            last_modified: text("last-modified").or(old.last_modified),
            fetched_at_unix: unix(now),
            ..old
        },
        _ => return,
    };
    if let Err(e) = store.put_validators(&req.url, &validators) {
        tracing::warn!(url = %req.url, "could not store validators: {e}");
    }
    if status == 200 && store.keeps_responses() {
        let page = CachedPage {
            url: final_url.to_string(),
            status,
            headers: headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: body.to_vec(),
            stored_at_unix: unix(now),
        };
        if let Err(e) = store.put_cached(&req.url, &page) {
            tracing::warn!(url = %req.url, "could not store the response in the HTTP cache: {e}");
        }
    }
}
