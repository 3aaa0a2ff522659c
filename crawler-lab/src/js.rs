//! The JavaScript catalogue: pages whose books arrive only by script, for crawlers that
//! render with a browser (`crawler-browser`).
//!
//! `/js/page-N.html` is a shell: a `<ul id="books" data-page="N">` left empty, a script
//! from the asset host (`ASSETS/js/app.js`), a cover image from the asset host
//! (`ASSETS/js/cover-N.png`), a script under `/private/` (disallowed by robots.txt, so a
//! crawler that loads it shows in the report) and a button. The script fills the list from
//! `/api/books?page=N` (`<li class="book"><a class="title" href=URL>TITLE</a> <span
//! class="price">£P</span></li>`, then `data-loaded="1"` on the list) and, only once the
//! button is clicked or the page scrolled to its end, shows the link to the next page
//! (`<a class="next" href="/js/page-N+1.html">`; each book is 120 px high, so a page
//! of books is taller than a browser's window and has an end to scroll to). The asset host is the lab itself unless
//! [`LabBuilder::js_assets`](crate::LabBuilder::js_assets) names another (a second lab, so
//! the scripts and images come from a host with its own robots.txt and budget).

use crate::handler::Shared;
use crate::server::Reply;
use crate::util::put;

/// The script of every JavaScript catalogue page.
const APP_JS: &str = r#"(function () {
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c];
    });
  }
  function start() {
    var list = document.getElementById('books');
    var page = parseInt(list.getAttribute('data-page'), 10);
    var pager = document.getElementById('pager');
    var next = null;
    function reveal() {
      if (next !== null && !pager.firstChild) {
        pager.innerHTML = '<a class="next" href="/js/page-' + (page + 1) + '.html">next</a>';
      }
    }
    fetch('/api/books?page=' + page)
      .then(function (r) { return r.json(); })
      .then(function (data) {
        data.books.forEach(function (b) {
          var li = document.createElement('li');
          li.className = 'book';
          li.innerHTML = '<a class="title" href="' + esc(b.url) + '">' + esc(b.title) +
            '</a> <span class="price">' + esc(b.price) + '</span>';
          list.appendChild(li);
        });
        next = data.next;
        list.setAttribute('data-loaded', '1');
      });
    document.getElementById('more').addEventListener('click', reveal);
    window.addEventListener('scroll', function () {
      if (window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 2) {
        reveal();
      }
    });
  }
  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', start);
  } else {
    start();
  }
})();
"#;

/// A 1x1 transparent PNG: the covers' bytes (what matters is whether one is requested).
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

/// Answer a `/js/...` path; `false` when it is not one of the catalogue's.
pub(crate) fn route(shared: &Shared, path: &str, reply: &mut Reply) -> bool {
    let Some(rest) = path.strip_prefix("/js/") else {
        return false;
    };
    if rest == "app.js" {
        reply.header("Content-Type", "text/javascript; charset=utf-8");
        // Fetched again for every page: each page's script is a request the slot paces.
        reply.header("Cache-Control", "no-store");
        reply.body.extend_from_slice(APP_JS.as_bytes());
        return true;
    }
    if let Some(n) = number(rest, "cover-", ".png") {
        if !(1..=shared.catalogue.catalogue_pages()).contains(&n) {
            return false;
        }
        reply.header("Content-Type", "image/png");
        reply.header("Cache-Control", "no-store");
        reply.body.extend_from_slice(PNG);
        return true;
    }
    let Some(n) = number(rest, "page-", ".html") else {
        return false;
    };
    let pages = shared.catalogue.catalogue_pages();
    if !(1..=pages).contains(&n) {
        return false;
    }
    let assets = shared.js_assets.as_deref().unwrap_or(&shared.base);
    let assets = assets.trim_end_matches('/');
    reply.header("Content-Type", "text/html; charset=utf-8");
    reply.header("Cache-Control", "no-store");
    put!(
        &mut reply.body,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>JavaScript catalogue, page {n} of {pages}</title>\n\
         <style>li.book {{ min-height: 120px }}</style>\n\
         <script src=\"{assets}/js/app.js\"></script>\n\
         <script src=\"/private/tracker.js\"></script>\n\
         </head><body>\n<h1>Books, page {n}</h1>\n\
         <img src=\"{assets}/js/cover-{n}.png\" alt=\"cover\" width=\"1\" height=\"1\">\n\
         <ul id=\"books\" data-page=\"{n}\"></ul>\n\
         <button id=\"more\">more</button>\n<div id=\"pager\"></div>\n\
         <footer><a href=\"/private/secret.html\">staff</a></footer>\n\
         </body></html>\n"
    );
    true
}

fn number(rest: &str, prefix: &str, suffix: &str) -> Option<u32> {
    rest.strip_prefix(prefix)?
        .strip_suffix(suffix)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use crate::Lab;

    async fn get(url: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let u = url.strip_prefix("http://").expect("http");
        let (host, path) = u.split_once('/').expect("path");
        let mut s = tokio::net::TcpStream::connect(host).await.expect("connect");
        s.write_all(
            format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("write");
        let mut bytes = Vec::new();
        s.read_to_end(&mut bytes).await.expect("read");
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let status = text[9..12].parse().expect("status");
        (status, text)
    }

    #[tokio::test]
    async fn shell_pages_name_the_asset_host_and_stop_at_the_last_page() {
        let lab = Lab::builder()
            .books(100)
            .js_assets("http://localhost:9/")
            .start()
            .await
            .expect("lab");
        let (status, page) = get(&lab.url_for("/js/page-1.html")).await;
        assert_eq!(status, 200);
        assert!(page.contains("<script src=\"http://localhost:9/js/app.js\">"));
        assert!(page.contains("http://localhost:9/js/cover-1.png"));
        assert!(page.contains("<ul id=\"books\" data-page=\"1\"></ul>"));
        // The list is empty until the script runs: no book title is in the shell.
        assert!(!page.contains("class=\"book\""));
        assert_eq!(get(&lab.url_for("/js/page-5.html")).await.0, 200);
        assert_eq!(get(&lab.url_for("/js/page-6.html")).await.0, 404);
        let (status, js) = get(&lab.url_for("/js/app.js")).await;
        assert_eq!(status, 200);
        assert!(js.contains("/api/books?page="));
        assert!(js.to_ascii_lowercase().contains("cache-control: no-store"));
        assert_eq!(get(&lab.url_for("/js/cover-1.png")).await.0, 200);
        lab.shutdown().await;
    }
}
