//! The one error type of crawler-store.

use std::path::{Path, PathBuf};

/// A persistence failure. Every message names the job directory (or store path) involved.
///
/// The type is opaque; ask it what happened with [`Error::is_in_use`],
/// [`Error::is_job_mismatch`] and [`Error::is_corrupt`].
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Error(#[from] Repr);

#[derive(Debug, thiserror::Error)]
pub(crate) enum Repr {
    #[cfg(feature = "sled")]
    #[error("job directory {} is in use by another crawl (sled: {source})", path.display())]
    InUse { path: PathBuf, source: sled::Error },
    #[error("job directory {} is not a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error("job directory {} is corrupt or unreadable: {detail}", path.display())]
    Corrupt { path: PathBuf, detail: String },
    #[error(
        "job directory {} belongs to spider {stored:?}, not {requested:?}: \
         resume it with {stored:?} or use another job directory",
        path.display()
    )]
    SpiderMismatch {
        path: PathBuf,
        stored: String,
        requested: String,
    },
    #[error(
        "job directory {} was made with settings {stored:?}, incompatible with the current \
         settings {requested:?}: use the original settings or another job directory",
        path.display()
    )]
    SettingsMismatch {
        path: PathBuf,
        stored: String,
        requested: String,
    },
    #[error("cannot {action} in {}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    #[cfg(feature = "sled")]
    #[error("cannot {action} in {}: {source}", path.display())]
    Sled {
        path: PathBuf,
        action: &'static str,
        source: sled::Error,
    },
    #[cfg(feature = "redis")]
    #[error("invalid Redis URL {}: {source}", url.display())]
    RedisConfig {
        url: PathBuf,
        source: redis::RedisError,
    },
    #[cfg(feature = "redis")]
    #[error(
        "invalid Redis Cluster URL {}: {detail} (expected \
         redis+cluster://[[user]:password@]host:port[,host:port...], or rediss+cluster:// \
         for TLS: one or more seed nodes of the cluster, database 0 only)",
        url.display()
    )]
    RedisClusterUrl { url: PathBuf, detail: String },
    #[cfg(feature = "redis")]
    #[error(
        "Redis at {} failed during {action} (gave up after {:.1}s of retries): {source}",
        url.display(),
        waited.as_secs_f64()
    )]
    Redis {
        url: PathBuf,
        action: &'static str,
        waited: std::time::Duration,
        source: redis::RedisError,
    },
    #[cfg(feature = "redis")]
    #[error(
        "stopped on request while Redis at {} was unreachable during {action} (after {:.1}s): \
         {source}; updates not yet sent stay unacknowledged, so the fleet fetches those pages \
         again",
        url.display(),
        waited.as_secs_f64()
    )]
    RedisStopped {
        url: PathBuf,
        action: &'static str,
        waited: std::time::Duration,
        source: redis::RedisError,
    },
    #[cfg(feature = "redis")]
    #[error("not trying Redis again during {action}: earlier in this run, {why}")]
    RedisGivenUp {
        url: PathBuf,
        action: &'static str,
        why: String,
    },
    #[cfg(feature = "redis")]
    #[error(
        "Redis at {} lost the state of job {job:?}: {detail}. Its shared queue, seen set and \
         leases are gone, so this worker stops rather than end a partial crawl as if it were \
         complete; items already written stay in the feeds. Run the job again to crawl it \
         from the start (workers append to their feeds)",
        url.display()
    )]
    RedisLost {
        url: PathBuf,
        job: String,
        detail: String,
    },
    #[cfg(feature = "redis")]
    #[error("unexpected reply from Redis at {}: {detail}", url.display())]
    RedisReply { url: PathBuf, detail: String },
    #[error("cannot encode a record for {}: {source}", path.display())]
    Encode {
        path: PathBuf,
        source: serde_json::Error,
    },
}

impl Error {
    /// The job directory is locked by another open store (this or another process).
    pub fn is_in_use(&self) -> bool {
        #[cfg(feature = "sled")]
        return matches!(self.0, Repr::InUse { .. });
        #[cfg(not(feature = "sled"))]
        false
    }

    /// The job directory belongs to another spider or was made with incompatible settings.
    pub fn is_job_mismatch(&self) -> bool {
        matches!(
            self.0,
            Repr::SpiderMismatch { .. } | Repr::SettingsMismatch { .. }
        )
    }

    /// The directory holds data this crate cannot read (damaged files, a record that does not
    /// decode), or is not a directory at all.
    pub fn is_corrupt(&self) -> bool {
        matches!(self.0, Repr::Corrupt { .. } | Repr::NotADirectory { .. })
    }

    /// Redis could not be reached (or kept failing) for longer than the store retries, or
    /// its URL is invalid.
    pub fn is_redis_unavailable(&self) -> bool {
        #[cfg(feature = "redis")]
        return matches!(
            self.0,
            Repr::Redis { .. }
                | Repr::RedisConfig { .. }
                | Repr::RedisClusterUrl { .. }
                | Repr::RedisStopped { .. }
                | Repr::RedisGivenUp { .. }
        );
        #[cfg(not(feature = "redis"))]
        false
    }

    /// Redis forgot the job's shared state (a restart without persistence, a failover to a
    /// replica that was behind, eviction, or the keys' idle time-to-live ran out): the job
    /// epoch a worker joined is missing or different.
    pub fn is_redis_lost(&self) -> bool {
        #[cfg(feature = "redis")]
        return matches!(self.0, Repr::RedisLost { .. });
        #[cfg(not(feature = "redis"))]
        false
    }

    /// The job directory (or store path, or redacted Redis URL) the error is about.
    pub fn path(&self) -> &Path {
        match &self.0 {
            #[cfg(feature = "sled")]
            Repr::InUse { path, .. } | Repr::Sled { path, .. } => path,
            Repr::NotADirectory { path }
            | Repr::Corrupt { path, .. }
            | Repr::SpiderMismatch { path, .. }
            | Repr::SettingsMismatch { path, .. }
            | Repr::Io { path, .. }
            | Repr::Encode { path, .. } => path,
            #[cfg(feature = "redis")]
            Repr::RedisConfig { url, .. }
            | Repr::RedisClusterUrl { url, .. }
            | Repr::Redis { url, .. }
            | Repr::RedisStopped { url, .. }
            | Repr::RedisGivenUp { url, .. }
            | Repr::RedisLost { url, .. }
            | Repr::RedisReply { url, .. } => url,
        }
    }

    pub(crate) fn corrupt(path: &Path, detail: impl Into<String>) -> Self {
        Repr::Corrupt {
            path: path.to_owned(),
            detail: detail.into(),
        }
        .into()
    }

    /// Classify a sled error: corruption and lock failures get their own messages.
    #[cfg(feature = "sled")]
    pub(crate) fn sled(path: &Path, action: &'static str, source: sled::Error) -> Self {
        let path = path.to_owned();
        match source {
            sled::Error::Corruption { .. } => Repr::Corrupt {
                path,
                detail: source.to_string(),
            },
            sled::Error::Io(ref e) if e.to_string().contains("could not acquire lock") => {
                Repr::InUse { path, source }
            }
            _ => Repr::Sled {
                path,
                action,
                source,
            },
        }
        .into()
    }

    pub(crate) fn io(path: &Path, action: &'static str, source: std::io::Error) -> Self {
        Repr::Io {
            path: path.to_owned(),
            action,
            source,
        }
        .into()
    }

    #[cfg(feature = "redis")]
    pub(crate) fn redis_config(url: &str, source: redis::RedisError) -> Self {
        Repr::RedisConfig {
            url: url.into(),
            source,
        }
        .into()
    }

    #[cfg(feature = "redis")]
    pub(crate) fn redis_cluster_url(url: &str, detail: impl Into<String>) -> Self {
        Repr::RedisClusterUrl {
            url: url.into(),
            detail: detail.into(),
        }
        .into()
    }

    #[cfg(feature = "redis")]
    pub(crate) fn redis(
        url: &str,
        action: &'static str,
        waited: std::time::Duration,
        source: redis::RedisError,
    ) -> Self {
        Repr::Redis {
            url: url.into(),
            action,
            waited,
            source,
        }
        .into()
    }

    #[cfg(feature = "redis")]
    pub(crate) fn redis_stopped(
        url: &str,
        action: &'static str,
        waited: std::time::Duration,
        source: redis::RedisError,
    ) -> Self {
        Repr::RedisStopped {
            url: url.into(),
            action,
            waited,
            source,
        }
        .into()
    }

    #[cfg(feature = "redis")]
    pub(crate) fn redis_given_up(url: &str, action: &'static str, why: &str) -> Self {
        Repr::RedisGivenUp {
            url: url.into(),
            action,
            why: why.to_owned(),
        }
        .into()
    }

    #[cfg(feature = "redis")]
    pub(crate) fn redis_lost(url: &str, job: &str, detail: impl Into<String>) -> Self {
        Repr::RedisLost {
            url: url.into(),
            job: job.to_owned(),
            detail: detail.into(),
        }
        .into()
    }

    #[cfg(feature = "redis")]
    pub(crate) fn redis_reply(url: &str, detail: impl Into<String>) -> Self {
        Repr::RedisReply {
            url: url.into(),
            detail: detail.into(),
        }
        .into()
    }

    pub(crate) fn encode(path: &Path, source: serde_json::Error) -> Self {
        Repr::Encode {
            path: path.to_owned(),
            source,
        }
        .into()
    }

    pub(crate) fn mismatch_spider(path: &Path, stored: String, requested: &str) -> Self {
        Repr::SpiderMismatch {
            path: path.to_owned(),
            stored,
            requested: requested.to_owned(),
        }
        .into()
    }

    pub(crate) fn mismatch_settings(path: &Path, stored: String, requested: &str) -> Self {
        Repr::SettingsMismatch {
            path: path.to_owned(),
            stored,
            requested: requested.to_owned(),
        }
        .into()
    }
}

/// The crawl's error for a store failure: the kind says which (a job directory in use or
/// belonging to another spider, Redis unreachable or lost, any other storage failure), and
/// this error stays its source.
impl From<Error> for crawler_core::Error {
    fn from(e: Error) -> Self {
        use crawler_core::ErrorKind;
        let kind = if e.is_job_mismatch() {
            ErrorKind::JobMismatch
        } else if e.is_in_use() {
            ErrorKind::JobInUse
        } else if e.is_redis_unavailable() || e.is_redis_lost() {
            ErrorKind::Redis
        } else {
            ErrorKind::Storage
        };
        crawler_core::Error::new(kind, e.to_string()).with_source(e)
    }
}

impl From<Error> for crawler_sched::Error {
    fn from(e: Error) -> Self {
        crawler_sched::Error::new(e.to_string(), Some(Box::new(e)))
    }
}
