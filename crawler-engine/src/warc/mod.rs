//! WARC 1.1 archives of a crawl (the `warc` setting): every exchange the downloader hands
//! over (see [`ExchangeTap`]) becomes a `request` and a `response` record (a `revisit` for a
//! 304 to a conditional request), in files that each open with a `warcinfo` record naming
//! the crawler and its settings, secrets redacted.
//!
//! Records are written on a thread of their own, fed through a channel whose contents are
//! bounded in bytes ([`BUDGET`]): a download waits when the writer is that far behind, so
//! neither compression nor the disk runs on the async runtime and memory stays bounded.
//! The writer works in batches: it takes what is queued, writes it, and sleeps for up to
//! [`NAP`] (a download wakes it sooner once [`WAKE_AT`] bytes wait), so a crawl costs a
//! wake-up and a write every few milliseconds rather than one per exchange.
//! Each record is compressed as a gzip member of its own (`record.rs`: one deflate state
//! reset between members, short records stored) and whole records only are handed to the
//! operating system, so a crash leaves every complete record readable; a file reaching
//! `warc_max_size` is closed (synced) and the next one opened with the next serial number.
//!
//! [`WarcArchive`] reads such files back: a crawl replayed from them (`replay_warc`) is
//! answered from their records, with no network (`replay.rs`).
//!
//! ```no_run
//! use crawler_core::Settings;
//! use crawler_engine::warc::{WarcConfig, WarcWriter};
//!
//! let mut settings = Settings::default();
//! settings.warc = Some("crawl-%(time)s.warc.gz".into());
//! let config = WarcConfig::from_settings(&settings, "books", std::time::SystemTime::now())
//!     .expect("valid settings")
//!     .expect("warc is set");
//! let writer = WarcWriter::open(config).expect("the first file opens");
//! let tap = writer.tap(); // hand it to the downloader: HttpDownloader::with_tap(tap)
//! # drop(tap);
//! ```

mod record;
mod replay;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use crawler_core::{BoxFuture, Error, ErrorKind, Exchange, ExchangeTap, Result, Settings};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

pub use record::{ORIGINAL_CONTENT_LENGTH, ORIGINAL_TRANSFER_ENCODING, SERVER_NOT_MODIFIED};
pub use replay::WarcArchive;

/// Bytes of exchanges that may wait for the writer before downloads wait for it.
pub const BUDGET: usize = 64 * 1024 * 1024;

/// How long the writer sleeps once the queue is empty. Waking it for each exchange cost a
/// futex call and two context switches a page on the runtime's cores (BENCHMARKS.md, "WARC
/// archives"); an exchange now waits at most this long before it is written.
pub const NAP: Duration = Duration::from_millis(10);

/// Queued bytes at which a download wakes the writer before its nap ends: a burst of large
/// bodies is written at once, long before downloads would wait for [`BUDGET`].
pub const WAKE_AT: usize = 4 * 1024 * 1024;

/// Encoded bytes gathered before they are written (always whole records): fewer, larger
/// writes, and at most this much written late by a batch.
const WRITE_AT: usize = 1024 * 1024;

/// Where and how a crawl's WARC files are written.
#[derive(Debug, Clone)]
pub struct WarcConfig {
    /// The first file's path before its serial number: placeholders expanded, relative to
    /// the working directory unless absolute.
    pub path: PathBuf,
    /// Size at which a file is closed and the next started (`warc_max_size`).
    pub max_size: u64,
    /// The `warcinfo` fields: software, format, the crawl's settings (redacted).
    pub info: Vec<(String, String)>,
}

impl WarcConfig {
    /// The configuration the settings ask for (`None` without `warc`): `%(name)s` is
    /// `spider`, `%(time)s` is `started`; the `warcinfo` names this crawler and lists every
    /// setting, secrets shown as `***`.
    pub fn from_settings(
        settings: &Settings,
        spider: &str,
        started: SystemTime,
    ) -> Result<Option<Self>> {
        let Some(pattern) = settings.warc.as_deref() else {
            return Ok(None);
        };
        let path = PathBuf::from(crawler_core::expand_feed_path(pattern, spider, started)?);
        let mut info = vec![
            (
                "software".to_owned(),
                format!(
                    "crawler/{} (Rust; crawler-engine WARC writer)",
                    env!("CARGO_PKG_VERSION")
                ),
            ),
            ("format".to_owned(), "WARC File Format 1.1".to_owned()),
            (
                "conformsTo".to_owned(),
                "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"
                    .to_owned(),
            ),
            ("isPartOf".to_owned(), spider.to_owned()),
            (
                "robots".to_owned(),
                if settings.obey_robots {
                    "classic"
                } else {
                    "ignore"
                }
                .to_owned(),
            ),
            (
                "http-header-user-agent".to_owned(),
                crawler_core::redact::redact_text(&settings.user_agent).into_owned(),
            ),
        ];
        for (key, value) in settings.to_map()? {
            let text = match &value {
                // `[[hosts]]` rules and other tables: their JSON, on one line.
                serde_json::Value::Array(items) if items.iter().any(|i| i.is_object()) => {
                    value.to_string()
                }
                other => crawler_core::settings_text::display_value(other),
            };
            info.push((
                format!("crawler-setting-{key}"),
                crawler_core::redact::redact_setting(&key, &text),
            ));
        }
        Ok(Some(Self {
            path,
            max_size: settings.warc_max_size,
            info,
        }))
    }
}

/// The largest encoding buffer kept between batches: a batch of pages fits, a large file's
/// body is not held for the rest of the crawl.
const KEPT_BUFFER: usize = 2 * WRITE_AT;

/// What the writer thread is sent.
enum Msg {
    /// An exchange, with the share of [`BUDGET`] it holds until written.
    Exchange(Box<Exchange>, OwnedSemaphorePermit),
    /// Close the file and report.
    Close(oneshot::Sender<Result<WarcSummary>>),
}

/// What a closed writer wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WarcSummary {
    /// Records written, warcinfo records included.
    pub records: u64,
    /// The files written, in order.
    pub files: Vec<PathBuf>,
}

/// The crawl's WARC writer: a thread writing what its [`tap`](WarcWriter::tap) is handed.
pub struct WarcWriter {
    tx: mpsc::Sender<Msg>,
    budget: Arc<Semaphore>,
    records: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WarcWriter {
    /// Open the first file (so a bad path fails before the first request) and start the
    /// writer thread.
    pub fn open(config: WarcConfig) -> Result<Self> {
        let records = Arc::new(AtomicU64::new(0));
        let mut files = Files::new(config, Arc::clone(&records));
        files.open_next()?;
        let (tx, rx) = mpsc::channel();
        let writer = std::thread::Builder::new()
            .name("warc-writer".to_owned())
            .spawn(move || files.run(rx))
            .map_err(|e| {
                Error::new(ErrorKind::Io, "cannot start the WARC writer").with_source(e)
            })?;
        Ok(Self {
            tx,
            budget: Arc::new(Semaphore::new(BUDGET)),
            records,
            thread: Some(writer),
        })
    }

    /// The tap to give the downloader.
    pub fn tap(&self) -> Arc<dyn ExchangeTap> {
        Arc::new(Tap {
            tx: self.tx.clone(),
            budget: Arc::clone(&self.budget),
            writer: self.thread.as_ref().map(|t| t.thread().clone()),
        })
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records.load(Ordering::Relaxed)
    }

    /// Write what is queued, close (and sync) the file and stop the thread. Exchanges
    /// handed over later are not written.
    pub async fn close(mut self) -> Result<WarcSummary> {
        let (reply, answer) = oneshot::channel();
        self.budget.close();
        if self.tx.send(Msg::Close(reply)).is_err() {
            return Err(Error::msg("the WARC writer stopped early"));
        }
        if let Some(thread) = &self.thread {
            thread.thread().unpark();
        }
        let summary = answer
            .await
            .map_err(|_| Error::msg("the WARC writer stopped before closing its file"))?;
        if let Some(thread) = self.thread.take() {
            // It has replied: what is left is returning.
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        summary
    }
}

/// The [`ExchangeTap`] of a [`WarcWriter`].
struct Tap {
    tx: mpsc::Sender<Msg>,
    budget: Arc<Semaphore>,
    /// The writer thread, woken when [`WAKE_AT`] bytes wait.
    writer: Option<std::thread::Thread>,
}

impl ExchangeTap for Tap {
    fn record(&self, exchange: Exchange) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // At least a little per exchange, so many empty ones are bounded too; at most
            // the whole budget, so one large body still goes through.
            let cost = (exchange.size() + 512).min(BUDGET) as u32;
            let Ok(permit) = Arc::clone(&self.budget).acquire_many_owned(cost).await else {
                tracing::debug!(url = %exchange.url, "WARC writer closed; exchange not archived");
                return;
            };
            let _ = self.tx.send(Msg::Exchange(Box::new(exchange), permit));
            if BUDGET - self.budget.available_permits() >= WAKE_AT
                && let Some(writer) = &self.writer
            {
                writer.unpark();
            }
        })
    }
}

/// The thread's side: the current file and how to open the next.
struct Files {
    config: WarcConfig,
    /// The records' encoding (one deflate state for the whole file set).
    encoder: record::Encoder,
    /// Encoded records not written yet (whole records only), reused between batches.
    buffer: Vec<u8>,
    /// How many records `buffer` holds.
    buffered: u64,
    /// An exchange's two records, their buffers reused from one exchange to the next.
    records_scratch: [record::Record; 2],
    serial: u32,
    current: Option<Current>,
    records: Arc<AtomicU64>,
    written: Vec<PathBuf>,
    /// The first write error: nothing more is written after it.
    failed: Option<Error>,
}

struct Current {
    file: File,
    /// Bytes written and encoded for this file.
    size: u64,
    warcinfo_id: record::RecordId,
}

impl Files {
    fn new(config: WarcConfig, records: Arc<AtomicU64>) -> Self {
        let gzip = config
            .path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
        Self {
            config,
            encoder: record::Encoder::new(gzip),
            buffer: Vec::new(),
            buffered: 0,
            records_scratch: [record::Record::reusable(), record::Record::reusable()],
            serial: 0,
            current: None,
            records,
            written: Vec::new(),
            failed: None,
        }
    }

    /// Two empty records, holding no buffer.
    fn no_records() -> [record::Record; 2] {
        let empty = || record::Record {
            fields: Vec::new(),
            head: Vec::new(),
            payload: bytes::Bytes::new(),
            payload_digest: false,
        };
        [empty(), empty()]
    }

    /// Take what is queued, write it, sleep; until closed or every sender is gone.
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        // The budget held by what is encoded but not written yet, as one permit.
        let mut held: Option<OwnedSemaphorePermit> = None;
        loop {
            match rx.try_recv() {
                Ok(Msg::Exchange(exchange, permit)) => {
                    if self.failed.is_none()
                        && let Err(e) = self.write(*exchange)
                    {
                        tracing::error!("WARC writing stopped: {e}");
                        self.failed = Some(e);
                    }
                    match held.as_mut() {
                        Some(h) => h.merge(permit),
                        None => held = Some(permit),
                    }
                    if self.buffer.len() >= WRITE_AT {
                        self.flush_or_stop();
                        held = None;
                    }
                }
                Ok(Msg::Close(reply)) => {
                    self.flush_or_stop();
                    drop(held.take());
                    let closed = self.close_current();
                    let result = match self.failed.take() {
                        Some(e) => Err(e),
                        None => closed.map(|()| WarcSummary {
                            records: self.records.load(Ordering::Relaxed),
                            files: std::mem::take(&mut self.written),
                        }),
                    };
                    let _ = reply.send(result);
                    return;
                }
                Err(mpsc::TryRecvError::Empty) => {
                    self.flush_or_stop();
                    drop(held.take());
                    std::thread::park_timeout(NAP);
                }
                Err(mpsc::TryRecvError::Disconnected) => {
                    // Every sender gone without a close (the crawl was dropped): still write
                    // what is encoded and sync the file.
                    self.flush_or_stop();
                    let _ = self.close_current();
                    return;
                }
            }
        }
    }

    /// [`flush`](Self::flush), a failure kept as the writer's first error.
    fn flush_or_stop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::error!("WARC writing stopped: {e}");
            self.failed.get_or_insert(e);
        }
    }

    /// Write the encoded records to the current file, in one write.
    fn flush(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let written = match self.current.as_mut() {
            Some(current) => current.file.write_all(&self.buffer),
            None => Err(std::io::Error::other("no WARC file open")),
        };
        self.buffer.clear();
        if self.buffer.capacity() > KEPT_BUFFER {
            // One large body does not keep its buffer for the rest of the crawl.
            self.buffer = Vec::new();
        }
        let records = std::mem::take(&mut self.buffered);
        written.map_err(|e| {
            Error::new(ErrorKind::Io, "cannot write to the WARC file").with_source(e)
        })?;
        self.records.fetch_add(records, Ordering::Relaxed);
        Ok(())
    }

    /// The path of serial `n`: the serial goes before `.warc.gz` / `.warc` (or before the
    /// extension, or at the end).
    fn path_of(&self, n: u32) -> PathBuf {
        let path = &self.config.path;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let lower = name.to_ascii_lowercase();
        let cut = [".warc.gz", ".warc"]
            .iter()
            .find_map(|ext| lower.ends_with(ext).then(|| name.len() - ext.len()))
            .or_else(|| name.rfind('.'))
            .unwrap_or(name.len());
        let (stem, ext) = name.split_at(cut);
        path.with_file_name(format!("{stem}-{n:05}{ext}"))
    }

    /// Open the next file that does not exist yet (an earlier run's files are never
    /// overwritten) and write its warcinfo record.
    fn open_next(&mut self) -> Result<()> {
        let io = |path: &Path, e: std::io::Error| {
            Error::new(
                ErrorKind::Io,
                format!("cannot write the WARC file {}", path.display()),
            )
            .with_source(e)
        };
        loop {
            let path = self.path_of(self.serial);
            self.serial += 1;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| io(&path, e))?;
            }
            let file = match File::options().write(true).create_new(true).open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io(&path, e)),
            };
            let id = record::record_id();
            let filename = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            self.current = Some(Current {
                file,
                size: 0,
                warcinfo_id: id,
            });
            self.written.push(path.clone());
            let info = record::warcinfo(&id, &filename, &self.config.info);
            self.append(&[info]).map_err(|e| io(&path, e))?;
            // The warcinfo is on disk as soon as its file exists.
            return self.flush();
        }
    }

    /// Encode records for the current file (written by the next [`flush`](Self::flush)).
    fn append(&mut self, records: &[record::Record]) -> std::io::Result<()> {
        let Some(current) = self.current.as_mut() else {
            return Err(std::io::Error::other("no WARC file open"));
        };
        let before = self.buffer.len();
        for r in records {
            self.encoder.append(r, &mut self.buffer)?;
        }
        current.size += (self.buffer.len() - before) as u64;
        self.buffered += records.len() as u64;
        Ok(())
    }

    /// One exchange's records, for the current file; the file is closed once it reaches the
    /// size limit, and the next one opened for the next exchange.
    fn write(&mut self, exchange: Exchange) -> Result<()> {
        if self.current.is_none() {
            self.open_next()?;
        }
        let Some(id) = self.current.as_ref().map(|c| c.warcinfo_id) else {
            return Err(Error::msg("no WARC file open"));
        };
        let mut records = std::mem::replace(&mut self.records_scratch, Self::no_records());
        record::exchange_records(exchange, &id, &mut records);
        let appended = self.append(&records);
        // The bodies go now, the buffers stay for the next exchange.
        for r in &mut records {
            r.payload = bytes::Bytes::new();
        }
        self.records_scratch = records;
        appended.map_err(|e| {
            Error::new(ErrorKind::Io, "cannot write to the WARC file").with_source(e)
        })?;
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.size >= self.config.max_size)
        {
            self.flush()?;
            self.close_current()?;
        }
        Ok(())
    }

    /// Sync and close the current file.
    fn close_current(&mut self) -> Result<()> {
        match self.current.take() {
            Some(c) => c
                .file
                .sync_all()
                .map_err(|e| Error::new(ErrorKind::Io, "cannot sync the WARC file").with_source(e)),
            None => Ok(()),
        }
    }
}
