//! The feed writer: items serialised whole and appended to a JSON Lines, JSON or CSV file (or
//! standard output) as they arrive, on the engine's feed thread.
//!
//! Each item is serialised whole into memory before a byte of it reaches the file, so a
//! serialisation error never leaves half a record behind; an I/O error (disk full) or a
//! `kill -9` can still cut the last record short, and a resumed crawl cuts such a torn tail
//! off before it appends (see [`FeedWriter::open`]). What a feed is (its path, format and
//! placeholders) is crawler-core's `FeedSpec`.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crawler_core::{Error, ErrorKind, FeedFormat, FeedSpec, Result, STDOUT_FEED};
use serde::Serialize;

/// Where a feed's bytes go.
enum Sink {
    File(File),
    Stdout(std::io::Stdout),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::File(f) => f.write(buf),
            Self::Stdout(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::File(f) => f.flush(),
            Self::Stdout(s) => s.flush(),
        }
    }
}

/// An open feed file.
pub(crate) struct FeedWriter {
    path: PathBuf,
    format: FeedFormat,
    out: BufWriter<Sink>,
    /// JSON: no element written yet. CSV: the header row is still to be written.
    first: bool,
    /// One serialised item, written to `out` only once it is complete.
    scratch: Vec<u8>,
}

fn io_error(path: &Path, what: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    let name = if path.as_os_str() == STDOUT_FEED {
        "standard output".to_owned()
    } else {
        format!("'{}'", path.display())
    };
    Error::new(ErrorKind::Io, format!("cannot {what} feed {name}")).with_source(e)
}

impl FeedWriter {
    /// Create (or open for appending) the file now, so a bad path fails before the crawl.
    ///
    /// When appending, a torn last record (an unterminated JSON line, or a CSV record cut
    /// inside a quoted field or before its line end: what a `kill -9` or a full disk leaves)
    /// is cut off first, so every record in the file stays whole. Its request was never
    /// acknowledged, so the resumed crawl writes the item again.
    pub(crate) fn open(spec: &FeedSpec) -> Result<Self> {
        let path = spec.path.clone();
        if spec.is_stdout() {
            // Standard output is written, never replaced or appended to.
            return Ok(Self::new(
                path,
                spec.format,
                Sink::Stdout(std::io::stdout()),
                0,
            ));
        }
        if spec.append && spec.format == FeedFormat::Json {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "cannot append to JSON feed '{}': use .jsonl for resumable crawls",
                    path.display()
                ),
            ));
        }
        let mut file = OpenOptions::new()
            .create(true)
            .read(spec.append)
            .write(true)
            .truncate(!spec.append)
            .open(&path)
            .map_err(|e| io_error(&path, "create", e))?;
        let mut existing = 0;
        if spec.append {
            existing = repair_tail(&mut file, spec.format, &path)?;
            file.seek(SeekFrom::Start(existing))
                .map_err(|e| io_error(&path, "append to", e))?;
        }
        Ok(Self::new(path, spec.format, Sink::File(file), existing))
    }

    /// A writer on an open sink; `existing` bytes of records are already there.
    fn new(path: PathBuf, format: FeedFormat, sink: Sink, existing: u64) -> Self {
        Self {
            path,
            format,
            out: BufWriter::with_capacity(64 * 1024, sink),
            first: format == FeedFormat::Json || existing == 0,
            scratch: Vec::with_capacity(1024),
        }
    }

    /// Serialise `item` and queue it for the file. Nothing is written when it does not
    /// serialise (an error, and the file stays as it was).
    pub(crate) fn write<I: Serialize>(&mut self, item: &I) -> Result<()> {
        let path = &self.path;
        let encode = |e: &dyn std::fmt::Display| {
            Error::new(
                ErrorKind::Io,
                format!(
                    "cannot write feed '{}': an item does not serialise: {e}",
                    path.display()
                ),
            )
        };
        self.scratch.clear();
        match self.format {
            FeedFormat::JsonLines => {
                serde_json::to_writer(&mut self.scratch, item).map_err(|e| encode(&e))?;
                self.scratch.push(b'\n');
            }
            FeedFormat::Json => {
                self.scratch
                    .extend_from_slice(if self.first { b"[\n" } else { b",\n" });
                serde_json::to_writer(&mut self.scratch, item).map_err(|e| encode(&e))?;
            }
            FeedFormat::Csv => {
                let mut w = csv::WriterBuilder::new()
                    .has_headers(self.first)
                    .buffer_capacity(1024)
                    .from_writer(std::mem::take(&mut self.scratch));
                w.serialize(item).map_err(|e| encode(&e))?;
                self.scratch = w.into_inner().map_err(|e| encode(e.error()))?;
            }
        }
        self.out
            .write_all(&self.scratch)
            .map_err(|e| io_error(path, "write", e))?;
        self.first = false;
        Ok(())
    }

    /// Hand what is buffered to the operating system (safe from a process crash).
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.out
            .flush()
            .map_err(|e| io_error(&self.path, "flush", e))
    }

    /// Flush and wait until the file's data is on the disk (safe from a power failure).
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.flush()?;
        match self.out.get_ref() {
            Sink::File(file) => file
                .sync_data()
                .map_err(|e| io_error(&self.path, "sync", e)),
            // A pipe or a terminal: nothing to sync.
            Sink::Stdout(_) => Ok(()),
        }
    }

    /// Close the JSON array (if any), flush everything to the file and sync it.
    pub(crate) fn finish(mut self) -> Result<()> {
        if self.format == FeedFormat::Json {
            // An empty feed is still a valid (empty) array.
            let end: &[u8] = if self.first { b"[]\n" } else { b"\n]\n" };
            self.out
                .write_all(end)
                .map_err(|e| io_error(&self.path, "write", e))?;
        }
        self.sync()
    }
}

/// Cut a torn last record off an existing feed (or failures file) and return the length
/// kept. JSON Lines: everything after the last newline. CSV: everything after the last line
/// end outside a quoted field (quotes inside fields are doubled, so a line end is a record
/// end exactly when the quotes before it are balanced).
pub(crate) fn repair_tail(file: &mut File, format: FeedFormat, path: &Path) -> Result<u64> {
    let len = file
        .metadata()
        .map_err(|e| io_error(path, "read", e))?
        .len();
    if len == 0 {
        return Ok(0);
    }
    let keep = match format {
        FeedFormat::JsonLines | FeedFormat::Json => {
            // Only the tail can be torn; read backwards in blocks to the last newline.
            let mut end = len;
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                if end == 0 {
                    break 0;
                }
                let start = end.saturating_sub(buf.len() as u64);
                let n = (end - start) as usize;
                file.seek(SeekFrom::Start(start))
                    .map_err(|e| io_error(path, "read", e))?;
                file.read_exact(&mut buf[..n])
                    .map_err(|e| io_error(path, "read", e))?;
                if let Some(i) = buf[..n].iter().rposition(|&b| b == b'\n') {
                    break start + i as u64 + 1;
                }
                end = start;
            }
        }
        FeedFormat::Csv => {
            // Quote balance depends on the whole file: one forward pass.
            file.seek(SeekFrom::Start(0))
                .map_err(|e| io_error(path, "read", e))?;
            let mut reader = std::io::BufReader::with_capacity(64 * 1024, &mut *file);
            let (mut keep, mut pos, mut quoted) = (0u64, 0u64, false);
            let mut buf = [0u8; 64 * 1024];
            loop {
                let n = reader
                    .read(&mut buf)
                    .map_err(|e| io_error(path, "read", e))?;
                if n == 0 {
                    break;
                }
                for &b in &buf[..n] {
                    pos += 1;
                    match b {
                        b'"' => quoted = !quoted,
                        b'\n' if !quoted => keep = pos,
                        _ => {}
                    }
                }
            }
            keep
        }
    };
    if keep < len {
        tracing::warn!(
            file = %path.display(),
            cut = len - keep,
            "cutting a torn last record (left by a crash or a full disk) before appending"
        );
        file.set_len(keep)
            .map_err(|e| io_error(path, "repair", e))?;
    }
    Ok(keep)
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

    #[test]
    fn standard_output_is_written_and_never_synced_as_a_file() {
        let spec = FeedSpec::new("-").unwrap().append();
        let mut w = FeedWriter::open(&spec).unwrap();
        w.write(&Row {
            title: "t".into(),
            price: 1.0,
        })
        .unwrap();
        w.sync().unwrap();
        w.finish().unwrap();
    }

    #[test]
    fn appending_cuts_a_torn_last_line_first() {
        let dir = tempfile::tempdir().unwrap();
        let spec = FeedSpec::new(dir.path().join("a.jsonl")).unwrap().append();
        write_rows(&spec, 2);
        // What a kill in the middle of a write leaves.
        let mut f = OpenOptions::new().append(true).open(&spec.path).unwrap();
        f.write_all(b"{\"title\":\"t9, \\\"quo").unwrap();
        drop(f);
        write_rows(&spec, 1);
        let text = std::fs::read_to_string(&spec.path).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        for line in text.lines() {
            serde_json::from_str::<serde_json::Value>(line).unwrap();
        }
        // A file that is one torn line is emptied.
        std::fs::write(&spec.path, b"{\"ti").unwrap();
        write_rows(&spec, 1);
        assert_eq!(
            std::fs::read_to_string(&spec.path).unwrap().lines().count(),
            1
        );
    }

    #[test]
    fn appending_cuts_a_csv_record_torn_inside_a_quoted_line_break() {
        #[derive(Serialize)]
        struct Note {
            text: String,
        }
        let dir = tempfile::tempdir().unwrap();
        let spec = FeedSpec::new(dir.path().join("a.csv")).unwrap().append();
        let mut w = FeedWriter::open(&spec).unwrap();
        w.write(&Note {
            text: "one\ntwo \"2\"".into(),
        })
        .unwrap();
        w.finish().unwrap();
        // Torn right after a line break inside the quoted field: the line ends, the record
        // does not.
        let mut f = OpenOptions::new().append(true).open(&spec.path).unwrap();
        f.write_all(b"\"three\n").unwrap();
        drop(f);
        let mut w = FeedWriter::open(&spec).unwrap();
        w.write(&Note {
            text: "four".into(),
        })
        .unwrap();
        w.finish().unwrap();
        let text = std::fs::read_to_string(&spec.path).unwrap();
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let rows: Vec<String> = r.records().map(|r| r.unwrap()[0].to_owned()).collect();
        assert_eq!(rows, ["one\ntwo \"2\"", "four"], "{text}");
    }

    #[test]
    fn an_item_that_does_not_serialise_writes_nothing() {
        #[derive(Serialize)]
        struct Nested {
            inner: Row,
        }
        let dir = tempfile::tempdir().unwrap();
        let spec = FeedSpec::new(dir.path().join("a.csv")).unwrap();
        let mut w = FeedWriter::open(&spec).unwrap();
        let bad = Nested {
            inner: Row {
                title: "x".into(),
                price: 1.0,
            },
        };
        let e = w.write(&bad).unwrap_err();
        assert!(e.to_string().contains("does not serialise"), "{e}");
        w.finish().unwrap();
        assert_eq!(std::fs::read_to_string(&spec.path).unwrap(), "");
    }
}
