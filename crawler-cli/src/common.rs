//! Pieces shared by the two command lines: the project runner ([`crate::Runner`]) and the
//! standalone `crawler` binary. Settings options, logging and the crawl-and-watch loop live
//! here; the standalone verbs are in `tools`, the metrics endpoint in `metrics`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use crawler::core::{LogFormat, Settings, SettingsLayers, Stats, find_settings_file};
use tracing_subscriber::EnvFilter;

use crawler::{Error, HttpEngine};

use crate::progress;

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

/// Send `tracing` output to stderr, or to `log_file` (appended to), at `settings.log_level`
/// (`RUST_LOG` wins when set and the level was left at its default), as text or JSON. On
/// stderr, lines are printed above any live progress display, in colour only when stderr is
/// a terminal and `NO_COLOR` is not set; a log file never gets colour codes. An unwritable
/// log file is an error.
pub fn init_logging(settings: &Settings) -> Result<(), Error> {
    crawler::core::redact::register_secrets(settings);
    let default_level = settings.log_level == Settings::default().log_level;
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if default_level && !env.trim().is_empty() => EnvFilter::try_new(env),
        _ => EnvFilter::try_new(level_filter(&settings.log_level)),
    }
    .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let file = settings
        .log_file
        .as_deref()
        .map(str::trim)
        .filter(|f| !f.is_empty());
    let installed = match (file, settings.log_format) {
        (Some(path), format) => {
            let writer = crate::log_file::LogFile::open(path)?;
            let builder = builder.with_ansi(false).with_writer(writer);
            match format {
                LogFormat::Json => builder.json().try_init(),
                LogFormat::Text => builder.try_init(),
            }
        }
        (None, format) => {
            let builder = builder
                .with_ansi(crawler::log_colour(std::io::stderr().is_terminal()))
                .with_writer(progress::LogWriter::default);
            match format {
                LogFormat::Json => builder.json().try_init(),
                LogFormat::Text => builder.try_init(),
            }
        }
    };
    if installed.is_err() {
        // The program set up logging itself (`crawler::init_logging()` in its `main`)
        // before the settings were read: the level they give is applied to that.
        crawler::set_log_level(&settings.log_level);
    }
    Ok(())
}

/// A `log_level` as an `EnvFilter` (see [`crawler::log_level_filter`]).
fn level_filter(level: &str) -> String {
    crawler::log_level_filter(level)
}

/// Run a built engine with Ctrl-C handling, the progress display (unless `quiet`) and the
/// metrics endpoint (when `metrics_addr` is set); return the final stats.
pub async fn run_engine<S: crawler::core::Spider>(
    engine: HttpEngine<S>,
    settings: &Settings,
    show_progress: bool,
) -> Result<Stats, Error> {
    crawler::warn_default_user_agent(settings);
    let engine = engine.handle_ctrl_c(true);
    let rx = engine.progress();
    let display = show_progress.then(|| progress::spawn(rx.clone(), settings.progress_interval));
    let metrics = serve_metrics(settings, &rx).await?;
    let stats = crawler::run_engine(engine).await;
    if let Some(d) = display {
        let _ = d.await;
    }
    if let Some(m) = metrics {
        m.abort();
    }
    stats
}

/// The metrics endpoint, when `metrics_addr` is set.
#[cfg(feature = "metrics")]
async fn serve_metrics(
    settings: &Settings,
    rx: &tokio::sync::watch::Receiver<crawler::core::Progress>,
) -> Result<Option<tokio::task::JoinHandle<()>>, Error> {
    match settings.metrics_socket_addr() {
        Some(addr) => Ok(Some(crate::metrics::serve(addr, rx.clone()).await?)),
        None => Ok(None),
    }
}

/// Without the `metrics` feature, `metrics_addr` is refused rather than ignored.
#[cfg(not(feature = "metrics"))]
async fn serve_metrics(
    settings: &Settings,
    _rx: &tokio::sync::watch::Receiver<crawler::core::Progress>,
) -> Result<Option<tokio::task::JoinHandle<()>>, Error> {
    match settings.metrics_socket_addr() {
        Some(addr) => Err(Error::new(
            crawler::ErrorKind::Settings,
            format!(
                "metrics_addr is set ({addr}) but this program was built without crawler-cli's \
                 `metrics` feature"
            ),
        )),
        None => Ok(None),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_level_is_for_the_framework_and_the_program_not_its_dependencies() {
        let f = level_filter("DEBUG");
        assert!(f.starts_with("warn,"), "{f}");
        for c in [
            "crawler_core=debug",
            "crawler_http=debug",
            "crawler_sched=debug",
        ] {
            assert!(f.contains(c), "{f}");
        }
        assert!(!f.contains("html5ever"), "{f}");
        assert!(EnvFilter::try_new(&f).is_ok(), "{f}");
        assert!(level_filter("error").starts_with("error,"));
        // A filter of its own is taken as written.
        assert_eq!(level_filter("info,sled=debug"), "info,sled=debug");
    }
}
