//! Feeds: items written to JSON Lines, JSON or CSV files as they arrive.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, ErrorKind, Result};

/// The file format of a feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedFormat {
    /// One JSON object per line (`.jsonl`, `.jl`, `.ndjson`). Safe to read while it grows and
    /// to append to when a crawl resumes.
    JsonLines,
    /// One JSON array (`.json`), closed when the crawl ends.
    Json,
    /// Comma-separated values with a header row (`.csv`); items must be flat.
    Csv,
}

/// Where and how to write items.
#[derive(Debug, Clone)]
pub struct FeedSpec {
    /// The output file.
    pub path: PathBuf,
    /// Its format.
    pub format: FeedFormat,
    /// Append to an existing file instead of replacing it.
    pub append: bool,
}

impl FeedSpec {
    /// A feed whose format follows the file extension.
    pub fn new(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        let format = match ext.as_str() {
            "jsonl" | "jl" | "ndjson" => FeedFormat::JsonLines,
            "json" => FeedFormat::Json,
            "csv" => FeedFormat::Csv,
            _ => {
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "cannot tell the feed format of '{}': use a .jsonl, .json or .csv file name",
                        path.display()
                    ),
                ));
            }
        };
        Ok(Self {
            path,
            format,
            append: false,
        })
    }

    /// Append instead of replacing (JSON Lines and CSV only).
    pub fn append(mut self) -> Self {
        self.append = true;
        self
    }
}

// One per feed file; size does not matter.
#[allow(clippy::large_enum_variant)]
enum Sink {
    Lines(BufWriter<File>),
    Array { out: BufWriter<File>, first: bool },
    Csv(csv::Writer<File>),
}

/// An open feed file.
pub(crate) struct FeedWriter {
    path: PathBuf,
    sink: Sink,
}

fn io_error(path: &Path, what: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("cannot {what} feed '{}'", path.display()),
    )
    .with_source(e)
}

impl FeedWriter {
    /// Create (or open for appending) the file now, so a bad path fails before the crawl.
    pub(crate) fn open(spec: &FeedSpec) -> Result<Self> {
        let path = spec.path.clone();
        if spec.append && spec.format == FeedFormat::Json {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "cannot append to JSON feed '{}': use .jsonl for resumable crawls",
                    path.display()
                ),
            ));
        }
        let existing = spec.append
            && std::fs::metadata(&path)
                .map(|m| m.len() > 0)
                .unwrap_or(false);
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .append(spec.append)
            .truncate(!spec.append)
            .open(&path)
            .map_err(|e| io_error(&path, "create", e))?;
        let sink = match spec.format {
            FeedFormat::JsonLines => Sink::Lines(BufWriter::with_capacity(64 * 1024, file)),
            FeedFormat::Json => {
                let mut out = BufWriter::with_capacity(64 * 1024, file);
                out.write_all(b"[")
                    .map_err(|e| io_error(&path, "write", e))?;
                Sink::Array { out, first: true }
            }
            FeedFormat::Csv => Sink::Csv(
                csv::WriterBuilder::new()
                    .has_headers(!existing)
                    .from_writer(file),
            ),
        };
        Ok(Self { path, sink })
    }

    pub(crate) fn write<I: Serialize>(&mut self, item: &I) -> Result<()> {
        let path = &self.path;
        match &mut self.sink {
            Sink::Lines(out) => {
                serde_json::to_writer(&mut *out, item).map_err(|e| io_error(path, "write", e))?;
                out.write_all(b"\n").map_err(|e| io_error(path, "write", e))
            }
            Sink::Array { out, first } => {
                out.write_all(if *first { b"\n" } else { b",\n" })
                    .map_err(|e| io_error(path, "write", e))?;
                *first = false;
                serde_json::to_writer(&mut *out, item).map_err(|e| io_error(path, "write", e))
            }
            Sink::Csv(out) => out.serialize(item).map_err(|e| io_error(path, "write", e)),
        }
    }

    pub(crate) fn flush(&mut self) -> Result<()> {
        let r = match &mut self.sink {
            Sink::Lines(out) | Sink::Array { out, .. } => out.flush(),
            Sink::Csv(out) => out.flush(),
        };
        r.map_err(|e| io_error(&self.path, "flush", e))
    }

    /// Close the JSON array (if any) and flush everything to the file.
    pub(crate) fn finish(mut self) -> Result<()> {
        if let Sink::Array { out, .. } = &mut self.sink {
            out.write_all(b"\n]\n")
                .map_err(|e| io_error(&self.path, "write", e))?;
        }
        self.flush()?;
        let file = match self.sink {
            Sink::Lines(out) | Sink::Array { out, .. } => out
                .into_inner()
                .map_err(|e| io_error(&self.path, "flush", e.into_error()))?,
            Sink::Csv(out) => out
                .into_inner()
                .map_err(|e| io_error(&self.path, "flush", e.into_error()))?,
        };
        file.sync_data()
            .map_err(|e| io_error(&self.path, "sync", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct Row {
        title: String,
        price: f64,
    }

    fn write_rows(spec: &FeedSpec, n: usize) {
        let mut w = FeedWriter::open(spec).unwrap();
        for i in 0..n {
            w.write(&Row {
                title: format!("t{i}, \"quoted\""),
                price: i as f64,
            })
            .unwrap();
        }
        w.finish().unwrap();
    }

    #[test]
    fn each_format_is_valid_and_complete() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a.jsonl", "a.json", "a.csv"] {
            let spec = FeedSpec::new(dir.path().join(name)).unwrap();
            write_rows(&spec, 3);
            let text = std::fs::read_to_string(&spec.path).unwrap();
            match spec.format {
                FeedFormat::JsonLines => {
                    let rows: Vec<serde_json::Value> = text
                        .lines()
                        .map(|l| serde_json::from_str(l).unwrap())
                        .collect();
                    assert_eq!(rows.len(), 3);
                }
                FeedFormat::Json => {
                    let rows: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
                    assert_eq!(rows[2]["title"], "t2, \"quoted\"");
                }
                FeedFormat::Csv => {
                    let mut r = csv::Reader::from_reader(text.as_bytes());
                    let rows: Vec<csv::StringRecord> = r.records().map(|r| r.unwrap()).collect();
                    assert_eq!(rows.len(), 3);
                    assert_eq!(&rows[1][0], "t1, \"quoted\"");
                }
            }
        }
        // An empty JSON feed is still a valid (empty) array.
        let spec = FeedSpec::new(dir.path().join("empty.json")).unwrap();
        write_rows(&spec, 0);
        let v: Vec<serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(&spec.path).unwrap()).unwrap();
        assert!(v.is_empty());
    }

    #[test]
    fn appending_csv_writes_the_header_once() {
        let dir = tempfile::tempdir().unwrap();
        let spec = FeedSpec::new(dir.path().join("a.csv")).unwrap().append();
        write_rows(&spec, 2);
        write_rows(&spec, 2);
        let text = std::fs::read_to_string(&spec.path).unwrap();
        assert_eq!(text.lines().filter(|l| l.starts_with("title")).count(), 1);
        assert_eq!(text.lines().count(), 5);
    }

    #[test]
    fn bad_names_and_paths_are_clear_errors() {
        let e = FeedSpec::new("items.xml").unwrap_err();
        assert!(e.to_string().contains("use a .jsonl, .json or .csv"), "{e}");
        let spec = FeedSpec::new("/nonexistent-dir/x/items.jsonl").unwrap();
        let e = FeedWriter::open(&spec).err().unwrap();
        assert!(
            e.to_string()
                .starts_with("cannot create feed '/nonexistent-dir/x/items.jsonl'"),
            "{e}"
        );
    }
}
