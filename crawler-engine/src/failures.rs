//! The failures file: one JSON line per request that ended without a usable response, so a
//! user can see why and re-run exactly those URLs.
//!
//! A failures file named by an object URL (`s3://bucket/failures.jsonl`) is written to a
//! local copy as the crawl runs (flushed at each checkpoint, as a local one) and uploaded
//! when the crawl ends, through the feeds' uploader: in parts, the object appearing whole
//! or not at all. The copy lives in the job directory when there is one, so a resumed job
//! adds to it and uploads the whole again; otherwise it is a temporary file, removed once
//! uploaded (and kept, its path in the error, if the upload fails).

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::feed_store::ObjectTarget;
use crate::feed_writer::repair_tail;
use crawler_core::FeedFormat;
use crawler_core::{Error, ErrorKind, Result, Settings};

/// The local copy of an object failures file in the job directory.
const JOB_COPY: &str = "failures.jsonl";

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
    /// Where the file goes when the crawl ends, if it is an object.
    upload: Option<Upload>,
}

/// An object failures file: its URL, the client for its bucket, and whether the local copy
/// is temporary (removed once uploaded).
struct Upload {
    url: String,
    target: ObjectTarget,
    temporary: bool,
}

impl FailureLog {
    /// The failures file `failures_file` names (a path, a `file://` URL or an object URL),
    /// created or, for a resumed crawl (`append`), added to. For an object, its bucket's
    /// client is built now (a bad URL fails before the crawl) and the local copy opened.
    /// Must run inside the runtime.
    pub(crate) fn from_settings(
        failures_file: &str,
        settings: &Settings,
        append: bool,
    ) -> Result<Self> {
        if crawler_core::object_scheme(failures_file).is_none() {
            let local = crawler_core::local_location(failures_file);
            return Self::open(Path::new(local), append);
        }
        ObjectTarget::check_key(failures_file)?;
        let target = ObjectTarget::new(failures_file, settings)?;
        let (path, temporary) = match settings.job_dir.as_deref() {
            Some(dir) => (Path::new(dir).join(JOB_COPY), false),
            // Random: crawls in one process (tests, a runner) each get their own.
            None => (
                std::env::temp_dir().join(format!(
                    "crawler-failures-{}-{:016x}.jsonl",
                    std::process::id(),
                    rand::random::<u64>()
                )),
                true,
            ),
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                Error::new(
                    ErrorKind::Io,
                    format!("cannot create the directory of '{}'", path.display()),
                )
                .with_source(e)
            })?;
        }
        let mut log = Self::open(&path, append && !temporary)?;
        log.upload = Some(Upload {
            url: failures_file.to_owned(),
            target,
            temporary,
        });
        Ok(log)
    }

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
            upload: None,
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

    /// Write out what is buffered and, for an object, upload the whole file (off the async
    /// runtime). Returns the lines this run wrote.
    pub(crate) async fn finish(mut self) -> Result<u64> {
        self.out.flush().map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot write failures file '{}'", self.path.display()),
            )
            .with_source(e)
        })?;
        let Some(upload) = self.upload.take() else {
            return Ok(self.written);
        };
        let path = self.path.clone();
        let sent = tokio::task::spawn_blocking(move || {
            let sent = upload.target.upload_file(&path, &upload.url);
            if sent.is_ok() && upload.temporary {
                let _ = std::fs::remove_file(&path);
            }
            sent
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Other, e.to_string()))?;
        match sent {
            Ok(bytes) => {
                tracing::debug!(file = %self.path.display(), bytes, "failures file uploaded");
                Ok(self.written)
            }
            Err(e) => Err(Error::new(
                ErrorKind::Io,
                format!(
                    "the failures file was not uploaded; its lines are in '{}': {e}",
                    self.path.display()
                ),
            )),
        }
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

    #[tokio::test]
    async fn a_resumed_crawl_appends_and_cuts_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("failures.jsonl");
        let mut log = FailureLog::open(&path, false).unwrap();
        record(&mut log, "http://a.test/1");
        log.finish().await.unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"url\":\"http://a.te").unwrap();
        drop(f);
        let mut log = FailureLog::open(&path, true).unwrap();
        record(&mut log, "http://a.test/2");
        log.finish().await.unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let urls: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["url"].to_string())
            .collect();
        assert_eq!(urls, ["\"http://a.test/1\"", "\"http://a.test/2\""]);
        // A fresh crawl starts the file again.
        FailureLog::open(&path, false)
            .unwrap()
            .finish()
            .await
            .unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }
}
