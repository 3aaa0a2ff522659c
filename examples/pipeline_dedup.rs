//! pipeline_dedup: an item pipeline that validates, drops duplicates and stores items.
//!
//! The spider reads every book three times: on the catalogue listing, on its category
//! listing, and on its own page. [`SledStore`], one pipeline stage, drops items without a
//! title or with an unreadable price, and writes the rest to a sled tree keyed by title; the
//! write is a compare-and-swap, so a title already stored is dropped as a duplicate even when
//! two pages carrying it are processed at once. The stats count the drops.
//!
//! ```text
//! cargo run --release --example pipeline_dedup              # stores in ./pipeline_dedup.sled
//! ```

use std::sync::atomic::{AtomicU64, Ordering};

use crawler::prelude::*;

/// A book as any page shows it.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub(crate) struct Book {
    /// Full title.
    pub title: String,
    /// Price as shown, e.g. "£12.34".
    pub price: String,
    /// Where it was read.
    pub url: String,
}

/// Reads books from listings (the full title is the link's `title`) and book pages.
pub(crate) struct Shop {
    /// The site's root URL.
    pub start: String,
}

impl Spider for Shop {
    type Item = Book;

    fn name(&self) -> &str {
        "pipeline_dedup"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }

    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        if page.callback() == Some("book") {
            out.item(Book {
                title: page.text_of("div.product h1")?,
                price: page.text_of("div.product p.price")?,
                url: page.url().to_string(),
            });
            return Ok(());
        }
        for card in page.select("article.book") {
            let title = card.select("h3 a").attr("title").unwrap_or_default();
            let price = card.select("p.price").text().unwrap_or_default();
            out.item(Book {
                title,
                price,
                url: page.url().to_string(),
            });
        }
        for href in page.select("article.book h3 a").attrs("href") {
            out.follow_with(href, "book");
        }
        // Listings: the catalogue and category pages and their next pages.
        for href in page.select("a").attrs("href") {
            if href.contains("page-") && !href.contains("book-") {
                out.follow(href);
            }
        }
        Ok(())
    }
}

/// Validates items and stores each title once in a sled tree.
pub(crate) struct SledStore {
    tree: sled::Tree,
    stored: AtomicU64,
}

impl SledStore {
    /// Open (or create) the store in `dir`, with a small page cache: sled's default is 1 GiB.
    pub(crate) fn open(dir: &std::path::Path) -> std::result::Result<Self, sled::Error> {
        let db = sled::Config::new()
            .path(dir)
            .cache_capacity(8 * 1024 * 1024)
            .open()?;
        Ok(Self {
            tree: db.open_tree("books")?,
            stored: AtomicU64::new(0),
        })
    }

    /// Items written so far by this store (tests/examples.rs reads it).
    #[allow(dead_code)]
    pub(crate) fn stored(&self) -> u64 {
        self.stored.load(Ordering::Relaxed)
    }

    /// Every stored book, by title (tests/examples.rs reads it).
    #[allow(dead_code)]
    pub(crate) fn books(&self) -> Vec<Book> {
        self.tree
            .iter()
            .values()
            .filter_map(|v| v.ok())
            .filter_map(|v| serde_json::from_slice(&v).ok())
            .collect()
    }
}

fn store_error(e: impl std::fmt::Display) -> crawler::Error {
    crawler::Error::msg(format!("item store: {e}"))
}

impl Pipeline<Book> for SledStore {
    async fn process(&self, book: Book) -> Result<Processed<Book>> {
        let title = book.title.trim();
        if title.is_empty() {
            return Ok(Processed::Drop("no title".into()));
        }
        let price_ok = book
            .price
            .trim()
            .strip_prefix('£')
            .and_then(|p| p.split_once('.'))
            .is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.len() == 2);
        if !price_ok {
            return Ok(Processed::Drop(format!(
                "unreadable price '{}'",
                book.price
            )));
        }
        let value = serde_json::to_vec(&book).map_err(store_error)?;
        // Insert only if absent: atomic, so concurrent duplicates cannot both get in.
        let swapped = self
            .tree
            .compare_and_swap(title.as_bytes(), None as Option<&[u8]>, Some(value))
            .map_err(store_error)?;
        if swapped.is_err() {
            return Ok(Processed::Drop(format!("duplicate title '{title}'")));
        }
        self.stored.fetch_add(1, Ordering::Relaxed);
        Ok(Processed::Keep(book))
    }

    async fn close(&self) -> Result<()> {
        self.tree.flush_async().await.map_err(store_error)?;
        Ok(())
    }
}

#[allow(dead_code)] // tests include this file as a module and use only the spider
#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    crawler::init_logging();
    let lab = crawler_lab::Lab::builder().books(200).start().await?;
    println!("lab site with 200 books at {}", lab.url());
    let dir = std::path::Path::new("pipeline_dedup.sled");
    let store = SledStore::open(dir)?;
    let tree = store.tree.clone();
    let stats = Crawl::new(Shop { start: lab.url() })
        .pipeline(store)
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("concurrency_per_host", "16")
        .run()
        .await?;
    println!("{stats}");
    println!(
        "{} unique books in {} ({} items dropped as duplicates or invalid)",
        tree.len(),
        dir.display(),
        stats.items_dropped
    );
    lab.shutdown().await;
    Ok(())
}
