//! `[[hosts]]` rules: settings for the hosts whose names match a glob. The rule type, its
//! fields and how a rule matches a host; applying a rule to the settings is
//! [`Settings::for_host`](crate::Settings::for_host), beside the fields it sets.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::matching::{Wildcard, wildcard_match};

/// Settings for the hosts whose names match a glob: written `[[hosts]]` in crawler.toml.
///
/// Only the fields given change; the rest come from the crawl's settings. Meant for hosts
/// you own or have an agreement with (raise the budget) and for fragile ones (lower it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRule {
    /// A glob on the host (with `:port` when the URL has a non-default port): `*` matches any
    /// run of characters, `?` one character. `*.example.com` matches `www.example.com` but
    /// not `example.com`. Case-insensitive.
    #[serde(rename = "match")]
    pub pattern: String,
    /// The ceiling on the host's rate, requests/s (sets `max_rate`), and the rate it starts at
    /// unless `start_rate` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Requests that may go back to back (sets `burst`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Requests in flight to the host (sets `concurrency_per_host`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    /// Delay between requests (sets `download_delay`), e.g. `"500ms"`.
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub delay: Option<Duration>,
    /// The rate the host starts at, requests/s (sets `start_rate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_rate: Option<f64>,
    /// Do not fetch or obey robots.txt on this host (sets `obey_robots = false`): only for
    /// hosts you own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_robots: Option<bool>,
    /// Render this host's pages in a browser (sets `render`; needs the `browser` feature).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub render: Option<bool>,
    /// The HTTP version spoken to this host: `"auto"`, `"1.1"` or `"2"` (sets
    /// `http_version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_version: Option<crate::settings::HttpVersion>,
    /// `false`: accept any certificate from this host, unverified (a host you own with a
    /// self-signed certificate; warned at start). Unset or `true`: verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_verify: Option<bool>,
    /// Send this host's requests through this proxy (`http://user:pass@host:port`,
    /// `https://`, `socks5://` or `socks5h://`), instead of the crawl's `proxy`; a request's own proxy wins over it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    /// The client certificate (PEM) presented to this host when it asks for one (sets
    /// `tls_client_cert`, and `tls_client_key` to this rule's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_cert: Option<String>,
    /// The private key (PEM) of this rule's `tls_client_cert`, when not in that file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_client_key: Option<String>,
}

/// The fields of a `[[hosts]]` rule, as written in crawler.toml.
pub const HOST_RULE_KEYS: &[&str] = &[
    "match",
    "rate",
    "burst",
    "concurrency",
    "delay",
    "start_rate",
    "ignore_robots",
    "render",
    "http_version",
    "tls_verify",
    "proxy",
    "tls_client_cert",
    "tls_client_key",
];

impl HostRule {
    /// Whether this rule applies to `host` (a host key, `host` or `host:port`). A pattern
    /// without a port also matches the host on any port.
    pub fn matches(&self, host: &str) -> bool {
        let pattern = self.pattern.to_ascii_lowercase();
        let host = host.to_ascii_lowercase();
        if wildcard_match(&pattern, &host, Wildcard::Glob) {
            return true;
        }
        match host.rsplit_once(':') {
            Some((name, port))
                if !pattern.contains(':')
                    && !port.is_empty()
                    && port.bytes().all(|b| b.is_ascii_digit()) =>
            {
                wildcard_match(&pattern, name, Wildcard::Glob)
            }
            _ => false,
        }
    }

    /// The first problem with this rule's values: (field, why).
    pub fn problem(&self) -> Option<(&'static str, String)> {
        let positive = |r: f64| r.is_finite() && r > 0.0;
        if self.pattern.trim().is_empty() {
            return Some(("match", "must not be empty".into()));
        }
        if self.rate.is_some_and(|r| !positive(r)) {
            return Some(("rate", "must be a positive number".into()));
        }
        if self.start_rate.is_some_and(|r| !positive(r)) {
            return Some(("start_rate", "must be a positive number".into()));
        }
        if self.burst == Some(0) {
            return Some(("burst", "must be at least 1".into()));
        }
        if self.concurrency == Some(0) {
            return Some(("concurrency", "must be at least 1".into()));
        }
        if self.tls_client_key.is_some() && self.tls_client_cert.is_none() {
            return Some((
                "tls_client_key",
                "needs its certificate (tls_client_cert) in the same rule".into(),
            ));
        }
        None
    }
}
