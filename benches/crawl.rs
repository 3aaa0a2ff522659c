//! Crawl benchmark: the lab's book site crawled with politeness off (our own loopback
//! server), reporting pages/s, CPU seconds per 1,000 pages and peak RSS of the crawler.
//!
//! ```text
//! cargo bench --bench crawl -- [BOOKS] [CONCURRENCY] [URL]   # defaults: 10000 books, 64
//! cargo bench --bench crawl -- chaos [BOOKS] [CONCURRENCY]   # the chaos site: peak RSS
//! cargo bench --bench crawl -- hosts [HOSTS] [CONCURRENCY]   # one page on each of HOSTS
//!                                                            # host names: RSS over time
//! CRAWL_BENCH_FEED=/tmp/b.jsonl CRAWL_BENCH_SET="job_dir=/tmp/job;feed_fsync=off" \
//!     cargo bench --bench crawl                             # a feed, more settings
//! ```
//!
//! The lab runs in a child process (this same binary with `--serve`), so the CPU and memory
//! figures are the crawler's alone.

#[allow(dead_code)]
#[path = "../examples/books.rs"]
mod books;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

use crawler::prelude::*;

/// utime + stime of this process in seconds, from /proc (Linux).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Current resident set size in MiB (VmRSS).
fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// One page on each of many host names (`h1.hosts.test` ...). No DNS is involved: the
/// lab is the crawl's HTTP proxy, so every name reaches it (it serves by path).
struct ManyHosts {
    hosts: usize,
}

impl Spider for ManyHosts {
    type Item = ();

    fn name(&self) -> &str {
        "many-hosts"
    }

    fn start_requests(&self) -> Result<Vec<Request>> {
        (0..self.hosts)
            .map(|i| Request::get(&format!("http://h{i}.hosts.test/")))
            .collect()
    }

    async fn parse(&self, _page: Response, _out: &mut Output<()>) -> Result<()> {
        Ok(())
    }
}

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
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn serve(books: usize, chaos: bool) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut lab = crawler::lab::Lab::builder().books(books);
        if chaos {
            lab = lab.scenario(crawler::lab::Scenario::chaos());
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

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("--serve") {
        let books = args.get(1).and_then(|b| b.parse().ok()).unwrap_or(10_000);
        return serve(books, args.get(2).map(String::as_str) == Some("chaos"));
    }
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
    Ok(())
}
