//! The content-addressed store of the files pipeline: `full/<SHA-256>.<ext>` (the same bytes
//! stored once, whatever URL served them), thumbnails in `thumbs/<name>/<SHA-256>.jpg`, and
//! `index.jsonl`, one line per URL fetched (its file, when, its validators), appended; the
//! last line of a URL wins when the store is opened again.
//!
//! A file is written to a temporary name in its directory and renamed, so a crash never
//! leaves a partial file under a content name; an index line is written after its file,
//! so a crash between the two costs one download again, never a line naming a missing
//! file. A torn last line (a crash in the middle of one) is skipped when the index is read.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use crawler_core::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::FileRecord;

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

pub(super) struct Store {
    root: PathBuf,
    entries: Mutex<HashMap<String, Entry>>,
    index: Arc<Mutex<std::fs::File>>,
}

fn io(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Io,
        format!("cannot {what} {}: {e}", path.display()),
    )
}

impl Store {
    /// Open (creating) the store at `dir` and read its index. Blocking.
    pub(super) fn open(dir: &str) -> Result<Self> {
        let root = PathBuf::from(dir);
        let full = root.join("full");
        std::fs::create_dir_all(&full).map_err(|e| io("create", &full, e))?;
        let index_path = root.join(INDEX);
        let mut entries = HashMap::new();
        if let Ok(file) = std::fs::File::open(&index_path) {
            let mut torn = 0u64;
            for line in std::io::BufReader::new(file).lines() {
                let line = line.map_err(|e| io("read", &index_path, e))?;
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
                    index = %index_path.display(),
                    lines = torn,
                    "index lines that are not records were skipped (a crash while writing one)"
                );
            }
        }
        let index = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&index_path)
            .map_err(|e| io("open", &index_path, e))?;
        Ok(Self {
            root,
            entries: Mutex::new(entries),
            index: Arc::new(Mutex::new(index)),
        })
    }

    pub(super) fn lookup(&self, url: &str) -> Option<Entry> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(url)
            .cloned()
    }

    /// Whether the stored file `path` (relative to the store) is there.
    pub(super) fn has(&self, path: &str) -> bool {
        self.root.join(path).is_file()
    }

    /// Store `body` under its content's hash (once), with its thumbnails.
    pub(super) async fn put(
        &self,
        body: Bytes,
        extension: String,
        thumbs: Vec<(String, Vec<u8>)>,
    ) -> Result<Stored> {
        let root = self.root.clone();
        tokio::task::spawn_blocking(move || {
            let checksum = data_encoding::HEXLOWER.encode(&Sha256::digest(&body));
            let name = if extension.is_empty() {
                checksum.clone()
            } else {
                format!("{checksum}.{extension}")
            };
            let path = format!("full/{name}");
            write_once(&root.join(&path), &body)?;
            for (thumb, jpeg) in thumbs {
                let dir = root.join("thumbs").join(&thumb);
                std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
                write_once(&dir.join(format!("{checksum}.jpg")), &jpeg)?;
            }
            Ok(Stored { path, checksum })
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Other, e.to_string()))?
    }

    /// Record `entry` (in memory and in the index).
    pub(super) async fn remember(&self, entry: Entry) -> Result<()> {
        let line = serde_json::to_string(&entry)
            .map_err(|e| Error::new(ErrorKind::Other, e.to_string()))?;
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(entry.url.clone(), entry);
        let index = Arc::clone(&self.index);
        let path = self.root.join(INDEX);
        tokio::task::spawn_blocking(move || {
            let mut f = index.lock().unwrap_or_else(|p| p.into_inner());
            // One write per line: lines of concurrent downloads never interleave.
            f.write_all(format!("{line}\n").as_bytes())
                .map_err(|e| io("write", &path, e))
        })
        .await
        .map_err(|e| Error::new(ErrorKind::Other, e.to_string()))?
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
        let store = Store::open(&root).unwrap();
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
        let store = Store::open(&root).unwrap();
        let e = store.lookup("http://a.test/1.png").expect("remembered");
        assert_eq!(e.etag.as_deref(), Some("\"v1\""));
        assert!(store.has(&e.path));
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
