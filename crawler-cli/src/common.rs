//! Pieces shared by the two command lines: the project runner ([`crate::Runner`]) and the
//! standalone `crawler` binary: settings options, the metrics endpoint's hook, exit
//! statuses. Logging, progress and the crawl itself are the library's, the same for a
//! program that runs a [`Crawl`] itself ([`crawler::init_logging_with`],
//! [`crawler::progress`], [`Crawl::run`]); the standalone verbs are in `tools`, the metrics
//! endpoint in `metrics`.

use std::path::PathBuf;
use std::process::ExitCode;

use crawler::core::{Settings, Spider, Stats};
use crawler::settings::{SettingsLayers, find_settings_file};
use crawler::{Crawl, Error};

/// The options every verb that reads settings accepts.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct SettingsArgs {
    /// Settings file (default: crawler.toml beside the project's Cargo.toml, or
    /// $CRAWLER_SETTINGS).
    #[arg(long, value_name = "FILE", global = true)]
    pub settings: Option<PathBuf>,
    /// Override a setting, e.g. `-s download_delay=500ms` (repeatable; highest precedence).
    #[arg(short = 's', long = "set", value_name = "KEY=VALUE", global = true)]
    pub set: Vec<String>,
    /// Log format: text or json (same as `-s log_format=...`).
    #[arg(long, value_name = "FORMAT", global = true)]
    pub log_format: Option<String>,
    /// Log level: error, warn, info, debug, trace, or a RUST_LOG-style filter (same as
    /// `-s log_level=...`).
    #[arg(short = 'L', long = "loglevel", value_name = "LEVEL", global = true)]
    pub log_level: Option<String>,
    /// Write log lines to FILE (appended to, without colour) instead of stderr (same as
    /// `-s log_file=...`).
    #[arg(long, value_name = "FILE", global = true)]
    pub log_file: Option<PathBuf>,
}

impl SettingsArgs {
    /// The settings layers these options name: the settings file (explicit, from
    /// `CRAWLER_SETTINGS`, or found beside the project's Cargo.toml), the `CRAWLER_*`
    /// environment, then `-L`, `--log-format`, `--log-file` and `-s` in that order.
    pub fn layers(&self) -> Result<SettingsLayers, Error> {
        let mut layers = SettingsLayers::new();
        let file = self
            .settings
            .clone()
            .or_else(|| std::env::var_os("CRAWLER_SETTINGS").map(PathBuf::from))
            .or_else(|| {
                std::env::current_dir()
                    .ok()
                    .and_then(|d| find_settings_file(&d))
            });
        if let Some(file) = file {
            layers.file(&file)?;
        }
        layers.env()?;
        // Before logging is set up (its settings come from these layers): straight to stderr.
        for warning in layers.warnings() {
            eprintln!("warning: {warning}");
        }
        if let Some(level) = &self.log_level {
            layers.cli("log_level", level);
        }
        if let Some(format) = &self.log_format {
            layers.cli("log_format", format);
        }
        if let Some(file) = &self.log_file {
            layers.cli("log_file", &file.to_string_lossy());
        }
        for pair in &self.set {
            layers.cli_pair(pair)?;
        }
        Ok(layers)
    }
}

/// Set `crawl` to serve the metrics endpoint while it runs, when `metrics_addr` is set (the
/// socket is bound here, so a bad address fails before the crawl starts).
#[cfg(feature = "metrics")]
pub(crate) async fn with_metrics<S: Spider>(
    crawl: Crawl<S>,
    settings: &Settings,
) -> Result<Crawl<S>, Error> {
    Ok(match settings.metrics_socket_addr() {
        Some(addr) => {
            let listener = crate::metrics::bind(addr).await?;
            crawl.watch_progress(move |rx| crate::metrics::serve_on(listener, rx))
        }
        None => crawl,
    })
}

/// Without the `metrics` feature, `metrics_addr` is refused rather than ignored.
#[cfg(not(feature = "metrics"))]
pub(crate) async fn with_metrics<S: Spider>(
    crawl: Crawl<S>,
    settings: &Settings,
) -> Result<Crawl<S>, Error> {
    match settings.metrics_socket_addr() {
        Some(addr) => Err(Error::new(
            crawler::ErrorKind::Settings,
            format!(
                "metrics_addr is set ({addr}) but this program was built without crawler-cli's \
                 `metrics` feature"
            ),
        )),
        None => Ok(crawl),
    }
}

/// Print a crawl's final stats: to stdout, or to stderr when a feed writes its items there
/// (`-o -`), so stdout holds nothing but items.
pub(crate) fn print_stats(stats: &Stats, stdout_taken: bool) {
    if stdout_taken {
        eprintln!("{stats}");
    } else {
        println!("{stats}");
    }
}

/// Exit status for usage and settings errors.
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status for a failed crawl or command.
pub(crate) const EXIT_FAILED: u8 = 1;

/// Why a verb failed, deciding the exit status.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Bad arguments or settings: exit 2.
    Usage(Error),
    /// The work itself failed: exit 1.
    Failed(Error),
}

impl Failure {
    pub(crate) fn exit(self) -> ExitCode {
        let (code, e) = match self {
            Self::Usage(e) => (EXIT_USAGE, e),
            Self::Failed(e) => (EXIT_FAILED, e),
        };
        eprintln!("error: {}", crawler::core::redact::scrub(&e.to_string()));
        ExitCode::from(code)
    }
}

pub(crate) fn usage(e: impl Into<Error>) -> Failure {
    Failure::Usage(e.into())
}

pub(crate) fn failed(e: impl Into<Error>) -> Failure {
    Failure::Failed(e.into())
}

/// Parse clap arguments, printing help/version (exit 0) or the usage error (exit 2).
pub(crate) fn parse<P: clap::Parser>(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Result<P, ExitCode> {
    P::try_parse_from(args).map_err(|e| {
        let _ = e.print();
        ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(EXIT_USAGE))
    })
}
