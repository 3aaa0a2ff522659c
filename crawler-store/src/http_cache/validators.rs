//! Validators for conditional requests and incremental re-crawls.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::db::{open_db, open_tree};
use crate::error::Error;
use crate::options::StoreOptions;

/// The validators kept per URL: core's type, stored as JSON.
pub use crawler_core::Validators;

/// Validators by request fingerprint. Cheap to clone; every method takes `&self`, so many
/// tasks can share one store.
#[derive(Clone, Debug)]
pub struct ValidatorStore {
    tree: sled::Tree,
    path: Arc<PathBuf>,
    /// Keeps a standalone database open (and flushed on drop) while handles exist.
    _db: Option<sled::Db>,
}

impl ValidatorStore {
    /// Open a standalone validator store in `dir` (for crawls without a job directory).
    pub fn open(dir: &Path, options: StoreOptions) -> Result<Self, Error> {
        let db = open_db(dir, &options)?;
        let mut store = Self::in_db(&db, dir)?;
        store._db = Some(db);
        Ok(store)
    }

    pub(crate) fn in_db(db: &sled::Db, dir: &Path) -> Result<Self, Error> {
        Ok(Self {
            tree: open_tree(db, dir, "validators")?,
            path: Arc::new(dir.to_owned()),
            _db: None,
        })
    }

    /// The validators stored for fingerprint `fp`.
    pub fn get(&self, fp: [u8; 16]) -> Result<Option<Validators>, Error> {
        let Some(bytes) = self
            .tree
            .get(fp)
            .map_err(|e| Error::sled(&self.path, "read validators", e))?
        else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::corrupt(&self.path, format!("stored validators do not decode: {e}"))
        })
    }

    /// Store (replace) the validators for fingerprint `fp`.
    pub fn put(&self, fp: [u8; 16], validators: &Validators) -> Result<(), Error> {
        let bytes = serde_json::to_vec(validators).map_err(|e| Error::encode(&self.path, e))?;
        self.tree
            .insert(fp, bytes)
            .map_err(|e| Error::sled(&self.path, "write validators", e))?;
        Ok(())
    }

    /// Forget the validators for fingerprint `fp`.
    pub fn remove(&self, fp: [u8; 16]) -> Result<(), Error> {
        self.tree
            .remove(fp)
            .map_err(|e| Error::sled(&self.path, "remove validators", e))?;
        Ok(())
    }

    /// Number of URLs with stored validators.
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    /// Whether no validators are stored.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// Make every write so far durable on disk.
    pub fn flush(&self) -> Result<(), Error> {
        self.tree
            .flush()
            .map_err(|e| Error::sled(&self.path, "flush validators", e))?;
        Ok(())
    }
}
