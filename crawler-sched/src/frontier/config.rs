//! What the frontier filters and how it keys hosts: [`FrontierConfig`], the slot keys of a
//! URL (host, registrable domain, IP address) and the allowed-domains filter.

use crawler_core::{HostKeyMode, Settings, Url};
use tokio::time::Instant;

use crate::resolve::IpKeys;
use crate::throttle::{Throttle, throttle_for};

/// The slot key of a URL: the host, plus the port when it is not the scheme's default, since
/// two ports on one address are often two servers with separate limits.
/// The registrable domain of a URL's host (`example.co.uk` for `a.b.example.co.uk`), from the
/// public suffix list; IP addresses and names without one keep their host key.
pub(super) fn domain_key(url: &Url) -> String {
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
    /// The addresses behind `HostKeyMode::Ip` and the limiter groups: the crawl's resolver,
    /// read without waiting (none by default: names key as themselves).
    pub ip_keys: std::sync::Arc<IpKeys>,
    /// Share holds across the host names behind one limiter (the `limiter_groups`
    /// setting): see [`FrontierConfig::group_addresses`].
    pub limiter_groups: bool,
    /// Whether limiter groups are keyed by the address a name resolves to; `false` keys them
    /// by host name (a proxy resolves names, not the crawler), and only joins after refusals
    /// bring names together.
    pub group_by_address: bool,
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

    /// The addresses a URL's host name shows its limiter groups' evidence, `None` with
    /// limiter groups off: every address it resolves to with the port, as
    /// [`IpKeys::address_keys`] writes them (an IP literal needs no lookup); none for a
    /// name that does not resolve (yet), or when groups do not read addresses (through a
    /// proxy). Never waits: the addresses are read from the resolver's cache (see
    /// [`IpKeys`]).
    pub fn group_addresses(&self, url: &Url) -> Option<Vec<String>> {
        if !self.limiter_groups {
            return None;
        }
        Some(if self.group_by_address {
            self.ip_keys.address_keys(url)
        } else {
            Vec::new()
        })
    }

    /// Whether keys or limiter groups read addresses, so the engine must resolve names
    /// before their requests are queued ([`IpKeys::resolve_ahead`]).
    pub fn needs_addresses(&self) -> bool {
        self.key_mode == HostKeyMode::Ip || (self.limiter_groups && self.group_by_address)
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
            limiter_groups: settings.limiter_groups,
            // Through a proxy the crawler never resolves names: the proxy does, perhaps
            // with another view of DNS, and a broad crawl would pay a lookup per name.
            group_by_address: settings
                .proxy
                .as_deref()
                .is_none_or(|p| p.trim().is_empty()),
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
