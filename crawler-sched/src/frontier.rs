//! The in-memory frontier: de-duplication, filters, per-host queues and slots, and the ready
//! heap that says which host may send next.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use crawler_core::{
    Admission, Feedback, FilterReason, Lease, Next, Request, Scheduler, Settings, Url,
};
use tokio::time::Instant;

use crate::error::Error;
use crate::fingerprint::fingerprint;
use crate::store::{Entry, MemoryStore, QueueStore};
use crate::throttle::{FixedDelay, Throttle};

/// The slot key of a URL: the host, plus the port when it is not the scheme's default, since
/// two ports on one address are often two servers with separate limits.
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
}

impl FrontierConfig {
    /// Filters and fixed per-host pacing taken from the crawl settings.
    pub fn from_settings(settings: &Settings, allowed_domains: Vec<String>) -> Self {
        let delay: Duration = settings.download_delay;
        let randomize = settings.randomize_delay;
        let per_host = settings.concurrency_per_host;
        Self {
            depth_limit: settings.depth_limit,
            max_url_length: settings.max_url_length,
            allowed_domains: normalise_domains(allowed_domains),
            throttle: Box::new(move |_host, now| {
                Box::new(FixedDelay::new(delay, randomize, per_host, now))
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
    let host = host.trim_start_matches('[').trim_end_matches(']');
    domains.iter().any(|d| {
        host == d
            || (host.len() > d.len()
                && host.ends_with(d.as_str())
                && host.as_bytes()[host.len() - d.len() - 1] == b'.')
    })
}

struct Host {
    key: String,
    in_flight: usize,
    throttle: Box<dyn Throttle>,
    /// Whether an entry for this host sits in the ready heap (at most one at a time).
    scheduled: bool,
}

/// The [`Scheduler`]: filters and de-duplication, per-host slots, and the ready heap, over a
/// [`QueueStore`] that holds the queues (in memory by default).
pub struct Frontier<S: QueueStore = MemoryStore> {
    config: FrontierConfig,
    store: S,
    hosts: Vec<Host>,
    host_ids: HashMap<String, usize>,
    /// (ready at, tie-breaker, host index): the next host allowed to send is on top.
    ready: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    /// Store lease id to host index.
    leases: HashMap<u64, usize>,
    seq: u64,
    error: Option<Error>,
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
            hosts: Vec::new(),
            host_ids: HashMap::new(),
            ready: BinaryHeap::new(),
            leases: HashMap::new(),
            seq,
            error: None,
        };
        let now = Instant::now();
        for host in f.store.hosts() {
            let id = f.host_id(host, now);
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
            .map(|h| (h.key.as_str(), self.store.host_len(&h.key), h.in_flight))
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

    fn host_id(&mut self, key: String, now: Instant) -> usize {
        if let Some(&id) = self.host_ids.get(&key) {
            return id;
        }
        let id = self.hosts.len();
        let throttle = (self.config.throttle)(&key, now);
        self.hosts.push(Host {
            key: key.clone(),
            in_flight: 0,
            throttle,
            scheduled: false,
        });
        self.host_ids.insert(key, id);
        id
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
        let key = host_key(&request.url);
        self.seq += 1;
        let entry = Entry {
            priority: request.priority,
            seq: self.seq,
            request,
        };
        if let Err(e) = self.store.push(&key, entry) {
            self.failed(e);
        }
        let id = self.host_id(key, now);
        self.reschedule(id, now);
        Admission::Queued
    }

    fn next(&mut self, now: Instant) -> Next {
        while let Some(&Reverse((at, _, id))) = self.ready.peek() {
            if at > now {
                return Next::NotBefore(at);
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
            let (lease, request) = match self.store.lease(&host.key) {
                Ok(Some(leased)) => leased,
                Ok(None) => continue,
                Err(e) => {
                    self.failed(e);
                    continue;
                }
            };
            host.in_flight += 1;
            host.throttle.on_send(now);
            self.leases.insert(lease, id);
            self.reschedule(id, now);
            return Next::Ready(Lease(lease), request);
        }
        Next::Empty
    }

    fn complete(&mut self, lease: Lease, feedback: &Feedback, now: Instant) {
        let Some(id) = self.leases.remove(&lease.0) else {
            return;
        };
        if let Err(e) = self.store.ack(lease.0) {
            self.failed(e);
        }
        if let Some(host) = self.hosts.get_mut(id) {
            host.in_flight = host.in_flight.saturating_sub(1);
            host.throttle.on_feedback(feedback, now);
        }
        // The feedback may have moved the host's ready time; a heap entry already pushed is
        // re-checked against the throttle when it comes up in next().
        self.reschedule(id, now);
    }

    fn queued(&self) -> usize {
        self.store.queued()
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
    async fn priority_first_then_first_in_first_out() {
        let s = Settings {
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
            Next::NotBefore(at) => assert_eq!(at, now + Duration::from_secs(30)),
            other => panic!("expected a hold, got {other:?}"),
        }
        assert!(matches!(
            f.next(now + Duration::from_secs(30)),
            Next::Ready(..)
        ));
    }
}
