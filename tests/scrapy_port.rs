//! Two Scrapy spiders ported line by line, each in its CSS and its XPath form, crawling the
//! lab: every form gives every item, and the same items. The Python each one ports is in
//! its doc comment; the Rust keeps its logic (selectors, `.get()`, `.re_first()`, meta,
//! a duplicates pipeline, a close condition).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};

use crawler::prelude::*;
use crawler_lab::Lab;

/// Which selector language a ported spider uses.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Flavor {
    Css,
    XPath,
}

/// The same query in both languages.
fn pick<'a>(flavor: Flavor, css: &'a str, xpath: &'a str) -> (&'a str, Flavor) {
    match flavor {
        Flavor::Css => (css, flavor),
        Flavor::XPath => (xpath, flavor),
    }
}

/// Run a query on a page or a node in its language.
macro_rules! q {
    ($on:expr, $flavor:expr, $css:expr, $xpath:expr) => {{
        match pick($flavor, $css, $xpath) {
            (css, Flavor::Css) => $on.select(css),
            (xpath, Flavor::XPath) => $on.xpath(xpath),
        }
    }};
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
struct Book {
    title: String,
    price: String,
    category: String,
}

/// Ports:
///
/// ```python
/// class BooksSpider(scrapy.Spider):
///     name = "books"
///     def parse(self, response):
///         for book in response.css("article.book"):
///             yield {
///                 "title": book.css("h3 a::attr(title)").get(),
///                 "price": book.css("p.price::text").re_first(r"[\d.]+"),
///                 "category": response.css("h1::text").get(),
///             }
///         next_page = response.css("li.next a::attr(href)").get()
///         if next_page is not None:
///             yield response.follow(next_page, callback=self.parse)
/// ```
struct Listing {
    start: String,
    flavor: Flavor,
}

impl Spider for Listing {
    type Item = Book;
    fn name(&self) -> &str {
        "listing"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }
    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        let f = self.flavor;
        for book in q!(page, f, "article.book", "//article[@class='book']") {
            out.item(Book {
                title: q!(book, f, "h3 a::attr(title)", "h3/a/@title")
                    .get()
                    .context("a title")?,
                price: q!(book, f, "p.price::text", ".//p[@class='price']/text()")
                    .re_first(r"[\d.]+")
                    .context("a price")?,
                category: q!(page, f, "h1::text", "//h1/text()")
                    .get()
                    .context("a heading")?,
            });
        }
        let next = q!(
            page,
            f,
            "li.next a::attr(href)",
            "//li[@class='next']/a/@href"
        )
        .get();
        if let Some(next) = next {
            out.follow(next);
        }
        Ok(())
    }
}

/// Scrapy's `DuplicatesPipeline`: an item whose title was seen is dropped.
#[derive(Default, Clone)]
struct Duplicates {
    seen: Arc<Mutex<HashSet<String>>>,
    kept: Arc<Mutex<Vec<Book>>>,
}

impl Pipeline<Book> for Duplicates {
    async fn process(&self, item: Book) -> Result<Processed<Book>> {
        if !self
            .seen
            .lock()
            .expect("not poisoned")
            .insert(item.title.clone())
        {
            return Ok(Processed::Drop(format!("duplicate title {}", item.title)));
        }
        self.kept.lock().expect("not poisoned").push(item.clone());
        Ok(Processed::Keep(item))
    }
}

/// Ports (meta carries the listing's category to each book page; the crawl closes after
/// `CLOSESPIDER_ITEMCOUNT` items):
///
/// ```python
/// class BookPagesSpider(scrapy.Spider):
///     name = "book_pages"
///     custom_settings = {"CLOSESPIDER_ITEMCOUNT": 30}
///     def parse(self, response):
///         category = response.css("ul.breadcrumb li.active::text").get()
///         yield from response.follow_all(css="article.book h3 a", callback=self.parse_book,
///                                        meta={"category": category})
///         yield from response.follow_all(css="li.next a", callback=self.parse)
///     def parse_book(self, response):
///         yield {
///             "title": response.xpath("normalize-space(//div[@class='product']/h1)").get(),
///             "price": response.css("div.product p.price::text").re_first(r"[\d.]+"),
///             "category": response.meta["category"],
///         }
/// ```
struct BookPages {
    start: String,
    flavor: Flavor,
}

impl Spider for BookPages {
    type Item = Book;
    fn name(&self) -> &str {
        "book_pages"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }
    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        let f = self.flavor;
        if page.callback() == Some("parse_book") {
            out.item(Book {
                title: q!(
                    page,
                    f,
                    "div.product h1",
                    "normalize-space(//div[@class='product']/h1)"
                )
                .text()
                .context("a title")?,
                price: q!(
                    page,
                    f,
                    "div.product p.price::text",
                    "//div[@class='product']/p[@class='price']/text()"
                )
                .re_first(r"[\d.]+")
                .context("a price")?,
                category: page.meta("category").context("the category in meta")?,
            });
            return Ok(());
        }
        let category = q!(
            page,
            f,
            "ul.breadcrumb li.active::text",
            "//ul[@class='breadcrumb']/li[@class='active']/text()"
        )
        .get()
        .context("a breadcrumb")?;
        out.follow_all(q!(page, f, "article.book h3 a", "//article/h3/a").attrs("href"))
            .callback("parse_book")
            .meta("category", &category)?;
        out.follow_all(q!(page, f, "li.next a", "//li[@class='next']/a").attrs("href"));
        Ok(())
    }
}

fn fast<S: Spider>(crawl: Crawl<S>) -> Crawl<S> {
    crawl
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("concurrency_per_host", "8")
        .progress(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ported_spiders_give_every_item_in_css_and_xpath_alike() {
    let lab = Lab::builder().books(100).start().await.expect("lab starts");
    // One category's listing: its books, across its pages.
    let category = lab.url_for("/category/mystery/page-1.html");

    let mut listings = BTreeMap::new();
    for flavor in [Flavor::Css, Flavor::XPath] {
        let dedup = Duplicates::default();
        let stats = fast(Crawl::new(Listing {
            start: lab.url_for("/catalogue/page-1.html"),
            flavor,
        }))
        .pipeline(dedup.clone())
        .run()
        .await
        .expect("crawl runs");
        assert_eq!(stats.spider_errors, 0, "{flavor:?}: {stats}");
        let mut kept = dedup.kept.lock().expect("not poisoned").clone();
        kept.sort();
        assert_eq!(
            kept.len(),
            100,
            "{flavor:?}: every book of the catalogue: {stats}"
        );
        assert!(
            kept.iter()
                .all(|b| b.price.parse::<f64>().is_ok() && b.category == "All books"),
            "{flavor:?}: {kept:?}"
        );
        listings.insert(format!("{flavor:?}"), kept);
    }
    assert_eq!(
        listings["Css"], listings["XPath"],
        "both forms give the same items"
    );

    let mut pages = BTreeMap::new();
    for flavor in [Flavor::Css, Flavor::XPath] {
        let dedup = Duplicates::default();
        let stats = fast(Crawl::new(BookPages {
            start: category.clone(),
            flavor,
        }))
        .set("close_item_count", "5")
        .pipeline(dedup.clone())
        .run()
        .await
        .expect("crawl runs");
        assert_eq!(stats.spider_errors, 0, "{flavor:?}: {stats}");
        assert_eq!(stats.close_reason, "close_item_count", "{stats}");
        let kept = dedup.kept.lock().expect("not poisoned").clone();
        // As in Scrapy, pages in flight when the count is reached still give their items.
        assert!(
            (5..=5 + 8).contains(&kept.len()),
            "{flavor:?}: the close count and at most the pages in flight: {stats}"
        );
        for book in &kept {
            // The title and price from the book's page match its listing entry, and the
            // category came through meta.
            let listed = listings["Css"]
                .iter()
                .find(|b| b.title == book.title)
                .unwrap_or_else(|| panic!("{flavor:?}: {book:?} is a book of the catalogue"));
            assert_eq!(book.price, listed.price, "{flavor:?}");
            assert_eq!(book.category, "Mystery", "{flavor:?}: {book:?}");
        }
        pages.insert(format!("{flavor:?}"), kept);
    }
    assert!(pages.values().all(|kept| !kept.is_empty()));
    lab.shutdown().await;
}
