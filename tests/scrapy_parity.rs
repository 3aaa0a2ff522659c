//! Three Scrapy spiders (tests/support/scrapy_spiders/*.py) and their ports, written from
//! the README and docs/coming-from-scrapy.md alone, crawl the same lab site: each pair gives
//! the same items (compared as sorted JSON), the same custom counters and the same close
//! reason. Between them the spiders use `handle_httpstatus_list`, errbacks that yield
//! items, `closed(reason)`, a `spider_idle` handler that feeds more requests (raising
//! `DontCloseSpider`) and `self.crawler.stats.inc_value`.
//!
//! Scrapy runs as `python3 -m scrapy runspider`, obeying robots.txt and with the same retry
//! count as the port; a missing Scrapy fails these tests (`.ci/run` installs it).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crawler::prelude::*;
use crawler_lab::{Lab, ScriptReply};

/// The products of the listing pages: 1 to 6 answer 200, 9 is a 404 with a body, 10 a 410
/// naming its replacement (11), 12 always a 500, 13 is under a path robots.txt forbids.
fn shop_page(page: u32) -> Option<String> {
    let (products, next): (&[&str], Option<&str>) = match page {
        1 => (
            &[
                "/product/1",
                "/product/2",
                "/product/3",
                "/product/4",
                "/product/9",
                "/product/10",
            ],
            Some("/shop/page-2.html"),
        ),
        2 => (
            &["/product/5", "/product/6", "/product/12", "/private/13"],
            None,
        ),
        _ => return None,
    };
    let mut html = String::from("<html><body><h1>Shop</h1>");
    for href in products {
        html.push_str(&format!(
            r#"<article><a class="product" href="{href}">p</a></article>"#
        ));
    }
    if let Some(next) = next {
        html.push_str(&format!(
            r#"<ul><li class="next"><a href="{next}">next</a></li></ul>"#
        ));
    }
    html.push_str("</body></html>");
    Some(html)
}

/// The lab serving the shop; every other path is the lab's own site, its robots.txt
/// (`Disallow: /private/`) included.
async fn shop() -> Lab {
    Lab::builder()
        .script(|req| {
            let html = |status: u16, body: String| Some(ScriptReply::new(status).html(body));
            let path = req.path;
            if let Some(n) = path
                .strip_prefix("/shop/page-")
                .and_then(|p| p.strip_suffix(".html"))
            {
                return shop_page(n.parse().ok()?).and_then(|h| html(200, h));
            }
            match path.strip_prefix("/product/")?.parse::<u32>().ok()? {
                9 => html(404, "<h1>No such product</h1>".into()),
                10 => html(
                    410,
                    r#"<h1>Gone</h1><a class="replacement" href="/product/11">r</a>"#.into(),
                ),
                12 => html(500, "<h1>Oops</h1>".into()),
                n => html(
                    200,
                    format!(r#"<h1>Product {n}</h1><p class="price">£{n}.50</p>"#),
                ),
            }
        })
        .start()
        .await
        .expect("lab starts")
}

/// A crawl of the lab at a pace that keeps the test short (the lab is ours).
fn quick<S: Spider>(crawl: Crawl<S>) -> Crawl<S> {
    crawl
        .progress(false)
        .set("start_rate", "50")
        .set("retry_times", "2")
}

/// Runs a Scrapy spider of tests/support/scrapy_spiders with `args` (`-a`), its items to
/// `items`. Fails the test when Scrapy is missing or the spider fails.
async fn scrapy(spider: &str, args: &[(&str, String)], items: &Path) {
    let file: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "tests",
        "support",
        "scrapy_spiders",
    ]
    .iter()
    .collect::<PathBuf>()
    .join(format!("{spider}.py"));
    let mut cmd = std::process::Command::new("python3");
    cmd.args(["-m", "scrapy", "runspider"]).arg(&file);
    for (k, v) in args {
        cmd.arg("-a").arg(format!("{k}={v}"));
    }
    cmd.arg("-O").arg(items).args([
        "-s",
        "LOG_LEVEL=WARNING",
        "-s",
        "TELNETCONSOLE_ENABLED=False",
    ]);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .expect("the blocking task")
        .expect("python3 runs (is it installed?)");
    assert!(
        out.status.success(),
        "scrapy runspider {spider} failed (is Scrapy installed? .ci/run installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The lines of a JSON Lines feed, each re-serialised (keys sorted), sorted.
fn sorted_items(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut items: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .expect("a JSON line")
                .to_string()
        })
        .collect();
    items.sort();
    items
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{} was written by closed: {e}", path.display()));
    serde_json::from_str(&text).expect("a JSON document")
}

/// What both sides' `closed` write: the reason and the counters under the spider's prefix.
fn write_summary(path: &Path, reason: &str, stats: &Stats, prefix: &str) -> Result<()> {
    let counters: serde_json::Map<String, serde_json::Value> = stats
        .spider
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(k, v)| (k.clone(), (*v).into()))
        .collect();
    let doc = serde_json::json!({ "reason": reason, "counters": counters });
    std::fs::write(path, doc.to_string())?;
    Ok(())
}

/// Runs Scrapy's spider and the port on the same lab, and compares what they gave.
struct Compared {
    scrapy_items: Vec<String>,
    port_items: Vec<String>,
    scrapy_summary: serde_json::Value,
    port_summary: serde_json::Value,
}

impl Compared {
    fn assert_same(&self, stats: &Stats) {
        assert!(!self.port_items.is_empty(), "{stats}");
        assert_eq!(
            self.port_items, self.scrapy_items,
            "the port gives Scrapy's items: {stats}"
        );
        assert_eq!(
            self.port_summary, self.scrapy_summary,
            "the same close reason and counters: {stats}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// catalogue.py: handle_httpstatus_list, custom stats, closed(reason).

#[derive(Serialize)]
struct Product {
    path: String,
    status: u16,
    title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    price: Option<String>,
}

struct Catalogue {
    start: String,
    summary: PathBuf,
}

impl Spider for Catalogue {
    type Item = Product;
    fn name(&self) -> &str {
        "catalogue"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }
    fn allowed_statuses(&self) -> AllowedStatuses {
        AllowedStatuses::list([404, 410])
    }
    async fn parse(&self, page: Response, out: &mut Output<Product>) -> Result<()> {
        if page.callback() == Some("parse_product") {
            let path = page.url().path().to_owned();
            match page.status() {
                404 => {
                    out.stats().inc("catalogue/missing");
                    out.item(Product {
                        path,
                        status: 404,
                        title: page.select("h1::text").get(),
                        price: None,
                    });
                }
                410 => {
                    out.stats().inc("catalogue/gone");
                    if let Some(href) = page.select("a.replacement::attr(href)").get() {
                        out.follow(href).callback("parse_product");
                    }
                }
                status => {
                    out.stats().inc("catalogue/products");
                    out.item(Product {
                        path,
                        status,
                        title: page.select("h1::text").get(),
                        price: page.select("p.price::text").re_first(r"[\d.]+"),
                    });
                }
            }
            return Ok(());
        }
        for href in page.select("a.product::attr(href)").getall() {
            out.follow(href).callback("parse_product");
        }
        if let Some(next) = page.select("li.next a::attr(href)").get() {
            out.follow(next);
        }
        Ok(())
    }
    async fn closed(&self, reason: &str, stats: &Stats) -> Result<()> {
        write_summary(&self.summary, reason, stats, "catalogue/")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalogue_with_handled_statuses_gives_scrapys_items_and_counters() {
    let lab = shop().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let start = lab.url_for("/shop/page-1.html");
    let (scrapy_items, scrapy_summary) = (dir.path().join("s.jsonl"), dir.path().join("s.json"));
    scrapy(
        "catalogue",
        &[
            ("start", start.clone()),
            ("summary", scrapy_summary.display().to_string()),
        ],
        &scrapy_items,
    )
    .await;
    let (port_items, port_summary) = (dir.path().join("p.jsonl"), dir.path().join("p.json"));
    let stats = quick(Crawl::new(Catalogue {
        start,
        summary: port_summary.clone(),
    }))
    .feed(&port_items)
    .expect("feed")
    .run()
    .await
    .expect("crawl");
    let compared = Compared {
        scrapy_items: sorted_items(&scrapy_items),
        port_items: sorted_items(&port_items),
        scrapy_summary: read_json(&scrapy_summary),
        port_summary: read_json(&port_summary),
    };
    compared.assert_same(&stats);
    // The site's answer: six products and the 410's replacement, the 404 as an item.
    assert_eq!(compared.port_items.len(), 8, "{stats}");
    assert_eq!(compared.port_summary["reason"], "finished");
    assert_eq!(stats.spider.get("catalogue/missing"), Some(&1), "{stats}");
    lab.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// errbacks.py: errbacks that yield items, custom stats.

#[derive(Serialize)]
#[serde(untagged)]
enum Outcome {
    Found {
        path: String,
        title: Option<String>,
    },
    Lost {
        path: String,
        lost: &'static str,
        status: Option<u16>,
    },
}

struct Errbacks {
    start: String,
    summary: PathBuf,
}

impl Spider for Errbacks {
    type Item = Outcome;
    fn name(&self) -> &str {
        "errbacks"
    }
    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }
    async fn parse(&self, page: Response, out: &mut Output<Outcome>) -> Result<()> {
        if page.callback() == Some("parse_product") {
            out.stats().inc("errbacks/found");
            out.item(Outcome::Found {
                path: page.url().path().to_owned(),
                title: page.select("h1::text").get(),
            });
            return Ok(());
        }
        for href in page.select("a.product::attr(href)").getall() {
            out.follow(href).callback("parse_product").errback("lost");
        }
        if let Some(next) = page.select("li.next a::attr(href)").get() {
            out.follow(next);
        }
        Ok(())
    }
    async fn errback(&self, failure: FailedRequest, out: &mut Output<Outcome>) -> Result<()> {
        let (lost, status) = match failure.kind() {
            FailureKind::Status => ("status", failure.status()),
            FailureKind::Connection => ("connection", None),
            FailureKind::Disallowed => ("refused", None),
            _ => ("other", None),
        };
        out.stats().inc(&format!("errbacks/lost/{lost}"));
        out.item(Outcome::Lost {
            path: failure.url().path().to_owned(),
            lost,
            status,
        });
        Ok(())
    }
    async fn closed(&self, reason: &str, stats: &Stats) -> Result<()> {
        write_summary(&self.summary, reason, stats, "errbacks/")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errbacks_that_yield_items_give_scrapys_items_and_counters() {
    let lab = shop().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let start = lab.url_for("/shop/page-1.html");
    let (scrapy_items, scrapy_summary) = (dir.path().join("s.jsonl"), dir.path().join("s.json"));
    scrapy(
        "errbacks",
        &[
            ("start", start.clone()),
            ("summary", scrapy_summary.display().to_string()),
        ],
        &scrapy_items,
    )
    .await;
    let (port_items, port_summary) = (dir.path().join("p.jsonl"), dir.path().join("p.json"));
    let stats = quick(Crawl::new(Errbacks {
        start,
        summary: port_summary.clone(),
    }))
    .feed(&port_items)
    .expect("feed")
    .run()
    .await
    .expect("crawl");
    let compared = Compared {
        scrapy_items: sorted_items(&scrapy_items),
        port_items: sorted_items(&port_items),
        scrapy_summary: read_json(&scrapy_summary),
        port_summary: read_json(&port_summary),
    };
    compared.assert_same(&stats);
    // Six pages found; the 404, 410 and 500 (after its retries) and the robots refusal
    // lost, each an item.
    assert_eq!(compared.port_items.len(), 10, "{stats}");
    assert_eq!(
        stats.spider.get("errbacks/lost/status"),
        Some(&3),
        "{stats}"
    );
    lab.shutdown().await;
}

// ---------------------------------------------------------------------------------------
// feeder.py: a spider_idle handler that feeds batches, custom stats in it.

/// The batches the idle handler feeds, the first as the start requests.
const BATCHES: [&[&str]; 3] = [
    &["/product/1", "/product/2"],
    &["/product/3", "/product/4"],
    &["/product/11"],
];

fn batch(base: &str, n: usize) -> Vec<Request> {
    BATCHES[n]
        .iter()
        .filter_map(|path| {
            Request::get(format!("{base}{path}"))
                .ok()?
                .meta("batch", n)
                .ok()
        })
        .collect()
}

#[derive(Serialize)]
struct Fed {
    path: String,
    batch: usize,
    title: Option<String>,
}

struct Feeder {
    base: String,
    summary: PathBuf,
}

impl Spider for Feeder {
    type Item = Fed;
    fn name(&self) -> &str {
        "feeder"
    }
    fn start_requests(&self) -> Result<Vec<Request>> {
        Ok(batch(&self.base, 0))
    }
    async fn parse(&self, page: Response, out: &mut Output<Fed>) -> Result<()> {
        out.stats().inc("feeder/pages");
        out.item(Fed {
            path: page.url().path().to_owned(),
            batch: page.meta("batch").context("the batch in meta")?,
            title: page.select("h1::text").get(),
        });
        Ok(())
    }
    async fn closed(&self, reason: &str, stats: &Stats) -> Result<()> {
        write_summary(&self.summary, reason, stats, "feeder/")
    }
}

/// Scrapy's `idle` handler connected to `spider_idle`: the next batch and
/// `DontCloseSpider` while one is left.
struct IdleFeeder {
    base: String,
    next: AtomicUsize,
}

impl<I: Send + Sync + 'static> Extension<I> for IdleFeeder {
    async fn spider_idle(&self, crawl: &CrawlHandle) -> Vec<Request> {
        let n = self.next.load(Ordering::Relaxed);
        if n >= BATCHES.len() {
            return Vec::new();
        }
        self.next.store(n + 1, Ordering::Relaxed);
        crawl.inc_stat("feeder/batches");
        batch(&self.base, n)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_feeder_gives_scrapys_items_and_counters() {
    let lab = shop().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let base = lab.url_for("/").trim_end_matches('/').to_owned();
    let (scrapy_items, scrapy_summary) = (dir.path().join("s.jsonl"), dir.path().join("s.json"));
    scrapy(
        "feeder",
        &[
            ("base", base.clone()),
            ("summary", scrapy_summary.display().to_string()),
        ],
        &scrapy_items,
    )
    .await;
    let (port_items, port_summary) = (dir.path().join("p.jsonl"), dir.path().join("p.json"));
    let stats = quick(Crawl::new(Feeder {
        base: base.clone(),
        summary: port_summary.clone(),
    }))
    .extension(IdleFeeder {
        base,
        next: AtomicUsize::new(1),
    })
    .feed(&port_items)
    .expect("feed")
    .run()
    .await
    .expect("crawl");
    let compared = Compared {
        scrapy_items: sorted_items(&scrapy_items),
        port_items: sorted_items(&port_items),
        scrapy_summary: read_json(&scrapy_summary),
        port_summary: read_json(&port_summary),
    };
    compared.assert_same(&stats);
    // Every batch was fed, each page once.
    assert_eq!(compared.port_items.len(), 5, "{stats}");
    assert_eq!(stats.spider.get("feeder/batches"), Some(&2), "{stats}");
    lab.shutdown().await;
}
