//! The `crawler` command: scaffold projects and spiders, check a URL's robots.txt or sitemap,
//! fetch one page politely, serve the lab, and benchmark. Run `crawler --help`.

// With the `mimalloc` feature (on by default) the binary allocates with mimalloc: less CPU
// in malloc/free at about the same peak RSS (BENCHMARKS.md, "Speed (issue 16)").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: crawler::MiMalloc = crawler::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    crawler::cli::tools::run_standalone().await
}
