//! images: crawl the bundled lab's book catalogue and download a cover image per book with
//! the images pipeline (Scrapy's `ImagesPipeline`): each image is a request of the crawl
//! (paced, held and robots-gated with the pages), stored once by the SHA-256 of its bytes in
//! `images-out/full/`, with a thumbnail in `images-out/thumbs/small/`, and each item's
//! `images` field says where its covers went.
//!
//! The lab's covers are generated (`/media/img-WxH-N.png`): ten different ones for the
//! 1,000 books, 60 to 330 pixels wide. The two narrowest are under `images_min_width`
//! (100) and are left out, as they would be in Scrapy, so the store ends with eight files
//! however many books name them.
//!
//! ```text
//! cargo run --release --example images
//! ls images-out/full images-out/thumbs/small; head -c 600 images-out/books.jsonl
//! ```

use crawler::files::{FileRecord, FilesPipeline};
use crawler::prelude::*;

/// A book, with the cover its page shows and where the pipeline stored it.
#[derive(Debug, Serialize, serde::Deserialize)]
struct Book {
    url: String,
    title: String,
    image_urls: Vec<String>,
    #[serde(default)]
    images: Vec<FileRecord>,
}

struct Covers {
    start: String,
}

impl Spider for Covers {
    type Item = Book;

    fn name(&self) -> &str {
        "covers"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }

    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        if page.callback() == Some("book") {
            // The lab's book pages have no cover: each book gets one of ten generated ones.
            let n: u32 = page
                .url()
                .path()
                .rsplit("book-")
                .next()
                .and_then(|s| s.strip_suffix(".html"))
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            let cover = format!(
                "{}media/img-{}x{}-{}.png",
                self.start,
                60 + (n % 10) * 30,
                300,
                n % 10
            );
            out.item(Book {
                url: page.url().to_string(),
                title: page.text_of("div.product h1")?,
                image_urls: vec![cover],
                images: Vec::new(),
            });
            return Ok(());
        }
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

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    crawler::init_logging();
    let lab = crawler_lab::Lab::builder().books(1_000).start().await?;
    // The feed goes beside the images; a feed's directory must exist.
    std::fs::create_dir_all("images-out")?;
    let stats = Crawl::new(Covers { start: lab.url() })
        .set("images_store", "images-out")
        .set("images_min_width", "100")
        .set("images_thumbs", r#"{"small": [64, 64]}"#)
        // The lab is our own server on loopback, so the per-host budget is raised, as you
        // would for a host you own. Other sites get the polite defaults.
        .set("concurrency_per_host", "16")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .pipeline(FilesPipeline::images())
        .feed("images-out/books.jsonl")?
        .progress(false)
        .run()
        .await?;
    println!("{stats}");
    let stored = std::fs::read_dir("images-out/full")?.count();
    println!(
        "{stored} images stored in images-out/full for {} books",
        stats.items_scraped
    );
    lab.shutdown().await;
    Ok(())
}
