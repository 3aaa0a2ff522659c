//! The in-memory frontier: de-duplication, filters, per-host queues and slots, and the ready
//! heap that says which host may send next.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

use crawler_core::{HostKeyMode, HostStats};

use crawler_core::{
    Admission, Feedback, FilterReason, Lease, Next, Request, Scheduler, Settings, Url,
};
use tokio::time::Instant;

use crate::error::Error;
use crate::fingerprint::fingerprint;
use crate::resolve::IpKeys;
use crate::store::{Entry, MemoryStore, QueueStore};
use crate::throttle::{Throttle, Verdict, throttle_for};

/// The slot key of a URL: the host, plus the port when it is not the scheme's default, since
/// two ports on one address are often two servers with separate limits.
/// The registrable domain of a URL's host (`example.co.uk` for `a.b.example.co.uk`), from the
/// public suffix list; IP addresses and names without one keep their host key.
pub fn domain_key(url: &Url) -> String {
    match url.host() {
        Some(url::Host::Domain(name)) => psl::domain_str(name)
            .map(str::to_owned)
            .unwrap_or_else(|| host_key(url)),
        _ => host_key(url),
    }
}

/// The default slot key of a URL: the host, plus the port when it is not the scheme's
/// default.
pub fn host_key(url: &Url) -> String {
    let host = url.host_str().unwrap_or("");
    match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    }
}

/// Builds a throttle for a newly seen host.
pub type ThrottleFactory = Box<dyn Fn(&str, Instant) -> Box<dyn Throttle> + Send>;

/// What the frontier filters and how hosts are paced.
pub struct FrontierConfig {
    /// Deepest depth admitted; 0 = unlimited.
    pub depth_limit: u32,
    /// Longest URL admitted.
    pub max_url_length: usize,
    /// Domains admitted (with subdomains); empty = all.
    pub allowed_domains: Vec<String>,
    /// Makes each host's throttle.
    pub throttle: ThrottleFactory,
    /// What one slot covers: a host, a registrable domain, or an IP address.
    pub key_mode: HostKeyMode,
    /// The DNS cache behind `HostKeyMode::Ip` (made on first use by `from_settings`).
    pub ip_keys: std::sync::Arc<IpKeys>,
}

impl FrontierConfig {
    /// The slot key of a URL under this configuration.
    pub fn key(&self, url: &Url) -> String {
        match self.key_mode {
            HostKeyMode::Host => host_key(url),
            HostKeyMode::Domain => domain_key(url),
            HostKeyMode::Ip => self.ip_keys.key(url),
        }
    }

    /// Filters and fixed per-host pacing taken from the crawl settings.
    pub fn from_settings(settings: &Settings, allowed_domains: Vec<String>) -> Self {
        let pacing = settings.clone();
        Self {
            depth_limit: settings.depth_limit,
            max_url_length: settings.max_url_length,
            allowed_domains: normalise_domains(allowed_domains),
            key_mode: settings.host_key,
            ip_keys: std::sync::Arc::default(),
            // [[hosts]] rules (rate, burst, concurrency, delay) apply from a host's first
            // request; hosts without a rule share the crawl's settings.
            throttle: Box::new(move |host, now| {
                if pacing.hosts.is_empty() {
                    throttle_for(&pacing, host, now)
                } else {
                    throttle_for(&pacing.for_host(host), host, now)
                }
            }),
        }
    }
}

fn normalise_domains(domains: Vec<String>) -> Vec<String> {
    domains
        .into_iter()
        .map(|d| {
            let d = d.trim().trim_start_matches('.').to_ascii_lowercase();
            // A port in an allowed domain would never match a host name; keep the host part.
            match d.rsplit_once(':') {
                Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && !h.contains(':') => {
                    h.to_owned()
                }
                _ => d,
            }
        })
        .filter(|d| !d.is_empty())
        .collect()
}

/// Whether `url`'s host is one of `domains` or a subdomain of one.
pub fn is_allowed_domain(url: &Url, domains: &[String]) -> bool {
    if domains.is_empty() {
        return true;
    }
    let Some(host) = url.host_str() else {
        return false;
    };
    domains
        .iter()
        .any(|d| crawler_core::matching::host_in_domain(host, d))
}

/// How long a host stays idle before its slot may be dropped. Short, because only slots
/// with nothing learned are dropped, and a fresh slot is at least as careful.
const PRUNE_AFTER: Duration = Duration::from_secs(5);

/// Dropped hosts whose figures are kept for the stats (the busiest ones).
const RETIRED_KEPT: usize = 1_000;

/// Busiest first, then by name (a stable order for reports).
fn sort_busiest(hosts: &mut [HostStats]) {
    hosts.sort_by(|a, b| {
        b.requests
            .cmp(&a.requests)
            .then_with(|| a.host.cmp(&b.host))
    });
}

struct Host {
    key: String,
    in_flight: usize,
    throttle: Box<dyn Throttle>,
    /// Whether an entry for this host sits in the ready heap (at most one at a time).
    scheduled: bool,
    /// Why the host is skipped for this run, once it is.
    skipped: Option<String>,
    figures: Figures,
}

/// Running per-host figures for [`HostStats`].
#[derive(Default)]
struct Figures {
    requests: u64,
    status: std::collections::BTreeMap<u16, u64>,
    latency_sum: f64,
    latency_n: u64,
    /// Latency histogram: bucket i counts latencies in [1.25^(i-1), 1.25^i) ms.
    buckets: Vec<u32>,
}

impl Figures {
    fn record(&mut self, fb: &Feedback) {
        if let Some(s) = fb.status {
            *self.status.entry(s).or_default() += 1;
        }
        if fb.sent {
            let secs = fb.latency.as_secs_f64();
            self.latency_sum += secs;
            self.latency_n += 1;
            let ms = (secs * 1000.0).max(1.0);
            let i = (ms.ln() / 1.25f64.ln()).ceil().clamp(0.0, 79.0) as usize;
            if self.buckets.len() <= i {
                self.buckets.resize(i + 1, 0);
            }
            if let Some(b) = self.buckets.get_mut(i) {
                *b += 1;
            }
        }
    }

    fn p95(&self) -> f64 {
        let total: u64 = self.buckets.iter().map(|&b| u64::from(b)).sum();
        let mut seen = 0u64;
        for (i, &b) in self.buckets.iter().enumerate() {
            seen += u64::from(b);
            if seen * 100 >= total * 95 && total > 0 {
                return 1.25f64.powi(i as i32) / 1000.0;
            }
        }
        0.0
    }
}

/// The [`Scheduler`]: filters and de-duplication, per-host slots, and the ready heap, over a
/// [`QueueStore`] that holds the queues (in memory by default).
pub struct Frontier<S: QueueStore = MemoryStore> {
    config: FrontierConfig,
    store: S,
    /// Live host slots; an idle host with nothing learned is dropped (see
    /// [`Frontier::prune_idle`]), so a broad crawl keeps only the hosts it is working on.
    hosts: slab::Slab<Host>,
    host_ids: HashMap<String, usize>,
    /// Hosts that went idle (nothing queued, nothing in flight), oldest first, with when.
    idle: VecDeque<(Instant, usize)>,
    /// Figures of dropped hosts, the busiest [`RETIRED_KEPT`] of them, for the final stats.
    retired: Vec<HostStats>,
    /// (ready at, tie-breaker, host index): the next host allowed to send is on top.
    ready: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    /// Store lease id to host index.
    leases: HashMap<u64, usize>,
    seq: u64,
    error: Option<Error>,
    /// Politeness state kept by an earlier run, applied when a host's slot is created.
    restored: HashMap<String, serde_json::Value>,
    /// Retries waiting for their time: (not before, tie-breaker, request).
    delayed: BinaryHeap<Reverse<(Instant, u64, DelayedRequest)>>,
    /// Requests of skipped hosts, waiting for the engine to count them.
    skipped: Vec<(Request, String)>,
}

/// A request in the retry heap; ordered by the heap's other fields only.
struct DelayedRequest(Request, Lease);

impl PartialEq for DelayedRequest {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for DelayedRequest {}
impl PartialOrd for DelayedRequest {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for DelayedRequest {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

impl Frontier<MemoryStore> {
    /// An empty in-memory frontier.
    pub fn new(config: FrontierConfig) -> Self {
        Self::with_store(config, MemoryStore::new())
    }
}

impl<S: QueueStore> Frontier<S> {
    /// A frontier over `store`, picking up any requests it already holds (a resumed crawl).
    pub fn with_store(config: FrontierConfig, store: S) -> Self {
        let seq = store.next_seq();
        let mut f = Self {
            config,
            store,
            hosts: slab::Slab::new(),
            host_ids: HashMap::new(),
            idle: VecDeque::new(),
            retired: Vec::new(),
            ready: BinaryHeap::new(),
            leases: HashMap::new(),
            seq,
            error: None,
            delayed: BinaryHeap::new(),
            skipped: Vec::new(),
            restored: HashMap::new(),
        };
        f.restored = f.store.host_states().into_iter().collect();
        let now = Instant::now();
        for host in f.store.hosts() {
            // Restored slots have no URL at hand: their key stands for the host.
            let id = f.host_id(host.clone(), &host, now);
            f.reschedule(id, now);
        }
        f
    }

    /// The queue store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// Hosts with their queued and in-flight counts.
    pub fn hosts(&self) -> impl Iterator<Item = (&str, usize, usize)> {
        self.hosts
            .iter()
            .map(|(_, h)| (h.key.as_str(), self.store.host_len(&h.key), h.in_flight))
    }

    /// The slot key of the host a request leased by [`Scheduler::next`] belongs to, while
    /// its lease is open.
    pub fn lease_host(&self, lease: Lease) -> Option<&str> {
        let id = self.leases.get(&lease.0)?;
        self.hosts.get(*id).map(|h| h.key.as_str())
    }

    /// Put a request handed out by [`Scheduler::next`] but never sent back in its host's
    /// queue at once and close its lease (the store applies both together), then flush the
    /// store: for a request given back while the crawl stops, when no later `next` would
    /// release a delayed retry. [`Scheduler::complete`] must have been called for it.
    pub fn requeue_now(&mut self, lease: Lease, request: Request, now: Instant) {
        self.push(request, now);
        self.acknowledge(lease);
        if let Err(e) = self.store.send_buffered() {
            self.failed(e);
        }
    }

    /// Give every host the store has work for a place in the ready heap, including hosts
    /// whose work another process queued in a shared store (see
    /// [`FleetFrontier`](crate::FleetFrontier)). Hosts skipped for the run stay skipped.
    pub fn refresh_hosts(&mut self, now: Instant) {
        for host in self.store.hosts() {
            let id = self.host_id(host.clone(), &host, now);
            if self.hosts.get(id).is_some_and(|h| h.skipped.is_none()) {
                self.reschedule(id, now);
            }
        }
    }

    fn failed(&mut self, e: Error) {
        tracing::error!("frontier store failed: {e}");
        self.error.get_or_insert(e);
    }

    fn filter(&self, req: &Request) -> Option<FilterReason> {
        if self.config.depth_limit > 0 && req.depth > self.config.depth_limit {
            return Some(FilterReason::Depth);
        }
        if req.url.as_str().len() > self.config.max_url_length {
            return Some(FilterReason::UrlTooLong);
        }
        if !is_allowed_domain(&req.url, &self.config.allowed_domains) {
            return Some(FilterReason::Offsite);
        }
        None
    }

    /// The slot for `key`, made on first use. `[[hosts]]` rules are matched against the
    /// host of the URL that opens the slot (`url_host`), not the slot key: with
    /// `host_key = "domain"` a rule for `*.example.com` still finds `a.example.com`.
    fn host_id(&mut self, key: String, url_host: &str, now: Instant) -> usize {
        if let Some(&id) = self.host_ids.get(&key) {
            return id;
        }
        let mut throttle = (self.config.throttle)(url_host, now);
        if let Some(state) = self.restored.remove(&key) {
            throttle.restore(&state, now);
        }
        let id = self.hosts.insert(Host {
            key: key.clone(),
            in_flight: 0,
            throttle,
            scheduled: false,
            skipped: None,
            figures: Figures::default(),
        });
        self.host_ids.insert(key, id);
        id
    }

    /// Drop the slots of hosts idle for [`PRUNE_AFTER`] whose throttle has nothing worth
    /// keeping (see [`Throttle::forgettable`]): a host seen again later gets a fresh slot,
    /// which is as careful as the dropped one. Their figures join [`Frontier::retired`].
    fn prune_idle(&mut self, now: Instant) {
        while let Some(&(at, id)) = self.idle.front() {
            if now.saturating_duration_since(at) < PRUNE_AFTER {
                break;
            }
            self.idle.pop_front();
            let Some(host) = self.hosts.get(id) else {
                continue;
            };
            let idle = host.in_flight == 0
                && !host.scheduled
                && host.skipped.is_none()
                && self.store.host_len(&host.key) == 0
                && host.throttle.forgettable(now);
            if !idle {
                continue;
            }
            let host = self.hosts.remove(id);
            self.host_ids.remove(&host.key);
            let stats = self.stats_of(&host);
            self.retired.push(stats);
            if self.retired.len() >= 2 * RETIRED_KEPT {
                sort_busiest(&mut self.retired);
                self.retired.truncate(RETIRED_KEPT);
            }
        }
    }

    fn stats_of(&self, h: &Host) -> HostStats {
        let (holds, held) = h.throttle.holds();
        let f = &h.figures;
        HostStats {
            host: h.key.clone(),
            requests: f.requests,
            status: f.status.clone(),
            latency_mean: if f.latency_n > 0 {
                f.latency_sum / f.latency_n as f64
            } else {
                0.0
            },
            latency_p95: f.p95(),
            rate: Some(h.throttle.rate()),
            holds,
            hold_secs: held.as_secs_f64(),
            queued: self.store.host_len(&h.key),
            skipped: h.skipped.clone(),
        }
    }

    /// Queue a request for its host, or set it aside if the host is skipped.
    fn push(&mut self, request: Request, now: Instant) {
        let key = self.config.key(&request.url);
        let id = self.host_id(key, &host_key(&request.url), now);
        if let Some(why) = self.hosts.get(id).and_then(|h| h.skipped.clone()) {
            self.skipped.push((request, why));
            return;
        }
        self.seq += 1;
        let entry = Entry {
            priority: request.priority,
            seq: self.seq,
            request,
        };
        let key = self
            .hosts
            .get(id)
            .map(|h| h.key.clone())
            .unwrap_or_default();
        if let Err(e) = self.store.push(&key, entry) {
            self.failed(e);
        }
        self.reschedule(id, now);
    }

    /// Stop crawling a host: everything it has queued is set aside with the reason.
    fn skip_host(&mut self, id: usize, why: String) {
        let Some(host) = self.hosts.get_mut(id) else {
            return;
        };
        host.skipped = Some(why.clone());
        let key = host.key.clone();
        // Retries waiting for their time go too: they would only wait to be skipped.
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut self.delayed)
            .into_iter()
            .partition(|Reverse((_, _, DelayedRequest(r, _)))| self.config.key(&r.url) == key);
        self.delayed = others.into_iter().collect();
        for Reverse((_, _, DelayedRequest(r, lease))) in mine {
            self.skipped.push((r, why.clone()));
            if let Err(e) = self.store.ack(lease.0) {
                self.failed(e);
            }
        }
        loop {
            match self.store.lease(&key) {
                Ok(Some((lease, req))) => {
                    self.skipped.push((req, why.clone()));
                    if let Err(e) = self.store.ack(lease) {
                        self.failed(e);
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    self.failed(e);
                    break;
                }
            }
        }
    }

    /// Move retries whose time has come into their host queues.
    fn release_delayed(&mut self, now: Instant) {
        while self
            .delayed
            .peek()
            .is_some_and(|Reverse((at, _, _))| *at <= now)
        {
            if let Some(Reverse((_, _, DelayedRequest(req, lease)))) = self.delayed.pop() {
                self.push(req, now);
                self.acknowledge(lease);
            }
        }
    }

    /// Put a host in the ready heap if it has work and room for another request.
    fn reschedule(&mut self, id: usize, now: Instant) {
        let Some(host) = self.hosts.get_mut(id) else {
            return;
        };
        if host.scheduled
            || host.in_flight >= host.throttle.concurrency()
            || self.store.host_len(&host.key) == 0
        {
            return;
        }
        host.scheduled = true;
        self.seq += 1;
        self.ready
            .push(Reverse((host.throttle.ready_at().max(now), self.seq, id)));
    }
}

impl<S: QueueStore> Scheduler for Frontier<S> {
    fn enqueue(&mut self, request: Request, now: Instant) -> Admission {
        if let Some(reason) = self.filter(&request) {
            return Admission::Filtered(reason);
        }
        if !request.dont_filter {
            match self.store.insert_seen(fingerprint(&request)) {
                Ok(true) => {}
                Ok(false) => return Admission::Filtered(FilterReason::Duplicate),
                Err(e) => self.failed(e),
            }
        }
        self.push(request, now);
        Admission::Queued
    }

    fn next(&mut self, now: Instant) -> Next {
        self.release_delayed(now);
        self.prune_idle(now);
        let retry_at = self.delayed.peek().map(|Reverse((at, _, _))| *at);
        while let Some(&Reverse((at, _, id))) = self.ready.peek() {
            if at > now {
                return Next::NotBefore(retry_at.map_or(at, |r| r.min(at)));
            }
            self.ready.pop();
            let Some(host) = self.hosts.get_mut(id) else {
                continue;
            };
            host.scheduled = false;
            if host.in_flight >= host.throttle.concurrency() {
                continue;
            }
            // A hold may have arrived since this entry was pushed.
            if host.throttle.ready_at() > now {
                self.reschedule(id, now);
                continue;
            }
            let (lease, mut request) = match self.store.lease(&host.key) {
                Ok(Some(leased)) => leased,
                Ok(None) => continue,
                Err(e) => {
                    self.failed(e);
                    continue;
                }
            };
            // A first contact with nothing else queued for the host (a broad crawl's one
            // page per host) asks the server to close the connection after answering: kept
            // alive in the pool, one idle connection per host touched would cost a file
            // descriptor and tens of KiB each until it expires. A host with more work, or
            // seen before, keeps its connection (reused, and kinder to the server).
            if host.figures.requests == 0
                && host.in_flight == 0
                && self.store.host_len(&host.key) == 0
                && request.header_value("connection").is_none()
            {
                request
                    .headers
                    .push(("Connection".to_owned(), "close".to_owned()));
            }
            host.in_flight += 1;
            host.figures.requests += 1;
            host.throttle.on_send(now);
            self.leases.insert(lease, id);
            self.reschedule(id, now);
            return Next::Ready(Lease(lease), request);
        }
        match retry_at {
            Some(at) => Next::NotBefore(at),
            None => Next::Empty,
        }
    }

    fn complete(&mut self, lease: Lease, feedback: &Feedback, now: Instant) {
        let Some(id) = self.leases.remove(&lease.0) else {
            return;
        };
        let mut verdict = Verdict::Continue;
        if let Some(host) = self.hosts.get_mut(id) {
            host.in_flight = host.in_flight.saturating_sub(1);
            host.figures.record(feedback);
            verdict = host.throttle.on_feedback(feedback, now);
        }
        if let Verdict::Skip(why) = verdict {
            self.skip_host(id, why);
        }
        // The feedback may have moved the host's ready time; a heap entry already pushed is
        // re-checked against the throttle when it comes up in next().
        self.reschedule(id, now);
        if let Some(host) = self.hosts.get(id)
            && host.in_flight == 0
            && !host.scheduled
            && self.idle.len() < self.hosts.len().saturating_mul(2).max(64)
        {
            self.idle.push_back((now, id));
        }
    }

    fn queued(&self) -> usize {
        self.store.queued() + self.delayed.len()
    }

    fn acknowledge(&mut self, lease: Lease) {
        if let Err(e) = self.store.ack(lease.0) {
            self.failed(e);
        }
    }

    fn retry(&mut self, lease: Lease, request: Request, not_before: Instant) {
        let skipped = self
            .host_ids
            .get(&self.config.key(&request.url))
            .and_then(|&id| self.hosts.get(id))
            .and_then(|h| h.skipped.clone());
        if let Some(why) = skipped {
            self.skipped.push((request, why));
            self.acknowledge(lease);
            return;
        }
        self.seq += 1;
        // The old lease stays open while the retry waits in memory: a crash in between
        // returns the request to its queue instead of losing it.
        self.delayed.push(Reverse((
            not_before,
            self.seq,
            DelayedRequest(request, lease),
        )));
    }

    fn checkpoint(&mut self, stats: &crawler_core::Stats) {
        let now = Instant::now();
        // Only for a store that keeps them, and only hosts with something to keep: a broad
        // crawl has many hosts a fresh slot would treat the same (serialising them all every
        // second would cost more memory and time than the crawl itself).
        let states: Vec<(String, serde_json::Value)> = if self.store.keeps_host_states() {
            self.hosts
                .iter()
                .filter(|(_, h)| !h.throttle.forgettable(now))
                .map(|(_, h)| (h.key.clone(), h.throttle.save(now)))
                .filter(|(_, v)| !v.is_null())
                .collect()
        } else {
            Vec::new()
        };
        // Host states first: the checkpoint's flush then makes both durable together.
        let saved = self
            .store
            .save_host_states(&states)
            .and_then(|()| {
                serde_json::to_value(stats)
                    .map_err(|e| Error::new("cannot serialise the stats", Some(Box::new(e))))
            })
            .and_then(|v| self.store.checkpoint(&v));
        if let Err(e) = saved {
            self.failed(e);
        }
    }

    fn restored_stats(&mut self) -> Option<crawler_core::Stats> {
        let saved = self.store.saved_stats()?;
        match serde_json::from_value(saved) {
            Ok(stats) => Some(stats),
            Err(e) => {
                tracing::warn!("saved stats are unreadable, starting the counters afresh: {e}");
                None
            }
        }
    }

    fn take_skipped(&mut self) -> Vec<(Request, String)> {
        std::mem::take(&mut self.skipped)
    }

    fn host_stats(&self) -> Vec<HostStats> {
        let mut out: Vec<HostStats> = self
            .hosts
            .iter()
            .map(|(_, h)| self.stats_of(h))
            .chain(self.retired.iter().cloned())
            .collect();
        sort_busiest(&mut out);
        out
    }

    fn take_error(&mut self) -> Option<crawler_core::Error> {
        self.error.take().map(|e| {
            crawler_core::Error::new(
                crawler_core::ErrorKind::Storage,
                "the frontier store failed",
            )
            .with_source(e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crawler_core::ThrottleMode;
    use std::time::Duration;

    fn frontier(settings: &Settings, domains: &[&str]) -> Frontier {
        Frontier::new(FrontierConfig::from_settings(
            settings,
            domains.iter().map(|s| s.to_string()).collect(),
        ))
    }

    fn req(url: &str) -> Request {
        Request::get(url).unwrap()
    }

    fn ready(f: &mut Frontier, now: Instant) -> (Lease, Request) {
        match f.next(now) {
            Next::Ready(l, r) => (l, r),
            other => panic!("expected a ready request, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn duplicates_offsite_depth_and_long_urls_are_filtered() {
        let s = Settings {
            depth_limit: 2,
            max_url_length: 60,
            ..Default::default()
        };
        let mut f = frontier(&s, &["Example.com", "books.test:8080"]);
        let now = Instant::now();
        assert_eq!(
            f.enqueue(req("http://example.com/a"), now),
            Admission::Queued
        );
        assert_eq!(
            f.enqueue(req("http://EXAMPLE.com:80/a#x"), now),
            Admission::Filtered(FilterReason::Duplicate)
        );
        assert_eq!(
            f.enqueue(req("http://www.example.com/a"), now),
            Admission::Queued
        );
        assert_eq!(
            f.enqueue(req("http://books.test:8080/"), now),
            Admission::Queued
        );
        for off in [
            "http://badexample.com/",
            "http://example.org/",
            "http://com/",
        ] {
            assert_eq!(
                f.enqueue(req(off), now),
                Admission::Filtered(FilterReason::Offsite)
            );
        }
        let mut deep = req("http://example.com/deep");
        deep.depth = 3;
        assert_eq!(
            f.enqueue(deep.clone(), now),
            Admission::Filtered(FilterReason::Depth)
        );
        deep.depth = 2;
        assert_eq!(f.enqueue(deep, now), Admission::Queued);
        let long = format!("http://example.com/{}", "x".repeat(60));
        assert_eq!(
            f.enqueue(req(&long), now),
            Admission::Filtered(FilterReason::UrlTooLong)
        );
        assert_eq!(f.queued(), 4);
        let mut again = req("http://example.com/a");
        again.dont_filter = true;
        assert_eq!(f.enqueue(again, now), Admission::Queued);
    }

    #[tokio::test(start_paused = true)]
    async fn one_host_waits_its_delay_while_others_proceed() {
        let s = Settings {
            throttle: ThrottleMode::Fixed,
            download_delay: Duration::from_secs(2),
            randomize_delay: false,
            ..Default::default()
        };
        let mut f = frontier(&s, &[]);
        let t0 = Instant::now();
        for u in ["http://a.test/1", "http://a.test/2", "http://b.test/1"] {
            f.enqueue(req(u), t0);
        }
        let (l1, r1) = ready(&mut f, t0);
        let (l2, r2) = ready(&mut f, t0);
        let hosts: Vec<_> = [r1.url.host_str(), r2.url.host_str()]
            .into_iter()
            .flatten()
            .collect();
        assert!(
            hosts.contains(&"a.test") && hosts.contains(&"b.test"),
            "{hosts:?}"
        );
        // a.test has one in flight (concurrency 1): nothing is ready until it completes.
        assert!(matches!(f.next(t0), Next::Empty));
        let fb = Feedback {
            sent: true,
            status: Some(200),
            ..Default::default()
        };
        f.complete(l1, &fb, t0);
        f.complete(l2, &fb, t0);
        match f.next(t0) {
            Next::NotBefore(at) => assert_eq!(at, t0 + Duration::from_secs(2)),
            other => panic!("a.test must wait its delay, got {other:?}"),
        }
        let (_, r3) = ready(&mut f, t0 + Duration::from_secs(2));
        assert_eq!(r3.url.as_str(), "http://a.test/2");
        assert!(matches!(f.next(t0 + Duration::from_secs(5)), Next::Empty));
        assert_eq!(f.queued(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_hosts_with_nothing_learned_are_dropped_and_held_ones_kept() {
        let s = Settings::default();
        let mut f = frontier(&s, &[]);
        let t0 = Instant::now();
        let n = 200;
        for i in 0..n {
            f.enqueue(req(&format!("http://h{i}.test/")), t0);
        }
        f.enqueue(req("http://held.test/"), t0);
        let ok = Feedback {
            sent: true,
            status: Some(200),
            ..Default::default()
        };
        let refused = Feedback {
            sent: true,
            status: Some(429),
            retry_after: Some(Duration::from_secs(600)),
            ..Default::default()
        };
        for _ in 0..=n {
            let (lease, r) = ready(&mut f, t0);
            // One request for a host never seen: its connection is not kept for reuse.
            assert_eq!(r.header_value("connection"), Some("close"));
            let fb = if r.url.host_str() == Some("held.test") {
                &refused
            } else {
                &ok
            };
            f.complete(lease, fb, t0);
            f.acknowledge(lease);
        }
        assert_eq!(f.hosts().count(), n + 1);
        // Idle long enough: every host with nothing learned goes; the one under a hold stays.
        let later = t0 + Duration::from_secs(30);
        assert!(matches!(f.next(later), Next::Empty));
        let live: Vec<&str> = f.hosts().map(|(h, _, _)| h).collect();
        assert_eq!(live, ["held.test"]);
        // Their figures are still reported, and a host seen again gets a fresh slot.
        let stats = f.host_stats();
        assert_eq!(stats.len(), n + 1);
        assert!(stats.iter().all(|h| h.requests == 1));
        assert_eq!(
            f.enqueue(req("http://h7.test/again"), later),
            Admission::Queued
        );
        let (_, r) = ready(&mut f, later);
        assert_eq!(r.url.as_str(), "http://h7.test/again");
        // The held host still waits out its Retry-After.
        f.enqueue(req("http://held.test/2"), later);
        assert!(matches!(f.next(later), Next::NotBefore(_)));
        // A host with more work queued keeps its connection alive.
        f.enqueue(req("http://two.test/1"), later);
        f.enqueue(req("http://two.test/2"), later);
        let (_, r) = ready(&mut f, later);
        assert_eq!(r.url.host_str(), Some("two.test"));
        assert_eq!(r.header_value("connection"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn priority_first_then_first_in_first_out() {
        let s = Settings {
            throttle: ThrottleMode::Fixed,
            download_delay: Duration::ZERO,
            ..Default::default()
        };
        let mut f = frontier(&s, &[]);
        let now = Instant::now();
        f.enqueue(req("http://a.test/low1"), now);
        f.enqueue(req("http://a.test/high").priority(5), now);
        f.enqueue(req("http://a.test/low2"), now);
        let mut order = Vec::new();
        for _ in 0..3 {
            let (l, r) = ready(&mut f, now);
            order.push(r.url.path().to_owned());
            f.complete(
                l,
                &Feedback {
                    sent: true,
                    ..Default::default()
                },
                now,
            );
        }
        assert_eq!(order, ["/high", "/low1", "/low2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn per_host_concurrency_is_respected() {
        let s = Settings {
            throttle: ThrottleMode::Fixed,
            download_delay: Duration::ZERO,
            concurrency_per_host: 3,
            ..Default::default()
        };
        let mut f = frontier(&s, &[]);
        let now = Instant::now();
        for i in 0..10 {
            f.enqueue(req(&format!("http://a.test/{i}")), now);
        }
        let mut leases = Vec::new();
        while let Next::Ready(l, _) = f.next(now) {
            leases.push(l);
        }
        assert_eq!(leases.len(), 3);
        f.complete(
            leases[0],
            &Feedback {
                sent: true,
                ..Default::default()
            },
            now,
        );
        assert!(matches!(f.next(now), Next::Ready(..)));
        assert!(matches!(f.next(now), Next::Empty));
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_holds_the_whole_host() {
        let s = Settings {
            throttle: ThrottleMode::Fixed,
            download_delay: Duration::ZERO,
            concurrency_per_host: 2,
            ..Default::default()
        };
        let mut f = frontier(&s, &[]);
        let now = Instant::now();
        for i in 0..4 {
            f.enqueue(req(&format!("http://a.test/{i}")), now);
        }
        let (l, _) = ready(&mut f, now);
        let (_l2, _) = ready(&mut f, now);
        let fb = Feedback {
            sent: true,
            status: Some(429),
            retry_after: Some(Duration::from_secs(30)),
            ..Default::default()
        };
        f.complete(l, &fb, now);
        match f.next(now + Duration::from_secs(1)) {
            Next::NotBefore(at) => assert_eq!(at, now + Duration::from_millis(30_250)),
            other => panic!("expected a hold, got {other:?}"),
        }
        assert!(matches!(
            f.next(now + Duration::from_millis(30_250)),
            Next::Ready(..)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn retries_wait_for_their_time_and_skipped_hosts_drain() {
        let s = Settings {
            throttle: ThrottleMode::Fixed,
            max_retry_after: Duration::from_secs(60),
            ..Default::default()
        };
        let mut f = frontier(&s, &[]);
        let now = Instant::now();
        f.enqueue(req("http://a.test/again"), now);
        let (first, again) = ready(&mut f, now);
        let sent = Feedback {
            sent: true,
            status: Some(500),
            ..Default::default()
        };
        f.complete(first, &sent, now);
        f.retry(first, again, now + Duration::from_secs(5));
        assert_eq!(f.queued(), 1);
        match f.next(now) {
            Next::NotBefore(at) => assert_eq!(at, now + Duration::from_secs(5)),
            other => panic!("the retry must wait, got {other:?}"),
        }
        let (l, r) = ready(&mut f, now + Duration::from_secs(5));
        assert_eq!(r.url.path(), "/again");

        for i in 0..3 {
            f.enqueue(req(&format!("http://a.test/{i}")), now);
        }
        let fb = Feedback {
            sent: true,
            status: Some(503),
            retry_after: Some(Duration::from_secs(3600)),
            ..Default::default()
        };
        f.complete(l, &fb, now);
        let skipped = f.take_skipped();
        assert_eq!(skipped.len(), 3);
        assert!(skipped[0].1.contains("max_retry_after"), "{}", skipped[0].1);
        assert_eq!(f.queued(), 0);
        // Later links to the skipped host are set aside too, never queued.
        assert_eq!(f.enqueue(req("http://a.test/late"), now), Admission::Queued);
        assert_eq!(f.take_skipped().len(), 1);
        assert!(matches!(f.next(now + Duration::from_secs(10)), Next::Empty));
        let stats = f.host_stats();
        assert_eq!(stats[0].host, "a.test");
        assert_eq!(stats[0].status.get(&503), Some(&1));
        assert!(stats[0].skipped.is_some());
    }
}

#[cfg(test)]
mod host_rule_tests {
    use super::*;
    use crawler_core::{HostRule, ThrottleMode};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn host_rules_set_a_hosts_pace() {
        let rule: HostRule = serde_json::from_value(serde_json::json!({
            "match": "fast.test", "concurrency": 3, "delay": "0s"
        }))
        .unwrap();
        let s = Settings {
            throttle: ThrottleMode::Fixed,
            download_delay: Duration::from_secs(5),
            hosts: vec![rule],
            ..Default::default()
        };
        let mut f = Frontier::new(FrontierConfig::from_settings(&s, vec![]));
        let now = Instant::now();
        for i in 0..5 {
            f.enqueue(Request::get(&format!("http://fast.test/{i}")).unwrap(), now);
            f.enqueue(Request::get(&format!("http://slow.test/{i}")).unwrap(), now);
        }
        let mut hosts = Vec::new();
        while let Next::Ready(_, r) = f.next(now) {
            hosts.push(r.url.host_str().unwrap_or_default().to_owned());
        }
        assert_eq!(
            hosts.iter().filter(|h| *h == "fast.test").count(),
            3,
            "{hosts:?}"
        );
        assert_eq!(
            hosts.iter().filter(|h| *h == "slow.test").count(),
            1,
            "{hosts:?}"
        );
    }
}

#[cfg(test)]
mod domain_rule_tests {
    use super::*;
    use crawler_core::{HostRule, ThrottleMode};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn host_rules_match_the_urls_host_whatever_the_slot_key() {
        let rule: HostRule = serde_json::from_value(serde_json::json!({
            "match": "*.example.com", "concurrency": 3, "delay": "0s"
        }))
        .unwrap();
        let s = Settings {
            throttle: ThrottleMode::Fixed,
            download_delay: Duration::from_secs(5),
            host_key: HostKeyMode::Domain,
            hosts: vec![rule],
            ..Default::default()
        };
        let mut f = Frontier::new(FrontierConfig::from_settings(&s, vec![]));
        let now = Instant::now();
        for i in 0..5 {
            f.enqueue(
                Request::get(&format!("http://a.example.com/{i}")).unwrap(),
                now,
            );
        }
        let mut sent = 0;
        while let Next::Ready(..) = f.next(now) {
            sent += 1;
        }
        assert_eq!(
            sent, 3,
            "the rule's concurrency and delay apply to the domain's slot"
        );
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;

    #[test]
    fn domain_mode_shares_one_slot_per_registrable_domain() {
        let url = |s: &str| Url::parse(s).unwrap();
        assert_eq!(
            domain_key(&url("http://a.b.example.co.uk/x")),
            "example.co.uk"
        );
        assert_eq!(
            domain_key(&url("https://www.example.com:8443/")),
            "example.com"
        );
        assert_eq!(domain_key(&url("http://127.0.0.1:8080/")), "127.0.0.1:8080");
        assert_eq!(
            host_key(&url("https://www.example.com:8443/")),
            "www.example.com:8443"
        );

        let s = Settings {
            host_key: HostKeyMode::Domain,
            ..Default::default()
        };
        let mut f = Frontier::new(FrontierConfig::from_settings(&s, vec![]));
        let now = Instant::now();
        f.enqueue(Request::get("http://a.example.com/1").unwrap(), now);
        f.enqueue(Request::get("http://b.example.com/2").unwrap(), now);
        // One slot, one request in flight: the second host waits for the first.
        assert!(matches!(f.next(now), Next::Ready(..)));
        assert!(!matches!(f.next(now), Next::Ready(..)));
        assert_eq!(f.hosts().count(), 1);
    }

    /// A test resolver: two names on one shared-hosting machine, a third elsewhere.
    fn shared_hosting(name: &str) -> Option<std::net::IpAddr> {
        match name {
            "a.test" | "b.test" => Some([192, 0, 2, 1].into()),
            "c.test" => Some([192, 0, 2, 2].into()),
            _ => None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn ip_mode_shares_one_slot_per_address() {
        let s = Settings {
            host_key: HostKeyMode::Ip,
            ..Default::default()
        };
        let mut config = FrontierConfig::from_settings(&s, vec![]);
        config.ip_keys = std::sync::Arc::new(IpKeys::with_lookup(64, shared_hosting));
        let mut f = Frontier::new(config);
        let now = Instant::now();
        f.enqueue(Request::get("http://a.test/1").unwrap(), now);
        f.enqueue(Request::get("http://b.test/2").unwrap(), now);
        f.enqueue(Request::get("http://c.test/3").unwrap(), now);
        // a and b share 192.0.2.1 (one in flight), c has its own slot.
        let mut hosts = Vec::new();
        while let Next::Ready(_, r) = f.next(now) {
            hosts.push(r.url.host_str().unwrap_or("").to_owned());
        }
        assert_eq!(hosts.len(), 2, "{hosts:?}");
        assert!(hosts.contains(&"c.test".to_owned()));
        let mut keys: Vec<&str> = f.hosts().map(|(k, _, _)| k).collect();
        keys.sort();
        assert_eq!(keys, ["192.0.2.1", "192.0.2.2"]);
    }
}
