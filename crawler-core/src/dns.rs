//! Name resolution as the crawl's parts share it: the `resolve` and `dns_servers` settings'
//! syntax, and [`NameCache`], the view of the crawl's one resolver that the frontier reads
//! without ever waiting (the resolver itself, asynchronous and with the records' TTLs, is
//! crawler-http's `Resolver`).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

/// What the crawl's resolver holds for a name, read without a lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cached {
    /// The addresses of a lookup still within its TTL (or a `resolve` entry), all of them,
    /// in the order the answer gave them.
    Fresh(Arc<[IpAddr]>),
    /// The addresses of a lookup whose TTL has run out: still the best guess while a new
    /// lookup is under way.
    Stale(Arc<[IpAddr]>),
    /// A recent lookup failed (remembered briefly).
    Failed,
    /// Never looked up, or forgotten.
    Missing,
}

impl Cached {
    /// The addresses, fresh or stale.
    pub fn addresses(&self) -> Option<&[IpAddr]> {
        match self {
            Cached::Fresh(a) | Cached::Stale(a) => Some(a),
            Cached::Failed | Cached::Missing => None,
        }
    }
}

/// What the crawl's resolver did ([`Stats::dns`](crate::Stats::dns)): the final stats,
/// the JSON stats and the metrics endpoint show it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct DnsStats {
    /// Lookups sent to DNS (or read from `/etc/hosts`): one per name per TTL.
    pub lookups: u64,
    /// Names the HTTP client asked for (one per new connection) that were answered without
    /// a lookup of their own: from the cache, a lookup already under way, or `resolve`.
    pub cached: u64,
    /// Names that could not be resolved (no such name, no address, no answer within
    /// `dns_timeout`, or a special-use name such as `.invalid`, for which no query leaves).
    pub failed: u64,
}

impl DnsStats {
    /// Whether nothing was counted (a crawl through a proxy that resolves, or a stub).
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl std::ops::Add for DnsStats {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self {
            lookups: self.lookups + o.lookups,
            cached: self.cached + o.cached,
            failed: self.failed + o.failed,
        }
    }
}

/// The crawl's resolver as the synchronous parts (the frontier's slot keys and limiter
/// groups) see it: they read its cache and never wait on the network; names are resolved
/// ahead ([`NameCache::prefetch`], awaited by the engine before a page's links reach the
/// frontier) or in the background ([`NameCache::refresh`]).
pub trait NameCache: Send + Sync {
    /// What the cache holds for `name` (lower case, no trailing dot), without a lookup.
    fn cached(&self, name: &str) -> Cached;
    /// Start a lookup of `name` in the background unless one is under way or its answer is
    /// fresh. Never waits; without an async runtime it does nothing.
    fn refresh(&self, name: &str);
    /// Resolve `names` (those not fresh in the cache), concurrently; done when every one
    /// has an answer or a failure.
    fn prefetch(&self, names: Vec<String>) -> Pin<Box<dyn Future<Output = ()> + Send>>;
    /// What the resolver did so far (nothing, for a cache that counts nothing).
    fn counts(&self) -> DnsStats {
        DnsStats::default()
    }
}

/// Resolves the names of requests before the frontier keys them: the engine awaits it for
/// the start requests and for each page's follow-ups (in the page's worker, never on the
/// engine's loop), so the frontier, which must decide slot keys and limiter groups
/// synchronously, finds their answers in the cache.
pub trait ResolveAhead: Send + Sync {
    /// Look up the names of `urls` that need it; done when each has an answer or failed.
    fn resolve_ahead(&self, urls: Vec<url::Url>) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// A `resolve` entry, `NAME:ADDRESS[,ADDRESS...]`, as name (lower case, no trailing dot)
/// and addresses. IPv6 addresses may be bracketed (`shop.test:[::1],127.0.0.1`).
pub fn parse_resolve(entry: &str) -> Result<(String, Vec<IpAddr>), String> {
    let entry = entry.trim();
    let form = "expected NAME:ADDRESS[,ADDRESS...], e.g. shop.test:127.0.0.1";
    let Some((name, rest)) = entry.split_once(':') else {
        return Err(format!("'{entry}': {form}"));
    };
    let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
    if name.is_empty() || name.contains(['/', ' ', '[', ']', '*']) {
        return Err(format!("'{entry}': {form}"));
    }
    let parse = |list: &str| -> Option<Vec<IpAddr>> {
        list.split(',')
            .map(|a| {
                let a = a.trim();
                a.strip_prefix('[')
                    .and_then(|a| a.strip_suffix(']'))
                    .unwrap_or(a)
                    .parse::<IpAddr>()
                    .ok()
            })
            .collect()
    };
    match parse(rest) {
        Some(addrs) if !addrs.is_empty() => Ok((name, addrs)),
        _ => {
            // curl's form names a port too; a name here maps to its addresses on every port.
            let curl = rest
                .split_once(':')
                .is_some_and(|(port, addrs)| port.parse::<u16>().is_ok() && parse(addrs).is_some());
            Err(if curl {
                format!(
                    "'{entry}': {form} (curl's NAME:PORT:ADDRESS has a port: drop it, the name maps to these addresses on every port)"
                )
            } else {
                format!("'{entry}': {form}")
            })
        }
    }
}

/// A `dns_servers` entry: an IP address, with a port (`127.0.0.1:5353`, `[::1]:5353`) or
/// without (port 53).
pub fn parse_dns_server(entry: &str) -> Result<SocketAddr, String> {
    let entry = entry.trim();
    if let Ok(addr) = entry.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let bare = entry
        .strip_prefix('[')
        .and_then(|a| a.strip_suffix(']'))
        .unwrap_or(entry);
    bare.parse::<IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| {
            format!("'{entry}': expected an IP address, with a port or not (127.0.0.1:5353)")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_entries_parse_and_bad_ones_say_why() {
        let (name, addrs) = parse_resolve("Shop.Test.:127.0.0.1, [::1],10.0.0.2").unwrap();
        assert_eq!(name, "shop.test");
        assert_eq!(
            addrs,
            ["127.0.0.1", "::1", "10.0.0.2"].map(|a| a.parse::<IpAddr>().unwrap())
        );
        let (_, v6) = parse_resolve("h:2001:db8::1").unwrap();
        assert_eq!(v6, ["2001:db8::1".parse::<IpAddr>().unwrap()]);
        for bad in [
            "shop.test",
            "shop.test:",
            ":127.0.0.1",
            "a:nope",
            "a b:1.2.3.4",
        ] {
            assert!(parse_resolve(bad).is_err(), "{bad}");
        }
        let why = parse_resolve("shop.test:443:127.0.0.1").unwrap_err();
        assert!(why.contains("drop it"), "{why}");
    }

    #[test]
    fn dns_servers_take_a_port_or_53() {
        assert_eq!(
            parse_dns_server("127.0.0.1:5353").unwrap(),
            "127.0.0.1:5353".parse().unwrap()
        );
        assert_eq!(
            parse_dns_server("::1").unwrap(),
            "[::1]:53".parse().unwrap()
        );
        assert_eq!(
            parse_dns_server("[::1]").unwrap(),
            "[::1]:53".parse().unwrap()
        );
        assert!(parse_dns_server("dns.example").is_err());
    }
}
