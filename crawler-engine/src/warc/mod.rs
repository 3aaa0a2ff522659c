//! WARC 1.1 archives of a crawl (the `warc` setting): every exchange the downloader hands
//! over (see [`ExchangeTap`]) becomes a `request` and a `response` record (a `revisit` for a
//! 304 to a conditional request), in files that each open with a `warcinfo` record naming
//! the crawler and its settings, secrets redacted.
//!
//! Records are written on a thread of their own, fed through a channel whose contents are
//! bounded in bytes ([`BUDGET`]): a download waits when the writer is that far behind, so
//! neither compression nor the disk runs on the async runtime and memory stays bounded.
//! Each record is compressed as a gzip member of its own (`record.rs`: one deflate state
//! reset between members, short records stored) and an exchange's records are handed to
//! the operating system whole in one write, so a crash leaves every complete record
//! readable; a file reaching `warc_max_size`
//! is closed (synced) and the next one opened with the next serial number.
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
use std::time::SystemTime;

use crawler_core::{BoxFuture, Error, ErrorKind, Exchange, ExchangeTap, Result, Settings};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

pub use record::{ORIGINAL_CONTENT_LENGTH, ORIGINAL_TRANSFER_ENCODING, SERVER_NOT_MODIFIED};
pub use replay::WarcArchive;

/// Bytes of exchanges that may wait for the writer before downloads wait for it.
pub const BUDGET: usize = 64 * 1024 * 1024;

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

/// The largest encoding buffer kept between exchanges: pages fit, a large file's body is
/// not held for the rest of the crawl.
const KEPT_BUFFER: usize = 1024 * 1024;

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
        let thread = std::thread::Builder::new()
            .name("warc-writer".to_owned())
            .spawn(move || files.run(rx))
            .map_err(|e| {
                Error::new(ErrorKind::Io, "cannot start the WARC writer").with_source(e)
            })?;
        Ok(Self {
            tx,
            budget: Arc::new(Semaphore::new(BUDGET)),
            records,
            thread: Some(thread),
        })
    }

    /// The tap to give the downloader.
    pub fn tap(&self) -> Arc<dyn ExchangeTap> {
        Arc::new(Tap {
            tx: self.tx.clone(),
            budget: Arc::clone(&self.budget),
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
        })
    }
}

/// The thread's side: the current file and how to open the next.
struct Files {
    config: WarcConfig,
    /// The records' encoding (one deflate state for the whole file set).
    encoder: record::Encoder,
    /// An exchange's encoded records, reused between exchanges.
    buffer: Vec<u8>,
    serial: u32,
    current: Option<Current>,
    records: Arc<AtomicU64>,
    written: Vec<PathBuf>,
    /// The first write error: nothing more is written after it.
    failed: Option<Error>,
}

struct Current {
    file: File,
    size: u64,
    warcinfo_id: String,
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
            serial: 0,
            current: None,
            records,
            written: Vec::new(),
            failed: None,
        }
    }

    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        while let Ok(msg) = rx.recv() {
            match msg {
                Msg::Exchange(exchange, permit) => {
                    if self.failed.is_none()
                        && let Err(e) = self.write(*exchange)
                    {
                        tracing::error!("WARC writing stopped: {e}");
                        self.failed = Some(e);
                    }
                    drop(permit);
                }
                Msg::Close(reply) => {
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
            }
        }
        // Every sender gone without a close (the crawl was dropped): still sync the file.
        let _ = self.close_current();
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
                warcinfo_id: id.clone(),
            });
            self.written.push(path.clone());
            let info = record::warcinfo(&id, &filename, &self.config.info);
            return self.append(&[info]).map_err(|e| io(&path, e));
        }
    }

    /// Write records to the current file, all whole in one write (an exchange's request
    /// and response go together).
    fn append(&mut self, records: &[record::Record]) -> std::io::Result<()> {
        let Some(current) = self.current.as_mut() else {
            return Err(std::io::Error::other("no WARC file open"));
        };
        self.buffer.clear();
        for r in records {
            self.encoder.append(r, &mut self.buffer)?;
        }
        current.file.write_all(&self.buffer)?;
        current.size += self.buffer.len() as u64;
        self.records
            .fetch_add(records.len() as u64, Ordering::Relaxed);
        if self.buffer.capacity() > KEPT_BUFFER {
            // One large body does not keep its buffer for the rest of the crawl.
            self.buffer = Vec::new();
        }
        Ok(())
    }

    /// One exchange's records, in the current file; the file is closed once it reaches the
    /// size limit, and the next one opened for the next exchange.
    fn write(&mut self, exchange: Exchange) -> Result<()> {
        if self.current.is_none() {
            self.open_next()?;
        }
        let id = self
            .current
            .as_ref()
            .map(|c| c.warcinfo_id.clone())
            .unwrap_or_default();
        let records = record::exchange_records(exchange, &id);
        self.append(&records).map_err(|e| {
            Error::new(ErrorKind::Io, "cannot write to the WARC file").with_source(e)
        })?;
        if self
            .current
            .as_ref()
            .is_some_and(|c| c.size >= self.config.max_size)
        {
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
