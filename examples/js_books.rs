//! js_books: a spider for pages built by JavaScript, rendered in a headless chromium while
//! the browser's own requests stay under the crawl's politeness.
//!
//! Crawls the lab's JavaScript catalogue (`/js/page-N.html`): each page is an empty shell
//! whose script, served by a second host (`localhost:PORT`, with its own robots.txt and
//! budget), fills the book list from `/api/books?page=N`, and shows the link to the next
//! page only once the page is scrolled to its end. Each request asks for rendering with
//! options: wait until the list is loaded, then scroll. Every request the page makes (the
//! script, the API call, the favicon) goes through robots.txt and its host's slot, so the
//! page's `/private/` script, disallowed by robots.txt, is never requested, and the cover
//! images are refused without a request (images, media and fonts are blocked by default).
//!
//! Needs chromium (`apt-get install chromium`) and the `browser` feature:
//!
//! ```text
//! cargo run --release --features browser --example js_books
//! ```
//!
//! Items go to `js_books.jsonl`; the stats show the sub-requests by outcome.

use crawler::RenderOptions;
use crawler::prelude::*;

/// One book, as the page's script shows it.
#[derive(Debug, Serialize)]
pub struct Book {
    /// Title.
    pub title: String,
    /// Price as shown, e.g. "£12.34".
    pub price: String,
}

/// Reads the JavaScript catalogue from its first page.
pub struct JsBooks {
    /// The first page, e.g. `http://127.0.0.1:8080/js/page-1.html`.
    pub start: String,
}

/// Wait for the script's books, then scroll to the end (which shows the next link).
pub fn render_options() -> RenderOptions {
    RenderOptions::new()
        .wait_for("ul#books[data-loaded]")
        .scroll(1)
}

impl Spider for JsBooks {
    type Item = Book;

    fn name(&self) -> &str {
        "js_books"
    }

    fn start_requests(&self) -> Result<Vec<Request>> {
        Ok(vec![
            Request::get(&self.start)?.render_with(render_options()),
        ])
    }

    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        for book in page.select("li.book").iter() {
            out.item(Book {
                title: book.select("a.title").text().unwrap_or_default(),
                price: book.select("span.price").text().unwrap_or_default(),
            });
        }
        for href in page.select("a.next").attrs("href") {
            out.follow(&href).render_with(render_options());
        }
        Ok(())
    }
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    crawler::init_logging();
    // The scripts and covers come from a second host: another lab, named `localhost`.
    let assets = crawler_lab::Lab::builder().books(200).start().await?;
    let lab = crawler_lab::Lab::builder()
        .books(200)
        .js_assets(format!("http://localhost:{}/", assets.addr().port()))
        .start()
        .await?;
    println!("JavaScript catalogue at {}js/page-1.html", lab.url());
    let stats = Crawl::new(JsBooks {
        start: lab.url_for("/js/page-1.html"),
    })
    .set("user_agent", "js_books-example/1.0 (+http://127.0.0.1/)")
    .feed("js_books.jsonl")?
    .run()
    .await?;
    println!("{stats}");
    println!("sub-requests: {:?}", stats.subrequests);
    for (name, l) in [("site", &lab), ("assets", &assets)] {
        let seen = l.recorder().requests();
        let private = seen
            .iter()
            .filter(|r| r.path.starts_with("/private/"))
            .count();
        println!(
            "{name}: {} requests, {private} to /private/, violations: {}",
            seen.len(),
            l.recorder().report().total_violations()
        );
    }
    lab.shutdown().await;
    assets.shutdown().await;
    Ok(())
}
