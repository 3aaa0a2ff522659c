//! Signals and extensions (issue 45), end to end against the lab: each signal fires as
//! often as the crawl's own counts and the lab's log say; `spider_idle` feeds a crawl more
//! work and closes it when there is none; `headers_received` stops a large download; the
//! spider's `opened` hook (and an extension's `spider_opened`) fails a crawl before any
//! request; an extension's `close_spider` ends the crawl with its reason; and the monitor
//! example does what it says.

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;
#[allow(dead_code)]
#[path = "../examples/monitor.rs"]
mod monitor;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use books::{Book, Books};
use crawler::prelude::*;
use crawler::{Error, Url};
use crawler_lab::{Lab, ScriptReply};

fn fast<S: Spider>(crawl: Crawl<S>) -> Crawl<S> {
    // Our own loopback server: lift the per-host budget so tests run in seconds.
    crawl
        .set("concurrency", "8")
        .set("concurrency_per_host", "8")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .progress(false)
}

/// Requests the lab answered, robots.txt aside (it is fetched by the robots cache, not
/// sent as a request of the crawl), once it has logged `expected` of them or a moment has
/// passed: the lab logs an answer as it finishes sending it, which may be a little after
/// the crawler has read it.
async fn lab_pages(lab: &Lab, expected: u64) -> u64 {
    let count = || {
        lab.recorder()
            .requests()
            .iter()
            .filter(|r| r.path != "/robots.txt")
            .count() as u64
    };
    for _ in 0..40 {
        if count() >= expected {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    count()
}

/// Counts every signal it gets.
#[derive(Default)]
struct Counter {
    opened: AtomicU64,
    idle: AtomicU64,
    closed: Mutex<Vec<(String, u64)>>,
    scheduled: AtomicU64,
    dropped_requests: AtomicU64,
    reached: AtomicU64,
    /// Of those, the ones the lab logs (it keeps no log of its own `/_lab/` pages), and
    /// that `lab_pages` counts (a link to `/robots.txt` is followed as a page, and told
    /// apart from the robots cache's fetch by nothing in the lab's log).
    reached_logged: AtomicU64,
    headers: AtomicU64,
    responses: AtomicU64,
    scraped: AtomicU64,
    dropped_items: Mutex<Vec<(String, String)>>,
    item_errors: AtomicU64,
}

/// The counter shared between the test and the crawl.
struct Counting(Arc<Counter>);

impl Extension<Book> for Counting {
    async fn spider_opened(&self, _crawl: &CrawlHandle) -> Result<()> {
        self.0.opened.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    async fn spider_idle(&self, crawl: &CrawlHandle) -> Vec<Request> {
        self.0.idle.fetch_add(1, Ordering::Relaxed);
        // At idle the handle's stats are exact.
        assert_eq!(
            crawl.stats().items_scraped,
            self.0.scraped.load(Ordering::Relaxed)
        );
        Vec::new()
    }
    async fn spider_closed(&self, reason: &str, stats: &Stats) -> Result<()> {
        self.0
            .closed
            .lock()
            .expect("lock")
            .push((reason.to_owned(), stats.items_scraped));
        Ok(())
    }
    fn request_scheduled(&self, _request: &Request, _crawl: &CrawlHandle) {
        self.0.scheduled.fetch_add(1, Ordering::Relaxed);
    }
    fn request_dropped(&self, _request: &Request, _reason: &str, _crawl: &CrawlHandle) {
        self.0.dropped_requests.fetch_add(1, Ordering::Relaxed);
    }
    fn request_reached_downloader(&self, request: &Request, _crawl: &CrawlHandle) {
        self.0.reached.fetch_add(1, Ordering::Relaxed);
        let path = request.url.path();
        if !path.starts_with("/_lab/") && path != "/robots.txt" {
            self.0.reached_logged.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn headers_received(
        &self,
        _request: &Request,
        _status: u16,
        _headers: &crawler::core::HeaderMap,
    ) -> Option<String> {
        self.0.headers.fetch_add(1, Ordering::Relaxed);
        None
    }
    fn response_received(&self, _response: &Response, _request: &Request, _crawl: &CrawlHandle) {
        self.0.responses.fetch_add(1, Ordering::Relaxed);
    }
    fn item_scraped(&self, item: &Book, url: &Url, _crawl: &CrawlHandle) {
        assert_eq!(item.url, url.as_str(), "the item's page is the one given");
        self.0.scraped.fetch_add(1, Ordering::Relaxed);
    }
    fn item_dropped(&self, _url: &Url, stage: &str, reason: &str, _crawl: &CrawlHandle) {
        self.0
            .dropped_items
            .lock()
            .expect("lock")
            .push((stage.to_owned(), reason.to_owned()));
    }
    fn item_error(&self, _url: &Url, _stage: &str, _error: &Error, _crawl: &CrawlHandle) {
        self.0.item_errors.fetch_add(1, Ordering::Relaxed);
    }
}

/// Drops every fifth item it sees and fails on every seventh (that is not a fifth).
#[derive(Default)]
struct Picky {
    seen: AtomicU64,
    dropped: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl Pipeline<Book> for Picky {
    async fn process(&self, item: Book) -> Result<Processed<Book>> {
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_multiple_of(5) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return Ok(Processed::Drop("every fifth".into()));
        }
        if n.is_multiple_of(7) {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return Err(Error::msg("every seventh fails"));
        }
        Ok(Processed::Keep(item))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_signal_fires_as_often_as_the_crawl_and_the_lab_count() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let dir = tempfile::tempdir().expect("tempdir");
    let feed = dir.path().join("books.jsonl");
    let counter = Arc::new(Counter::default());
    let picky = Picky::default();
    let (dropped, failed) = (Arc::clone(&picky.dropped), Arc::clone(&picky.failed));
    let stats = fast(Crawl::new(Books { start: lab.url() }))
        .pipeline(picky)
        .extension(Counting(Arc::clone(&counter)))
        .feed(&feed)
        .expect("feed")
        .run()
        .await
        .expect("crawl runs");
    let c = &counter;
    let lines = std::fs::read_to_string(&feed)
        .expect("feed")
        .lines()
        .count() as u64;
    assert!(lines > 0, "{stats}");
    assert_eq!(c.scraped.load(Ordering::Relaxed), lines);
    assert_eq!(stats.items_scraped, lines);
    let drops = c.dropped_items.lock().expect("lock").clone();
    assert_eq!(drops.len() as u64, dropped.load(Ordering::Relaxed));
    assert!(!drops.is_empty());
    assert!(
        drops
            .iter()
            .all(|(stage, why)| why == "every fifth" && stage.contains("Picky")),
        "{drops:?}"
    );
    assert_eq!(
        c.item_errors.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    assert!(failed.load(Ordering::Relaxed) > 0);
    assert_eq!(
        stats.items_dropped,
        drops.len() as u64 + failed.load(Ordering::Relaxed)
    );
    assert_eq!(c.scheduled.load(Ordering::Relaxed), stats.requests_enqueued);
    let filtered: u64 = stats.filtered.values().sum();
    assert!(filtered > 0, "the catalogue links pages more than once");
    assert_eq!(c.dropped_requests.load(Ordering::Relaxed), filtered);
    // Every request that reached the downloader reached the lab, and was answered.
    let logged = c.reached_logged.load(Ordering::Relaxed);
    assert_eq!(lab_pages(&lab, logged).await, logged, "{stats}");
    let sent = c.reached.load(Ordering::Relaxed);
    let answered: u64 = stats.status.values().sum();
    assert_eq!(answered, sent, "{stats}");
    assert_eq!(c.headers.load(Ordering::Relaxed), sent);
    assert_eq!(c.responses.load(Ordering::Relaxed), sent);
    assert_eq!(c.opened.load(Ordering::Relaxed), 1);
    assert_eq!(c.idle.load(Ordering::Relaxed), 1, "idle once, then closed");
    assert_eq!(
        *c.closed.lock().expect("lock"),
        vec![("finished".to_owned(), lines)]
    );
    assert_eq!(stats.close_reason, "finished");
    assert!(stats.reconciles(), "{stats:?}");
    lab.shutdown().await;
}

/// A lab of numbered pages: `/p/N` is a page whose heading is `page N`.
async fn pages_lab() -> Lab {
    Lab::builder()
        .script(|req| match req.path {
            "/robots.txt" => None,
            "/big" => Some(
                ScriptReply::new(200).html(format!("<h1>big</h1><p>{}</p>", "x".repeat(300_000))),
            ),
            path => {
                let n = path.strip_prefix("/p/")?;
                Some(ScriptReply::new(200).html(format!("<h1>page {n}</h1>")))
            }
        })
        .start()
        .await
        .expect("lab")
}

/// Reads each page's heading; follows nothing.
struct Headings {
    start: Vec<String>,
}

impl Spider for Headings {
    type Item = String;
    fn name(&self) -> &str {
        "headings"
    }
    fn start_urls(&self) -> Vec<String> {
        self.start.clone()
    }
    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        out.item(page.text_of("h1")?);
        Ok(())
    }
}

/// Hands out one wave of URLs per idle signal.
struct Waves {
    waves: Mutex<VecDeque<Vec<String>>>,
    idle: Arc<AtomicU64>,
}

impl Extension<String> for Waves {
    async fn spider_idle(&self, _crawl: &CrawlHandle) -> Vec<Request> {
        self.idle.fetch_add(1, Ordering::Relaxed);
        let wave = self.waves.lock().expect("lock").pop_front();
        wave.unwrap_or_default()
            .iter()
            .map(|u| Request::get(u).expect("URL"))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spider_idle_feeds_a_second_wave_then_the_crawl_closes() {
    let lab = pages_lab().await;
    let url = |n: u32| lab.url_for(&format!("/p/{n}"));
    let idle = Arc::new(AtomicU64::new(0));
    let waves = Waves {
        // A second wave; then a wave of a page already crawled, which adds no work; the
        // crawl closes without asking a fourth time.
        waves: Mutex::new(VecDeque::from([vec![url(3), url(4), url(5)], vec![url(1)]])),
        idle: Arc::clone(&idle),
    };
    let stats = fast(Crawl::new(Headings {
        start: vec![url(1), url(2)],
    }))
    .extension(waves)
    .run()
    .await
    .expect("crawl runs");
    assert_eq!(stats.items_scraped, 5, "{stats}");
    assert_eq!(idle.load(Ordering::Relaxed), 2, "{stats}");
    assert_eq!(stats.filtered.get("duplicate"), Some(&1), "{stats}");
    assert_eq!(stats.close_reason, "finished");
    assert!(stats.reconciles(), "{stats:?}");
    // The second wave went out only once the first was answered.
    let log = lab.recorder().requests();
    let at = |path: &str| {
        log.iter()
            .filter(|r| r.path == path)
            .map(|r| (r.at, r.replied_at))
            .collect::<Vec<_>>()
    };
    assert_eq!(at("/p/1").len(), 1, "a duplicate is not fetched again");
    let first_done = at("/p/1")[0].1.max(at("/p/2")[0].1);
    for n in 3..=5 {
        let got = at(&format!("/p/{n}"));
        assert_eq!(got.len(), 1);
        assert!(
            got[0].0 >= first_done,
            "/p/{n} was sent before the crawl was idle"
        );
    }
    lab.shutdown().await;
}

/// Stops any download whose declared length is over a bound.
struct StopLarge(u64);

impl Extension<String> for StopLarge {
    fn headers_received(
        &self,
        _request: &Request,
        _status: u16,
        headers: &crawler::core::HeaderMap,
    ) -> Option<String> {
        let len = headers
            .get("content-length")?
            .to_str()
            .ok()?
            .parse::<u64>()
            .ok()?;
        (len > self.0).then(|| format!("{len} bytes is over {}", self.0))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_received_stops_a_large_download() {
    let lab = pages_lab().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let failures = dir.path().join("failures.jsonl");
    let stats = fast(Crawl::new(Headings {
        start: vec![lab.url_for("/big"), lab.url_for("/p/1")],
    }))
    .set("failures_file", failures.to_string_lossy())
    .extension(StopLarge(100_000))
    .run()
    .await
    .expect("crawl runs");
    assert_eq!(stats.failed.get("download_stopped"), Some(&1), "{stats}");
    assert_eq!(
        stats.items_scraped, 1,
        "the small page still gives its item"
    );
    assert!(
        stats.response_bytes < 100_000,
        "the large body was not read: {stats}"
    );
    assert_eq!(
        lab.recorder().count_path("/big"),
        1,
        "a stopped download is not retried"
    );
    let listed = std::fs::read_to_string(&failures).expect("failures file");
    assert!(
        listed.contains("download_stopped")
            && listed.contains("download stopped by extension")
            && listed.contains("300"),
        "{listed}"
    );
    assert!(stats.reconciles(), "{stats:?}");
    lab.shutdown().await;
}

/// Reads its start URL in `opened`, or fails there.
struct Opens {
    start: String,
    fail: bool,
    url: OnceLock<String>,
}

impl Spider for Opens {
    type Item = String;
    fn name(&self) -> &str {
        "opens"
    }
    async fn opened(&self) -> Result<()> {
        if self.fail {
            return Err(Error::msg("the database is unreachable"));
        }
        let _ = self.url.set(self.start.clone());
        Ok(())
    }
    fn start_urls(&self) -> Vec<String> {
        self.url.get().cloned().into_iter().collect()
    }
    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        out.item(page.text_of("h1")?);
        Ok(())
    }
}

/// An extension whose `spider_opened` fails.
struct FailsToOpen;

impl Extension<String> for FailsToOpen {
    fn name(&self) -> &str {
        "fails_to_open"
    }
    async fn spider_opened(&self, _crawl: &CrawlHandle) -> Result<()> {
        Err(Error::msg("no monitoring service"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opened_runs_before_the_start_requests_and_its_error_fails_before_any_request() {
    let lab = pages_lab().await;
    let spider = |fail| Opens {
        start: lab.url_for("/p/1"),
        fail,
        url: OnceLock::new(),
    };
    let e = fast(Crawl::new(spider(true)))
        .run()
        .await
        .expect_err("the crawl fails");
    let message = e.to_string();
    assert!(
        message.contains("spider 'opens' failed to open")
            && message.contains("the database is unreachable"),
        "{message}"
    );
    let e = fast(Crawl::new(spider(false)))
        .extension(FailsToOpen)
        .run()
        .await
        .expect_err("the crawl fails");
    let message = e.to_string();
    assert!(
        message.contains("extension fails_to_open failed to open")
            && message.contains("no monitoring service"),
        "{message}"
    );
    assert!(
        lab.recorder().is_empty(),
        "nothing reached the lab: {:?}",
        lab.recorder().requests()
    );
    // Opened, the spider has its start URL only then.
    let stats = fast(Crawl::new(spider(false)))
        .run()
        .await
        .expect("crawl runs");
    assert_eq!(stats.items_scraped, 1, "{stats}");
    lab.shutdown().await;
}

/// Closes the crawl once it has seen some answers.
struct Enough(u64, AtomicU64);

impl Extension<Book> for Enough {
    fn response_received(&self, _response: &Response, _request: &Request, crawl: &CrawlHandle) {
        if self.1.fetch_add(1, Ordering::Relaxed) + 1 == self.0 {
            crawl.close_spider("enough_seen");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_closes_the_crawl_with_its_reason() {
    let lab = Lab::builder().books(500).start().await.expect("lab");
    let stats = fast(Crawl::new(Books { start: lab.url() }))
        .extension(Enough(10, AtomicU64::new(0)))
        .run()
        .await
        .expect("crawl runs");
    assert_eq!(stats.close_reason, "enough_seen", "{stats}");
    assert!(stats.to_string().contains("enough_seen"));
    let pages: u64 = stats.status.values().sum();
    // The requests in flight when it closed still finish; no new one is handed out.
    assert!((10..=10 + 8).contains(&pages), "{stats}");
    assert!(stats.pending > 0, "{stats}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_example_feeds_the_listings_and_judges_the_crawl() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let page = |n: u32| lab.url_for(&format!("/catalogue/page-{n}.html"));
    let pages = lab.catalogue_pages();
    assert!(pages >= 3, "{pages} listing pages");
    let run = |min_items: u64| {
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        for n in 2..=pages {
            tx.try_send(vec![page(n)]).expect("room");
        }
        drop(tx);
        let feeder = Arc::new(monitor::IdleFeeder::new(rx));
        let crawl = fast(Crawl::new(monitor::Listings {
            start: vec![page(1)],
        }))
        .extension(Shared(Arc::clone(&feeder)))
        .extension(monitor::Monitor::new(min_items, 0.1));
        (crawl, feeder)
    };
    // Every listing page is fed in turn, one per idle signal, and every book is read.
    let (crawl, feeder) = run(100);
    let stats = crawl.run().await.expect("crawl runs");
    assert_eq!(stats.items_scraped, 100, "{stats}");
    assert_eq!(stats.close_reason, "finished");
    assert_eq!(feeder.idle.load(Ordering::Relaxed), u64::from(pages));
    // Asked for more books than there are, the monitor fails the crawl at its end.
    let (crawl, _) = run(101);
    let stats = crawl.run().await.expect("crawl runs");
    assert_eq!(stats.items_scraped, 100, "{stats}");
    assert_eq!(stats.close_reason, monitor::TOO_FEW_ITEMS);
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_monitor_closes_a_crawl_whose_errors_are_over_its_ratio() {
    // Half the pages are missing.
    let lab = Lab::builder()
        .script(|req| {
            let n: u32 = req.path.strip_prefix("/p/")?.parse().ok()?;
            let links: String = (1..=200)
                .map(|i| format!("<a href='/p/{i}'>{i}</a>"))
                .collect();
            let status = if n.is_multiple_of(2) { 404 } else { 200 };
            Some(ScriptReply::new(status).html(format!("<h1>page {n}</h1>{links}")))
        })
        .start()
        .await
        .expect("lab");
    let stats = fast(Crawl::new(FollowAll {
        start: lab.url_for("/p/1"),
    }))
    .set("concurrency", "2")
    .extension(monitor::Monitor::new(0, 0.1))
    .run()
    .await
    .expect("crawl runs");
    assert_eq!(stats.close_reason, monitor::TOO_MANY_ERRORS, "{stats}");
    assert!(stats.pending > 0, "closed early: {stats}");
    lab.shutdown().await;
}

/// Follows every link.
struct FollowAll {
    start: String,
}

impl Spider for FollowAll {
    type Item = String;
    fn name(&self) -> &str {
        "follow_all"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }
    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        out.follow_all(page.select("a").attrs("href"));
        Ok(())
    }
}

/// An extension the test keeps a handle on.
struct Shared<E>(Arc<E>);

impl<I: Send + Sync + 'static, E: Extension<I>> Extension<I> for Shared<E> {
    async fn spider_idle(&self, crawl: &CrawlHandle) -> Vec<Request> {
        Extension::<I>::spider_idle(&*self.0, crawl).await
    }
}

/// crawler.toml naming the built-in monitor, with its bound.
fn monitor_toml(list: &str, bound: &str) -> crawler::settings::SettingsLayers {
    let mut layers = crawler::settings::SettingsLayers::new();
    layers
        .file_text(
            "crawler.toml",
            &format!("[extensions]\nextensions = {list}\n{bound}\n"),
        )
        .expect("crawler.toml");
    layers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_monitor_named_in_crawler_toml_judges_the_crawl() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let books = || Books {
        start: lab.url_for("/catalogue/page-1.html"),
    };
    let run = |list: &str, bound: &str| {
        let layers = monitor_toml(list, bound);
        let crawl = Crawl::new(books())
            .with_settings_layers(&layers)
            .expect("settings");
        fast(crawl).run()
    };
    // Asked for more books than there are, the monitor fails the crawl at its end.
    let stats = run(r#"["custom", "monitor"]"#, "monitor_min_items = 101")
        .await
        .expect("crawl runs");
    assert_eq!(stats.items_scraped, 100, "{stats}");
    assert_eq!(
        stats.close_reason,
        crawler::core::MONITOR_ITEM_COUNT,
        "{stats}"
    );
    // Enough books: finished.
    let stats = run(r#"["custom", "monitor"]"#, "monitor_min_items = 100")
        .await
        .expect("crawl runs");
    assert_eq!(stats.close_reason, "finished", "{stats}");
    // Left out of the list, it judges nothing.
    let stats = run(r#"["custom"]"#, "monitor_min_items = 101")
        .await
        .expect("crawl runs");
    assert_eq!(stats.close_reason, "finished", "{stats}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_monitor_closes_a_crawl_whose_errors_are_over_its_ratio() {
    // Half the pages are missing.
    let lab = Lab::builder()
        .script(|req| {
            let n: u32 = req.path.strip_prefix("/p/")?.parse().ok()?;
            let links: String = (1..=200)
                .map(|i| format!("<a href='/p/{i}'>{i}</a>"))
                .collect();
            let status = if n.is_multiple_of(2) { 404 } else { 200 };
            Some(ScriptReply::new(status).html(format!("<h1>page {n}</h1>{links}")))
        })
        .start()
        .await
        .expect("lab");
    // On by default (`extensions = ["custom", "monitor"]`): only its bound is set.
    let stats = fast(Crawl::new(FollowAll {
        start: lab.url_for("/p/1"),
    }))
    .set("concurrency", "2")
    .set("monitor_max_error_ratio", "0.1")
    .run()
    .await
    .expect("crawl runs");
    assert_eq!(
        stats.close_reason,
        crawler::core::MONITOR_ERROR_RATIO,
        "{stats}"
    );
    assert!(stats.pending > 0, "closed early: {stats}");
    lab.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_extension_name_fails_the_crawl_before_any_request() {
    let lab = Lab::builder().books(100).start().await.expect("lab");
    let layers = monitor_toml(r#"["custom", "closespider"]"#, "");
    let err = match Crawl::new(Books {
        start: lab.url_for("/catalogue/page-1.html"),
    })
    .with_settings_layers(&layers)
    {
        Err(e) => e,
        Ok(crawl) => fast(crawl).run().await.expect_err("an unknown extension"),
    };
    let message = err.to_string();
    assert!(
        message.contains("unknown extension 'closespider'")
            && message.contains("built-in ones are custom, monitor"),
        "{message}"
    );
    assert!(
        lab.recorder().requests().is_empty(),
        "nothing sent: {:?}",
        lab.recorder().requests()
    );
    lab.shutdown().await;
}
