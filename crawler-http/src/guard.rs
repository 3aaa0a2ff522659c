//! Refusing private, loopback and link-local addresses, for crawls that follow untrusted
//! links (a page must not be able to point the crawler at the operator's own network).
//!
//! The check sits in the DNS resolver, so the address actually connected to is the one
//! checked (no window between a check and a second lookup), and in front of every request
//! whose host is an IP literal, which bypasses DNS. IPv6 addresses that carry an IPv4
//! address (mapped, NAT64, 6to4) are judged by the address they lead to.
//!
//! A proxy resolves names itself, so behind one the guard would check nothing:
//! [`unchecked_proxy`] tells the crawl to refuse to start instead.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crawler_core::{Settings, Url};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Whether an address is one a public crawl must not reach.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => private_v4(v4),
        IpAddr::V6(v6) => private_v6(v6),
    }
}

fn private_v4(v4: Ipv4Addr) -> bool {
    let [a, b, c, _] = v4.octets();
    v4.is_private()
        || v4.is_loopback()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.is_documentation()
        || v4.is_multicast()
        || a == 0 // 0.0.0.0/8, "this network"
        || (a == 100 && (b & 0xC0) == 64) // 100.64.0.0/10, carrier-grade NAT
        || (a == 192 && b == 0 && c == 0) // 192.0.0.0/24, IETF protocol assignments
        || (a == 198 && (b & 0xFE) == 18) // 198.18.0.0/15, benchmarking
        || a >= 240 // 240.0.0.0/4, reserved
}

fn private_v6(v6: Ipv6Addr) -> bool {
    let seg = v6.segments();
    let embedded =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return private_v4(v4);
    }
    // NAT64 well-known prefix 64:ff9b::/96 (RFC 6052): the gateway connects to the IPv4
    // address in the last 32 bits, so 64:ff9b::10.0.0.1 reaches 10.0.0.1.
    if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return private_v4(embedded(seg[6], seg[7]));
    }
    // 64:ff9b:1::/48 (RFC 8215) is for NAT64 inside one network: private by definition.
    if seg[0] == 0x64 && seg[1] == 0xff9b && seg[2] == 1 {
        return true;
    }
    // 6to4 2002::/16 (RFC 3056): the relay delivers to the IPv4 address in bits 16-48.
    if seg[0] == 0x2002 {
        return private_v4(embedded(seg[1], seg[2]));
    }
    // Deprecated IPv4-compatible ::a.b.c.d (the loopback ::1 and :: are handled below).
    if seg[..6] == [0; 6] && (seg[6] != 0 || seg[7] > 1) {
        return private_v4(embedded(seg[6], seg[7]));
    }
    v6.is_loopback()
        || v6.is_unspecified()
        || v6.is_multicast()
        || (seg[0] & 0xfe00) == 0xfc00 // unique local
        || (seg[0] & 0xffc0) == 0xfe80 // link local
        || (seg[0] & 0xffc0) == 0xfec0 // site local (deprecated, still routed internally)
        || (seg[0] == 0x2001 && seg[1] == 0x0db8) // documentation
}

/// The environment variables through which the HTTP client picks up a proxy by itself.
pub const PROXY_ENV_VARS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// Why the crawl must not start: `deny_private_addresses` is on, but requests would go
/// through a proxy (the `proxy` setting, or one of [`PROXY_ENV_VARS`] in `env`) that
/// resolves host names itself, so private addresses could not be refused. `None` when the
/// guard is off, no proxy is configured, or `allow_unchecked_proxy` accepts the risk.
pub fn unchecked_proxy(
    settings: &Settings,
    env: impl IntoIterator<Item = (String, String)>,
) -> Option<String> {
    if !settings.deny_private_addresses || settings.allow_unchecked_proxy {
        return None;
    }
    let from = match settings.proxy.as_deref().filter(|p| !p.trim().is_empty()) {
        Some(p) => Some((p.to_owned(), "the proxy setting".to_owned())),
        None => env
            .into_iter()
            .find(|(k, v)| PROXY_ENV_VARS.contains(&k.as_str()) && !v.trim().is_empty())
            .map(|(k, v)| (v, format!("the {k} environment variable"))),
    };
    let (proxy, source) = from?;
    Some(format!(
        "deny_private_addresses is on, but requests would go through the proxy {} (from {source}), \
         which resolves host names itself, so private addresses cannot be refused; remove the \
         proxy, or set allow_unchecked_proxy = true to crawl through it unchecked",
        crawler_core::redact::redact_url(&proxy)
    ))
}

/// A resolver that drops private addresses and fails when none are left.
pub(crate) struct PublicOnly;

#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Refused {}

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = addrs
                .iter()
                .copied()
                .filter(|a| !is_private(a.ip()))
                .collect();
            if public.is_empty() {
                let msg = format!(
                    "private address refused: {host} resolves only to private, loopback or link-local addresses (deny_private_addresses is on)"
                );
                return Err(Box::new(Refused(msg)) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_addresses() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.1.1",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fc00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_private(private.parse().unwrap()), "{private}");
        }
        for public in ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "100.128.0.1"] {
            assert!(!is_private(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn nat64_and_6to4_are_judged_by_the_ipv4_address_they_reach() {
        for private in [
            "64:ff9b::7f00:1",    // NAT64 to 127.0.0.1
            "64:ff9b::10.0.0.1",  // NAT64 to 10.0.0.1
            "64:ff9b::a9fe:a9fe", // NAT64 to 169.254.169.254 (cloud metadata)
            "64:ff9b:1::8.8.8.8", // local-use NAT64: always private
            "64:ff9b:1:ffff::1",
            "2002:7f00:1::",    // 6to4 of 127.0.0.1
            "2002:c0a8:101::1", // 6to4 of 192.168.1.1
            "2002:a00:1::1",    // 6to4 of 10.0.0.1
            "::10.0.0.1",       // IPv4-compatible
            "2001:db8::1",
            "ff02::1",
            "198.18.0.1",
            "240.0.0.1",
        ] {
            assert!(is_private(private.parse().unwrap()), "{private}");
        }
        for public in ["64:ff9b::8.8.8.8", "2002:808:808::1", "2001:4860::8888"] {
            assert!(!is_private(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn a_proxy_the_guard_cannot_see_through_is_refused_unless_allowed() {
        let mut s = Settings {
            deny_private_addresses: true,
            ..Settings::default()
        };
        let env = |k: &str, v: &str| vec![(k.to_owned(), v.to_owned())];
        assert_eq!(unchecked_proxy(&s, env("PATH", "/bin")), None);
        let why =
            unchecked_proxy(&s, env("HTTPS_PROXY", "http://u:envsecret@10.0.0.1:3128")).unwrap();
        assert!(
            why.contains("HTTPS_PROXY") && why.contains("allow_unchecked_proxy"),
            "{why}"
        );
        assert!(!why.contains("envsecret"), "{why}");
        s.proxy = Some("http://u:setsecret@proxy.internal:3128".into());
        let why = unchecked_proxy(&s, Vec::new()).unwrap();
        assert!(
            why.contains("proxy setting") && !why.contains("setsecret"),
            "{why}"
        );
        s.allow_unchecked_proxy = true;
        assert_eq!(unchecked_proxy(&s, Vec::new()), None);
        s.allow_unchecked_proxy = false;
        s.deny_private_addresses = false;
        assert_eq!(unchecked_proxy(&s, Vec::new()), None);
    }
}
