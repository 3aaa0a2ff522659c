//! api_quota: a JSON API spider that lets the server's RateLimit headers set its pace.
//!
//! Pages through the lab's `/api/books?page=N` (20 books a page, each page naming the next)
//! under the `ratelimit-headers` scenario: a quota of 50 requests per 10 s window per client,
//! announced on every response with `RateLimit-Limit`, `RateLimit-Remaining`,
//! `RateLimit-Reset` and `RateLimit-Policy`, and 429 past it. The adaptive throttle (the
//! default) starts the host at 1 request/s and steers it to what the quota allows
//! (`remaining / seconds to reset`), so the crawl gets every book without a single 429. The
//! per-host rate the crawl ended at is printed with the stats.
//!
//! ```text
//! cargo run --release --example api_quota
//! ```
//!
//! Items go to `api_quota.jsonl`.

use crawler::prelude::*;

/// One book, as the API lists it.
#[derive(Debug, Serialize, serde::Deserialize)]
pub(crate) struct Book {
    /// Catalogue id.
    pub id: u32,
    /// Title.
    pub title: String,
    /// Price as shown, e.g. "£12.34".
    pub price: String,
    /// Copies in stock.
    pub stock: u32,
}

/// One page of the API.
#[derive(serde::Deserialize)]
struct ApiPage {
    books: Vec<Book>,
    next: Option<String>,
}

/// Reads every page of a books API from its first page.
pub(crate) struct ApiBooks {
    /// The first page, e.g. `http://127.0.0.1:8080/api/books?page=1`.
    pub start: String,
}

impl Spider for ApiBooks {
    type Item = Book;

    fn name(&self) -> &str {
        "api_quota"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }

    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        let data: ApiPage = page.json()?;
        for book in data.books {
            out.item(book);
        }
        if let Some(next) = data.next {
            out.follow(next);
        }
        Ok(())
    }
}

/// The rate each host was paced at when the crawl ended, for printing.
pub(crate) fn rates(stats: &Stats) -> Vec<(String, Option<f64>)> {
    stats
        .hosts
        .iter()
        .map(|h| (h.host.clone(), h.rate))
        .collect()
}

#[allow(dead_code)] // tests include this file as a module and use only the spider
#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    crawler::init_logging();
    let scenario = crawler_lab::Scenario::by_name("ratelimit-headers")?;
    let lab = crawler_lab::Lab::builder()
        .books(1000)
        .scenario(scenario)
        .start()
        .await?;
    println!(
        "lab API at {}api/books (quota: 50 requests per 10 s)",
        lab.url()
    );
    let stats = Crawl::new(ApiBooks {
        start: lab.url_for("/api/books?page=1"),
    })
    .feed("api_quota.jsonl")?
    .run()
    .await?;
    println!("{stats}");
    for (host, rate) in rates(&stats) {
        match rate {
            Some(r) => println!("{host}: paced at {r:.2} requests/s at the end (started at 1)"),
            None => println!("{host}: no rate"),
        }
    }
    let report = lab.recorder().report();
    let refused: u64 = report.clients.values().map(|c| c.status_429).sum();
    println!(
        "429 responses: {refused}, violations: {}",
        report.total_violations()
    );
    lab.shutdown().await;
    Ok(())
}
