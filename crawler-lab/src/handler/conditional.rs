//! Conditional responses: the validators a page carries and the 304 when the request's match.

use std::time::{Duration, UNIX_EPOCH};

use super::HTML;
use crate::server::{Reply, Req};
use crate::site::Validators;
use crate::util::put;

fn http_date(unix: u64) -> String {
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(unix))
}

/// Whether the request's validators match (so the answer is 304).
fn not_modified(req: &Req<'_>, v: Validators) -> bool {
    if let Some(inm) = req.if_none_match {
        let ours = format!("\"{:016x}\"", v.etag);
        return inm
            .split(',')
            .map(str::trim)
            .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == ours);
    }
    if let Some(t) = req
        .if_modified_since
        .and_then(|ims| httpdate::parse_http_date(ims).ok())
    {
        let since = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        return v.last_modified <= since;
    }
    false
}

/// Sets the validators and answers 304 when they match; true when the body is still needed.
pub(super) fn validate(req: &Req<'_>, v: Validators, reply: &mut Reply) -> bool {
    validate_as(req, v, reply, HTML)
}

/// [`validate`] for a body of another type than HTML.
pub(super) fn validate_as(
    req: &Req<'_>,
    v: Validators,
    reply: &mut Reply,
    content_type: &str,
) -> bool {
    put!(
        &mut reply.headers,
        "ETag: \"{:016x}\"\r\nLast-Modified: {}\r\n",
        v.etag,
        http_date(v.last_modified)
    );
    if not_modified(req, v) {
        reply.status = 304;
        false
    } else {
        reply.header("Content-Type", content_type);
        true
    }
}
