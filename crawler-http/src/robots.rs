//! robots.txt (RFC 9309): fetched once per origin, cached, and consulted before every request.
//!
//! How a fetch of `/robots.txt` is read:
//!
//! | answer | verdict | trusted for |
//! |---|---|---|
//! | 2xx | the rules of the group matching our product token (else `*`) | the TTL (24 h) |
//! | 3xx | followed, up to 5 hops, across hosts; the rules apply to the first origin | — |
//! | more than 5 redirects, a loop, or a redirect to a non-http URL | unavailable: allow all (RFC 9309 §2.3.1.2) | the TTL |
//! | 4xx other than 429 | unavailable: allow all | the TTL |
//! | 429, 5xx, network error, timeout | unreachable: disallow all **for now** | the retry interval (60 s), then fetched again |
//!
//! The crawl's downloader reads "disallow for now" as *wait*, never as a refusal: the page
//! goes back to its host's queue, the host is held (by the robots.txt response's Retry-After,
//! else a growing backoff) and robots.txt is asked again when the hold ends; only an outage
//! longer than `robots_outage_max` skips the host. The cache keeps at most
//! [`ROBOTS_MAX_ORIGINS`] origins, dropping the least recently used.
//!
//! Bodies over [`ROBOTS_MAX_BYTES`] are cut at the last line break before the limit, so a rule
//! is never read half-way (`Disallow: /private` cut to `Disallow: /p` would forbid too much).

use crawler_core::matching::{Wildcard, wildcard_match};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crawler_core::Url;
use texting_robots::Robot;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::error::Error;
use crate::error_chain::error_chain;

/// robots.txt files larger than this are cut here (Google's limit is 500 KiB; RFC 9309 asks
/// for at least 500 KiB to be parsed).
pub const ROBOTS_MAX_BYTES: usize = 500 * 1024;
/// Redirects followed when fetching robots.txt (RFC 9309 asks for at least five).
pub const ROBOTS_MAX_REDIRECTS: usize = 5;
/// Origins whose verdicts a [`RobotsCache`] keeps; the least recently used goes first. At
/// the body cap each verdict is small (parsed rules), so this bounds the cache's memory on
/// crawls that touch millions of hosts.
pub const ROBOTS_MAX_ORIGINS: usize = 10_000;

/// How a [`RobotsCache`] fetches and how long it trusts what it fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RobotsOptions {
    /// How long a fetched (or unavailable) robots.txt is trusted. Default 24 h.
    pub ttl: Duration,
    /// How soon an unreachable robots.txt (429, 5xx, network error, timeout) is fetched again;
    /// until then the origin is treated as fully disallowed, as RFC 9309 asks. Default 60 s.
    pub retry_unreachable: Duration,
    /// Total time for one robots.txt fetch, redirects and body included. Default 30 s.
    pub fetch_timeout: Duration,
}

impl Default for RobotsOptions {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(24 * 3600),
            retry_unreachable: Duration::from_secs(60),
            fetch_timeout: Duration::from_secs(30),
        }
    }
}

/// What fetching an origin's robots.txt produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RobotsStatus {
    /// A 2xx body was read and its rules apply.
    Fetched {
        /// The final HTTP status.
        status: u16,
    },
    /// No usable robots.txt (4xx, too many redirects, or an unparsable body): everything is
    /// allowed.
    Unavailable {
        /// The final HTTP status, if a response arrived.
        status: Option<u16>,
        /// Why.
        reason: String,
    },
    /// The server could not be asked (429, 5xx, network error, timeout): everything is
    /// disallowed until the retry interval passes.
    Unreachable {
        /// The HTTP status, if a response arrived.
        status: Option<u16>,
        /// Why.
        reason: String,
    },
}

/// The verdict for one origin.
#[derive(Debug)]
pub struct RobotsRules {
    access: Access,
    status: RobotsStatus,
    expires: Instant,
    /// The Retry-After of an unreachable robots.txt's response, if it sent one.
    retry_after: Option<Duration>,
}

/// What an origin lets us fetch: everything (no usable robots.txt), nothing (robots.txt
/// unreachable for now), or what its parsed file says. (Not core's crawl `Rules`, nor the
/// public [`RobotsRules`], which wraps this with the fetch's status and expiry.)
#[derive(Debug)]
enum Access {
    AllowAll,
    DisallowAll,
    Parsed(Box<Robot>),
}

impl RobotsRules {
    /// Whether `url` may be fetched.
    pub fn allowed(&self, url: &Url) -> bool {
        match &self.access {
            Access::AllowAll => true,
            Access::DisallowAll => false,
            Access::Parsed(r) => r.allowed(url.as_str()),
        }
    }

    /// The Crawl-delay of the matching group, if any.
    pub fn crawl_delay(&self) -> Option<Duration> {
        match &self.access {
            Access::Parsed(r) => r
                .delay
                .filter(|d| d.is_finite() && *d > 0.0)
                .map(|d| Duration::from_secs_f32(d.min(86_400.0))),
            _ => None,
        }
    }

    /// Sitemap URLs listed in the file, as written.
    pub fn sitemaps(&self) -> &[String] {
        match &self.access {
            Access::Parsed(r) => &r.sitemaps,
            _ => &[],
        }
    }

    /// The listed sitemaps that are absolute http(s) URLs: starting points for a
    /// [`SitemapWalk`](crate::SitemapWalk).
    pub fn sitemap_urls(&self) -> Vec<Url> {
        self.sitemaps()
            .iter()
            .filter_map(|s| Url::parse(s.trim()).ok())
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .collect()
    }

    /// How the fetch went.
    pub fn status(&self) -> &RobotsStatus {
        &self.status
    }

    /// When this verdict stops being trusted and robots.txt is fetched again.
    pub fn expires(&self) -> Instant {
        self.expires
    }

    /// Whether robots.txt could not be read for now (429, 5xx, network error, timeout).
    pub fn is_unreachable(&self) -> bool {
        matches!(self.status, RobotsStatus::Unreachable { .. })
    }

    /// The HTTP status of the final robots.txt response, if one arrived.
    pub fn http_status(&self) -> Option<u16> {
        match &self.status {
            RobotsStatus::Fetched { status } => Some(*status),
            RobotsStatus::Unavailable { status, .. } | RobotsStatus::Unreachable { status, .. } => {
                *status
            }
        }
    }

    /// The wait an unreachable robots.txt's response asked for (its Retry-After, read
    /// against the server's clock).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

/// The product token robots.txt groups are matched against: the User-Agent up to the first
/// `/`, space or `(` (`mybot/1.0 (+https://…)` matches `User-agent: mybot`).
pub fn product_token(user_agent: &str) -> &str {
    let end = user_agent.find(['/', ' ', '(']).unwrap_or(user_agent.len());
    user_agent.get(..end).unwrap_or(user_agent).trim()
}

type Cell = Arc<OnceCell<Arc<RobotsRules>>>;

/// One origin's cell and when it was last used (a counter, for LRU eviction).
/// The cached origins: a least-recently-used set of at most `capacity`, and beside it the
/// origins "pinned" because a page sent back to the queue after robots.txt went in its slot
/// is still to come. Evicting those would fetch robots.txt again when the page comes back,
/// and on a broad crawl whose first round touches more hosts than the cache holds, again
/// and again for ever; pinned origins are bounded by the pages waiting, not by the cache.
struct Origins {
    lru: lru::LruCache<String, Cell>,
    /// Pinned origins: (cell, pages still to come).
    pinned: HashMap<String, (Cell, u32)>,
}

impl Origins {
    fn new(capacity: usize) -> Self {
        let cap = std::num::NonZeroUsize::new(capacity).unwrap_or(std::num::NonZeroUsize::MIN);
        // Bounded, but grown as origins come: `LruCache::new` allocates the whole table up
        // front (a crawl of one site paid for a quarter of a MiB it never used).
        let mut lru = lru::LruCache::unbounded();
        lru.resize(cap);
        Self {
            lru,
            pinned: HashMap::new(),
        }
    }

    fn len(&self) -> usize {
        self.lru.len() + self.pinned.len()
    }

    /// The origin's cell if it has one, marked used now.
    fn get(&mut self, origin: &str) -> Option<&mut Cell> {
        if let Some((cell, _)) = self.pinned.get_mut(origin) {
            return Some(cell);
        }
        self.lru.get_mut(origin)
    }

    /// The origin's cell, marked used now; a new one (evicting the least recently used
    /// unpinned origin when full) if it has none.
    fn cell(&mut self, origin: &str) -> &mut Cell {
        match self.pinned.get_mut(origin) {
            Some((cell, _)) => cell,
            None => self.lru.get_or_insert_mut(origin.to_owned(), Cell::default),
        }
    }

    /// A page of `origin` goes back to the queue and will need its verdict.
    fn pin(&mut self, origin: &str) {
        if let Some((_, n)) = self.pinned.get_mut(origin) {
            *n += 1;
        } else if let Some(cell) = self.lru.pop(origin) {
            self.pinned.insert(origin.to_owned(), (cell, 1));
        }
    }

    /// A page of `origin` used its verdict.
    fn unpin(&mut self, origin: &str) {
        let Some((_, n)) = self.pinned.get_mut(origin) else {
            return;
        };
        *n -= 1;
        if *n == 0
            && let Some((cell, _)) = self.pinned.remove(origin)
        {
            self.lru.put(origin.to_owned(), cell);
        }
    }
}

/// A per-origin cache of robots.txt verdicts. Each origin's robots.txt is fetched once per
/// TTL, and concurrent checks for one origin share a single fetch.
pub struct RobotsCache {
    client: reqwest::Client,
    agent: String,
    options: RobotsOptions,
    /// One cell per origin; the lock is held only to find or replace a cell, never across a
    /// fetch, so checks for other origins are not blocked by a slow server.
    origins: Mutex<Origins>,
    /// Refuse robots.txt redirects to private IP literals (names are refused by the
    /// client's resolver).
    deny_private: bool,
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
    /// [`ROBOTS_MAX_REDIRECTS`] redirects, or none: 3xx answers are then followed here) and
    /// matches groups by the product token of `user_agent`, with default [`RobotsOptions`].
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
            deny_private: false,
        }
    }

    /// Refuse robots.txt redirects to private, loopback and link-local IP literals (the
    /// `deny_private_addresses` setting); such a redirect makes robots.txt unavailable.
    pub fn deny_private_addresses(mut self, yes: bool) -> Self {
        self.deny_private = yes;
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
        self.rules_and_fetched(url).await
    }

    /// Check `url`, fetching its origin's robots.txt first if it is not cached. Concurrent
    /// checks for one origin share a single fetch.
    pub async fn check(&self, url: &Url) -> Check {
        let (rules, fetched) = self.rules_and_fetched(url).await;
        Check {
            allowed: rules.allowed(url),
            crawl_delay: rules.crawl_delay(),
            fetched,
        }
    }

    /// The verdict for `url`'s origin, fetching robots.txt if it is not cached.
    pub async fn rules(&self, url: &Url) -> Arc<RobotsRules> {
        self.rules_and_fetched(url).await.0
    }

    /// The `Sitemap:` URLs of `url`'s origin if its robots.txt is cached and still trusted,
    /// without fetching anything.
    pub fn cached_sitemaps(&self, url: &Url) -> Option<Vec<Url>> {
        let origin = url.origin().ascii_serialization();
        let mut map = self.origins.lock().unwrap_or_else(|p| p.into_inner());
        let rules = map.get(&origin)?.get()?;
        (rules.expires > Instant::now()).then(|| rules.sitemap_urls())
    }

    async fn rules_and_fetched(&self, url: &Url) -> (Arc<RobotsRules>, bool) {
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
        let mut fetched = false;
        let rules = cell
            .get_or_init(|| {
                fetched = true;
                async {
                    let robots_url = format!("{origin}/robots.txt");
                    let got = retrieve(
                        &self.client,
                        &robots_url,
                        self.options.fetch_timeout,
                        self.deny_private,
                    )
                    .await;
                    Arc::new(verdict(&robots_url, got, &self.agent, &self.options).0)
                }
            })
            .await;
        (Arc::clone(rules), fetched)
    }
}

/// What one robots.txt retrieval produced, before interpretation.
enum Retrieved {
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
async fn retrieve(
    client: &reqwest::Client,
    robots_url: &str,
    timeout: Duration,
    deny_private: bool,
) -> Retrieved {
    match tokio::time::timeout(timeout, retrieve_inner(client, robots_url, deny_private)).await {
        Ok(r) => r,
        Err(_) => Retrieved::Failed(format!("no complete response within {timeout:?}")),
    }
}

async fn retrieve_inner(
    client: &reqwest::Client,
    robots_url: &str,
    deny_private: bool,
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
        let request = client
            .get(url.clone())
            .header(http::header::CONNECTION, "close");
        let mut resp = match request.send().await {
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
        if (300..400).contains(&status) && status != 304 {
            let next = resp
                .headers()
                .get(http::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|loc| url.join(loc).ok());
            match next {
                Some(n) if deny_private && crate::downloader::private_literal(&n) => {
                    return Retrieved::BadRedirect {
                        status: Some(status),
                        reason: format!("private address refused: redirect to '{n}'"),
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
        let mut body = Vec::new();
        let mut truncated = false;
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
                Err(_) => break,
            }
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

/// Interpret a retrieval (RFC 9309 §2.3.1). Also returns the body when rules were parsed.
fn verdict(
    robots_url: &str,
    got: Retrieved,
    agent: &str,
    options: &RobotsOptions,
) -> (RobotsRules, Option<Vec<u8>>, bool) {
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
    let mut kept_body = None;
    let mut was_truncated = false;
    let mut asked_wait = None;
    let (access, status, ttl) = match got {
        Retrieved::Body {
            status,
            body,
            truncated,
            ..
        } if (200..300).contains(&status) => {
            was_truncated = truncated;
            match Robot::new(agent, &body) {
                Ok(robot) => {
                    kept_body = Some(body);
                    (
                        Access::Parsed(Box::new(robot)),
                        RobotsStatus::Fetched { status },
                        options.ttl,
                    )
                }
                Err(e) => {
                    tracing::warn!(url = robots_url, "unreadable robots.txt, allowing all: {e}");
                    unavailable(Some(status), format!("unreadable robots.txt: {e}"))
                }
            }
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
        },
        kept_body,
        was_truncated,
    )
}

/// Everything robots.txt says about one URL for one agent (what `crawler robots URL --agent A`
/// prints).
#[derive(Debug, Clone, PartialEq)]
pub struct RobotsReport {
    /// The robots.txt URL of the page's origin.
    pub robots_url: String,
    /// The product token groups were matched against.
    pub agent: String,
    /// How the fetch went (and so which default applies).
    pub status: RobotsStatus,
    /// Whether the URL may be fetched.
    pub allowed: bool,
    /// The user-agent group whose rules apply (`"*"` or the agent), if the file has one.
    pub group: Option<String>,
    /// The deciding rule as written (`Disallow: /private/`), if one matched.
    pub matched_rule: Option<String>,
    /// The group's Crawl-delay.
    pub crawl_delay: Option<Duration>,
    /// The `Sitemap:` lines.
    pub sitemaps: Vec<String>,
    /// Whether the file was larger than [`ROBOTS_MAX_BYTES`] and cut.
    pub truncated: bool,
}

/// Fetch `url`'s robots.txt with `client` and evaluate it for `agent` (a full User-Agent or
/// just its product token), with default [`RobotsOptions`]. Redirects the client hands back
/// are followed up to [`ROBOTS_MAX_REDIRECTS`]; [`robots_client`] builds a suitable client.
pub async fn fetch_robots(client: &reqwest::Client, url: &Url, agent: &str) -> RobotsReport {
    let options = RobotsOptions::default();
    let token = product_token(agent).to_owned();
    let robots_url = format!("{}/robots.txt", url.origin().ascii_serialization());
    let got = retrieve(client, &robots_url, options.fetch_timeout, false).await;
    let (rules, body, truncated) = verdict(&robots_url, got, &token, &options);
    let allowed = rules.allowed(url);
    let (group, matched_rule) = match &body {
        Some(body) => {
            let scan = scan_rules(body, &token, url);
            // Report our own scan's rule only where it agrees with texting_robots' verdict.
            let rule = scan.rule.filter(|(allow, _)| *allow == allowed);
            (scan.group, rule.map(|(_, text)| text))
        }
        None => (None, None),
    };
    RobotsReport {
        robots_url,
        agent: token,
        status: rules.status.clone(),
        allowed,
        group,
        matched_rule,
        crawl_delay: rules.crawl_delay(),
        sitemaps: rules.sitemaps().to_vec(),
        truncated,
    }
}

/// A client for [`fetch_robots`]: the given User-Agent and connect timeout, and no automatic
/// redirects (robots.txt redirects are followed, counted and checked by [`fetch_robots`]).
pub fn robots_client(
    user_agent: &str,
    connect_timeout: Duration,
) -> Result<reqwest::Client, Error> {
    // A second install is a harmless no-op; see HttpDownloader::new.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .user_agent(user_agent)
        .connect_timeout(connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .gzip(true)
        .brotli(true)
        .deflate(true)
        .build()
        .map_err(|e| Error::new("cannot build the HTTP client", e))
}

/// Our own reading of the file, used only to explain a verdict (texting_robots decides).
struct Scan {
    group: Option<String>,
    /// (is Allow, the rule as written) of the longest matching rule.
    rule: Option<(bool, String)>,
}

/// A group as written: its agents (lower case) and its rules (is Allow, pattern, the line).
type Group = (Vec<String>, Vec<(bool, String, String)>);

/// Find the group for `token` (else `*`) and its longest rule matching `url`'s path and query,
/// Allow winning ties (RFC 9309 §2.2.2).
fn scan_rules(body: &[u8], token: &str, url: &Url) -> Scan {
    let text = String::from_utf8_lossy(body);
    let mut groups: Vec<Group> = Vec::new();
    let mut in_agents = false;
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim().to_ascii_lowercase(), value.trim());
        match key.as_str() {
            "user-agent" => {
                if !in_agents {
                    groups.push((Vec::new(), Vec::new()));
                }
                in_agents = true;
                if let Some(g) = groups.last_mut() {
                    g.0.push(value.to_ascii_lowercase());
                }
            }
            "allow" | "disallow" => {
                in_agents = false;
                if let Some(g) = groups.last_mut() {
                    let allow = key == "allow";
                    let shown = if allow { "Allow" } else { "Disallow" };
                    g.1.push((allow, value.to_owned(), format!("{shown}: {value}")));
                }
            }
            _ => {}
        }
    }
    let token = token.to_ascii_lowercase();
    let named = groups.iter().any(|(agents, _)| agents.contains(&token));
    let wanted = if named { token } else { "*".to_owned() };
    // Path and query, as texting_robots matches them.
    let path = &url[url::Position::BeforePath..url::Position::AfterQuery];
    let mut best: Option<(usize, bool, String)> = None;
    let mut found_group = false;
    for (_, rules) in groups.iter().filter(|(a, _)| a.contains(&wanted)) {
        found_group = true;
        for (allow, pattern, shown) in rules {
            // An empty Disallow allows everything and decides nothing.
            if pattern.is_empty() || !path_matches(pattern, path) {
                continue;
            }
            let better = match &best {
                None => true,
                Some((len, best_allow, _)) => {
                    pattern.len() > *len || (pattern.len() == *len && *allow && !best_allow)
                }
            };
            if better {
                best = Some((pattern.len(), *allow, shown.clone()));
            }
        }
    }
    Scan {
        group: found_group.then_some(wanted),
        rule: best.map(|(_, allow, shown)| (allow, shown)),
    }
}

/// RFC 9309 path matching: a prefix match, `*` any run, a final `$` anchors the end.
fn path_matches(pattern: &str, path: &str) -> bool {
    wildcard_match(pattern, path, Wildcard::RobotsPath)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_drops_the_least_recently_used_origin() {
        let mut o = Origins::new(2);
        o.cell("http://a");
        o.cell("http://b");
        o.cell("http://a"); // a used again: b is now the oldest
        o.cell("http://c");
        assert_eq!(o.len(), 2);
        assert!(o.get("http://a").is_some() && o.get("http://c").is_some());
        assert!(o.get("http://b").is_none());
    }

    #[test]
    fn a_pinned_origin_outlives_the_capacity_until_its_page_comes_back() {
        let mut o = Origins::new(2);
        o.cell("http://pinned");
        o.pin("http://pinned");
        for i in 0..10 {
            o.cell(&format!("http://other{i}"));
        }
        // Two unpinned origins plus the pinned one: the page waiting keeps its verdict.
        assert_eq!(o.len(), 3);
        assert!(o.get("http://pinned").is_some());
        o.unpin("http://pinned");
        // Released: an ordinary entry again (the most recent), evicted in turn.
        o.cell("http://x");
        o.cell("http://y");
        assert!(o.get("http://pinned").is_none());
        assert_eq!(o.len(), 2);
    }

    #[test]
    fn product_tokens() {
        assert_eq!(product_token("crawler/0.1 (+https://x)"), "crawler");
        assert_eq!(product_token("MyBot"), "MyBot");
        assert_eq!(product_token("Some Bot 2"), "Some");
    }

    fn rules_of(agent: &str, txt: &[u8]) -> RobotsRules {
        RobotsRules {
            access: Access::Parsed(Box::new(Robot::new(agent, txt).unwrap())),
            status: RobotsStatus::Fetched { status: 200 },
            expires: Instant::now(),
            retry_after: None,
        }
    }

    #[test]
    fn parsed_rules_allow_disallow_and_delay() {
        let rules = rules_of(
            "crawler",
            b"User-agent: *\nDisallow: /private/\nCrawl-delay: 2\nSitemap: http://h/s.xml\nSitemap: /rel.xml\n",
        );
        assert!(rules.allowed(&Url::parse("http://h/public").unwrap()));
        assert!(!rules.allowed(&Url::parse("http://h/private/x").unwrap()));
        assert_eq!(rules.crawl_delay(), Some(Duration::from_secs(2)));
        assert_eq!(rules.sitemaps(), ["http://h/s.xml", "/rel.xml"]);
        assert_eq!(
            rules.sitemap_urls(),
            [Url::parse("http://h/s.xml").unwrap()]
        );
    }

    #[test]
    fn specific_group_wins_over_star() {
        let txt =
            b"User-agent: *\nDisallow: /\n\nUser-agent: Crawler\nDisallow: /mine\nCrawl-delay: 5\n";
        let ours = rules_of(product_token("crawler/0.1 (+https://x)"), txt);
        assert!(ours.allowed(&Url::parse("http://h/page").unwrap()));
        assert!(!ours.allowed(&Url::parse("http://h/mine").unwrap()));
        assert_eq!(ours.crawl_delay(), Some(Duration::from_secs(5)));
        let other = rules_of("otherbot", txt);
        assert!(!other.allowed(&Url::parse("http://h/page").unwrap()));
        assert_eq!(other.crawl_delay(), None);
    }

    #[test]
    fn scan_finds_the_deciding_rule() {
        let txt = b"User-agent: *\nDisallow: /\n\nUser-agent: crawler\nUser-agent: other\n\
            Disallow: /shop/\nAllow: /shop/public\nDisallow: /*.pdf$\n# Disallow: /commented\n";
        let u = |s: &str| Url::parse(&format!("http://h{s}")).unwrap();
        let scan = scan_rules(txt, "crawler", &u("/shop/public/x"));
        assert_eq!(scan.group.as_deref(), Some("crawler"));
        assert_eq!(scan.rule, Some((true, "Allow: /shop/public".into())));
        let scan = scan_rules(txt, "crawler", &u("/shop/cart"));
        assert_eq!(scan.rule, Some((false, "Disallow: /shop/".into())));
        let scan = scan_rules(txt, "crawler", &u("/docs/a.pdf"));
        assert_eq!(scan.rule, Some((false, "Disallow: /*.pdf$".into())));
        assert_eq!(scan_rules(txt, "crawler", &u("/docs/a.pdf?x")).rule, None);
        assert_eq!(scan_rules(txt, "crawler", &u("/commented")).rule, None);
        let scan = scan_rules(txt, "nobody", &u("/x"));
        assert_eq!(scan.group.as_deref(), Some("*"));
        assert_eq!(scan.rule, Some((false, "Disallow: /".into())));
    }

    #[test]
    fn pattern_matching() {
        assert!(path_matches("/a", "/abc"));
        assert!(!path_matches("/a$", "/abc"));
        assert!(path_matches("/a*c$", "/abbbc"));
        assert!(path_matches("*", ""));
        assert!(path_matches("/*/x", "/a/b/x"));
        assert!(!path_matches("/*/y", "/a/b/x"));
        assert!(path_matches("/$", "/"));
        assert!(!path_matches("/$", "/a"));
        // Many stars against a long miss stays fast (no exponential backtracking).
        let pattern = "/*a".repeat(200) + "$";
        let path = "/".to_owned() + &"a".repeat(5_000) + "b";
        assert!(!path_matches(&pattern, &path));
    }
}
