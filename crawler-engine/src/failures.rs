//! The failures file: one JSON line per request that ended without a usable response, so a
//! user can see why and re-run exactly those URLs.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::feed_writer::repair_tail;
use crawler_core::FeedFormat;
use crawler_core::{Error, ErrorKind, Result};

/// One line of the failures file.
#[derive(Debug, Serialize)]
pub(crate) struct FailureRecord<'a> {
    pub url: &'a str,
    pub reason: &'a str,
    pub attempts: u32,
    pub status: Option<u16>,
    pub message: &'a str,
}

pub(crate) struct FailureLog {
    path: PathBuf,
    out: BufWriter<File>,
    written: u64,
}

impl FailureLog {
    /// Create the file, or, for a resumed crawl (`append`), keep the failures of the runs
    /// before it (cutting a line torn by a crash) and add to them.
    pub(crate) fn open(path: &Path, append: bool) -> Result<Self> {
        let cannot = |e: std::io::Error| {
            Error::new(
                ErrorKind::Io,
                format!("cannot create failures file '{}'", path.display()),
            )
            .with_source(e)
        };
        let mut file = OpenOptions::new()
            .create(true)
            .read(append)
            .write(true)
            .truncate(!append)
            .open(path)
            .map_err(cannot)?;
        if append {
            let keep = repair_tail(&mut file, FeedFormat::JsonLines, path)?;
            file.seek(SeekFrom::Start(keep)).map_err(cannot)?;
        }
        Ok(Self {
            path: path.to_owned(),
            out: BufWriter::new(file),
            written: 0,
        })
    }

    pub(crate) fn record(&mut self, rec: &FailureRecord<'_>) {
        let line = serde_json::to_vec(rec).map(|mut v| {
            v.push(b'\n');
            v
        });
        let ok = line.is_ok_and(|l| self.out.write_all(&l).is_ok());
        if ok {
            self.written += 1;
        } else {
            tracing::error!(file = %self.path.display(), url = rec.url, "could not write to the failures file");
        }
    }

    /// Hand buffered lines to the operating system (at each checkpoint), so a crash loses
    /// at most the last second of them.
    pub(crate) fn flush(&mut self) {
        if let Err(e) = self.out.flush() {
            tracing::error!(file = %self.path.display(), "could not write to the failures file: {e}");
        }
    }

    pub(crate) fn finish(mut self) -> Result<u64> {
        self.out.flush().map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot write failures file '{}'", self.path.display()),
            )
            .with_source(e)
        })?;
        Ok(self.written)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn record(log: &mut FailureLog, url: &str) {
        log.record(&FailureRecord {
            url,
            reason: "status",
            attempts: 1,
            status: Some(500),
            message: "HTTP 500",
        });
    }

    #[test]
    fn a_resumed_crawl_appends_and_cuts_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("failures.jsonl");
        let mut log = FailureLog::open(&path, false).unwrap();
        record(&mut log, "http://a.test/1");
        log.finish().unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"url\":\"http://a.te").unwrap();
        drop(f);
        let mut log = FailureLog::open(&path, true).unwrap();
        record(&mut log, "http://a.test/2");
        log.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let urls: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["url"].to_string())
            .collect();
        assert_eq!(urls, ["\"http://a.test/1\"", "\"http://a.test/2\""]);
        // A fresh crawl starts the file again.
        FailureLog::open(&path, false).unwrap().finish().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }
}
