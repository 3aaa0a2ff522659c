//! Re-crawl benchmark: a first crawl of the lab's book site against re-crawls of it
//! unchanged and after 5% of its books changed, counting what the server saw (requests,
//! 200s, 304s, body bytes) and the wall time. Two modes:
//!
//! - links: the books spider following links, with conditional requests and the HTTP cache
//!   (every item is produced on every run, from the cache on 304);
//! - sitemap: the sitemap spider with the lastmod skip (only new and changed books are
//!   requested at all).
//!
//! ```text
//! cargo bench --bench recrawl -- [BOOKS]   # default 10000
//! ```
//!
//! Prints a markdown table. The lab runs in-process (its recorder is the source of the
//! request and byte counts); politeness is off, as for our own loopback server.

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;
#[allow(dead_code)]
#[path = "../examples/sitemap.rs"]
mod sitemap;

use std::path::Path;

use crawler::prelude::*;
use crawler_lab::Lab;

type BoxError = Box<dyn std::error::Error>;

fn fast<S: Spider>(crawl: Crawl<S>, cache_dir: &Path) -> Crawl<S> {
    crawl
        .set("concurrency", "64")
        .set("concurrency_per_host", "64")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("cache_dir", cache_dir.to_string_lossy().into_owned())
        .progress(false)
}

/// One row of the table.
fn row(mode: &str, run: &str, lab: &Lab, stats: &Stats) {
    let recorded = lab.recorder().requests();
    let ok = recorded.iter().filter(|r| r.status == 200).count();
    let not_modified = recorded.iter().filter(|r| r.status == 304).count();
    let bytes: u64 = recorded.iter().map(|r| r.bytes).sum();
    println!(
        "| {mode} | {run} | {} | {ok} | {not_modified} | {} | {} | {:.2} |",
        recorded.len(),
        bytes / 1024,
        stats.items_scraped,
        stats.elapsed.as_secs_f64()
    );
}

async fn links(books: usize) -> Result<(), BoxError> {
    let lab = Lab::builder().books(books).start().await?;
    let cache = tempfile::tempdir()?;
    for run in ["first crawl", "re-crawl, unchanged", "re-crawl, 5% changed"] {
        if run.contains("5%") {
            lab.mutate(0.05);
        }
        lab.recorder().clear();
        let stats = fast(Crawl::new(books::Books { start: lab.url() }), cache.path())
            .set("http_cache", "true")
            .run()
            .await?;
        row("links + HTTP cache", run, &lab, &stats);
    }
    lab.shutdown().await;
    Ok(())
}

async fn sitemaps(books: usize) -> Result<(), BoxError> {
    let lab = Lab::builder().books(books).start().await?;
    let cache = tempfile::tempdir()?;
    for run in ["first crawl", "re-crawl, unchanged", "re-crawl, 5% changed"] {
        if run.contains("5%") {
            lab.mutate(0.05);
        }
        lab.recorder().clear();
        let (stats, _) =
            sitemap::crawl(&lab.url(), cache.path(), |c| fast(c, cache.path())).await?;
        row("sitemap + lastmod", run, &lab, &stats);
    }
    lab.shutdown().await;
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let books: usize = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!("Re-crawls of the {books}-book lab site (in-process, politeness off)\n");
    println!("| mode | run | requests | 200 | 304 | body KiB | items | wall s |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    rt.block_on(async {
        links(books).await?;
        sitemaps(books).await
    })
}
