//! Completed HTTP exchanges handed to an archive: the [`ExchangeTap`] the downloader calls for
//! each request that got a response, so a WARC writer (crawler-engine) records what went over
//! the wire without the downloader knowing the format, or the writer knowing the client.

use std::net::IpAddr;
use std::time::SystemTime;

use bytes::Bytes;
use http::HeaderMap;
use url::Url;

use crate::pipeline::BoxFuture;

/// One request and the response it got, as the downloader sent and received them.
///
/// Headers are the ones on the wire as far as the HTTP client shows them: the request's own
/// plus the ones the client adds (User-Agent, Accept, Accept-Encoding, Host), the response's
/// as parsed (names lower-cased). The body is the one the crawl read: decoded from
/// gzip, deflate or brotli when the server compressed it (the client then drops
/// `Content-Encoding` and `Content-Length` from the headers, so headers and body agree).
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The request method (`GET`, `POST`, ...).
    pub method: String,
    /// The URL requested (no redirect is followed inside one exchange).
    pub url: Url,
    /// The request headers as sent.
    pub request_headers: HeaderMap,
    /// The request body (empty for none).
    pub request_body: Bytes,
    /// The HTTP version of the response.
    pub version: http::Version,
    /// The response status.
    pub status: u16,
    /// The response headers.
    pub headers: HeaderMap,
    /// The response body as read (see the type's docs on decoding).
    pub body: Bytes,
    /// The address the response came from (a proxy's, behind one), when known.
    pub remote_ip: Option<IpAddr>,
    /// When the request went out.
    pub sent_at: SystemTime,
    /// Why the body is shorter than the server's, in WARC-Truncated's words (`length`
    /// when a size cap cut it, `unspecified` when it was not read at all); `None` when the
    /// body is complete.
    pub truncated: Option<&'static str>,
}

impl Exchange {
    /// Roughly the bytes this exchange holds in memory, for bounding what waits to be
    /// written.
    pub fn size(&self) -> usize {
        let headers = |h: &HeaderMap| {
            h.iter()
                .map(|(k, v)| k.as_str().len() + v.len() + 4)
                .sum::<usize>()
        };
        self.url.as_str().len()
            + headers(&self.request_headers)
            + self.request_body.len()
            + headers(&self.headers)
            + self.body.len()
    }
}

/// Where the downloader hands every completed exchange (see [`Exchange`]), for archiving.
///
/// [`record`](ExchangeTap::record) is awaited by the download that made the exchange: an
/// implementation may make it wait (to bound the memory of what is not yet written) but
/// must not do slow work (disk writes, compression) on the async runtime itself.
pub trait ExchangeTap: Send + Sync {
    /// Take one exchange.
    fn record(&self, exchange: Exchange) -> BoxFuture<'_, ()>;
}
