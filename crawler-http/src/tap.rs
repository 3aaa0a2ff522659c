//! Handing completed exchanges to an [`ExchangeTap`] (the WARC writer), with the request
//! headers the client adds on its own, so the archived request is the one that was sent.

use std::sync::Arc;
use std::time::SystemTime;

use crawler_core::{Exchange, ExchangeTap, Url};
use http::{HeaderMap, HeaderValue, header};

/// What reqwest's decompression layer asks for when a request names no encoding (the gzip,
/// brotli and deflate features, in tower-http's order).
const ACCEPT_ENCODING: &str = "gzip,deflate,br";

/// The tap and what the client adds to every request.
#[derive(Clone)]
pub(crate) struct WireTap {
    tap: Arc<dyn ExchangeTap>,
    /// The client's default User-Agent (a request's own wins).
    user_agent: Option<HeaderValue>,
}

impl WireTap {
    pub(crate) fn new(tap: Arc<dyn ExchangeTap>, user_agent: &str) -> Self {
        Self {
            tap,
            user_agent: HeaderValue::from_str(user_agent).ok(),
        }
    }

    /// The headers that went out for a request whose own headers were `explicit`: the
    /// client's defaults (User-Agent, `Accept: */*`) where the request sets none, then the
    /// decompression layer's Accept-Encoding, then Host, in the order the client adds them.
    pub(crate) fn wire_headers(&self, explicit: &HeaderMap, url: &Url) -> HeaderMap {
        let mut headers = explicit.clone();
        if let Some(ua) = &self.user_agent {
            headers
                .entry(header::USER_AGENT)
                .or_insert_with(|| ua.clone());
        }
        headers
            .entry(header::ACCEPT)
            .or_insert_with(|| HeaderValue::from_static("*/*"));
        headers
            .entry(header::ACCEPT_ENCODING)
            .or_insert_with(|| HeaderValue::from_static(ACCEPT_ENCODING));
        if let Some(host) = url.host_str() {
            let host = match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_owned(),
            };
            if let Ok(v) = HeaderValue::from_str(&host) {
                headers.entry(header::HOST).or_insert(v);
            }
        }
        headers
    }

    /// Hand one exchange over (waiting while the writer is behind).
    pub(crate) async fn record(&self, exchange: Exchange) {
        self.tap.record(exchange).await;
    }
}

/// An exchange of a GET without a body (robots.txt), sent at `sent_at`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn get_exchange(
    url: Url,
    request_headers: HeaderMap,
    resp_version: http::Version,
    status: u16,
    headers: HeaderMap,
    body: bytes::Bytes,
    remote_ip: Option<std::net::IpAddr>,
    sent_at: SystemTime,
    truncated: Option<&'static str>,
) -> Exchange {
    Exchange {
        method: "GET".to_owned(),
        url,
        request_headers,
        request_body: bytes::Bytes::new(),
        version: resp_version,
        status,
        headers,
        body,
        remote_ip,
        sent_at,
        truncated,
    }
}
