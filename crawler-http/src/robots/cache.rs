//! The per-origin cache of verdicts: one fetch per origin and TTL, shared by concurrent
//! checks; the lock is never held across a fetch.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crawler_core::{RobotsShare, SharedRobots, Url};
use tokio::time::Instant;

use super::fetch::{Retrieved, retrieve, verdict};
use super::origins::{Cell, Origins};
use super::{ROBOTS_MAX_ORIGINS, RobotsOptions, RobotsRules, product_token};
use crate::guard::AddressPolicy;
use crate::tap::WireTap;

/// A per-origin cache of robots.txt verdicts. Each origin's robots.txt is fetched once per
/// TTL, and concurrent checks for one origin share a single fetch.
pub struct RobotsCache {
    client: reqwest::Client,
    agent: String,
    options: RobotsOptions,
    /// One cell per origin; the lock is held only to find or replace a cell, never across a
    /// fetch, so checks for other origins are not blocked by a slow server.
    origins: Mutex<Origins>,
    /// Refuse robots.txt redirects to IP literals and metadata names the address policy
    /// refuses (names are refused by the client's resolver).
    policy: Option<Arc<AddressPolicy>>,
    /// Files fetched by the other workers of a fleet, and where this one's go.
    share: Option<Arc<dyn RobotsShare>>,
    /// Where each robots.txt exchange is archived (the `warc` setting).
    tap: Option<WireTap>,
}

impl std::fmt::Debug for RobotsCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RobotsCache")
            .field("agent", &self.agent)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// The result of a robots check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Whether the URL may be fetched.
    pub allowed: bool,
    /// The origin's Crawl-delay for our group, if any.
    pub crawl_delay: Option<Duration>,
    /// Whether this check sent a request for robots.txt.
    pub fetched: bool,
}

impl RobotsCache {
    /// A cache that fetches with `client` (which should follow at most
    /// [`ROBOTS_MAX_REDIRECTS`](super::ROBOTS_MAX_REDIRECTS) redirects, or none: 3xx answers
    /// are then followed here) and matches groups by the product token of `user_agent`, with
    /// default [`RobotsOptions`].
    pub fn new(client: reqwest::Client, user_agent: &str) -> Self {
        Self::with_options(client, user_agent, RobotsOptions::default())
    }

    /// Like [`RobotsCache::new`], trusting fetched files for `ttl` (the `robots_ttl` setting).
    pub fn with_ttl(client: reqwest::Client, user_agent: &str, ttl: Duration) -> Self {
        Self::with_options(
            client,
            user_agent,
            RobotsOptions {
                ttl,
                ..RobotsOptions::default()
            },
        )
    }

    /// Like [`RobotsCache::new`], with every option given.
    pub fn with_options(client: reqwest::Client, user_agent: &str, options: RobotsOptions) -> Self {
        Self {
            client,
            agent: product_token(user_agent).to_owned(),
            options,
            origins: Mutex::new(Origins::new(ROBOTS_MAX_ORIGINS)),
            policy: None,
            share: None,
            tap: None,
        }
    }

    /// Archive every robots.txt exchange (each redirect hop too) through `tap`.
    pub(crate) fn with_tap(mut self, tap: WireTap) -> Self {
        self.tap = Some(tap);
        self
    }

    /// Take robots.txt files from `share` before fetching them, and put the ones fetched
    /// there (a fleet's workers: one fetch per origin and TTL for the whole fleet). A file
    /// from the share is trusted for what is left of the TTL it was shared with.
    pub fn share_with(mut self, share: Arc<dyn RobotsShare>) -> Self {
        self.share = Some(share);
        self
    }

    /// Refuse robots.txt redirects to IP literals and metadata names that `policy` refuses
    /// (`allow_addresses`, `deny_private_addresses`); such a redirect makes robots.txt
    /// unavailable.
    pub fn address_policy(mut self, policy: Arc<AddressPolicy>) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Keep at most `capacity` origins (default [`ROBOTS_MAX_ORIGINS`]).
    pub fn with_capacity(self, capacity: usize) -> Self {
        self.origins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .lru
            .resize(std::num::NonZeroUsize::new(capacity).unwrap_or(std::num::NonZeroUsize::MIN));
        self
    }

    /// A page of `url`'s origin goes back to the queue after robots.txt was fetched in its
    /// slot: keep the verdict until the page comes back ([`RobotsCache::cached`] releases
    /// it), however many other origins are fetched meanwhile.
    pub fn pin(&self, url: &Url) {
        let origin = url.origin().ascii_serialization();
        self.origins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pin(&origin);
    }

    /// Origins cached now.
    pub fn len(&self) -> usize {
        self.origins.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no origin is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The verdict for `url`'s origin if one is cached and still trusted, without fetching.
    /// A page that uses it releases one [`RobotsCache::pin`] of the origin.
    pub fn cached(&self, url: &Url) -> Option<Arc<RobotsRules>> {
        let origin = url.origin().ascii_serialization();
        let mut origins = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        let rules = Arc::clone(origins.get(&origin)?.get()?);
        origins.unpin(&origin);
        (rules.expires > Instant::now()).then_some(rules)
    }

    /// The verdict for `url`'s origin, fetching robots.txt if it is not cached (or no longer
    /// trusted), and whether this call sent the request.
    pub async fn fetch_rules(&self, url: &Url) -> (Arc<RobotsRules>, bool) {
        self.rules_and_fetched(url, None).await
    }

    /// Like [`RobotsCache::fetch_rules`], fetching through `client` for a request that may
    /// (`private_ok`) or may not reach private addresses (see [`AddressPolicy`]).
    pub async fn fetch_rules_via(
        &self,
        url: &Url,
        client: &reqwest::Client,
        private_ok: bool,
    ) -> (Arc<RobotsRules>, bool) {
        self.rules_and_fetched(url, Some((client, private_ok)))
            .await
    }

    /// Check `url`, fetching its origin's robots.txt first if it is not cached. Concurrent
    /// checks for one origin share a single fetch.
    pub async fn check(&self, url: &Url) -> Check {
        let (rules, fetched) = self.rules_and_fetched(url, None).await;
        Check {
            allowed: rules.allowed(url),
            crawl_delay: rules.crawl_delay(),
            fetched,
        }
    }

    /// The verdict for `url`'s origin, fetching robots.txt if it is not cached.
    pub async fn rules(&self, url: &Url) -> Arc<RobotsRules> {
        self.rules_and_fetched(url, None).await.0
    }

    /// The `Sitemap:` URLs of `url`'s origin if its robots.txt is cached and still trusted,
    /// without fetching anything.
    pub fn cached_sitemaps(&self, url: &Url) -> Option<Vec<Url>> {
        let origin = url.origin().ascii_serialization();
        let mut map = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        let rules = map.get(&origin)?.get()?;
        (rules.expires > Instant::now()).then(|| rules.sitemap_urls())
    }

    async fn rules_and_fetched(
        &self,
        url: &Url,
        via: Option<(&reqwest::Client, bool)>,
    ) -> (Arc<RobotsRules>, bool) {
        let (client, private_ok) = via.unwrap_or((&self.client, true));
        let guard = self.policy.as_deref().map(|p| (p, private_ok));
        let origin = url.origin().ascii_serialization();
        let cell = {
            let mut map = self.origins.lock().unwrap_or_else(|p| p.into_inner());
            let cell = map.cell(&origin);
            if cell.get().is_some_and(|r| r.expires <= Instant::now()) {
                // Callers still holding the old cell keep its verdict; new callers share one
                // new fetch.
                *cell = Cell::default();
            }
            Arc::clone(cell)
        };
        let fetched = AtomicBool::new(false);
        let rules = cell
            .get_or_init(|| async {
                let robots_url = format!("{origin}/robots.txt");
                if let Some(rules) = self.shared(&origin, &robots_url).await {
                    return Arc::new(rules);
                }
                fetched.store(true, Ordering::Relaxed);
                let got = retrieve(
                    client,
                    &robots_url,
                    self.options.fetch_timeout,
                    guard,
                    self.tap.as_ref(),
                )
                .await;
                self.share(&origin, &got).await;
                Arc::new(verdict(&robots_url, got, &self.agent, &self.options).0)
            })
            .await;
        (Arc::clone(rules), fetched.load(Ordering::Relaxed))
    }

    /// The rules of a file another worker fetched for `origin`, trusted for what is left of
    /// its TTL. The share failing is not the crawl failing: the file is fetched instead.
    /// The share blocks (a store retries through an outage), so it is asked off the async
    /// runtime, where it holds up this origin's check and nothing else.
    async fn shared(&self, origin: &str, robots_url: &str) -> Option<RobotsRules> {
        let share = Arc::clone(self.share.as_ref()?);
        let key = origin.to_owned();
        let found = tokio::task::spawn_blocking(move || share.get(&key)).await;
        let (file, left) = match found {
            Ok(Ok(found)) => found?,
            Ok(Err(e)) => {
                tracing::warn!(%origin, "cannot read the fleet's robots.txt, fetching it: {e}");
                return None;
            }
            Err(e) => {
                tracing::warn!(%origin, "the read of the fleet's robots.txt stopped, fetching it: {e}");
                return None;
            }
        };
        let got = Retrieved::Body {
            status: file.status,
            body: file.body,
            truncated: file.truncated,
            retry_after: None,
        };
        let mut rules = verdict(robots_url, got, &self.agent, &self.options).0;
        rules.expires = Instant::now() + left;
        Some(rules)
    }

    /// Share a file this worker fetched, when it decides the rules: a 2xx file, or a 4xx
    /// (no rules). An outage (429, 5xx, no answer, a bad redirect) is not shared: each
    /// worker's next try asks again, in a slot of the host's shared pace. Awaited before the
    /// check answers, so the file is the fleet's before this worker's request is done (the
    /// next worker's turn at a host with one request at a time comes after it).
    async fn share(&self, origin: &str, got: &Retrieved) {
        let Some(share) = self.share.as_ref().map(Arc::clone) else {
            return;
        };
        let Retrieved::Body {
            status,
            body,
            truncated,
            ..
        } = got
        else {
            return;
        };
        if *status == 429 || !(200..500).contains(status) || self.options.ttl.is_zero() {
            return;
        }
        let file = SharedRobots {
            status: *status,
            body: body.clone(),
            truncated: *truncated,
        };
        let (key, ttl) = (origin.to_owned(), self.options.ttl);
        match tokio::task::spawn_blocking(move || share.put(&key, &file, ttl)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(%origin, "cannot share robots.txt with the fleet: {e}"),
            Err(e) => tracing::warn!(%origin, "sharing robots.txt with the fleet stopped: {e}"),
        }
    }
}
