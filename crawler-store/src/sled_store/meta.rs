//! The job's metadata tree: the on-disk layout version, and which spider and settings a job
//! directory belongs to.

use std::path::Path;

use crate::error::Error;

/// Version of the on-disk layout, checked on open.
const FORMAT: &[u8] = b"crawler-store/1";
const META_FORMAT: &str = "format";
const META_SPIDER: &str = "spider";
const META_SETTINGS: &str = "settings";
pub(super) const META_STATS: &str = "stats";

pub(super) fn check_format(meta: &sled::Tree, dir: &Path) -> Result<(), Error> {
    let read = |e| Error::sled(dir, "read the job metadata", e);
    match meta.get(META_FORMAT).map_err(read)? {
        Some(f) if f == FORMAT => Ok(()),
        Some(f) => Err(Error::corrupt(
            dir,
            format!(
                "unknown layout {:?} (this version reads {:?})",
                String::from_utf8_lossy(&f),
                String::from_utf8_lossy(FORMAT)
            ),
        )),
        None => {
            meta.insert(META_FORMAT, FORMAT)
                .map_err(|e| Error::sled(dir, "write the job metadata", e))?;
            Ok(())
        }
    }
}

pub(super) fn check_job(
    meta: &sled::Tree,
    dir: &Path,
    spider: &str,
    settings: &str,
) -> Result<(), Error> {
    let read = |e| Error::sled(dir, "read the job metadata", e);
    let text = |v: sled::IVec| String::from_utf8_lossy(&v).into_owned();
    match meta.get(META_SPIDER).map_err(read)?.map(text) {
        Some(stored) if stored != spider => {
            return Err(Error::mismatch_spider(dir, stored, spider));
        }
        Some(_) => {}
        None => {
            // Settings first: the spider name is what marks the directory as claimed, so a
            // crash between the two writes leaves a directory that is claimed afresh.
            let write = |e| Error::sled(dir, "write the job metadata", e);
            meta.insert(META_SETTINGS, settings.as_bytes())
                .map_err(write)?;
            meta.insert(META_SPIDER, spider.as_bytes()).map_err(write)?;
            return Ok(());
        }
    }
    match meta.get(META_SETTINGS).map_err(read)?.map(text) {
        Some(stored) if stored != settings => Err(Error::mismatch_settings(dir, stored, settings)),
        _ => Ok(()),
    }
}
