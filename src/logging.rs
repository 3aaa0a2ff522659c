//! Logging: the one place a program's `tracing` output is set up, for the library's
//! [`Crawl`](crate::Crawl) and the command lines alike.
//!
//! [`init_logging`] is for a program that sets up logging before it reads any settings (the
//! top of an example's `main`); [`init_logging_with`] takes the settings' `log_level`,
//! `log_format` and `log_file` (the `crawler` binary and a project's runner). Either way
//! every line passes the one redaction rule ([`crate::core::redact`]) and, on stderr, is
//! printed above the live progress display ([`crate::progress`]) rather than through it;
//! the filter can be changed afterwards with [`set_log_level`].

use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, OnceLock};

use crawler_core::{LogFormat, Settings};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

use crate::{Error, ErrorKind, progress};

/// Send a `tracing` subscriber to stderr with `RUST_LOG`-style filtering (default `info`),
/// secrets redacted, colour only on a terminal and without `NO_COLOR` (see [`log_colour`]).
///
/// The filter can be changed afterwards: a crawl whose settings give a `log_level` other
/// than the default applies it when it runs (see [`set_log_level`]), since a program sets up
/// logging before its settings are read.
pub fn init_logging() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    install(filter, LogFormat::Text, Sink::Stderr);
}

/// Send `tracing` output to stderr, or to `log_file` (appended to), at `settings.log_level`
/// (`RUST_LOG` wins when set and the level was left at its default), as text or JSON, after
/// checking the settings ([`Settings::validate`], which registers their secrets for
/// redaction, so no line shows them). On stderr, lines are printed above
/// any live progress display, in colour only when stderr is a terminal and `NO_COLOR` is not
/// set; a log file never gets colour codes. An unwritable log file, or settings that do not
/// validate, is an error.
///
/// When the program already set up logging ([`init_logging`] at the top of its `main`), the
/// level the settings give is applied to that instead.
pub fn init_logging_with(settings: &Settings) -> Result<(), Error> {
    settings.validate()?;
    let default_level = settings.log_level == Settings::default().log_level;
    let filter = match std::env::var("RUST_LOG") {
        Ok(env) if default_level && !env.trim().is_empty() => EnvFilter::try_new(env),
        _ => EnvFilter::try_new(log_level_filter(&settings.log_level)),
    }
    .unwrap_or_else(|_| EnvFilter::new("info"));
    let file = settings
        .log_file
        .as_deref()
        .map(str::trim)
        .filter(|f| !f.is_empty());
    let sink = match file {
        Some(path) => Sink::File(LogFile::open(path)?),
        None => Sink::Stderr,
    };
    if !install(filter, settings.log_format, sink) {
        set_log_level(&settings.log_level);
    }
    Ok(())
}

/// Install the process's subscriber: `filter` (reloadable, see [`set_log_level`]) over
/// lines in `format` to `sink`. Whether it was installed (`false`: the program already had
/// one).
fn install(filter: EnvFilter, format: LogFormat, sink: Sink) -> bool {
    let ansi = matches!(sink, Sink::Stderr) && log_colour(std::io::stderr().is_terminal());
    let (filter, handle) = reload::Layer::new(filter);
    let lines = tracing_subscriber::fmt::layer;
    let registry = tracing_subscriber::registry().with(filter);
    let installed = match format {
        LogFormat::Text => registry
            .with(lines().with_ansi(ansi).with_writer(sink))
            .try_init(),
        LogFormat::Json => registry
            .with(lines().json().with_ansi(ansi).with_writer(sink))
            .try_init(),
    }
    .is_ok();
    if installed {
        let _ = LOG_FILTER.set(handle);
    }
    installed
}

/// The filter of the subscriber [`init_logging`] or [`init_logging_with`] installed, to
/// change it once settings are known.
static LOG_FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Filter the logging [`init_logging`] set up by `level` (a `log_level` setting: see
/// [`log_level_filter`]). Whether it could: `false` when logging was set up some other way,
/// or `level` is not a valid filter.
pub fn set_log_level(level: &str) -> bool {
    let Some(handle) = LOG_FILTER.get() else {
        return false;
    };
    match EnvFilter::try_new(log_level_filter(level)) {
        Ok(filter) => handle.reload(filter).is_ok(),
        Err(_) => false,
    }
}

/// The crates whose logs a plain level (`debug`) is about: the framework's.
const OUR_CRATES: &[&str] = &[
    "crawler",
    "crawler_core",
    "crawler_http",
    "crawler_sched",
    "crawler_store",
    "crawler_cli",
    "crawler_lab",
];

/// A `log_level` setting as a `RUST_LOG`-style filter: a plain level (`debug`) applies to
/// the framework and the running program's own crate, with every other crate at `warn` (at
/// `debug`, the HTML parser and the CSS engine alone write hundreds of lines a page);
/// anything else (`info,sled=debug`) is a filter of its own and is taken as written.
pub fn log_level_filter(level: &str) -> String {
    let plain = matches!(
        level.trim().to_ascii_lowercase().as_str(),
        "error" | "warn" | "info" | "debug" | "trace"
    );
    if !plain {
        return level.to_owned();
    }
    let level = level.trim().to_ascii_lowercase();
    let own = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().replace('-', "_")));
    let others = if level == "error" { "error" } else { "warn" };
    let mut directives = vec![others.to_owned()];
    directives.extend(OUR_CRATES.iter().map(|c| format!("{c}={level}")));
    directives.extend(own.map(|c| format!("{c}={level}")));
    directives.join(",")
}

/// Whether log lines to a destination get colour codes: only when it is a terminal
/// (`is_terminal`) and `NO_COLOR` is not set to a non-empty value (<https://no-color.org>).
pub fn log_colour(is_terminal: bool) -> bool {
    colour_wanted(is_terminal, std::env::var_os("NO_COLOR").as_deref())
}

fn colour_wanted(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Where log lines go: stderr (above the live progress display) or a log file.
enum Sink {
    Stderr,
    File(LogFile),
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Sink {
    type Writer = SinkWriter;

    fn make_writer(&'a self) -> Self::Writer {
        match self {
            Self::Stderr => SinkWriter::Stderr(progress::RedactingWriter),
            Self::File(file) => SinkWriter::File(file.clone()),
        }
    }
}

/// One log line's writer, to the [`Sink`].
enum SinkWriter {
    Stderr(progress::RedactingWriter),
    File(LogFile),
}

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Stderr(w) => w.write(buf),
            Self::File(w) => w.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Stderr(w) => w.flush(),
            Self::File(w) => w.flush(),
        }
    }
}

/// An open log file, shared by every thread that logs (one write per log line), redacted
/// like every log line and never coloured.
#[derive(Clone, Debug)]
struct LogFile {
    file: Arc<Mutex<File>>,
}

impl LogFile {
    /// Open `path` for appending (creating it), so the crawl fails before it starts when the
    /// file cannot be written.
    fn open(path: &str) -> Result<Self, Error> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                Error::new(
                    ErrorKind::Settings,
                    format!("cannot open log_file '{path}' for appending: {e}"),
                )
            })?;
        Ok(Self {
            file: Arc::new(Mutex::new(file)),
        })
    }
}

impl Write for LogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The one redaction rule (crawler_core::redact) applies to files as to stderr.
        let text = String::from_utf8_lossy(buf);
        let scrubbed = crawler_core::redact::scrub(&text);
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(scrubbed.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour_wanted(true, None));
        assert!(!colour_wanted(false, None));
        assert!(!colour_wanted(true, Some(OsStr::new("1"))));
        // NO_COLOR set but empty does not count (no-color.org).
        assert!(colour_wanted(true, Some(OsStr::new(""))));
    }

    #[test]
    fn a_plain_level_is_for_the_framework_and_the_program_not_its_dependencies() {
        let f = log_level_filter("DEBUG");
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
        assert!(log_level_filter("error").starts_with("error,"));
        // A filter of its own is taken as written.
        assert_eq!(log_level_filter("info,sled=debug"), "info,sled=debug");
    }
}
