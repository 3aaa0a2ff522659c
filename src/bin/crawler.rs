//! The `crawler` command: scaffold projects and spiders, check a URL's robots.txt or sitemap,
//! fetch one page politely, serve the lab, and benchmark. Run `crawler --help`.

// With the `mimalloc` feature the binary allocates with mimalloc (less CPU in malloc/free,
// more resident memory; measured in BENCHMARKS.md, "Speed (issue 16)").
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    crawler::cli::tools::run_standalone().await
}
