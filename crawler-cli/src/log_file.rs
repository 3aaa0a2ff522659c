//! `log_file`: log lines appended to a file, redacted like every log line and never coloured.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Arc, Mutex};

use crawler::{Error, ErrorKind};

/// An open log file, shared by every thread that logs (one write per log line).
#[derive(Clone, Debug)]
pub(crate) struct LogFile {
    file: Arc<Mutex<File>>,
}

impl LogFile {
    /// Open `path` for appending (creating it), so the crawl fails before it starts when the
    /// file cannot be written.
    pub(crate) fn open(path: &str) -> Result<Self, Error> {
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

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogFile {
    type Writer = Self;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Write for LogFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The one redaction rule (crawler::core::redact) applies to files as to stderr.
        let text = String::from_utf8_lossy(buf);
        let scrubbed = crawler::core::redact::scrub(&text);
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(scrubbed.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.lock().unwrap_or_else(|p| p.into_inner()).flush()
    }
}
