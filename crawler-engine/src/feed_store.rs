//! Feeds, the failures file and the files store to object storage (`s3://`, `gs://`,
//! `az://`) through the `object_store` crate: the one uploader of the crawl.
//!
//! An object is immutable and appears whole or not at all: a batch's bytes are buffered up
//! to one part (`feed_upload_part_size`, 8 MiB by default); a batch that stays smaller is
//! sent in one PUT when it closes, a larger one as a multipart upload whose parts leave as
//! they fill (at most two in flight, so memory stays bounded whatever the batch's size) and
//! which is completed only when the batch closes. An error aborts the upload; a killed
//! crawler never completes it, so no partial object is ever visible (the parts it left
//! are invisible, and a bucket lifecycle rule `AbortIncompleteMultipartUpload` deletes
//! them).
//!
//! Every call blocks the calling thread on the runtime: it runs on the feed writer's
//! thread or a blocking task (`spawn_blocking`), never on an async worker.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use crawler_core::{Error, ErrorKind, Result, Settings};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use tokio::runtime::Handle;

/// Parts in flight at once per upload: one being filled while one is sent keeps the feed
/// writer busy without holding more than two parts in memory.
const PARTS_IN_FLIGHT: usize = 2;

/// The size of the reads a local file is uploaded from: the upload gathers them into parts.
const FILE_READ: usize = 64 * 1024;

/// Where objects go: one bucket (or container) and the client for it.
pub(crate) struct ObjectTarget {
    store: Arc<dyn ObjectStore>,
    part_size: usize,
    runtime: Handle,
}

/// An error about the object at `url`.
fn object_error(url: &str, what: &str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    let message = crawler_core::redact::scrub(&e.to_string()).into_owned();
    Error::new(
        ErrorKind::Io,
        format!("cannot {what} object '{url}': {message}"),
    )
}

/// The bucket and key of an object URL: `s3://bucket/dir/key` gives `dir/key`.
fn key_of(url: &str) -> Result<ObjectPath> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let key = rest.split_once('/').map_or("", |(_, key)| key);
    ObjectPath::parse(key).map_err(|e| {
        Error::new(
            ErrorKind::Settings,
            format!("object '{url}' has an invalid key '{key}': {e}"),
        )
    })
}

impl ObjectTarget {
    /// A client for the bucket `url` (an expanded feed URL) names, configured from
    /// `settings` and the provider's usual environment variables (`AWS_*`, `GOOGLE_*`,
    /// `AZURE_*`). No request is made yet: a bad bucket or credentials fail the first
    /// upload.
    pub(crate) fn new(url: &str, settings: &Settings) -> Result<Self> {
        // object_store's HTTP client is the tree's reqwest, built without a bundled TLS
        // provider: the downloader installs the same one, this covers a crawl without it.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Its errors may quote them: scrub the environment's secrets too.
        crawler_core::redact::register(
            crawler_core::redact::SECRET_ENV_VARS
                .iter()
                .filter_map(|var| std::env::var(var).ok()),
        );
        let scheme = crawler_core::object_scheme(url).unwrap_or_default();
        let bad = |e: object_store::Error| {
            Error::new(
                ErrorKind::Settings,
                format!(
                    "cannot use object '{url}': {}",
                    crawler_core::redact::scrub(&e.to_string())
                ),
            )
        };
        let store: Arc<dyn ObjectStore> = match scheme.as_str() {
            "s3" | "s3a" => {
                let mut b = object_store::aws::AmazonS3Builder::from_env().with_url(url);
                if let Some(endpoint) = settings.feed_s3_endpoint.as_deref() {
                    // An endpoint set by hand may be a local server on plain HTTP.
                    b = b
                        .with_endpoint(endpoint)
                        .with_allow_http(endpoint.starts_with("http://"));
                } else if let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") {
                    b = b
                        .with_allow_http(endpoint.starts_with("http://"))
                        .with_endpoint(endpoint);
                }
                if let Some(region) = settings.feed_s3_region.as_deref() {
                    b = b.with_region(region);
                } else if std::env::var_os("AWS_REGION").is_none()
                    && std::env::var_os("AWS_DEFAULT_REGION").is_none()
                {
                    b = b.with_region("us-east-1");
                }
                if let Some(id) = settings.feed_s3_access_key_id.as_deref() {
                    b = b.with_access_key_id(id);
                }
                if let Some(key) = settings.feed_s3_secret_access_key.as_deref() {
                    b = b.with_secret_access_key(key);
                }
                Arc::new(b.build().map_err(bad)?)
            }
            "gs" => Arc::new(
                object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(url)
                    .build()
                    .map_err(bad)?,
            ),
            _ => Arc::new(
                object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(url)
                    .build()
                    .map_err(bad)?,
            ),
        };
        Ok(Self {
            store,
            part_size: usize::try_from(settings.feed_upload_part_size).unwrap_or(usize::MAX),
            runtime: Handle::current(),
        })
    }

    /// Check that `url` names a valid object key, before any request.
    pub(crate) fn check_key(url: &str) -> Result<()> {
        key_of(url).map(|_| ())
    }

    /// The bytes of the object at `url`, or `None` when there is none.
    pub(crate) fn read(&self, url: &str) -> Result<Option<Bytes>> {
        let key = key_of(url)?;
        let got = self.runtime.block_on(async {
            match self.store.get(&key).await {
                Ok(found) => found.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        got.map_err(|e| object_error(url, "read", e))
    }

    /// Write `bytes` as the object at `url`, whole or not at all (one request under a
    /// part, else a multipart upload).
    pub(crate) fn put(&self, url: &str, bytes: &[u8]) -> Result<()> {
        let mut upload = self.create(url)?;
        upload.write(bytes)?;
        upload.finish()
    }

    /// Upload the local file at `path` as the object at `url`, as a feed batch is: in parts
    /// (at most [`PARTS_IN_FLIGHT`] in memory whatever the file's size), the object visible
    /// only once the last one is in. Returns the bytes sent.
    pub(crate) fn upload_file(&self, path: &Path, url: &str) -> Result<u64> {
        let cannot = |e: std::io::Error| {
            Error::new(
                ErrorKind::Io,
                format!("cannot read '{}' to upload it to '{url}'", path.display()),
            )
            .with_source(e)
        };
        let mut file = std::fs::File::open(path).map_err(cannot)?;
        let mut upload = self.create(url)?;
        let mut buf = vec![0u8; FILE_READ];
        let mut sent = 0u64;
        loop {
            let n = file.read(&mut buf).map_err(cannot)?;
            if n == 0 {
                break;
            }
            upload.write(&buf[..n])?;
            sent += n as u64;
        }
        upload.finish()?;
        Ok(sent)
    }

    /// Whether the object at `url` exists (complete: objects never show partly written).
    pub(crate) fn exists(&self, url: &str) -> Result<bool> {
        let key = key_of(url)?;
        match self.runtime.block_on(self.store.head(&key)) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(object_error(url, "look up", e)),
        }
    }

    /// Start writing the object at `url`; nothing is visible there until
    /// [`ObjectUpload::finish`].
    pub(crate) fn create(&self, url: &str) -> Result<ObjectUpload> {
        Ok(ObjectUpload {
            store: Arc::clone(&self.store),
            key: key_of(url)?,
            url: url.to_owned(),
            buf: Vec::new(),
            upload: None,
            part_size: self.part_size,
            runtime: self.runtime.clone(),
        })
    }
}

/// One object being written.
pub(crate) struct ObjectUpload {
    store: Arc<dyn ObjectStore>,
    key: ObjectPath,
    url: String,
    /// Bytes not yet handed to the upload: less than a part.
    buf: Vec<u8>,
    /// The multipart upload, started once the object outgrows one part.
    upload: Option<WriteMultipart>,
    part_size: usize,
    runtime: Handle,
}

impl ObjectUpload {
    /// The object's URL.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Add `bytes` to the object; a full part leaves for the server, waiting while
    /// [`PARTS_IN_FLIGHT`] are on their way.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() < self.part_size {
            return Ok(());
        }
        if self.upload.is_none() {
            let upload = self
                .runtime
                .block_on(self.store.put_multipart(&self.key))
                .map_err(|e| object_error(&self.url, "start uploading", e))?;
            self.upload = Some(WriteMultipart::new_with_chunk_size(upload, self.part_size));
        }
        let Some(upload) = self.upload.as_mut() else {
            return Ok(());
        };
        let full = self.buf.len() - self.buf.len() % self.part_size;
        let rest = self.buf.split_off(full);
        upload.put(Bytes::from(std::mem::replace(&mut self.buf, rest)));
        let waited = self
            .runtime
            .block_on(upload.wait_for_capacity(PARTS_IN_FLIGHT));
        if let Err(e) = waited {
            self.abort();
            return Err(object_error(&self.url, "upload", e));
        }
        Ok(())
    }

    /// Send what is left and make the object visible, whole. On an error the upload is
    /// aborted and no object appears.
    pub(crate) fn finish(mut self) -> Result<()> {
        let rest = Bytes::from(std::mem::take(&mut self.buf));
        let result = match self.upload.take() {
            // Small: one request, atomic as well.
            None => self
                .runtime
                .block_on(self.store.put(&self.key, PutPayload::from(rest)))
                .map(|_| ()),
            Some(mut upload) => {
                upload.put(rest);
                // `finish` aborts the upload itself when a part or the completion fails.
                self.runtime.block_on(upload.finish()).map(|_| ())
            }
        };
        result.map_err(|e| object_error(&self.url, "complete", e))
    }

    /// Give the object up: its parts are deleted, in the background.
    fn abort(&mut self) {
        if let Some(upload) = self.upload.take() {
            let url = self.url.clone();
            self.runtime.spawn(async move {
                if let Err(e) = upload.abort().await {
                    tracing::warn!(
                        object = %url,
                        "cannot abort an unfinished upload (a lifecycle rule removes its parts): {}",
                        crawler_core::redact::scrub(&e.to_string())
                    );
                }
            });
        }
    }
}

impl Drop for ObjectUpload {
    /// An upload dropped unfinished (the crawl stopped at once, or failed) is aborted, so
    /// its parts do not linger; the object never appears either way.
    fn drop(&mut self) {
        self.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_from_the_url_path() {
        assert_eq!(
            key_of("s3://bucket/dir/items-1.jsonl").unwrap().as_ref(),
            "dir/items-1.jsonl"
        );
        assert_eq!(key_of("gs://b/x.csv").unwrap().as_ref(), "x.csv");
        assert!(key_of("s3://bucket/a//b.jsonl").is_err());
    }
}
