//! What an errback receives: a request that ended without a page for its callback.

use serde::de::DeserializeOwned;
use url::Url;

use crate::fetch::FailureKind;
use crate::request::Request;
use crate::response::Response;

/// A request that failed after its retries, or was refused before it was sent (robots.txt,
/// a forbidden address), handed to [`Spider::errback`](crate::Spider::errback) when the
/// request named one ([`Request::errback`]). Scrapy's `failure` in an errback: its
/// `failure.request` is [`FailedRequest::request`], its `failure.value.response` is
/// [`FailedRequest::response`].
pub struct FailedRequest {
    kind: FailureKind,
    message: String,
    request: Request,
    status: Option<u16>,
    response: Option<Response>,
    attempts: u32,
}

impl std::fmt::Debug for FailedRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FailedRequest")
            .field("kind", &self.kind)
            .field("url", &self.request.url.as_str())
            .field("status", &self.status)
            .field("attempts", &self.attempts)
            .field("message", &self.message)
            .finish_non_exhaustive()
    }
}

impl FailedRequest {
    /// A failure of `request` (the engine builds these): its class, what went wrong, the
    /// last status seen, the answer when one came, and how many times it was sent.
    pub fn new(
        kind: FailureKind,
        message: impl Into<String>,
        request: Request,
        status: Option<u16>,
        response: Option<Response>,
        attempts: u32,
    ) -> Self {
        Self {
            kind,
            message: message.into(),
            status: status.or_else(|| response.as_ref().map(Response::status)),
            request,
            response,
            attempts,
        }
    }

    /// The class of failure: the reasons of docs/retries.md (`timeout`, `connection`,
    /// `dns`, `http_status`…), or [`FailureKind::Disallowed`] for a URL robots.txt forbids.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// What went wrong, in words (`HTTP 404`, `connection refused`…).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The request's URL (for a redirect hop, the hop's; the first is
    /// `request().redirect_urls[0]`).
    pub fn url(&self) -> &Url {
        &self.request.url
    }

    /// The request as it was last sent (its callback, meta, depth, retries, redirect URLs).
    pub fn request(&self) -> &Request {
        &self.request
    }

    /// The name of the errback the request named.
    pub fn errback(&self) -> Option<&str> {
        self.request.errback.as_deref()
    }

    /// The name of the callback the request named (`None`: the default one).
    pub fn callback(&self) -> Option<&str> {
        self.request.callback.as_deref()
    }

    /// The last HTTP status the server answered, when it answered.
    pub fn status(&self) -> Option<u16> {
        self.status
    }

    /// The answer's headers, when an answer with a status the spider does not handle
    /// ended the request.
    pub fn headers(&self) -> Option<&http::HeaderMap> {
        self.response.as_ref().map(Response::headers)
    }

    /// The answer itself (status, headers, body, selection), when an answer with a status
    /// the spider does not handle ended the request.
    pub fn response(&self) -> Option<&Response> {
        self.response.as_ref()
    }

    /// How many times the request was sent: 1 + its retries, or 0 when it was refused
    /// before being sent (robots.txt, a forbidden address).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// A value the request carried in its meta, as for [`Response::meta`].
    pub fn meta<T: DeserializeOwned>(&self, key: &str) -> Option<T> {
        self.request
            .meta
            .get(key)
            .and_then(|v| T::deserialize(v).ok())
    }
}
