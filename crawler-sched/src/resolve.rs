//! Slot keys by IP address (`host_key = "ip"`): every host name that resolves to one address
//! shares one politeness slot, as Heritrix and Nutch offer for broad crawls, where thousands
//! of names may live on one shared-hosting machine. The same cache keys the limiter groups
//! (`limiter_groups`, on by default): host names on one address share their holds.
//!
//! The frontier decides keys synchronously, so a lookup blocks; on tokio's multi-threaded
//! runtime it runs under `block_in_place`, so other tasks go on. Answers (and failures) are
//! cached with a time to live in a bounded LRU, so a broad crawl resolves each name about
//! once and the cache's memory is fixed.

use std::net::{IpAddr, ToSocketAddrs};
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use url::{Host, Url};

/// Names kept in the DNS cache.
pub const DNS_CACHE_NAMES: usize = 65_536;
/// How long an answer is trusted.
const DNS_TTL: Duration = Duration::from_secs(300);
/// How long a failed lookup is remembered (the fetch fails on its own; the slot falls back
/// to the host name).
const DNS_FAILURE_TTL: Duration = Duration::from_secs(60);

/// A bounded, expiring cache of host name → first address.
pub struct IpKeys {
    cache: Mutex<lru::LruCache<String, (Option<IpAddr>, Instant)>>,
    lookup: fn(&str) -> Option<IpAddr>,
}

impl Default for IpKeys {
    fn default() -> Self {
        // This crate's unit tests never ask a DNS server (limiter groups resolve every name
        // a frontier sees): names do not resolve there unless a test gives its resolver.
        let lookup: fn(&str) -> Option<IpAddr> = if cfg!(test) { |_| None } else { system_lookup };
        Self::with_lookup(DNS_CACHE_NAMES, lookup)
    }
}

impl IpKeys {
    /// A cache of `names` entries over `lookup` (tests give their own resolver).
    pub fn with_lookup(names: usize, lookup: fn(&str) -> Option<IpAddr>) -> Self {
        // Bounded, but grown as names come: `LruCache::new` allocates the whole table up
        // front, 2 MiB for the default 65,536 names, in every crawl, `host_key = "ip"` or not.
        let mut cache = lru::LruCache::unbounded();
        cache.resize(NonZeroUsize::new(names).unwrap_or(NonZeroUsize::MIN));
        Self {
            cache: Mutex::new(cache),
            lookup,
        }
    }

    /// The slot key of `url`: its address (bracketed for IPv6), plus the port when it is not
    /// the scheme's default; the host name itself when it does not resolve.
    pub fn key(&self, url: &Url) -> String {
        let ip = match url.host() {
            Some(Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            Some(Host::Domain(name)) => self.resolve(name),
            None => None,
        };
        let host = match ip {
            Some(IpAddr::V4(ip)) => ip.to_string(),
            Some(IpAddr::V6(ip)) => format!("[{ip}]"),
            None => url.host_str().unwrap_or("").to_owned(),
        };
        match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host,
        }
    }

    /// Names cached now.
    pub fn len(&self) -> usize {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn resolve(&self, name: &str) -> Option<IpAddr> {
        let now = Instant::now();
        if let Some((ip, until)) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            && *until > now
        {
            return *ip;
        }
        // Not under the lock: other names must not wait for this one.
        let ip = blocking(|| (self.lookup)(name));
        let ttl = if ip.is_some() {
            DNS_TTL
        } else {
            DNS_FAILURE_TTL
        };
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .put(name.to_owned(), (ip, now + ttl));
        ip
    }
}

/// The system resolver's first answer (the address a connection tries first).
fn system_lookup(name: &str) -> Option<IpAddr> {
    // Special-use names (RFC 6761) never resolve in the DNS: no query leaves for them.
    let special = [".test", ".example", ".invalid"]
        .iter()
        .any(|tld| name.ends_with(tld) || name == &tld[1..]);
    if special {
        return None;
    }
    (name, 0u16).to_socket_addrs().ok()?.next().map(|a| a.ip())
}

/// Run a blocking call without stalling tokio's other tasks where the runtime allows it.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static LOOKUPS: AtomicUsize = AtomicUsize::new(0);

    /// A test resolver: `a.shared.test` and `b.shared.test` live on one machine.
    fn fake(name: &str) -> Option<IpAddr> {
        LOOKUPS.fetch_add(1, Ordering::SeqCst);
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
    fn names_on_one_address_share_a_key_and_are_looked_up_once() {
        let keys = IpKeys::with_lookup(16, fake);
        let before = LOOKUPS.load(Ordering::SeqCst);
        assert_eq!(keys.key(&url("http://a.shared.test/x")), "192.0.2.7");
        assert_eq!(keys.key(&url("http://b.shared.test/y")), "192.0.2.7");
        assert_eq!(keys.key(&url("http://a.shared.test/z")), "192.0.2.7");
        assert_eq!(keys.key(&url("http://c.other.test/")), "192.0.2.8");
        assert_eq!(
            keys.key(&url("http://a.shared.test:8080/")),
            "192.0.2.7:8080"
        );
        // a (cached), b, c: three lookups for five keys.
        assert_eq!(LOOKUPS.load(Ordering::SeqCst) - before, 3);
        // Literals need no lookup; a name that does not resolve keeps its own slot.
        assert_eq!(keys.key(&url("http://[::1]:9/")), "[::1]:9");
        assert_eq!(keys.key(&url("http://nowhere.test/")), "nowhere.test");
    }

    /// `fake` without the count: tests run in parallel, and the lookup-count test must only
    /// see its own lookups.
    fn fake_uncounted(name: &str) -> Option<IpAddr> {
        name.ends_with(".test")
            .then_some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9)))
    }

    #[test]
    fn the_cache_is_bounded() {
        let keys = IpKeys::with_lookup(4, fake_uncounted);
        for i in 0..100 {
            keys.key(&url(&format!("http://n{i}.test/")));
        }
        assert_eq!(keys.len(), 4);
    }
}
