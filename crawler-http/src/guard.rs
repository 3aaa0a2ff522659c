//! The address policy: link-local and cloud-metadata addresses are never reached unless
//! `allow_addresses` names them, and with `deny_private_addresses` a public page (or
//! redirect) cannot lead into private space, while a crawl started on a private host goes on
//! within it (see [`crawler_core::address`]).
//!
//! The check sits in the DNS resolver, so the address actually connected to is the one
//! checked (no window between a check and a second lookup, so DNS rebinding gains nothing),
//! and in front of every request whose host is an IP literal or a metadata name, which
//! bypass or defeat DNS. Requests that may not reach private space go through a client of
//! their own, so they never reuse a pooled connection to a private address either.
//!
//! A proxy resolves names itself, so behind one the guard checks only IP literals and
//! metadata names: [`unchecked_proxy`] gives the warning the crawl logs at start, so an
//! operator knows where the rule stops (a proxy is the operator's own choice of route, and
//! refusing to start behind every corporate proxy would make the default unusable).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use crawler_core::address::{AddressClass, FROM_PRIVATE_META, classify, is_metadata_host};
use crawler_core::{Request, Settings, Url};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::dns::{LookupFailed, Resolver};
use crate::error::Error;

/// Whether an address is one a public crawl must not reach (private, loopback, link-local
/// or metadata).
pub fn is_private(ip: IpAddr) -> bool {
    classify(ip) != AddressClass::Public
}

/// The words every refusal's message starts with: the downloader and the robots gate know a
/// refusal by them, whichever layer (resolver, literal check, robots redirect) made it.
pub(crate) const REFUSED: &str = "forbidden address";

/// Which addresses a request may reach (built from the settings).
#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    /// `allow_addresses` entries that are addresses or ranges: (network, prefix length).
    nets: Vec<(IpAddr, u8)>,
    /// `allow_addresses` entries that are host names, lower case.
    names: Vec<String>,
    /// `deny_private_addresses`.
    deny_private: bool,
}

impl AddressPolicy {
    /// The policy of `settings` (`allow_addresses`, `deny_private_addresses`). A proxy's own
    /// host is allowed: requests must reach it wherever it runs.
    pub fn from_settings(settings: &Settings) -> Result<Self, Error> {
        let mut policy = Self {
            deny_private: settings.deny_private_addresses,
            ..Self::default()
        };
        for entry in &settings.allow_addresses {
            policy.allow(entry)?;
        }
        if let Some(host) = settings
            .proxy
            .as_deref()
            .and_then(|p| Url::parse(p.trim()).ok())
            .and_then(|u| u.host_str().map(str::to_owned))
        {
            policy.allow(host.trim_start_matches('[').trim_end_matches(']'))?;
        }
        Ok(policy)
    }

    fn allow(&mut self, entry: &str) -> Result<(), Error> {
        let entry = entry.trim();
        let bad = |why: String| {
            Error::new(
                format!("invalid allow_addresses entry '{entry}'"),
                std::io::Error::other(why),
            )
        };
        let (addr, prefix) = match entry.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (entry, None),
        };
        match (addr.parse::<IpAddr>(), prefix) {
            (Ok(ip), prefix) => {
                let max = if ip.is_ipv4() { 32 } else { 128 };
                let len = match prefix {
                    None => max,
                    Some(p) => p
                        .parse::<u8>()
                        .ok()
                        .filter(|&n| n <= max)
                        .ok_or_else(|| bad(format!("prefix length must be 0 to {max}")))?,
                };
                self.nets.push((ip, len));
            }
            (Err(_), None) if !entry.is_empty() && !entry.contains(['/', ' ', ':']) => {
                self.names
                    .push(entry.trim_end_matches('.').to_ascii_lowercase());
            }
            _ => {
                return Err(bad(
                    "expected an IP address, a CIDR range or a host name".into()
                ));
            }
        }
        Ok(())
    }

    fn names_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        self.names.iter().any(|n| n.eq_ignore_ascii_case(host))
    }

    fn names_ip(&self, ip: IpAddr) -> bool {
        self.nets.iter().any(|&(net, len)| in_net(ip, net, len))
    }

    /// Why `host`'s address `ip` may not be reached by a request that may (`private_ok`) or
    /// may not reach private space; `None` when it may.
    pub fn refusal(&self, host: &str, ip: IpAddr, private_ok: bool) -> Option<String> {
        if self.names_ip(ip) || self.names_host(host) {
            return None;
        }
        match classify(ip) {
            AddressClass::Public => None,
            AddressClass::LinkLocal => Some(format!(
                "{REFUSED}: {host} is at {ip}, a link-local or cloud metadata address (name it in allow_addresses to reach it)"
            )),
            AddressClass::Private if self.deny_private && !private_ok => Some(format!(
                "{REFUSED}: {host} is at {ip}, a private address, reached from a public page (deny_private_addresses is on)"
            )),
            AddressClass::Private => None,
        }
    }

    /// Why `url` may not be fetched, judged before any DNS: its host is an IP literal the
    /// policy refuses, or a cloud metadata name. Names are judged by the resolver.
    pub fn refuse_url(&self, url: &Url, private_ok: bool) -> Option<String> {
        let host = url.host_str().unwrap_or("");
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.refusal(host, ip.into(), private_ok),
            Some(url::Host::Ipv6(ip)) => self.refusal(host, ip.into(), private_ok),
            Some(url::Host::Domain(d)) if is_metadata_host(d) && !self.names_host(d) => {
                Some(format!(
                    "{REFUSED}: {d} is a cloud metadata service (name it in allow_addresses to reach it)"
                ))
            }
            _ => None,
        }
    }

    /// Whether any request may ever be refused for being private (else one client serves all).
    pub(crate) fn denies_private(&self) -> bool {
        self.deny_private
    }
}

/// Whether `req` may reach private addresses: start requests may (the user named them);
/// follow-ups and redirect hops may when the engine marked the page they came from private.
pub fn private_ok(req: &Request) -> bool {
    match req.meta.get(FROM_PRIVATE_META) {
        Some(v) => v.as_bool().unwrap_or(false),
        None => req.depth == 0 && req.redirect_urls.is_empty(),
    }
}

fn in_net(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V4(_)) => a
            .to_ipv4_mapped()
            .is_some_and(|v4| in_net(IpAddr::V4(v4), net, len)),
        (IpAddr::V4(_), IpAddr::V6(_)) => false,
    }
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

/// The warning for a crawl whose requests go through a proxy (the `proxy` setting, or one
/// of [`PROXY_ENV_VARS`] in `env`): the proxy resolves host names itself, so the address
/// rules see only IP literals and metadata names. `None` when no proxy is configured or
/// `allow_unchecked_proxy` accepts it.
pub fn unchecked_proxy(
    settings: &Settings,
    env: impl IntoIterator<Item = (String, String)>,
) -> Option<String> {
    if settings.allow_unchecked_proxy {
        return None;
    }
    let (proxy, source) = proxy_in_use(settings, env)?;
    Some(format!(
        "requests go through the proxy {} (from {source}), which resolves host names itself:          the address rules (link-local{}) are checked only on IP literals and metadata names;          set allow_unchecked_proxy = true to accept this without the warning",
        crawler_core::redact::redact_url(&proxy),
        if settings.deny_private_addresses {
            ", deny_private_addresses"
        } else {
            ""
        }
    ))
}

/// The proxy requests go through, with where it was set; `None` without one.
pub(crate) fn proxy_in_use(
    settings: &Settings,
    env: impl IntoIterator<Item = (String, String)>,
) -> Option<(String, String)> {
    // A `[[hosts]]` rule's proxy routes some hosts only, but those are as unchecked.
    let rule = settings.hosts.iter().find_map(|r| {
        let p = r.proxy.as_deref().filter(|p| !p.trim().is_empty())?;
        Some((p.to_owned(), format!("the [[hosts]] rule '{}'", r.pattern)))
    });
    match settings.proxy.as_deref().filter(|p| !p.trim().is_empty()) {
        Some(p) => Some((p.to_owned(), "the proxy setting".to_owned())),
        None if rule.is_some() => rule,
        None => env
            .into_iter()
            .find(|(k, v)| PROXY_ENV_VARS.contains(&k.as_str()) && !v.trim().is_empty())
            .map(|(k, v)| (v, format!("the {k} environment variable"))),
    }
}

/// The process environment as UTF-8 pairs (for [`unchecked_proxy`] and the proxy check).
pub fn process_env() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
}

/// The HTTP client's resolver: the crawl's shared [`Resolver`] (asynchronous, with TTLs),
/// dropping the addresses the policy refuses and failing when none are left. A metadata
/// name is refused before any lookup.
pub(crate) struct Guarded {
    pub(crate) resolver: Arc<Resolver>,
    pub(crate) policy: Arc<AddressPolicy>,
    /// Whether requests through this resolver's client may reach private space.
    pub(crate) private_ok: bool,
}

#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for Refused {}

impl Resolve for Guarded {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let policy = Arc::clone(&self.policy);
        let resolver = Arc::clone(&self.resolver);
        let private_ok = self.private_ok;
        Box::pin(async move {
            let refused =
                |msg: String| Box::new(Refused(msg)) as Box<dyn std::error::Error + Send + Sync>;
            if is_metadata_host(&host) && !policy.names_host(&host) {
                return Err(refused(format!(
                    "{REFUSED}: {host} is a cloud metadata service (name it in allow_addresses to reach it)"
                )));
            }
            let addrs: Vec<SocketAddr> = resolver
                .lookup(&host)
                .await
                .map_err(|why| {
                    Box::new(LookupFailed(why)) as Box<dyn std::error::Error + Send + Sync>
                })?
                .iter()
                .map(|&ip| SocketAddr::new(ip, 0))
                .collect();
            let mut why = None;
            let allowed: Vec<SocketAddr> = addrs
                .into_iter()
                .filter(|a| match policy.refusal(&host, a.ip(), private_ok) {
                    None => true,
                    Some(w) => {
                        why.get_or_insert(w);
                        false
                    }
                })
                .collect();
            match why {
                Some(w) if allowed.is_empty() => Err(refused(w)),
                _ => Ok(Box::new(allowed.into_iter()) as Addrs),
            }
        })
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

    fn policy(deny_private: bool, allow: &[&str]) -> AddressPolicy {
        let settings = Settings {
            deny_private_addresses: deny_private,
            allow_addresses: allow.iter().map(|s| (*s).to_owned()).collect(),
            ..Settings::default()
        };
        AddressPolicy::from_settings(&settings).unwrap()
    }

    #[test]
    fn link_local_and_metadata_are_refused_unless_named() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for p in [policy(false, &[]), policy(true, &[])] {
            for private_ok in [true, false] {
                let why = p.refusal("h", ip("169.254.169.254"), private_ok).unwrap();
                assert!(
                    why.starts_with(REFUSED) && why.contains("allow_addresses"),
                    "{why}"
                );
                assert!(p.refusal("h", ip("fe80::1"), private_ok).is_some());
                assert!(p.refusal("h", ip("8.8.8.8"), private_ok).is_none());
            }
        }
        let named = policy(
            true,
            &["169.254.169.254", "fe80::/10", "Metadata.Google.Internal"],
        );
        assert!(named.refusal("h", ip("169.254.169.254"), false).is_none());
        assert!(named.refusal("h", ip("169.254.169.253"), false).is_some());
        assert!(named.refusal("h", ip("fe80::abcd"), false).is_none());
        let url = |s: &str| Url::parse(s).unwrap();
        assert!(
            named
                .refuse_url(&url("http://metadata.google.internal/x"), true)
                .is_none()
        );
        let open = policy(false, &[]);
        for u in [
            "http://169.254.169.254/latest/meta-data/",
            "http://[fe80::1]/",
            "http://metadata.google.internal/computeMetadata/v1/",
            "http://METADATA/",
        ] {
            assert!(open.refuse_url(&url(u), true).is_some(), "{u}");
        }
        assert!(open.refuse_url(&url("http://example.com/"), true).is_none());
        assert!(
            open.refuse_url(&url("http://127.0.0.1:8080/"), false)
                .is_none()
        );
    }

    #[test]
    fn private_space_is_refused_only_from_public_pages_when_denied() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let deny = policy(true, &[]);
        for private in ["127.0.0.1", "10.0.0.1", "192.168.1.1", "fd00::1", "::1"] {
            assert!(deny.refusal("h", ip(private), true).is_none(), "{private}");
            let why = deny.refusal("h", ip(private), false).unwrap();
            assert!(why.contains("deny_private_addresses"), "{why}");
            assert!(
                policy(false, &[])
                    .refusal("h", ip(private), false)
                    .is_none()
            );
        }
        let ranged = policy(true, &["10.0.0.0/8", "intranet.corp"]);
        assert!(ranged.refusal("h", ip("10.9.8.7"), false).is_none());
        assert!(ranged.refusal("h", ip("::ffff:10.9.8.7"), false).is_none());
        assert!(ranged.refusal("h", ip("192.168.1.1"), false).is_some());
        assert!(
            ranged
                .refusal("intranet.corp", ip("192.168.1.1"), false)
                .is_none()
        );
        for bad in ["10.0.0.0/33", "fe80::/129", "a b", "http://x/"] {
            let s = Settings {
                allow_addresses: vec![bad.to_owned()],
                ..Settings::default()
            };
            assert!(AddressPolicy::from_settings(&s).is_err(), "{bad}");
        }
    }

    #[test]
    fn start_requests_may_reach_private_space_and_follow_ups_as_marked() {
        let start = Request::get("http://127.0.0.1/").unwrap();
        assert!(private_ok(&start));
        let from_public = start.clone().meta(FROM_PRIVATE_META, false).unwrap();
        assert!(!private_ok(&from_public));
        let from_private = start.clone().meta(FROM_PRIVATE_META, true).unwrap();
        assert!(private_ok(&from_private));
        // Unmarked follow-ups and redirect hops came from public pages.
        let mut link = start.clone();
        link.depth = 1;
        assert!(!private_ok(&link));
        let mut hop = start;
        hop.redirect_urls
            .push(Url::parse("http://a.example/").unwrap());
        assert!(!private_ok(&hop));
    }

    #[tokio::test]
    async fn the_resolver_checks_every_address_it_hands_out() {
        let resolve = |deny: bool, private_ok: bool, name: &'static str| {
            let g = Guarded {
                resolver: Resolver::from_settings(&Settings::default()).unwrap(),
                policy: Arc::new(policy(deny, &[])),
                private_ok,
            };
            g.resolve(name.parse().unwrap())
        };
        let err = match resolve(true, false, "localhost").await {
            Err(e) => e.to_string(),
            Ok(_) => panic!("localhost reached from a public page"),
        };
        assert!(err.starts_with(REFUSED), "{err}");
        assert!(resolve(true, true, "localhost").await.is_ok());
        assert!(resolve(false, false, "localhost").await.is_ok());
        // A metadata name is refused before any lookup.
        let err = match resolve(false, true, "metadata.google.internal").await {
            Err(e) => e.to_string(),
            Ok(_) => panic!("metadata name resolved"),
        };
        assert!(err.contains("metadata"), "{err}");
    }

    #[test]
    fn a_proxy_the_guard_cannot_see_through_is_warned_of_unless_accepted() {
        let mut s = Settings::default();
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
        // Link-local checks stop at the proxy too: the warning stands without the private rule.
        s.allow_unchecked_proxy = false;
        s.deny_private_addresses = false;
        let why = unchecked_proxy(&s, Vec::new()).unwrap();
        assert!(
            why.contains("link-local") && !why.contains("deny_private"),
            "{why}"
        );
    }
}
