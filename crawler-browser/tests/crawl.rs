//! The `browser` feature through the facade, as a project uses it: `render` in a spider's
//! own settings renders every page (no `.render()` in its requests), under the crawl's
//! downloader middlewares. Real chromium, the lab on 127.0.0.1.

use crawler::prelude::*;
use crawler_lab::Lab;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
struct Book {
    title: String,
    price: String,
}

/// Plain requests: the spider's own settings ask for every page to be rendered.
struct Rendered {
    start: Vec<String>,
}

impl Spider for Rendered {
    type Item = Book;
    fn name(&self) -> &str {
        "rendered"
    }
    fn start_urls(&self) -> Vec<String> {
        self.start.clone()
    }
    fn custom_settings(&self) -> Vec<(&'static str, String)> {
        vec![
            ("render", "true".into()),
            ("browser_tabs", "2".into()),
            ("start_rate", "8".into()),
            ("max_rate", "20".into()),
        ]
    }
    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        for li in page.select("li.book").iter() {
            out.item(Book {
                title: li.select("a.title").text().unwrap_or_default(),
                price: li.select("span.price").text().unwrap_or_default(),
            });
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_render_setting_renders_pages_that_did_not_ask() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    // Every page of the catalogue (the next links need a click): 5 pages of 20 books.
    let spider = Rendered {
        start: (1..=5)
            .map(|n| lab.url_for(&format!("/js/page-{n}.html")))
            .collect(),
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let record = dir.path().join("politeness.jsonl");
    let stats = Crawl::new(spider)
        .progress(false)
        .set("user_agent", "jsbot/1.0 (+http://127.0.0.1/)")
        .politeness_record(&record)
        .run()
        .await
        .expect("crawl");
    assert_eq!(stats.fetched, 5, "{stats:?}");
    // `render = true` alone gives every book: the render waits for the network to go
    // quiet, so the data the script fetches after the load event is in the page.
    assert_eq!(stats.items_scraped, 100, "{stats:?}");
    assert_eq!(
        stats.subrequests.get("pending_at_render"),
        None,
        "{stats:?}"
    );
    // The page was rendered: the browser loaded its script, through the crawl.
    let paths: Vec<String> = lab
        .recorder()
        .requests()
        .into_iter()
        .map(|r| r.path)
        .collect();
    assert!(paths.contains(&"/js/app.js".to_owned()), "{paths:?}");
    assert!(
        stats.subrequests.get("sent").copied().unwrap_or(0) >= 1,
        "{:?}",
        stats.subrequests
    );
    // Under the middlewares: the sub-requests carried the crawl's User-Agent too.
    assert!(
        lab.recorder()
            .requests()
            .iter()
            .all(|r| r.user_agent.as_deref() == Some("jsbot/1.0 (+http://127.0.0.1/)"))
    );
    // The politeness record (what `crawler report` draws) tells the sub-requests apart
    // from the rest: of all it counts as handed out, all but the page and robots.txt
    // (what the lab saw of the crawl's own requests).
    let text = std::fs::read_to_string(&record).expect("the record");
    let seconds: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["t"] == "second")
        .collect();
    let sum = |key: &str| -> u64 { seconds.iter().filter_map(|v| v[key].as_u64()).sum() };
    let own = paths
        .iter()
        .filter(|p| p.starts_with("/js/page-") || *p == "/robots.txt")
        .count() as u64;
    assert!(sum("subrequests") >= 1, "{text}");
    assert_eq!(sum("subrequests"), sum("sent") - own, "{text}");
    lab.shutdown().await;
}

/// Counts the request signals of a rendered page's sub-requests (every URL but the pages).
#[derive(Default)]
struct SubSignals {
    scheduled: std::sync::atomic::AtomicU64,
    reached: std::sync::atomic::AtomicU64,
    responses: std::sync::atomic::AtomicU64,
}

fn is_page(url: &url::Url) -> bool {
    url.path().starts_with("/js/page-")
}

/// The counts, shared with the test.
struct Watch(std::sync::Arc<SubSignals>);

impl Extension<Book> for Watch {
    fn request_scheduled(&self, request: &Request, _crawl: &CrawlHandle) {
        if !is_page(&request.url) {
            self.0
                .scheduled
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    fn request_reached_downloader(&self, request: &Request, _crawl: &CrawlHandle) {
        if !is_page(&request.url) {
            self.0
                .reached
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    fn response_received(&self, _response: &Response, request: &Request, _crawl: &CrawlHandle) {
        if !is_page(&request.url) {
            self.0
                .responses
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rendered_pages_sub_requests_fire_the_request_signals() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let spider = Rendered {
        start: (1..=2)
            .map(|n| lab.url_for(&format!("/js/page-{n}.html")))
            .collect(),
    };
    let signals = std::sync::Arc::new(SubSignals::default());
    let stats = Crawl::new(spider)
        .progress(false)
        .extension(Watch(std::sync::Arc::clone(&signals)))
        .run()
        .await
        .expect("crawl");
    assert_eq!(stats.items_scraped, 40, "{stats:?}");
    let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    // What the lab saw of the sub-requests (robots.txt is fetched by the robots cache, and
    // fires no signal).
    let on_the_wire = lab
        .recorder()
        .requests()
        .iter()
        .filter(|r| !r.path.starts_with("/js/page-") && r.path != "/robots.txt")
        .count() as u64;
    assert!(
        on_the_wire >= 2,
        "the pages' script and data: {on_the_wire}"
    );
    assert_eq!(get(&signals.reached), on_the_wire, "{stats:?}");
    assert_eq!(get(&signals.responses), on_the_wire, "{stats:?}");
    assert_eq!(
        stats.subrequests.get("sent").copied(),
        Some(on_the_wire),
        "{stats:?}"
    );
    assert!(get(&signals.scheduled) >= on_the_wire, "{stats:?}");
    lab.shutdown().await;
}
