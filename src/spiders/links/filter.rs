//! One candidate href at a time: resolved to an http(s) URL, canonicalised, filtered and
//! deduplicated.

use std::collections::HashSet;

use url::Url;

use super::{Extracted, Link, LinkExtractor};

impl LinkExtractor {
    /// Resolve, filter and deduplicate one candidate href, recording the outcome.
    pub(super) fn consider(
        &self,
        base: &Url,
        href: &str,
        text: String,
        nofollow: bool,
        seen: &mut HashSet<String>,
        found: &mut Extracted,
    ) {
        let Some(mut url) = resolve(base, href) else {
            tracing::debug!(href, page = %base, "skipping link that is not an http(s) URL");
            found.invalid += 1;
            return;
        };
        if self.canonicalize {
            url.set_fragment(None);
        }
        if !self.wanted(&url, nofollow) {
            found.filtered += 1;
            return;
        }
        if self.unique && !seen.insert(url.as_str().to_owned()) {
            found.duplicates += 1;
            return;
        }
        found.links.push(Link {
            url,
            text,
            nofollow,
        });
    }

    /// The filters, cheapest first.
    fn wanted(&self, url: &Url, nofollow: bool) -> bool {
        if nofollow && self.respect_nofollow {
            return false;
        }
        let host = url.host_str().unwrap_or_default();
        let host = host.strip_suffix('.').unwrap_or(host);
        if !self.allow_domains.is_empty()
            && !self
                .allow_domains
                .iter()
                .any(|d| crawler_core::matching::host_in_domain(host, d))
        {
            return false;
        }
        if self
            .deny_domains
            .iter()
            .any(|d| crawler_core::matching::host_in_domain(host, d))
        {
            return false;
        }
        if self.has_denied_extension(url.path()) {
            return false;
        }
        let s = url.as_str();
        if !self.allow.is_empty() && !self.allow.is_match(s) {
            return false;
        }
        !self.deny.is_match(s)
    }

    fn has_denied_extension(&self, path: &str) -> bool {
        if self.deny_extensions.is_empty() {
            return false;
        }
        let file = path.rsplit('/').next().unwrap_or_default();
        if !file.contains('.') {
            return false;
        }
        let file = file.to_ascii_lowercase();
        // Every dotted suffix, so that both "tar.gz" and "gz" can be listed.
        file.match_indices('.')
            .any(|(i, _)| self.deny_extensions.contains(&file[i + 1..]))
    }
}

/// Resolve an href against the base; `None` unless the result is an http(s) URL with a host.
fn resolve(base: &Url, href: &str) -> Option<Url> {
    // HTML strips ASCII whitespace around attribute URLs; an empty href would otherwise
    // resolve to the page itself, which is never what a link to "nothing" means.
    let href = href.trim_matches(|c: char| c.is_ascii_whitespace());
    if href.is_empty() {
        return None;
    }
    let url = base.join(href).ok()?;
    (matches!(url.scheme(), "http" | "https") && url.host().is_some()).then_some(url)
}
