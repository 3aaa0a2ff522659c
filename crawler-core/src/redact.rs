//! One rule for secrets, wherever text leaves the process: the `settings` listing, log
//! lines, error messages and metrics.
//!
//! - Settings that are secrets ([`SECRET_SETTINGS`]) are shown as `***` when set.
//! - In any URL, the password of the user info (`scheme://user:PASSWORD@host`) and the value
//!   of a password-like query parameter (`?pass=`, `password=`, `token=`, ...: how
//!   `redis+unix://` URLs carry theirs) become `***`.
//! - Secrets the crawl was configured with ([`register_secrets`]) are replaced wherever
//!   they appear, which catches them inside messages that do not look like URLs (an
//!   HTTP Basic header, a library's error text). They are registered in one place,
//!   [`Settings::validate`], which every run path passes before it logs (resolving the
//!   settings layers, a crawl's effective settings, logging set up from settings).
//!
//! ```
//! use crawler_core::redact::{redact_text, redact_url};
//!
//! assert_eq!(redact_url("redis://:hunter2@db:6379/0"), "redis://:***@db:6379/0");
//! assert_eq!(
//!     redact_url("redis+unix:///run/redis.sock?db=1&pass=hunter2"),
//!     "redis+unix:///run/redis.sock?db=1&pass=***"
//! );
//! assert_eq!(
//!     redact_text("cannot connect to http://bob:s3cret@proxy:3128: refused"),
//!     "cannot connect to http://bob:***@proxy:3128: refused"
//! );
//! ```

use std::borrow::Cow;
use std::sync::RwLock;

use crate::settings::Settings;

/// What a secret is replaced with.
pub const REDACTED: &str = "***";

/// Settings whose whole value is a secret.
pub const SECRET_SETTINGS: &[&str] = &["http_auth_pass", "feed_s3_secret_access_key"];

/// Settings holding a URL that may carry credentials.
pub const URL_SETTINGS: &[&str] = &["redis_url", "proxy", "feed_s3_endpoint"];

/// Environment variables holding object storage credentials, read when a feed goes to
/// object storage: their values are scrubbed like the secret settings.
pub const SECRET_ENV_VARS: &[&str] = &[
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_CLIENT_SECRET",
];

/// Query parameters whose values are secrets (compared case-insensitively).
const SECRET_PARAMS: &[&str] = &[
    "pass",
    "password",
    "passwd",
    "pwd",
    "token",
    "secret",
    "api_key",
    "apikey",
    "access_token",
];

/// Shorter registered secrets are not scrubbed from free text: replacing every "ab" in
/// every log line would garble the logs and hide nothing worth hiding.
const MIN_SCRUBBED_LEN: usize = 4;

/// Secrets registered by [`register_secrets`], scrubbed by [`scrub`].
static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// A setting's value as it may be shown: `***` for a secret setting, URLs redacted.
pub fn redact_setting(key: &str, value: &str) -> String {
    if SECRET_SETTINGS.contains(&key) {
        if value.is_empty() {
            String::new()
        } else {
            REDACTED.to_owned()
        }
    } else {
        redact_text(value).into_owned()
    }
}

/// `url` with its user-info password and password-like query values replaced by `***`.
/// Text that is not a URL comes back with the same rule applied to any URL inside it.
pub fn redact_url(url: &str) -> String {
    redact_text(url).into_owned()
}

/// Apply the URL rule to every URL in `text` (log lines, error messages).
pub fn redact_text(text: &str) -> Cow<'_, str> {
    let mut out: Option<String> = None;
    let bytes = text.as_bytes();
    let mut copied = 0;
    let push = |out: &mut Option<String>, upto: usize, copied: &mut usize| {
        let o = out.get_or_insert_with(|| String::with_capacity(text.len()));
        o.push_str(&text[*copied..upto]);
        o.push_str(REDACTED);
    };
    // User info: `://user:PASSWORD@` up to the end of the authority.
    let mut at = 0;
    let mut spans: Vec<(usize, usize)> = Vec::new();
    while let Some(found) = text[at..].find("://") {
        let start = at + found + 3;
        let end = text[start..]
            .find(|c: char| {
                matches!(c, '/' | '?' | '#' | '"' | '\'' | '<' | '>' | '`') || c.is_whitespace()
            })
            .map_or(text.len(), |e| start + e);
        let authority = &text[start..end];
        if let Some(at_sign) = authority.rfind('@')
            && let Some(colon) = authority[..at_sign].find(':')
            && colon + 1 < at_sign
        {
            spans.push((start + colon + 1, start + at_sign));
        }
        at = end.max(start);
    }
    // Query values: `?pass=VALUE` / `&password=VALUE`.
    for (i, &b) in bytes.iter().enumerate() {
        if b != b'?' && b != b'&' {
            continue;
        }
        let rest = &text[i + 1..];
        let Some(eq) = rest.find('=') else { continue };
        let name = &rest[..eq];
        if !SECRET_PARAMS.iter().any(|p| p.eq_ignore_ascii_case(name)) {
            continue;
        }
        let start = i + 1 + eq + 1;
        let end = text[start..]
            .find(|c: char| {
                matches!(c, '&' | '#' | '"' | '\'' | '<' | '>' | '`') || c.is_whitespace()
            })
            .map_or(text.len(), |e| start + e);
        if end > start {
            spans.push((start, end));
        }
    }
    if spans.is_empty() {
        return Cow::Borrowed(text);
    }
    spans.sort_unstable();
    for (start, end) in spans {
        if start < copied {
            continue;
        }
        push(&mut out, start, &mut copied);
        copied = end;
    }
    let mut out = out.unwrap_or_default();
    out.push_str(&text[copied..]);
    Cow::Owned(out)
}

/// Remember the secrets in `settings` (the HTTP auth password and its Basic header, the
/// passwords inside `redis_url` and `proxy`), so [`scrub`] removes them from any text.
pub fn register_secrets(settings: &Settings) {
    let mut found = Vec::new();
    if let Some(pass) = settings.http_auth_pass.as_deref().filter(|p| !p.is_empty()) {
        found.push(pass.to_owned());
        let user = settings.http_auth_user.as_deref().unwrap_or("");
        found.push(base64(format!("{user}:{pass}").as_bytes()));
    }
    for url in [&settings.redis_url, &settings.proxy].into_iter().flatten() {
        found.extend(url_secrets(url));
    }
    for url in settings.hosts.iter().filter_map(|r| r.proxy.as_ref()) {
        found.extend(url_secrets(url));
    }
    if let Some(key) = settings.feed_s3_secret_access_key.as_deref() {
        found.push(key.to_owned());
    }
    if let Some(url) = settings.feed_s3_endpoint.as_deref() {
        found.extend(url_secrets(url));
    }
    // Credentials from the environment reach the object store client, and through its
    // errors, the logs.
    if settings
        .feeds
        .iter()
        .any(|f| crate::feed::object_scheme(f).is_some())
    {
        found.extend(
            SECRET_ENV_VARS
                .iter()
                .filter_map(|var| std::env::var(var).ok())
                .filter(|v| !v.is_empty()),
        );
    }
    register(found);
}

/// Remember the password `url` carries (a request's own proxy), so [`scrub`] removes it
/// from any text.
pub fn register_url_secrets(url: &str) {
    register(url_secrets(url));
}

/// Add secrets to scrub from every text [`scrub`] sees.
pub fn register(secrets: impl IntoIterator<Item = String>) {
    let mut list = SECRETS.write().unwrap_or_else(|e| e.into_inner());
    for s in secrets {
        if s.len() >= MIN_SCRUBBED_LEN && !list.contains(&s) {
            list.push(s);
        }
    }
    // Longest first, so a secret that contains another is replaced whole.
    list.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// The passwords a URL carries, raw and percent-decoded.
fn url_secrets(url: &str) -> Vec<String> {
    let mut out = Vec::new();
    let parsed = url::Url::parse(url).or_else(|_| url::Url::parse(&format!("http://{url}")));
    if let Ok(u) = parsed {
        if let Some(p) = u.password() {
            out.push(p.to_owned());
            if let Ok(decoded) = percent_decode(p) {
                out.push(decoded);
            }
        }
        for (k, v) in u.query_pairs() {
            if SECRET_PARAMS.iter().any(|p| p.eq_ignore_ascii_case(&k)) && !v.is_empty() {
                out.push(v.into_owned());
            }
        }
    }
    out
}

fn percent_decode(s: &str) -> Result<String, ()> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).map_err(|_| ())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ())
}

/// Standard base64 with padding (RFC 4648): what HTTP Basic credentials are sent as, so
/// the header value is known as a secret too.
pub fn base64(input: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `text` with the URL rule applied and every registered secret replaced by `***`.
pub fn scrub(text: &str) -> Cow<'_, str> {
    let list = SECRETS.read().unwrap_or_else(|e| e.into_inner());
    let mut text = redact_text(text);
    for secret in list.iter() {
        if text.contains(secret.as_str()) {
            text = Cow::Owned(text.replace(secret.as_str(), REDACTED));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn user_info_passwords_and_password_parameters_are_hidden() {
        for (text, want) in [
            ("redis://:pw12@h:1/0", "redis://:***@h:1/0"),
            ("rediss://user:pw12@h", "rediss://user:***@h"),
            ("http://u:p%40ss@proxy:3128/", "http://u:***@proxy:3128/"),
            ("http://user@proxy:3128/", "http://user@proxy:3128/"),
            (
                "redis+unix:///s.sock?db=0&pass=pw12",
                "redis+unix:///s.sock?db=0&pass=***",
            ),
            (
                "redis+unix:///s.sock?PASSWORD=pw12&db=0",
                "redis+unix:///s.sock?PASSWORD=***&db=0",
            ),
            (
                "error at 'http://a:b1@x/' and \"redis://:c2@y\"",
                "error at 'http://a:***@x/' and \"redis://:***@y\"",
            ),
            ("no url here: a:b@c", "no url here: a:b@c"),
            (
                "http://host/page?q=1&passage=ok",
                "http://host/page?q=1&passage=ok",
            ),
        ] {
            assert_eq!(redact_text(text), want, "{text}");
        }
        assert_eq!(redact_setting("http_auth_pass", "hunter2"), "***");
        assert_eq!(redact_setting("user_agent", "bot/1"), "bot/1");
    }

    #[test]
    fn registered_secrets_are_scrubbed_from_any_text() {
        let settings = Settings {
            http_auth_user: Some("reader".into()),
            http_auth_pass: Some("books-pass-1".into()),
            proxy: Some("http://u:pr%2Fxy-pass@127.0.0.1:9".into()),
            ..Settings::default()
        };
        register_secrets(&settings);
        let text = "Authorization: Basic cmVhZGVyOmJvb2tzLXBhc3MtMQ== failed with books-pass-1; \
                    proxy said pr/xy-pass";
        let clean = scrub(text);
        assert!(!clean.contains("books-pass-1"), "{clean}");
        assert!(!clean.contains("cmVhZGVyOmJvb2tzLXBhc3MtMQ=="), "{clean}");
        assert!(!clean.contains("pr/xy-pass"), "{clean}");
    }
}
