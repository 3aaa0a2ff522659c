//! Opening a sled database in a directory with clear errors.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, Repr};
use crate::options::StoreOptions;

/// Open (creating if needed) the sled database in `dir`.
pub(crate) fn open_db(dir: &Path, options: &StoreOptions) -> Result<sled::Db, Error> {
    if dir.exists() && !dir.is_dir() {
        return Err(Repr::NotADirectory {
            path: dir.to_owned(),
        }
        .into());
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create the job directory", e))?;
    let config = sled::Config::new()
        .path(dir)
        .cache_capacity(options.cache_capacity_bytes)
        .flush_every_ms(options.flush_every_ms)
        .mode(sled::Mode::HighThroughput);
    // sled 0.34 asserts on some kinds of damaged files instead of returning an error; a
    // damaged job directory must give a message, not a crash of the whole crawler.
    let open = || match catch_unwind(AssertUnwindSafe(|| config.open())) {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) => Err(Error::sled(dir, "open the job database", e)),
        Err(panic) => {
            let detail = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("sled failed while reading its files");
            Err(Error::corrupt(dir, detail))
        }
    };
    // sled's I/O threads release the directory lock a moment after the last handle of a
    // database is dropped, so a store reopened right after it was closed (a resume in the
    // same process, a test) can find it still locked. Another crawl holds it for good:
    // retry briefly, then report.
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match open() {
            Err(e) if e.is_in_use() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// How long `open_db` waits for a lock that is being released.
const LOCK_WAIT: Duration = Duration::from_secs(1);

/// Open a named tree of `db`.
pub(crate) fn open_tree(db: &sled::Db, dir: &Path, name: &str) -> Result<sled::Tree, Error> {
    db.open_tree(name)
        .map_err(|e| Error::sled(dir, "open a tree of the job database", e))
}
