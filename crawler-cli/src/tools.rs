//! The standalone `crawler` binary: `new`, `genspider`, `fetch`, `shell`, `robots`,
//! `sitemap`, `settings`, `report`, `lab` and `bench`.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use crawler::core::{Fetched, Request, Settings, parse_http_url, settings_markdown};
use crawler::http::{HttpDownloader, RobotsStatus, fetch_robots, robots_client};

use crate::common::{self, EXIT_FAILED, Failure, SettingsArgs, failed, usage};
use crawler::{Error, ErrorKind};

#[derive(clap::Parser, Debug)]
#[command(
    name = "crawler",
    about = "A polite, Scrapy-style crawling framework: project tools and one-off checks",
    version
)]
struct Cli {
    #[command(flatten)]
    common: SettingsArgs,
    #[command(subcommand)]
    verb: Verb,
}

#[derive(clap::Subcommand, Debug)]
enum Verb {
    /// Create a ready-to-run project: Cargo.toml, crawler.toml, src/main.rs, an example spider.
    New {
        /// The project (and directory) name.
        name: String,
        /// Path of the crawler framework to depend on (default: where this binary was built
        /// from).
        #[arg(long, value_name = "DIR")]
        path: Option<PathBuf>,
    },
    /// Add a spider to the current project's src/spiders/.
    Genspider {
        /// The spider's name (a Rust identifier, e.g. `quotes`).
        name: String,
        /// Its start URL.
        url: String,
    },
    /// Fetch one URL politely (robots.txt checked) and print status, headers and body.
    Fetch {
        /// The URL.
        url: String,
        /// Print the text of what this CSS selector selects instead of the body (`::text`,
        /// `::attr(NAME)` as in Scrapy; an XPath such as `//h1/text()` is read as XPath).
        #[arg(long, value_name = "SELECTOR")]
        css: Option<String>,
        /// With --css, print each match's outer HTML instead of its text.
        #[arg(long, requires = "css")]
        html: bool,
        /// Do not print the headers.
        #[arg(long)]
        no_headers: bool,
    },
    /// Fetch one URL politely, then explore the page with CSS selectors (Scrapy's `shell`):
    /// a prompt on a terminal, commands from stdin otherwise, or `--css` and exit.
    Shell(crate::shell::ShellArgs),
    /// Whether robots.txt allows a URL, the matching rule, Crawl-delay and sitemaps.
    Robots {
        /// The URL to check.
        url: String,
        /// The User-Agent (or product token) to check for (default: the user_agent setting).
        #[arg(long, value_name = "AGENT")]
        agent: Option<String>,
    },
    /// Stream a sitemap's entries (following indexes), one `URL<TAB>lastmod` a line. Given a
    /// site root or robots.txt URL, walks the sitemaps robots.txt lists. Runs as a crawl:
    /// robots.txt, the host's pacing, retries and the settings apply.
    Sitemap {
        /// A sitemap, robots.txt or site URL.
        url: String,
    },
    /// Print every setting's effective value and where it came from.
    Settings {
        /// Print the settings reference (docs/settings.md) instead.
        #[arg(long)]
        markdown: bool,
    },
    /// Draw a job's politeness record (per host: rate against what the server allowed,
    /// holds, refusals, retries, latency, counts by status) as one self-contained HTML file.
    Report {
        /// The job directory (or its politeness.jsonl).
        job: PathBuf,
        /// Where to write the page (default: politeness-report.html in the job directory).
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Serve the local test site (crawler-lab) until Ctrl-C.
    #[cfg(feature = "lab")]
    Lab(crawler_lab::cli::LabArgs),
    /// Crawl an in-process lab as fast as a host you own allows, and print pages/s.
    #[cfg(feature = "lab")]
    Bench {
        /// Books in the lab's catalogue.
        #[arg(long, default_value_t = 1000, value_name = "N")]
        books: usize,
        /// Requests in flight to the lab.
        #[arg(long, default_value_t = 16, value_name = "N")]
        concurrency: usize,
    },
}

/// Run the standalone binary with the process's arguments.
pub async fn run_standalone() -> ExitCode {
    run_standalone_args(std::env::args_os()).await
}

/// Run the standalone binary with these arguments (the first is the program name).
pub async fn run_standalone_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let cli: Cli = match common::parse(args.into_iter().map(Into::into)) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    match run(cli).await {
        Ok(code) => code,
        Err(f) => f.exit(),
    }
}

async fn run(cli: Cli) -> Result<ExitCode, Failure> {
    // Scaffolding and the lab need no settings; a broken crawler.toml must not stop `new`.
    match cli.verb {
        Verb::New { name, path } => {
            crate::scaffold::new_project(&name, path).map_err(usage)?;
            return Ok(ExitCode::SUCCESS);
        }
        Verb::Genspider { name, url } => {
            crate::scaffold::genspider(&name, &url).map_err(usage)?;
            return Ok(ExitCode::SUCCESS);
        }
        #[cfg(feature = "lab")]
        Verb::Lab(args) => {
            crawler_lab::cli::run(args)
                .await
                .map_err(|e| failed(Error::new(ErrorKind::Other, e.to_string())))?;
            return Ok(ExitCode::SUCCESS);
        }
        Verb::Settings { markdown: true } => {
            print!("{}", settings_markdown());
            return Ok(ExitCode::SUCCESS);
        }
        Verb::Report { job, output } => return report(&job, output),
        _ => {}
    }
    let layers = cli.common.layers().map_err(usage)?;
    let resolved = layers.resolve(None).map_err(usage)?;
    let settings = resolved.settings.clone();
    crawler::init_logging_with(&settings).map_err(usage)?;
    match cli.verb {
        Verb::Settings { .. } => {
            if let Some(path) = layers.file_path() {
                println!("# settings file: {}", path.display());
            }
            print!("{}", resolved.table());
            Ok(ExitCode::SUCCESS)
        }
        Verb::Fetch {
            url,
            css,
            html,
            no_headers,
        } => fetch(&settings, &url, css.as_deref(), html, no_headers).await,
        Verb::Shell(args) => crate::shell::run(&settings, &args)
            .await
            .map(|()| ExitCode::SUCCESS),
        Verb::Robots { url, agent } => robots(&settings, &url, agent.as_deref()).await,
        Verb::Sitemap { url } => crate::sitemap::sitemap(&settings, &url).await,
        #[cfg(feature = "lab")]
        Verb::Bench { books, concurrency } => crate::bench::bench(&layers, books, concurrency)
            .await
            .map(|()| ExitCode::SUCCESS),
        Verb::New { .. } | Verb::Genspider { .. } | Verb::Report { .. } => Ok(ExitCode::SUCCESS),
        #[cfg(feature = "lab")]
        Verb::Lab(_) => Ok(ExitCode::SUCCESS),
    }
}

/// `report JOB [-o FILE]`: needs no settings, so a job can be drawn anywhere.
fn report(job: &std::path::Path, output: Option<PathBuf>) -> Result<ExitCode, Failure> {
    let record = crate::report::record_path(job).map_err(usage)?;
    let out = output.unwrap_or_else(|| {
        record
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .join("politeness-report.html")
    });
    let summary = crate::report::write_report(&record, &out).map_err(failed)?;
    if summary.bad_lines > 0 {
        eprintln!(
            "warning: {} unreadable lines of {} skipped",
            summary.bad_lines,
            record.display()
        );
    }
    eprintln!(
        "wrote {} ({} host{}, {} charted)",
        out.display(),
        summary.hosts,
        if summary.hosts == 1 { "" } else { "s" },
        summary.charted
    );
    Ok(ExitCode::SUCCESS)
}

fn out_err(e: std::io::Error) -> Failure {
    failed(Error::new(
        ErrorKind::Other,
        format!("cannot write to stdout: {e}"),
    ))
}

async fn fetch(
    settings: &Settings,
    url: &str,
    css: Option<&str>,
    html: bool,
    no_headers: bool,
) -> Result<ExitCode, Failure> {
    let req = Request::get(url).map_err(usage)?;
    crawler::warn_unchecked_proxy(settings);
    let downloader = HttpDownloader::new(settings).map_err(failed)?;
    let page = match downloader.fetch_once(&req).await.outcome {
        Fetched::Response(page) => page,
        Fetched::Requeue(why) => {
            return Err(failed(Error::new(
                ErrorKind::Other,
                format!("{url}: {why}"),
            )));
        }
        Fetched::Disallowed => {
            return Err(failed(Error::new(
                ErrorKind::Other,
                format!(
                    "{url} is disallowed by robots.txt for {} (see `crawler robots {url}`)",
                    settings.user_agent
                ),
            )));
        }
        Fetched::Failed(f) => {
            return Err(failed(Error::new(
                ErrorKind::Other,
                format!("{url}: {}: {}", f.kind, f.message),
            )));
        }
    };
    let mut out = std::io::stdout().lock();
    if !no_headers {
        writeln!(out, "HTTP {} {}", page.status(), page.url()).map_err(out_err)?;
        for (name, value) in page.headers() {
            writeln!(out, "{name}: {}", String::from_utf8_lossy(value.as_bytes()))
                .map_err(out_err)?;
        }
        writeln!(out).map_err(out_err)?;
    }
    match css {
        Some(css) => {
            let selection = if crawler::core::looks_like_xpath(css) {
                page.try_xpath(css)
            } else {
                page.try_select(css)
            };
            let found: Vec<String> = selection
                .map_err(usage)?
                .into_iter()
                .map(|e| if html { e.html() } else { e.text() })
                .collect();
            for text in &found {
                writeln!(out, "{text}").map_err(out_err)?;
            }
            if found.is_empty() {
                eprintln!("no element matches '{css}'");
                return Ok(ExitCode::from(EXIT_FAILED));
            }
        }
        None => match printable_body(page.body()) {
            Body::Gzip(text) => {
                eprintln!(
                    "(a gzip file, {} bytes: shown decompressed)",
                    page.body().len()
                );
                out.write_all(text.as_bytes()).map_err(out_err)?;
                writeln!(out).map_err(out_err)?;
            }
            Body::Page => {
                out.write_all(page.text().as_bytes()).map_err(out_err)?;
                writeln!(out).map_err(out_err)?;
            }
            Body::Binary(why) => eprintln!(
                "binary body of {} bytes ({why}) not printed to the terminal; save it with \
                 `crawler fetch URL > FILE` or a tool such as curl",
                page.body().len()
            ),
        },
    }
    Ok(if (200..400).contains(&page.status()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_FAILED)
    })
}

/// What `fetch` prints of a body (and what `shell` selects in).
pub(crate) enum Body {
    /// A page: its text, decoded by its charset.
    Page,
    /// A gzip file (a `.xml.gz` sitemap, say) whose content is text: that text.
    Gzip(String),
    /// Bytes a terminal should not get.
    Binary(&'static str),
}

/// The most bytes a gzip body is inflated to for printing: a hostile file cannot take the
/// memory (the sitemap reader caps what it inflates the same way).
const MAX_INFLATED: u64 = 50 * 1024 * 1024;

/// How to print `body` on a terminal: gzip files decompressed (bounded), binary files not
/// at all (a NUL byte in the first 8 KiB: what `git` and `grep` take for binary).
pub(crate) fn printable_body(body: &[u8]) -> Body {
    use std::io::Read;
    let binary = |b: &[u8]| b.iter().take(8 * 1024).any(|&c| c == 0);
    if body.starts_with(&[0x1f, 0x8b]) {
        let mut text = Vec::new();
        let inflated = flate2::read::GzDecoder::new(body)
            .take(MAX_INFLATED)
            .read_to_end(&mut text);
        return match inflated {
            Ok(_) if binary(&text) => Body::Binary("gzip of binary data"),
            Ok(_) => Body::Gzip(String::from_utf8_lossy(&text).into_owned()),
            Err(_) => Body::Binary("a damaged gzip file"),
        };
    }
    if binary(body) {
        return Body::Binary("it holds NUL bytes");
    }
    Body::Page
}

async fn robots(settings: &Settings, url: &str, agent: Option<&str>) -> Result<ExitCode, Failure> {
    let url = parse_http_url(url).map_err(usage)?;
    let agent = agent.unwrap_or(&settings.user_agent);
    let client = robots_client(&settings.user_agent, settings.connect_timeout).map_err(failed)?;
    let report = fetch_robots(&client, &url, agent).await;
    let status = match &report.status {
        RobotsStatus::Fetched { status } => format!("fetched (HTTP {status})"),
        RobotsStatus::Unavailable { status, reason } => format!(
            "unavailable{}: {reason} (everything allowed)",
            status.map(|s| format!(" (HTTP {s})")).unwrap_or_default()
        ),
        RobotsStatus::Unreachable { status, reason } => format!(
            "unreachable{}: {reason} (everything disallowed for now)",
            status.map(|s| format!(" (HTTP {s})")).unwrap_or_default()
        ),
    };
    println!("robots.txt:  {} {status}", report.robots_url);
    println!("agent:       {}", report.agent);
    println!("url:         {url}");
    println!("allowed:     {}", if report.allowed { "yes" } else { "no" });
    println!(
        "group:       {}",
        report.group.as_deref().unwrap_or("(none)")
    );
    println!(
        "rule:        {}",
        report.matched_rule.as_deref().unwrap_or("(none)")
    );
    println!(
        "crawl-delay: {}",
        report.crawl_delay.map_or_else(
            || "(none)".to_owned(),
            |d| humantime::format_duration(d).to_string()
        )
    );
    if report.sitemaps.is_empty() {
        println!("sitemaps:    (none)");
    }
    for s in &report.sitemaps {
        println!("sitemap:     {s}");
    }
    if report.truncated {
        println!("note:        the file was larger than 500 KiB; the rest was ignored");
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_bodies_are_shown_inflated_and_binary_ones_not_at_all() {
        use std::io::Write as _;
        let xml = "<urlset><url><loc>http://127.0.0.1/a</loc></url></urlset>";
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(xml.as_bytes()).unwrap_or_default();
        let gz = gz.finish().unwrap_or_default();
        assert!(matches!(printable_body(&gz), Body::Gzip(t) if t == xml));
        assert!(matches!(
            printable_body(&gz[..gz.len() / 2]),
            Body::Binary(_)
        ));
        assert!(matches!(
            printable_body(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR"),
            Body::Binary(_)
        ));
        assert!(matches!(
            printable_body(b"<html>caf\xe9</html>"),
            Body::Page
        ));
    }
}
