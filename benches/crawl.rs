//! Crawl benchmark: the lab's book site crawled with politeness off (our own loopback
//! server), reporting pages/s, CPU seconds per 1,000 pages and peak RSS of the crawler.
//!
//! ```text
//! cargo bench --bench crawl -- [BOOKS] [CONCURRENCY] [URL]   # defaults: 10000 books, 64
//! cargo bench --bench crawl -- chaos [BOOKS] [CONCURRENCY]   # the chaos site: peak RSS
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
    let args: Vec<String> = if chaos { args[1..].to_vec() } else { args };
    let books: usize = args
        .first()
        .and_then(|b| b.parse().ok())
        .unwrap_or(if chaos { 2_000 } else { 10_000 });
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
                    &books.to_string(),
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
