//! The feed writer: items serialised whole and written to a JSON Lines, JSON, CSV, XML or
//! Parquet file, standard output or object storage as they arrive, on the engine's feed
//! thread.
//!
//! Each item is serialised whole into memory before a byte of it reaches the file, so a
//! serialisation error never leaves half a record behind; an I/O error (disk full) or a
//! `kill -9` can still cut the last record short of a local file a crawl appends to, and a
//! resumed crawl cuts such a torn tail off before it appends (see [`FeedWriter::open`]).
//!
//! Batched feeds (`feed_batch_items`, `%(batch_id)d`) and objects (`s3://`, see
//! `feed_store.rs`) are written a batch at a time, each batch appearing whole once its last
//! item is in: a local batch is written to `NAME.part` and renamed into place, an object
//! completed. Until then the batch is not *settled* ([`FeedWriter::settled`]) and the feed
//! thread holds back the acknowledgements of its items' requests, so a crawl killed
//! mid-batch fetches them again when it resumes, and writes the batches not yet complete
//! (those already there are kept: the ids go on after them). A Parquet feed is always
//! written as batches (without a batch size: one, for the whole crawl), since a file
//! without its footer is no Parquet file; see `feed_parquet.rs`. What a feed is (its path,
//! format and placeholders) is crawler-core's `FeedSpec`.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crawler_core::{Error, ErrorKind, FeedFormat, FeedSpec, Result, STDOUT_FEED, Settings};
use serde::Serialize;

use crate::feed_parquet::ParquetFeed;
use crate::feed_store::{ObjectTarget, ObjectUpload};
use crate::feed_xml;

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

/// Where a batched feed's batches go.
enum Batches {
    /// Local files, each written as `NAME.part` and renamed when complete.
    Files,
    /// Objects, each completed when its batch is.
    Objects(ObjectTarget),
}

/// The batch being written.
enum Open {
    /// A local file, renamed from `part` to `dest` when complete.
    File {
        part: PathBuf,
        dest: PathBuf,
        out: BufWriter<File>,
    },
    /// An object.
    Object(ObjectUpload),
}

/// How a feed is written: to one stream or in batches.
// One per feed, never moved in a loop: boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Mode {
    /// Standard output or one local file, written to as items come (and appended to by a
    /// resumed job).
    Stream(BufWriter<Sink>),
    /// Batches: files or objects that appear whole.
    Batched {
        to: Batches,
        /// Items per batch; 0: one batch, closed when the crawl ends.
        size: u64,
        /// The path, its batch placeholders still in (`%(name)s` and `%(time)s` filled).
        template: String,
        /// The open batch, if any.
        open: Option<Open>,
        /// Items in the open batch.
        in_batch: u64,
        /// The next batch's id; `None` until the first batch is opened (a resumed job looks
        /// for the batches already complete then, on the feed thread).
        next_id: Option<u64>,
        /// Keep the batches already complete (a resumed job, or `-o`).
        keep: bool,
        /// Batches written by this run.
        written: u64,
    },
}

/// An open feed.
pub(crate) struct FeedWriter {
    path: PathBuf,
    format: FeedFormat,
    mode: Mode,
    /// JSON: no element written yet. CSV: the header row is still to be written. (Of the
    /// open batch, when batched.)
    first: bool,
    /// One serialised item, written to `out` only once it is complete.
    scratch: Vec<u8>,
    /// A Parquet feed's schema, row group and file writer.
    parquet: Option<ParquetFeed>,
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
    /// Open a feed with the default settings (tests).
    #[cfg(test)]
    pub(crate) fn open(spec: &FeedSpec) -> Result<Self> {
        Self::open_with(spec, &Settings::default())
    }

    /// Create (or open for appending) the file now, so a bad path fails before the crawl;
    /// a batched feed or an object checks its path (and builds its storage client) now and
    /// opens its first batch with its first item. `settings` give the batch size
    /// (`feed_batch_items`, unless the spec sets its own) and the object storage options.
    ///
    /// When appending, a torn last record (an unterminated JSON line, or a CSV record cut
    /// inside a quoted field or before its line end: what a `kill -9` or a full disk leaves)
    /// is cut off first, so every record in the file stays whole. Its request was never
    /// acknowledged, so the resumed crawl writes the item again.
    pub(crate) fn open_with(spec: &FeedSpec, settings: &Settings) -> Result<Self> {
        let path = spec.path.clone();
        if spec.is_stdout() {
            // Standard output is written, never replaced or appended to.
            return Ok(Self::stream(
                path,
                spec.format,
                Sink::Stdout(std::io::stdout()),
                0,
            ));
        }
        let size = if spec.batch_items > 0 {
            spec.batch_items
        } else {
            settings.feed_batch_items
        };
        let template = path.to_string_lossy().into_owned();
        // A Parquet file is whole or absent (written as `NAME.part`, renamed when closed),
        // like a batch; appending to one is refused below.
        let parquet_file = spec.format == FeedFormat::Parquet && !spec.append;
        if spec.is_object() || spec.is_batched() || size > 0 || parquet_file {
            if let Some(why) = crawler_core::feed_problem(&template)
                .or_else(|| crawler_core::batch_problem(&template, size))
            {
                return Err(Error::new(ErrorKind::Settings, format!("feed {why}")));
            }
            let to = match spec.object_url() {
                Some(url) => Batches::Objects(ObjectTarget::new(url, settings)?),
                None => Batches::Files,
            };
            return Ok(Self {
                path,
                format: spec.format,
                mode: Mode::Batched {
                    to,
                    size,
                    template,
                    open: None,
                    in_batch: 0,
                    next_id: None,
                    keep: spec.append,
                    written: 0,
                },
                first: true,
                scratch: Vec::with_capacity(1024),
                parquet: (spec.format == FeedFormat::Parquet)
                    .then(|| ParquetFeed::new(settings.feed_parquet_row_group_items)),
            });
        }
        if spec.append && spec.format.is_closed_document() {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "cannot append to the {} feed '{}' (one document, closed when it was \
                     written): use .jsonl for resumable crawls, or batches",
                    spec.format.title(),
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
        let mut w = Self::stream(path, spec.format, Sink::File(file), existing);
        if spec.format == FeedFormat::Xml {
            w.put(feed_xml::HEADER)?;
        }
        Ok(w)
    }

    /// A writer on an open stream; `existing` bytes of records are already there.
    fn stream(path: PathBuf, format: FeedFormat, sink: Sink, existing: u64) -> Self {
        Self {
            path,
            format,
            mode: Mode::Stream(BufWriter::with_capacity(64 * 1024, sink)),
            first: format == FeedFormat::Json || existing == 0,
            scratch: Vec::with_capacity(1024),
            parquet: None,
        }
    }

    /// Whether every item written so far is in a file or object that a flush (or sync)
    /// makes durable: always for a stream, for a batched feed only between batches. The
    /// feed thread releases the acknowledgements of items' requests only when their feeds
    /// are settled.
    pub(crate) fn settled(&self) -> bool {
        match &self.mode {
            Mode::Stream(_) => true,
            Mode::Batched { open, .. } => open.is_none(),
        }
    }

    /// Write `bytes` where the feed's bytes go now (its stream or open batch).
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        match &mut self.mode {
            Mode::Stream(out) => out
                .write_all(bytes)
                .map_err(|e| io_error(&self.path, "write", e)),
            Mode::Batched {
                open: Some(Open::File { out, part, .. }),
                ..
            } => out.write_all(bytes).map_err(|e| io_error(part, "write", e)),
            Mode::Batched {
                open: Some(Open::Object(upload)),
                ..
            } => upload.write(bytes),
            Mode::Batched { open: None, .. } => Ok(()),
        }
    }

    /// Open the next batch, if none is: the first one not complete yet when keeping those
    /// there (looked up now, on the feed thread), else batch 1.
    fn open_batch(&mut self) -> Result<()> {
        let Mode::Batched {
            to,
            template,
            open,
            next_id,
            keep,
            in_batch,
            ..
        } = &mut self.mode
        else {
            return Ok(());
        };
        if open.is_some() {
            return Ok(());
        }
        let now = SystemTime::now();
        let to: &Batches = to;
        let exists = |name: &str| -> Result<bool> {
            match to {
                Batches::Files => Ok(Path::new(name).exists()),
                Batches::Objects(target) => target.exists(name),
            }
        };
        let id = match *next_id {
            Some(id) => id,
            None if *keep => {
                // The batches a run before this one completed stay; this run goes on after
                // them. A name without `%(batch_id)d` is one batch (or named by time).
                let mut id = 1;
                while crawler_core::has_batch_placeholder(template) || id == 1 {
                    let name = crawler_core::expand_batch_path(template, id, now)?;
                    if !exists(&name)? {
                        break;
                    }
                    if !template.contains("%(batch_") {
                        return Err(Error::new(
                            ErrorKind::Io,
                            format!(
                                "feed '{name}' is already complete, and an object cannot be \
                                 appended to: name batches with %(batch_id)d for a crawl that \
                                 resumes, or remove it"
                            ),
                        ));
                    }
                    if !template.contains("%(batch_id)") {
                        // Named by time only: the next batch's name is new anyway.
                        break;
                    }
                    id += 1;
                }
                id
            }
            None => 1,
        };
        let name = crawler_core::expand_batch_path(template, id, now)?;
        *open = Some(match to {
            Batches::Files => {
                let dest = PathBuf::from(&name);
                let mut part = dest.clone().into_os_string();
                part.push(".part");
                let part = PathBuf::from(part);
                let file = File::create(&part).map_err(|e| io_error(&part, "create", e))?;
                Open::File {
                    part,
                    dest,
                    out: BufWriter::with_capacity(64 * 1024, file),
                }
            }
            Batches::Objects(target) => Open::Object(target.create(&name)?),
        });
        *next_id = Some(id + 1);
        *in_batch = 0;
        self.first = true;
        if self.format == FeedFormat::Xml {
            self.put(feed_xml::HEADER)?;
        }
        Ok(())
    }

    /// Close the open batch, if any: its end written, then the file synced and renamed
    /// into place or the object completed.
    fn close_batch(&mut self) -> Result<()> {
        let Mode::Batched { open, .. } = &self.mode else {
            return Ok(());
        };
        if open.is_none() {
            return Ok(());
        }
        if let Some(parquet) = &mut self.parquet {
            let path = &self.path;
            let rest = parquet.finish_file().map_err(|why| {
                Error::new(
                    ErrorKind::Io,
                    format!("cannot write feed '{}': {why}", path.display()),
                )
            })?;
            self.put(&rest)?;
        }
        let end = self.document_end();
        self.put(end)?;
        let Mode::Batched { open, written, .. } = &mut self.mode else {
            return Ok(());
        };
        match open.take() {
            Some(Open::File { part, dest, out }) => {
                let file = out
                    .into_inner()
                    .map_err(|e| io_error(&part, "write", e.into_error()))?;
                // On the disk before it is renamed into place: a batch's file is whole or
                // absent, even after a power failure.
                file.sync_data().map_err(|e| io_error(&part, "sync", e))?;
                std::fs::rename(&part, &dest).map_err(|e| io_error(&dest, "rename", e))?;
                tracing::debug!(file = %dest.display(), "feed batch written");
            }
            Some(Open::Object(upload)) => {
                let url = upload.url().to_owned();
                upload.finish()?;
                tracing::debug!(object = %url, "feed batch uploaded");
            }
            None => {}
        }
        *written += 1;
        Ok(())
    }

    /// What closes a document of this format (JSON's array, XML's root).
    fn document_end(&self) -> &'static [u8] {
        match self.format {
            // An empty feed is still a valid (empty) array.
            FeedFormat::Json if self.first => b"[]\n",
            FeedFormat::Json => b"\n]\n",
            FeedFormat::Xml => feed_xml::FOOTER,
            // (Parquet's footer is written by its writer.)
            FeedFormat::JsonLines | FeedFormat::Csv | FeedFormat::Parquet => b"",
        }
    }

    /// Serialise `item` and queue it for the feed (opening a batch first, and closing it
    /// when the item fills it). Nothing is written when it does not serialise (an error,
    /// and the feed stays as it was).
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
        // Serialised before a batch opens: an item that does not serialise opens none.
        match self.format {
            FeedFormat::JsonLines => {
                serde_json::to_writer(&mut self.scratch, item).map_err(|e| encode(&e))?;
                self.scratch.push(b'\n');
            }
            FeedFormat::Json => {
                // The separator depends on the batch: added once it is open.
                serde_json::to_writer(&mut self.scratch, item).map_err(|e| encode(&e))?;
            }
            FeedFormat::Csv => {
                // A header row opens each file (each batch).
                let header = self.first || matches!(self.mode, Mode::Batched { open: None, .. });
                let mut w = csv::WriterBuilder::new()
                    .has_headers(header)
                    .buffer_capacity(1024)
                    .from_writer(std::mem::take(&mut self.scratch));
                w.serialize(item).map_err(|e| encode(&e))?;
                self.scratch = w.into_inner().map_err(|e| encode(e.error()))?;
            }
            FeedFormat::Xml => {
                feed_xml::write_item(item, &mut self.scratch).map_err(|e| encode(&e))?
            }
            FeedFormat::Parquet => return self.write_parquet(item),
        }
        self.open_batch()?;
        let scratch = std::mem::take(&mut self.scratch);
        let result = self.put_item(&scratch);
        self.scratch = scratch;
        result?;
        self.first = false;
        if let Mode::Batched { size, in_batch, .. } = &mut self.mode {
            *in_batch += 1;
            if *size > 0 && *in_batch >= *size {
                self.close_batch()?;
            }
        }
        Ok(())
    }

    /// Parquet: buffer `item` as a row of the open batch (a row group written when full).
    /// An item that does not fit the schema abandons the open batch (its `.part` file
    /// removed, its upload aborted) before the error is returned: the feed stops, and no
    /// file or object is completed with rows that do not match.
    fn write_parquet<I: Serialize>(&mut self, item: &I) -> Result<()> {
        let Some(parquet) = &mut self.parquet else {
            return Ok(());
        };
        if let Err(why) = parquet.push(item) {
            self.abandon_batch();
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "cannot write the Parquet feed '{}': {why}",
                    self.path.display()
                ),
            ));
        }
        self.open_batch()?;
        if let Some(parquet) = &mut self.parquet
            && parquet.group_full()
        {
            let bytes = match parquet.write_group() {
                Ok(bytes) => bytes,
                Err(why) => {
                    self.abandon_batch();
                    return Err(Error::new(
                        ErrorKind::Io,
                        format!("cannot write feed '{}': {why}", self.path.display()),
                    ));
                }
            };
            self.put(&bytes)?;
        }
        self.first = false;
        if let Mode::Batched { size, in_batch, .. } = &mut self.mode {
            *in_batch += 1;
            if *size > 0 && *in_batch >= *size {
                self.close_batch()?;
            }
        }
        Ok(())
    }

    /// Drop the open batch: a local `.part` file is removed, an object's upload aborted
    /// (when dropped), so nothing incomplete is left.
    fn abandon_batch(&mut self) {
        if let Some(parquet) = &mut self.parquet {
            parquet.abandon();
        }
        if let Mode::Batched { open, .. } = &mut self.mode {
            match open.take() {
                Some(Open::File { part, out, .. }) => {
                    drop(out);
                    if let Err(e) = std::fs::remove_file(&part) {
                        tracing::warn!(file = %part.display(), error = %e, "cannot remove an abandoned feed batch");
                    }
                }
                Some(Open::Object(upload)) => drop(upload),
                None => {}
            }
        }
    }

    /// Write one serialised item (after JSON's separator).
    fn put_item(&mut self, encoded: &[u8]) -> Result<()> {
        if self.format == FeedFormat::Json {
            let sep: &[u8] = if self.first { b"[\n" } else { b",\n" };
            self.put(sep)?;
        }
        self.put(encoded)
    }

    /// Hand what is buffered to the operating system (safe from a process crash). An open
    /// batch is not flushed: it appears only whole.
    pub(crate) fn flush(&mut self) -> Result<()> {
        match &mut self.mode {
            Mode::Stream(out) => out.flush().map_err(|e| io_error(&self.path, "flush", e)),
            Mode::Batched { .. } => Ok(()),
        }
    }

    /// Flush and wait until the file's data is on the disk (safe from a power failure).
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.flush()?;
        match &self.mode {
            Mode::Stream(out) => match out.get_ref() {
                Sink::File(file) => file
                    .sync_data()
                    .map_err(|e| io_error(&self.path, "sync", e)),
                // A pipe or a terminal: nothing to sync.
                Sink::Stdout(_) => Ok(()),
            },
            // Each batch is synced when it closes.
            Mode::Batched { .. } => Ok(()),
        }
    }

    /// Close the document (JSON array, XML root) or the open batch, flush everything and
    /// sync it. A batched feed that wrote no batch at all writes an empty one, as a file
    /// feed leaves an empty file (but not when it only adds to the batches of runs before
    /// it).
    pub(crate) fn finish(mut self) -> Result<()> {
        if let Mode::Batched {
            written,
            keep,
            open,
            ..
        } = &self.mode
            && *written == 0
            && open.is_none()
            && !*keep
        {
            self.open_batch()?;
        }
        if let Mode::Batched { .. } = self.mode {
            return self.close_batch();
        }
        let end = self.document_end();
        self.put(end)?;
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
        // (JSON, XML and Parquet are never appended to: a stray failures file of that name
        // is cut at its last line end like JSON Lines.)
        FeedFormat::JsonLines | FeedFormat::Json | FeedFormat::Xml | FeedFormat::Parquet => {
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
        for name in ["a.jsonl", "a.json", "a.csv", "a.xml", "a.parquet"] {
            let spec = FeedSpec::new(dir.path().join(name)).unwrap();
            write_rows(&spec, 3);
            if spec.format == FeedFormat::Parquet {
                use parquet::file::reader::{FileReader, SerializedFileReader};
                let file = File::open(&spec.path).unwrap();
                let reader = SerializedFileReader::new(file).unwrap();
                assert_eq!(reader.metadata().file_metadata().num_rows(), 3);
                let schema = reader.metadata().file_metadata().schema_descr();
                assert_eq!(schema.column(0).name(), "title");
                assert_eq!(schema.column(1).name(), "price");
                continue;
            }
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
                FeedFormat::Xml => {
                    assert!(
                        text.starts_with("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<items>\n")
                    );
                    assert!(text.ends_with("</items>\n"), "{text}");
                    assert_eq!(text.matches("<item>").count(), 3);
                    assert!(
                        text.contains("<title>t1, &quot;quoted&quot;</title>"),
                        "{text}"
                    );
                }
                FeedFormat::Parquet => unreachable!("read above"),
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
        let e = FeedSpec::new("items.txt").unwrap_err();
        assert!(
            e.to_string()
                .contains("use a .jsonl, .json, .csv, .xml or .parquet"),
            "{e}"
        );
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

    /// The files in `dir`, sorted, with their line counts.
    fn listing(dir: &Path) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let text = std::fs::read_to_string(e.path()).unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    text.lines().count(),
                )
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn batches_appear_whole_and_a_resumed_feed_goes_on_after_the_complete_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b-%(batch_id)03d.csv");
        let spec = FeedSpec::new(&path).unwrap().batches(2);
        let mut w = FeedWriter::open(&spec).unwrap();
        assert!(w.settled());
        for i in 0..3 {
            w.write(&Row {
                title: format!("t{i}"),
                price: 1.0,
            })
            .unwrap();
            // The second item closes batch 1; the third opens batch 2.
            assert_eq!(w.settled(), i == 1, "after item {i}");
        }
        w.flush().unwrap();
        // Batch 2 is being written: only as a .part file.
        assert_eq!(
            listing(dir.path()),
            [
                ("b-001.csv".to_owned(), 3),
                ("b-002.csv.part".to_owned(), 0)
            ]
        );
        // Killed here: a resumed feed keeps batch 1 and writes batch 2 again, whole.
        drop(w);
        let mut w = FeedWriter::open(&spec.clone().append()).unwrap();
        for i in 2..6 {
            w.write(&Row {
                title: format!("t{i}"),
                price: 1.0,
            })
            .unwrap();
        }
        w.write(&Row {
            title: "t6".into(),
            price: 1.0,
        })
        .unwrap();
        w.finish().unwrap();
        assert_eq!(
            listing(dir.path()),
            [
                ("b-001.csv".to_owned(), 3),
                ("b-002.csv".to_owned(), 3),
                ("b-003.csv".to_owned(), 3),
                ("b-004.csv".to_owned(), 2),
            ]
        );
        let text = std::fs::read_to_string(dir.path().join("b-002.csv")).unwrap();
        assert_eq!(text, "title,price\nt2,1.0\nt3,1.0\n");
    }

    #[test]
    fn a_batched_json_feed_closes_each_array_and_an_empty_crawl_writes_one_empty_batch() {
        let dir = tempfile::tempdir().unwrap();
        let spec = FeedSpec::new(dir.path().join("j-%(batch_id)d.json"))
            .unwrap()
            .batches(2);
        write_rows(&spec, 3);
        for (name, n) in [("j-1.json", 2), ("j-2.json", 1)] {
            let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
            let rows: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
            assert_eq!(rows.len(), n, "{name}");
        }
        let spec = FeedSpec::new(dir.path().join("e-%(batch_id)d.xml")).unwrap();
        write_rows(&spec, 0);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("e-1.xml")).unwrap(),
            "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<items>\n</items>\n"
        );
    }
}
