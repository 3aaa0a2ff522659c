//! From request to response: the scenario pipeline (blocks, limit, overload) and the routes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant, UNIX_EPOCH};

use tokio::sync::watch;

use crate::faults::{self, FaultKind};
use crate::ratelimit::{ClientState, Verdict, write_ratelimit, write_retry_after};
use crate::recorder::Recorder;
use crate::scenario::{Robots, Scenario};
use crate::server::{BodyKind, Reply, Req};
use crate::site::{self, Catalogue, Listing, Validators};
use crate::sitemap::Sitemaps;
use crate::util::put;

/// Largest `/blob/N`.
pub(crate) const MAX_BLOB: u64 = 1 << 30;

const HTML: &str = "text/html; charset=utf-8";

/// A scenario with its live state.
pub(crate) struct Live {
    pub scenario: Scenario,
    clients: Mutex<HashMap<String, ClientState>>,
    in_flight: AtomicUsize,
}

impl Live {
    pub(crate) fn new(scenario: Scenario) -> Self {
        Self {
            scenario,
            clients: Mutex::new(HashMap::new()),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn clients(&self) -> MutexGuard<'_, HashMap<String, ClientState>> {
        self.clients.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn reset(&self) {
        self.clients().clear();
    }
}

/// Everything the connections share.
pub(crate) struct Shared {
    pub start: Instant,
    /// `http://127.0.0.1:PORT/`
    pub base: String,
    pub catalogue: Catalogue,
    pub sitemaps: Sitemaps,
    pub recorder: Recorder,
    pub default: Live,
    /// Scenarios for client keys, checked first.
    pub by_client: Vec<(String, Live)>,
    /// Scenarios for path prefixes, longest prefix first.
    pub by_prefix: Vec<(String, Live)>,
    /// A test's own answers, consulted before everything else.
    pub script: Option<crate::script::Script>,
}

impl Shared {
    pub(crate) fn live_for(&self, client: Option<&str>, path: &str) -> &Live {
        if let Some((_, live)) =
            client.and_then(|client| self.by_client.iter().find(|(k, _)| k == client))
        {
            return live;
        }
        self.by_prefix
            .iter()
            .find(|(p, _)| path.starts_with(p.as_str()))
            .map_or(&self.default, |(_, live)| live)
    }

    pub(crate) fn all_live(&self) -> impl Iterator<Item = &Live> {
        std::iter::once(&self.default)
            .chain(self.by_client.iter().map(|(_, l)| l))
            .chain(self.by_prefix.iter().map(|(_, l)| l))
    }

    /// The fault a path gets from the scenario that governs it for an unnamed client.
    pub(crate) fn expected_fault(&self, path: &str) -> Option<FaultKind> {
        let path = path
            .strip_prefix(self.base.trim_end_matches('/'))
            .unwrap_or(path);
        let path = path.split_once('?').map_or(path, |(p, _)| p);
        if let Some(name) = path.strip_prefix("/fault/") {
            let name = name.split('/').next().unwrap_or(name);
            return FaultKind::from_name(name);
        }
        let live = self.live_for(None, path);
        let id = faults::book_id(path)?;
        if !self.catalogue.contains(id) {
            return None;
        }
        faults::chaos_fault(self.catalogue.seed, live.scenario.chaos?, path)
    }
}

/// Decrements the in-flight count when the response is built, however the handler returns.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn sleep_unless_shutdown(d: Duration, shutdown: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(d) => {}
        _ = shutdown.changed() => {}
    }
}

pub(crate) async fn handle(
    shared: &Shared,
    req: &Req<'_>,
    reply: &mut Reply,
    shutdown: &mut watch::Receiver<bool>,
) {
    let path = req.path();
    if let Some(rest) = path.strip_prefix("/_lab/") {
        reply.record = false;
        lab_endpoint(shared, rest, req, reply);
        return;
    }
    let now = shared.start.elapsed();
    if let Some(script) = &shared.script {
        let asked = crate::script::ScriptRequest {
            method: req.method,
            path,
            target: req.target,
            client: req.client,
            since_start: now,
        };
        if let Some(answer) = script.answer(&asked) {
            reply.status = answer.status;
            for (k, v) in &answer.headers {
                reply.header(k, v);
            }
            reply.body = answer.body;
            reply.date = answer.date.map(httpdate::fmt_http_date);
            reply.announce(answer.announce.map(|d| d.as_secs_f64()));
            return;
        }
    }
    let live = shared.live_for(Some(req.client), path);
    let sc = &live.scenario;

    let mut verdict: Option<Verdict> = None;
    if sc.needs_client_state() {
        let mut clients = live.clients();
        let st = clients
            .entry(req.client.to_owned())
            .or_insert_with(|| ClientState::new(sc.limit, now));
        let (soft, hard) = st.arrive(now, sc.soft_block, sc.hard_block);
        if hard {
            let left = st.hard_block_left(now);
            drop(clients);
            reply.status = 403;
            reply.header("Content-Type", HTML);
            reply.header("Retry-After", left.as_secs().max(1));
            reply.announce(Some(left.as_secs().max(1) as f64));
            reply.body.extend_from_slice(b"<!DOCTYPE html><html><head><title>403 Forbidden</title></head><body><h1>Access denied</h1><p>Your IP has been blocked for sending too many requests.</p></body></html>\n");
            return;
        }
        if soft {
            drop(clients);
            challenge(reply);
            return;
        }
        if let Some(limit) = sc.limit {
            let held = sc.enforce_retry_after && now < st.hold_until;
            let v = if held {
                let mut v = st.peek(limit, now);
                v.allowed = false;
                v.retry_in = v.retry_in.max((st.hold_until - now).as_secs_f64());
                v
            } else {
                st.admit(limit, now)
            };
            if !v.allowed {
                let mut wait = write_retry_after(&sc.retry_after, v.retry_in, &mut reply.headers);
                if let Some(d) = sc.dialect {
                    let w = write_ratelimit(d, &v, &mut reply.headers);
                    wait = max_opt(wait, w);
                }
                if let Some(w) = wait.filter(|_| sc.enforce_retry_after) {
                    st.hold_until = st.hold_until.max(now + Duration::from_secs_f64(w));
                }
                drop(clients);
                reply.announce(wait);
                reply.status = sc.refuse_status;
                reply.header("Content-Type", HTML);
                put!(
                    &mut reply.body,
                    "<!DOCTYPE html><html><head><title>{} Too Many Requests</title></head><body><h1>Too Many Requests</h1><p>Slow down.</p></body></html>\n",
                    sc.refuse_status
                );
                return;
            }
            verdict = Some(v);
        }
    }
    // nginx's delayed mode: the request was accepted (and counted) on arrival, and is
    // served once its share of the excess has drained.
    if let Some(v) = verdict.filter(|v| !v.delay.is_zero()) {
        sleep_unless_shutdown(v.delay, shutdown).await;
    }

    let _in_flight = if let Some(o) = sc.overload {
        let n = live.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        let guard = InFlight(&live.in_flight);
        if n > o.capacity {
            reply.status = 503;
            let wait = write_retry_after(&sc.retry_after, 1.0, &mut reply.headers);
            reply.announce(wait);
            reply.header("Content-Type", HTML);
            reply.body.extend_from_slice(b"<!DOCTYPE html><html><head><title>503 Service Unavailable</title></head><body><h1>Service Unavailable</h1><p>The server is overloaded.</p></body></html>\n");
            return;
        }
        let latency = o.base + o.per_request * (n as u32 - 1);
        sleep_unless_shutdown(latency, shutdown).await;
        Some(guard)
    } else {
        None
    };

    route(shared, sc, req, reply, shutdown).await;

    if let (Some(d), Some(v)) = (sc.dialect, verdict) {
        let wait = write_ratelimit(d, &v, &mut reply.headers);
        reply.announce(wait);
    }
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn challenge(reply: &mut Reply) {
    reply.status = 200;
    reply.challenge = true;
    reply.header("Content-Type", HTML);
    reply.header("Cache-Control", "private, no-store");
    reply.header("cf-mitigated", "challenge");
    reply.body.extend_from_slice(b"<!DOCTYPE html>\n<html lang=\"en-US\">\n<head>\n<title>Just a moment...</title>\n<meta http-equiv=\"refresh\" content=\"30\">\n<meta name=\"robots\" content=\"noindex,nofollow\">\n</head>\n<body>\n<div class=\"main-wrapper\" role=\"main\">\n<h1>Checking if the site connection is secure</h1>\n<div id=\"cf-challenge-running\" class=\"cf-challenge\">\n<p>Our systems have detected unusual traffic from your computer network. Please wait while we verify that you are not a robot.</p>\n<noscript>Enable JavaScript and cookies to continue</noscript>\n</div>\n<form id=\"challenge-form\" action=\"/cdn-cgi/challenge-platform/h/b/orchestrate/jsch/v1\" method=\"POST\"></form>\n</div>\n</body>\n</html>\n");
}

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
fn validate(req: &Req<'_>, v: Validators, reply: &mut Reply) -> bool {
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
        reply.header("Content-Type", HTML);
        true
    }
}

fn not_found(reply: &mut Reply) {
    reply.status = 404;
    reply.header("Content-Type", HTML);
    site::render_not_found(&mut reply.body);
}

async fn route(
    shared: &Shared,
    sc: &Scenario,
    req: &Req<'_>,
    reply: &mut Reply,
    shutdown: &mut watch::Receiver<bool>,
) {
    let path = req.path();
    // The members' area answers its own methods (the login form is POSTed).
    if path == "/login" {
        return crate::account::login(shared, req, reply);
    }
    if path == "/account" || path.starts_with("/account/") {
        return crate::account::account(shared, req, reply);
    }
    if req.method != "GET" && req.method != "HEAD" {
        reply.status = 405;
        reply.header("Allow", "GET, HEAD");
        return;
    }
    let cat = &shared.catalogue;
    if path == "/" || path == "/index.html" {
        if validate(req, cat.site_validators(1), reply) {
            cat.render_index(&mut reply.body);
        }
    } else if path == "/robots.txt" {
        robots(shared, sc, reply, shutdown).await;
    } else if path == "/sitemap.xml" {
        reply.header("Content-Type", "application/xml");
        reply.kind = BodyKind::Shared(shared.sitemaps.index(cat, &shared.base, sc.bad_sitemaps));
    } else if let Some(k) = path
        .strip_prefix("/sitemaps/books-")
        .and_then(|r| r.strip_suffix(".xml.gz"))
        .and_then(|k| k.parse().ok())
    {
        match shared.sitemaps.file(cat, &shared.base, k) {
            Some(gz) => {
                reply.header("Content-Type", "application/gzip");
                reply.kind = BodyKind::Shared(gz);
            }
            None => not_found(reply),
        }
    } else if let Some(id) = faults::book_id(path).filter(|id| cat.contains(*id)) {
        let fault = sc
            .chaos
            .and_then(|rate| faults::chaos_fault(cat.seed, rate, path));
        match fault {
            Some(kind) => page_fault(shared, kind, id, reply).await,
            None => {
                let rev = cat.revision(id);
                if validate(req, cat.book_validators(id, rev), reply) {
                    cat.render_book(id, rev, &mut reply.body, b"", b"");
                }
            }
        }
    } else if let Some(page) = listing_of(path) {
        match page.and_then(|(l, n)| cat.listing_page(l, n)) {
            Some(page) => {
                if validate(req, page.validators, reply) {
                    cat.render_listing(&page, &mut reply.body);
                }
            }
            None => not_found(reply),
        }
    } else if path.starts_with("/private/") {
        if validate(req, cat.site_validators(2), reply) {
            cat.render_private(&mut reply.body);
        }
    } else if path == "/api/books" {
        crate::api::books(shared, req, reply);
    } else if let Some(n) = path.strip_prefix("/blob/") {
        blob(n, req, reply);
    } else if let Some(rest) = path.strip_prefix("/fault/") {
        fault_endpoint(shared, rest, req, reply).await;
    } else {
        not_found(reply);
    }
}

/// `Some(None)` for a listing path with a bad page number.
fn listing_of(path: &str) -> Option<Option<(Listing, u32)>> {
    let page = |rest: &str| -> Option<u32> {
        rest.strip_prefix("page-")?
            .strip_suffix(".html")?
            .parse()
            .ok()
    };
    if let Some(rest) = path.strip_prefix("/catalogue/") {
        if rest.starts_with("page-") {
            return Some(page(rest).map(|n| (Listing::Catalogue, n)));
        }
        return None;
    }
    let rest = path.strip_prefix("/category/")?;
    let (slug, rest) = rest.split_once('/')?;
    Some(
        Catalogue::category_index(slug).and_then(|c| page(rest).map(|n| (Listing::Category(c), n))),
    )
}

async fn robots(
    shared: &Shared,
    sc: &Scenario,
    reply: &mut Reply,
    shutdown: &mut watch::Receiver<bool>,
) {
    match &sc.robots {
        Robots::Status(status) => {
            reply.status = *status;
            reply.header("Content-Type", HTML);
            put!(
                &mut reply.body,
                "<!DOCTYPE html><html><body><h1>{status}</h1></body></html>\n"
            );
            return;
        }
        Robots::Timeout(d) => sleep_unless_shutdown(*d, shutdown).await,
        _ => {}
    }
    reply.header("Content-Type", "text/plain; charset=utf-8");
    crate::robots::render(&sc.robots, &shared.base, &mut reply.body);
}

fn blob(n: &str, req: &Req<'_>, reply: &mut Reply) {
    let Ok(len) = n.parse::<u64>() else {
        return not_found(reply);
    };
    if len > MAX_BLOB {
        reply.status = 400;
        reply.header("Content-Type", "text/plain; charset=utf-8");
        put!(
            &mut reply.body,
            "blob size {len} is over the lab's cap of {MAX_BLOB} bytes\n"
        );
        return;
    }
    let content_type = if req.query("type") == Some("html") {
        HTML
    } else {
        "application/octet-stream"
    };
    reply.header("Content-Type", content_type);
    reply.kind = BodyKind::Blob {
        len,
        chunked: req.query("chunked") == Some("1"),
    };
}

async fn fault_endpoint(shared: &Shared, rest: &str, req: &Req<'_>, reply: &mut Reply) {
    let cat = &shared.catalogue;
    let base = &shared.base;
    // The page faults show book 1 unless `?book=ID` names another.
    let id = req
        .query("book")
        .and_then(|b| b.parse().ok())
        .filter(|id| cat.contains(*id))
        .unwrap_or(1);
    if let Some(n) = rest.strip_prefix("redirect-chain/") {
        let Ok(n) = n.parse::<u32>() else {
            return not_found(reply);
        };
        reply.fault = Some(FaultKind::RedirectChain);
        if n == 0 {
            reply.header("Content-Type", HTML);
            reply.body.extend_from_slice(b"<!DOCTYPE html><html><head><title>End of the chain</title></head><body><h1>End of the redirect chain</h1></body></html>\n");
        } else {
            redirect(
                reply,
                &format!(
                    "/fault/redirect-chain/{}{}",
                    (n - 1).min(faults::MAX_CHAIN),
                    query_suffix(req)
                ),
            );
        }
        return;
    }
    if rest == "redirect-loop/b" {
        reply.fault = Some(FaultKind::RedirectLoop);
        redirect(reply, &format!("/fault/redirect-loop{}", query_suffix(req)));
        return;
    }
    let Some(kind) = FaultKind::from_name(rest) else {
        return not_found(reply);
    };
    reply.fault = Some(kind);
    match kind {
        FaultKind::BrokenSitemap => {
            reply.header("Content-Type", "application/xml");
            faults::broken_sitemap(base, &mut reply.body);
        }
        FaultKind::SitemapEntityExpansion => {
            reply.header("Content-Type", "application/xml");
            faults::laughs_sitemap(base, &mut reply.body);
        }
        FaultKind::HugeSitemap => {
            reply.header("Content-Type", "application/gzip");
            reply.kind = BodyKind::Shared(shared.sitemaps.huge(cat, base));
        }
        FaultKind::SitemapGzipBomb => {
            reply.header("Content-Type", "application/gzip");
            reply.kind = BodyKind::Shared(bomb(faults::sitemap_bomb).await);
        }
        page => page_fault(shared, page, id, reply).await,
    }
}

fn query_suffix(req: &Req<'_>) -> String {
    req.target
        .split_once('?')
        .map_or(String::new(), |(_, q)| format!("?{q}"))
}

fn redirect(reply: &mut Reply, location: &str) {
    reply.status = 302;
    reply.header("Location", location);
    reply.header("Content-Type", HTML);
    put!(
        &mut reply.body,
        "<!DOCTYPE html><html><body><a href=\"{location}\">moved</a></body></html>\n"
    );
}

/// Computes a gzip bomb off the async threads the first time (it takes a moment).
async fn bomb(make: fn() -> std::sync::Arc<[u8]>) -> std::sync::Arc<[u8]> {
    match tokio::task::spawn_blocking(make).await {
        Ok(b) => b,
        Err(_) => make(),
    }
}

/// Serves book `id`'s page with a fault.
async fn page_fault(shared: &Shared, kind: FaultKind, id: u32, reply: &mut Reply) {
    let cat = &shared.catalogue;
    let rev = cat.revision(id);
    reply.fault = Some(kind);
    let from = format!("?from={id}");
    match kind {
        FaultKind::RedirectLoop => {
            return redirect(reply, &format!("/fault/redirect-loop/b{from}"));
        }
        FaultKind::RedirectChain => {
            return redirect(
                reply,
                &format!("/fault/redirect-chain/{}{from}", faults::CHAIN_HOPS),
            );
        }
        FaultKind::RedirectToNonHttp => {
            let host = shared.base.trim_start_matches("http://");
            return redirect(reply, &format!("ftp://{host}pub/book-{id}.html"));
        }
        FaultKind::ServerError => {
            reply.status = 500;
            reply.header("Content-Type", HTML);
            reply.body.extend_from_slice(b"<!DOCTYPE html><html><head><title>500 Internal Server Error</title></head><body><h1>Internal Server Error</h1></body></html>\n");
            return;
        }
        FaultKind::GzipBomb => {
            reply.header("Content-Type", HTML);
            reply.header("Content-Encoding", "gzip");
            reply.kind = BodyKind::Shared(bomb(faults::html_bomb).await);
            return;
        }
        FaultKind::EndlessBody => {
            reply.header("Content-Type", HTML);
            reply.kind = BodyKind::Endless;
            return;
        }
        _ => {}
    }
    match kind {
        FaultKind::Windows1252 => {
            reply.header("Content-Type", "text/html; charset=windows-1252");
            cat.render_book(
                id,
                rev,
                &mut reply.body,
                b"<meta charset=\"windows-1252\">",
                b"",
            );
            faults::transcode_pound(&mut reply.body, b"\xa3");
            insert_extra(&mut reply.body, faults::WINDOWS_1252_EXTRA);
        }
        FaultKind::ShiftJis => {
            reply.header("Content-Type", "text/html");
            cat.render_book(
                id,
                rev,
                &mut reply.body,
                b"<meta charset=\"Shift_JIS\">",
                b"",
            );
            faults::transcode_pound(&mut reply.body, b"\x81\x92");
            insert_extra(&mut reply.body, faults::SHIFT_JIS_EXTRA);
        }
        FaultKind::InvalidUtf8 => {
            reply.header("Content-Type", HTML);
            cat.render_book(id, rev, &mut reply.body, b"", faults::INVALID_UTF8_EXTRA);
        }
        FaultKind::WrongContentType => {
            reply.header("Content-Type", "image/jpeg");
            cat.render_book(id, rev, &mut reply.body, b"", b"");
        }
        _ => {
            reply.header("Content-Type", HTML);
            cat.render_book(id, rev, &mut reply.body, b"", b"");
            reply.kind = match kind {
                FaultKind::ResetMidBody => BodyKind::ResetHalfway,
                FaultKind::SlowBody => BodyKind::Trickle,
                _ => BodyKind::Overlong,
            };
        }
    }
}

/// Puts charset-specific bytes at the end of the description paragraph.
fn insert_extra(body: &mut Vec<u8>, extra: &[u8]) {
    let marker = b"</p>\n</div>\n<table class=\"info\">";
    let at = site::find(body, marker).unwrap_or(body.len());
    body.splice(at..at, extra.iter().copied());
}

fn lab_endpoint(shared: &Shared, rest: &str, req: &Req<'_>, reply: &mut Reply) {
    reply.header("Content-Type", "application/json");
    reply.header("Cache-Control", "no-store");
    match rest {
        "report" => reply
            .body
            .extend_from_slice(shared.recorder.report().to_json().as_bytes()),
        "reset" => {
            shared.recorder.clear();
            shared.all_live().for_each(Live::reset);
            reply.body.extend_from_slice(b"{\"reset\":true}\n");
        }
        "faults" => {
            let map: std::collections::BTreeMap<String, FaultKind> = (1..=shared.catalogue.books)
                .filter_map(|id| {
                    let p = format!("/catalogue/book-{id}.html");
                    shared.expected_fault(&p).map(|k| (p, k))
                })
                .collect();
            reply.body = serde_json::to_vec_pretty(&map).unwrap_or_default();
        }
        "mutate" => {
            let fraction = req
                .query("fraction")
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.05);
            let changed = shared.catalogue.mutate(fraction);
            let body = serde_json::json!({
                "version": shared.catalogue.version(),
                "changed": changed,
            });
            reply.body = serde_json::to_vec(&body).unwrap_or_default();
        }
        _ => {
            reply.status = 404;
            reply.body.extend_from_slice(b"{\"error\":\"unknown lab endpoint; try /_lab/report, /_lab/reset, /_lab/faults, /_lab/mutate?fraction=0.05\"}\n");
        }
    }
}
