//! The `referer` spider middleware: which `Referer` follow-up requests carry, by policy.

use std::sync::atomic::{AtomicU64, Ordering};

use url::Url;

use crate::error::{Error, ErrorKind, Result};
use crate::request::Request;

use super::spider::{Page, SpiderMiddleware};

/// The referer policies `referer_policy` accepts.
pub const REFERER_POLICIES: &[&str] = &[
    "default",
    "no-referrer",
    "same-origin",
    "origin",
    "unsafe-url",
];

/// Sets the `Referer` of follow-up requests by policy (the `referer` spider middleware).
///
/// - `default` (`no-referrer-when-downgrade`, browsers' and Scrapy's default): the page URL,
///   except from an https page to an http URL, which gets none.
/// - `no-referrer`: never.
/// - `same-origin`: the page URL to the same origin only.
/// - `origin`: only the page's origin (`https://host/`).
/// - `unsafe-url`: always the page URL.
///
/// The URL sent never carries the page's fragment or user:password. A `Referer` the spider
/// set itself is left alone.
#[derive(Debug)]
pub struct RefererPolicy {
    policy: Policy,
    removed: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Default,
    NoReferrer,
    SameOrigin,
    Origin,
    UnsafeUrl,
}

impl RefererPolicy {
    /// A policy by name (one of [`REFERER_POLICIES`]).
    pub fn new(name: &str) -> Result<Self> {
        let policy = match name.trim().to_ascii_lowercase().as_str() {
            "default" | "no-referrer-when-downgrade" => Policy::Default,
            "no-referrer" => Policy::NoReferrer,
            "same-origin" => Policy::SameOrigin,
            "origin" => Policy::Origin,
            "unsafe-url" => Policy::UnsafeUrl,
            other => {
                return Err(Error::new(
                    ErrorKind::Settings,
                    format!(
                        "unknown referer_policy '{other}'; expected one of {}",
                        REFERER_POLICIES.join(", ")
                    ),
                ));
            }
        };
        Ok(Self {
            policy,
            removed: AtomicU64::new(0),
        })
    }

    /// The Referer value for a request to `target` from `page`; `None` for none.
    pub fn referer_for(&self, page: &Url, target: &Url) -> Option<String> {
        let mut clean = page.clone();
        clean.set_fragment(None);
        let _ = clean.set_username("");
        let _ = clean.set_password(None);
        match self.policy {
            Policy::NoReferrer => None,
            Policy::UnsafeUrl => Some(clean.to_string()),
            Policy::Default => (!(page.scheme() == "https" && target.scheme() == "http"))
                .then(|| clean.to_string()),
            Policy::SameOrigin => (page.origin() == target.origin()).then(|| clean.to_string()),
            Policy::Origin => Some(format!("{}/", page.origin().ascii_serialization())),
        }
    }
}

impl<I> SpiderMiddleware<I> for RefererPolicy {
    fn name(&self) -> &str {
        "referer"
    }

    fn process_output(&self, page: &Page, _items: &mut Vec<I>, requests: &mut Vec<Request>) {
        for r in requests.iter_mut() {
            if r.header_value("referer").is_some() {
                continue;
            }
            match self.referer_for(&page.url, &r.url) {
                Some(v) => r.headers.push(("Referer".to_owned(), v)),
                None => {
                    // The engine adds the page URL to requests without a Referer; an empty
                    // one tells it there is one, and the downloader stack drops it.
                    self.removed.fetch_add(1, Ordering::Relaxed);
                    r.headers.push(("Referer".to_owned(), String::new()));
                }
            }
        }
    }

    fn counters(&self) -> Vec<(String, u64)> {
        vec![(
            "referer_removed".to_owned(),
            self.removed.load(Ordering::Relaxed),
        )]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn referer_policies() {
        let page = Url::parse("https://user:pw@a.example/p?q=1#frag").unwrap();
        let same = Url::parse("https://a.example/next").unwrap();
        let other = Url::parse("https://b.example/x").unwrap();
        let down = Url::parse("http://a.example/plain").unwrap();
        let full = Some("https://a.example/p?q=1".to_owned());
        let r = |name: &str, to: &Url| RefererPolicy::new(name).unwrap().referer_for(&page, to);
        assert_eq!(r("default", &other), full);
        assert_eq!(r("default", &down), None, "no referer on a downgrade");
        assert_eq!(r("no-referrer", &same), None);
        assert_eq!(r("same-origin", &same), full);
        assert_eq!(r("same-origin", &other), None);
        assert_eq!(r("origin", &other).as_deref(), Some("https://a.example/"));
        assert_eq!(r("unsafe-url", &down), full);
        assert!(RefererPolicy::new("sometimes").is_err());
    }
}
