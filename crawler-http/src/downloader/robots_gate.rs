//! The robots.txt gate in front of every page, and the answer to a robots-sitemaps request
//! from the robots.txt cache.

use std::sync::atomic::Ordering;

use crawler_core::{
    BodyOrigin, Download, Failure, FailureKind, Feedback, Fetched, Request, Response, Url,
};
use tokio::time::Instant;

use super::{HttpDownloader, ROBOTS_SITEMAPS_META};
use crate::robots::RobotsCache;

impl HttpDownloader {
    /// Whether robots.txt applies to `url`: the first `[[hosts]]` rule matching the URL's
    /// host (with its port when not the default) decides when it sets `ignore_robots`,
    /// whatever slot key (`host_key`) groups the host.
    pub(super) fn obeys_robots(&self, url: &Url) -> bool {
        if self.host_rules.is_empty() {
            // The common case costs no formatted host per request.
            return self.obey_robots;
        }
        let host = super::rule_host(url);
        self.host_rules
            .iter()
            .find(|r| r.matches(&host))
            .and_then(|r| r.ignore_robots)
            .map_or(self.obey_robots, |ignore| !ignore)
    }

    /// The robots.txt gate. `Ok(crawl_delay)` when the page may be sent in this slot;
    /// otherwise the answer to give instead: a refusal, or the page back to the queue
    /// because robots.txt took this slot's send (or is unavailable, and the host is held).
    /// With `log_verdict`, the verdict gets its debug line (the engine's gate logs it;
    /// the same check again in `fetch` does not, so a page gets one line).
    pub(super) async fn robots_gate(
        &self,
        robots: &RobotsCache,
        req: &Request,
        feedback: &mut Feedback,
        log_verdict: bool,
    ) -> Result<(), Fetched> {
        if let Some(rules) = robots.cached(&req.url).filter(|r| !r.is_unreachable()) {
            feedback.crawl_delay = rules.crawl_delay();
            return if robots_allows(&rules, req, log_verdict) {
                Ok(())
            } else {
                Err(Fetched::Disallowed)
            };
        }
        let origin = self
            .unreachable
            .any
            .load(Ordering::Relaxed)
            .then(|| req.url.origin().ascii_serialization());
        if let Some(why) = origin.as_deref().and_then(|o| self.unreachable.given_up(o)) {
            // Nothing is sent: the host was found unreachable and its pages are skipped.
            return Err(Fetched::Failed(Failure::new(FailureKind::HostSkipped, why)));
        }
        // robots.txt goes out as this slot's send, so it is paced like any request to the
        // host; the page waits for its own send.
        let started = Instant::now();
        let (client, proxy) = self.client_for(req).map_err(Fetched::Failed)?;
        let (rules, fetched) = robots
            .fetch_rules_via(&req.url, &client, crate::guard::private_ok(req))
            .await;
        feedback.sent = fetched;
        if fetched {
            feedback.proxy.clone_from(&proxy);
        }
        feedback.robots_not_text = fetched && rules.not_text();
        if fetched {
            // robots.txt is a static file on most sites: not a page's latency.
            feedback.cheap = true;
            feedback.latency = started.elapsed();
            feedback.sent_at = Some(started);
            feedback.status = rules.http_status();
        }
        feedback.crawl_delay = rules.crawl_delay();
        if rules.is_unreachable() {
            let why = match rules.status() {
                crate::RobotsStatus::Unreachable { reason, .. } => reason.clone(),
                _ => String::new(),
            };
            let lower = why.to_ascii_lowercase();
            if proxy.is_some() && proxy_failed(&lower) {
                // Through a proxy, a connection that failed is the proxy's, not the
                // target's: the host is neither held nor given up as unreachable, and the
                // page goes out to fail in the proxy's own class (`proxy`, retried), so
                // its URL reaches the failures file with that reason.
                return Ok(());
            }
            if lower.contains(crate::guard::REFUSED)
                || lower.contains("dns error")
                || lower.contains("failed to lookup address")
                || tls_refused(&lower)
            {
                // Not an outage to wait out: the host cannot be reached at all, and the page
                // fails the same way on its own (nothing is sent), with that reason.
                return Ok(());
            }
            if fetched && is_unreachable(&lower) {
                let origin = req.url.origin().ascii_serialization();
                if let Some(msg) = self.unreachable.note(&origin, &why) {
                    // A host that refuses connections (or has no route) a few times in a
                    // row is not there to wait for: its pages end now, each with the
                    // reason, instead of holding the crawl until robots_outage_max.
                    tracing::warn!(%origin, "{msg}");
                    return Err(Fetched::Failed(Failure::new(FailureKind::HostSkipped, msg)));
                }
            }
            // RFC 9309's "disallow for now" means wait: the host is held and the page keeps
            // its place; it is not a refusal.
            feedback.robots_unavailable = true;
            feedback.retry_after = rules.retry_after();
            return Err(Fetched::Requeue(format!("robots.txt unavailable: {why}")));
        }
        if fetched && self.unreachable.any.load(Ordering::Relaxed) {
            self.unreachable
                .reached(&req.url.origin().ascii_serialization());
        }
        if !robots_allows(&rules, req, log_verdict) {
            return Err(Fetched::Disallowed);
        }
        if fetched && rules.expires() > Instant::now() {
            robots.pin(&req.url);
            Err(Fetched::Requeue("robots.txt fetched first".to_owned()))
        } else {
            // Another request fetched it (this slot's send is still unused), or the verdict
            // is trusted for no time at all (`robots_ttl = 0`), where sending the page back
            // to the queue would only fetch robots.txt again, for ever.
            Ok(())
        }
    }

    /// Answer a robots-sitemaps request from the robots.txt cache (see
    /// [`ROBOTS_SITEMAPS_META`]).
    pub(super) async fn robots_sitemaps(&self, robots: &RobotsCache, req: &Request) -> Download {
        // Through the client the host's pages use (its `[[hosts]]` rule's HTTP version and
        // TLS options, the address policy's public client), as the gate fetches it.
        let client = match self.client_for(req) {
            Ok((client, _)) => client,
            Err(failure) => {
                return Download {
                    outcome: Fetched::Failed(failure),
                    feedback: Feedback::default(),
                };
            }
        };
        let (rules, _) = robots
            .fetch_rules_via(&req.url, &client, crate::guard::private_ok(req))
            .await;
        let mut body = String::new();
        // Relative lines are resolved against robots.txt: the RFC asks for absolute URLs,
        // but sites write `Sitemap: /sitemap.xml` often enough.
        let sitemaps = rules
            .sitemaps()
            .iter()
            .filter_map(|s| req.url.join(s.trim()).ok());
        for url in sitemaps.filter(|u| matches!(u.scheme(), "http" | "https")) {
            body.push_str("Sitemap: ");
            body.push_str(url.as_str());
            body.push('\n');
        }
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain"),
        );
        let response = Response::new(
            req.clone(),
            req.url.clone(),
            200,
            headers,
            bytes::Bytes::from(body),
        )
        .with_origin(BodyOrigin::Cache);
        // The robots.txt fetch (if this check made it) is the robots cache's own request,
        // outside the host's pacing, as for every robots check.
        let feedback = Feedback {
            crawl_delay: rules.crawl_delay(),
            ..Feedback::default()
        };
        Download {
            outcome: Fetched::Response(self.attach(response)),
            feedback,
        }
    }
}

/// robots.txt's verdict on `req`, with a debug line naming the rule that decided it (`-L
/// debug` shows one per page checked).
fn robots_allows(rules: &crate::RobotsRules, req: &Request, log: bool) -> bool {
    if !log || !tracing::enabled!(tracing::Level::DEBUG) {
        return rules.allowed(&req.url);
    }
    let (allowed, why) = rules.explain(&req.url);
    let verdict = if allowed { "allowed" } else { "disallowed" };
    tracing::debug!(url = %req.url, rule = %why, "robots.txt: {verdict}");
    allowed
}

/// Whether a robots.txt failure says the host cannot be reached at all (nothing listens, or
/// no route to it), as opposed to an outage worth waiting for (a timeout, a 5xx).
fn is_unreachable(lower: &str) -> bool {
    [
        "connection refused",
        "network is unreachable",
        "no route to host",
        "host is unreachable",
    ]
    .iter()
    .any(|m| lower.contains(m))
}

/// Whether a robots.txt failure through a proxy is the proxy's: no connection to it, its
/// tunnel (`CONNECT`) or SOCKS handshake refused, or the connection to it cut.
fn proxy_failed(lower: &str) -> bool {
    is_unreachable(lower)
        || [
            "tunnel",
            "socks",
            "proxy",
            "connection reset",
            "connection closed",
            "tcp connect error",
        ]
        .iter()
        .any(|m| lower.contains(m))
}

/// Whether a robots.txt failure is a TLS handshake the host will refuse every time: a
/// certificate that does not verify, or an alert (no TLS or HTTP version in common, such as
/// `http_version = "2"` against a server without HTTP/2). Not an outage to wait out: the
/// page then fails the same way, as `tls`, with the reason. A handshake cut off (reset,
/// closed) is not one of these.
fn tls_refused(lower: &str) -> bool {
    [
        "invalid peer certificate",
        "received fatal alert",
        "peer is incompatible",
    ]
    .iter()
    .any(|m| lower.contains(m))
}

/// robots.txt fetches that find a host unreachable, in a row, before its pages are given up
/// as `host_skipped`. The host's slot holds it between tries (a few seconds each), so a
/// server that is restarting gets that long; a host that is not there costs no more.
pub(crate) const UNREACHABLE_TRIES: u32 = 3;

/// Origins whose robots.txt found them unreachable, by consecutive tries.
#[derive(Debug, Default)]
pub(super) struct Unreachable {
    /// Whether any origin is recorded (so the common case takes no lock).
    pub(super) any: std::sync::atomic::AtomicBool,
    origins: std::sync::Mutex<std::collections::HashMap<String, (u32, String)>>,
}

/// At most this many origins are remembered; past it the record starts again (a crawl of
/// that many dead hosts only tries some of them again).
const UNREACHABLE_MAX_ORIGINS: usize = 100_000;

impl Unreachable {
    /// Why `origin`'s pages are skipped, once it has been given up.
    pub(super) fn given_up(&self, origin: &str) -> Option<String> {
        let map = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        map.get(origin)
            .filter(|(tries, _)| *tries >= UNREACHABLE_TRIES)
            .map(|(_, why)| why.clone())
    }

    /// One more failed try for `origin`; the reason its pages are skipped once it has
    /// failed [`UNREACHABLE_TRIES`] times in a row.
    pub(super) fn note(&self, origin: &str, why: &str) -> Option<String> {
        let mut map = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= UNREACHABLE_MAX_ORIGINS && !map.contains_key(origin) {
            map.clear();
        }
        self.any.store(true, Ordering::Relaxed);
        let entry = map.entry(origin.to_owned()).or_insert((0, String::new()));
        entry.0 += 1;
        if entry.0 < UNREACHABLE_TRIES {
            return None;
        }
        entry.1 = format!(
            "host unreachable: robots.txt failed {} times in a row ({why}); its pages are skipped for this run",
            entry.0
        );
        Some(entry.1.clone())
    }

    /// `origin` answered: its count starts again.
    pub(super) fn reached(&self, origin: &str) {
        let mut map = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(origin);
    }
}

pub(super) fn wants_robots_sitemaps(req: &Request) -> bool {
    req.meta
        .get(ROBOTS_SITEMAPS_META)
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
}
