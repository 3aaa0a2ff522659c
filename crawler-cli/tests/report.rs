//! The politeness report end to end: a real crawl of two lab hosts, one of them rate
//! limited, records its politeness; the report drawn from the record is well-formed, has
//! one chart per host, shows the holds the limiter caused with their trigger, and counts
//! what the crawl counted.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crawler::prelude::*;
use crawler_lab::{Lab, RetryAfter, Scenario};

/// Follows every link from its start pages.
struct Sites(Vec<String>);

impl Spider for Sites {
    type Item = String;

    fn name(&self) -> &str {
        "sites"
    }

    fn start_urls(&self) -> Vec<String> {
        self.0.clone()
    }

    async fn parse(&self, page: Response, out: &mut Output<String>) -> Result<()> {
        for href in page.select("a").attrs("href") {
            out.follow(href);
        }
        Ok(())
    }
}

/// A lab whose limiter allows 5 requests/s with a burst of 5 and answers refusals with
/// `Retry-After: 1`, and an open one. The crawls stop at depth 1 (the pages the home page
/// links to), a few dozen requests a host.
async fn labs() -> (Lab, Lab) {
    let limited = Lab::builder()
        .books(100)
        .scenario(Scenario::rate_limited(5.0, 5).retry_after(RetryAfter::Seconds(1)))
        .start()
        .await
        .expect("limited lab");
    let open = Lab::builder().books(100).start().await.expect("open lab");
    (limited, open)
}

fn host_of(lab: &Lab) -> String {
    lab.addr().to_string()
}

fn sel(css: &str) -> scraper::Selector {
    scraper::Selector::parse(css).unwrap_or_else(|e| panic!("{css}: {e}"))
}

/// Whether `html` is well-formed XML: every element closed, attributes quoted, entities
/// known.
fn well_formed(html: &str) {
    let mut reader = quick_xml::Reader::from_str(html);
    let mut depth = 0i64;
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Start(_)) => depth += 1,
            Ok(quick_xml::events::Event::End(_)) => depth -= 1,
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("not well-formed at {}: {e}", reader.buffer_position()),
        }
    }
    assert_eq!(depth, 0, "elements left open");
}

/// Per host (the section's heading), the counts by status in its table.
fn status_tables(doc: &scraper::Html) -> BTreeMap<String, BTreeMap<u16, u64>> {
    doc.select(&sel("section.host"))
        .map(|section| {
            let host: String = section.select(&sel("h2")).flat_map(|h| h.text()).collect();
            let counts = section
                .select(&sel("td[data-status]"))
                .filter_map(|td| {
                    let code = td.value().attr("data-status")?.parse().ok()?;
                    let n = td.text().collect::<String>().trim().parse().ok()?;
                    Some((code, n))
                })
                .collect();
            (host, counts)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_crawl_draws_its_holds_and_counts() {
    let (limited, open) = labs().await;
    let job = tempfile::tempdir().expect("temp dir");
    let stats = Crawl::new(Sites(vec![limited.url(), open.url()]))
        .progress(false)
        .set("job_dir", job.path().to_string_lossy())
        // Four times what the limiter allows, so it refuses and the host is held.
        .set("start_rate", "20")
        .set("concurrency_per_host", "4")
        .set("depth_limit", "1")
        .run()
        .await
        .expect("crawl");
    let refused = limited
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.status == 429)
        .count();
    assert!(refused > 0, "the limiter never refused: {stats}");

    // Run the job again: it has nothing left to do, and its run is appended to the record,
    // not written over it.
    Crawl::new(Sites(vec![limited.url(), open.url()]))
        .progress(false)
        .set("job_dir", job.path().to_string_lossy())
        .set("depth_limit", "1")
        .run()
        .await
        .expect("second run");

    let out = job.path().join("report.html");
    let run = Command::new(env!("CARGO_BIN_EXE_crawler"))
        .arg("report")
        .arg(job.path())
        .arg("-o")
        .arg(&out)
        .env_remove("RUST_LOG")
        .output()
        .expect("crawler report runs");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let html = std::fs::read_to_string(&out).expect("report written");
    well_formed(&html);
    assert!(!html.contains("<script"), "no script");
    assert!(no_fetches(&html), "the page loads nothing");
    let doc = scraper::Html::parse_document(&html);

    // One section with one chart per host crawled.
    let hosts: Vec<String> = doc
        .select(&sel("section.host h2"))
        .map(|h| h.text().collect())
        .collect();
    let mut want = vec![host_of(&limited), host_of(&open)];
    want.sort();
    let mut got = hosts.clone();
    got.sort();
    assert_eq!(got, want);
    assert_eq!(doc.select(&sel("svg")).count(), 2);
    assert_eq!(doc.select(&sel("section.host svg.host-chart")).count(), 2);

    // The limited host's chart has hold bands naming what caused them (429 or its
    // Retry-After), and refusal marks; the open host has neither.
    let section = |host: &str| {
        doc.select(&sel("section.host"))
            .find(|s| {
                s.select(&sel("h2"))
                    .flat_map(|h| h.text())
                    .collect::<String>()
                    == host
            })
            .unwrap_or_else(|| panic!("no section for {host}"))
    };
    let limited_section = section(&host_of(&limited));
    let triggers: Vec<&str> = limited_section
        .select(&sel("rect.hold"))
        .filter_map(|r| r.value().attr("data-trigger"))
        .collect();
    assert!(
        triggers.iter().any(|t| *t == "Retry-After" || *t == "429"),
        "holds: {triggers:?}"
    );
    assert!(limited_section.select(&sel("path.refusal")).count() > 0);
    let open_section = section(&host_of(&open));
    assert_eq!(open_section.select(&sel("rect.hold")).count(), 0);
    assert_eq!(open_section.select(&sel("path.refusal")).count(), 0);

    assert!(html.contains("(2 runs)"), "both runs are in the record");

    // The counts by status are the crawl's own, host by host.
    let tables = status_tables(&doc);
    for h in &stats.hosts {
        assert_eq!(tables.get(&h.host), Some(&h.status), "{}", h.host);
    }
    let refused_in_report = tables
        .get(&host_of(&limited))
        .and_then(|t| t.get(&429))
        .copied()
        .unwrap_or(0);
    assert_eq!(refused_in_report, refused as u64);
    limited.shutdown().await;
    open.shutdown().await;
}

/// The only URLs in the page are text (the hosts' names), never something fetched.
fn no_fetches(html: &str) -> bool {
    !html.contains("src=") && !html.contains("<link") && !html.contains("@import")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crawl_with_report_writes_the_page_without_a_job_dir() {
    let (limited, open) = labs().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("politeness.html");
    let code = crawler_cli::Runner::new()
        .spider(Sites(vec![limited.url(), open.url()]))
        .run_args([
            "runner".as_ref(),
            "crawl".as_ref(),
            "sites".as_ref(),
            "--no-progress".as_ref(),
            "-s".as_ref(),
            "start_rate=20".as_ref(),
            "-s".as_ref(),
            "depth_limit=1".as_ref(),
            "--report".as_ref(),
            out.as_os_str(),
        ])
        .await;
    assert_eq!(code, std::process::ExitCode::SUCCESS);
    let html = std::fs::read_to_string(&out).expect("report written");
    well_formed(&html);
    let doc = scraper::Html::parse_document(&html);
    assert_eq!(doc.select(&sel("section.host svg.host-chart")).count(), 2);
    // The record was a temporary file, gone once drawn.
    let prefix = format!("crawler-politeness-{}-", std::process::id());
    let left = std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(left, 0, "the temporary record was left behind");
    limited.shutdown().await;
    open.shutdown().await;
}

#[tokio::test]
async fn report_of_a_directory_without_a_record_says_why() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = Command::new(env!("CARGO_BIN_EXE_crawler"))
        .arg("report")
        .arg(dir.path())
        .env_remove("RUST_LOG")
        .output()
        .expect("crawler report runs");
    assert_eq!(run.status.code(), Some(2));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("holds no politeness record"), "{err}");
    assert!(!Path::new(&dir.path().join("politeness-report.html")).exists());
}
