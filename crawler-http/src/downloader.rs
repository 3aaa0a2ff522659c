//! The HTTP downloader: robots gate, conditional requests and the HTTP cache, reqwest,
//! streaming size cap, total deadline, and the classification of every outcome for the
//! engine and the host's slot.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use crawler_core::{
    AfterAck, BodyOrigin, CachedPage, ConditionalStore, Download, Downloader, Failure, FailureKind,
    Feedback, Fetched, Request, Response, Settings, Url, Validators,
};
use tokio::time::Instant;

use crate::challenge::ChallengeMatcher;
use crate::error::Error;
use crate::guard::{PublicOnly, is_private};
use crate::headers::{parse_rate_limit, retry_after, server_clock_offset};
use crate::robots::{RobotsCache, RobotsOptions};

/// Downloads requests with reqwest, politely and within limits.
pub struct HttpDownloader {
    client: reqwest::Client,
    robots: Option<RobotsCache>,
    /// The crawl's `obey_robots`; `[[hosts]]` rules may override it per host.
    obey_robots: bool,
    /// `[[hosts]]` rules, matched against each URL's own host (not its slot key).
    host_rules: Vec<crawler_core::HostRule>,
    max_body: u64,
    timeout: Duration,
    /// Redirect hops [`HttpDownloader::fetch_once`] follows (crawls follow them in the engine).
    max_redirects: usize,
    deny_private: bool,
    /// Challenge-page markers, ASCII case-insensitive, built once; `None` without markers.
    soft_block_markers: Option<ChallengeMatcher>,
    /// Validators and cached responses of earlier runs, when the crawl keeps them.
    store: Option<Arc<dyn ConditionalStore>>,
    /// Send If-None-Match / If-Modified-Since (the `conditional_requests` setting).
    send_validators: bool,
    /// Answer cached URLs from the cache without any network (`http_cache_offline`).
    offline: bool,
}

/// Request meta key: the largest body accepted for this request, in bytes, overriding
/// `max_body_size` (sitemaps may be 50 MB, more than pages are allowed).
pub const MAX_BODY_META: &str = "max_body_size";

/// Request meta key: when `true`, the request (for an origin's `/robots.txt`) is answered
/// from the robots.txt cache with the origin's `Sitemap:` lines, in robots.txt syntax, so
/// sitemap discovery costs no second download of robots.txt. Without robots obeyed, the
/// file is fetched like any page.
pub const ROBOTS_SITEMAPS_META: &str = "robots_sitemaps";

/// How much of a body is searched for challenge-page markers: they sit near the top.
const SOFT_BLOCK_SCAN: usize = 64 * 1024;

impl HttpDownloader {
    /// A downloader configured from the crawl settings (User-Agent, timeouts, body cap,
    /// robots). Redirects are not followed here: the engine follows them as new requests.
    pub fn new(settings: &Settings) -> Result<Self, Error> {
        // reqwest is built without a bundled crypto provider so the dependency tree stays
        // small; install ring's once per process (a second install is a harmless no-op).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = build_client(settings)?;
        // A host rule may turn robots on for one host of a crawl that ignores them.
        let any_host_obeys = settings
            .hosts
            .iter()
            .any(|r| r.ignore_robots == Some(false));
        let robots = if settings.obey_robots || any_host_obeys {
            // RFC 9309 asks crawlers to follow at least five redirects for robots.txt.
            // The client shares the private-address guard with page fetches.
            let options = RobotsOptions {
                ttl: settings.robots_ttl,
                fetch_timeout: settings.download_timeout,
                // An unreadable robots.txt is not remembered: the host is held instead, and
                // the next send after the hold asks for robots.txt again.
                retry_unreachable: Duration::ZERO,
            };
            Some(
                // The same client (one connection pool): the page request that follows a
                // robots.txt fetch reuses its connection instead of opening a second one
                // while the first sits idle in another pool.
                RobotsCache::with_options(client.clone(), &settings.user_agent, options)
                    .deny_private_addresses(settings.deny_private_addresses),
            )
        } else {
            None
        };
        Ok(Self {
            client,
            robots,
            obey_robots: settings.obey_robots,
            host_rules: settings.hosts.clone(),
            max_body: settings.max_body_size,
            max_redirects: settings.max_redirects,
            timeout: settings.download_timeout,
            deny_private: settings.deny_private_addresses,
            soft_block_markers: ChallengeMatcher::new(&settings.soft_block_markers)?,
            store: None,
            send_validators: settings.conditional_requests,
            offline: settings.http_cache && settings.http_cache_offline,
        })
    }

    /// Keep validators (and, if the store keeps responses, whole responses) in `store`:
    /// GET requests then carry If-None-Match / If-Modified-Since from the last successful
    /// fetch (unless `conditional_requests` is off or the request sets them itself), 200s
    /// are recorded, and a 304 hands the spider the cached page when there is one.
    pub fn with_store(mut self, store: Arc<dyn ConditionalStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// The store of validators and cached responses, if the crawl keeps one.
    pub fn store(&self) -> Option<&Arc<dyn ConditionalStore>> {
        self.store.as_ref()
    }

    /// The robots.txt cache, when robots are obeyed (for sitemap discovery and reports).
    pub fn robots(&self) -> Option<&RobotsCache> {
        self.robots.as_ref()
    }

    /// Fetch one request outside a crawl (tools, contract checks), where no slot paces the
    /// sends: robots.txt first when it is not cached, then the page, back to back, and
    /// redirects followed as a crawl would (robots.txt of each hop, at most
    /// `max_redirects`). An unavailable robots.txt gives [`Fetched::Requeue`] with its reason.
    pub async fn fetch_once(&self, req: &Request) -> Download {
        let mut req = req.clone();
        loop {
            let mut got = self.fetch(&req).await;
            if matches!(&got.outcome, Fetched::Requeue(_)) && !got.feedback.robots_unavailable {
                got = self.fetch(&req).await;
            }
            let Fetched::Response(response) = &got.outcome else {
                return got;
            };
            if !crawler_core::REDIRECTS.contains(&response.status()) {
                return got;
            }
            match crawler_core::redirect(&req, response, self.max_redirects) {
                Ok(next) => req = next,
                Err(failure) => {
                    return Download {
                        outcome: Fetched::Failed(failure),
                        feedback: got.feedback,
                    };
                }
            }
        }
    }

    /// Whether robots.txt applies to `url`: the first `[[hosts]]` rule matching the URL's
    /// host (with its port when not the default) decides when it sets `ignore_robots`,
    /// whatever slot key (`host_key`) groups the host.
    fn obeys_robots(&self, url: &Url) -> bool {
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
    async fn robots_gate(
        &self,
        robots: &RobotsCache,
        req: &Request,
        feedback: &mut Feedback,
    ) -> Result<(), Fetched> {
        if let Some(rules) = robots.cached(&req.url).filter(|r| !r.is_unreachable()) {
            feedback.crawl_delay = rules.crawl_delay();
            return if rules.allowed(&req.url) {
                Ok(())
            } else {
                Err(Fetched::Disallowed)
            };
        }
        // robots.txt goes out as this slot's send, so it is paced like any request to the
        // host; the page waits for its own send.
        let started = Instant::now();
        let (rules, fetched) = robots.fetch_rules(&req.url).await;
        feedback.sent = fetched;
        if fetched {
            feedback.latency = started.elapsed();
            feedback.status = rules.http_status();
        }
        feedback.crawl_delay = rules.crawl_delay();
        if rules.is_unreachable() {
            let why = match rules.status() {
                crate::RobotsStatus::Unreachable { reason, .. } => reason.clone(),
                _ => String::new(),
            };
            let lower = why.to_ascii_lowercase();
            if lower.contains("private address refused")
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
        if !rules.allowed(&req.url) {
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

    /// Whether a response (of any status: challenges come as 200, 403 and 503) is really a
    /// challenge page. Only HTML-ish bodies are searched, and only their first
    /// [`SOFT_BLOCK_SCAN`] bytes, raw, with no copy (see [`ChallengeMatcher`]).
    fn is_challenge(&self, headers: &http::HeaderMap, body: &[u8]) -> bool {
        let Some(markers) = &self.soft_block_markers else {
            return false;
        };
        let html = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            // Case-insensitive without a lowercased copy: this runs on every response.
            .is_none_or(|ct| {
                ct.as_bytes()
                    .windows(4)
                    .any(|w| w.eq_ignore_ascii_case(b"html"))
            });
        html && markers.is_match(body.get(..SOFT_BLOCK_SCAN).unwrap_or(body))
    }

    async fn send(
        &self,
        req: &Request,
        max_body: u64,
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
            if len > max_body && resp.headers().get("content-encoding").is_none() {
                return Err(too_large(max_body, status));
            }
        }
        let headers = std::mem::take(resp.headers_mut());
        let mut body = BytesMut::new();
        while let Some(chunk) = resp.chunk().await.map_err(classify)? {
            if body.len() as u64 + chunk.len() as u64 > max_body {
                return Err(too_large(max_body, status));
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

/// How long an idle keep-alive connection is kept for reuse.
const POOL_IDLE: std::time::Duration = std::time::Duration::from_secs(20);

/// The client for pages and robots.txt. It follows no redirect: a 3xx goes back to the
/// engine, whose next hop is a new request through the target's robots.txt and its host's
/// slot (robots.txt redirects are followed, counted and checked by the robots cache).
fn build_client(settings: &Settings) -> Result<reqwest::Client, Error> {
    let deny_private = settings.deny_private_addresses;
    let mut builder = reqwest::Client::builder();
    if deny_private {
        builder = builder.dns_resolver(std::sync::Arc::new(PublicOnly));
    }
    if let Some(proxy) = settings.proxy.as_deref().filter(|p| !p.trim().is_empty()) {
        let proxy = reqwest::Proxy::all(proxy.trim())
            .map_err(|e| Error::new(format!("invalid proxy URL '{proxy}'"), e))?;
        builder = builder.proxy(proxy);
    }
    builder
        .user_agent(settings.user_agent.as_str())
        .connect_timeout(settings.connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .gzip(true)
        .brotli(true)
        .deflate(true)
        .tcp_nodelay(true)
        // A broad crawl touches each host briefly: an idle keep-alive connection costs a
        // file descriptor and ~20 KiB until it expires, so keep no more per host than the
        // host may use at once, and not for long (servers commonly close idle connections
        // after 5 to 75 s; a host paced slower than this reconnects, which it can afford).
        .pool_max_idle_per_host(settings.concurrency_per_host.max(1))
        .pool_idle_timeout(POOL_IDLE)
        .build()
        .map_err(|e| Error::new("cannot build the HTTP client", e))
}

/// Whether the URL's host is an IP literal in a private range (such hosts skip DNS, so the
/// resolver cannot catch them).
pub(crate) fn private_literal(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(ip)) => is_private(ip.into()),
        Some(url::Host::Ipv6(ip)) => is_private(ip.into()),
        _ => false,
    }
}

/// Put a reqwest error in the class the stats and the retry policy use.
fn classify(e: reqwest::Error) -> Failure {
    let mut chain = String::new();
    let mut cause: Option<&dyn std::error::Error> = Some(&e);
    while let Some(c) = cause {
        if !chain.is_empty() {
            chain.push_str(": ");
        }
        chain.push_str(&c.to_string());
        cause = c.source();
    }
    let lower = chain.to_ascii_lowercase();
    let kind = if lower.contains("private address refused") {
        FailureKind::Forbidden
    } else if e.is_redirect() {
        FailureKind::TooManyRedirects
    } else if e.is_timeout() {
        FailureKind::Timeout
    } else if lower.contains("dns error") || lower.contains("failed to lookup address") {
        FailureKind::Dns
    } else if (lower.contains("tls") || lower.contains("handshake"))
        && (lower.contains("reset")
            || lower.contains("broken pipe")
            || lower.contains("unexpected eof")
            || lower.contains("connection closed"))
    {
        // The peer hung up mid-handshake (an overloaded TLS terminator): the network failed,
        // not the certificate, and another attempt may well succeed.
        FailureKind::Connection
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
    async fn gate(&self, req: &Request) -> Option<Download> {
        let robots = self.robots.as_ref()?;
        if wants_robots_sitemaps(req)
            || !self.obeys_robots(&req.url)
            || (self.deny_private && private_literal(&req.url))
        {
            // A refused address gets nothing, robots.txt included: fetch() refuses it.
            return None;
        }
        if self.offline
            && let Some(store) = self.store.as_ref().filter(|s| s.keeps_responses())
            && read_cached(store.as_ref(), &req.url).is_some()
        {
            // Replayed offline: nothing goes to the host, robots.txt included.
            return None;
        }
        let mut feedback = Feedback::default();
        match self.robots_gate(robots, req, &mut feedback).await {
            Ok(()) => None,
            Err(outcome) => Some(Download { outcome, feedback }),
        }
    }

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
        if let Some(robots) = &self.robots
            && wants_robots_sitemaps(req)
            && self.obeys_robots(&req.url)
        {
            return self.robots_sitemaps(robots, req).await;
        }
        // Only plain GETs are revalidated and cached: other methods change things, and a
        // request body is not part of the key.
        let store = self
            .store
            .as_ref()
            .filter(|_| req.method == "GET" && req.body.is_none());
        let cached = match store {
            Some(store) if store.keeps_responses() => read_cached(store.as_ref(), &req.url),
            _ => None,
        };
        if self.offline
            && let Some(page) = cached
        {
            // Offline replay: nothing reaches the host, so its slot gives the delay back.
            tracing::trace!(url = %req.url, "answered from the HTTP cache (offline)");
            let outcome = Fetched::Response(self.replay(
                req,
                page,
                BodyOrigin::Cache,
                &http::HeaderMap::new(),
            ));
            return Download { outcome, feedback };
        }
        if let Some(robots) = &self.robots
            && self.obeys_robots(&req.url)
            && let Err(outcome) = self.robots_gate(robots, req, &mut feedback).await
        {
            return Download { outcome, feedback };
        }
        let stored = store.and_then(|s| read_validators(s.as_ref(), &req.url));
        let conditional = if self.send_validators && store.is_some() {
            // With the HTTP cache on, only a page we can replay is worth a 304: without its
            // body the spider would lose the page's items.
            match (&cached, store.is_some_and(|s| s.keeps_responses())) {
                (Some(page), true) => conditional_headers(
                    req,
                    header_of(&page.headers, "etag"),
                    header_of(&page.headers, "last-modified"),
                ),
                (None, true) => None,
                (_, false) => stored.as_ref().and_then(|v| {
                    conditional_headers(req, v.etag.as_deref(), v.last_modified.as_deref())
                }),
            }
        } else {
            None
        };
        let sent_req = conditional.as_ref().unwrap_or(req);
        let max_body = req
            .meta
            .get(MAX_BODY_META)
            .and_then(|v| v.as_u64())
            .filter(|&n| n > 0)
            .unwrap_or(self.max_body);
        feedback.sent = true;
        let started = Instant::now();
        // One deadline for the whole exchange, body included: an idle timeout alone would let
        // a server that trickles a byte a second hold a worker forever.
        let result = match tokio::time::timeout(self.timeout, self.send(sent_req, max_body)).await {
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
                // A Retry-After is an instruction on whatever status carries it (a 301 or 302
                // during maintenance, a 413, a 5xx), read against the server's clock.
                feedback.retry_after = retry_after(&headers, now);
                feedback.server_clock_offset = server_clock_offset(&headers, now);
                feedback.rate_limit = parse_rate_limit(&headers, now);
                if status != 304 && self.is_challenge(&headers, &body) {
                    feedback.soft_block = true;
                    Fetched::Failed(Failure {
                        kind: FailureKind::SoftBlock,
                        message: "challenge page instead of content".to_owned(),
                        status: Some(status),
                    })
                } else {
                    // What the response teaches about its URL is recorded once the engine
                    // acknowledges the request (its items written): stored now, a crash
                    // would make the re-fetch a 304 for a page whose items were lost.
                    let after_ack = store.map(|store| {
                        let store = std::sync::Arc::clone(store);
                        let (req, url, headers, body) =
                            (req.clone(), url.clone(), headers.clone(), body.clone());
                        AfterAck::new(move || {
                            remember(
                                store.as_ref(),
                                &req,
                                &url,
                                status,
                                &headers,
                                &body,
                                stored,
                                now,
                            );
                        })
                    });
                    let mut response = match cached {
                        Some(page) if status == 304 && conditional.is_some() => {
                            self.replay(req, page, BodyOrigin::Revalidated, &headers)
                        }
                        _ => self.attach(Response::new(req.clone(), url, status, headers, body)),
                    };
                    if let Some(work) = after_ack {
                        response.set_after_ack(work);
                    }
                    Fetched::Response(response)
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

impl HttpDownloader {
    /// Hand responses what earlier runs stored, for spiders that skip unchanged pages.
    fn attach(&self, response: Response) -> Response {
        match &self.store {
            Some(store) => response.with_history(Arc::clone(store)),
            None => response,
        }
    }

    /// A cached page as the response to `req`. The server's fresh headers on a 304 (a new
    /// Date, ETag or Cache-Control) win over the stored ones, as RFC 9111 §4.3.4 asks.
    fn replay(
        &self,
        req: &Request,
        page: CachedPage,
        origin: BodyOrigin,
        fresh: &http::HeaderMap,
    ) -> Response {
        let mut headers = http::HeaderMap::new();
        for (k, v) in &page.headers {
            if let (Ok(k), Ok(v)) = (
                http::HeaderName::from_bytes(k.as_bytes()),
                http::HeaderValue::from_str(v),
            ) {
                headers.append(k, v);
            }
        }
        for (k, v) in fresh {
            // A 304 has no body: its framing headers describe nothing we replay.
            if !matches!(
                k.as_str(),
                "content-length" | "transfer-encoding" | "content-encoding"
            ) {
                headers.insert(k.clone(), v.clone());
            }
        }
        let url = Url::parse(&page.url).unwrap_or_else(|_| req.url.clone());
        let response = Response::new(
            req.clone(),
            url,
            page.status,
            headers,
            bytes::Bytes::from(page.body),
        );
        self.attach(response.with_origin(origin))
    }

    /// Answer a robots-sitemaps request from the robots.txt cache (see
    /// [`ROBOTS_SITEMAPS_META`]).
    async fn robots_sitemaps(&self, robots: &RobotsCache, req: &Request) -> Download {
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

fn wants_robots_sitemaps(req: &Request) -> bool {
    req.meta
        .get(ROBOTS_SITEMAPS_META)
        .and_then(|v| v.as_bool())
        .unwrap_or(false)
}

fn read_cached(store: &dyn ConditionalStore, url: &Url) -> Option<CachedPage> {
    store.cached(url).unwrap_or_else(|e| {
        tracing::warn!(%url, "HTTP cache unreadable, fetching: {e}");
        None
    })
}

fn read_validators(store: &dyn ConditionalStore, url: &Url) -> Option<Validators> {
    store.validators(url).unwrap_or_else(|e| {
        tracing::warn!(%url, "stored validators unreadable, fetching unconditionally: {e}");
        None
    })
}

/// The first value of header `name` in a stored header list.
fn header_of<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// `req` with If-None-Match / If-Modified-Since added, or `None` when there is nothing to
/// send or the request already carries its own (the spider's choice wins).
fn conditional_headers(
    req: &Request,
    etag: Option<&str>,
    last_modified: Option<&str>,
) -> Option<Request> {
    if etag.is_none() && last_modified.is_none()
        || req.header_value("if-none-match").is_some()
        || req.header_value("if-modified-since").is_some()
    {
        return None;
    }
    let mut r = req.clone();
    if let Some(tag) = etag {
        r.headers.push(("If-None-Match".to_owned(), tag.to_owned()));
    }
    if let Some(date) = last_modified {
        r.headers
            .push(("If-Modified-Since".to_owned(), date.to_owned()));
    }
    Some(r)
}

fn unix(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Record what a response says about its URL: a 200's validators (and the page itself when
/// the HTTP cache is on); a 304 refreshes the fetch time (and any validators it repeats).
/// Storage errors are logged, never fatal: the crawl goes on without them.
#[allow(clippy::too_many_arguments)]
fn remember(
    store: &dyn ConditionalStore,
    req: &Request,
    final_url: &Url,
    status: u16,
    headers: &http::HeaderMap,
    body: &[u8],
    stored: Option<Validators>,
    now: SystemTime,
) {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let validators = match (status, stored) {
        (200, _) => Validators {
            etag: text("etag"),
            last_modified: text("last-modified"),
            fetched_at_unix: unix(now),
            content_hash: xxhash_rust::xxh3::xxh3_64(body),
            body_len: body.len() as u64,
        },
        (304, Some(old)) => Validators {
            etag: text("etag").or(old.etag),
            last_modified: text("last-modified").or(old.last_modified),
            fetched_at_unix: unix(now),
            ..old
        },
        _ => return,
    };
    if let Err(e) = store.put_validators(&req.url, &validators) {
        tracing::warn!(url = %req.url, "could not store validators: {e}");
    }
    if status == 200 && store.keeps_responses() {
        let page = CachedPage {
            url: final_url.to_string(),
            status,
            headers: headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: body.to_vec(),
            stored_at_unix: unix(now),
        };
        if let Err(e) = store.put_cached(&req.url, &page) {
            tracing::warn!(url = %req.url, "could not store the response in the HTTP cache: {e}");
        }
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
