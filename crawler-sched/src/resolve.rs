//! Slot keys by IP address (`host_key = "ip"`): every host name that resolves to one address
//! shares one politeness slot, as Heritrix and Nutch offer for broad crawls, where thousands
//! of names may live on one shared-hosting machine. The same keys start the limiter groups
//! (`limiter_groups`, on by default): host names on one address share their holds.
//!
//! The frontier decides keys synchronously, so it never looks a name up: [`IpKeys`] reads
//! the crawl's one resolver ([`NameCache`], crawler-http's `Resolver`, asynchronous, with
//! the records' TTLs, the one the downloader connects with), and the engine resolves names
//! before their requests reach the frontier ([`ResolveAhead`], awaited in the page's worker
//! for its follow-ups and at start for the start requests). So the lookups of a crawl are
//! one per name per TTL, shared by keys and connections, and none blocks the runtime.
//!
//! What the cache holds decides the key:
//! - fresh addresses: the lowest of them (every address of the name is kept; the lowest is
//!   the same whatever order a round-robin server answers in, so the key does not move
//!   between lookups);
//! - addresses past their TTL: the same, while a new lookup runs in the background;
//! - a failure: the host name (the fetch fails on its own);
//! - nothing (a name that reached the frontier without going through the engine's
//!   resolve-ahead, or evicted from the cache): the host name, a lookup started in the
//!   background, and the miss counted ([`IpKeys::misses`]).

use std::collections::HashSet;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crawler_core::dns::{Cached, NameCache, ResolveAhead};
use url::{Host, Url};

/// An address as a key: IPv6 bracketed, as in a URL.
fn address_key(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) => format!("[{ip}]"),
    }
}

/// Where [`IpKeys`] finds the addresses of a name.
enum Source {
    /// Nowhere: names key as themselves.
    None,
    /// A fixed table (tests, a fixed map of a lab).
    Table(fn(&str) -> Option<IpAddr>),
    /// The crawl's resolver, read without waiting.
    Shared(Arc<dyn NameCache>),
}

/// The slot keys and limiter-group addresses of URLs, from the crawl's resolver.
pub struct IpKeys {
    source: Source,
    misses: AtomicU64,
}

impl Default for IpKeys {
    /// Keys without any resolver: every name keys as itself.
    fn default() -> Self {
        Self {
            source: Source::None,
            misses: AtomicU64::new(0),
        }
    }
}

impl IpKeys {
    /// Keys from the crawl's resolver (its cache, read without waiting).
    pub fn shared(cache: Arc<dyn NameCache>) -> Self {
        Self {
            source: Source::Shared(cache),
            misses: AtomicU64::new(0),
        }
    }

    /// Keys from a fixed table of names and addresses (tests). `names` is kept for callers
    /// of the former bounded cache; a table needs no bound.
    pub fn with_lookup(_names: usize, lookup: fn(&str) -> Option<IpAddr>) -> Self {
        Self {
            source: Source::Table(lookup),
            misses: AtomicU64::new(0),
        }
    }

    /// Whether the keys come from a resolver (else every name keys as itself).
    pub fn resolves(&self) -> bool {
        !matches!(self.source, Source::None)
    }

    /// The slot key of `url`: its address (the lowest when it has several; bracketed for
    /// IPv6), plus the port when it is not the scheme's default; the host name itself when
    /// it has no address (yet).
    pub fn key(&self, url: &Url) -> String {
        let ip = self.addresses(url).into_iter().min();
        let host = match ip {
            Some(ip) => address_key(ip),
            None => url.host_str().unwrap_or("").to_owned(),
        };
        match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host,
        }
    }

    /// Every address of `url`'s host written as [`IpKeys::key`] writes one (bracketed for
    /// IPv6, the port when it is not the scheme's default), lowest first: the addresses a
    /// limiter group's evidence looks at (two names sharing any one of them may be behind
    /// one limiter). Empty when the host has no address (yet).
    pub fn address_keys(&self, url: &Url) -> Vec<String> {
        let mut ips = self.addresses(url);
        ips.sort_unstable();
        ips.dedup();
        ips.into_iter()
            .map(|ip| {
                let host = address_key(ip);
                match url.port() {
                    Some(p) => format!("{host}:{p}"),
                    None => host,
                }
            })
            .collect()
    }

    /// Every address of `url`'s host as the cache holds it now (the literal itself for an
    /// IP literal); empty when it has none yet. Never waits: a name not in the cache starts
    /// a lookup in the background and counts as a miss.
    pub fn addresses(&self, url: &Url) -> Vec<IpAddr> {
        let name = match url.host() {
            Some(Host::Ipv4(ip)) => return vec![IpAddr::V4(ip)],
            Some(Host::Ipv6(ip)) => return vec![IpAddr::V6(ip)],
            Some(Host::Domain(name)) => name,
            None => return Vec::new(),
        };
        match &self.source {
            Source::None => Vec::new(),
            Source::Table(lookup) => lookup(name).into_iter().collect(),
            Source::Shared(cache) => match cache.cached(name) {
                Cached::Fresh(addrs) => addrs.to_vec(),
                Cached::Stale(addrs) => {
                    cache.refresh(name);
                    addrs.to_vec()
                }
                Cached::Failed => Vec::new(),
                Cached::Missing => {
                    self.misses.fetch_add(1, Ordering::Relaxed);
                    cache.refresh(name);
                    Vec::new()
                }
            },
        }
    }

    /// Names keyed without any answer in the cache (each keyed as itself, its lookup
    /// started in the background). 0 when every request went through the engine's
    /// resolve-ahead.
    pub fn misses(&self) -> u64 {
        self.misses.load(Ordering::Relaxed)
    }

    /// The engine's resolve-ahead for these keys: the names of requests the frontier may
    /// admit (in `allowed_domains`, or any with none), looked up before they are queued.
    /// `None` when the keys come from no resolver.
    pub fn resolve_ahead(
        self: &Arc<Self>,
        allowed_domains: Vec<String>,
    ) -> Option<Arc<dyn ResolveAhead>> {
        matches!(self.source, Source::Shared(_)).then(|| {
            Arc::new(Ahead {
                keys: Arc::clone(self),
                allowed: allowed_domains,
            }) as Arc<dyn ResolveAhead>
        })
    }
}

/// [`IpKeys::resolve_ahead`].
struct Ahead {
    keys: Arc<IpKeys>,
    allowed: Vec<String>,
}

impl ResolveAhead for Ahead {
    fn resolve_ahead(&self, urls: Vec<Url>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let Source::Shared(cache) = &self.keys.source else {
            return Box::pin(std::future::ready(()));
        };
        let mut names = HashSet::new();
        for url in &urls {
            if let Some(Host::Domain(name)) = url.host()
                && crate::frontier::is_allowed_domain(url, &self.allowed)
            {
                names.insert(name.to_ascii_lowercase());
            }
        }
        cache.prefetch(names.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::sync::Mutex;

    /// A table: `a.shared.test` and `b.shared.test` live on one machine.
    fn table(name: &str) -> Option<IpAddr> {
        match name {
            "a.shared.test" | "b.shared.test" => Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7))),
            "c.other.test" => Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 8))),
            _ => None,
        }
    }

    fn url(s: &str) -> Url {
        Url::parse(s).expect("test URL")
    }

    #[test]
    fn names_on_one_address_share_a_key() {
        let keys = IpKeys::with_lookup(16, table);
        assert_eq!(keys.key(&url("http://a.shared.test/x")), "192.0.2.7");
        assert_eq!(keys.key(&url("http://b.shared.test/y")), "192.0.2.7");
        assert_eq!(keys.key(&url("http://c.other.test/")), "192.0.2.8");
        assert_eq!(
            keys.key(&url("http://a.shared.test:8080/")),
            "192.0.2.7:8080"
        );
        // Literals need no lookup; a name that does not resolve keys as itself.
        assert_eq!(keys.key(&url("http://[::1]:9/")), "[::1]:9");
        assert_eq!(keys.key(&url("http://nowhere.test/")), "nowhere.test");
        assert_eq!(
            IpKeys::default().key(&url("http://a.shared.test/")),
            "a.shared.test"
        );
    }

    /// A cache whose answers the test sets, recording the refreshes asked of it.
    #[derive(Default)]
    struct Book {
        answers: Mutex<Vec<(String, Cached)>>,
        refreshed: Mutex<Vec<String>>,
        prefetched: Mutex<Vec<String>>,
    }

    impl NameCache for Book {
        fn cached(&self, name: &str) -> Cached {
            let answers = self.answers.lock().unwrap();
            answers
                .iter()
                .find(|(n, _)| n == name)
                .map_or(Cached::Missing, |(_, c)| c.clone())
        }
        fn refresh(&self, name: &str) {
            self.refreshed.lock().unwrap().push(name.to_owned());
        }
        fn prefetch(&self, mut names: Vec<String>) -> Pin<Box<dyn Future<Output = ()> + Send>> {
            names.sort();
            self.prefetched.lock().unwrap().extend(names);
            Box::pin(std::future::ready(()))
        }
    }

    #[tokio::test]
    async fn keys_read_the_cache_and_never_wait() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let book = Arc::new(Book::default());
        book.answers.lock().unwrap().extend([
            (
                "multi.test".to_owned(),
                Cached::Fresh(Arc::from([ip("192.0.2.9"), ip("192.0.2.3"), ip("::1")])),
            ),
            (
                "old.test".to_owned(),
                Cached::Stale(Arc::from([ip("192.0.2.4")])),
            ),
            ("dead.test".to_owned(), Cached::Failed),
        ]);
        let keys = Arc::new(IpKeys::shared(book.clone()));
        // All addresses are kept; the key is the lowest, whatever the answer's order.
        assert_eq!(keys.addresses(&url("http://multi.test/")).len(), 3);
        assert_eq!(keys.key(&url("http://multi.test/")), "192.0.2.3");
        // Limiter groups see every one of them, lowest first, with a port that is not the
        // scheme's.
        assert_eq!(
            keys.address_keys(&url("http://multi.test:8080/")),
            ["192.0.2.3:8080", "192.0.2.9:8080", "[::1]:8080"]
        );
        // Stale: still keyed by it, refreshed in the background.
        assert_eq!(keys.key(&url("http://old.test/")), "192.0.2.4");
        assert_eq!(keys.key(&url("http://dead.test/")), "dead.test");
        assert_eq!(keys.misses(), 0);
        assert_eq!(keys.key(&url("http://new.test/")), "new.test");
        assert_eq!(keys.misses(), 1);
        assert_eq!(*book.refreshed.lock().unwrap(), ["old.test", "new.test"]);
        // Resolve-ahead asks for the names the frontier may admit, once each.
        let ahead = keys.resolve_ahead(vec!["site.test".into()]).unwrap();
        ahead
            .resolve_ahead(vec![
                url("http://A.site.test/1"),
                url("http://a.site.test/2"),
                url("http://b.site.test/"),
                url("http://elsewhere.test/"),
                url("http://192.0.2.1/"),
            ])
            .await;
        assert_eq!(
            *book.prefetched.lock().unwrap(),
            ["a.site.test", "b.site.test"]
        );
        assert!(
            Arc::new(IpKeys::with_lookup(1, table))
                .resolve_ahead(vec![])
                .is_none()
        );
    }
}
