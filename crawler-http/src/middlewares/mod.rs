//! The built-in downloader middlewares: default headers, User-Agent, cookies, HTTP auth.
//!
//! Each is a small [`DownloaderMiddleware`](crawler_core::DownloaderMiddleware);
//! [`downloader_stack`] builds the stack the `downloader_middlewares` setting names, in its
//! order, with the ones added in code where `custom` stands.
//!
//! ```
//! use crawler_core::Settings;
//! use crawler_http::downloader_stack;
//!
//! let mut settings = Settings::default();
//! settings.set("downloader_middlewares", "cookies,custom").unwrap();
//! let stack = downloader_stack(&settings, Vec::new()).unwrap();
//! assert_eq!(stack.len(), 1);
//! ```
//!
//! The folder: this file builds the stack from the settings; each middleware has its own
//! file and touches only the request or response it is handed (and its own counters and
//! state), never another middleware's, the network or the settings.

mod cookies;
mod default_headers;
mod http_auth;
mod user_agent;

use crawler_core::{
    BoxedDownloaderMiddleware, DOWNLOADER_MIDDLEWARES, Request, Result, Settings, order_stack,
};

pub use cookies::{
    COOKIEJAR_META, Cookies, DONT_MERGE_COOKIES_META, MAX_COOKIE_BYTES, MAX_COOKIES_PER_DOMAIN,
    MAX_COOKIES_TOTAL,
};
pub use default_headers::DefaultHeaders;
pub use http_auth::HttpAuth;
pub use user_agent::UserAgent;

/// The stack `settings.downloader_middlewares` names, in order, with `custom` (the
/// middlewares added in code, in the order given) where it is listed or at the end.
pub fn downloader_stack(
    settings: &Settings,
    custom: Vec<BoxedDownloaderMiddleware>,
) -> Result<Vec<BoxedDownloaderMiddleware>> {
    order_stack(
        &settings.downloader_middlewares,
        DOWNLOADER_MIDDLEWARES,
        |name| builtin(name, settings),
        custom,
    )
}

/// One built-in by name, or `None` when its settings switch it off.
fn builtin(name: &str, s: &Settings) -> Result<Option<BoxedDownloaderMiddleware>> {
    Ok(match name {
        "default_headers" => Some(Box::new(DefaultHeaders::from_lines(&s.default_headers)?)),
        "user_agent" => Some(Box::new(UserAgent::new(&s.user_agent))),
        "cookies" => s
            .cookies_enabled
            .then(|| Box::new(Cookies::new()) as BoxedDownloaderMiddleware),
        "http_auth" => match (&s.http_auth_domain, &s.http_auth_user) {
            (Some(domain), Some(user)) => Some(Box::new(HttpAuth::new(
                domain,
                user,
                s.http_auth_pass.as_deref().unwrap_or(""),
            ))),
            // Checked here rather than when each setting is set: layers set them one by one.
            (Some(_), None) => {
                return Err(crawler_core::Error::new(
                    crawler_core::ErrorKind::Settings,
                    "http_auth_domain is set but http_auth_user is not",
                ));
            }
            (None, _) => None,
        },
        _ => None,
    })
}

fn has_header(req: &Request, name: &str) -> bool {
    req.header_value(name).is_some()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crawler_core::DownloaderMiddleware;

    #[test]
    fn the_stack_follows_the_setting_and_places_custom() {
        struct Mine;
        impl DownloaderMiddleware for Mine {
            fn name(&self) -> &str {
                "mine"
            }
        }
        let mut s = Settings::default();
        let names = |stack: Vec<BoxedDownloaderMiddleware>| {
            stack
                .iter()
                .map(|m| m.name().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(downloader_stack(&s, vec![Box::new(Mine)]).unwrap()),
            ["default_headers", "user_agent", "cookies", "mine"]
        );
        s.set("downloader_middlewares", "custom,cookies").unwrap();
        s.set("http_auth_domain", "example.com").unwrap();
        s.set("http_auth_user", "u").unwrap();
        assert_eq!(
            names(downloader_stack(&s, vec![Box::new(Mine)]).unwrap()),
            ["mine", "cookies"]
        );
        s.set("downloader_middlewares", "http_auth,cookies")
            .unwrap();
        s.set("cookies_enabled", "false").unwrap();
        assert_eq!(
            names(downloader_stack(&s, vec![Box::new(Mine)]).unwrap()),
            ["http_auth", "mine"]
        );
        let e = s.set("downloader_middlewares", "cookie").unwrap_err();
        assert!(e.to_string().contains("unknown middleware 'cookie'"), "{e}");
    }
}
