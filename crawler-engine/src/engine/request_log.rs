//! The one debug line per answered request (`-L debug`): what was asked, what came back and
//! what happens to it, so a crawl can be followed request by request without a proxy.

use crawler_core::Feedback;
use crawler_core::Request;
use crawler_core::{BodyOrigin, Response};

/// Log `response` to `req` at debug level: method, URL and status as the message; the
/// callback that parses it, its depth, the body's size, the latency, where the body came
/// from (`network`, `revalidated`: a 304 answered with the cached copy, `cache`: replayed
/// offline), the attempts before this one, the HTTP version it came in (`-` from the
/// cache) and the TLS version of its connection (`-` on plain http or from the cache). The
/// cipher is not logged: reqwest keeps the TLS connection to itself and reports only its
/// version and the server's certificate.
pub(super) fn log_response(req: &Request, response: &Response, feedback: &Feedback) {
    // The fields cost a formatted URL each: build them only when the line is wanted.
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let from = match response.origin() {
        BodyOrigin::Network => "network",
        BodyOrigin::Revalidated => "revalidated",
        BodyOrigin::Cache => "cache",
    };
    tracing::debug!(
        callback = %req.callback.as_deref().unwrap_or("parse"),
        depth = req.depth,
        bytes = response.body().len(),
        latency = ?feedback.latency,
        from = %from,
        retries = req.retries,
        http = response.http_version().map_or("-", crawler_core::http_version_name),
        tls = response.tls_version().unwrap_or("-"),
        "{} {} {}",
        req.method,
        req.url,
        response.status()
    );
}
