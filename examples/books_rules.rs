//! books_rules: a crawl driven by rules, like Scrapy's `CrawlSpider`.
//!
//! Instead of picking links by hand in `parse`, the spider declares two rules: follow the
//! catalogue's listing pages (`/catalogue/page-N.html`), and parse each book page
//! (`/catalogue/book-ID.html`) with the "book" callback. Everything else the pages link to
//! (categories, the sitemap, robots.txt, the private area) matches no rule and is never
//! requested. `parse` only scrapes book pages and hands every page to `Rules::apply`, which
//! knows which pages to take links from.
//!
//! With no argument it starts the bundled lab site in-process, so it runs offline; given a
//! URL it crawls that site with the default polite settings.
//!
//! ```text
//! cargo run --release --example books_rules                 # the lab, 1,000 books
//! cargo run --release --example books_rules -- http://127.0.0.1:8080/
//! ```
//!
//! Items go to `books_rules.jsonl`; the final stats are printed.

// The book item and how a book page is scraped are the basic example's.
#[allow(dead_code)] // its `Books` spider is not used here
#[path = "books/spider.rs"]
mod spider;

use crawler::prelude::*;
use crawler::spiders::{LinkExtractor, Rule, Rules};
pub(crate) use spider::Book;

/// Crawls a catalogue by rules from one start URL.
pub(crate) struct BooksRules {
    start: String,
    rules: Rules,
}

impl BooksRules {
    /// The spider for the catalogue at `start` (its index page).
    pub(crate) fn new(start: impl Into<String>) -> Result<Self> {
        // Patterns are searched in the absolute URL; anchoring the end keeps
        // `page-1.html?sort=x` style variants out.
        let listings = LinkExtractor::builder()
            .allow([r"/catalogue/page-\d+\.html$"])
            .build()?;
        let books = LinkExtractor::builder()
            .allow([r"/catalogue/book-\d+\.html$"])
            // Look only inside the book cards: a listing's navigation and footer hold no
            // books, so this skips most of the page's links before any pattern runs.
            .restrict_css(["article.book"])
            .build()?;
        Ok(Self {
            start: start.into(),
            rules: Rules::new([
                // No callback: follow, i.e. run the rules again on each listing page.
                Rule::new(listings),
                // A callback: parse with "book", and (by default) take no links from it.
                Rule::new(books).callback("book"),
            ]),
        })
    }
}

impl Spider for BooksRules {
    type Item = Book;

    fn name(&self) -> &str {
        "books_rules"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }

    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        if page.callback() == Some("book") {
            out.item(Book::from_page(&page)?);
        }
        self.rules.apply(&page, out);
        Ok(())
    }
}

#[allow(dead_code)] // tests include this file as a module and use only the spider
#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    crawler::init_logging();
    let mut lab = None;
    let start = match std::env::args().nth(1) {
        Some(url) => url,
        None => {
            let site = crawler_lab::Lab::builder().books(1000).start().await?;
            println!("lab site with 1,000 books at {}", site.url());
            let url = site.url();
            lab = Some(site);
            url
        }
    };
    let mut crawl = Crawl::new(BooksRules::new(start)?).feed("books_rules.jsonl")?;
    if lab.is_some() {
        // The lab is our own server on loopback, so this run lifts the per-host budget
        // (no adaptive ceiling, no delay), as you would for a host you own. Other sites get
        // the polite defaults.
        crawl = crawl
            .set("throttle", "fixed")
            .set("concurrency_per_host", "16")
            .set("download_delay", "0s");
    }
    let stats = crawl.run().await?;
    println!("{stats}");
    println!("items written to books_rules.jsonl");
    if let Some(lab) = lab {
        let recorder = lab.recorder();
        println!(
            "requests: {} listing pages, {} book pages, {} category pages (no rule matches them)",
            recorder.count_prefix("/catalogue/page-"),
            recorder.count_prefix("/catalogue/book-"),
            recorder.count_prefix("/category/"),
        );
        lab.shutdown().await;
    }
    Ok(())
}
