//! The fault pages: `/fault/NAME` and the chaos scenario's faulty book pages.

use super::routes::not_found;
use super::{HTML, Shared};
use crate::faults::{self, FaultKind};
use crate::server::{BodyKind, Reply, Req};
use crate::site;
use crate::util::put;

pub(super) async fn fault_endpoint(shared: &Shared, rest: &str, req: &Req<'_>, reply: &mut Reply) {
    let cat = &shared.catalogue;
    let base = &shared.base;
    // The page faults show book 1 unless `?book=ID` names another.
    let id = req
        .query("book")
        .and_then(|b| b.parse().ok())
        .filter(|id| cat.contains(*id))
        .unwrap_or(1);
    if let Some(n) = rest.strip_prefix("redirect-chain/") {
        let Ok(n) = n.parse::<u32>() else {
            return not_found(reply);
        };
        reply.fault = Some(FaultKind::RedirectChain);
        if n == 0 {
            reply.header("Content-Type", HTML);
            reply.body.extend_from_slice(b"<!DOCTYPE html><html><head><title>End of the chain</title></head><body><h1>End of the redirect chain</h1></body></html>\n");
        } else {
            redirect(
                reply,
                &format!(
                    "/fault/redirect-chain/{}{}",
                    (n - 1).min(faults::MAX_CHAIN),
                    query_suffix(req)
                ),
            );
        }
        return;
    }
    if rest == "redirect-loop/b" {
        reply.fault = Some(FaultKind::RedirectLoop);
        redirect(reply, &format!("/fault/redirect-loop{}", query_suffix(req)));
        return;
    }
    let Some(kind) = FaultKind::from_name(rest) else {
        return not_found(reply);
    };
    reply.fault = Some(kind);
    match kind {
        FaultKind::BrokenSitemap => {
            reply.header("Content-Type", "application/xml");
            faults::broken_sitemap(base, &mut reply.body);
        }
        FaultKind::SitemapEntityExpansion => {
            reply.header("Content-Type", "application/xml");
            faults::laughs_sitemap(base, &mut reply.body);
        }
        FaultKind::HugeSitemap => {
            reply.header("Content-Type", "application/gzip");
            reply.kind = BodyKind::Shared(shared.sitemaps.huge(cat, base));
        }
        FaultKind::SitemapGzipBomb => {
            reply.header("Content-Type", "application/gzip");
            reply.kind = BodyKind::Shared(bomb(faults::sitemap_bomb).await);
        }
        page => page_fault(shared, page, id, reply).await,
    }
}

fn query_suffix(req: &Req<'_>) -> String {
    req.target
        .split_once('?')
        .map_or(String::new(), |(_, q)| format!("?{q}"))
}

fn redirect(reply: &mut Reply, location: &str) {
    reply.status = 302;
    reply.header("Location", location);
    reply.header("Content-Type", HTML);
    put!(
        &mut reply.body,
        "<!DOCTYPE html><html><body><a href=\"{location}\">moved</a></body></html>\n"
    );
}

/// Computes a gzip bomb off the async threads the first time (it takes a moment).
async fn bomb(make: fn() -> std::sync::Arc<[u8]>) -> std::sync::Arc<[u8]> {
    match tokio::task::spawn_blocking(make).await {
        Ok(b) => b,
        Err(_) => make(),
    }
}

/// Serves book `id`'s page with a fault.
pub(super) async fn page_fault(shared: &Shared, kind: FaultKind, id: u32, reply: &mut Reply) {
    let cat = &shared.catalogue;
    let rev = cat.revision(id);
    reply.fault = Some(kind);
    let from = format!("?from={id}");
    match kind {
        FaultKind::RedirectLoop => {
            return redirect(reply, &format!("/fault/redirect-loop/b{from}"));
        }
        FaultKind::RedirectChain => {
            return redirect(
                reply,
                &format!("/fault/redirect-chain/{}{from}", faults::CHAIN_HOPS),
            );
        }
        FaultKind::RedirectToNonHttp => {
            let host = shared.base.trim_start_matches("http://");
            return redirect(reply, &format!("ftp://{host}pub/book-{id}.html"));
        }
        FaultKind::ServerError => {
            reply.status = 500;
            reply.header("Content-Type", HTML);
            reply.body.extend_from_slice(b"<!DOCTYPE html><html><head><title>500 Internal Server Error</title></head><body><h1>Internal Server Error</h1></body></html>\n");
            return;
        }
        FaultKind::GzipBomb => {
            reply.header("Content-Type", HTML);
            reply.header("Content-Encoding", "gzip");
            reply.kind = BodyKind::Shared(bomb(faults::html_bomb).await);
            return;
        }
        FaultKind::EndlessBody => {
            reply.header("Content-Type", HTML);
            reply.kind = BodyKind::Endless;
            return;
        }
        _ => {}
    }
    match kind {
        FaultKind::Windows1252 => {
            reply.header("Content-Type", "text/html; charset=windows-1252");
            cat.render_book(
                id,
                rev,
                &mut reply.body,
                b"<meta charset=\"windows-1252\">",
                b"",
            );
            faults::transcode_pound(&mut reply.body, b"\xa3");
            insert_extra(&mut reply.body, faults::WINDOWS_1252_EXTRA);
        }
        FaultKind::ShiftJis => {
            reply.header("Content-Type", "text/html");
            cat.render_book(
                id,
                rev,
                &mut reply.body,
                b"<meta charset=\"Shift_JIS\">",
                b"",
            );
            faults::transcode_pound(&mut reply.body, b"\x81\x92");
            insert_extra(&mut reply.body, faults::SHIFT_JIS_EXTRA);
        }
        FaultKind::InvalidUtf8 => {
            reply.header("Content-Type", HTML);
            cat.render_book(id, rev, &mut reply.body, b"", faults::INVALID_UTF8_EXTRA);
        }
        FaultKind::WrongContentType => {
            reply.header("Content-Type", "image/jpeg");
            cat.render_book(id, rev, &mut reply.body, b"", b"");
        }
        _ => {
            reply.header("Content-Type", HTML);
            cat.render_book(id, rev, &mut reply.body, b"", b"");
            reply.kind = match kind {
                FaultKind::ResetMidBody => BodyKind::ResetHalfway,
                FaultKind::SlowBody => BodyKind::Trickle,
                _ => BodyKind::Overlong,
            };
        }
    }
}

/// Puts charset-specific bytes at the end of the description paragraph.
fn insert_extra(body: &mut Vec<u8>, extra: &[u8]) {
    let marker = b"</p>\n</div>\n<table class=\"info\">";
    let at = site::find(body, marker).unwrap_or(body.len());
    body.splice(at..at, extra.iter().copied());
}
