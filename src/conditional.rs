//! Wiring of validators and the HTTP cache from the settings into the downloader.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crawler_core::{ConditionalStore, Settings};
use crawler_http::HttpDownloader;
#[cfg(feature = "sled")]
use crawler_store::SledConditional;

use crate::{Error, ErrorKind};

/// Give the downloader its store: the one set in code, else the one the settings ask for.
pub(crate) fn attach(
    downloader: HttpDownloader,
    settings: &Settings,
    given: Option<Arc<dyn ConditionalStore>>,
) -> Result<HttpDownloader, Error> {
    let store = match given {
        Some(store) => Some(store),
        None => open(settings)?,
    };
    Ok(match store {
        Some(store) => downloader.with_store(store),
        None => downloader,
    })
}

/// The directory validators and the HTTP cache live in: `cache_dir`, else `JOB_DIR/cache`.
///
/// A database of their own rather than a tree of the job's: they are meant to outlive the
/// job (a finished job's frontier is done; its validators make the next crawl cheap), and
/// the job's database is locked by its frontier.
pub(crate) fn cache_dir(settings: &Settings) -> Option<PathBuf> {
    settings.cache_dir.as_ref().map(PathBuf::from).or_else(|| {
        settings
            .job_dir
            .as_ref()
            .map(|d| Path::new(d).join("cache"))
    })
}

fn open(settings: &Settings) -> Result<Option<Arc<dyn ConditionalStore>>, Error> {
    let Some(dir) = cache_dir(settings) else {
        if settings.http_cache {
            return Err(Error::new(
                ErrorKind::Settings,
                "http_cache is on but there is nowhere to keep responses: set cache_dir or \
                 job_dir"
                    .to_owned(),
            ));
        }
        return Ok(None);
    };
    if !settings.conditional_requests && !settings.http_cache {
        return Ok(None);
    }
    open_dir(settings, &dir)
}

#[cfg(feature = "sled")]
fn open_dir(settings: &Settings, dir: &Path) -> Result<Option<Arc<dyn ConditionalStore>>, Error> {
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::new(
            ErrorKind::Io,
            format!("cannot create cache directory {}", dir.display()),
        )
        .with_source(e)
    })?;
    let cache = settings
        .http_cache
        .then_some((settings.http_cache_max_bytes > 0).then_some(settings.http_cache_max_bytes));
    let store = SledConditional::open(dir, cache, SledConditional::options())?;
    Ok(Some(Arc::new(store)))
}

/// Without the `sled` feature validators and cached pages have nowhere to live on disk: a
/// crawl that asks for them there is refused, never run without them.
#[cfg(not(feature = "sled"))]
fn open_dir(settings: &Settings, dir: &Path) -> Result<Option<Arc<dyn ConditionalStore>>, Error> {
    // A job directory is what the user set, even when its cache is what needs disk.
    let what = if settings.job_dir.is_some() {
        "job_dir"
    } else if settings.http_cache {
        "http_cache"
    } else {
        "conditional_requests"
    };
    Err(Error::new(
        ErrorKind::Settings,
        format!(
            "{what} keeps its data in {}, but this program was built without {}",
            dir.display(),
            crate::SLED_FEATURE
        ),
    ))
}
