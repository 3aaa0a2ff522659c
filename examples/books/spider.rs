//! An example spider: the book catalogue of the crawler lab (`crawler lab` serves it on
//! http://127.0.0.1:8080/). Listing pages (next pages, categories) are followed; each book
//! page gives one item. robots.txt keeps the crawl out of the lab's /private/ area.

use crawler::prelude::*;

/// One book, as scraped from its detail page.
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Book {
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
    pub fn from_page(page: &Response) -> Result<Self> {
        Ok(Self {
            url: page.url().to_string(),
            title: page.text_of("div.product h1")?,
            price: page.text_of("div.product p.price")?,
            stock: page.text_of("div.product p.stock")?,
        })
    }
}

/// Crawls a catalogue from one start URL.
pub struct Books {
    /// Where to start: the site root, ending in `/`.
    pub start: String,
}

impl Books {
    /// Start at $BOOKS_URL, or the lab's default address.
    #[allow(dead_code)] // not every user of this spider reads the environment
    pub fn from_env() -> Self {
        let mut start =
            std::env::var("BOOKS_URL").unwrap_or_else(|_| "http://127.0.0.1:8080/".to_owned());
        if !start.ends_with('/') {
            start.push('/');
        }
        Self { start }
    }
}

impl Spider for Books {
    type Item = Book;

    fn name(&self) -> &str {
        "books"
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
                out.follow_with(href, "book");
            } else {
                out.follow(href);
            }
        }
        Ok(())
    }
}
