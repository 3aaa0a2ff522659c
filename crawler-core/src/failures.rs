//! The failures file: one JSON line per request that ended without a usable response, so a
//! user can see why and re-run exactly those URLs.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};

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
    pub(crate) fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).map_err(|e| {
            Error::new(
                ErrorKind::Io,
                format!("cannot create failures file '{}'", path.display()),
            )
            .with_source(e)
        })?;
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
