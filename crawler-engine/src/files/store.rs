//! The content-addressed store of the files pipeline: `full/<SHA-256>.<ext>` (the same bytes
//! stored once, whatever URL served them), thumbnails in `thumbs/<name>/<SHA-256>.jpg`, and
//! `index.jsonl`, one line per URL fetched (its file, when, its validators); the last line
//! of a URL wins when the store is opened again.
//!
//! In a directory, a file is written to a temporary name in its directory and renamed, so a
//! crash never leaves a partial file under a content name; an index line is appended after
//! its file, so a crash between the two costs one download again, never a line naming a
//! missing file. A torn last line (a crash in the middle of one) is skipped when the index
//! is read.
//!
//! In object storage (`s3://bucket/prefix`, ...) the same names go under the prefix,
//! through the feeds' uploader (an object appears whole or not at all). Each content name
//! is looked up (HEAD) before it is uploaded, once per crawl whatever the number of URLs
//! or items naming it (concurrent stores of the same bytes wait for the first), so the
//! same bytes go up once. Objects cannot be appended to: the index is read when the store
//! opens and written whole when it closes; a crawl killed before that loses only its
//! index lines, which costs the next crawl downloads (never uploads: the content is
//! found by its HEAD).

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use crawler_core::{Error, ErrorKind, Result, Settings};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

use super::FileRecord;
use crate::feed_store::ObjectTarget;

const INDEX: &str = "index.jsonl";

/// What the store knows of one URL.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Entry {
    pub(super) url: String,
    pub(super) path: String,
    pub(super) checksum: String,
    /// When it was last fetched or confirmed (a 304), seconds since the Unix epoch.
    pub(super) fetched: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) last_modified: Option<String>,
}

impl Entry {
    /// Whether the copy fetched at `fetched` is still fresh at `now`.
    pub(super) fn fresh(&self, now: SystemTime, expires: Duration) -> bool {
        unix_secs(now) < self.fetched.saturating_add(expires.as_secs())
    }

    pub(super) fn record(&self, status: &str) -> FileRecord {
        FileRecord {
            url: self.url.clone(),
            path: self.path.clone(),
            checksum: self.checksum.clone(),
            status: status.to_owned(),
        }
    }
}

/// Where a body went.
pub(super) struct Stored {
    pub(super) path: String,
    pub(super) checksum: String,
}

/// Where the store keeps its files.
enum Backend {
    /// A local directory, and its index file, appended to.
    Dir {
        root: PathBuf,
        index: Arc<Mutex<std::fs::File>>,
    },
    /// Objects under `base` (`s3://bucket/prefix`, no trailing slash).
    Objects {
        base: String,
        target: Arc<ObjectTarget>,
        /// Content names known to be in the bucket (found, or uploaded by this crawl), each
        /// settled once: a second store of the same bytes waits for the first.
        present: Mutex<HashMap<String, Arc<OnceCell<()>>>>,
    },
}

pub(super) struct Store {
    backend: Backend,
    entries: Mutex<HashMap<String, Entry>>,
    /// Objects uploaded, and content found already stored (object storage only).
    pub(super) uploads: AtomicU64,
    pub(super) found: AtomicU64,
}

fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("cannot {what} {}: {e}", path.display()),
    )
}

fn joined(e: tokio::task::JoinError) -> Error {
    Error::new(ErrorKind::Other, e.to_string())
}

/// The index's records, by URL (the last line of a URL wins); lines that are not records
/// (a crash in the middle of one) are skipped with a warning.
fn read_index(
    lines: impl Iterator<Item = std::io::Result<String>>,
    name: &str,
) -> Result<HashMap<String, Entry>> {
    let mut entries = HashMap::new();
    let mut torn = 0u64;
    for line in lines {
        let line =
            line.map_err(|e| Error::new(ErrorKind::Io, format!("cannot read {name}: {e}")))?;
        match serde_json::from_str::<Entry>(&line) {
            Ok(e) => {
                entries.insert(e.url.clone(), e);
            }
            Err(_) if !line.trim().is_empty() => torn += 1,
            Err(_) => {}
        }
    }
    if torn > 0 {
        tracing::warn!(
            index = name,
            lines = torn,
            "index lines that are not records were skipped (a crash while writing one)"
        );
    }
    Ok(entries)
}

impl Store {
    /// Open (creating) the store at `location` (a directory, a `file://` URL or an object
    /// URL) and read its index. Blocking; inside the runtime (an object store's client is
    /// built here, `settings` giving its options).
    pub(super) fn open(location: &str, settings: &Settings) -> Result<Self> {
        if crawler_core::object_scheme(location).is_some() {
            let base = location.trim_end_matches('/').to_owned();
            let target = ObjectTarget::new(&base, settings)?;
            let index_url = format!("{base}/{INDEX}");
            let entries = match target.read(&index_url)? {
                Some(bytes) => read_index(std::io::BufReader::new(&bytes[..]).lines(), &index_url)?,
                None => HashMap::new(),
            };
            return Ok(Self {
                backend: Backend::Objects {
                    base,
                    target: Arc::new(target),
                    present: Mutex::new(HashMap::new()),
                },
                entries: Mutex::new(entries),
                uploads: AtomicU64::new(0),
                found: AtomicU64::new(0),
            });
        }
        let root = PathBuf::from(crawler_core::local_location(location));
        let full = root.join("full");
        std::fs::create_dir_all(&full).map_err(|e| io("create", &full, e))?;
        let index_path = root.join(INDEX);
        let entries = match std::fs::File::open(&index_path) {
            Ok(file) => read_index(
                std::io::BufReader::new(file).lines(),
                &index_path.display().to_string(),
            )?,
            Err(_) => HashMap::new(),
        };
        let index = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&index_path)
            .map_err(|e| io("open", &index_path, e))?;
        Ok(Self {
            backend: Backend::Dir {
                root,
                index: Arc::new(Mutex::new(index)),
            },
            entries: Mutex::new(entries),
            uploads: AtomicU64::new(0),
            found: AtomicU64::new(0),
        })
    }

    /// Whether the store is object storage.
    pub(super) fn is_objects(&self) -> bool {
        matches!(self.backend, Backend::Objects { .. })
    }

    pub(super) fn lookup(&self, url: &str) -> Option<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(url)
            .cloned()
    }

    /// Whether the stored file `path` (relative to the store) is there (an object: looked
    /// up once per crawl).
    pub(super) async fn has(&self, path: &str) -> bool {
        match &self.backend {
            Backend::Dir { root, .. } => root.join(path).is_file(),
            Backend::Objects { .. } => self.settle(path, None).await.unwrap_or(false),
        }
    }

    /// An object's content name `path`: whether it is in the bucket, looked up with a HEAD
    /// the first time it is asked for in this crawl; with `bytes`, uploaded when it is not
    /// (and then `true`). Concurrent calls for one name wait for the first.
    async fn settle(&self, path: &str, bytes: Option<Bytes>) -> Result<bool> {
        let Backend::Objects {
            base,
            target,
            present,
        } = &self.backend
        else {
            return Ok(false);
        };
        let cell = {
            let mut present = present.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(present.entry(path.to_owned()).or_default())
        };
        if cell.initialized() {
            return Ok(true);
        }
        let url = format!("{base}/{path}");
        let settled = cell
            .get_or_try_init(|| async {
                let target = Arc::clone(target);
                let store = bytes.is_some();
                let looked = tokio::task::spawn_blocking(move || {
                    if target.exists(&url)? {
                        return Ok((true, false));
                    }
                    match bytes {
                        Some(b) => target.put(&url, &b).map(|()| (true, true)),
                        None => Ok((false, false)),
                    }
                })
                .await;
                let (there, uploaded) = looked.map_err(joined).and_then(|r| r).map_err(Some)?;
                if uploaded {
                    self.uploads.fetch_add(1, Ordering::Relaxed);
                } else if there && store {
                    self.found.fetch_add(1, Ordering::Relaxed);
                }
                // Absent and not stored: the cell stays empty, a later store settles it.
                if there { Ok(()) } else { Err(None) }
            })
            .await;
        match settled {
            Ok(()) => Ok(true),
            Err(None) => Ok(false),
            Err(Some(e)) => Err(e),
        }
    }

    /// Store `body` under its content's hash (once), with its thumbnails.
    pub(super) async fn put(
        &self,
        body: Bytes,
        extension: String,
        thumbs: Vec<(String, Vec<u8>)>,
    ) -> Result<Stored> {
        let hashed = body.clone();
        let checksum = tokio::task::spawn_blocking(move || {
            data_encoding::HEXLOWER.encode(&Sha256::digest(&hashed))
        })
        .await
        .map_err(joined)?;
        let name = if extension.is_empty() {
            checksum.clone()
        } else {
            format!("{checksum}.{extension}")
        };
        let path = format!("full/{name}");
        match &self.backend {
            Backend::Dir { root, .. } => {
                let root = root.clone();
                let file = path.clone();
                let sum = checksum.clone();
                tokio::task::spawn_blocking(move || {
                    write_once(&root.join(&file), &body)?;
                    for (thumb, jpeg) in thumbs {
                        let dir = root.join("thumbs").join(&thumb);
                        std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
                        write_once(&dir.join(format!("{sum}.jpg")), &jpeg)?;
                    }
                    Ok::<_, Error>(())
                })
                .await
                .map_err(joined)??;
            }
            Backend::Objects { .. } => {
                self.settle(&path, Some(body)).await?;
                for (thumb, jpeg) in thumbs {
                    let thumb = format!("thumbs/{thumb}/{checksum}.jpg");
                    self.settle(&thumb, Some(Bytes::from(jpeg))).await?;
                }
            }
        }
        Ok(Stored { path, checksum })
    }

    /// Record `entry` (in memory, and in a directory's index; an object store's index is
    /// written by [`Store::close`]).
    pub(super) async fn remember(&self, entry: Entry) -> Result<()> {
        let line = serde_json::to_string(&entry)
            .map_err(|e| Error::new(ErrorKind::Other, e.to_string()))?;
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(entry.url.clone(), entry);
        let Backend::Dir { root, index } = &self.backend else {
            return Ok(());
        };
        let index = Arc::clone(index);
        let path = root.join(INDEX);
        tokio::task::spawn_blocking(move || {
            let mut f = index.lock().unwrap_or_else(|p| p.into_inner());
            // One write per line: lines of concurrent downloads never interleave.
            f.write_all(format!("{line}\n").as_bytes())
                .map_err(|e| io("write", &path, e))
        })
        .await
        .map_err(joined)?
    }

    /// Write an object store's index, whole (its URLs sorted, so a store's index reads
    /// the same from one crawl to the next). A directory's is already on disk.
    pub(super) async fn close(&self) -> Result<()> {
        let Backend::Objects { base, target, .. } = &self.backend else {
            return Ok(());
        };
        let mut entries: Vec<Entry> = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        entries.sort_by(|a, b| a.url.cmp(&b.url));
        let mut text = String::new();
        for e in &entries {
            let line = serde_json::to_string(e)
                .map_err(|e| Error::new(ErrorKind::Other, e.to_string()))?;
            text.push_str(&line);
            text.push('\n');
        }
        let target = Arc::clone(target);
        let url = format!("{base}/{INDEX}");
        tokio::task::spawn_blocking(move || target.put(&url, text.as_bytes()))
            .await
            .map_err(joined)?
    }
}

/// Write `bytes` at `path` unless a file is there (content-addressed: it holds the same
/// bytes), through a temporary name and a rename, synced first.
fn write_once(path: &Path, bytes: &[u8]) -> Result<()> {
    if path.is_file() {
        return Ok(());
    }
    let tmp = path.with_extension(format!("tmp-{}", rand::random::<u64>()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_data()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("write", path, e)
    })
}

/// Seconds since the Unix epoch.
pub(super) fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The extension a stored file gets: its URL's (letters and digits, at most five), else
/// one for its Content-Type, else none.
pub(super) fn extension(url: &str, content_type: Option<&str>) -> String {
    let path = url::Url::parse(url)
        .ok()
        .map(|u| u.path().to_owned())
        .unwrap_or_default();
    let last = path.rsplit('/').next().unwrap_or("");
    if let Some((_, ext)) = last.rsplit_once('.')
        && (1..=5).contains(&ext.len())
        && ext.chars().all(|c| c.is_ascii_alphanumeric())
    {
        return ext.to_ascii_lowercase();
    }
    let mime = content_type
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase())
        .unwrap_or_default();
    match mime.as_str() {
        "application/pdf" => "pdf",
        "image/jpeg" => "jpg",
        "image/png" => "png",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "text/csv" => "csv",
        "application/json" => "json",
        "application/zip" => "zip",
        "text/plain" => "txt",
        _ => "",
    }
    .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_come_from_the_url_then_the_content_type() {
        assert_eq!(extension("http://a.test/x/report.PDF", None), "pdf");
        assert_eq!(
            extension("http://a.test/x/file?id=3", Some("image/png")),
            "png"
        );
        assert_eq!(extension("http://a.test/x/a.verylongext", None), "");
        assert_eq!(
            extension("http://a.test/x/a.b-c", Some("text/csv; x=1")),
            "csv"
        );
    }

    #[tokio::test]
    async fn the_same_bytes_are_stored_once_and_the_index_survives_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap().to_owned();
        let store = Store::open(&root, &Settings::default()).unwrap();
        let a = store
            .put(Bytes::from_static(b"same"), "png".into(), vec![])
            .await
            .unwrap();
        let b = store
            .put(Bytes::from_static(b"same"), "png".into(), vec![])
            .await
            .unwrap();
        assert_eq!(a.path, b.path);
        // `printf same | sha256sum`
        assert_eq!(
            a.checksum,
            "0967115f2813a3541eaef77de9d9d5773f1c0c04314b0bbfe4ff3b3b1c55b5d5"
        );
        assert_eq!(a.path, format!("full/{}.png", a.checksum));
        let files: Vec<_> = std::fs::read_dir(dir.path().join("full"))
            .unwrap()
            .collect();
        assert_eq!(files.len(), 1, "one file for one content");
        store
            .remember(Entry {
                url: "http://a.test/1.png".into(),
                path: a.path.clone(),
                checksum: a.checksum.clone(),
                fetched: 10,
                etag: Some("\"v1\"".into()),
                last_modified: None,
            })
            .await
            .unwrap();
        drop(store);
        // A crash in the middle of a line.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(INDEX))
            .unwrap();
        f.write_all(b"{\"url\":\"http://a.te").unwrap();
        let store = Store::open(&root, &Settings::default()).unwrap();
        let e = store.lookup("http://a.test/1.png").expect("remembered");
        assert_eq!(e.etag.as_deref(), Some("\"v1\""));
        assert!(store.has(&e.path).await);
        assert!(e.fresh(
            SystemTime::UNIX_EPOCH + Duration::from_secs(15),
            Duration::from_secs(10)
        ));
        assert!(!e.fresh(
            SystemTime::UNIX_EPOCH + Duration::from_secs(20),
            Duration::from_secs(10)
        ));
    }
}
