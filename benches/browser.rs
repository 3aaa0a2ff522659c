//! Browser benchmark (issue 31): the lab's JavaScript catalogue rendered in Debian's
//! chromium by our crawl and by scrapy-playwright, side by side, and chromium's memory per
//! open page.
//!
//! ```text
//! cargo bench -p crawler --features browser --bench browser             # ours, then
//!     # scrapy-playwright when BROWSER_BENCH_PYTHON (default python3) imports it
//! cargo bench -p crawler --features browser --bench browser -- compare [PAGES] [TABS] [SCENARIO]
//! cargo bench -p crawler --features browser --bench browser -- tabs [PAGES]   # tabs 1, 2, 4, 8
//! BROWSER_BENCH_PYTHON=/tmp/venv/bin/python cargo bench ... --bench browser
//! ```
//!
//! Every crawl gets the same `PAGES` catalogue pages (20 books each) as start URLs, renders
//! each until the script filled its list (`ul#books[data-loaded]`), blocks images, media and
//! fonts, and has `TABS` pages open at once (ours: `browser_tabs`; theirs: that many
//! concurrent requests and pages). Both run politeness off for pages (no delay; ours on the
//! `fixed` throttle), against a lab pair in another process: the site and the asset host
//! (`localhost`, serving the pages' script and covers). Scenario `open` (default) serves
//! everything; `limited` has the asset host allow 2 requests a second (burst 2) and refuse
//! the rest with a 2 s Retry-After.
//!
//! Each crawl runs in a process of its own; the parent samples its whole process tree (the
//! crawler, its chromium, and for scrapy-playwright the Node driver) every 50 ms: CPU is the
//! sum over the tree's processes of their own user+system time, memory the peak of the
//! tree's summed PSS (shared pages split between the processes that map them) and summed
//! RSS (shared pages counted once per process). The lab's recorders say what the servers
//! saw: requests by kind, requests to paths robots.txt disallows, requests inside a hold.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crawler::browser::ProcessTreeMemory;
use crawler::core::RenderOptions;
use crawler::prelude::*;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: crawler::MiMalloc = crawler::MiMalloc;

/// Books per catalogue page (the lab's page size).
const PAGE_SIZE: usize = 20;
/// How often the parent samples a crawl's process tree.
const SAMPLE: Duration = Duration::from_millis(50);
/// The pages' wait: the script filled the list from the API.
const LOADED: &str = "ul#books[data-loaded]";
const USER_AGENT: &str = "jsbench/1.0 (+http://127.0.0.1/)";

/// Every page of the catalogue as a start URL, rendered until its list is loaded.
struct AllPages {
    base: String,
    pages: usize,
}

impl Spider for AllPages {
    type Item = (String, String);

    fn name(&self) -> &str {
        "js_bench"
    }

    fn start_requests(&self) -> Result<Vec<Request>> {
        (1..=self.pages)
            .map(|n| {
                Ok(Request::get(format!("{}js/page-{n}.html", self.base))?
                    .render_with(RenderOptions::new().wait_for(LOADED)))
            })
            .collect()
    }

    async fn parse(&self, page: Response, out: &mut Output<(String, String)>) -> Result<()> {
        for li in page.select("li.book").iter() {
            out.item((
                li.select("a.title").text().unwrap_or_default(),
                li.select("span.price").text().unwrap_or_default(),
            ));
        }
        Ok(())
    }
}

type BoxError = Box<dyn std::error::Error>;

fn main() -> std::result::Result<(), BoxError> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let arg = |i: usize| args.get(i).map(String::as_str);
    let num = |i: usize, default: usize| arg(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    match arg(0) {
        Some("--serve") => serve(num(1, 2_000), arg(2).unwrap_or("open")),
        Some("--crawl") => crawl(
            arg(1).ok_or("--crawl URL PAGES TABS")?,
            num(2, 100),
            num(3, 4),
        ),
        Some("tabs") => {
            let pages = num(1, 100);
            println!("memory per open page: {pages} pages, tabs 1, 2, 4, 8");
            let mut runs = Vec::new();
            for tabs in [1, 2, 4, 8] {
                runs.extend(compare(pages, tabs, "open")?);
            }
            // What one more open page costs: the browser's peak footprint against the tabs,
            // from one tab to eight.
            for name in ["ours", "scrapy-playwright"] {
                let at = |tabs: usize| {
                    runs.iter()
                        .find(|r| r.0 == name && r.1 == tabs)
                        .map(|r| r.2)
                };
                if let (Some(one), Some(eight)) = (at(1), at(8)) {
                    println!(
                        "crawler={name} browser_pss_mib_per_open_page={:.0} (tabs 1: {one:.0}, tabs 8: {eight:.0})",
                        (eight - one) / 7.0
                    );
                }
            }
            Ok(())
        }
        Some("compare") => compare(num(1, 100), num(2, 4), arg(3).unwrap_or("open")).map(drop),
        _ => compare(100, 4, "open").map(drop),
    }
}

/// Serve the site and its asset host until the parent closes our stdin, then print what
/// the servers saw.
fn serve(books: usize, scenario: &str) -> std::result::Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut assets = crawler_lab::Lab::builder().books(books);
        if scenario == "limited" {
            assets = assets.scenario(
                crawler_lab::Scenario::rate_limited(2.0, 2)
                    .retry_after(crawler_lab::RetryAfter::Seconds(2)),
            );
        }
        let assets = assets.start().await?;
        let site = crawler_lab::Lab::builder()
            .books(books)
            .js_assets(format!("http://localhost:{}/", assets.addr().port()))
            .start()
            .await?;
        println!("{}", site.url());
        let mut line = String::new();
        let _ = tokio::io::AsyncBufReadExt::read_line(
            &mut tokio::io::BufReader::new(tokio::io::stdin()),
            &mut line,
        )
        .await;
        let mut kinds: HashMap<&str, u64> = HashMap::new();
        for (host, lab) in [("site", &site), ("assets", &assets)] {
            for r in lab.recorder().requests() {
                let kind = match r.path.as_str() {
                    "/robots.txt" => "robots",
                    p if p.starts_with("/js/page-") => "pages",
                    p if p.starts_with("/private/") => "disallowed",
                    _ => "sub",
                };
                *kinds.entry(kind).or_default() += 1;
                if host == "assets" {
                    *kinds.entry("assets").or_default() += 1;
                }
                if r.status == 429 {
                    *kinds.entry("refused").or_default() += 1;
                }
            }
        }
        let violations =
            site.recorder().report().total_violations() + assets.recorder().report().total_violations();
        let k = |name: &str| kinds.get(name).copied().unwrap_or(0);
        println!(
            "server pages={} robots={} subrequests={} disallowed={} asset_host={} refused={} inside_holds={violations}",
            k("pages"),
            k("robots"),
            k("sub") + k("disallowed"),
            k("disallowed"),
            k("assets"),
            k("refused"),
        );
        site.shutdown().await;
        assets.shutdown().await;
        Ok::<_, BoxError>(())
    })
}

/// Our crawl of the catalogue at `url` (one process, its chromium under it).
fn crawl(url: &str, pages: usize, tabs: usize) -> std::result::Result<(), BoxError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let t0 = Instant::now();
    let stats = rt.block_on(
        Crawl::new(AllPages {
            base: url.to_owned(),
            pages,
        })
        .set("user_agent", USER_AGENT)
        .set("concurrency", "16")
        .set("concurrency_per_host", "16")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("browser_tabs", tabs.to_string())
        .progress(false)
        .run(),
    )?;
    let wall = t0.elapsed().as_secs_f64();
    let sub = |k: &str| stats.subrequests.get(k).copied().unwrap_or(0);
    // Every attempt that left through a slot: answered, refused and retried, or failed.
    let through = sub("sent") + sub("retried") + sub("failed");
    println!(
        "ours pages={} items={} wall={wall:.2}s through_slots={through} crawler_rss_mib={:.1}",
        stats.status.values().sum::<u64>(),
        stats.items_scraped,
        peak_rss_mib(),
    );
    Ok(())
}

/// This process's peak resident set in MiB (VmHWM).
fn peak_rss_mib() -> f64 {
    status_kib(std::process::id(), "VmHWM:").map_or(0.0, |kb| kb as f64 / 1024.0)
}

fn status_kib(pid: u32, key: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Each running process's parent.
fn parents() -> HashMap<u32, u32> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if let Some(ppid) = stat_fields(pid).and_then(|f| f.get(1).and_then(|p| p.parse().ok())) {
            out.insert(pid, ppid);
        }
    }
    out
}

/// The fields of `/proc/PID/stat` after the command name (state first).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// `root` and its descendants.
fn tree(root: u32) -> Vec<u32> {
    let parents = parents();
    let mut out = vec![root];
    let mut i = 0;
    while let Some(&p) = out.get(i) {
        out.extend(parents.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// A crawl's process tree, sampled while it runs.
#[derive(Default)]
struct Usage {
    /// Each process's own user+system ticks, as last seen.
    ticks: HashMap<u32, u64>,
    peak_pss_mib: f64,
    peak_rss_mib: f64,
    /// The peak of the tree without its root: the browser (and, for scrapy-playwright,
    /// its Node driver).
    peak_children_pss_mib: f64,
    processes: usize,
}

impl Usage {
    fn sample(&mut self, root: u32) {
        for pid in tree(root) {
            if let Some(f) = stat_fields(pid) {
                // utime and stime: the 14th and 15th fields, 12th and 13th after the name.
                let t = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                self.ticks.insert(pid, t(11) + t(12));
            }
        }
        self.processes = self.processes.max(self.ticks.len());
        if let Some(m) = ProcessTreeMemory::of(root) {
            let pss = m.pss_mib().unwrap_or(0.0);
            self.peak_pss_mib = self.peak_pss_mib.max(pss);
            self.peak_rss_mib = self.peak_rss_mib.max(m.rss_mib());
            let root_pss = std::fs::read_to_string(format!("/proc/{root}/smaps_rollup"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("Pss:"))
                        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
                })
                .unwrap_or(0.0)
                / 1024.0;
            self.peak_children_pss_mib = self.peak_children_pss_mib.max(pss - root_pss);
        }
    }

    fn cpu_seconds(&self) -> f64 {
        // USER_HZ is 100 on Linux.
        self.ticks.values().sum::<u64>() as f64 / 100.0
    }
}

/// Run `child` to its end, sampling its tree; its stdout.
fn measure(mut child: Child) -> std::result::Result<(String, Usage), BoxError> {
    let pid = child.id();
    let mut stdout = child.stdout.take().ok_or("no child stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let mut usage = Usage::default();
    loop {
        usage.sample(pid);
        if child.try_wait()?.is_some() {
            break;
        }
        std::thread::sleep(SAMPLE);
    }
    let out = reader.join().map_err(|_| "reader thread")?;
    Ok((out, usage))
}

/// The lab pair in a child process; its summary line when stopped.
struct LabChild {
    child: Child,
    url: String,
    out: BufReader<std::process::ChildStdout>,
}

impl LabChild {
    fn start(books: usize, scenario: &str) -> std::result::Result<Self, BoxError> {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--serve", &books.to_string(), scenario])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut out = BufReader::new(child.stdout.take().ok_or("no lab stdout")?);
        let mut url = String::new();
        out.read_line(&mut url)?;
        Ok(Self {
            child,
            url: url.trim().to_owned(),
            out,
        })
    }

    /// Stop the lab; what its servers saw.
    fn stop(mut self) -> std::result::Result<String, BoxError> {
        drop(self.child.stdin.take());
        let mut line = String::new();
        self.out.read_line(&mut line)?;
        self.child.wait()?;
        Ok(line.trim().to_owned())
    }
}

/// The value of `key=` in a figures line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

fn fnum(line: &str, key: &str) -> f64 {
    field(line, key)
        .map(|v| v.trim_end_matches('s'))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// One crawler's run: its line, then the figures per page.
fn report(name: &str, tabs: usize, line: &str, usage: &Usage, server: &str) {
    let pages = fnum(line, "pages").max(1.0);
    let wall = fnum(line, "wall").max(1e-9);
    let subs = fnum(server, "subrequests");
    let through = fnum(line, "through_slots");
    println!(
        "crawler={name} tabs={tabs} pages={} items={} wall={wall:.2}s pages/s={:.2} \
         cpu_s_per_page={:.3} peak_tree_pss_mib={:.0} peak_tree_rss_mib={:.0} \
         peak_browser_pss_mib={:.0} processes={}",
        fnum(line, "pages"),
        fnum(line, "items"),
        pages / wall,
        usage.cpu_seconds() / pages,
        usage.peak_pss_mib,
        usage.peak_rss_mib,
        usage.peak_children_pss_mib,
        usage.processes,
    );
    println!(
        "crawler={name} tabs={tabs} {server} sub_requests_through_politeness={through:.0}/{subs:.0}"
    );
}

/// Our crawl, then scrapy-playwright's (when its Python imports it), on fresh lab pairs:
/// each crawler's name, tabs and peak browser PSS (MiB).
fn compare(
    pages: usize,
    tabs: usize,
    scenario: &str,
) -> std::result::Result<Vec<(&'static str, usize, f64)>, BoxError> {
    let mut runs = Vec::new();
    let books = pages * PAGE_SIZE;
    let lab = LabChild::start(books, scenario)?;
    let child = Command::new(std::env::current_exe()?)
        .args(["--crawl", &lab.url, &pages.to_string(), &tabs.to_string()])
        .stdout(Stdio::piped())
        .spawn()?;
    let (out, usage) = measure(child)?;
    let server = lab.stop()?;
    let line = out
        .lines()
        .find(|l| l.starts_with("ours "))
        .ok_or_else(|| format!("our crawl printed no figures: {out}"))?;
    report("ours", tabs, line, &usage, &server);
    runs.push(("ours", tabs, usage.peak_children_pss_mib));

    let python = std::env::var("BROWSER_BENCH_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let importable = Command::new(&python)
        .args(["-c", "import scrapy_playwright, playwright"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !importable {
        println!(
            "crawler=scrapy-playwright skipped: {python} cannot import scrapy_playwright \
             (set BROWSER_BENCH_PYTHON)"
        );
        return Ok(runs);
    }
    let lab = LabChild::start(books, scenario)?;
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/scrapy_playwright_books.py");
    let child = Command::new(&python)
        .arg(script)
        .arg(&lab.url)
        .env("PAGES", pages.to_string())
        .env("TABS", tabs.to_string())
        // A page whose script was refused (scenario `limited`) never fills its list: it
        // fails after 10 s rather than the default 30.
        .env(
            "WAIT_MS",
            if scenario == "limited" {
                "10000"
            } else {
                "30000"
            },
        )
        // Its log (a traceback per failed page in `limited`) would bury the figures; run
        // the script by hand to read it.
        .stderr(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()?;
    let (out, usage) = measure(child)?;
    let server = lab.stop()?;
    let line = out
        .lines()
        .find(|l| l.starts_with("scrapy-playwright "))
        .ok_or_else(|| format!("scrapy-playwright printed no figures: {out}"))?;
    report("scrapy-playwright", tabs, line, &usage, &server);
    runs.push(("scrapy-playwright", tabs, usage.peak_children_pss_mib));
    Ok(runs)
}
