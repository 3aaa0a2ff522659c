//! The HTTP downloader: robots gate, conditional requests and the HTTP cache, reqwest,
//! streaming size cap, total deadline, and the classification of every outcome for the
//! engine and the host's slot.
//!
//! The folder: this file holds [`HttpDownloader`], its construction and the `Downloader`
//! impl that puts the steps together; `client.rs` the reqwest client, the send with its
//! body cap and the classification of transport errors; `robots_gate.rs` the robots.txt
//! gate and the robots-sitemaps answer; `http_cache.rs` validators, conditional requests
//! and the replay of cached pages. None of them paces requests or decides retries: the
//! host's slot and the engine do, from the [`Feedback`] given back.

mod client;
mod http_cache;
mod robots_gate;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crawler_core::{
    AfterAck, BodyOrigin, ConditionalStore, Download, Downloader, Exchange, ExchangeTap, Failure,
    FailureKind, Feedback, Fetched, Request, Response, Settings,
};
use tokio::time::Instant;

use crate::challenge::ChallengeMatcher;
use crate::dns::Resolver;
use crate::error::Error;
use crate::guard::{AddressPolicy, private_ok};
use crate::headers::{parse_rate_limit, retry_after, server_clock_offset};
use crate::robots::{RobotsCache, RobotsOptions};
use crate::tap::WireTap;
use client::{Route, Sent, build_client};
use http_cache::{conditional_headers, header_of, read_cached, read_validators, remember};
use robots_gate::{Unreachable, wants_robots_sitemaps};

/// Downloads requests with reqwest, politely and within limits.
pub struct HttpDownloader {
    /// The clients of hosts no `[[hosts]]` rule gives connection options of their own.
    clients: Clients,
    /// The clients of hosts whose rule sets connection options (`http_version`,
    /// `tls_verify`) other than the crawl's, one per distinct set of options.
    routes: Vec<Clients>,
    /// For each `[[hosts]]` rule, the index in `routes` of its hosts' clients (`None`: the
    /// crawl's own).
    rule_routes: Vec<Option<usize>>,
    /// The clients of requests with a proxy of their own (`Request::proxy`), by route,
    /// built on first use.
    request_routes: std::sync::Mutex<std::collections::HashMap<Route, Clients>>,
    /// The crawl's settings, to build those clients.
    settings: Arc<Settings>,
    /// Which addresses requests may reach.
    policy: Arc<AddressPolicy>,
    robots: Option<RobotsCache>,
    /// The crawl's `obey_robots`; `[[hosts]]` rules may override it per host.
    obey_robots: bool,
    /// `[[hosts]]` rules, matched against each URL's own host (not its slot key).
    host_rules: Vec<crawler_core::HostRule>,
    max_body: u64,
    timeout: Duration,
    /// Redirect hops [`HttpDownloader::fetch_once`] follows (crawls follow them in the engine).
    max_redirects: usize,
    /// Challenge-page markers, ASCII case-insensitive, built once; `None` without markers.
    soft_block_markers: Option<ChallengeMatcher>,
    /// Validators and cached responses of earlier runs, when the crawl keeps them.
    store: Option<Arc<dyn ConditionalStore>>,
    /// Send If-None-Match / If-Modified-Since (the `conditional_requests` setting).
    send_validators: bool,
    /// Answer cached URLs from the cache without any network (`http_cache_offline`).
    offline: bool,
    /// Origins whose robots.txt found them unreachable, and those given up.
    unreachable: Unreachable,
    /// Where completed exchanges are archived (the `warc` setting), if anywhere.
    tap: Option<WireTap>,
    /// The User-Agent the client sends, for the archived requests.
    user_agent: String,
    /// The crawl's resolver, behind every client's address guard.
    resolver: Arc<Resolver>,
    /// Asked when a response's headers arrive whether to read its body (the crawl's
    /// extensions); none by default, and then nothing is asked.
    headers_hook: Option<Arc<dyn crawler_core::HeadersHook>>,
}

/// The clients of one set of connection options.
struct Clients {
    /// The connection options these clients were built with.
    route: Route,
    /// The client of requests that may reach private space (start requests, and links and
    /// redirects from private pages).
    client: reqwest::Client,
    /// The client of requests from public pages, with `deny_private_addresses`: its own
    /// resolver and connection pool, so nothing it sends reaches a private address.
    public: Option<reqwest::Client>,
    /// The route's proxy as the stats name it (its password redacted), made once.
    proxy_name: Option<Arc<str>>,
}

impl Clients {
    fn new(
        settings: &Settings,
        route: Route,
        policy: &Arc<AddressPolicy>,
        resolver: &Arc<Resolver>,
    ) -> Result<Self, Error> {
        Ok(Self {
            client: build_client(settings, &route, policy, resolver, true)?,
            public: if policy.denies_private() {
                Some(build_client(settings, &route, policy, resolver, false)?)
            } else {
                None
            },
            proxy_name: route
                .proxy
                .as_deref()
                .map(|p| Arc::from(crawler_core::redact::redact_url(p))),
            route,
        })
    }
}

/// How `[[hosts]]` rules name `url`'s host: the host, with its port when not the default.
fn rule_host(url: &crawler_core::Url) -> String {
    let host = url.host_str().unwrap_or("");
    match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    }
}

/// Request meta key: the largest body accepted for this request, in bytes, overriding
/// `max_body_size` (sitemaps may be 50 MB, more than pages are allowed).
pub const MAX_BODY_META: &str = "max_body_size";

/// Request meta key: when present, the request is not a page (a sitemap): its latency is
/// reported as [`Feedback::cheap`](crawler_core::Feedback::cheap), so it never sets the
/// host's page latency baseline.
pub const NOT_PAGE_META: &str = "not_page";

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
        Self::with_resolver(settings, Resolver::from_settings(settings)?)
    }

    /// A downloader as [`HttpDownloader::new`] makes it, resolving names through
    /// `resolver` (the crawl's one resolver, which the frontier reads too).
    pub fn with_resolver(settings: &Settings, resolver: Arc<Resolver>) -> Result<Self, Error> {
        // reqwest is built without a bundled crypto provider so the dependency tree stays
        // small; install ring's once per process (a second install is a harmless no-op).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let policy = Arc::new(AddressPolicy::from_settings(settings)?);
        let default_route = Route::of(settings);
        let clients = Clients::new(settings, default_route.clone(), &policy, &resolver)?;
        // One client per distinct set of options the rules ask for, not one per rule.
        let mut keys: Vec<Route> = Vec::new();
        let mut routes = Vec::new();
        let mut rule_routes = Vec::with_capacity(settings.hosts.len());
        for rule in &settings.hosts {
            let route = Route::of_rule(settings, rule);
            if route == default_route {
                rule_routes.push(None);
                continue;
            }
            if !route.tls_verify {
                tracing::warn!(
                    hosts = %rule.pattern,
                    "tls_verify = false: these hosts' certificates are not verified, so anyone \
                     on the path can impersonate them"
                );
            }
            let index = match keys.iter().position(|k| *k == route) {
                Some(i) => i,
                None => {
                    keys.push(route.clone());
                    routes.push(Clients::new(settings, route, &policy, &resolver)?);
                    routes.len() - 1
                }
            };
            rule_routes.push(Some(index));
        }
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
                RobotsCache::with_options(clients.client.clone(), &settings.user_agent, options)
                    .address_policy(Arc::clone(&policy)),
            )
        } else {
            None
        };
        Ok(Self {
            clients,
            routes,
            rule_routes,
            request_routes: std::sync::Mutex::new(std::collections::HashMap::new()),
            settings: Arc::new(settings.clone()),
            policy,
            robots,
            obey_robots: settings.obey_robots,
            host_rules: settings.hosts.clone(),
            max_body: settings.max_body_size,
            max_redirects: settings.max_redirects,
            timeout: settings.download_timeout,
            soft_block_markers: ChallengeMatcher::new(&settings.soft_block_markers)?,
            store: None,
            send_validators: settings.conditional_requests,
            offline: settings.http_cache && settings.http_cache_offline,
            unreachable: Unreachable::default(),
            tap: None,
            user_agent: settings.user_agent.clone(),
            resolver,
            headers_hook: None,
        })
    }

    /// The resolver this downloader's clients look names up with.
    pub fn resolver(&self) -> &Arc<Resolver> {
        &self.resolver
    }

    /// Ask `hook` when each response's status and headers arrive whether to read its body:
    /// a reason stops the download there, as `failed:download_stopped` (see
    /// [`Extension::headers_received`](crawler_core::Extension::headers_received)).
    pub fn with_headers_hook(mut self, hook: Arc<dyn crawler_core::HeadersHook>) -> Self {
        self.headers_hook = Some(hook);
        self
    }

    /// Hand every exchange that got a response (pages, sitemaps, robots.txt, sub-requests)
    /// to `tap`, such as a WARC writer. A download waits while the tap is behind, so what
    /// waits to be archived stays bounded.
    pub fn with_tap(mut self, tap: Arc<dyn ExchangeTap>) -> Self {
        let wire = WireTap::new(tap, &self.user_agent);
        self.robots = self.robots.take().map(|r| r.with_tap(wire.clone()));
        self.tap = Some(wire);
        self
    }

    /// Keep validators (and, if the store keeps responses, whole responses) in `store`:
    /// GET requests then carry If-None-Match / If-Modified-Since from the last successful
    /// fetch (unless `conditional_requests` is off or the request sets them itself), 200s
    /// are recorded, and a 304 hands the spider the cached page when there is one.
    pub fn with_store(mut self, store: Arc<dyn ConditionalStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Share robots.txt files with the other workers of a fleet through `share` (see
    /// [`RobotsShare`](crawler_core::RobotsShare)): an origin's file is fetched once per
    /// `robots_ttl` for the whole fleet. Nothing changes when robots.txt is not obeyed.
    pub fn with_robots_share(mut self, share: Arc<dyn crawler_core::RobotsShare>) -> Self {
        self.robots = self.robots.take().map(|r| r.share_with(share));
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
        fetch_once_with(self, req, self.max_redirects).await.0
    }

    /// The client `req` goes out through: the one that may reach private space, or (with
    /// `deny_private_addresses`) the public one for requests from public pages.
    ///
    /// A request with its own proxy (`Request::proxy`, meta `proxy`) goes through the
    /// clients of its host's route with that proxy instead, built on first use and kept
    /// (one per distinct route). Its host key, and so its politeness, stay the target's.
    ///
    /// With the client, the proxy it goes through (redacted), if any.
    fn client_for(&self, req: &Request) -> Result<(reqwest::Client, Option<Arc<str>>), Failure> {
        let base = self.clients_for(&req.url);
        let proxy = req
            .meta
            .get(crawler_core::PROXY_META)
            .and_then(|v| v.as_str())
            .filter(|p| !p.trim().is_empty());
        let pick = |clients: &Clients| {
            let client = match &clients.public {
                Some(public) if !private_ok(req) => public.clone(),
                _ => clients.client.clone(),
            };
            (client, clients.proxy_name.clone())
        };
        let Some(proxy) = proxy else {
            return Ok(pick(base));
        };
        let route = base.route.via(proxy);
        if route == base.route {
            return Ok(pick(base));
        }
        let mut by_proxy = self
            .request_routes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(clients) = by_proxy.get(&route) {
            return Ok(pick(clients));
        }
        // The password must never show in a log line or error from here on.
        crawler_core::redact::register_url_secrets(proxy);
        let clients = Clients::new(&self.settings, route.clone(), &self.policy, &self.resolver)
            .map_err(|e| {
                Failure::new(
                    FailureKind::Other,
                    crawler_core::redact::scrub(&format!("request proxy: {e}")).into_owned(),
                )
            })?;
        let client = pick(&clients);
        by_proxy.insert(route, clients);
        Ok(client)
    }

    /// The clients of `url`'s host: those of the first `[[hosts]]` rule that matches it
    /// (as the rules match hosts everywhere: `host`, or `host:port` for a non-default
    /// port), or the crawl's.
    fn clients_for(&self, url: &crawler_core::Url) -> &Clients {
        if self.routes.is_empty() {
            // The common case costs no formatted host per request.
            return &self.clients;
        }
        let host = rule_host(url);
        self.host_rules
            .iter()
            .position(|r| r.matches(&host))
            .and_then(|i| self.rule_routes.get(i).copied().flatten())
            .and_then(|i| self.routes.get(i))
            .unwrap_or(&self.clients)
    }

    /// Why `req` may not go out at all, judged before DNS (an IP literal or a metadata
    /// name the address policy refuses); names are judged by the client's resolver.
    fn refusal(&self, req: &Request) -> Option<String> {
        self.policy.refuse_url(&req.url, private_ok(req))
    }

    /// The answer to `req` in a replayed crawl (`replay_warc`): robots.txt judged from the
    /// archive, then the recorded response through the HTTP cache's replay, or
    /// `not_archived`. Nothing is sent, so the host's slot gives the delay back.
    async fn replay_archived(
        &self,
        archive: &dyn ConditionalStore,
        req: &Request,
        mut feedback: Feedback,
    ) -> Download {
        if let Some(robots) = &self.robots
            && self.obeys_robots(&req.url)
            && let Err(outcome) = self.robots_gate(robots, req, &mut feedback, false).await
        {
            return Download { outcome, feedback };
        }
        let outcome = match archive.recorded(&req.method, &req.url) {
            Ok(Some(page)) => {
                tracing::trace!(url = %req.url, "answered from the replayed WARC");
                Fetched::Response(self.replay(
                    req,
                    page,
                    BodyOrigin::Cache,
                    &http::HeaderMap::new(),
                ))
            }
            Ok(None) => Fetched::Failed(Failure::new(
                FailureKind::NotArchived,
                format!(
                    "no response to {} {} in the replayed WARC",
                    req.method, req.url
                ),
            )),
            Err(e) => Fetched::Failed(Failure::new(
                FailureKind::NotArchived,
                format!("the replayed WARC's answer is unreadable: {e}"),
            )),
        };
        Download { outcome, feedback }
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
}

/// [`HttpDownloader::fetch_once`] through any downloader, such as an [`HttpDownloader`] inside
/// its middleware stack (`crawler shell` keeps one for a whole session, so cookies and
/// default headers apply as in a crawl). Returns the outcome with the last request sent: the
/// hop a refusal or failure is about when redirects were followed.
pub async fn fetch_once_with<D: Downloader>(
    downloader: &D,
    req: &Request,
    max_redirects: usize,
) -> (Download, Request) {
    let mut req = req.clone();
    loop {
        let mut got = downloader.fetch(&req).await;
        // A Requeue that is not an unavailable robots.txt means robots.txt took the send:
        // outside a crawl no slot paces the next one, so the page goes out at once.
        if matches!(&got.outcome, Fetched::Requeue(_)) && !got.feedback.robots_unavailable {
            got = downloader.fetch(&req).await;
        }
        let Fetched::Response(response) = &got.outcome else {
            return (got, req);
        };
        if !crawler_core::REDIRECTS.contains(&response.status()) {
            return (got, req);
        }
        match crawler_core::redirect(&req, response, max_redirects) {
            Ok(next) => req = next,
            Err(failure) => {
                let got = Download {
                    outcome: Fetched::Failed(failure),
                    feedback: got.feedback,
                };
                return (got, req);
            }
        }
    }
}

impl Downloader for HttpDownloader {
    async fn gate(&self, req: &Request) -> Option<Download> {
        let robots = self.robots.as_ref()?;
        if wants_robots_sitemaps(req) || !self.obeys_robots(&req.url) || self.refusal(req).is_some()
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
        match self.robots_gate(robots, req, &mut feedback, true).await {
            Ok(()) => None,
            Err(outcome) => Some(Download { outcome, feedback }),
        }
    }

    async fn fetch(&self, req: &Request) -> Download {
        let mut feedback = Feedback::default();
        if let Some(msg) = self.refusal(req) {
            tracing::debug!(url = %req.url, "{msg}");
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
        if let Some(archive) = self.store.as_ref().filter(|s| s.replays_all()) {
            return self.replay_archived(archive.as_ref(), req, feedback).await;
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
            && let Err(outcome) = self.robots_gate(robots, req, &mut feedback, false).await
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
        feedback.cheap = req.meta.contains_key(NOT_PAGE_META);
        let started = Instant::now();
        let sent_at = SystemTime::now();
        feedback.sent_at = Some(started);
        // One deadline for the whole exchange, body included: an idle timeout alone would let
        // a server that trickles a byte a second hold a worker forever.
        let send = self.send(sent_req, max_body, &mut feedback.proxy);
        let result = match tokio::time::timeout(self.timeout, send).await {
            Ok(r) => r,
            Err(_) => Err(Failure::new(
                FailureKind::Timeout,
                format!("no complete response within {:?}", self.timeout),
            )),
        };
        feedback.latency = started.elapsed();
        let outcome = match result {
            Ok(Sent {
                url,
                status,
                headers,
                body,
                remote,
                version,
                tls_version,
                request_headers,
            }) => {
                feedback.status = Some(status);
                feedback.http_version = Some(version);
                let now = SystemTime::now();
                // A Retry-After is an instruction on whatever status carries it (a 301 or 302
                // during maintenance, a 413, a 5xx), read against the server's clock.
                feedback.retry_after = retry_after(&headers, now);
                feedback.server_clock_offset = server_clock_offset(&headers, now);
                feedback.rate_limit = parse_rate_limit(&headers, now);
                if let (Some(tap), Some(request_headers)) = (&self.tap, request_headers) {
                    // Archived outside the download's deadline and after the clock readings
                    // above: a writer that is behind delays the worker, it neither times the
                    // page out nor skews what the server's Date says.
                    tap.record(Exchange {
                        method: sent_req.method.clone(),
                        url: sent_req.url.clone(),
                        request_headers,
                        request_body: sent_req.body.clone().map(Into::into).unwrap_or_default(),
                        version,
                        status,
                        headers: headers.clone(),
                        body: body.clone(),
                        remote_ip: remote,
                        sent_at,
                        truncated: None,
                    })
                    .await;
                }
                if status != 304 && self.is_challenge(&headers, &body) {
                    feedback.soft_block = true;
                    Fetched::Failed(Failure {
                        kind: FailureKind::SoftBlock,
                        message: "challenge page instead of content".to_owned(),
                        status: Some(status),
                        bytes: body.len() as u64,
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
                        Some(page) if status == 304 && conditional.is_some() => self
                            .replay(req, page, BodyOrigin::Revalidated, &headers)
                            .with_http_version(version),
                        _ => self.attach(
                            Response::new(req.clone(), url, status, headers, body)
                                .with_remote_addr(remote)
                                .with_http_version(version)
                                .with_tls_version(tls_version),
                        ),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_build_a_client() {
        assert!(HttpDownloader::new(&Settings::default()).is_ok());
    }
}
