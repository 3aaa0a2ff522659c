//! Requests: what to fetch, and what to remember about why.

use serde::{Deserialize, Serialize};
use url::Url;

use crate::error::{Error, ErrorKind, Result};

/// Request meta key: the proxy this request goes through (set by [`Request::proxy`]),
/// winning over the `[[hosts]]` rule's and the crawl's `proxy`.
pub const PROXY_META: &str = "proxy";

/// One HTTP request the crawler will make.
///
/// Requests are plain data and serialisable, because the frontier may persist them (sled) or
/// share them between workers (Redis): the callback is a name, and meta is JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The absolute http(s) URL.
    pub url: Url,
    /// The HTTP method, upper case (`GET` by default).
    #[serde(default = "default_method", skip_serializing_if = "is_get")]
    pub method: String,
    /// Extra request headers, in order. Names are case-insensitive.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// The request body, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Vec<u8>>,
    /// Higher runs sooner within a host's queue.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub priority: i32,
    /// Links followed from the start requests to reach this one (start requests are depth 0).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub depth: u32,
    /// The name of the spider callback that parses the response; `None` means the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<String>,
    /// The name of the spider's errback that receives this request's failure
    /// ([`Spider::errback`](crate::Spider::errback)); `None`: a failure goes to the failures
    /// file and the stats only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errback: Option<String>,
    /// Free-form data carried from the page that made this request to the one that parses it.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub meta: serde_json::Map<String, serde_json::Value>,
    /// Skip the duplicate filter for this request.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dont_filter: bool,
    /// How many times this request has already been retried.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub retries: u32,
    /// The URLs this request was redirected from, oldest first (Scrapy's `redirect_urls`):
    /// empty for a request that is not a redirect hop.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redirect_urls: Vec<Url>,
}

fn default_method() -> String {
    "GET".to_owned()
}
fn is_get(m: &str) -> bool {
    m == "GET"
}
fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}
fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

/// Parse an absolute URL and insist on http or https.
pub fn parse_http_url(s: &str) -> Result<Url> {
    let text = s.trim();
    let parsed = Url::parse(text);
    // `example.com/page` (no scheme) does not parse, and `localhost:8080/page` parses with
    // the scheme `localhost`: both were meant as http URLs.
    // (`mailto:x@example.com` is a real scheme, not a host: only a scheme that looks like a
    // host name, or one followed by a port, is taken for a missing `http://`.)
    let schemeless = !text.contains("://")
        && match &parsed {
            Err(url::ParseError::RelativeUrlWithoutBase) => true,
            Ok(u) if !matches!(u.scheme(), "http" | "https") => {
                let rest = text.get(u.scheme().len() + 1..).unwrap_or("");
                u.scheme().contains('.')
                    || u.scheme() == "localhost"
                    || rest.starts_with(|c: char| c.is_ascii_digit())
            }
            _ => false,
        };
    if schemeless
        && let Ok(guess) = Url::parse(&format!("http://{text}"))
        && guess.host().is_some()
    {
        return Err(Error::new(
            ErrorKind::Url,
            format!("'{text}' has no scheme; did you mean '{guess}'?"),
        ));
    }
    let url = parsed
        .map_err(|e| Error::new(ErrorKind::Url, format!("invalid URL '{s}'")).with_source(e))?;
    check_scheme(url)
}

pub(crate) fn check_scheme(url: Url) -> Result<Url> {
    match url.scheme() {
        "http" | "https" if url.host().is_some() => Ok(url),
        "http" | "https" => Err(Error::new(
            ErrorKind::Url,
            format!("URL '{url}' has no host"),
        )),
        other => Err(Error::new(
            ErrorKind::Url,
            format!("URL '{url}' has scheme '{other}'; only http and https can be crawled"),
        )),
    }
}

/// A meta value as JSON, or an error naming its key when it does not serialise.
pub(crate) fn meta_value(key: &str, value: impl Serialize) -> Result<serde_json::Value> {
    serde_json::to_value(value).map_err(|e| {
        Error::new(
            ErrorKind::Other,
            format!("meta value for '{key}' is not serialisable"),
        )
        .with_source(e)
    })
}

impl Request {
    /// A GET request for an absolute http(s) URL: a `&str`, a `String` (`format!(..)`) or
    /// a `&String`.
    ///
    /// ```
    /// # use crawler_core::Request;
    /// let page = 2;
    /// let r = Request::get(format!("http://127.0.0.1/page-{page}.html")).unwrap();
    /// assert_eq!(r.url.path(), "/page-2.html");
    /// ```
    pub fn get(url: impl AsRef<str>) -> Result<Self> {
        Ok(Self::new(parse_http_url(url.as_ref())?))
    }

    /// A GET request for an already parsed URL.
    pub fn new(url: Url) -> Self {
        Self {
            url,
            method: default_method(),
            headers: Vec::new(),
            body: None,
            priority: 0,
            depth: 0,
            callback: None,
            errback: None,
            meta: serde_json::Map::new(),
            dont_filter: false,
            retries: 0,
            redirect_urls: Vec::new(),
        }
    }

    /// Set the callback that will parse the response.
    pub fn callback(mut self, name: impl Into<String>) -> Self {
        self.callback = Some(name.into());
        self
    }

    /// Name the errback that receives this request's failure (after its retries): a
    /// [`FailedRequest`](crate::FailedRequest) given to
    /// [`Spider::errback`](crate::Spider::errback), which can still emit items and requests.
    /// Scrapy's `errback=`.
    pub fn errback(mut self, name: impl Into<String>) -> Self {
        self.errback = Some(name.into());
        self
    }

    /// Hand answers with these statuses to the callback instead of failing the request
    /// (Scrapy's meta `handle_httpstatus_list`): it replaces the spider's
    /// [`allowed_statuses`](crate::Spider::allowed_statuses) and the `allowed_statuses`
    /// setting for this request. Retries come first (an allowed 503 is still retried), and
    /// a listed redirect status is handed over instead of followed.
    pub fn allow_statuses(mut self, statuses: impl IntoIterator<Item = u16>) -> Self {
        let list: Vec<serde_json::Value> = statuses.into_iter().map(Into::into).collect();
        self.meta.insert(
            crate::statuses::HANDLE_HTTPSTATUS_LIST_META.to_owned(),
            serde_json::Value::Array(list),
        );
        self
    }

    /// Hand every answer to the callback, whatever its status (Scrapy's meta
    /// `handle_httpstatus_all`): retries come first, and redirects are not followed.
    pub fn allow_all_statuses(mut self) -> Self {
        self.meta.insert(
            crate::statuses::HANDLE_HTTPSTATUS_ALL_META.to_owned(),
            serde_json::Value::Bool(true),
        );
        self
    }

    /// Set the priority (higher first).
    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }

    /// Set the method, e.g. `"POST"`.
    pub fn method(mut self, method: &str) -> Self {
        self.method = method.to_ascii_uppercase();
        self
    }

    /// Add a request header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Set the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// Bypass the duplicate filter.
    pub fn dont_filter(mut self) -> Self {
        self.dont_filter = true;
        self
    }

    /// Send this request through the proxy at `url` (`http://user:pass@host:port`,
    /// `https://`, `socks5://` or `socks5h://`), whatever the `[[hosts]]` rule or the crawl's `proxy` say (Scrapy's
    /// `meta["proxy"]`). Kept in the meta under [`PROXY_META`], so it persists with the
    /// request; politeness stays per target host.
    ///
    /// Persisting means that with a `job_dir` the URL, password included, is written in
    /// the job directory's queue (as Scrapy's `meta["proxy"]` is in its `JOBDIR`). Keep
    /// that directory as private as the password, or put passworded proxies in the `proxy`
    /// setting or a `[[hosts]]` rule instead: those are not stored with the requests. Logs,
    /// errors, stats and the failures file show it redacted.
    pub fn proxy(mut self, url: impl Into<String>) -> Self {
        self.meta
            .insert(PROXY_META.into(), serde_json::Value::String(url.into()));
        self
    }

    /// Attach a value (any `Serialize`) under `key`, readable with [`crate::Response::meta`].
    pub fn meta(mut self, key: impl Into<String>, value: impl Serialize) -> Result<Self> {
        let key = key.into();
        let v = meta_value(&key, value)?;
        self.meta.insert(key, v);
        Ok(self)
    }

    /// The value of a request header, matched case-insensitively.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_without_a_scheme_gets_a_suggestion() {
        for (typed, meant) in [
            ("example.com/page", "http://example.com/page"),
            ("localhost:8080/x", "http://localhost:8080/x"),
            ("127.0.0.1:8080", "http://127.0.0.1:8080/"),
            ("books.test:81", "http://books.test:81/"),
        ] {
            let e = parse_http_url(typed).unwrap_err().to_string();
            assert!(
                e.contains(&format!("did you mean '{meant}'")),
                "{typed}: {e}"
            );
        }
        // A real scheme that is not http stays the error it is.
        let e = parse_http_url("mailto:x@example.com")
            .unwrap_err()
            .to_string();
        assert!(e.contains("only http and https"), "{e}");
    }

    #[test]
    fn only_http_urls_are_requests() {
        assert!(Request::get("http://example.com/a").is_ok());
        let e = Request::get("mailto:x@example.com").unwrap_err();
        assert!(e.to_string().contains("only http and https"), "{e}");
        let e = Request::get("not a url").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Url);
    }

    #[test]
    fn requests_round_trip_through_json() {
        let r = Request::get("http://example.com/b?x=1")
            .unwrap()
            .callback("book")
            .priority(3);
        let r = r.meta("page", 7).unwrap();
        let json = serde_json::to_string(&r).unwrap();
        let back: Request = serde_json::from_str(&json).unwrap();
        assert_eq!(back, r);
        assert!(!json.contains("method"), "GET is implied: {json}");
    }
}
