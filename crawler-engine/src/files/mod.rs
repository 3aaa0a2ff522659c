//! The files and images pipelines (Scrapy's `FilesPipeline` and `ImagesPipeline`): items
//! name URLs in a field (`file_urls`, `image_urls`); each URL is fetched as a sub-request of
//! the crawl, so it waits for its host's slot (paced and held with the pages, whatever
//! host it is on), is gated by robots.txt and the address policy, retried, and counted in
//! `Stats::subrequests`; the body is stored once by its content's SHA-256 (in a directory,
//! or under an object storage prefix: `files_store = "s3://bucket/files"`), and the results
//! (`{url, path, checksum, status}`) are written into the item before the next stage sees
//! it.
//!
//! A URL is fetched at most once per crawl (items naming it while it downloads wait for
//! that download), and not at all while the stored copy is fresh (`files_expires`); an
//! expired one is asked for again with its validators, and a 304 keeps it. A file that
//! cannot be fetched is left out of the results (warned, counted), as in Scrapy: the item
//! goes on. Images are checked (minimum size, most pixels from the header before any
//! decoding) and thumbnailed off the async runtime.

mod image;
mod store;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use crawler_core::{
    Error, ErrorKind, Fetched, Pipeline, PipelineContext, Processed, Request, Result, Settings,
    SubRequests,
};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use tokio::sync::{OnceCell, Semaphore};

use self::image::ImageOptions;
use self::store::{Entry, Store};

/// Images decoded at once: each may take up to `images_max_pixels` times four bytes.
const DECODES_AT_ONCE: usize = 2;

/// `n` days.
fn days(n: u32) -> Duration {
    Duration::from_secs(u64::from(n) * 86_400)
}

/// One file an item named, stored: what the pipeline writes into the item's result field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// The URL the item named.
    pub url: String,
    /// Where the file is, relative to the store directory or object prefix
    /// (`full/<checksum>.<ext>`: with `files_store = "s3://bucket/files"`, the object
    /// `s3://bucket/files/full/<checksum>.<ext>`), as Scrapy's.
    pub path: String,
    /// The SHA-256 of the content, lowercase hexadecimal.
    pub checksum: String,
    /// `downloaded` (fetched now), or `uptodate` (the stored copy is fresh, or the server
    /// answered 304 to its validators).
    pub status: String,
}

/// Which of the two pipelines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Files,
    Images,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Files => "files",
            Kind::Images => "images",
        }
    }
}

/// The files pipeline, or the images pipeline: add it with `Crawl::pipeline`; its
/// settings are read from the crawl's (`files_*`, `images_*`) when the crawl starts.
pub struct FilesPipeline {
    kind: Kind,
    run: OnceLock<Arc<Run>>,
    /// Why the crawl must stop: the item type cannot take the results.
    close: Mutex<Option<String>>,
}

/// What counts of one pipeline's work.
#[derive(Debug, Default)]
struct Counts {
    downloaded: AtomicU64,
    uptodate: AtomicU64,
    failed: AtomicU64,
    refused_images: AtomicU64,
}

/// A pipeline attached to its crawl.
struct Run {
    kind: Kind,
    urls_field: String,
    result_field: String,
    expires: Duration,
    store_dir: String,
    /// The crawl's settings, for an object store's client (`feed_s3_*`).
    settings: Settings,
    image: Option<ImageOptions>,
    subrequests: SubRequests,
    store: OnceLock<Arc<Store>>,
    /// Every URL asked for in this crawl, with its result once known: a second item
    /// naming it waits for (or reuses) the first one's download.
    seen: Mutex<HashMap<String, Arc<OnceCell<Option<FileRecord>>>>>,
    decodes: Arc<Semaphore>,
    counts: Counts,
    /// Whether an item has shown that its type keeps the result field.
    type_checked: AtomicBool,
}

impl FilesPipeline {
    /// The files pipeline (`files_store`, `files_urls_field`, `files_result_field`,
    /// `files_expires`).
    pub fn files() -> Self {
        Self::new(Kind::Files)
    }

    /// The images pipeline (`images_store`, `images_*`): the files pipeline for images,
    /// which also refuses images under `images_min_width` x `images_min_height` or over
    /// `images_max_pixels`, and makes the thumbnails `images_thumbs` asks for.
    pub fn images() -> Self {
        Self::new(Kind::Images)
    }

    fn new(kind: Kind) -> Self {
        Self {
            kind,
            run: OnceLock::new(),
            close: Mutex::new(None),
        }
    }

    fn run(&self) -> Result<&Arc<Run>> {
        self.run.get().ok_or_else(|| {
            Error::new(
                ErrorKind::Other,
                format!(
                    "the {} pipeline was not given its crawl (add it with Crawl::pipeline)",
                    self.kind.name()
                ),
            )
        })
    }
}

impl Run {
    fn new(kind: Kind, s: &Settings, subrequests: SubRequests) -> Self {
        let (store_dir, urls_field, result_field, expires, image) = match kind {
            Kind::Files => (
                s.files_store.clone(),
                s.files_urls_field.clone(),
                s.files_result_field.clone(),
                days(s.files_expires),
                None,
            ),
            Kind::Images => (
                s.images_store.clone(),
                s.images_urls_field.clone(),
                s.images_result_field.clone(),
                days(s.images_expires),
                Some(ImageOptions::from_settings(s)),
            ),
        };
        Self {
            kind,
            urls_field,
            result_field,
            expires,
            store_dir: store_dir.unwrap_or_default(),
            settings: s.clone(),
            image,
            subrequests,
            store: OnceLock::new(),
            seen: Mutex::new(HashMap::new()),
            decodes: Arc::new(Semaphore::new(DECODES_AT_ONCE)),
            counts: Counts::default(),
            type_checked: AtomicBool::new(false),
        }
    }

    fn store(&self) -> Result<&Arc<Store>> {
        self.store.get().ok_or_else(|| {
            Error::new(
                ErrorKind::Other,
                format!("the {} pipeline's store is not open", self.kind.name()),
            )
        })
    }

    /// The result for `url`: fetched once per crawl, whoever asks.
    async fn get(self: &Arc<Self>, url: &str) -> Option<FileRecord> {
        let cell = {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(seen.entry(url.to_owned()).or_default())
        };
        cell.get_or_init(|| self.fetch(url)).await.clone()
    }

    /// Fetch `url` through the crawl (or find it fresh in the store) and store it.
    async fn fetch(self: &Arc<Self>, url: &str) -> Option<FileRecord> {
        match self.try_fetch(url).await {
            Ok(record) => Some(record),
            Err(why) => {
                tracing::warn!(url, pipeline = self.kind.name(), "not stored: {why}");
                self.counts.failed.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    async fn try_fetch(self: &Arc<Self>, url: &str) -> std::result::Result<FileRecord, String> {
        let store = Arc::clone(self.store().map_err(|e| e.to_string())?);
        let known = store.lookup(url);
        let now = SystemTime::now();
        let stored = match &known {
            Some(e) => store.has(&e.path).await,
            None => false,
        };
        if let Some(e) = &known
            && e.fresh(now, self.expires)
            && stored
        {
            self.counts.uptodate.fetch_add(1, Ordering::Relaxed);
            return Ok(e.record("uptodate"));
        }
        let mut request = Request::get(url).map_err(|e| e.to_string())?;
        // An expired copy is asked for again with its validators: a 304 keeps it.
        let revalidate = known.filter(|_| stored);
        if let Some(e) = &revalidate {
            if let Some(etag) = &e.etag {
                request = request.header("If-None-Match", etag.clone());
            }
            if let Some(lm) = &e.last_modified {
                request = request.header("If-Modified-Since", lm.clone());
            }
        }
        request.meta.insert(
            "media".to_owned(),
            serde_json::Value::from(self.kind.name()),
        );
        let download = self.subrequests.fetch(request).await;
        let response = match download.outcome {
            Fetched::Response(r) => r,
            Fetched::Disallowed => return Err("forbidden by robots.txt".to_owned()),
            Fetched::Failed(f) => return Err(format!("{} ({})", f.message, f.kind.as_str())),
            Fetched::Requeue(why) => return Err(format!("not fetched: {why}")),
        };
        let status = response.status();
        if status == 304
            && let Some(e) = revalidate
        {
            let e = Entry {
                fetched: store::unix_secs(now),
                ..e
            };
            store.remember(e.clone()).await.map_err(|e| e.to_string())?;
            self.counts.uptodate.fetch_add(1, Ordering::Relaxed);
            return Ok(e.record("uptodate"));
        }
        if !(200..300).contains(&status) {
            return Err(format!("HTTP {status}"));
        }
        let body = response.body().clone();
        let header = |name: &str| response.header(name).map(str::to_owned);
        let content_type = header("content-type");
        let validators = (header("etag"), header("last-modified"));
        let image = match &self.image {
            Some(options) => {
                let permit = Arc::clone(&self.decodes).acquire_owned().await.ok();
                let options = options.clone();
                let bytes = body.clone();
                let inspected =
                    tokio::task::spawn_blocking(move || image::inspect(&bytes, &options))
                        .await
                        .map_err(|e| format!("the image check failed: {e}"))?;
                drop(permit);
                match inspected {
                    Ok(i) => Some(i),
                    Err(why) => {
                        self.counts.refused_images.fetch_add(1, Ordering::Relaxed);
                        return Err(why);
                    }
                }
            }
            None => None,
        };
        let extension = match &image {
            Some(i) => i.extension.to_owned(),
            None => store::extension(url, content_type.as_deref()),
        };
        let stored = store
            .put(body, extension, image.map(|i| i.thumbs).unwrap_or_default())
            .await
            .map_err(|e| e.to_string())?;
        let entry = Entry {
            url: url.to_owned(),
            path: stored.path,
            checksum: stored.checksum,
            fetched: store::unix_secs(now),
            etag: validators.0,
            last_modified: validators.1,
        };
        store
            .remember(entry.clone())
            .await
            .map_err(|e| e.to_string())?;
        self.counts.downloaded.fetch_add(1, Ordering::Relaxed);
        Ok(entry.record("downloaded"))
    }
}

impl<I> Pipeline<I> for FilesPipeline
where
    I: Serialize + DeserializeOwned + Send + 'static,
{
    fn attach(&self, crawl: &PipelineContext) {
        let run = Run::new(self.kind, crawl.settings(), crawl.subrequests().clone());
        // A second attach (the same stage in two crawls) keeps the first crawl's.
        let _ = self.run.set(Arc::new(run));
    }

    async fn open(&self) -> Result<()> {
        let run = self.run()?;
        let key = match self.kind {
            Kind::Files => "files_store",
            Kind::Images => "images_store",
        };
        if run.store_dir.trim().is_empty() {
            return Err(Error::new(
                ErrorKind::Settings,
                format!(
                    "{key} is not set: the {} pipeline needs a directory to store in",
                    self.kind.name()
                ),
            ));
        }
        let dir = run.store_dir.clone();
        let settings = run.settings.clone();
        let store = tokio::task::spawn_blocking(move || Store::open(&dir, &settings))
            .await
            .map_err(|e| Error::new(ErrorKind::Other, e.to_string()))??;
        let _ = run.store.set(Arc::new(store));
        Ok(())
    }

    async fn process(&self, item: I) -> Result<Processed<I>> {
        let run = Arc::clone(self.run()?);
        let bad = |why: String| Error::new(ErrorKind::Other, why);
        let mut value = serde_json::to_value(&item).map_err(|e| bad(e.to_string()))?;
        let Some(fields) = value.as_object_mut() else {
            return Err(bad(format!(
                "the {} pipeline needs items that are structs or maps",
                run.kind.name()
            )));
        };
        let urls: Vec<String> = match fields.get(&run.urls_field) {
            None | Some(serde_json::Value::Null) => return Ok(Processed::Keep(item)),
            Some(serde_json::Value::String(one)) => vec![one.clone()],
            Some(serde_json::Value::Array(list)) => list
                .iter()
                .filter_map(|u| u.as_str().map(str::to_owned))
                .collect(),
            Some(other) => {
                return Err(bad(format!(
                    "the item's '{}' is not a list of URLs: {other}",
                    run.urls_field
                )));
            }
        };
        let results: Vec<FileRecord> =
            futures_util::future::join_all(urls.iter().map(|u| run.get(u)))
                .await
                .into_iter()
                .flatten()
                .collect();
        let records = serde_json::to_value(&results).map_err(|e| bad(e.to_string()))?;
        fields.insert(run.result_field.clone(), records);
        let back: I = serde_json::from_value(value).map_err(|e| {
            bad(format!(
                "the item type cannot take the '{}' field the {} pipeline writes: {e}",
                run.result_field,
                run.kind.name()
            ))
        })?;
        if !run.type_checked.load(Ordering::Relaxed) {
            // A struct without the field drops it silently: say so once, and stop, rather
            // than download every file for results nobody keeps.
            let kept = serde_json::to_value(&back)
                .ok()
                .is_some_and(|v| v.get(&run.result_field).is_some());
            if !kept {
                let why = format!(
                    "the item type has no '{}' field: add `{}: Vec<crawler::files::FileRecord>` \
                     (with #[serde(default)]) to keep what the {} pipeline stores",
                    run.result_field,
                    run.result_field,
                    run.kind.name()
                );
                *self.close.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
                return Err(bad(why));
            }
            run.type_checked.store(true, Ordering::Relaxed);
        }
        Ok(Processed::Keep(back))
    }

    async fn close(&self) -> Result<()> {
        let Ok(run) = self.run() else {
            return Ok(());
        };
        let c = &run.counts;
        tracing::info!(
            pipeline = run.kind.name(),
            downloaded = c.downloaded.load(Ordering::Relaxed),
            uptodate = c.uptodate.load(Ordering::Relaxed),
            failed = c.failed.load(Ordering::Relaxed),
            refused_images = c.refused_images.load(Ordering::Relaxed),
            "{} pipeline done",
            run.kind.name()
        );
        let Ok(store) = run.store() else {
            return Ok(());
        };
        if store.is_objects() {
            tracing::info!(
                pipeline = run.kind.name(),
                uploaded = store.uploads.load(Ordering::Relaxed),
                already_stored = store.found.load(Ordering::Relaxed),
                "{} store objects",
                run.kind.name()
            );
        }
        store.close().await
    }

    fn close_crawl(&self) -> Option<String> {
        self.close.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
