//! custom_middleware: writing your own downloader and spider middlewares.
//!
//! - [`Tag`], a downloader middleware, adds an `X-Crawl-Tag` header to every request (the
//!   lab's recorder keeps it, so you can see it arrive) and counts the responses by status
//!   class in its own counters.
//! - [`MaxPrice`], a spider middleware, drops the books a callback produced whose price is
//!   over a limit, before they reach the pipelines and feeds.
//!
//! Both are added in code (`Crawl::downloader_middleware`, `Crawl::spider_middleware`) and
//! run after the built-ins (where `custom` stands in the `downloader_middlewares` and
//! `spider_middlewares` settings). Their counters are printed with the stats.
//!
//! ```text
//! cargo run --release --example custom_middleware
//! ```
//!
//! Items go to `custom_middleware.jsonl`.

use std::sync::atomic::{AtomicU64, Ordering};

use crawler::middleware::{Action, After, DownloaderMiddleware, Page, SpiderMiddleware};
use crawler::prelude::*;

/// One book, from its detail page.
#[derive(Debug, Serialize, serde::Deserialize)]
pub(crate) struct Book {
    /// The page.
    pub url: String,
    /// Its title.
    pub title: String,
    /// Its price in pence.
    pub pence: u32,
}

/// Reads "£12.34" as 1234 pence.
pub(crate) fn pence(price: &str) -> Option<u32> {
    let (pounds, p) = price.trim().trim_start_matches('£').split_once('.')?;
    Some(pounds.parse::<u32>().ok()? * 100 + p.parse::<u32>().ok()?)
}

/// Crawls the catalogue listings and book pages.
pub(crate) struct Catalogue {
    /// The site's root URL.
    pub start: String,
}

impl Spider for Catalogue {
    type Item = Book;

    fn name(&self) -> &str {
        "custom_middleware"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![format!("{}catalogue/page-1.html", self.start)]
    }

    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        if page.callback() == Some("book") {
            let price = page.text_of("div.product p.price")?;
            out.item(Book {
                url: page.url().to_string(),
                title: page.text_of("div.product h1")?,
                pence: pence(&price)
                    .ok_or_else(|| crawler::Error::msg(format!("bad price {price}")))?,
            });
            return Ok(());
        }
        out.follow_all(page.select("li.next a").attrs("href"));
        for href in page.select("article.book h3 a").attrs("href") {
            out.follow_with(href, "book");
        }
        Ok(())
    }
}

/// Adds `X-Crawl-Tag: <tag>` to every request and counts responses by status class.
pub(crate) struct Tag {
    /// The tag sent.
    pub tag: String,
    ok: AtomicU64,
    other: AtomicU64,
}

impl Tag {
    /// A middleware sending `tag`.
    pub(crate) fn new(tag: &str) -> Self {
        Self {
            tag: tag.to_owned(),
            ok: AtomicU64::new(0),
            other: AtomicU64::new(0),
        }
    }
}

impl DownloaderMiddleware for Tag {
    fn name(&self) -> &str {
        "tag"
    }

    async fn process_request(&self, request: &mut Request) -> Action {
        request
            .headers
            .push(("X-Crawl-Tag".to_owned(), self.tag.clone()));
        Action::Continue
    }

    async fn process_response(&self, _request: &Request, response: Response) -> After {
        let counter = if (200..300).contains(&response.status()) {
            &self.ok
        } else {
            &self.other
        };
        counter.fetch_add(1, Ordering::Relaxed);
        After::Pass(response)
    }

    fn counters(&self) -> Vec<(String, u64)> {
        vec![
            ("responses_2xx".to_owned(), self.ok.load(Ordering::Relaxed)),
            (
                "responses_other".to_owned(),
                self.other.load(Ordering::Relaxed),
            ),
        ]
    }
}

/// Drops books priced over a limit.
pub(crate) struct MaxPrice {
    /// The highest price kept, in pence.
    pub pence: u32,
}

impl SpiderMiddleware<Book> for MaxPrice {
    fn name(&self) -> &str {
        "max_price"
    }

    fn process_output(&self, _page: &Page, items: &mut Vec<Book>, _requests: &mut Vec<Request>) {
        items.retain(|b| b.pence <= self.pence);
    }
}

/// The crawl this example runs: the spider with both middlewares.
pub(crate) fn crawl(start: String, tag: &str, max_pence: u32) -> Crawl<Catalogue> {
    Crawl::new(Catalogue { start })
        .downloader_middleware(Tag::new(tag))
        .spider_middleware(MaxPrice { pence: max_pence })
}

#[allow(dead_code)] // tests include this file as a module and use only the spider
#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    crawler::init_logging();
    let lab = crawler_lab::Lab::builder().books(200).start().await?;
    println!("lab site with 200 books at {}", lab.url());
    let stats = crawl(lab.url(), "custom-middleware-example", 3000)
        .feed("custom_middleware.jsonl")?
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("concurrency_per_host", "16")
        .run()
        .await?;
    println!("{stats}");
    let tagged = lab
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.tag.as_deref() == Some("custom-middleware-example"))
        .count();
    println!("requests the lab saw with our X-Crawl-Tag: {tagged}");
    println!("books at £30.00 or less written to custom_middleware.jsonl");
    lab.shutdown().await;
    Ok(())
}
