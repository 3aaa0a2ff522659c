//! The robots.txt gate in front of every page, and the answer to a robots-sitemaps request
//! from the robots.txt cache.

use crawler_core::{BodyOrigin, Download, Feedback, Fetched, Request, Response, Url};
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
        let host = url.host_str().unwrap_or("");
        let host = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.to_owned(),
        };
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
        // robots.txt goes out as this slot's send, so it is paced like any request to the
        // host; the page waits for its own send.
        let started = Instant::now();
        let (rules, fetched) = robots
            .fetch_rules_via(
                &req.url,
                self.client_for(req),
                crate::guard::private_ok(req),
            )
            .await;
        feedback.sent = fetched;
        if fetched {
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
            if lower.contains(crate::guard::REFUSED)
                || lower.contains("dns error")
                || lower.contains("failed to lookup address")
            {
                // Not an outage to wait out: the host cannot be reached at all, and the page
                // fails the same way on its own (nothing is sent), with that reason.
                return Ok(());
            }
            // RFC 9309's "disallow for now" means wait: the host is held and the page keeps
            // its place; it is not a refusal.
            feedback.robots_unavailable = true;
            feedback.retry_after = rules.retry_after();
            return Err(Fetched::Requeue(format!("robots.txt unavailable: {why}")));
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
        let check = robots.check(&req.url).await;
        let rules = robots.rules(&req.url).await;
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
            crawl_delay: check.crawl_delay,
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

pub(super) fn wants_robots_sitemaps(req: &Request) -> bool {
    req.meta
        .get(ROBOTS_SITEMAPS_META)
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
}
