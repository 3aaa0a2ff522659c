//! Crawl benchmark: book sites crawled with politeness off (our own loopback server),
//! reporting pages/s, CPU seconds per 1,000 pages and peak RSS of the crawler.
//!
//! ```text
//! cargo bench --bench crawl                       # both profiles against the lab (child process)
//! cargo bench --bench crawl -- compare            # ... and against nginx serving the same
//!                                                 # files, and Scrapy (when importable), ratios
//! cargo bench --bench crawl -- run PROFILE URL [BOOKS] [CONCURRENCY]   # one crawl, one line
//! cargo bench --bench crawl -- parse URL [ROUNDS]  # the parse path alone on the lab's pages
//! cargo bench --bench crawl -- [BOOKS] [CONCURRENCY] [URL]   # one crawl of the books profile
//! cargo bench --bench crawl -- chaos [BOOKS] [CONCURRENCY]   # the chaos site: peak RSS
//! cargo bench --bench crawl -- warc [BOOKS] [CONCURRENCY] [ROUNDS]   # CPU with and without
//!                                                 # a WARC, warcio on it, its replay
//! cargo bench --bench crawl -- h2 [BOOKS] [CONCURRENCY] [ROUNDS]   # nginx on TLS: HTTP/2
//!                                                 # against HTTP/1.1, connections to nginx
//! cargo bench --bench crawl -- hosts [HOSTS] [CONCURRENCY]   # one page on each of HOSTS
//!                                                            # host names: RSS over time
//! CRAWL_BENCH_FEED=/tmp/b.jsonl CRAWL_BENCH_SET="job_dir=/tmp/job;feed_fsync=off" \
//!     cargo bench --bench crawl                             # a feed, more settings
//! CRAWL_BENCH_PYTHON=/tmp/venv/bin/python CRAWL_BENCH_SPIDER=/path/to/spider \
//!     cargo bench --bench crawl -- compare                  # + Scrapy and spider-rs
//! ```
//!
//! Profiles: `books` is the lab's book site (10,000 books: 11,003 pages of 3.7 to 5.9 KB with
//! 20 to 35 links); `heavy` is the same site with 44 related-book links per book page (about
//! 7 KB and 60 links a page). Servers run in other processes (the lab on two threads, nginx
//! with two workers), and every crawl runs in a process of its own, so CPU and peak RSS are
//! that crawl's alone.

#[allow(dead_code)]
#[path = "../examples/books/spider.rs"]
mod books;

#[path = "support/cpu.rs"]
mod cpu;
#[allow(dead_code)]
#[path = "support/real.rs"]
mod real;
use cpu::{children_cpu_seconds, cpu_seconds};

#[path = "support/many_hosts.rs"]
mod many_hosts_support;
use many_hosts_support::{ManyHosts, rss_mib};

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

use crawler::prelude::*;

// The allocator is the binary's choice, as in a user's project: mimalloc with the default
// `mimalloc` feature, the system allocator with `--no-default-features` (BENCHMARKS.md,
// "Crawl speed", "The allocator and the build", compares the two).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: crawler::MiMalloc = crawler::MiMalloc;

/// Crawl one page on each of `hosts` host names and print RSS every tenth of the way: once
/// a host is done it is idle for good, so RSS should stop growing with the hosts touched.
fn many_hosts(
    hosts: usize,
    concurrency: usize,
    proxy: &str,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut crawl = Crawl::new(ManyHosts { hosts })
        .set("concurrency", concurrency.to_string())
        .set("proxy", proxy)
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("log_level", "warn")
        .progress(false);
    for pair in std::env::var("CRAWL_BENCH_SET")
        .unwrap_or_default()
        .split(';')
    {
        if let Some((k, v)) = pair.split_once('=') {
            crawl = crawl.set(k.trim(), v.trim());
        }
    }
    let t0 = Instant::now();
    let stats = rt.block_on(async move {
        let engine = crawl.build()?;
        let mut progress = engine.progress();
        let run = tokio::spawn(engine.run());
        let step = (hosts / 10).max(1) as u64;
        let mut next = step;
        println!("hosts_done rss_mib");
        println!("0 {:.1}", rss_mib());
        while progress.changed().await.is_ok() {
            let p = progress.borrow_and_update().clone();
            let done = p.stats.fetched + p.stats.failed.values().sum::<u64>();
            if done >= next {
                println!("{done} {:.1}", rss_mib());
                next += step;
            }
            if p.finished {
                break;
            }
        }
        Ok::<_, Box<dyn std::error::Error>>(run.await??)
    })?;
    println!(
        "hosts={hosts} fetched={} failed={:?} wall={:.1}s peak_rss_mib={:.1} final_rss_mib={:.1}",
        stats.fetched,
        stats.failed,
        t0.elapsed().as_secs_f64(),
        peak_rss_mib(),
        rss_mib()
    );
    Ok(())
}

/// Peak resident set size in MiB (VmHWM).
fn peak_rss_mib() -> f64 {
    vm_hwm_mib("self")
}

/// VmHWM of `/proc/{pid}/status` in MiB (`pid` a number or `self`), 0 when unreadable.
fn vm_hwm_mib(pid: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Related-book links per book page in the `heavy` profile: about 7 KB and 60 links a page.
const HEAVY_RELATED: u32 = 44;

/// Serve the lab (`open`, `heavy` or `chaos`) until the parent closes our stdin. Two worker
/// threads, so the server is not what limits the crawl.
fn serve(books: usize, mode: &str) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut lab = crawler_lab::Lab::builder().books(books);
        match mode {
            "chaos" => lab = lab.scenario(crawler_lab::Scenario::chaos()),
            "heavy" => lab = lab.related_links(HEAVY_RELATED),
            _ => {}
        }
        let lab = lab.start().await?;
        println!("{}", lab.url());
        // Serve until the parent closes our stdin (or dies).
        let mut line = String::new();
        let _ = tokio::io::AsyncBufReadExt::read_line(
            &mut tokio::io::BufReader::new(tokio::io::stdin()),
            &mut line,
        )
        .await;
        lab.shutdown().await;
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// A lab server in a child process (this binary with `--serve`); it stops when dropped.
struct LabChild {
    child: std::process::Child,
    url: String,
}

impl LabChild {
    fn start(books: usize, mode: &str) -> std::result::Result<Self, Box<dyn std::error::Error>> {
        let mut c = Command::new(std::env::current_exe()?)
            .args(["--serve", &books.to_string(), mode])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut url = String::new();
        BufReader::new(c.stdout.take().ok_or("no child stdout")?).read_line(&mut url)?;
        Ok(Self {
            child: c,
            url: url.trim().to_owned(),
        })
    }
}

impl Drop for LabChild {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// nginx serving a directory on 127.0.0.1 as an unprivileged foreground child with its own
/// prefix and config (two workers, no access log); killed when dropped.
struct Nginx {
    child: std::process::Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Nginx {
    fn start(root: &std::path::Path) -> std::result::Result<Self, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let port = real::free_port()?;
        let child = real::spawn_nginx(
            dir.path(),
            "worker_processes 2;\nevents { worker_connections 1024; }",
            &format!(
                r#"    types {{ text/html html; text/plain txt; application/xml xml; }}
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 1000000;
    open_file_cache max=20000 inactive=60s;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        index index.html;
    }}"#,
                root = root.display(),
            ),
        )?;
        let server = Self {
            child,
            url: format!("http://127.0.0.1:{port}/"),
            _dir: dir,
        };
        real::wait_listening(std::net::SocketAddr::from(([127, 0, 0, 1], port)), "nginx")?;
        Ok(server)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Saves every page a crawl reaches under a directory, at its URL path, so nginx can
/// serve the very site the lab serves.
struct Mirror {
    root: std::path::PathBuf,
    start: String,
}

impl Spider for Mirror {
    type Item = ();

    fn name(&self) -> &str {
        "mirror"
    }

    fn start_urls(&self) -> Vec<String> {
        vec![self.start.clone()]
    }

    async fn parse(&self, page: Response, out: &mut Output<()>) -> Result<()> {
        let mut path = page.url().path().trim_start_matches('/').to_owned();
        if path.is_empty() || path.ends_with('/') {
            path.push_str("index.html");
        }
        let file = self.root.join(path);
        if let Some(dir) = file.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&file, page.body())?;
        out.follow_all(page.select("a").attrs("href"));
        Ok(())
    }
}

/// Copy the site at `url` (pages and robots.txt) to `root`.
fn mirror(
    url: &str,
    root: &std::path::Path,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        // reqwest is built without a crypto provider (as the crawler's downloader installs
        // one); plain http needs none, but building a client insists.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let robots = reqwest::get(format!("{url}robots.txt"))
            .await?
            .bytes()
            .await?;
        std::fs::write(root.join("robots.txt"), robots)?;
        let crawl = Crawl::new(Mirror {
            root: root.to_owned(),
            start: url.to_owned(),
        })
        .set("concurrency", "32")
        .set("concurrency_per_host", "32")
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .set("log_level", "warn")
        .progress(false);
        crawl.run().await?;
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}

/// One crawl's figures, as a `run` child prints them on its last line.
#[derive(Clone, Debug, Default)]
struct Figures {
    pages: u64,
    items: u64,
    wall: f64,
    pages_per_s: f64,
    cpu_per_1000: f64,
    peak_rss_mib: f64,
}

impl Figures {
    fn line(&self) -> String {
        format!(
            "pages={} items={} wall={:.2}s pages/s={:.0} cpu_s_per_1000_pages={:.3} peak_rss_mib={:.1}",
            self.pages,
            self.items,
            self.wall,
            self.pages_per_s,
            self.cpu_per_1000,
            self.peak_rss_mib
        )
    }

    fn parse(line: &str) -> Option<Self> {
        let mut f = Figures::default();
        // Words without `=` (Scrapy's line starts with `scrapy`) are labels.
        for (k, v) in line.split_whitespace().filter_map(|f| f.split_once('=')) {
            let num = |v: &str| v.trim_end_matches('s').parse::<f64>().ok();
            match k {
                "pages" => f.pages = v.parse().ok()?,
                "items" => f.items = v.parse().ok()?,
                "wall" => f.wall = num(v)?,
                "pages/s" => f.pages_per_s = num(v)?,
                "cpu_s_per_1000_pages" => f.cpu_per_1000 = num(v)?,
                "peak_rss_mib" => f.peak_rss_mib = num(v)?,
                _ => {}
            }
        }
        (f.pages > 0).then_some(f)
    }
}

/// Crawl `url` in a child process of this binary and read its figures.
fn run_child(
    profile: &str,
    url: &str,
    books: usize,
    concurrency: usize,
) -> std::result::Result<Figures, Box<dyn std::error::Error>> {
    let out = Command::new(std::env::current_exe()?)
        .args([
            "run",
            profile,
            url,
            &books.to_string(),
            &concurrency.to_string(),
        ])
        .stderr(Stdio::inherit())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .rev()
        .find_map(Figures::parse)
        .filter(|_| out.status.success())
        .ok_or_else(|| format!("crawl of {url} failed: {stdout}").into())
}

/// [`run_child`] with `CRAWL_BENCH_SET` and `CRAWL_BENCH_FEED` set for that child only.
fn run_child_with(
    url: &str,
    books: usize,
    concurrency: usize,
    set: &str,
    feed: Option<&std::path::Path>,
) -> std::result::Result<Figures, Box<dyn std::error::Error>> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args([
        "run",
        "books",
        url,
        &books.to_string(),
        &concurrency.to_string(),
    ])
    .env("CRAWL_BENCH_SET", set)
    .env_remove("CRAWL_BENCH_FEED");
    if let Some(feed) = feed {
        cmd.env("CRAWL_BENCH_FEED", feed);
    }
    let out = cmd.stderr(Stdio::inherit()).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .rev()
        .find_map(Figures::parse)
        .filter(|_| out.status.success())
        .ok_or_else(|| format!("crawl of {url} with {set} failed: {stdout}").into())
}

/// A JSON Lines feed's lines, sorted (the same items whatever the order).
fn sorted_feed(
    path: &std::path::Path,
) -> std::result::Result<Vec<String>, Box<dyn std::error::Error>> {
    let mut lines: Vec<String> = std::fs::read_to_string(path)?
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    Ok(lines)
}

/// `warcio ARGS`, its standard output; an error when it fails or is not installed.
fn warcio(args: &[&str]) -> std::result::Result<String, Box<dyn std::error::Error>> {
    let out = Command::new("warcio")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run warcio ({e}): pip install warcio"))?;
    if !out.status.success() {
        return Err(format!(
            "warcio {args:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What the WARC writer cannot avoid spending on `files`' records, in CPU seconds: each
/// record deflated at level 1 as a gzip member of its own (one state, reset between
/// members, records under 1 KiB stored, as the writer does), the CRC-32 of each record, and
/// the SHA-1s of the block and payload digests. The best of `rounds` passes over records
/// already in memory: compression and hashing at their full speed, nothing else.
fn warc_floor(
    files: &[std::path::PathBuf],
    rounds: usize,
) -> std::result::Result<(f64, f64, f64), Box<dyn std::error::Error>> {
    use sha1::Digest;
    use std::io::Read;
    /// As the writer's `STORED_BELOW`: shorter records are stored, not deflated.
    const STORED_BELOW: usize = 1024;
    let mut records: Vec<Vec<u8>> = Vec::new();
    for file in files {
        let data = std::fs::read(file)?;
        let mut rest = &data[..];
        while !rest.is_empty() {
            let mut member = flate2::bufread::GzDecoder::new(rest);
            let mut record = Vec::new();
            member.read_to_end(&mut record)?;
            rest = member.into_inner();
            records.push(record);
        }
    }
    let find = |hay: &[u8]| hay.windows(4).position(|w| w == b"\r\n\r\n");
    // (block, payload) of each record: the block after the WARC header, the payload after
    // an HTTP block's head.
    let parts: Vec<(&[u8], &[u8])> = records
        .iter()
        .map(|r| {
            let start = find(r).map_or(0, |at| at + 4);
            let block = &r[start..r.len().saturating_sub(4).max(start)];
            let payload = if block.starts_with(b"HTTP/") || block.starts_with(b"GET ") {
                find(block).map_or(&block[block.len()..], |at| &block[at + 4..])
            } else {
                &block[block.len()..]
            };
            (block, payload)
        })
        .collect();
    let mut deflate = flate2::Compress::new(flate2::Compression::new(1), false);
    let mut out = Vec::with_capacity(1 << 20);
    let best = |f: &mut dyn FnMut()| {
        (0..rounds.max(1))
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let deflate_s = best(&mut || {
        for r in records.iter().filter(|r| r.len() >= STORED_BELOW) {
            deflate.reset();
            out.clear();
            out.reserve(r.len() + r.len() / 8 + 64);
            let _ = deflate.compress_vec(r, &mut out, flate2::FlushCompress::Finish);
        }
    });
    let crc_s = best(&mut || {
        for r in &records {
            let mut crc = flate2::Crc::new();
            crc.update(r);
            std::hint::black_box(crc.sum());
        }
    });
    let sha1_s = best(&mut || {
        for (block, payload) in &parts {
            std::hint::black_box(sha1::Sha1::digest(block));
            std::hint::black_box(sha1::Sha1::digest(payload));
        }
    });
    Ok((deflate_s, sha1_s, crc_s))
}

/// The WARC goals on one lab: `rounds` crawls without and with `warc`, alternating, each in
/// a process of its own, CPU per page compared (medians); then the last WARC checked with
/// warcio (0 errors, a response record for every page), and the crawl replayed from it
/// with the lab stopped: the same items, and a replay of the pages' answers.
fn warc_suite(
    books: usize,
    concurrency: usize,
    rounds: usize,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::Builder::new()
        .prefix("warc-bench")
        .tempdir_in(".")?;
    let lab = LabChild::start(books, "open")?;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (mut without, mut with) = (Vec::new(), Vec::new());
    let warc = dir.path().join("crawl.warc.gz");
    let clear = || -> std::io::Result<()> {
        for e in std::fs::read_dir(dir.path())? {
            let p = e?.path();
            if p.to_string_lossy().ends_with(".warc.gz") {
                std::fs::remove_file(p)?;
            }
        }
        Ok(())
    };
    // No feed in the timed rounds: the two differ by the WARC alone.
    for round in 0..rounds {
        let plain = run_child_with(&lab.url, books, concurrency, "", None)?;
        println!("round {round} without warc: {}", plain.line());
        without.push(plain.cpu_per_1000);
        clear()?;
        let set = format!("warc={}", warc.display());
        let archived = run_child_with(&lab.url, books, concurrency, &set, None)?;
        println!("round {round} with warc:    {}", archived.line());
        with.push(archived.cpu_per_1000);
    }
    let (a, b) = (median(&mut without), median(&mut with));
    println!(
        "cpu_s_per_1000_pages median of {rounds}: without={a:.3} with_warc={b:.3} ratio={:.2}",
        b / a
    );
    // The crawl that is checked: a WARC and a feed.
    clear()?;
    let warc_feed = dir.path().join("warc.jsonl");
    let set = format!("warc={}", warc.display());
    let pages_checked = run_child_with(&lab.url, books, concurrency, &set, Some(&warc_feed))?.pages;

    let files: Vec<std::path::PathBuf> = {
        let mut f: Vec<_> = std::fs::read_dir(dir.path())?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.to_string_lossy().ends_with(".warc.gz"))
            .collect();
        f.sort();
        f
    };
    let mut responses = std::collections::HashSet::new();
    let mut records = 0;
    let mut bytes = 0;
    for file in &files {
        bytes += std::fs::metadata(file)?.len();
        let path = file.to_str().ok_or("path")?;
        let problems = warcio(&["check", path])?;
        if !problems.trim().is_empty() {
            return Err(format!("warcio check {path}: {problems}").into());
        }
        for line in warcio(&["index", "-f", "warc-type,warc-target-uri", path])?.lines() {
            records += 1;
            let v: serde_json::Value = serde_json::from_str(line)?;
            if v["warc-type"] == "response" {
                responses.insert(v["warc-target-uri"].as_str().unwrap_or("").to_owned());
            }
        }
    }
    let items = sorted_feed(&warc_feed)?;
    let missing = items
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| !responses.contains(v["url"].as_str().unwrap_or("")))
        .count();
    println!(
        "warcio check: 0 errors in {} files ({:.1} MB), {records} records; {} response records, {} items, {missing} items without their page's response",
        files.len(),
        bytes as f64 / 1e6,
        responses.len(),
        items.len()
    );
    // The least the archive costs a page: compression and hashing at full speed, against
    // the crawl's own CPU a page.
    let (deflate_s, sha1_s, crc_s) = warc_floor(&files, 3)?;
    let per_page = |s: f64| s * 1e6 / pages_checked as f64;
    let floor = per_page(deflate_s + sha1_s + crc_s);
    println!(
        "writer floor per page: deflate {:.1} us, SHA-1 {:.1} us, CRC-32 {:.1} us = {floor:.1} us; \
         without warc {:.1} us a page: the least ratio {:.2}",
        per_page(deflate_s),
        per_page(sha1_s),
        per_page(crc_s),
        a * 1000.0,
        (a * 1000.0 + floor) / (a * 1000.0)
    );

    // The site gone, the crawl replayed from the archive.
    let url = lab.url.clone();
    drop(lab);
    let replay_feed = dir.path().join("replay.jsonl");
    let set = format!(
        "replay_warc={}",
        dir.path().join("crawl-*.warc.gz").display()
    );
    let replay = run_child_with(&url, books, concurrency, &set, Some(&replay_feed))?;
    let same = sorted_feed(&replay_feed)? == items;
    println!(
        "replay with the lab stopped: {} same_items={same}",
        replay.line()
    );
    if missing > 0 || !same {
        return Err("the WARC goals are not met".into());
    }
    Ok(())
}

/// The test CA (`ca.pem`) and a certificate it signed for 127.0.0.1 (`server.pem`,
/// `server.key`), made by `openssl` in `dir`: the same shape as tests/network.rs makes.
fn make_certificates(dir: &std::path::Path) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let run = |args: &[&str]| -> std::result::Result<(), Box<dyn std::error::Error>> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .map_err(|e| format!("cannot run openssl ({e}): apt-get install openssl"))?;
        if !out.status.success() {
            return Err(
                format!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr)).into(),
            );
        }
        Ok(())
    };
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    let words = |s: String| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
    let ca = words(format!(
        "req -x509 {ec} -keyout ca.key -out ca.pem -days 2 -subj /CN=crawler-bench-CA \
         -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign"
    ));
    run(&ca.iter().map(String::as_str).collect::<Vec<_>>())?;
    let csr = words(format!(
        "req {ec} -keyout server.key -out server.csr -subj /CN=127.0.0.1"
    ));
    run(&csr.iter().map(String::as_str).collect::<Vec<_>>())?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )?;
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "server.ext",
    ])
}

/// Connections nginx's upstream keeps open to the lab per worker: more than the crawl's
/// concurrency, so no request waits for an upstream connection or opens a fresh one.
const H2_UPSTREAM_KEEPALIVE: usize = 256;
/// How often the connections to nginx are counted during a crawl.
const CONN_SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);
/// Longest an `h2` crawl may take before the bench gives up on it (a 10,000-book crawl
/// takes seconds).
const H2_CRAWL_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// The local ports of the established TCP connections whose far end is 127.0.0.1:`port`,
/// from /proc/net/tcp. nginx is the only listener on that port and opens no connection to
/// itself (its upstream connections go to the lab's port), so every one is the crawl's.
fn established_to(port: u16) -> Vec<String> {
    let want = format!("0100007F:{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|l| {
            // sl local_address rem_address st
            let mut f = l.split_whitespace();
            let local = f.nth(1)?;
            let (rem, st) = (f.next()?, f.next()?);
            (rem == want && st == "01").then(|| local.to_owned())
        })
        .collect()
}

/// CPU seconds (user + system) so far of process `pid` (all its threads), from /proc.
fn process_cpu(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (num(11) + num(12)) / 100.0
}

/// CPU seconds (user + system) so far of each child of process `parent` (nginx's workers),
/// by pid, from /proc/PID/stat.
fn children_cpu(parent: u32) -> std::collections::BTreeMap<u32, f64> {
    let mut out = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        if num(1) as u32 == parent {
            out.insert(pid, (num(11) + num(12)) / 100.0);
        }
    }
    out
}

/// One crawl of `url` in a child process with `set`: its figures, the most connections to
/// `port` open at any sample while it ran, and how many distinct ones the samples saw.
fn crawl_counting_connections(
    url: &str,
    books: usize,
    concurrency: usize,
    set: &str,
    port: u16,
) -> std::result::Result<(Figures, usize, usize), Box<dyn std::error::Error>> {
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "run",
            "books",
            url,
            &books.to_string(),
            &concurrency.to_string(),
        ])
        .env("CRAWL_BENCH_SET", set)
        .env_remove("CRAWL_BENCH_FEED")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no child stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut BufReader::new(stdout), &mut s);
        s
    });
    let t0 = Instant::now();
    let mut max_conns = 0;
    let mut seen = std::collections::HashSet::new();
    let status = loop {
        let open = established_to(port);
        max_conns = max_conns.max(open.len());
        seen.extend(open);
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if t0.elapsed() > H2_CRAWL_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("crawl with {set} took over {H2_CRAWL_LIMIT:?}").into());
        }
        std::thread::sleep(CONN_SAMPLE_EVERY);
    };
    let stdout = reader.join().map_err(|_| "stdout reader panicked")?;
    let figures = stdout
        .lines()
        .rev()
        .find_map(Figures::parse)
        .filter(|_| status.success())
        .ok_or_else(|| format!("crawl of {url} with {set} failed: {stdout}"))?;
    Ok((figures, max_conns, seen.len()))
}

/// The HTTP/2 goal: one nginx on TLS offering HTTP/2 (ALPN) in front of a lab of `books`
/// books, and `rounds` alternating crawls of it with HTTP/2 (`http_version=auto`, which
/// ALPN makes h2) and with HTTP/1.1 forced (`http_version=1.1`), each in a process of its
/// own, the test CA trusted through `tls_ca_file`. Per mode: items, pages/s, CPU per page
/// and the most connections open to nginx at once (medians of the rounds, and the maximum).
fn h2_suite(
    books: usize,
    concurrency: usize,
    rounds: usize,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let lab = LabChild::start(books, "open")?;
    let lab_addr = lab
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let dir = tempfile::tempdir()?;
    make_certificates(dir.path())?;
    let port = real::free_port()?;
    let d = dir.path().display();
    // `listen ... ssl http2` works from nginx 1.9.5 on (Debian 12 ships 1.22, before the
    // `http2 on;` directive); the upstream is kept alive so nginx does not connect to the
    // lab once per request; the h2 settings are nginx's defaults, written out.
    let mut child = real::spawn_nginx(
        dir.path(),
        "worker_processes 2;\nevents { worker_connections 4096; }",
        &format!(
            r#"    upstream lab {{ server {lab_addr}; keepalive {H2_UPSTREAM_KEEPALIVE}; keepalive_requests 1000000; }}
    keepalive_requests 1000000;
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {d}/server.pem;
        ssl_certificate_key {d}/server.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        http2_max_concurrent_streams 128;
        location / {{
            proxy_pass http://lab;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $http_host;
            proxy_buffering on;
        }}
    }}"#
        ),
    )?;
    let up = real::wait_listening(std::net::SocketAddr::from(([127, 0, 0, 1], port)), "nginx");
    let servers = H2Servers {
        url: format!("https://127.0.0.1:{port}/"),
        ca: format!("{d}/ca.pem"),
        port,
        nginx: child.id(),
        lab: lab.child.id(),
    };
    let result = up
        .map_err(Into::into)
        .and_then(|()| h2_rounds(&servers, books, concurrency, rounds));
    // Our own child, by its id.
    let _ = child.kill();
    let _ = child.wait();
    drop(lab);
    result
}

/// The servers of [`h2_suite`].
struct H2Servers {
    /// nginx's `https://127.0.0.1:PORT/`.
    url: String,
    /// The CA that signed nginx's certificate.
    ca: String,
    /// nginx's port.
    port: u16,
    /// nginx's master process.
    nginx: u32,
    /// The lab's process.
    lab: u32,
}

/// The rounds of [`h2_suite`], and the verdict on the goal.
fn h2_rounds(
    servers: &H2Servers,
    books: usize,
    concurrency: usize,
    rounds: usize,
) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let H2Servers {
        url,
        ca,
        port,
        nginx,
        lab,
    } = servers;
    let (url, port, nginx, lab) = (url.as_str(), *port, *nginx, *lab);
    let modes = [("h2", "auto"), ("http1.1", "1.1")];
    let mut figures: Vec<Vec<(Figures, usize, usize)>> = vec![Vec::new(); modes.len()];
    println!("books={books} concurrency={concurrency} url={url}");
    for round in 0..rounds {
        for (i, (name, version)) in modes.iter().enumerate() {
            let set = format!("tls_ca_file={ca};http_version={version}");
            let before = children_cpu(nginx);
            let lab_before = process_cpu(lab);
            let (f, conns, seen) = crawl_counting_connections(url, books, concurrency, &set, port)?;
            // Each nginx worker's CPU during the crawl: one near the wall time is saturated.
            let workers: Vec<String> = children_cpu(nginx)
                .iter()
                .map(|(pid, s)| format!("{:.2}", s - before.get(pid).copied().unwrap_or(0.0)))
                .collect();
            println!(
                "round {round} {name:<8} {} max_conns_to_nginx={conns} conns_seen={seen} nginx_workers_cpu_s={} lab_cpu_s={:.2}",
                f.line(),
                workers.join(","),
                process_cpu(lab) - lab_before
            );
            figures[i].push((f, conns, seen));
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut pps = Vec::new();
    let mut all_items = true;
    let mut ok = true;
    for (i, (name, _)) in modes.iter().enumerate() {
        let runs = &figures[i];
        let min_items = runs.iter().map(|(f, ..)| f.items).min().unwrap_or(0);
        let max_conns = runs.iter().map(|(_, c, _)| *c).max().unwrap_or(0);
        let p = median(runs.iter().map(|(f, ..)| f.pages_per_s).collect());
        let c = median(runs.iter().map(|(f, ..)| f.cpu_per_1000).collect());
        println!(
            "{name:<8} median of {rounds}: items_min={min_items} pages/s={p:.0} cpu_s_per_1000_pages={c:.3} max_conns_to_nginx={max_conns}"
        );
        all_items &= min_items as usize == books;
        if i == 0 {
            println!("goal: h2 at most 1 connection to nginx: {}", max_conns <= 1);
            ok &= max_conns <= 1;
        }
        pps.push(p);
    }
    println!(
        "goal: every item in every round: {all_items}; h2 pages/s at least HTTP/1.1's (medians): {} (ratio {:.2})",
        pps[0] >= pps[1],
        pps[0] / pps[1].max(1e-9)
    );
    ok &= all_items && pps[0] >= pps[1];
    if !ok {
        return Err("the HTTP/2 goal is not met".into());
    }
    Ok(())
}

/// Scrapy on the same site with the same spider logic (`benches/scrapy_books.py`), when the
/// interpreter in `CRAWL_BENCH_PYTHON` (default `python3`) can import it.
fn run_scrapy(url: &str) -> std::result::Result<Option<Figures>, Box<dyn std::error::Error>> {
    let python = std::env::var("CRAWL_BENCH_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let importable = Command::new(&python)
        .args(["-c", "import scrapy"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !importable {
        println!("scrapy: skipped ({python} cannot import scrapy; set CRAWL_BENCH_PYTHON)");
        return Ok(None);
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/scrapy_books.py");
    let out = Command::new(&python).arg(script).arg(url).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let figures = stdout.lines().rev().find_map(Figures::parse);
    if figures.is_none() {
        println!(
            "scrapy: no figures ({}): {stdout}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(figures)
}

/// Peak RSS of a running process in MiB (its VmHWM), 0 once it is gone.
fn child_peak_rss_mib(pid: u32) -> f64 {
    vm_hwm_mib(&pid.to_string())
}

/// The longest a spider-rs crawl of the bench's sites may take before it is killed.
const SPIDER_RS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// spider-rs's link-only crawl of the same site (`spider -u URL -r crawl -o` and
/// `crawl_args`: robots.txt obeyed as ours is, every link followed, each crawled URL
/// printed), when `CRAWL_BENCH_SPIDER` names its binary (`cargo install spider_cli`). Pages
/// are the lines it prints; CPU is the child's (cutime + cstime around the wait); peak RSS
/// is sampled.
fn run_spider_rs(
    url: &str,
    crawl_args: &[&str],
) -> std::result::Result<Option<Figures>, Box<dyn std::error::Error>> {
    let Ok(spider) = std::env::var("CRAWL_BENCH_SPIDER") else {
        println!(
            "spider-rs: skipped (set CRAWL_BENCH_SPIDER=/path/to/spider, from `cargo install spider_cli`)"
        );
        return Ok(None);
    };
    let cpu0 = children_cpu_seconds();
    let t0 = Instant::now();
    let mut child = Command::new(&spider)
        .args(["-u", url, "-r", "crawl"])
        .args(crawl_args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = child.id();
    let stdout = child.stdout.take().ok_or("no spider stdout")?;
    // Lines are counted on a thread of their own so this one can sample RSS and enforce
    // the timeout.
    let counter = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(|l| l.ok())
            .filter(|l| !l.trim().is_empty())
            .count() as u64
    });
    let mut peak = 0.0f64;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        peak = peak.max(child_peak_rss_mib(pid));
        if t0.elapsed() > SPIDER_RS_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("spider-rs did not finish within {SPIDER_RS_TIMEOUT:?}").into());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let wall = t0.elapsed().as_secs_f64();
    let cpu = children_cpu_seconds() - cpu0;
    let pages = counter
        .join()
        .map_err(|_| "spider-rs line counter panicked")?;
    if !status.success() || pages == 0 {
        println!("spider-rs: no figures ({status}, {pages} links printed)");
        return Ok(None);
    }
    Ok(Some(Figures {
        pages,
        items: 0,
        wall,
        pages_per_s: pages as f64 / wall,
        cpu_per_1000: cpu / pages as f64 * 1000.0,
        peak_rss_mib: peak,
    }))
}

/// Pages the `parse` mode reads from the lab: the index, a listing page and two book pages.
const PARSE_PAGES: &[&str] = &[
    "",
    "catalogue/page-3.html",
    "catalogue/book-17.html",
    "catalogue/book-4242.html",
];

/// `parse URL [ROUNDS]`: the engine's parse path alone (decode, bounded html5ever parse into
/// `scraper::Html`, the `<base>` search, the tree dropped) on a few of the lab's pages, ROUNDS
/// times each on one thread, in CPU microseconds per page: steadier than a crawl's figure
/// on a busy machine, to compare parse-path changes.
fn parse_path(url: &str, rounds: usize) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut pages = Vec::new();
    for path in PARSE_PAGES {
        let page_url = format!("{url}{path}");
        let (headers, body) = rt.block_on(async {
            let res = reqwest::get(&page_url).await?.error_for_status()?;
            let headers = res.headers().clone();
            Ok::<_, reqwest::Error>((headers, res.bytes().await?))
        })?;
        pages.push((Request::get(page_url.as_str())?, headers, body));
    }
    let cpu0 = cpu_seconds();
    for _ in 0..rounds {
        for (req, headers, body) in &pages {
            let page = Response::new(
                req.clone(),
                req.url.clone(),
                200,
                headers.clone(),
                body.clone(),
            );
            page.parse_html()
                .map_err(|f| format!("{}: {}", req.url, f.message))?;
            std::hint::black_box(page.base_url());
        }
    }
    let cpu = cpu_seconds() - cpu0;
    let n = (rounds * pages.len()).max(1);
    println!(
        "parse pages={n} cpu_us_per_page={:.2} bytes_per_page={}",
        cpu / n as f64 * 1e6,
        pages.iter().map(|p| p.2.len()).sum::<usize>() / pages.len().max(1)
    );
    Ok(())
}

/// Both profiles against the lab; with `compare`, also against nginx, Scrapy and spider-rs.
fn suite(compare: bool) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let books = 10_000;
    let concurrency = 64;
    for (profile, mode) in [("books", "open"), ("heavy", "heavy")] {
        let lab = LabChild::start(books, mode)?;
        let ours = run_child(profile, &lab.url, books, concurrency)?;
        println!("profile={profile} server=lab crawler=this {}", ours.line());
        if !compare {
            continue;
        }
        let site = tempfile::tempdir()?;
        mirror(&lab.url, site.path())?;
        drop(lab);
        let nginx = match Nginx::start(site.path()) {
            Ok(n) => n,
            Err(e) => {
                println!("profile={profile} server=nginx: skipped ({e})");
                continue;
            }
        };
        let on_nginx = run_child(profile, &nginx.url, books, concurrency)?;
        println!(
            "profile={profile} server=nginx crawler=this {}",
            on_nginx.line()
        );
        if let Some(scrapy) = run_scrapy(&nginx.url)? {
            println!(
                "profile={profile} server=nginx crawler=scrapy {}",
                scrapy.line()
            );
            println!(
                "profile={profile} server=nginx ratio this/scrapy: pages/s x{:.1}, CPU per page x{:.1} less, peak RSS x{:.1} less",
                on_nginx.pages_per_s / scrapy.pages_per_s.max(1e-9),
                scrapy.cpu_per_1000 / on_nginx.cpu_per_1000.max(1e-9),
                scrapy.peak_rss_mib / on_nginx.peak_rss_mib.max(1e-9),
            );
        }
        // spider_cli 2.53's concurrent crawl ends early on this site, at a different page
        // each run (49 to 4,960 of 11,001 pages in ten); `-s`, one page at a time, crawls it all.
        // Both run; a ratio is printed only for a crawl that reached the whole site.
        for (mode, args) in [
            ("concurrent", &["-o"][..]),
            ("sequential", &["-s", "-o"][..]),
        ] {
            let Some(spider) = run_spider_rs(&nginx.url, args)? else {
                break;
            };
            println!(
                "profile={profile} server=nginx crawler=spider-rs-{mode} {}",
                spider.line()
            );
            // Its count is of HTML pages; ours adds robots.txt and the sitemap request.
            if spider.pages * 100 < on_nginx.pages * 99 {
                println!(
                    "profile={profile} server=nginx spider-rs-{mode}: incomplete crawl ({} of {} pages), no ratio",
                    spider.pages, on_nginx.pages
                );
                continue;
            }
            println!(
                "profile={profile} server=nginx ratio this/spider-rs-{mode} (links only): pages/s x{:.2}, wall x{:.2} less, CPU per page x{:.2} less",
                on_nginx.pages_per_s / spider.pages_per_s.max(1e-9),
                spider.wall / on_nginx.wall.max(1e-9),
                spider.cpu_per_1000 / on_nginx.cpu_per_1000.max(1e-9),
            );
        }
    }
    Ok(())
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    // Before any thread starts, as in the `crawler` binary: mimalloc returns freed memory
    // after 10 ms instead of keeping it for a second.
    #[cfg(feature = "mimalloc")]
    crawler::tune_allocator();
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("--serve") {
        let books = args.get(1).and_then(|b| b.parse().ok()).unwrap_or(10_000);
        return serve(books, args.get(2).map_or("open", String::as_str));
    }
    match args.first().map(String::as_str) {
        None => return suite(false),
        Some("compare") => return suite(true),
        Some("warc") => {
            let books = args.get(1).and_then(|b| b.parse().ok()).unwrap_or(10_000);
            let concurrency = args.get(2).and_then(|c| c.parse().ok()).unwrap_or(64);
            let rounds = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(3);
            return warc_suite(books, concurrency, rounds);
        }
        Some("h2") => {
            let books = args.get(1).and_then(|b| b.parse().ok()).unwrap_or(10_000);
            let concurrency = args.get(2).and_then(|c| c.parse().ok()).unwrap_or(64);
            let rounds = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(3);
            return h2_suite(books, concurrency, rounds);
        }
        Some("parse") => {
            let url = args.get(1).ok_or("parse needs the lab's URL")?;
            let rounds = args.get(2).and_then(|r| r.parse().ok()).unwrap_or(20_000);
            return parse_path(url, rounds);
        }
        _ => {}
    }
    // `run PROFILE URL [BOOKS] [CONCURRENCY]`: one crawl of a server already running (how
    // the suite runs each crawl in a process of its own).
    let run_mode = args.first().map(String::as_str) == Some("run");
    let args: Vec<String> = if run_mode {
        // Same shape as the legacy form: BOOKS CONCURRENCY URL.
        let url = args.get(2).cloned().ok_or("run needs PROFILE URL")?;
        vec![
            args.get(3).cloned().unwrap_or_else(|| "10000".to_owned()),
            args.get(4).cloned().unwrap_or_else(|| "64".to_owned()),
            url,
        ]
    } else {
        args
    };
    // `chaos` crawls the lab's chaos site (2,000 books, a fifth of them faults: bombs,
    // endless and trickling bodies, resets, redirect loops) to measure memory under hostile
    // input.
    let chaos = args.first().map(String::as_str) == Some("chaos");
    let hosts_mode = args.first().map(String::as_str) == Some("hosts");
    let args: Vec<String> = if chaos || hosts_mode {
        args[1..].to_vec()
    } else {
        args
    };
    let books: usize = args
        .first()
        .and_then(|b| b.parse().ok())
        .unwrap_or(if chaos {
            2_000
        } else if hosts_mode {
            100_000
        } else {
            10_000
        });
    let concurrency: usize = args.get(1).and_then(|c| c.parse().ok()).unwrap_or(64);

    // A third argument points at a lab already running (to compare with another crawler on
    // the same server); otherwise a child process serves one.
    let mut child = None;
    let url = match args.get(2) {
        Some(url) => url.clone(),
        None => {
            let mut c = Command::new(std::env::current_exe()?)
                .args([
                    "--serve",
                    // Hosts mode needs one page, the index, on every name.
                    &(if hosts_mode { 100 } else { books }).to_string(),
                    if chaos { "chaos" } else { "open" },
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()?;
            let mut url = String::new();
            BufReader::new(c.stdout.take().ok_or("no child stdout")?).read_line(&mut url)?;
            child = Some(c);
            url.trim().to_owned()
        }
    };

    if hosts_mode {
        let hosts = books;
        let result = many_hosts(hosts, concurrency, &url);
        if let Some(mut c) = child {
            drop(c.stdin.take());
            let _ = c.wait();
        }
        return result;
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let mut crawl = Crawl::new(books::Books { start: url })
        .set("concurrency", concurrency.to_string())
        .set("concurrency_per_host", concurrency.to_string())
        .set("throttle", "fixed")
        .set("download_delay", "0s")
        .progress(false);
    // A feed and settings from the environment, to measure durability costs (a job
    // directory, feed_fsync) on the same crawl.
    if let Ok(feed) = std::env::var("CRAWL_BENCH_FEED") {
        crawl = crawl.feed(feed)?;
    }
    for pair in std::env::var("CRAWL_BENCH_SET")
        .unwrap_or_default()
        .split(';')
    {
        if let Some((k, v)) = pair.split_once('=') {
            crawl = crawl.set(k.trim(), v.trim());
        }
    }
    if chaos {
        crawl = crawl
            .set("download_timeout", "2s")
            .set("retry_times", "1")
            .set("retry_backoff_base", "100ms");
    }
    let stats = rt.block_on(crawl.run())?;
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    if let Some(mut c) = child {
        drop(c.stdin.take());
        let _ = c.wait();
    }

    let pages: u64 = stats.status.values().sum();
    println!("books={books} concurrency={concurrency}");
    println!(
        "pages={pages} items={} wall={wall:.2}s",
        stats.items_scraped
    );
    println!("pages/s={:.0}", pages as f64 / wall);
    println!(
        "cpu_s_per_1000_pages={:.3}",
        cpu / pages.max(1) as f64 * 1000.0
    );
    println!("peak_rss_mib={:.1}", peak_rss_mib());
    let figures = Figures {
        pages,
        items: stats.items_scraped,
        wall,
        pages_per_s: pages as f64 / wall,
        cpu_per_1000: cpu / pages.max(1) as f64 * 1000.0,
        peak_rss_mib: peak_rss_mib(),
    };
    if chaos {
        println!(
            "failed={:?} retries={} reconciles={}",
            stats.failed,
            stats.retries,
            stats.reconciles()
        );
        return Ok(());
    }
    if stats.items_scraped as usize != books {
        return Err(format!("expected {books} items, got {}", stats.items_scraped).into());
    }
    println!("{}", figures.line());
    Ok(())
}
