//! Redirects: the next hop of a 3xx, by Scrapy's rules. The engine sends it back through the
//! frontier (robots.txt and the target host's slot apply to every hop); the downloader's
//! one-off fetch (`crawler fetch`, the shell) follows it directly.

use crate::fetch::{Failure, FailureKind};
use crate::request::Request;

/// Request meta key: when `true`, a 3xx answer is not followed (it ends as an HTTP status
/// failure, as any non-2xx the spider does not handle).
pub const DONT_REDIRECT_META: &str = "dont_redirect";

/// Statuses whose `Location` is followed.
pub const REDIRECTS: [u16; 5] = [301, 302, 303, 307, 308];

/// The next hop of a redirect, as a new request that goes through the frontier (so the
/// target's robots.txt and its host's slot apply), or why it cannot be followed. As Scrapy's
/// RedirectMiddleware: 301/302/303 turn a POST into a GET without body (303 anything but
/// HEAD), 307/308 keep method and body; credentials do not cross to another origin; the
/// callback, meta, priority and depth carry over.
pub fn redirect(
    req: &Request,
    response: &crate::Response,
    max: usize,
) -> std::result::Result<Request, Failure> {
    let status = response.status();
    let location = response
        .headers()
        .get(http::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| {
            failure(
                FailureKind::BadRedirect,
                status,
                format!("HTTP {status} without a usable Location"),
            )
        })?;
    let target = response.url().join(location).map_err(|e| {
        failure(
            FailureKind::BadRedirect,
            status,
            format!("redirect to an invalid URL '{location}': {e}"),
        )
    })?;
    if !matches!(target.scheme(), "http" | "https") || target.host().is_none() {
        return Err(failure(
            FailureKind::BadRedirect,
            status,
            format!("redirect to non-http URL '{target}'"),
        ));
    }
    if target == req.url || req.redirect_urls.contains(&target) {
        return Err(failure(
            FailureKind::TooManyRedirects,
            status,
            format!("redirect loop at '{target}'"),
        ));
    }
    if req.redirect_urls.len() + 1 > max {
        return Err(failure(
            FailureKind::TooManyRedirects,
            status,
            format!("more than {max} redirects"),
        ));
    }
    let mut next = req.clone();
    next.redirect_urls.push(req.url.clone());
    // A hop may lead into private space only from a private server (see `address`).
    crate::address::mark_from_private(&mut next.meta, response.served_from_private());
    let to_get = match status {
        301 | 302 => req.method == "POST",
        303 => req.method != "HEAD",
        _ => false,
    };
    if to_get {
        next.method = "GET".to_owned();
        next.body = None;
        next.headers.retain(|(k, _)| {
            !k.eq_ignore_ascii_case("content-type") && !k.eq_ignore_ascii_case("content-length")
        });
    }
    if target.origin() != req.url.origin() {
        // Credentials given for one origin are not handed to another.
        next.headers.retain(|(k, _)| {
            !k.eq_ignore_ascii_case("authorization") && !k.eq_ignore_ascii_case("cookie")
        });
    }
    next.url = target;
    next.retries = 0;
    // A hop belongs to its own chain: loops are caught above, per chain, and the chain
    // length is bounded. Filtering a hop as a duplicate because another page redirected to
    // the same place would end this page without its response or a failure to show.
    next.dont_filter = true;
    Ok(next)
}

fn failure(kind: FailureKind, status: u16, message: String) -> Failure {
    Failure {
        kind,
        message,
        status: Some(status),
        bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(req: &Request, status: u16, location: Option<&str>) -> crate::Response {
        let mut headers = http::HeaderMap::new();
        if let Some(l) = location {
            headers.insert(
                http::header::LOCATION,
                http::HeaderValue::from_str(l).unwrap(),
            );
        }
        crate::Response::new(
            req.clone(),
            req.url.clone(),
            status,
            headers,
            bytes::Bytes::new(),
        )
    }

    #[test]
    fn a_hop_may_lead_into_private_space_only_from_a_private_server() {
        use crate::address::FROM_PRIVATE_META;
        let req = Request::get("http://a.example/x").unwrap();
        let scope = |resp: crate::Response| {
            redirect(&req, &resp, 10)
                .unwrap()
                .meta
                .get(FROM_PRIVATE_META)
                .cloned()
        };
        let public = answer(&req, 302, Some("http://10.0.0.1/"));
        assert_eq!(
            scope(public.with_remote_addr(Some("93.184.216.34".parse().unwrap()))),
            None
        );
        // Unknown address, a public name: not private.
        assert_eq!(scope(answer(&req, 302, Some("http://10.0.0.1/"))), None);
        let private = answer(&req, 302, Some("http://10.0.0.1/"));
        assert_eq!(
            scope(private.with_remote_addr(Some("127.0.0.1".parse().unwrap()))),
            Some(serde_json::json!(true))
        );
        // A request from a private page, redirected by a public server, loses its mark.
        let marked = req.clone().meta(FROM_PRIVATE_META, true).unwrap();
        let public = answer(&marked, 302, Some("http://10.0.0.1/"))
            .with_remote_addr(Some("93.184.216.34".parse().unwrap()));
        let hop = redirect(&marked, &public, 10).unwrap();
        assert_eq!(hop.meta.get(FROM_PRIVATE_META), None);
        let local = Request::get("http://127.0.0.1:8080/x").unwrap();
        let hop = redirect(&local, &answer(&local, 302, Some("/y")), 10).unwrap();
        assert_eq!(
            hop.meta.get(FROM_PRIVATE_META),
            Some(&serde_json::json!(true))
        );
    }

    #[test]
    fn redirects_follow_scrapys_rules() {
        let post = Request::get("http://a.example/form")
            .unwrap()
            .method("POST")
            .body("q=1")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("Authorization", "Basic eA==")
            .callback("after")
            .meta("k", 1)
            .unwrap();
        // 301/302/303: POST becomes GET without a body; 307/308 keep both.
        for status in [301, 302, 303] {
            let next = redirect(&post, &answer(&post, status, Some("/done")), 10).unwrap();
            assert_eq!(next.method, "GET", "{status}");
            assert_eq!(next.body, None, "{status}");
            assert!(next.header_value("content-type").is_none(), "{status}");
            assert_eq!(next.url.as_str(), "http://a.example/done");
        }
        for status in [307, 308] {
            let next = redirect(&post, &answer(&post, status, Some("/done")), 10).unwrap();
            assert_eq!(next.method, "POST", "{status}");
            assert_eq!(next.body.as_deref(), Some(&b"q=1"[..]));
        }
        let next = redirect(&post, &answer(&post, 302, Some("/done")), 10).unwrap();
        assert_eq!(next.redirect_urls, std::slice::from_ref(&post.url));
        assert_eq!(next.callback.as_deref(), Some("after"));
        assert_eq!(next.meta.get("k"), Some(&serde_json::json!(1)));
        assert!(next.dont_filter);
        // Same origin keeps credentials; another origin does not get them.
        assert!(next.header_value("authorization").is_some());
        let away = redirect(&post, &answer(&post, 302, Some("http://b.example/")), 10).unwrap();
        assert!(away.header_value("authorization").is_none());

        let get = Request::get("http://a.example/x").unwrap();
        let err = |status, loc: Option<&str>, req: &Request, max| {
            redirect(req, &answer(req, status, loc), max)
                .unwrap_err()
                .kind
        };
        assert_eq!(err(302, None, &get, 10), FailureKind::BadRedirect);
        assert_eq!(
            err(302, Some("ftp://a.example/f"), &get, 10),
            FailureKind::BadRedirect
        );
        assert_eq!(
            err(302, Some("/x"), &get, 10),
            FailureKind::TooManyRedirects
        );
        let mut hop = get.clone();
        hop.redirect_urls = vec![url::Url::parse("http://a.example/y").unwrap()];
        assert_eq!(
            err(302, Some("/y"), &hop, 10),
            FailureKind::TooManyRedirects,
            "loop"
        );
        assert_eq!(
            err(302, Some("/z"), &hop, 1),
            FailureKind::TooManyRedirects,
            "limit"
        );
        assert!(redirect(&hop, &answer(&hop, 302, Some("/z")), 2).is_ok());
    }
}
