//! The routes of the book site: which page a path is, and its answer.

use tokio::sync::watch;

use super::conditional::validate;
use super::fault_pages::{fault_endpoint, page_fault};
use super::{HTML, Shared, sleep_unless_shutdown};
use crate::faults;
use crate::scenario::{Robots, Scenario};
use crate::server::{BodyKind, Reply, Req};
use crate::site::{self, Catalogue, Listing};
use crate::util::put;

/// Largest `/blob/N`.
pub(crate) const MAX_BLOB: u64 = 1 << 30;

pub(super) fn not_found(reply: &mut Reply) {
    reply.status = 404;
    reply.header("Content-Type", HTML);
    site::render_not_found(&mut reply.body);
}

pub(super) async fn route(
    shared: &Shared,
    sc: &Scenario,
    req: &Req<'_>,
    reply: &mut Reply,
    shutdown: &mut watch::Receiver<bool>,
) {
    let path = req.path();
    // The members' area answers its own methods (the login form is POSTed).
    if path == "/login" {
        return crate::account::login(shared, req, reply);
    }
    if path == "/account" || path.starts_with("/account/") {
        return crate::account::account(shared, req, reply);
    }
    if req.method != "GET" && req.method != "HEAD" {
        reply.status = 405;
        reply.header("Allow", "GET, HEAD");
        return;
    }
    let cat = &shared.catalogue;
    if path == "/" || path == "/index.html" {
        if validate(req, cat.site_validators(1), reply) {
            cat.render_index(&mut reply.body);
        }
    } else if path == "/robots.txt" {
        robots(shared, sc, reply, shutdown).await;
    } else if path == "/sitemap.xml" {
        reply.header("Content-Type", "application/xml");
        reply.kind = BodyKind::Shared(shared.sitemaps.index(cat, &shared.base, sc.bad_sitemaps));
    } else if let Some(k) = path
        .strip_prefix("/sitemaps/books-")
        .and_then(|r| r.strip_suffix(".xml.gz"))
        .and_then(|k| k.parse().ok())
    {
        match shared.sitemaps.file(cat, &shared.base, k) {
            Some(gz) => {
                reply.header("Content-Type", "application/gzip");
                reply.kind = BodyKind::Shared(gz);
            }
            None => not_found(reply),
        }
    } else if let Some(id) = faults::book_id(path).filter(|id| cat.contains(*id)) {
        let fault = sc
            .chaos
            .and_then(|rate| faults::chaos_fault(cat.seed, rate, path));
        match fault {
            Some(kind) => page_fault(shared, kind, id, reply).await,
            None => {
                let rev = cat.revision(id);
                if validate(req, cat.book_validators(id, rev), reply) {
                    cat.render_book(id, rev, &mut reply.body, b"", b"");
                }
            }
        }
    } else if let Some(page) = listing_of(path) {
        match page.and_then(|(l, n)| cat.listing_page(l, n)) {
            Some(page) => {
                if validate(req, page.validators, reply) {
                    cat.render_listing(&page, &mut reply.body);
                }
            }
            None => not_found(reply),
        }
    } else if path.starts_with("/private/") {
        if validate(req, cat.site_validators(2), reply) {
            cat.render_private(&mut reply.body);
        }
    } else if crate::js::route(shared, path, reply) {
    } else if let Some(rest) = path.strip_prefix("/media/") {
        if !super::media::route(rest, req, reply) {
            not_found(reply);
        }
    } else if path == "/api/books" {
        crate::api::books(shared, req, reply);
    } else if let Some(n) = path.strip_prefix("/blob/") {
        blob(n, req, reply);
    } else if let Some(rest) = path.strip_prefix("/fault/") {
        fault_endpoint(shared, rest, req, reply).await;
    } else {
        not_found(reply);
    }
}

/// `Some(None)` for a listing path with a bad page number.
fn listing_of(path: &str) -> Option<Option<(Listing, u32)>> {
    let page = |rest: &str| -> Option<u32> {
        rest.strip_prefix("page-")?
            .strip_suffix(".html")?
            .parse()
            .ok()
    };
    if let Some(rest) = path.strip_prefix("/catalogue/") {
        if rest.starts_with("page-") {
            return Some(page(rest).map(|n| (Listing::Catalogue, n)));
        }
        return None;
    }
    let rest = path.strip_prefix("/category/")?;
    let (slug, rest) = rest.split_once('/')?;
    Some(
        Catalogue::category_index(slug).and_then(|c| page(rest).map(|n| (Listing::Category(c), n))),
    )
}

async fn robots(
    shared: &Shared,
    sc: &Scenario,
    reply: &mut Reply,
    shutdown: &mut watch::Receiver<bool>,
) {
    match &sc.robots {
        Robots::Status(status) => {
            reply.status = *status;
            reply.header("Content-Type", HTML);
            put!(
                &mut reply.body,
                "<!DOCTYPE html><html><body><h1>{status}</h1></body></html>\n"
            );
            return;
        }
        Robots::Timeout(d) => sleep_unless_shutdown(*d, shutdown).await,
        _ => {}
    }
    reply.header("Content-Type", "text/plain; charset=utf-8");
    crate::robots::render(&sc.robots, &shared.base, &mut reply.body);
}

fn blob(n: &str, req: &Req<'_>, reply: &mut Reply) {
    let Ok(len) = n.parse::<u64>() else {
        return not_found(reply);
    };
    if len > MAX_BLOB {
        reply.status = 400;
        reply.header("Content-Type", "text/plain; charset=utf-8");
        put!(
            &mut reply.body,
            "blob size {len} is over the lab's cap of {MAX_BLOB} bytes\n"
        );
        return;
    }
    let content_type = if req.query("type") == Some("html") {
        HTML
    } else {
        "application/octet-stream"
    };
    reply.header("Content-Type", content_type);
    reply.kind = BodyKind::Blob {
        len,
        chunked: req.query("chunked") == Some("1"),
    };
}
