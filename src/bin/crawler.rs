//! The `crawler` command: scaffold projects and spiders, check a URL's robots.txt or sitemap,
//! fetch one page politely, serve the lab, and benchmark. Run `crawler --help`.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    crawler::cli::tools::run_standalone().await
}
