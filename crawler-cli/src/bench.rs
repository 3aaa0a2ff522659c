//! `crawler bench`: crawl an in-process lab with the budget of a host you own and report
//! pages/s, like Scrapy's `bench`.

use crawler::settings::SettingsLayers;

use crate::common::{self, Failure, failed, usage};
use crawler::{Crawl, Error, ErrorKind};

// The spider of the basic example (and of a new project's scaffold).
#[path = "../../examples/books/spider.rs"]
mod books;

/// Start a lab with `books` books, crawl it, print the stats and pages/s.
pub(super) async fn bench(
    layers: &SettingsLayers,
    books: usize,
    concurrency: usize,
) -> std::result::Result<(), Failure> {
    let lab = crawler_lab::Lab::builder()
        .books(books)
        .start()
        .await
        .map_err(|e| usage(Error::new(ErrorKind::Other, e.to_string())))?;
    eprintln!("bench: lab with {} books at {}", lab.books(), lab.url());
    // The lab is our own server on loopback: a fixed, zero delay and high concurrency, as for
    // any host you own. The user's layers still apply on top (e.g. -s concurrency=64).
    let mut own = layers.clone();
    let mut ours = SettingsLayers::new();
    for (k, v) in [
        ("throttle", "fixed".to_owned()),
        ("download_delay", "0s".to_owned()),
        ("randomize_delay", "false".to_owned()),
        ("concurrency_per_host", concurrency.to_string()),
        ("concurrency", concurrency.max(16).to_string()),
        ("max_rate", "100000".to_owned()),
        ("burst", concurrency.to_string()),
        (
            "user_agent",
            "crawler-bench/0.1 (+local benchmark)".to_owned(),
        ),
    ] {
        ours.cli(k, &v);
    }
    let base = ours.resolve(None).map_err(usage)?.settings;
    own = own.with_base(base);
    let crawl = Crawl::new(books::Books { start: lab.url() })
        .with_settings_layers(&own)
        .map_err(usage)?
        .live_progress(true);
    let settings = crawl.effective_settings().map_err(usage)?;
    let crawl = common::with_metrics(crawl, &settings)
        .await
        .map_err(failed)?;
    let result = crawl.run().await;
    lab.shutdown().await;
    let stats = result.map_err(failed)?;
    println!("{stats}");
    println!(
        "bench: {} pages in {:.2}s = {:.1} pages/s, {} items",
        stats.status.values().sum::<u64>(),
        stats.elapsed.as_secs_f64(),
        stats.pages_per_sec(),
        stats.items_scraped
    );
    Ok(())
}
