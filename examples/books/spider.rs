//! An example spider: the book catalogue of the crawler lab (`crawler lab` serves it on
//! http://127.0.0.1:8080/). Listing pages (next pages, categories) are followed; each book
//! page gives one item. robots.txt keeps the crawl out of the lab's /private/ area.
//! `crawl books -a url=http://host/` points it at another copy of the site.

use crawler::prelude::*;

/// One book, as scraped from its detail page.
#[derive(Debug, Serialize, serde::Deserialize)]
pub(crate) struct Book {
    /// The page the book was found on.
    pub url: String,
    /// Its title.
    pub title: String,
    /// Its price as shown, e.g. "£51.77".
    pub price: String,
    /// The stock line, e.g. "In stock (19 available)".
    pub stock: String,
}

impl Book {
    /// Scrape a book's detail page.
    pub(crate) fn from_page(page: &Response) -> Result<Self> {
        Ok(Self {
            url: page.url().to_string(),
            title: page.text_of("div.product h1")?,
            price: page.text_of("div.product p.price")?,
            stock: page.text_of("div.product p.stock")?,
        })
    }
}

/// Crawls a catalogue from one start URL.
pub(crate) struct Books {
    /// Where to start: the site root, ending in `/`.
    pub start: String,
}

impl Default for Books {
    /// Start at the lab's default address (`crawler lab`).
    fn default() -> Self {
        Self {
            start: "http://127.0.0.1:8080/".to_owned(),
        }
    }
}

impl Spider for Books {
    type Item = Book;

    fn name(&self) -> &str {
        "books"
    }

    /// `-a url=http://host/` starts the crawl there instead.
    fn open(&mut self, ctx: &SpiderContext) -> Result<()> {
        if let Some(url) = ctx.arg("url") {
            self.start = url.trim().to_owned();
            // The site root: relative links and the contract resolve against it.
            if !self.start.ends_with('/') {
                self.start.push('/');
            }
        }
        Ok(())
    }

    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }

    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        if page.callback() == Some("book") {
            out.item(Book::from_page(&page)?);
            return Ok(());
        }
        // A listing or index page: book links get the "book" callback, everything else
        // (next pages, categories) is another listing.
        for href in page.select("a").attrs("href") {
            if href.contains("/book-") || href.starts_with("book-") {
                out.follow(href).callback("book");
            } else {
                out.follow(href);
            }
        }
        Ok(())
    }
}
