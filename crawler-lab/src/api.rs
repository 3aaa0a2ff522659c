//! A JSON API over the catalogue: `GET /api/books?page=N`, 20 books a page, with a link to
//! the next page, for spiders that crawl APIs rather than HTML (and for the RateLimit
//! scenarios, whose headers apply to every path).

use crate::handler::Shared;
use crate::server::{Reply, Req};
use crate::site::{CATEGORIES, PER_PAGE};

/// `/api/books`: `{"page":N,"pages":P,"total":T,"books":[...],"next":"/api/books?page=N+1"}`
/// (`next` is `null` on the last page). A page out of range or not a number gets 404 with a
/// JSON error.
pub(crate) fn books(shared: &Shared, req: &Req<'_>, reply: &mut Reply) {
    let cat = &shared.catalogue;
    reply.header("Content-Type", "application/json");
    let pages = cat.catalogue_pages();
    let page = match req.query("page") {
        None => Some(1),
        Some(p) => p.parse::<u32>().ok(),
    };
    let Some(page) = page.filter(|p| (1..=pages).contains(p)) else {
        reply.status = 404;
        let body = serde_json::json!({
            "error": format!("no such page; pages run from 1 to {pages}"),
        });
        reply.body = serde_json::to_vec(&body).unwrap_or_default();
        return;
    };
    let first = (page - 1) * PER_PAGE + 1;
    let last = (page * PER_PAGE).min(cat.books);
    let books: Vec<serde_json::Value> = (first..=last)
        .map(|id| {
            let rev = cat.revision(id);
            let cents = cat.price_cents(id, rev);
            serde_json::json!({
                "id": id,
                "title": cat.title(id),
                "price": format!("\u{a3}{}.{:02}", cents / 100, cents % 100),
                "stock": cat.stock(id, rev),
                "category": CATEGORIES[cat.category_of(id)].0,
                "url": format!("/catalogue/book-{id}.html"),
            })
        })
        .collect();
    let next = (page < pages).then(|| format!("/api/books?page={}", page + 1));
    let body = serde_json::json!({
        "page": page,
        "pages": pages,
        "total": cat.books,
        "books": books,
        "next": next,
    });
    reply.body = serde_json::to_vec(&body).unwrap_or_default();
}
