//! The one error type of the `crawler` facade: a message for people, a kind for code, and
//! the typed cause underneath (as reqwest's error keeps its kinds).

use std::fmt;

/// Why a crawl could not be set up or run.
///
/// The message (with its causes, through `Display`) is written for the person running the
/// crawl. Code that reacts to particular failures asks [`Error::kind`] or an `is_*` method,
/// and can reach the crate error underneath through [`std::error::Error::source`] (for
/// example a `crawler_store::Error` for a job directory that belongs to another spider).
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// The class of an [`Error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A setting has an unknown key, a wrong type or a value out of range, or settings
    /// contradict each other (a proxy the private-address guard cannot check, an HTTP cache
    /// with nowhere to live).
    Settings,
    /// A URL could not be parsed or is not http(s).
    Url,
    /// A feed, settings file or cache directory could not be read or written.
    Io,
    /// The job directory is in use by another running crawl.
    JobInUse,
    /// The job directory belongs to another spider, or was started with settings that change
    /// what its frontier holds.
    JobMismatch,
    /// The frontier's or the cache's storage failed (a corrupt job directory, a database
    /// error).
    Storage,
    /// Redis (the fleet's shared frontier) could not be reached, or was lost for longer than
    /// `redis_retry_for`.
    Redis,
    /// The HTTP client could not be built (TLS, proxy, headers).
    Http,
    /// The crawl's task was cancelled before it finished.
    Cancelled,
    /// A spider argument (`-a key=value`, [`Crawl::arg`](crate::Crawl::arg)) is malformed,
    /// unknown to the spider, or has a value the spider refused.
    Argument,
    /// Anything else (an error from user code, a CSS selector, ...).
    Other,
}

impl Error {
    /// A new error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// Attach the underlying cause.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// A setting or a combination of settings is wrong.
    pub fn is_settings(&self) -> bool {
        self.kind == ErrorKind::Settings
    }

    /// The job directory belongs to another spider or to other frontier settings.
    pub fn is_job_mismatch(&self) -> bool {
        self.kind == ErrorKind::JobMismatch
    }

    /// The job directory is in use by another crawl.
    pub fn is_job_in_use(&self) -> bool {
        self.kind == ErrorKind::JobInUse
    }

    /// Storage (sled, the job directory, the cache) failed.
    pub fn is_storage(&self) -> bool {
        self.kind == ErrorKind::Storage
    }

    /// Redis could not be reached or was lost.
    pub fn is_redis(&self) -> bool {
        self.kind == ErrorKind::Redis
    }

    /// A file could not be read or written.
    pub fn is_io(&self) -> bool {
        self.kind == ErrorKind::Io
    }

    /// Prefix the message with what was being done (`spider 'books': ...`).
    pub(crate) fn context(mut self, what: &str) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        // The causes, each distinct line once: the message is what a person reads, and
        // wrapping errors often repeat their cause's text.
        let mut shown = self.message.clone();
        let mut cause: Option<&(dyn std::error::Error + 'static)> =
            self.source.as_deref().map(|s| s as _);
        while let Some(c) = cause {
            let text = c.to_string();
            if !shown.contains(&text) {
                write!(f, ": {text}")?;
                shown.push_str(&text);
            }
            cause = c.source();
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("source", &self.source)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|s| s as _)
    }
}

impl From<crawler_core::Error> for Error {
    fn from(e: crawler_core::Error) -> Self {
        use crawler_core::ErrorKind as Core;
        let kind = match e.kind() {
            Core::Settings => ErrorKind::Settings,
            Core::Url => ErrorKind::Url,
            Core::Io => ErrorKind::Io,
            Core::Storage => ErrorKind::Storage,
            Core::Argument => ErrorKind::Argument,
            _ => ErrorKind::Other,
        };
        // Core's error prints its own causes and is not a `std::error::Error`; keep its text.
        Self::new(kind, e.to_string())
    }
}

impl From<crawler_http::Error> for Error {
    fn from(e: crawler_http::Error) -> Self {
        Self::new(ErrorKind::Http, String::new()).with_cause(e)
    }
}

impl From<crawler_store::Error> for Error {
    fn from(e: crawler_store::Error) -> Self {
        let kind = if e.is_job_mismatch() {
            ErrorKind::JobMismatch
        } else if e.is_in_use() {
            ErrorKind::JobInUse
        } else if e.is_redis_unavailable() || e.is_redis_lost() {
            ErrorKind::Redis
        } else {
            ErrorKind::Storage
        };
        Self::new(kind, String::new()).with_cause(e)
    }
}

impl Error {
    /// The cause's text becomes the message (it is the whole story), and the cause stays
    /// reachable through `source()`.
    fn with_cause(mut self, e: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.message = e.to_string();
        self.with_source(e)
    }
}
