//! The cookies middleware: a bounded cookie jar per spider (RFC 6265, through `cookie_store`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use cookie_store::{Cookie, CookieError, CookieStore, RawCookie};
use crawler_core::{Action, After, DownloaderMiddleware, Request, Response};
use url::Url;

/// Request meta key: the name of the cookie jar a request uses (any JSON value; requests
/// without it share the spider's default jar), for crawls that keep several sessions.
pub const COOKIEJAR_META: &str = "cookiejar";
/// Request meta key: when `true`, the request neither sends nor stores cookies.
pub const DONT_MERGE_COOKIES_META: &str = "dont_merge_cookies";

/// The most cookies kept for one domain (RFC 6265 asks for at least 50; browsers keep about
/// that many). New ones past it are refused, so a hostile site cannot grow the jar.
pub const MAX_COOKIES_PER_DOMAIN: usize = 50;
/// The most cookies kept in all jars together (RFC 6265 asks for at least 3,000).
pub const MAX_COOKIES_TOTAL: usize = 3000;
/// The longest `Set-Cookie` line accepted, in bytes (RFC 6265 asks for at least 4,096).
pub const MAX_COOKIE_BYTES: usize = 4096;

/// A cookie jar per spider (one per crawl), honouring Domain, Path, Expires/Max-Age and
/// Secure (RFC 6265, through the `cookie_store` crate). Cookies a request sets itself win
/// over the jar's of the same name. `Set-Cookie` lines that do not parse, or that a host may
/// not set (another domain, or a public suffix such as `co.uk` from the public suffix list),
/// are ignored and counted; so are cookies past the caps ([`MAX_COOKIES_PER_DOMAIN`],
/// [`MAX_COOKIES_TOTAL`], [`MAX_COOKIE_BYTES`]), which bound the jar's memory whatever the
/// sites send.
///
/// Cookies set on a redirect the HTTP client followed by itself are not seen (the client
/// hands over only the final response); see the crawler's docs on redirects.
#[derive(Debug, Default)]
pub struct Cookies {
    jars: Mutex<HashMap<String, CookieStore>>,
    sent: AtomicU64,
    stored: AtomicU64,
    malformed: AtomicU64,
    rejected: AtomicU64,
    over_cap: AtomicU64,
}

impl Cookies {
    /// An empty jar.
    pub fn new() -> Self {
        Self::default()
    }

    fn jar_key(req: &Request) -> String {
        match req.meta.get(COOKIEJAR_META) {
            None => String::new(),
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
        }
    }

    fn skip(req: &Request) -> bool {
        req.meta
            .get(DONT_MERGE_COOKIES_META)
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false)
    }

    fn jars(&self) -> std::sync::MutexGuard<'_, HashMap<String, CookieStore>> {
        self.jars.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `Cookie` header value the jar would send to `url` (default jar), if any.
    pub fn header_for(&self, url: &Url) -> Option<String> {
        let jars = self.jars();
        let jar = jars.get("")?;
        let pairs: Vec<String> = jar
            .get_request_values(url)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        (!pairs.is_empty()).then(|| pairs.join("; "))
    }

    /// Store one `Set-Cookie` line received from `url` in jar `key`; false if ignored.
    fn store(&self, key: &str, line: &str, url: &Url) -> bool {
        if line.len() > MAX_COOKIE_BYTES {
            self.over_cap.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%url, bytes = line.len(), "ignoring an oversized Set-Cookie");
            return false;
        }
        let raw = match RawCookie::parse(line.to_owned()) {
            Ok(c) => c,
            Err(_) => {
                self.malformed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%url, "ignoring malformed Set-Cookie");
                return false;
            }
        };
        // A cookie for a public suffix (`Domain=co.uk`, `Domain=com`) would go to every
        // site under it; RFC 6265 section 5.3 step 5: refuse it unless the host is that name.
        if let Some(d) = raw.domain() {
            let d = d.trim_start_matches('.').to_ascii_lowercase();
            let host = url.host_str().map(str::to_ascii_lowercase);
            if host.as_deref() != Some(d.as_str()) && is_public_suffix(&d) {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%url, domain = %d, "ignoring a Set-Cookie for a public suffix");
                return false;
            }
        }
        let cookie = match Cookie::try_from_raw_cookie(&raw, url) {
            Ok(c) => c.into_owned(),
            Err(CookieError::Parse) => {
                self.malformed.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            Err(e) => {
                tracing::debug!(%url, "ignoring Set-Cookie: {e}");
                self.rejected.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        };
        let mut jars = self.jars();
        let domain = String::from(&cookie.domain);
        let path = String::from(&cookie.path);
        let replaces = jars
            .get(key)
            .is_some_and(|jar| jar.get_any(&domain, &path, cookie.name()).is_some());
        if !replaces && !cookie.is_expired() && !make_room(&mut jars, key, &domain) {
            self.over_cap.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%url, %domain, "ignoring Set-Cookie: the jar is full");
            return false;
        }
        match jars.entry(key.to_owned()).or_default().insert(cookie, url) {
            Ok(_) => {
                self.stored.fetch_add(1, Ordering::Relaxed);
                true
            }
            // An expired cookie with nothing to expire is how servers delete cookies.
            Err(CookieError::Expired) => true,
            Err(CookieError::Parse) => {
                self.malformed.fetch_add(1, Ordering::Relaxed);
                false
            }
            Err(e) => {
                tracing::debug!(%url, "ignoring Set-Cookie: {e}");
                self.rejected.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Cookies held in all jars, expired ones included (they take memory until purged).
    pub fn len(&self) -> usize {
        self.jars().values().map(|j| j.iter_any().count()).sum()
    }

    /// Whether the jars hold no cookie.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether `name` is a public suffix (`com`, `co.uk`, `github.io`), by the public suffix
/// list; unknown top-level names count as suffixes too (the list's `*` rule).
fn is_public_suffix(name: &str) -> bool {
    psl::suffix_str(name).is_some_and(|s| s.eq_ignore_ascii_case(name))
}

/// Whether one more cookie for `domain` fits in jar `key` under the caps, purging expired
/// cookies (the store keeps them after a server deletes them) when a cap is reached.
fn make_room(jars: &mut HashMap<String, CookieStore>, key: &str, domain: &str) -> bool {
    let count = |jars: &HashMap<String, CookieStore>| {
        let total: usize = jars.values().map(|j| j.iter_any().count()).sum();
        let here = jars.get(key).map_or(0, |j| {
            j.iter_any()
                .filter(|c| String::from(&c.domain) == domain)
                .count()
        });
        (total, here)
    };
    let (total, here) = count(jars);
    if total < MAX_COOKIES_TOTAL && here < MAX_COOKIES_PER_DOMAIN {
        return true;
    }
    for jar in jars.values_mut() {
        let expired: Vec<(String, String, String)> = jar
            .iter_any()
            .filter(|c| c.is_expired())
            .map(|c| {
                (
                    String::from(&c.domain),
                    String::from(&c.path),
                    c.name().to_owned(),
                )
            })
            .collect();
        for (d, p, n) in expired {
            jar.remove(&d, &p, &n);
        }
    }
    let (total, here) = count(jars);
    total < MAX_COOKIES_TOTAL && here < MAX_COOKIES_PER_DOMAIN
}

impl DownloaderMiddleware for Cookies {
    fn name(&self) -> &str {
        "cookies"
    }

    async fn process_request(&self, request: &mut Request) -> Action {
        if Self::skip(request) {
            return Action::Continue;
        }
        let key = Self::jar_key(request);
        let from_jar: Vec<(String, String)> = {
            let jars = self.jars();
            match jars.get(&key) {
                Some(jar) => jar
                    .get_request_values(&request.url)
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
                None => Vec::new(),
            }
        };
        if from_jar.is_empty() {
            return Action::Continue;
        }
        let idx = request
            .headers
            .iter()
            .position(|(k, _)| k.eq_ignore_ascii_case("cookie"));
        let own: Vec<String> = idx
            .map(|i| {
                request.headers[i]
                    .1
                    .split(';')
                    .filter_map(|p| p.split_once('=').map(|(k, _)| k.trim().to_owned()))
                    .collect()
            })
            .unwrap_or_default();
        let mut pairs: Vec<String> = idx
            .map(|i| vec![request.headers[i].1.trim().to_owned()])
            .unwrap_or_default();
        pairs.retain(|p| !p.is_empty());
        for (k, v) in from_jar {
            if !own.contains(&k) {
                pairs.push(format!("{k}={v}"));
            }
        }
        let value = pairs.join("; ");
        match idx {
            Some(i) => request.headers[i].1 = value,
            None => request.headers.push(("Cookie".to_owned(), value)),
        }
        self.sent.fetch_add(1, Ordering::Relaxed);
        Action::Continue
    }

    async fn process_response(&self, request: &Request, response: Response) -> After {
        if Self::skip(request) {
            return After::Pass(response);
        }
        let key = Self::jar_key(request);
        for value in response.headers().get_all("set-cookie") {
            match value.to_str() {
                Ok(line) => {
                    self.store(&key, line, response.url());
                }
                Err(_) => {
                    self.malformed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        After::Pass(response)
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("cookie_headers_sent".to_owned(), load(&self.sent)),
            ("cookies_stored".to_owned(), load(&self.stored)),
            ("set_cookie_malformed".to_owned(), load(&self.malformed)),
            ("set_cookie_rejected".to_owned(), load(&self.rejected)),
            ("set_cookie_over_cap".to_owned(), load(&self.over_cap)),
        ]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn response(to: &str, set_cookies: &[&str]) -> Response {
        let mut headers = http::HeaderMap::new();
        for c in set_cookies {
            headers.append("set-cookie", http::HeaderValue::from_str(c).unwrap());
        }
        Response::new(
            Request::get(to).unwrap(),
            url(to),
            200,
            headers,
            bytes::Bytes::new(),
        )
    }

    async fn cookie_for(jar: &Cookies, to: &str) -> Option<String> {
        let mut r = Request::get(to).unwrap();
        jar.process_request(&mut r).await;
        r.header_value("cookie").map(str::to_owned)
    }

    #[tokio::test]
    async fn the_jar_honours_domain_path_expiry_and_secure() {
        let jar = Cookies::new();
        let r = response(
            // Without a Path a cookie's default is the URL's directory: "/" here.
            "http://shop.example.com/login",
            &[
                "host_only=1",
                "wide=2; Domain=example.com; Path=/",
                "login_only=3; Path=/login",
                "gone=4; Max-Age=0",
                "old=5; Expires=Wed, 21 Oct 2015 07:28:00 GMT",
                "secret=6; Secure; Path=/",
                "=broken",
                "evil=7; Domain=com",
                "other=8; Domain=elsewhere.org",
            ],
        );
        let _ = jar
            .process_response(&Request::get("http://shop.example.com/").unwrap(), r)
            .await;
        let c = cookie_for(&jar, "http://shop.example.com/login/x")
            .await
            .unwrap();
        let mut got: Vec<&str> = c.split("; ").collect();
        got.sort_unstable();
        assert_eq!(got, ["host_only=1", "login_only=3", "wide=2"]);
        // Path: /login cookies stay on /login; host-only cookies stay on their host.
        assert_eq!(
            cookie_for(&jar, "http://www.example.com/account")
                .await
                .as_deref(),
            Some("wide=2")
        );
        let c = cookie_for(&jar, "http://shop.example.com/account")
            .await
            .unwrap();
        assert!(
            !c.contains("login_only") && c.contains("host_only=1"),
            "{c}"
        );
        // Secure cookies go over https only.
        let c = cookie_for(&jar, "https://shop.example.com/").await.unwrap();
        assert!(c.contains("secret=6"), "{c}");
        assert_eq!(cookie_for(&jar, "http://elsewhere.org/").await, None);
        assert_eq!(cookie_for(&jar, "http://example.net/").await, None);
        let counters: HashMap<String, u64> = jar.counters().into_iter().collect();
        assert_eq!(counters["set_cookie_malformed"], 1);
        assert_eq!(counters["set_cookie_rejected"], 2);
        assert_eq!(counters["cookies_stored"], 4);
    }

    #[tokio::test]
    async fn public_suffixes_are_refused_and_the_jar_is_capped() {
        let jar = Cookies::new();
        let req = Request::get("http://shop.example.co.uk/").unwrap();
        let _ = jar
            .process_response(
                &req,
                response(
                    "http://shop.example.co.uk/",
                    &[
                        "uk_wide=1; Domain=co.uk",
                        "io_wide=1; Domain=.github.io",
                        "fine=1; Domain=example.co.uk",
                    ],
                ),
            )
            .await;
        assert_eq!(
            cookie_for(&jar, "http://other.co.uk/").await,
            None,
            "a cookie for co.uk would reach every .co.uk site"
        );
        assert_eq!(
            cookie_for(&jar, "http://www.example.co.uk/")
                .await
                .as_deref(),
            Some("fine=1")
        );
        let counters: HashMap<String, u64> = jar.counters().into_iter().collect();
        assert_eq!(counters["set_cookie_rejected"], 2);

        // A hostile host sets cookie after cookie: the jar keeps a bounded number.
        let jar = Cookies::new();
        for page in 0..40 {
            let lines: Vec<String> = (0..10).map(|i| format!("c{page}_{i}=v")).collect();
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            let _ = jar
                .process_response(&req, response("http://evil.test/", &lines))
                .await;
        }
        assert_eq!(jar.len(), MAX_COOKIES_PER_DOMAIN);
        // Replacing one it holds still works, and deleted ones make room.
        let _ = jar
            .process_response(
                &req,
                response("http://evil.test/", &["c0_0=new", "c0_1=x; Max-Age=0"]),
            )
            .await;
        let _ = jar
            .process_response(&req, response("http://evil.test/", &["late=1"]))
            .await;
        let sent = cookie_for(&jar, "http://evil.test/").await.unwrap();
        assert!(
            sent.contains("c0_0=new") && sent.contains("late=1"),
            "{sent}"
        );
        assert!(!sent.contains("c0_1="), "{sent}");
        // Many hosts: the total cap holds.
        for host in 0..(MAX_COOKIES_TOTAL / 10 + 20) {
            let lines: Vec<String> = (0..10).map(|i| format!("k{i}=v")).collect();
            let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
            let to = format!("http://h{host}.test/");
            let _ = jar.process_response(&req, response(&to, &lines)).await;
        }
        assert!(jar.len() <= MAX_COOKIES_TOTAL, "{}", jar.len());
        let big = format!("big={}", "x".repeat(MAX_COOKIE_BYTES));
        let _ = jar
            .process_response(&req, response("http://big.test/", &[big.as_str()]))
            .await;
        assert_eq!(cookie_for(&jar, "http://big.test/").await, None);
        let counters: HashMap<String, u64> = jar.counters().into_iter().collect();
        assert!(counters["set_cookie_over_cap"] > 0);
    }

    #[tokio::test]
    async fn a_later_max_age_zero_deletes_and_own_cookies_win() {
        let jar = Cookies::new();
        let req = Request::get("http://a.test/").unwrap();
        let _ = jar
            .process_response(&req, response("http://a.test/", &["s=1", "t=2"]))
            .await;
        let _ = jar
            .process_response(&req, response("http://a.test/", &["t=0; Max-Age=0"]))
            .await;
        let mut r = Request::get("http://a.test/x")
            .unwrap()
            .header("Cookie", "s=mine");
        jar.process_request(&mut r).await;
        assert_eq!(r.header_value("cookie"), Some("s=mine"));
        // Separate jars by meta, and opting out.
        let mut r = Request::get("http://a.test/x")
            .unwrap()
            .meta(COOKIEJAR_META, 2)
            .unwrap();
        jar.process_request(&mut r).await;
        assert_eq!(r.header_value("cookie"), None);
        let mut r = Request::get("http://a.test/x")
            .unwrap()
            .meta(DONT_MERGE_COOKIES_META, true)
            .unwrap();
        jar.process_request(&mut r).await;
        assert_eq!(r.header_value("cookie"), None);
        assert_eq!(
            jar.header_for(&url("http://a.test/")).as_deref(),
            Some("s=1")
        );
    }
}
