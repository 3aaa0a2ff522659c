//! warc_crawl: crawl the bundled lab's book catalogue and archive every request and response
//! in WARC 1.1 files, as Heritrix or `wget --warc-file` would, for replay tools (pywb),
//! archivists' readers (warcio) and dataset builders.
//!
//! It is the books spider with one setting more: `warc`, a path pattern (`%(name)s`,
//! `%(time)s`); files are closed at `warc_max_size` (default 1GB) and numbered. With no
//! argument it starts the lab (1,000 books) in-process and writes into `./warc-out/`; given
//! a site URL it crawls that site instead (politely: set `user_agent` to name yourself).
//!
//! ```text
//! cargo run --release --example warc_crawl
//! cargo run --release --example warc_crawl -- http://127.0.0.1:8080/
//! warcio check warc-out/*.warc.gz && warcio index warc-out/*.warc.gz | head
//! ```

#[allow(dead_code)]
#[path = "books/spider.rs"]
mod books;

use books::Books;
use crawler::prelude::*;

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    crawler::init_logging();
    let (start, lab) = match std::env::args().nth(1) {
        Some(url) => (url, None),
        None => {
            let lab = crawler_lab::Lab::builder().books(1_000).start().await?;
            (lab.url(), Some(lab))
        }
    };
    let mut crawl = Crawl::new(Books { start })
        // One file per crawl (and more past 1GB): warc-out/books-2024-05-21T12-33-41-00000.warc.gz
        .set("warc", "warc-out/%(name)s-%(time)s.warc.gz")
        .progress(false);
    if lab.is_some() {
        // The lab is our own server on loopback, so the per-host budget is raised, as you
        // would for a host you own. Other sites get the polite defaults.
        crawl = crawl
            .set("concurrency_per_host", "16")
            .set("throttle", "fixed")
            .set("download_delay", "0s");
    }
    let stats = crawl.run().await?;
    println!("{stats}");
    println!(
        "{} WARC records in warc-out/ (check them with `warcio check warc-out/*.warc.gz`)",
        stats.warc_records
    );
    if let Some(lab) = lab {
        lab.shutdown().await;
    }
    Ok(())
}
