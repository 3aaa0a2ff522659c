//! `crawler sitemap URL`: a crawl whose spider is a [`SitemapSpider`] that lists the entries
//! of a site's sitemaps instead of fetching their pages, each printed as `URL<TAB>lastmod`
//! as soon as its sitemap is read.
//!
//! It runs through [`Crawl`] like every crawl: robots.txt is checked for robots.txt's own
//! `Sitemap:` lines and for every sitemap, the host's slot paces the requests, failures are
//! retried, the private-address guard and the settings apply. What the listing cannot use is
//! left out: it never resumes a job or joins a fleet (`job_dir`, `redis_url`), writes no
//! failures file, and always reads the sitemaps as they are now (no conditional requests, no
//! HTTP cache), since a sitemap unchanged since the last run would list nothing.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use crawler::core::{
    After, DownloaderMiddleware, Output, Pipeline, Processed, Request, Response, Result, Settings,
    Spider, parse_http_url,
};
use crawler::spiders::{SitemapEntry, SitemapSpider, SitemapStats};
use crawler::{Crawl, Error, ErrorKind};

use crate::common::{EXIT_FAILED, Failure, failed, usage};

/// One page entry of a sitemap.
#[derive(Debug, serde::Serialize)]
struct Entry {
    loc: String,
    /// `<lastmod>`, Unix seconds.
    lastmod: Option<i64>,
}

impl Entry {
    fn of(e: &SitemapEntry) -> Self {
        Self {
            loc: e.loc.clone(),
            lastmod: e.lastmod,
        }
    }
}

/// The spider: the sitemaps' entries as items, no page requests.
struct Listing {
    sitemaps: SitemapSpider,
}

impl Spider for Listing {
    type Item = Entry;

    fn name(&self) -> &str {
        "sitemap"
    }

    fn start_requests(&self) -> Result<Vec<Request>> {
        Ok(self.sitemaps.start_requests())
    }

    async fn parse(&self, page: Response, out: &mut Output<Entry>) -> Result<()> {
        // A sitemap read only in part has its readable entries listed; the error itself
        // was logged and counted by the sitemap spider (and is in the summary line), so it
        // is not reported a second time as a spider error.
        let _ = self.sitemaps.handle_as_items(&page, out, Entry::of).await;
        Ok(())
    }
}

/// Prints each entry to stdout; stops the crawl when stdout is closed (`| head`).
#[derive(Default)]
struct Print {
    closed: AtomicBool,
}

impl Pipeline<Entry> for Print {
    async fn process(&self, item: Entry) -> Result<Processed<Entry>> {
        if !self.closed.load(Ordering::Relaxed) {
            let lastmod = item
                .lastmod
                .and_then(|t| u64::try_from(t).ok())
                .map(|t| {
                    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(t))
                        .to_string()
                })
                .unwrap_or_default();
            // stdout is line-buffered: each entry is out as soon as it is written.
            if writeln!(std::io::stdout().lock(), "{}\t{lastmod}", item.loc).is_err() {
                self.closed.store(true, Ordering::Relaxed);
            }
        }
        Ok(Processed::Keep(item))
    }

    fn close_crawl(&self) -> Option<String> {
        self.closed
            .load(Ordering::Relaxed)
            .then(|| "stdout closed".to_owned())
    }
}

/// Says which sitemap a server refused, and how (the engine counts failed requests but
/// names them only at debug level).
struct RefusedSitemaps;

impl DownloaderMiddleware for RefusedSitemaps {
    fn name(&self) -> &str {
        "refused_sitemaps"
    }

    async fn process_response(&self, request: &Request, response: Response) -> After {
        let status = response.status();
        if status >= 400 {
            eprintln!("warning: sitemap {}: HTTP status {status}", request.url);
        }
        After::Pass(response)
    }
}

/// Run `crawler sitemap URL`: a sitemap URL, or a site root or robots.txt URL whose
/// robots.txt lists the sitemaps.
pub(crate) async fn sitemap(
    settings: &Settings,
    url: &str,
) -> std::result::Result<ExitCode, Failure> {
    let url = parse_http_url(url).map_err(usage)?;
    let from_robots = url.path() == "/" || url.path() == "/robots.txt";
    let builder = SitemapSpider::builder();
    let builder = if from_robots {
        builder.robots(url.as_str())
    } else {
        builder.sitemap(url.as_str())
    };
    let sitemaps = builder.build().map_err(usage)?;
    let handle = sitemaps.stats_handle();
    let mut settings = settings.clone();
    settings.job_dir = None;
    settings.redis_url = None;
    settings.failures_file = None;
    settings.conditional_requests = false;
    settings.http_cache = false;
    let stats = Crawl::new(Listing { sitemaps })
        .settings(settings)
        .progress(false)
        .downloader_middleware(RefusedSitemaps)
        .pipeline(Print::default())
        .run()
        .await
        .map_err(|e| {
            if e.kind() == ErrorKind::Settings {
                usage(e)
            } else {
                failed(e)
            }
        })?;
    let sm = handle.get();
    if from_robots && sm.robots > 0 && sm.sitemap_requests == 0 {
        let robots = url
            .join("/robots.txt")
            .map_or_else(|_| url.to_string(), |u| u.to_string());
        return Err(failed(Error::new(
            ErrorKind::Other,
            format!("{robots} lists no sitemaps"),
        )));
    }
    // Every request of the crawl is a sitemap's (or robots.txt's): its failures are theirs.
    let failed_requests: u64 = stats.failed.values().sum::<u64>() + stats.skipped_host;
    let errors = sm.error_count + failed_requests + stats.disallowed;
    eprintln!("{}", summary(&sm, failed_requests, stats.disallowed));
    Ok(if errors > 0 && sm.entries == 0 {
        ExitCode::from(EXIT_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}

/// The closing line on stderr: `N sitemaps, N URLs, N errors, N skipped, N dropped over the
/// cap`, then what robots.txt and the limits kept from being read, when anything was.
fn summary(sm: &SitemapStats, failed_requests: u64, disallowed: u64) -> String {
    let mut line = format!(
        "{} sitemaps, {} URLs, {} errors, {} skipped, {} dropped over the cap",
        sm.sitemaps + failed_requests,
        sm.entries,
        sm.error_count + failed_requests + disallowed,
        sm.invalid,
        sm.dropped
    );
    if disallowed > 0 {
        line.push_str(&format!(", {disallowed} disallowed by robots.txt"));
    }
    if sm.too_deep > 0 {
        line.push_str(&format!(", {} too deep", sm.too_deep));
    }
    if sm.too_many > 0 {
        line.push_str(&format!(", {} over max_sitemaps", sm.too_many));
    }
    line
}
