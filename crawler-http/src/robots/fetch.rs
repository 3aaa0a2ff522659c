//! Retrieving one robots.txt (redirects followed and checked, body capped at a line break)
//! and reading the answer under RFC 9309 §2.3.1 into a verdict.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use crawler_core::{Exchange, Url};
use tokio::time::Instant;

use super::parse::RobotsTxt;
use super::{
    Access, ROBOTS_MAX_BYTES, ROBOTS_MAX_REDIRECTS, RobotsOptions, RobotsRules, RobotsStatus,
};
use crate::error_chain::error_chain;
use crate::guard::AddressPolicy;
use crate::tap::{WireTap, get_exchange};

/// What one robots.txt retrieval produced, before interpretation.
pub(super) enum Retrieved {
    /// A final, non-redirect response.
    Body {
        status: u16,
        body: Vec<u8>,
        truncated: bool,
        retry_after: Option<Duration>,
    },
    /// Redirects that cannot be followed (too many, a loop, a bad target).
    BadRedirect { status: Option<u16>, reason: String },
    /// No response.
    Failed(String),
}

/// Fetch `robots_url`, following up to [`ROBOTS_MAX_REDIRECTS`] redirects that the client
/// hands back, within `timeout` in total.
/// With `tap`, every hop that got a response is archived, once the retrieval is over (a
/// writer that is behind does not eat into the fetch's time).
pub(super) async fn retrieve(
    client: &reqwest::Client,
    robots_url: &str,
    timeout: Duration,
    guard: Option<(&AddressPolicy, bool)>,
    tap: Option<&WireTap>,
) -> Retrieved {
    let mut exchanges = Vec::new();
    let inner = retrieve_inner(client, robots_url, guard, tap, &mut exchanges);
    let got = match tokio::time::timeout(timeout, inner).await {
        Ok(r) => r,
        Err(_) => Retrieved::Failed(format!("no complete response within {timeout:?}")),
    };
    if let Some(tap) = tap {
        for exchange in exchanges {
            tap.record(exchange).await;
        }
    }
    got
}

async fn retrieve_inner(
    client: &reqwest::Client,
    robots_url: &str,
    guard: Option<(&AddressPolicy, bool)>,
    tap: Option<&WireTap>,
    exchanges: &mut Vec<Exchange>,
) -> Retrieved {
    let mut url = match Url::parse(robots_url) {
        Ok(u) => u,
        Err(e) => return Retrieved::Failed(format!("invalid robots.txt URL: {e}")),
    };
    let mut visited = HashSet::new();
    // Bounded: one request per allowed hop plus the first.
    for _ in 0..=ROBOTS_MAX_REDIRECTS {
        visited.insert(url.to_string());
        // Fetched once a day per origin, and the page request that follows races the
        // connection's return to the pool: kept alive, it would mostly sit idle (a file
        // descriptor each, on a broad crawl of many hosts) until the pool drops it.
        let request = match client
            .get(url.clone())
            .header(http::header::CONNECTION, "close")
            .build()
        {
            Ok(r) => r,
            Err(e) => return Retrieved::Failed(error_chain(&e)),
        };
        let sent = tap.map(|t| (t.wire_headers(request.headers(), &url), SystemTime::now()));
        let mut resp = match client.execute(request).await {
            Ok(r) => r,
            // The client's own redirect policy gave up: as unavailable as too many hops here.
            Err(e) if e.is_redirect() => {
                return Retrieved::BadRedirect {
                    status: None,
                    reason: error_chain(&e),
                };
            }
            Err(e) => return Retrieved::Failed(error_chain(&e)),
        };
        let status = resp.status().as_u16();
        let retry_after = crate::headers::retry_after(resp.headers(), std::time::SystemTime::now());
        // The exchange as archived, once its body (if read) is known.
        let archive = |body: Vec<u8>, truncated| {
            sent.clone().map(|(request_headers, sent_at)| {
                get_exchange(
                    url.clone(),
                    request_headers,
                    resp.version(),
                    status,
                    resp.headers().clone(),
                    body.into(),
                    resp.remote_addr().map(|a| a.ip()),
                    sent_at,
                    truncated,
                )
            })
        };
        if (300..400).contains(&status) && status != 304 {
            // A hop's body is not read: it is archived as such.
            exchanges.extend(archive(Vec::new(), Some("unspecified")));
            let next = resp
                .headers()
                .get(http::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|loc| url.join(loc).ok());
            let refused = next
                .as_ref()
                .zip(guard)
                .and_then(|(n, (policy, private_ok))| policy.refuse_url(n, private_ok));
            match next {
                Some(n) if refused.is_some() => {
                    return Retrieved::BadRedirect {
                        status: Some(status),
                        reason: format!(
                            "redirect to '{n}' refused: {}",
                            refused.unwrap_or_default()
                        ),
                    };
                }
                Some(n)
                    if matches!(n.scheme(), "http" | "https") && !visited.contains(n.as_str()) =>
                {
                    url = n;
                    continue;
                }
                Some(n) => {
                    return Retrieved::BadRedirect {
                        status: Some(status),
                        reason: format!("redirect loop or non-http redirect to '{n}'"),
                    };
                }
                None => {
                    return Retrieved::BadRedirect {
                        status: Some(status),
                        reason: "redirect without a usable Location".to_owned(),
                    };
                }
            }
        }
        let head = archive(Vec::new(), None);
        let mut body = Vec::new();
        let mut truncated = false;
        let mut cut = false;
        loop {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    let room = ROBOTS_MAX_BYTES.saturating_sub(body.len());
                    if chunk.len() > room {
                        body.extend_from_slice(chunk.get(..room).unwrap_or_default());
                        truncated = true;
                        break;
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                // A 2xx cut short cannot be trusted as complete rules; anything else's body
                // does not matter.
                Err(e) if (200..300).contains(&status) => {
                    return Retrieved::Failed(error_chain(&e));
                }
                Err(_) => {
                    cut = true;
                    break;
                }
            }
        }
        if let Some(mut exchange) = head {
            // The body as received, before the cut at a line break below.
            exchange.body = bytes::Bytes::copy_from_slice(&body);
            exchange.truncated = if truncated {
                Some("length")
            } else if cut {
                Some("unspecified")
            } else {
                None
            };
            exchanges.push(exchange);
        }
        if truncated {
            tracing::warn!(
                url = robots_url,
                "robots.txt larger than {ROBOTS_MAX_BYTES} bytes; reading the first part only"
            );
            // Cut at the last line break so no rule is read half-way.
            if let Some(nl) = body.iter().rposition(|b| *b == b'\n') {
                body.truncate(nl + 1);
            }
        }
        return Retrieved::Body {
            status,
            body,
            truncated,
            retry_after,
        };
    }
    Retrieved::BadRedirect {
        status: None,
        reason: format!("more than {ROBOTS_MAX_REDIRECTS} redirects"),
    }
}

/// Interpret a retrieval (RFC 9309 §2.3.1). Also returns whether the body was cut at
/// [`ROBOTS_MAX_BYTES`].
pub(super) fn verdict(
    robots_url: &str,
    got: Retrieved,
    agent: &str,
    options: &RobotsOptions,
) -> (RobotsRules, bool) {
    let now = Instant::now();
    let unavailable = |status, reason: String| {
        (
            Access::AllowAll,
            RobotsStatus::Unavailable { status, reason },
            options.ttl,
        )
    };
    let unreachable = |status, reason: String| {
        tracing::warn!(
            url = robots_url,
            "robots.txt unreachable, disallowing for now: {reason}"
        );
        (
            Access::DisallowAll,
            RobotsStatus::Unreachable { status, reason },
            options.retry_unreachable,
        )
    };
    let mut was_truncated = false;
    let mut not_text = false;
    let mut asked_wait = None;
    let (access, status, ttl) = match got {
        Retrieved::Body {
            status,
            body,
            truncated,
            ..
        } if (200..300).contains(&status) => {
            was_truncated = truncated;
            not_text = !looks_like_text(&body);
            if not_text {
                // Read as before (no line parses, so no rules), but not in silence: a
                // server that answers robots.txt with binary data is broken, and whoever
                // runs the crawl should hear of it.
                tracing::warn!(
                    url = robots_url,
                    "robots.txt is not text (binary data): read as having no rules"
                );
            }
            let mut file = RobotsTxt::parse(agent, &body);
            file.sitemaps = resolve_sitemaps(robots_url, std::mem::take(&mut file.sitemaps));
            (
                Access::Parsed(Box::new(file)),
                RobotsStatus::Fetched { status },
                options.ttl,
            )
        }
        // 429 says "come back later", like a 5xx: nothing may be fetched until it is read.
        Retrieved::Body {
            status,
            retry_after,
            ..
        } if status == 429 || status >= 500 => {
            asked_wait = retry_after;
            unreachable(Some(status), format!("HTTP {status}"))
        }
        // Any other 4xx (and odd statuses): no robots.txt, so everything is allowed.
        Retrieved::Body { status, .. } => unavailable(Some(status), format!("HTTP {status}")),
        Retrieved::BadRedirect { status, reason } => unavailable(status, reason),
        Retrieved::Failed(reason) => unreachable(None, reason),
    };
    (
        RobotsRules {
            access,
            status,
            expires: now + ttl,
            retry_after: asked_wait,
            not_text,
        },
        was_truncated,
    )
}

/// The `Sitemap:` lines as absolute URLs. RFC 9309 asks for absolute ones, but sites write
/// `Sitemap: /sitemap.xml` often enough: a relative one is resolved against the robots.txt
/// URL. One that does not read as a URL (`http://[::1`, `http://h:99999/`), and an empty one
/// (which would resolve to robots.txt itself), is dropped: it names no sitemap.
fn resolve_sitemaps(robots_url: &str, written: Vec<String>) -> Vec<String> {
    let base = Url::parse(robots_url).ok();
    written
        .into_iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            let url = match &base {
                Some(base) => base.join(&s),
                None => Url::parse(&s),
            };
            match url {
                Ok(url) => Some(String::from(url)),
                Err(e) => {
                    tracing::debug!(
                        url = robots_url,
                        "robots.txt: unusable Sitemap line {s:?}: {e}"
                    );
                    None
                }
            }
        })
        .collect()
}

/// Whether the start of a robots.txt reads as text: a zero byte, or more than one byte in
/// sixteen a control character other than whitespace, says binary data.
fn looks_like_text(body: &[u8]) -> bool {
    let head = &body[..body.len().min(1024)];
    let controls = head
        .iter()
        .filter(|&&b| b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r' | 0x0c))
        .count();
    controls * 16 <= head.len()
}
