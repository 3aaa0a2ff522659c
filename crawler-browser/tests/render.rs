//! Rendering against the lab's JavaScript catalogue, with a real headless chromium (started
//! by the tests themselves) and the crawl's own engine, frontier and HTTP downloader: every
//! book comes out, the browser's sub-requests go through robots.txt and their host's slot.
//!
//! Chromium must be installed (`.ci/run` installs it); without it these tests fail with a
//! message that says so, rather than skip.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crawler::engine::Engine;
use crawler_browser::{BrowserConfig, Monitor, Rendering};
use crawler_core::{
    Output, Pipeline, Processed, RenderOptions, Request, Response, Result, Settings, Spider, Stats,
};
use crawler_http::HttpDownloader;
use crawler_lab::{Lab, RetryAfter, Scenario};
use crawler_sched::{Frontier, FrontierConfig};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
struct Book {
    title: String,
    price: String,
}

/// The JavaScript catalogue's spider: wait for the script's books, click for the next link.
struct JsBooks {
    start: String,
    /// Render options of every request; the catalogue's own by default.
    options: RenderOptions,
}

fn options() -> RenderOptions {
    RenderOptions::new()
        .wait_for("ul#books[data-loaded]")
        .script("document.getElementById('more').click()")
}

impl Spider for JsBooks {
    type Item = Book;
    fn name(&self) -> &str {
        "js_books"
    }
    fn start_requests(&self) -> Result<Vec<Request>> {
        Ok(vec![
            Request::get(&self.start)?.render_with(self.options.clone()),
        ])
    }
    async fn parse(&self, page: Response, out: &mut Output<Book>) -> Result<()> {
        for li in page.select("li.book").iter() {
            out.item(Book {
                title: li.select("a.title").text().unwrap_or_default(),
                price: li.select("span.price").text().unwrap_or_default(),
            });
        }
        for href in page.select("a.next").attrs("href") {
            out.follow(&href).render_with(self.options.clone());
        }
        Ok(())
    }
}

#[derive(Clone, Default)]
struct Collect(Arc<Mutex<Vec<Book>>>);

impl Pipeline<Book> for Collect {
    async fn process(&self, item: Book) -> Result<Processed<Book>> {
        self.0.lock().expect("lock").push(item.clone());
        Ok(Processed::Keep(item))
    }
}

fn settings() -> Settings {
    Settings {
        user_agent: "jsbot/1.0 (+http://127.0.0.1/)".into(),
        concurrency: 4,
        // Quick enough for a test, and still paced: every host's slot applies.
        start_rate: 8.0,
        max_rate: 20.0,
        download_timeout: Duration::from_secs(20),
        ..Settings::default()
    }
}

/// The lab with its assets (the script and the covers) on a second host: `localhost`, a
/// host name of its own for the slots and robots.txt.
async fn labs(assets_scenario: Scenario) -> (Lab, Lab) {
    let assets = Lab::builder()
        .books(100)
        .scenario(assets_scenario)
        .start()
        .await
        .expect("assets lab");
    let assets_url = format!("http://localhost:{}/", assets.addr().port());
    let site = Lab::builder()
        .books(100)
        .js_assets(assets_url)
        .start()
        .await
        .expect("site lab");
    (site, assets)
}

async fn crawl(site: &Lab, settings: Settings) -> (Vec<Book>, Stats, Monitor) {
    crawl_with(site, settings, options()).await
}

async fn crawl_with(
    site: &Lab,
    settings: Settings,
    options: RenderOptions,
) -> (Vec<Book>, Stats, Monitor) {
    let http = HttpDownloader::new(&settings).expect("http client");
    let config = BrowserConfig::from_settings(&settings).tabs(2);
    config
        .find_executable()
        .expect("chromium is needed for these tests (apt-get install chromium)");
    let rendering = Rendering::new(http, config);
    let monitor = rendering.monitor();
    let frontier = Frontier::new(FrontierConfig::from_settings(&settings, vec![]));
    let items = Collect::default();
    let spider = JsBooks {
        start: site.url_for("/js/page-1.html"),
        options,
    };
    let engine = Engine::new(spider, rendering, frontier, settings).pipeline(items.clone());
    let stats = tokio::time::timeout(Duration::from_secs(90), engine.run())
        .await
        .expect("the crawl ends")
        .expect("the crawl runs");
    let mut books = items.0.lock().expect("lock").clone();
    books.sort();
    (books, stats, monitor)
}

fn expected(site: &Lab) -> Vec<Book> {
    let mut all: Vec<Book> = (1..=site.books() as u32)
        .map(|id| {
            let b = site.book(id).expect("book");
            Book {
                title: b.title,
                price: b.price,
            }
        })
        .collect();
    all.sort();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_book_of_the_javascript_catalogue_and_no_disallowed_subrequest() {
    let (site, assets) = labs(Scenario::open()).await;
    let (books, stats, _) = crawl(&site, settings()).await;
    assert_eq!(
        books,
        expected(&site),
        "every book, as the script showed it"
    );
    assert_eq!(stats.fetched, 5, "five pages: {stats:?}");

    let site_paths: Vec<String> = site
        .recorder()
        .requests()
        .into_iter()
        .map(|r| r.path)
        .collect();
    let asset_paths: Vec<String> = assets
        .recorder()
        .requests()
        .into_iter()
        .map(|r| r.path)
        .collect();
    // The script's data came through the crawl: one API call per page.
    assert_eq!(
        site_paths
            .iter()
            .filter(|p| p.starts_with("/api/books"))
            .count(),
        5,
        "{site_paths:?}"
    );
    // robots.txt forbids /private/: the page's script there was never requested.
    assert!(
        !site_paths.iter().any(|p| p.starts_with("/private/")),
        "{site_paths:?}"
    );
    // The icon the browser asks for on its own never leaves it.
    assert!(
        !site_paths
            .iter()
            .chain(&asset_paths)
            .any(|p| p == "/favicon.ico"),
        "{site_paths:?} {asset_paths:?}"
    );
    // The second host: its own robots.txt, then the script of each page; no image
    // (blocked by type, never sent).
    assert!(
        asset_paths.contains(&"/robots.txt".to_owned()),
        "{asset_paths:?}"
    );
    assert_eq!(
        asset_paths.iter().filter(|p| *p == "/js/app.js").count(),
        5,
        "{asset_paths:?}"
    );
    assert!(
        !asset_paths.iter().any(|p| p.ends_with(".png")),
        "{asset_paths:?}"
    );
    // And the crawl counted them.
    let sub = |k: &str| stats.subrequests.get(k).copied().unwrap_or(0);
    // Nothing reached either server around the crawl: every request they saw, but the
    // pages and robots.txt, is a sub-request the crawl sent (the page's data, the
    // scripts).
    let pages_and_robots = |p: &&String| p.starts_with("/js/page-") || *p == "/robots.txt";
    let seen = site_paths
        .iter()
        .chain(&asset_paths)
        .filter(|p| !pages_and_robots(p))
        .count();
    assert_eq!(
        sub("sent") as usize,
        seen,
        "{:?} {site_paths:?} {asset_paths:?}",
        stats.subrequests
    );
    // Every request carried the crawl's own User-Agent.
    assert!(
        site.recorder()
            .requests()
            .iter()
            .chain(assets.recorder().requests().iter())
            .all(|r| r.user_agent.as_deref() == Some("jsbot/1.0 (+http://127.0.0.1/)"))
    );
    assert_eq!(sub("disallowed"), 5, "{:?}", stats.subrequests);
    // The covers (images, by type) and the icon each page's origin would be asked for.
    assert!(sub("blocked") >= 5, "{:?}", stats.subrequests);
    assert!(stats.reconciles(), "{stats:?}");
    site.shutdown().await;
    assets.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_on_a_subrequest_holds_its_host_and_nothing_is_sent_inside_the_hold() {
    // The asset host allows one request a second (two at once) and says so with
    // Retry-After when it refuses.
    let (site, assets) =
        labs(Scenario::rate_limited(1.0, 2).retry_after(RetryAfter::Seconds(2))).await;
    let (books, stats, _) = crawl(&site, settings()).await;
    assert_eq!(
        books,
        expected(&site),
        "every book, the refused scripts retried"
    );
    let report = assets.recorder().report();
    let refused = assets
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.status == 429)
        .count();
    assert!(refused >= 1, "the test must reach the limit: {report:?}");
    assert_eq!(report.total_violations(), 0, "{report:?}");
    assert!(stats.subrequests.get("retried").copied().unwrap_or(0) >= 1);
    site.shutdown().await;
    assets.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_killed_mid_crawl_is_replaced_and_every_book_still_comes() {
    let (site, assets) = labs(Scenario::open()).await;
    let http = HttpDownloader::new(&settings()).expect("http client");
    let rendering = Rendering::new(http, BrowserConfig::from_settings(&settings()).tabs(1));
    let monitor = rendering.monitor();
    let frontier = Frontier::new(FrontierConfig::from_settings(&settings(), vec![]));
    let items = Collect::default();
    let spider = JsBooks {
        start: site.url_for("/js/page-1.html"),
        options: options(),
    };
    let engine = Engine::new(spider, rendering, frontier, settings()).pipeline(items.clone());
    let crawl = tokio::spawn(engine.run());
    // Kill the browser once it is rendering the first page (its script asked the API).
    let first = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let asked = site
                .recorder()
                .requests()
                .iter()
                .any(|r| r.path.starts_with("/api/books"));
            if let (true, Some(pid)) = (asked, monitor.browser_pid().await) {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the browser renders the first page");
    let killed = std::process::Command::new("kill")
        .args(["-9", &first.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let stats = tokio::time::timeout(Duration::from_secs(90), crawl)
        .await
        .expect("the crawl ends")
        .expect("the crawl task")
        .expect("the crawl runs");
    let mut books = items.0.lock().expect("lock").clone();
    books.sort();
    assert_eq!(
        books,
        expected(&site),
        "every book despite the kill: {stats:?}"
    );
    assert!(monitor.browser_restarts() >= 1, "a new browser was started");
    assert_ne!(monitor.browser_pid().await, Some(first));
    site.shutdown().await;
    assets.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_never_ends_is_cut_at_the_page_deadline() {
    let (site, assets) = labs(Scenario::open()).await;
    let settings = Settings {
        browser_page_timeout: Duration::from_secs(2),
        retry_times: 0,
        ..settings()
    };
    let started = std::time::Instant::now();
    let never = RenderOptions::new().wait_for("#no-such-element");
    let (books, stats, _) = crawl_with(&site, settings, never).await;
    assert!(books.is_empty());
    assert_eq!(
        stats.failed.get("timeout").copied(),
        Some(1),
        "the page ends as a timeout: {stats:?}"
    );
    // The 2 s deadline and the crawl around it, not the 30 s default nor forever.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert!(stats.reconciles(), "{stats:?}");
    site.shutdown().await;
    assets.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subrequest_whose_page_gave_up_is_never_sent() {
    // The asset host takes one request (robots.txt), then refuses the script with a 4 s
    // Retry-After: the page's 1.5 s deadline ends first.
    let (site, assets) =
        labs(Scenario::rate_limited(0.05, 1).retry_after(RetryAfter::Seconds(4))).await;
    let settings = Settings {
        browser_page_timeout: Duration::from_millis(1500),
        retry_times: 1,
        ..settings()
    };
    let never_mind = RenderOptions::new().wait_for("ul#books[data-loaded]");
    let (_, stats, _) = crawl_with(&site, settings, never_mind).await;
    let sub = |k: &str| stats.subrequests.get(k).copied().unwrap_or(0);
    assert!(sub("abandoned") >= 1, "{:?}", stats.subrequests);
    let scripts = assets
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.path == "/js/app.js")
        .count();
    // Each attempt of the page asked once and was refused; the retries the hold delayed
    // were dropped unsent once their page had given up.
    assert_eq!(scripts as u64, sub("retried"), "{:?}", stats.subrequests);
    assert_eq!(assets.recorder().report().total_violations(), 0);
    site.shutdown().await;
    assets.shutdown().await;
}

/// Every page of the catalogue asked for at once (as a crawl of listed URLs does), each
/// render held for a while by its options.
struct AllPages {
    pages: Vec<String>,
    options: RenderOptions,
}

impl Spider for AllPages {
    type Item = Book;
    fn name(&self) -> &str {
        "all_pages"
    }
    fn start_requests(&self) -> Result<Vec<Request>> {
        self.pages
            .iter()
            .map(|p| Ok(Request::get(p)?.render_with(self.options.clone())))
            .collect()
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
async fn pages_beyond_the_tabs_and_the_queue_wait_in_the_frontier_not_for_a_tab() {
    // Twenty pages, one tab, each render at least 400 ms: the pages come much faster than
    // the tab renders them. Fetched as fast as their slot allows, the later ones would wait
    // for the tab past their 5 s deadline (from entering the renderer); with the queue
    // bound, one waits at a time and none times out, even on a busy machine.
    let assets = Lab::builder().books(400).start().await.expect("assets lab");
    let site = Lab::builder()
        .books(400)
        .js_assets(format!("http://localhost:{}/", assets.addr().port()))
        .start()
        .await
        .expect("site lab");
    let settings = Settings {
        concurrency: 8,
        browser_page_timeout: Duration::from_secs(5),
        retry_times: 0,
        ..settings()
    };
    let http = HttpDownloader::new(&settings).expect("http client");
    let rendering = Rendering::new(
        http,
        BrowserConfig::from_settings(&settings).tabs(1).queue(1),
    );
    let monitor = rendering.monitor();
    let frontier = Frontier::new(FrontierConfig::from_settings(&settings, vec![]));
    let items = Collect::default();
    let spider = AllPages {
        pages: (1..=20)
            .map(|n| site.url_for(&format!("/js/page-{n}.html")))
            .collect(),
        options: RenderOptions::new()
            .wait_for("ul#books[data-loaded]")
            .wait(Duration::from_millis(400)),
    };
    let engine = Engine::new(spider, rendering, frontier, settings).pipeline(items.clone());
    let stats = tokio::time::timeout(Duration::from_secs(90), engine.run())
        .await
        .expect("the crawl ends")
        .expect("the crawl runs");
    let mut books = items.0.lock().expect("lock").clone();
    books.sort();
    assert!(stats.failed.is_empty(), "no page timed out: {stats:?}");
    assert_eq!(books, expected(&site), "every book of the twenty pages");
    // Two pages at most were in the renderer at once, one in the tab and one fetched and
    // waiting for it (and two were: the bound was reached, not merely respected by a slow
    // crawl).
    assert_eq!(monitor.peak_pages(), 2, "{stats:?}");
    assert!(stats.reconciles(), "{stats:?}");
    site.shutdown().await;
    assets.shutdown().await;
}

/// One item a page: its heading, and what its script made of `#state` (`served` until the
/// script runs, `rendered` after).
struct Downloads {
    pages: Vec<String>,
    options: RenderOptions,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
struct Shown {
    page: String,
    state: String,
}

impl Spider for Downloads {
    type Item = Shown;
    fn name(&self) -> &str {
        "downloads"
    }
    fn start_requests(&self) -> Result<Vec<Request>> {
        self.pages
            .iter()
            .map(|p| Ok(Request::get(p)?.render_with(self.options.clone())))
            .collect()
    }
    async fn parse(&self, page: Response, out: &mut Output<Shown>) -> Result<()> {
        out.item(Shown {
            page: page.select("h1").text().unwrap_or_default(),
            state: page.select("#state").text().unwrap_or_default(),
        });
        Ok(())
    }
}

#[derive(Clone, Default)]
struct CollectShown(Arc<Mutex<Vec<Shown>>>);

impl Pipeline<Shown> for CollectShown {
    async fn process(&self, item: Shown) -> Result<Processed<Shown>> {
        self.0.lock().expect("lock").push(item.clone());
        Ok(Processed::Keep(item))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_navigation_that_turns_into_a_download_is_answered_not_waited_on() {
    // A page served as an attachment (its navigation in chromium becomes a download and
    // never loads), and a page whose script navigates to a download once it has loaded.
    const SCRIPT: &str = "<script>document.getElementById('state').textContent = 'rendered';";
    // The name chromium would save the download under, in the user's downloads folder.
    let saved = format!("crawler-browser-test-{}.csv", std::process::id());
    let downloads = std::path::Path::new(&std::env::var("HOME").unwrap_or_default())
        .join("Downloads")
        .join(&saved);
    let lab = Lab::builder()
        .books(100)
        .script(move |req| match req.path {
            "/dl/report.html" => Some(
                crawler_lab::ScriptReply::new(200)
                    .html(format!(
                        "<h1>report</h1><p id=state>served</p>{SCRIPT}</script>"
                    ))
                    .header("Content-Disposition", "attachment; filename=report.html"),
            ),
            "/dl/leave.html" => Some(crawler_lab::ScriptReply::new(200).html(format!(
                "<h1>leave</h1><p id=state>served</p>{SCRIPT} addEventListener('load', \
                 function () {{ location.href = '/dl/export.csv'; }});</script>"
            ))),
            "/dl/export.csv" => Some(
                crawler_lab::ScriptReply::new(200)
                    .html("id,title\n1,a book\n")
                    .header(
                        "Content-Disposition",
                        format!("attachment; filename={saved}"),
                    ),
            ),
            _ => None,
        })
        .start()
        .await
        .expect("lab");
    // A deadline far beyond the crawl's own bound below: a render left waiting for the
    // download's load event would hold its tab until it.
    let settings = Settings {
        browser_page_timeout: Duration::from_secs(120),
        retry_times: 0,
        ..settings()
    };
    let http = HttpDownloader::new(&settings).expect("http client");
    let rendering = Rendering::new(http, BrowserConfig::from_settings(&settings).tabs(2));
    let frontier = Frontier::new(FrontierConfig::from_settings(&settings, vec![]));
    let items = CollectShown::default();
    let spider = Downloads {
        pages: vec![
            lab.url_for("/dl/report.html"),
            lab.url_for("/dl/leave.html"),
        ],
        // Long enough for the second page's navigation to happen inside the render.
        options: RenderOptions::new().wait(Duration::from_millis(800)),
    };
    let engine = Engine::new(spider, rendering, frontier, settings).pipeline(items.clone());
    let stats = tokio::time::timeout(Duration::from_secs(60), engine.run())
        .await
        .expect("the crawl ends well before the pages' deadline")
        .expect("the crawl runs");
    let mut shown = items.0.lock().expect("lock").clone();
    shown.sort();
    let item = |page: &str, state: &str| Shown {
        page: page.into(),
        state: state.into(),
    };
    assert_eq!(
        shown,
        vec![item("leave", "rendered"), item("report", "served")],
        "the download as fetched, the other page rendered: {stats:?}"
    );
    assert!(stats.failed.is_empty(), "{stats:?}");
    // The navigation to the download went through the crawl, once.
    let exports = lab
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.path == "/dl/export.csv")
        .count();
    assert_eq!(exports, 1, "{:?}", stats.subrequests);
    // And it was not saved: the browser's downloads are off.
    assert!(!downloads.exists(), "{} was saved", downloads.display());
    lab.shutdown().await;
}
