//! The scenario pipeline: the lab's own endpoints and a script first, then blocks, the limit's
//! verdict (and the headers it writes), overload, the route, and the rate-limit headers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use super::control::lab_endpoint;
use super::routes::route;
use super::{HTML, Shared, sleep_unless_shutdown};
use crate::ratelimit::{ClientState, Verdict, write_ratelimit, write_retry_after};
use crate::scenario::Scenario;
use crate::server::{Reply, Req};
use crate::util::put;

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

/// Decrements the in-flight count when the response is built, however the handler returns.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
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

    let _in_flight = if let Some(o) = sc.overload.filter(|o| o.applies_to(path)) {
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
