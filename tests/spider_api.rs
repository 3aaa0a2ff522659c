//! The spider-writing API end to end against the lab: following with callback and meta in
//! one call, spider errors logged with their page and callback, invalid selectors that
//! write no item, and spider arguments and settings reaching `Spider::open`.

use std::io::Write;
use std::sync::{Arc, Mutex};

use crawler::prelude::*;
use crawler::{Error, ErrorKind};
use crawler_lab::Lab;

/// What each test's spider does on a book page.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// A price that parses, the listing page carried in meta.
    Good,
    /// Parse the stock line as a number: fails, with context.
    BadNumber,
    /// A typo in a selector, its text defaulted to empty.
    BadSelector,
    /// Emit the item, then panic.
    Panic,
}

#[derive(Debug, Serialize, serde::Deserialize)]
struct Book {
    url: String,
    title: String,
    price: f64,
    listing: u32,
    tag: String,
    user_agent: String,
}

struct Books {
    start: String,
    mode: Mode,
    /// From `-a tag=...`.
    tag: String,
    /// From the effective settings.
    user_agent: String,
}

impl Books {
    fn new(lab: &Lab, mode: Mode) -> Self {
        Self {
            start: format!("{}catalogue/page-1.html", lab.url()),
            mode,
            tag: String::new(),
            user_agent: String::new(),
        }
    }
}

impl Spider for Books {
    type Item = Book;

    fn name(&self) -> &str {
        "books"
    }

    fn open(&mut self, ctx: &SpiderContext) -> Result<()> {
        self.tag = ctx.arg("tag").unwrap_or("none").to_owned();
        self.user_agent = ctx.settings().user_agent.clone();
        Ok(())
    }

    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }

    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        if page.callback() != Some("book") {
            // One listing page: its 20 books, each told which listing it came from.
            for href in page.select("article.book h3 a").attrs("href") {
                out.follow(href).callback("book").meta("listing", 1u32)?;
            }
            return Ok(());
        }
        let title = match self.mode {
            Mode::BadSelector => page.select("div.product h1[").text().unwrap_or_default(),
            _ => page.text_of("div.product h1")?,
        };
        let price = page
            .select("div.product p.price")
            .text()
            .context("no price")?
            .trim_start_matches('£')
            .parse::<f64>()
            .context("price of a book")?;
        if self.mode == Mode::Panic {
            out.item(Book {
                url: page.url().to_string(),
                title: title.clone(),
                price,
                listing: 0,
                tag: String::new(),
                user_agent: String::new(),
            });
            panic!("boom on purpose");
        }
        if self.mode == Mode::BadNumber {
            let stock = page.text_of("div.product p.stock")?;
            let _count: u32 = stock.parse().context("stock count")?;
        }
        out.item(Book {
            url: page.url().to_string(),
            title,
            price,
            listing: page.meta("listing").context("no listing in meta")?,
            tag: self.tag.clone(),
            user_agent: self.user_agent.clone(),
        });
        Ok(())
    }
}

/// Log lines written while `f` runs on this thread (the crawl runs on a current-thread
/// runtime, so its workers log here too).
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .with_writer(move || writer.clone())
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text =
        String::from_utf8_lossy(&sink.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned();
    (out, text)
}

/// Crawl the lab's first catalogue page and its 20 books with `spider`; the stats and the
/// items written.
fn crawl(
    spider: Books,
    configure: impl FnOnce(Crawl<Books>) -> Crawl<Books>,
) -> (Stats, Vec<Book>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let feed = dir.path().join("books.jsonl");
    let crawl = configure(
        Crawl::new(spider)
            .set("throttle", "fixed")
            .set("download_delay", "0s")
            .set("concurrency_per_host", "8")
            .progress(false),
    )
    .feed(&feed)
    .expect("feed");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let stats = rt.block_on(crawl.run()).expect("crawl runs");
    let items = std::fs::read_to_string(&feed)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("valid JSON line"))
        .collect();
    (stats, items)
}

fn lab() -> (tokio::runtime::Runtime, Lab) {
    // The lab runs on a runtime of its own, so the crawl's runtime logs only the crawl.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let lab = rt
        .block_on(Lab::builder().books(100).start())
        .expect("lab starts");
    (rt, lab)
}

#[test]
fn follow_with_meta_arguments_and_settings_reach_the_items() {
    let (_rt, lab) = lab();
    let spider = Books::new(&lab, Mode::Good);
    let (stats, items) = crawl(spider, |c| {
        c.arg("tag", "nightly")
            .set("user_agent", "apitest/1.0 (+https://example.com)")
    });
    assert_eq!(items.len(), 20, "{stats}");
    assert_eq!(stats.spider_errors, 0, "{stats}");
    let book = lab.book(3).expect("book 3");
    let item = items
        .iter()
        .find(|b| b.url.ends_with(&book.path))
        .expect("book 3 scraped");
    assert_eq!(item.title, book.title);
    assert_eq!(format!("£{:.2}", item.price), book.price);
    assert!(items.iter().all(|b| b.listing == 1 && b.tag == "nightly"));
    assert!(
        items
            .iter()
            .all(|b| b.user_agent == "apitest/1.0 (+https://example.com)")
    );
}

#[test]
fn an_unknown_argument_stops_the_crawl_before_it_starts() {
    let (_rt, lab) = lab();
    let e: Error = Crawl::new(Books::new(&lab, Mode::Good))
        .arg("tga", "x")
        .build()
        .err()
        .expect("unknown argument refused");
    assert_eq!(e.kind(), ErrorKind::Argument, "{e}");
    let text = e.to_string();
    assert!(text.contains("unknown argument 'tga'"), "{text}");
    assert!(text.contains("did you mean 'tag'"), "{text}");
    assert!(lab.recorder().requests().is_empty(), "nothing was fetched");
}

#[test]
fn a_spider_error_is_logged_with_url_callback_and_context() {
    let (_rt, lab) = lab();
    let spider = Books::new(&lab, Mode::BadNumber);
    let ((stats, items), log) = logged(|| crawl(spider, |c| c));
    assert!(items.is_empty(), "every book page failed");
    assert_eq!(stats.spider_errors, 20, "{stats}");
    let book = lab.url_for(&lab.book(5).expect("book 5").path);
    let line = log
        .lines()
        .find(|l| l.contains(&book))
        .unwrap_or_else(|| panic!("no log line for {book}:\n{log}"));
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains("callback=\"book\""), "{line}");
    assert!(
        line.contains("spider error: stock count: invalid digit found in string"),
        "{line}"
    );
}

#[test]
fn a_panicking_callback_is_logged_with_its_page_and_writes_no_item() {
    let (_rt, lab) = lab();
    let spider = Books::new(&lab, Mode::Panic);
    let ((stats, items), log) = logged(|| crawl(spider, |c| c));
    assert!(
        items.is_empty(),
        "the item emitted before the panic is not written"
    );
    assert_eq!(stats.spider_errors, 20, "{stats}");
    assert_eq!(
        stats.fetched, 21,
        "the crawl went on after each panic: {stats}"
    );
    let book = lab.url_for(&lab.book(5).expect("book 5").path);
    let line = log
        .lines()
        .find(|l| l.contains(&book) && l.contains("panicked"))
        .unwrap_or_else(|| panic!("no log line for {book}:\n{log}"));
    assert!(line.contains("callback=\"book\""), "{line}");
    assert!(
        line.contains("spider error: the callback panicked: boom on purpose"),
        "{line}"
    );
}

#[test]
fn an_invalid_selector_fails_the_page_and_writes_no_item() {
    let (_rt, lab) = lab();
    let spider = Books::new(&lab, Mode::BadSelector);
    let ((stats, items), log) = logged(|| crawl(spider, |c| c));
    assert!(
        items.is_empty(),
        "no half-empty item: {:?}",
        items.first().map(|b| &b.title)
    );
    assert_eq!(stats.spider_errors, 20, "{stats}");
    assert_eq!(stats.items_scraped, 0);
    // The listing page's links were still followed.
    assert_eq!(stats.fetched, 21, "{stats}");
    assert!(
        log.contains("invalid CSS selector 'div.product h1['"),
        "{log}"
    );
    assert!(log.contains("items of the page not written"), "{log}");
}
