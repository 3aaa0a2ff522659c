//! sitemap: a spider that starts from sitemaps and re-crawls incrementally.
//!
//! Instead of following links, the spider reads the site's robots.txt `Sitemap:` line, walks
//! the sitemap index into its gzipped sitemaps, and requests only the book pages (a rule maps
//! `/catalogue/book-N.html` to the `book` callback; other entries are ignored). Validators
//! are kept in a cache directory, so a later run skips every sitemap entry whose `<lastmod>`
//! is not newer than the copy fetched last time: no request at all for unchanged books.
//!
//! With no argument it starts the bundled lab (10,000 books) in-process and crawls it three
//! times against one cache directory: a first full crawl, a second one of the unchanged site
//! (every book skipped by lastmod: only robots.txt and the sitemaps are fetched), and a third
//! after the lab changed 5% of its books (exactly those are fetched). Given a cache directory
//! and a site URL, it crawls that site once; run it twice to see the skip.
//!
//! ```text
//! cargo run --release --example sitemap                          # the lab, three runs
//! cargo run --release --example sitemap -- ./cache http://127.0.0.1:8080/
//! ```

use crawler::prelude::*;
use crawler::spiders::{LASTMOD_META, SitemapSpider, SitemapStats};

/// One book, from its detail page.
#[derive(Debug, Serialize, serde::Deserialize)]
pub(crate) struct Book {
    /// The page the book was found on.
    pub url: String,
    /// Its title.
    pub title: String,
    /// Its price as shown, e.g. "£51.77".
    pub price: String,
    /// The sitemap's `<lastmod>` for the page (Unix seconds), when it had one.
    pub lastmod: Option<i64>,
}

/// Crawls the books a site's sitemaps list.
pub(crate) struct BookSitemap {
    /// The sitemap helper: start requests, sitemap parsing, rules, lastmod skip.
    pub sitemaps: SitemapSpider,
}

impl BookSitemap {
    /// A spider for the site at `site`, starting from its robots.txt `Sitemap:` lines.
    pub(crate) fn new(site: &str) -> Result<Self> {
        Ok(Self {
            sitemaps: SitemapSpider::builder()
                .robots(site)
                .rule(r"/catalogue/book-\d+\.html$", "book")
                .build()?,
        })
    }
}

impl Spider for BookSitemap {
    type Item = Book;

    fn name(&self) -> &str {
        "sitemap-books"
    }

    fn start_requests(&self) -> Result<Vec<Request>> {
        Ok(self.sitemaps.start_requests())
    }

    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        if self.sitemaps.handle(&page, out).await? {
            return Ok(());
        }
        if page.callback() == Some("book") {
            out.item(Book {
                url: page.url().to_string(),
                title: page.text_of("div.product h1")?,
                price: page.text_of("div.product p.price")?,
                lastmod: page.meta(LASTMOD_META),
            });
        }
        Ok(())
    }
}

/// One crawl of `site` keeping validators in `cache_dir`: the crawl's stats and the sitemap
/// helper's.
pub(crate) async fn crawl(
    site: &str,
    cache_dir: &std::path::Path,
    tune: impl FnOnce(Crawl<BookSitemap>) -> Crawl<BookSitemap>,
) -> std::result::Result<(Stats, SitemapStats), crawler::Error> {
    let spider = BookSitemap::new(site)?;
    let sitemap_stats = spider.sitemaps.stats_handle();
    let crawl = Crawl::new(spider).set("cache_dir", cache_dir.to_string_lossy().into_owned());
    let stats = tune(crawl).run().await?;
    Ok((stats, sitemap_stats.get()))
}

#[allow(dead_code)] // tests include this file as a module and use only the spider
#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    crawler::init_logging();
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [dir, site] = args.as_slice() {
        let (stats, sitemaps) = crawl(site, std::path::Path::new(dir), |c| c).await?;
        println!("{stats}");
        println!("{sitemaps:#?}");
        return Ok(());
    }

    let lab = crawler_lab::Lab::builder().books(10_000).start().await?;
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("cache");
    println!("lab site with 10,000 books at {}", lab.url());
    println!("validators kept in {}\n", dir.display());
    println!(
        "| run | lab requests | book pages fetched | entries skipped (lastmod) | items | time |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for run in ["first", "unchanged", "5% changed"] {
        if run == "5% changed" {
            lab.mutate(0.05);
        }
        lab.recorder().clear();
        // The lab is our own server on loopback, so the per-host budget is raised, as you
        // would for a host you own. Other sites get the polite defaults.
        let (stats, sitemaps) = crawl(&lab.url(), &dir, |c| {
            c.set("concurrency_per_host", "16")
                .set("throttle", "fixed")
                .set("download_delay", "0s")
                .progress(false)
        })
        .await?;
        let books = lab.recorder().count_prefix("/catalogue/book-");
        println!(
            "| {run} | {} | {books} | {} | {} | {:.2}s |",
            lab.recorder().len(),
            sitemaps.skipped_unchanged,
            stats.items_scraped,
            stats.elapsed.as_secs_f64()
        );
    }
    lab.shutdown().await;
    Ok(())
}
