//! The members' area: a login form with a CSRF token, a session cookie, and pages that need
//! it. It lets crawlers (and their cookie and form handling) be tested the way real sites
//! with a login work.
//!
//! - `GET /login`: an HTML form (`username`, `password`, hidden `csrf_token`) and a
//!   `csrftoken` cookie scoped to `Path=/login`. The token is derived from the seed, so it is
//!   the same for every client of one lab; the cookie makes it a double-submit check.
//! - `POST /login` (form-encoded): the form's token must match the cookie's (else 403).
//!   [`USERNAME`]/[`PASSWORD`] get `303 See Other` to `/account?ticket=T` with
//!   `Set-Cookie: session=S; Path=/; HttpOnly`; wrong credentials get a 401 page with the form.
//! - `GET /account`: with a valid `session` cookie, 200 with the user's name and links to
//!   "your books" (`/account/books/ID.html`); with a valid `ticket` (the one the login
//!   redirect names), the same page and the session cookie again; otherwise `302` to `/login`.
//!   The ticket exists because many HTTP clients follow a redirect before their caller sees
//!   its `Set-Cookie`: exchanging the ticket hands them the session on the final page.
//! - `GET /account/books/ID.html`: one of the user's books (the book page) with a valid
//!   session cookie; `302` to `/login` without; 404 for a book not on the user's list.

use crate::handler::Shared;
use crate::server::{Reply, Req};
use crate::site;
use crate::util::{hash2, put};

/// The one user the lab knows.
pub const USERNAME: &str = "reader";
/// Its password.
pub const PASSWORD: &str = "books";
/// How many books the user's account lists.
pub const ACCOUNT_BOOKS: u32 = 10;

const HTML: &str = "text/html; charset=utf-8";

fn token(seed: u64, what: u64) -> String {
    format!("{:016x}", hash2(seed, what))
}

/// The CSRF token of a lab (the same for every client: the lab is deterministic).
pub(crate) fn csrf_token(seed: u64) -> String {
    token(seed, 0x6373_7266)
}

/// The session cookie value a successful login sets.
pub(crate) fn session_token(seed: u64) -> String {
    token(seed, 0x7365_7373)
}

fn ticket(seed: u64) -> String {
    token(seed, 0x7469_636b)
}

/// The ids of the books on the user's account page, in page order.
pub(crate) fn account_books(seed: u64, books: u32) -> Vec<u32> {
    let mut ids: Vec<u32> = Vec::with_capacity(ACCOUNT_BOOKS as usize);
    let mut k = 0u64;
    while ids.len() < ACCOUNT_BOOKS.min(books) as usize {
        let id = (hash2(seed ^ 0x6163_6374, k) % u64::from(books)) as u32 + 1;
        if !ids.contains(&id) {
            ids.push(id);
        }
        k += 1;
    }
    ids
}

/// The value of one cookie in a `Cookie` header.
fn cookie<'a>(req: &Req<'a>, name: &str) -> Option<&'a str> {
    req.cookie?.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k.trim() == name).then_some(v.trim())
    })
}

fn has_session(shared: &Shared, req: &Req<'_>) -> bool {
    cookie(req, "session") == Some(session_token(shared.catalogue.seed).as_str())
}

/// Decodes `application/x-www-form-urlencoded` text (`+` is a space, `%XX` a byte).
pub(crate) fn form_value(body: &[u8], key: &str) -> Option<String> {
    let text = std::str::from_utf8(body).ok()?;
    text.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (decode(k) == key).then(|| decode(v))
    })
}

fn decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (
                bytes.get(i + 1).and_then(|&b| hex(b)),
                bytes.get(i + 2).and_then(|&b| hex(b)),
            ) {
                (Some(hi), Some(lo)) => {
                    out.push((hi * 16 + lo) as u8);
                    i += 2;
                }
                // A stray `%` stays as it is, like browsers and most servers do.
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn page(reply: &mut Reply, title: &str, body: impl FnOnce(&mut Vec<u8>)) {
    reply.header("Content-Type", HTML);
    // Pages that depend on who asks must not be cached or revalidated.
    reply.header("Cache-Control", "private, no-store");
    put!(
        &mut reply.body,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title} | Books to Crawl</title>\n</head>\n<body>\n<header><a href=\"/\" class=\"brand\">Books to Crawl</a></header>\n<main>\n"
    );
    body(&mut reply.body);
    reply.body.extend_from_slice(
        b"</main>\n<footer><p><a href=\"/\">Home</a></p></footer>\n</body>\n</html>\n",
    );
}

fn form(out: &mut Vec<u8>, csrf: &str, message: Option<&str>) {
    out.extend_from_slice(b"<h1>Sign in</h1>\n");
    if let Some(m) = message {
        put!(out, "<p class=\"error\">{m}</p>\n");
    }
    put!(
        out,
        "<form id=\"login\" action=\"/login\" method=\"post\">\n<input type=\"hidden\" name=\"csrf_token\" value=\"{csrf}\">\n<label>Username <input type=\"text\" name=\"username\"></label>\n<label>Password <input type=\"password\" name=\"password\"></label>\n<button type=\"submit\">Sign in</button>\n</form>\n"
    );
}

fn redirect(reply: &mut Reply, status: u16, location: &str) {
    reply.status = status;
    reply.header("Location", location);
    reply.header("Content-Type", HTML);
    put!(
        &mut reply.body,
        "<!DOCTYPE html><html><body><a href=\"{location}\">moved</a></body></html>\n"
    );
}

/// `/login`: the form (GET, HEAD) and its submission (POST).
pub(crate) fn login(shared: &Shared, req: &Req<'_>, reply: &mut Reply) {
    let seed = shared.catalogue.seed;
    let csrf = csrf_token(seed);
    match req.method {
        "GET" | "HEAD" => {
            reply.header(
                "Set-Cookie",
                format_args!("csrftoken={csrf}; Path=/login; HttpOnly; SameSite=Lax"),
            );
            page(reply, "Sign in", |out| form(out, &csrf, None));
        }
        "POST" => {
            let form_ok = req
                .content_type
                .is_some_and(|ct| ct.starts_with("application/x-www-form-urlencoded"));
            let sent = form_value(req.body, "csrf_token");
            if !form_ok
                || sent.as_deref() != Some(csrf.as_str())
                || cookie(req, "csrftoken") != Some(csrf.as_str())
            {
                reply.status = 403;
                page(reply, "Forbidden", |out| {
                    out.extend_from_slice(b"<h1>Forbidden</h1>\n<p class=\"error\">CSRF check failed: load the form first, and send its csrf_token back with the csrftoken cookie.</p>\n");
                });
                return;
            }
            let user = form_value(req.body, "username");
            let pass = form_value(req.body, "password");
            if user.as_deref() == Some(USERNAME) && pass.as_deref() == Some(PASSWORD) {
                reply.header(
                    "Set-Cookie",
                    format_args!("session={}; Path=/; HttpOnly", session_token(seed)),
                );
                redirect(reply, 303, &format!("/account?ticket={}", ticket(seed)));
            } else {
                reply.status = 401;
                page(reply, "Sign in", |out| {
                    form(out, &csrf, Some("Invalid username or password."));
                });
            }
        }
        _ => {
            reply.status = 405;
            reply.header("Allow", "GET, HEAD, POST");
        }
    }
}

/// `/account` and `/account/books/ID.html`.
pub(crate) fn account(shared: &Shared, req: &Req<'_>, reply: &mut Reply) {
    if req.method != "GET" && req.method != "HEAD" {
        reply.status = 405;
        reply.header("Allow", "GET, HEAD");
        return;
    }
    let cat = &shared.catalogue;
    let seed = cat.seed;
    let path = req.path();
    let exchanged = path == "/account" && req.query("ticket") == Some(ticket(seed).as_str());
    if !has_session(shared, req) && !exchanged {
        return redirect(reply, 302, "/login");
    }
    if exchanged {
        reply.header(
            "Set-Cookie",
            format_args!("session={}; Path=/; HttpOnly", session_token(seed)),
        );
    }
    let ids = account_books(seed, cat.books);
    if path == "/account" {
        page(reply, "Your account", |out| {
            put!(
                out,
                "<h1>Your account</h1>\n<p class=\"user\">Signed in as <span class=\"username\">{USERNAME}</span></p>\n<h2>Your books</h2>\n<ul class=\"your-books\">\n"
            );
            for &id in &ids {
                put!(out, "<li><a href=\"/account/books/{id}.html\">");
                cat.write_title(id, out);
                out.extend_from_slice(b"</a></li>\n");
            }
            out.extend_from_slice(b"</ul>\n");
        });
        return;
    }
    let id = path
        .strip_prefix("/account/books/")
        .and_then(|r| r.strip_suffix(".html"))
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|id| ids.contains(id));
    match id {
        Some(id) => {
            reply.header("Content-Type", HTML);
            reply.header("Cache-Control", "private, no-store");
            cat.render_book(id, cat.revision(id), &mut reply.body, b"", b"");
        }
        None => {
            reply.status = 404;
            reply.header("Content-Type", HTML);
            site::render_not_found(&mut reply.body);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_decoded() {
        let body = b"csrf_token=ab%2Fc&username=a+b&password=p%3D1%26&bad=%zz";
        assert_eq!(form_value(body, "csrf_token").as_deref(), Some("ab/c"));
        assert_eq!(form_value(body, "username").as_deref(), Some("a b"));
        assert_eq!(form_value(body, "password").as_deref(), Some("p=1&"));
        assert_eq!(form_value(body, "bad").as_deref(), Some("%zz"));
        assert_eq!(form_value(body, "missing"), None);
        assert_eq!(form_value(b"x=%4", "x").as_deref(), Some("%4"));
    }

    #[test]
    fn account_books_are_distinct_and_in_range() {
        let ids = account_books(7, 100);
        assert_eq!(ids.len(), ACCOUNT_BOOKS as usize);
        assert!(ids.iter().all(|id| (1..=100).contains(id)));
        let mut sorted = ids.clone();
        sorted.dedup();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ids.len());
        assert_eq!(ids, account_books(7, 100), "deterministic");
    }
}
