//! books: the basic spider.
//!
//! Crawls a book catalogue: listing pages (following "next" and category links) and book
//! detail pages (one item each: title, price, stock). With no argument it starts the bundled
//! lab site in-process, so it runs offline; given a URL it crawls that site instead, with the
//! default polite settings (robots.txt obeyed, each host starting at one request a second
//! and adapting to how it answers).
//!
//! ```text
//! cargo run --release --example books                 # the lab, 1,000 books
//! cargo run --release --example books -- http://127.0.0.1:8080/
//! ```
//!
//! Items go to `books.jsonl`; the final stats are printed. The spider is in `spider.rs`
//! (`crawler new` gives a new project the same one).

mod spider;

use crawler::prelude::*;
use spider::Books;

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
    let mut crawl = Crawl::new(Books { start }).feed("books.jsonl")?;
    if lab.is_some() {
        // The lab is our own server on loopback, so this run raises the per-host budget,
        // as you would for a host you own. Other sites get the polite defaults.
        crawl = crawl
            .set("throttle", "fixed")
            .set("concurrency_per_host", "16")
            .set("download_delay", "0s");
    }
    let stats = crawl.run().await?;
    println!("{stats}");
    println!("items written to books.jsonl");
    if let Some(lab) = lab {
        let private = lab.recorder().count_prefix("/private/");
        println!("requests to the robots-disallowed /private/ area: {private}");
        lab.shutdown().await;
    }
    Ok(())
}
