//! The one error type of a crawl: what spider callbacks and pipelines return, and what
//! setting up or running a crawl fails with. The facade re-exports it as `crawler::Error`.

use std::error::Error as StdError;
use std::fmt;

/// A convenient alias: `Result<T, crawler::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

type Cause = Box<dyn StdError + Send + Sync + 'static>;

/// What went wrong, in words a user can act on, with a kind for code and the typed cause
/// underneath (in the style of reqwest's error).
///
/// - `Display` is written for the person running the crawl: the message, then each distinct
///   cause once (`cannot write books.jsonl: disk full`).
/// - [`Error::kind`] and the `is_*` methods are for code that reacts to particular failures.
/// - [`std::error::Error::source`] reaches the error underneath, for example a
///   `crawler::store::Error` for a job directory that belongs to another spider, or the
///   `std::io::Error` a callback's `?` wrapped.
///
/// In a spider callback, `?` works directly on the errors spider code meets most
/// (`std::io::Error`, `serde_json::Error`, number and UTF-8 parse errors, `url::ParseError`,
/// `Box<dyn Error + Send + Sync>`, and every crate error of this framework). Any other error
/// takes [`Context::context`] (`.context("what I was doing")?`), which also says what failed,
/// or [`Error::other`]. Being a `std::error::Error` itself, this type cannot also take `?`
/// from every error through one blanket `From` (that impl would collide with `From<T> for
/// T`); the list above is that trade written out.
pub struct Error {
    // Boxed: a `Result<(), Error>` stays one pointer wide on every callback's return path.
    inner: Box<Inner>,
}

struct Inner {
    kind: ErrorKind,
    message: String,
    source: Option<Cause>,
}

/// The class of an [`Error`], for code that reacts differently to each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A setting has an unknown key, a wrong type or a value out of range, or settings
    /// contradict each other (a proxy the private-address guard cannot check, an HTTP cache
    /// with nowhere to live).
    Settings,
    /// A URL could not be parsed or is not http(s).
    Url,
    /// A CSS selector did not parse.
    Selector,
    /// A spider argument (`-a key=value`, `Crawl::arg`) is malformed, unknown to the spider,
    /// or has a value the spider refused.
    Argument,
    /// Something the spider expected on a page was not there.
    Missing,
    /// A page was too deep, too large in elements, or too slow to parse within the
    /// `parse_*` limits.
    TooComplex,
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
    /// An error raised by user code (spider, pipeline) or a dependency.
    Other,
}

impl Error {
    /// A new error of the given kind with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            inner: Box::new(Inner {
                kind,
                message: message.into(),
                source: None,
            }),
        }
    }

    /// A new error of kind [`ErrorKind::Other`] with a message, for user code.
    pub fn msg(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Other, message)
    }

    /// Wrap any error: its text becomes the message and it stays reachable through
    /// `source()`. An `Error` passed here comes back unchanged; a `std::io::Error` gets the
    /// kind [`ErrorKind::Io`], anything else [`ErrorKind::Other`].
    pub fn other(e: impl StdError + Send + Sync + 'static) -> Self {
        Self::from_cause(Box::new(e))
    }

    fn from_cause(cause: Cause) -> Self {
        match cause.downcast::<Error>() {
            Ok(e) => *e,
            Err(cause) => {
                let kind = if cause.is::<std::io::Error>() {
                    ErrorKind::Io
                } else {
                    ErrorKind::Other
                };
                Self::new(kind, cause.to_string()).with_cause(cause)
            }
        }
    }

    /// Attach the underlying cause.
    pub fn with_source(self, source: impl StdError + Send + Sync + 'static) -> Self {
        self.with_cause(Box::new(source))
    }

    fn with_cause(mut self, cause: Cause) -> Self {
        self.inner.source = Some(cause);
        self
    }

    /// The class of this error.
    pub fn kind(&self) -> ErrorKind {
        self.inner.kind
    }

    /// Say what was being done when this error happened: the message becomes
    /// `what: message`, and the kind is kept. Called several times, the outermost context
    /// comes first, as with `anyhow`. See [`Context`] for the `?`-friendly form.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.inner.message = format!("{what}: {}", self.inner.message);
        self
    }

    /// A setting or a combination of settings is wrong.
    pub fn is_settings(&self) -> bool {
        self.kind() == ErrorKind::Settings
    }

    /// A URL did not parse or is not http(s).
    pub fn is_url(&self) -> bool {
        self.kind() == ErrorKind::Url
    }

    /// A CSS selector did not parse.
    pub fn is_selector(&self) -> bool {
        self.kind() == ErrorKind::Selector
    }

    /// A spider argument is malformed, unknown or refused.
    pub fn is_argument(&self) -> bool {
        self.kind() == ErrorKind::Argument
    }

    /// Something the spider expected on a page was not there.
    pub fn is_missing(&self) -> bool {
        self.kind() == ErrorKind::Missing
    }

    /// A page was beyond the `parse_*` limits.
    pub fn is_too_complex(&self) -> bool {
        self.kind() == ErrorKind::TooComplex
    }

    /// A file could not be read or written.
    pub fn is_io(&self) -> bool {
        self.kind() == ErrorKind::Io
    }

    /// The job directory is in use by another crawl.
    pub fn is_job_in_use(&self) -> bool {
        self.kind() == ErrorKind::JobInUse
    }

    /// The job directory belongs to another spider or to other frontier settings.
    pub fn is_job_mismatch(&self) -> bool {
        self.kind() == ErrorKind::JobMismatch
    }

    /// Storage (sled, the job directory, the cache) failed.
    pub fn is_storage(&self) -> bool {
        self.kind() == ErrorKind::Storage
    }

    /// Redis could not be reached or was lost.
    pub fn is_redis(&self) -> bool {
        self.kind() == ErrorKind::Redis
    }

    /// The HTTP client could not be built.
    pub fn is_http(&self) -> bool {
        self.kind() == ErrorKind::Http
    }

    /// The crawl's task was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.kind() == ErrorKind::Cancelled
    }
}

/// Adds context to a failing `?` in a spider callback (or anywhere a
/// [`crawler::Result`](Result) is returned), like `anyhow::Context`.
///
/// On a `Result` whose error is any standard error (or an [`Error`]), the message is prefixed
/// with the context; an [`Error`] keeps its kind, any other error becomes the source of one
/// (of kind [`ErrorKind::Io`] for an I/O error, [`ErrorKind::Other`] otherwise). On an
/// `Option`, `None` becomes an error of kind [`ErrorKind::Missing`] whose message is the
/// context. The engine logs a callback's error with the page's URL and the callback's name,
/// so the context only needs to say what the spider was doing.
///
/// ```
/// use crawler_core::{Context, ErrorKind, Result};
///
/// fn price(text: &str) -> Result<f64> {
///     let digits = text.strip_prefix('£').context("price without a pound sign")?;
///     digits.parse::<f64>().with_context(|| format!("price '{text}'"))
/// }
///
/// assert_eq!(price("£51.77").unwrap(), 51.77);
/// let e = price("£5x").unwrap_err();
/// assert_eq!(e.to_string(), "price '£5x': invalid float literal");
/// assert_eq!(price("51").unwrap_err().kind(), ErrorKind::Missing);
/// ```
pub trait Context<T> {
    /// Wrap the error (or the `None`) with `what`.
    fn context(self, what: impl fmt::Display) -> Result<T>;

    /// Wrap the error (or the `None`) with the text `what` returns, computed only on
    /// failure (for contexts that format something).
    fn with_context<C: fmt::Display>(self, what: impl FnOnce() -> C) -> Result<T>;
}

impl<T, E: StdError + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| Error::other(e).context(what))
    }

    fn with_context<C: fmt::Display>(self, what: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| Error::other(e).context(what()))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.ok_or_else(|| Error::new(ErrorKind::Missing, what.to_string()))
    }

    fn with_context<C: fmt::Display>(self, what: impl FnOnce() -> C) -> Result<T> {
        self.ok_or_else(|| Error::new(ErrorKind::Missing, what().to_string()))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.message)?;
        // The causes, each distinct line once: the message is what a person reads, and
        // wrapping errors often repeat their cause's text.
        let mut shown = self.inner.message.clone();
        let mut cause: Option<&(dyn StdError + 'static)> = self.source();
        while let Some(c) = cause {
            let text = c.to_string();
            if !text.is_empty() && !shown.contains(&text) {
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
            .field("kind", &self.inner.kind)
            .field("message", &self.inner.message)
            .field("source", &self.inner.source)
            .finish()
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.inner.source.as_deref().map(|s| s as _)
    }
}

/// `?` on the errors spider code meets most; see [`Error`] for why the list is explicit.
macro_rules! from_std {
    ($($t:ty),* $(,)?) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                Self::other(e)
            }
        }
    )*};
}

from_std!(
    std::io::Error,
    std::fmt::Error,
    std::num::ParseIntError,
    std::num::ParseFloatError,
    std::str::ParseBoolError,
    std::str::Utf8Error,
    std::string::FromUtf8Error,
    std::time::SystemTimeError,
    serde_json::Error,
    url::ParseError,
    csv::Error,
    tokio::task::JoinError,
);

impl From<Box<dyn StdError + Send + Sync + 'static>> for Error {
    fn from(e: Box<dyn StdError + Send + Sync + 'static>) -> Self {
        Self::from_cause(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_keep_their_kind_text_and_source() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "feed dir missing");
        let e: Error = io.into();
        assert_eq!(e.kind(), ErrorKind::Io);
        assert_eq!(e.to_string(), "feed dir missing");
        let source = e.source().and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            source.map(std::io::Error::kind),
            Some(std::io::ErrorKind::NotFound)
        );
    }

    #[test]
    fn causes_are_printed_once() {
        let io = std::io::Error::other("disk full");
        let e = Error::new(ErrorKind::Io, "cannot write books.jsonl").with_source(io);
        assert_eq!(e.to_string(), "cannot write books.jsonl: disk full");
        // An error whose message is its cause's text prints it once.
        let e = Error::other(std::io::Error::other("disk full"));
        assert_eq!(e.to_string(), "disk full");
    }

    #[test]
    fn boxed_and_wrapped_errors_come_back_unchanged() {
        let inner = Error::new(ErrorKind::Selector, "invalid CSS selector 'p['");
        let boxed: Box<dyn StdError + Send + Sync> = Box::new(inner);
        let e = Error::from(boxed);
        assert_eq!(e.kind(), ErrorKind::Selector);
        assert!(e.source().is_none());
        let e = Error::other(Error::new(ErrorKind::Redis, "lost"));
        assert!(e.is_redis());
    }

    #[test]
    fn context_prefixes_the_message_and_keeps_the_kind() {
        let parsed: Result<f64> = "x".parse::<f64>().context("price of a book");
        let e = parsed.unwrap_err();
        assert_eq!(e.to_string(), "price of a book: invalid float literal");
        assert_eq!(e.kind(), ErrorKind::Other);
        assert!(
            e.source()
                .is_some_and(|s| s.is::<std::num::ParseFloatError>())
        );

        // Nested: the outermost context first; a crawl error keeps its kind.
        let inner: Result<()> = Err(Error::new(ErrorKind::Selector, "invalid CSS selector 'p['"));
        let e = inner
            .context("title")
            .with_context(|| format!("book {}", 7))
            .unwrap_err();
        assert_eq!(e.to_string(), "book 7: title: invalid CSS selector 'p['");
        assert_eq!(e.kind(), ErrorKind::Selector);

        let none: Option<u8> = None;
        let e = none.context("no stock line").unwrap_err();
        assert_eq!(
            (e.kind(), e.to_string().as_str()),
            (ErrorKind::Missing, "no stock line")
        );
        assert_eq!(Some(3).context("unused").unwrap(), 3);
    }

    #[test]
    fn a_result_of_unit_stays_one_pointer_wide() {
        assert_eq!(
            std::mem::size_of::<Result<()>>(),
            std::mem::size_of::<usize>()
        );
    }
}
