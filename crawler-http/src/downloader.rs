//! The HTTP downloader: robots gate, reqwest, streaming size cap, total deadline, and the
//! classification of every outcome for the engine and the host's slot.

use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use crawler_core::{
    Download, Downloader, Failure, FailureKind, Feedback, Fetched, Request, Response, Settings, Url,
};
use tokio::time::Instant;

use crate::error::Error;
use crate::guard::{PublicOnly, is_private};
use crate::headers::{parse_rate_limit, parse_retry_after};
use crate::robots::{RobotsCache, RobotsOptions};

/// Downloads requests with reqwest, politely and within limits.
pub struct HttpDownloader {
    client: reqwest::Client,
    robots: Option<RobotsCache>,
    max_body: u64,
    timeout: Duration,
    deny_private: bool,
    /// Lower-cased challenge-page markers.
    soft_block_markers: Vec<String>,
}

/// How much of a body is searched for challenge-page markers: they sit near the top.
const SOFT_BLOCK_SCAN: usize = 64 * 1024;

impl HttpDownloader {
    /// A downloader configured from the crawl settings (User-Agent, timeouts, redirect limit,
    /// body cap, robots).
    pub fn new(settings: &Settings) -> Result<Self, Error> {
        // reqwest is built without a bundled crypto provider so the dependency tree stays
        // small; install ring's once per process (a second install is a harmless no-op).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = build_client(settings, settings.max_redirects)?;
        let robots = if settings.obey_robots {
            // RFC 9309 asks crawlers to follow at least five redirects for robots.txt.
            // The client shares the private-address guard with page fetches.
            let options = RobotsOptions {
                ttl: settings.robots_ttl,
                fetch_timeout: settings.download_timeout,
                ..RobotsOptions::default()
            };
            Some(RobotsCache::with_options(
                build_client(settings, 5)?,
                &settings.user_agent,
                options,
            ))
        } else {
            None
        };
        Ok(Self {
            client,
            robots,
            max_body: settings.max_body_size,
            timeout: settings.download_timeout,
            deny_private: settings.deny_private_addresses,
            soft_block_markers: settings
                .soft_block_markers
                .iter()
                .map(|m| m.to_lowercase())
                .filter(|m| !m.is_empty())
                .collect(),
        })
    }

        /// The robots.txt cache, when robots are obeyed (for sitemap discovery and reports).
    pub fn robots(&self) -> Option<&RobotsCache> {
        self.robots.as_ref()
    }

    /// Whether a successful HTML response is really a challenge page.
    fn is_challenge(&self, headers: &http::HeaderMap, body: &[u8]) -> bool {
        if self.soft_block_markers.is_empty() {
            return false;
        }
        let html = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_none_or(|ct| ct.to_ascii_lowercase().contains("html"));
        if !html {
            return false;
        }
        let head = String::from_utf8_lossy(&body[..body.len().min(SOFT_BLOCK_SCAN)]).to_lowercase();
        self.soft_block_markers
            .iter()
            .any(|m| head.contains(m.as_str()))
    }

    async fn send(
        &self,
        req: &Request,
    ) -> Result<(Url, u16, http::HeaderMap, bytes::Bytes), Failure> {
        let method = http::Method::from_bytes(req.method.as_bytes()).map_err(|_| {
            Failure::new(
                FailureKind::Other,
                format!("invalid method '{}'", req.method),
            )
        })?;
        let mut builder = self.client.request(method, req.url.clone());
        for (k, v) in &req.headers {
            builder = builder.header(k.as_str(), v.as_str());
        }
        if let Some(body) = &req.body {
            builder = builder.body(body.clone());
        }
        let mut resp = builder.send().await.map_err(classify)?;
        let status = resp.status().as_u16();
        let url = resp.url().clone();
        if let Some(len) = resp.content_length() {
            // A declared length over the cap fails before a byte of body is read. (With
            // compression the declared length is the compressed size; the streaming check
            // below also covers the decompressed size.)
            if len > self.max_body && resp.headers().get("content-encoding").is_none() {
                return Err(too_large(self.max_body, status));
            }
        }
        let headers = std::mem::take(resp.headers_mut());
        let mut body = BytesMut::new();
        while let Some(chunk) = resp.chunk().await.map_err(classify)? {
            if body.len() as u64 + chunk.len() as u64 > self.max_body {
                return Err(too_large(self.max_body, status));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((url, status, headers, body.freeze()))
    }
}

fn too_large(cap: u64, status: u16) -> Failure {
    Failure {
        kind: FailureKind::TooLarge,
        message: format!("body larger than max_body_size ({cap} bytes)"),
        status: Some(status),
    }
}

fn build_client(settings: &Settings, max_redirects: usize) -> Result<reqwest::Client, Error> {
    let deny_private = settings.deny_private_addresses;
    let policy = reqwest::redirect::Policy::custom(move |attempt| {
        if deny_private && private_literal(attempt.url()) {
            let msg = format!("private address refused: redirect to '{}'", attempt.url());
            attempt.error(RedirectError(msg))
        } else if attempt.previous().len() > max_redirects {
            attempt.error(RedirectError(format!(
                "more than {max_redirects} redirects"
            )))
        } else if !matches!(attempt.url().scheme(), "http" | "https") {
            let msg = format!("redirect to non-http URL '{}'", attempt.url());
            attempt.error(RedirectError(msg))
        } else if attempt.previous().contains(attempt.url()) {
            let msg = format!("redirect loop at '{}'", attempt.url());
            attempt.error(RedirectError(msg))
        } else {
            attempt.follow()
        }
    });
    let mut builder = reqwest::Client::builder();
    if deny_private {
        builder = builder.dns_resolver(std::sync::Arc::new(PublicOnly));
    }
    builder
        .user_agent(settings.user_agent.as_str())
        .connect_timeout(settings.connect_timeout)
        .redirect(policy)
        .gzip(true)
        .brotli(true)
        .deflate(true)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| Error::new("cannot build the HTTP client", e))
}

/// Whether the URL's host is an IP literal in a private range (such hosts skip DNS, so the
/// resolver cannot catch them).
fn private_literal(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => is_private(ip.into()),
        Some(url::Host::Ipv6(ip)) => is_private(ip.into()),
        _ => false,
    }
}

#[derive(Debug)]
struct RedirectError(String);

impl std::fmt::Display for RedirectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for RedirectError {}

/// Put a reqwest error in the class the stats and the retry policy use.
fn classify(e: reqwest::Error) -> Failure {
    let mut chain = String::new();
    let mut cause: Option<&dyn std::error::Error> = Some(&e);
    let mut redirect: Option<String> = None;
    while let Some(c) = cause {
        if let Some(r) = c.downcast_ref::<RedirectError>() {
            redirect = Some(r.0.clone());
        }
        if !chain.is_empty() {
            chain.push_str(": ");
        }
        chain.push_str(&c.to_string());
        cause = c.source();
    }
    let lower = chain.to_ascii_lowercase();
    let kind = if lower.contains("private address refused") {
        FailureKind::Forbidden
    } else if let Some(r) = &redirect {
        if r.starts_with("redirect to non-http") {
            FailureKind::BadRedirect
        } else {
            FailureKind::TooManyRedirects
        }
    } else if e.is_redirect() {
        FailureKind::TooManyRedirects
    } else if e.is_timeout() {
        FailureKind::Timeout
    } else if lower.contains("dns error") || lower.contains("failed to lookup address") {
        FailureKind::Dns
    } else if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake")
    {
        FailureKind::Tls
    } else if e.is_decode() {
        FailureKind::Decode
    } else if e.is_connect() || e.is_body() || e.is_request() {
        FailureKind::Connection
    } else {
        FailureKind::Other
    };
    Failure {
        kind,
        message: chain,
        status: e.status().map(|s| s.as_u16()),
    }
}

impl Downloader for HttpDownloader {
    async fn fetch(&self, req: &Request) -> Download {
        let mut feedback = Feedback::default();
        if self.deny_private && private_literal(&req.url) {
            let msg = format!(
                "private address refused: {} (deny_private_addresses is on)",
                req.url
            );
            return Download {
                outcome: Fetched::Failed(Failure::new(FailureKind::Forbidden, msg)),
                feedback,
            };
        }
        if let Some(robots) = &self.robots {
            let check = robots.check(&req.url).await;
            feedback.crawl_delay = check.crawl_delay;
            if !check.allowed {
                feedback.sent = check.fetched;
                return Download {
                    outcome: Fetched::Disallowed,
                    feedback,
                };
            }
        }
        feedback.sent = true;
        let started = Instant::now();
        // One deadline for the whole exchange, body included: an idle timeout alone would let
        // a server that trickles a byte a second hold a worker forever.
        let result = match tokio::time::timeout(self.timeout, self.send(req)).await {
            Ok(r) => r,
            Err(_) => Err(Failure::new(
                FailureKind::Timeout,
                format!("no complete response within {:?}", self.timeout),
            )),
        };
        feedback.latency = started.elapsed();
        let outcome = match result {
            Ok((url, status, headers, body)) => {
                feedback.status = Some(status);
                let now = SystemTime::now();
                if status == 429 || status == 503 {
                    feedback.retry_after = headers
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| parse_retry_after(v, now));
                }
                feedback.rate_limit = parse_rate_limit(&headers, now);
                if (200..300).contains(&status) && self.is_challenge(&headers, &body) {
                    feedback.soft_block = true;
                    Fetched::Failed(Failure {
                        kind: FailureKind::SoftBlock,
                        message: "challenge page instead of content".to_owned(),
                        status: Some(status),
                    })
                } else {
                    Fetched::Response(Response::new(req.clone(), url, status, headers, body))
                }
            }
            Err(f) => {
                feedback.status = f.status;
                feedback.failure = Some(f.kind);
                Fetched::Failed(f)
            }
        };
        Download { outcome, feedback }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_build_a_client() {
        assert!(HttpDownloader::new(&Settings::default()).is_ok());
    }
}
