//! The http_auth middleware: HTTP Basic credentials for one domain and its subdomains.

use std::sync::atomic::{AtomicU64, Ordering};

use crawler_core::redact::base64;
use crawler_core::{Action, DownloaderMiddleware, Request};
use url::Url;

use super::has_header;

/// HTTP Basic credentials for one domain and its subdomains, and nowhere else
/// (`http_auth_domain`, `http_auth_user`, `http_auth_pass`). A request that sets its own
/// `Authorization` keeps it.
pub struct HttpAuth {
    domain: String,
    header: String,
    sent: AtomicU64,
}

impl std::fmt::Debug for HttpAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The header is the password in thin disguise: keep it out of logs.
        f.debug_struct("HttpAuth")
            .field("domain", &self.domain)
            .finish_non_exhaustive()
    }
}

impl HttpAuth {
    /// Credentials `user:pass` for `domain` (a host name; its subdomains match too).
    pub fn new(domain: &str, user: &str, pass: &str) -> Self {
        Self {
            domain: domain.trim().trim_start_matches('.').to_ascii_lowercase(),
            header: format!("Basic {}", base64(format!("{user}:{pass}").as_bytes())),
            sent: AtomicU64::new(0),
        }
    }

    /// Whether requests to `url` get the credentials.
    pub fn applies_to(&self, url: &Url) -> bool {
        let Some(host) = url.host_str() else {
            return false;
        };
        crawler_core::matching::host_in_domain(host, &self.domain)
    }
}

impl DownloaderMiddleware for HttpAuth {
    fn name(&self) -> &str {
        "http_auth"
    }

    async fn process_request(&self, request: &mut Request) -> Action {
        if self.applies_to(&request.url) && !has_header(request, "authorization") {
            request
                .headers
                .push(("Authorization".to_owned(), self.header.clone()));
            self.sent.fetch_add(1, Ordering::Relaxed);
        }
        Action::Continue
    }

    fn counters(&self) -> Vec<(String, u64)> {
        vec![("auth_sent".to_owned(), self.sent.load(Ordering::Relaxed))]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
            ("reader:books", "cmVhZGVyOmJvb2tz"),
        ] {
            assert_eq!(base64(plain.as_bytes()), enc, "{plain}");
        }
    }

    #[tokio::test]
    async fn auth_goes_only_to_the_domain_and_its_subdomains() {
        let auth = HttpAuth::new("Example.com", "reader", "books");
        for (to, expect) in [
            ("http://example.com/", true),
            ("https://api.example.com/x", true),
            ("http://badexample.com/", false),
            ("http://example.com.evil.org/", false),
            ("http://other.org/", false),
        ] {
            let mut r = Request::get(to).unwrap();
            auth.process_request(&mut r).await;
            let want = expect.then_some("Basic cmVhZGVyOmJvb2tz");
            assert_eq!(r.header_value("authorization"), want, "{to}");
        }
        assert!(!format!("{auth:?}").contains("cmVh"), "no secret in Debug");
    }
}
