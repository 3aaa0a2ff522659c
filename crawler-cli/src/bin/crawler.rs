//! The `crawler` command: scaffold projects and spiders, check a URL's robots.txt or sitemap,
//! fetch one page politely, serve the lab, and benchmark. Run `crawler --help`.

// With the `mimalloc` feature (on by default) the binary allocates with mimalloc: less CPU
// in malloc/free at about the same peak RSS (BENCHMARKS.md, "Crawl speed", "The allocator and
// the build").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: crawler::MiMalloc = crawler::MiMalloc;

fn main() -> std::process::ExitCode {
    // Before the runtime's threads start: mimalloc returns freed memory after 10 ms, not 1 s.
    #[cfg(feature = "mimalloc")]
    crawler::tune_allocator();
    run()
}

#[tokio::main]
async fn run() -> std::process::ExitCode {
    crawler_cli::run_standalone().await
}
