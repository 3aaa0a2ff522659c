//! The crawl's one resolver: asynchronous (hickory), each answer kept for its records' TTL,
//! shared by the downloader (through the address guard, [`crate::guard`]) and the
//! frontier's slot keys and limiter groups (through [`NameCache`]), so a name is looked up
//! once per TTL whoever asks.
//!
//! - Lookups never block a runtime thread: hickory speaks DNS over the runtime's own
//!   sockets (no `getaddrinfo` on a blocking thread), and the frontier, which decides keys
//!   synchronously, only reads this cache ([`NameCache::cached`]); the engine resolves a
//!   page's new names ([`NameCache::prefetch`]) before its links reach the frontier.
//! - Concurrent lookups of one name share one query (a burst of links to a new host costs
//!   one lookup, not one per connection).
//! - Every address of an answer is kept, in the answer's order (the client tries them in
//!   turn; the frontier keys by all of them).
//! - Failures are remembered for [`NEGATIVE_TTL`], so a dead name is not asked again for
//!   every link to it, yet comes back soon after a transient failure.
//! - `resolve` entries (`NAME:ADDRESS,...`, as curl's `--resolve`) answer first, with no
//!   query; `dns_servers` replaces the system's servers (`/etc/resolv.conf`); `/etc/hosts`
//!   is read once at start and answers before DNS.
//! - The cache holds at most [`DNS_CACHE_NAMES`] names (least recently used go first).
//!
//! Through a proxy none of this runs for the proxied requests: the proxy resolves.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crawler_core::Settings;
use crawler_core::dns::{Cached, NameCache, parse_dns_server, parse_resolve};
use futures_util::FutureExt;
use futures_util::future::Shared;
use hickory_resolver::config::{LookupIpStrategy, NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::{Resolver as Hickory, TokioResolver};

use crate::error::Error;

/// Names kept in the cache.
pub const DNS_CACHE_NAMES: usize = 65_536;
/// How long a failed lookup (no such name, no address, no answer in time) is remembered:
/// long enough that the links of a page to a dead host cost one lookup, short enough that
/// a transient failure is soon forgotten.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(30);
/// The shortest time an answer is kept, whatever its TTL says (a TTL of 0 would have every
/// request of a host look it up again).
pub const MIN_TTL: Duration = Duration::from_secs(1);
/// Queries of one name: A and AAAA, each tried this many times before the name fails.
const ATTEMPTS: usize = 2;
/// Names looked up at once, at most: a crawl starting on 10,000 hosts must not send 10,000
/// queries in one burst (a server drops some, and each dropped one is asked again after
/// `dns_timeout`, slower and twice).
pub const MAX_LOOKUPS_IN_FLIGHT: usize = 64;

/// An answer: the addresses, or why there are none.
type Answer = Result<Arc<[IpAddr]>, Arc<str>>;
/// A lookup under way, awaited by everyone who asks for its name meanwhile.
type Pending = Shared<Pin<Box<dyn Future<Output = Answer> + Send>>>;

struct Entry {
    answer: Answer,
    until: Instant,
}

/// The crawl's resolver (see the module docs). Built once per crawl, shared through `Arc`.
pub struct Resolver {
    dns: TokioResolver,
    overrides: HashMap<String, Arc<[IpAddr]>>,
    cache: Mutex<lru::LruCache<String, Entry>>,
    pending: Mutex<HashMap<String, Pending>>,
    /// [`MAX_LOOKUPS_IN_FLIGHT`] permits.
    in_flight: tokio::sync::Semaphore,
    queries: AtomicU64,
    /// Names asked for by [`Resolver::lookup`] answered without a query of their own.
    cache_answers: AtomicU64,
    /// Queries that failed.
    failures: AtomicU64,
    /// Itself, for lookups started from `&self` (background refreshes).
    me: Weak<Resolver>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver")
            .field("overrides", &self.overrides.len())
            .field("queries", &self.queries())
            .finish_non_exhaustive()
    }
}

/// A lookup that failed, as the HTTP client reports it (its message names the lookup, so
/// the failure is counted as `failed:dns`).
#[derive(Debug)]
pub(crate) struct LookupFailed(pub(crate) String);

impl std::fmt::Display for LookupFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for LookupFailed {}

impl Resolver {
    /// The resolver of `settings`: `resolve` entries, `dns_servers` (else the system's
    /// configuration), `dns_timeout`.
    pub fn from_settings(settings: &Settings) -> Result<Arc<Self>, Error> {
        let bad = |what: &str, why: String| Error::new(what.to_owned(), std::io::Error::other(why));
        // Entries naming one name add up (a command line splits lists at commas, so
        // `a.test:10.0.0.1,a.test:10.0.0.2` gives a.test both addresses).
        let mut listed: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for entry in &settings.resolve {
            let (name, addrs) =
                parse_resolve(entry).map_err(|w| bad("invalid resolve entry", w))?;
            let known = listed.entry(name).or_default();
            for ip in addrs {
                if !known.contains(&ip) {
                    known.push(ip);
                }
            }
        }
        let overrides = listed
            .into_iter()
            .map(|(name, addrs)| (name, Arc::from(addrs)))
            .collect();
        let (config, mut opts) = if settings.dns_servers.is_empty() {
            hickory_resolver::system_conf::read_system_conf().map_err(|e| {
                Error::new(
                    "cannot read the system's DNS configuration (/etc/resolv.conf); name \
                     servers in dns_servers"
                        .to_owned(),
                    e,
                )
            })?
        } else {
            let mut servers = Vec::new();
            for entry in &settings.dns_servers {
                let addr =
                    parse_dns_server(entry).map_err(|w| bad("invalid dns_servers entry", w))?;
                let mut server = NameServerConfig::udp_and_tcp(addr.ip());
                for c in &mut server.connections {
                    c.port = addr.port();
                }
                servers.push(server);
            }
            (
                ResolverConfig::from_name_servers(servers),
                ResolverOpts::default(),
            )
        };
        opts.timeout = settings.dns_timeout;
        opts.attempts = ATTEMPTS;
        // This module's cache is the one cache: hickory's would keep every answer twice.
        opts.cache_size = 0;
        // Both families, IPv4 first (as most hosts are reached).
        opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
        let dns = Hickory::builder_with_config(config, TokioRuntimeProvider::default())
            .with_options(opts)
            .build()
            .map_err(|e| Error::new("cannot build the DNS resolver".to_owned(), e))?;
        Ok(Self::with(dns, overrides))
    }

    fn with(dns: TokioResolver, overrides: HashMap<String, Arc<[IpAddr]>>) -> Arc<Self> {
        // Bounded, grown as names come (a full table up front is 2 MiB per crawl).
        let mut cache = lru::LruCache::unbounded();
        cache.resize(NonZeroUsize::new(DNS_CACHE_NAMES).unwrap_or(NonZeroUsize::MIN));
        Arc::new_cyclic(|me| Self {
            dns,
            overrides,
            cache: Mutex::new(cache),
            pending: Mutex::new(HashMap::new()),
            in_flight: tokio::sync::Semaphore::new(MAX_LOOKUPS_IN_FLIGHT),
            queries: AtomicU64::new(0),
            cache_answers: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            me: me.clone(),
        })
    }

    /// Lookups sent to DNS (or `/etc/hosts`) so far: one per name per TTL, the rest
    /// answered from the cache or `resolve`.
    pub fn queries(&self) -> u64 {
        self.queries.load(Ordering::Relaxed)
    }

    /// Every address of `name`, from `resolve`, the cache, a lookup under way or a new one.
    pub async fn lookup(&self, name: &str) -> Result<Arc<[IpAddr]>, String> {
        let name = normalise(name);
        if let Some(addrs) = self.overrides.get(&name) {
            self.cache_answers.fetch_add(1, Ordering::Relaxed);
            return Ok(Arc::clone(addrs));
        }
        if let Some(answer) = self.fresh(&name) {
            self.cache_answers.fetch_add(1, Ordering::Relaxed);
            return answer.map_err(|w| w.to_string());
        }
        let Some((pending, new)) = self.pending(&name) else {
            return Err(format!(
                "failed to lookup address {name}: the resolver is gone"
            ));
        };
        if !new {
            // Joins a lookup already under way: no query of its own.
            self.cache_answers.fetch_add(1, Ordering::Relaxed);
        }
        pending.await.map_err(|w| w.to_string())
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, lru::LruCache<String, Entry>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn fresh(&self, name: &str) -> Option<Answer> {
        let mut cache = self.lock_cache();
        let entry = cache.get(name)?;
        (entry.until > Instant::now()).then(|| entry.answer.clone())
    }

    /// The lookup of `name` under way, started now if there is none (then with `true`).
    fn pending(&self, name: &str) -> Option<(Pending, bool)> {
        let me = self.me.upgrade()?;
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = pending.get(name) {
            return Some((p.clone(), false));
        }
        let key = name.to_owned();
        let query = async move { me.query(key).await };
        // On a task of its own where there is a runtime: it finishes (caches its answer,
        // frees its permit) even when everyone awaiting it gave up, such as a connection
        // past its timeout.
        let query: Pin<Box<dyn Future<Output = Answer> + Send>> =
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    let task = runtime.spawn(query);
                    let name = name.to_owned();
                    let me = self.me.clone();
                    Box::pin(async move {
                        task.await.unwrap_or_else(|e| {
                            // Cancelled with its runtime: forget it, so the next ask looks
                            // the name up again instead of reading this failure.
                            if let Some(me) = me.upgrade() {
                                me.pending
                                    .lock()
                                    .unwrap_or_else(|p| p.into_inner())
                                    .remove(&name);
                            }
                            Err(Arc::from(format!("failed to lookup address {name}: {e}")))
                        })
                    })
                }
                Err(_) => Box::pin(query),
            };
        let shared = query.shared();
        pending.insert(name.to_owned(), shared.clone());
        Some((shared, true))
    }

    /// One lookup, its answer cached (and its pending entry removed) before it returns.
    async fn query(self: Arc<Self>, name: String) -> Answer {
        let (answer, until) = self.ask(&name).await;
        if answer.is_err() {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        self.lock_cache().put(
            name.clone(),
            Entry {
                answer: answer.clone(),
                until,
            },
        );
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&name);
        answer
    }

    /// The answer for `name` from DNS (or /etc/hosts), and until when it holds: its
    /// records' TTL (at least [`MIN_TTL`]), or [`NEGATIVE_TTL`] for a failure.
    async fn ask(&self, name: &str) -> (Answer, Instant) {
        let failed = |why: &str| -> (Answer, Instant) {
            (
                Err(Arc::from(format!("failed to lookup address {name}: {why}"))),
                Instant::now() + NEGATIVE_TTL,
            )
        };
        if name.is_empty() || name == "invalid" || name.ends_with(".invalid") {
            // RFC 6761: never resolves, so no query leaves for it.
            return failed("a special-use name");
        }
        // The semaphore is never closed; without a permit the lookup would still go.
        let _permit = self.in_flight.acquire().await.ok();
        self.queries.fetch_add(1, Ordering::Relaxed);
        match self.dns.lookup_ip(name).await {
            Ok(found) => {
                let mut addrs: Vec<IpAddr> = Vec::new();
                for ip in found.iter() {
                    if !addrs.contains(&ip) {
                        addrs.push(ip);
                    }
                }
                if addrs.is_empty() {
                    return failed("no address");
                }
                let until = found.valid_until().max(Instant::now() + MIN_TTL);
                (Ok(Arc::from(addrs)), until)
            }
            Err(e) => failed(&e.to_string()),
        }
    }
}

/// Names as the cache keys them: lower case, no trailing dot.
fn normalise(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl NameCache for Resolver {
    fn cached(&self, name: &str) -> Cached {
        let name = normalise(name);
        if let Some(addrs) = self.overrides.get(&name) {
            return Cached::Fresh(Arc::clone(addrs));
        }
        let mut cache = self.lock_cache();
        let Some(entry) = cache.get(&name) else {
            return Cached::Missing;
        };
        match (&entry.answer, entry.until > Instant::now()) {
            (Ok(addrs), true) => Cached::Fresh(Arc::clone(addrs)),
            (Ok(addrs), false) => Cached::Stale(Arc::clone(addrs)),
            (Err(_), true) => Cached::Failed,
            (Err(_), false) => Cached::Missing,
        }
    }

    fn refresh(&self, name: &str) {
        let name = normalise(name);
        if self.overrides.contains_key(&name) || self.fresh(&name).is_some() {
            return;
        }
        // Started on a task of its own by `pending`; nothing to wait for here.
        if tokio::runtime::Handle::try_current().is_ok() {
            let _ = self.pending(&name);
        }
    }

    fn counts(&self) -> crawler_core::dns::DnsStats {
        crawler_core::dns::DnsStats {
            lookups: self.queries(),
            cached: self.cache_answers.load(Ordering::Relaxed),
            failed: self.failures.load(Ordering::Relaxed),
        }
    }

    fn prefetch(&self, names: Vec<String>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut lookups = Vec::new();
        for name in names {
            let name = normalise(&name);
            if self.overrides.contains_key(&name) || self.fresh(&name).is_some() {
                continue;
            }
            if let Some((p, _)) = self.pending(&name) {
                lookups.push(p);
            }
        }
        Box::pin(async move {
            futures_util::future::join_all(lookups).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver(resolve: &[&str]) -> Arc<Resolver> {
        let settings = Settings {
            resolve: resolve.iter().map(|s| (*s).to_owned()).collect(),
            ..Settings::default()
        };
        Resolver::from_settings(&settings).unwrap()
    }

    #[tokio::test]
    async fn resolve_entries_answer_with_every_address_and_no_query() {
        let r = resolver(&["Shop.Test:127.0.0.2", "shop.test:[::1],127.0.0.2"]);
        let addrs = r.lookup("shop.test.").await.unwrap();
        assert_eq!(
            &*addrs,
            ["127.0.0.2", "::1"].map(|a| a.parse::<IpAddr>().unwrap())
        );
        assert_eq!(r.cached("SHOP.test"), Cached::Fresh(addrs));
        assert_eq!(r.queries(), 0);
        // Answered by `resolve`: counted as answered without a lookup.
        assert_eq!(r.counts().cached, 1);
    }

    #[tokio::test]
    async fn localhost_comes_from_the_hosts_file_once_and_invalid_names_never_leave() {
        let r = resolver(&[]);
        assert_eq!(r.cached("localhost"), Cached::Missing);
        let (a, b) = tokio::join!(r.lookup("localhost"), r.lookup("LOCALHOST"));
        let addrs = a.unwrap();
        assert!(addrs.iter().any(|ip| ip.is_loopback()), "{addrs:?}");
        assert_eq!(b.unwrap(), addrs);
        // Two callers at once, then a third: one lookup.
        r.lookup("localhost").await.unwrap();
        assert_eq!(r.queries(), 1);
        assert_eq!(r.cached("localhost"), Cached::Fresh(addrs));
        let err = r.lookup("nowhere.invalid").await.unwrap_err();
        assert!(err.contains("failed to lookup address"), "{err}");
        assert_eq!(r.queries(), 1);
        assert_eq!(r.cached("nowhere.invalid"), Cached::Failed);
        // The stats' counts: one lookup; the second caller joined it and the third read the
        // cache; the special-use name failed without a query.
        let counts = r.counts();
        assert_eq!((counts.lookups, counts.cached, counts.failed), (1, 2, 1));
    }

    #[test]
    fn bad_entries_are_refused() {
        let s = Settings {
            dns_servers: vec!["dns.example".into()],
            ..Settings::default()
        };
        assert!(Resolver::from_settings(&s).is_err());
    }
}
