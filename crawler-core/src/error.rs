//! The one error type of crawler-core, also the error type of spider callbacks.

use std::fmt;

/// A convenient alias: `Result<T, crawler_core::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, in words a user can act on.
///
/// Spider callbacks return this type, so `?` works on any standard error (an I/O error, a JSON
/// error, a parse error of the user's own); the message and the chain of causes are kept.
/// Like `anyhow::Error`, it deliberately does not implement `std::error::Error` itself (that
/// would collide with the blanket `From` impl), but it converts into
/// `Box<dyn std::error::Error + Send + Sync>` for callers that want one.
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// The broad class of an [`Error`], for callers that react differently to each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A setting has an unknown key, a wrong type or an out-of-range value.
    Settings,
    /// A URL could not be parsed or is not http(s).
    Url,
    /// A CSS selector did not parse.
    Selector,
    /// A spider argument (`-a key=value`) is malformed, unknown to the spider, or has a
    /// value the spider cannot use.
    Argument,
    /// Something the spider expected on a page was not there.
    Missing,
    /// A page was too deep, too large in elements, or too slow to parse within the
    /// `parse_*` limits.
    TooComplex,
    /// Reading or writing a feed or another file failed.
    Io,
    /// The frontier's storage (sled, Redis) failed.
    Storage,
    /// An error raised by user code (spider, pipeline) or a dependency.
    Other,
}

impl Error {
    /// A new error of the given kind with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// A new error of kind [`ErrorKind::Other`] with a message, for user code.
    pub fn msg(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Other, message)
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

    /// Say what was being done when this error happened: the message becomes
    /// `what: message`, and the kind is kept. Called several times, the outermost context
    /// comes first, as with `anyhow`. See [`Context`] for the `?`-friendly form.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

/// Adds context to a failing `?` in a spider callback (or anywhere a
/// [`crawler_core::Result`](Result) is returned), like `anyhow::Context`.
///
/// On a `Result` whose error converts into [`Error`] (any standard error, or `Error`
/// itself), the error's message is prefixed with the context and its kind kept. On an
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

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| e.into().context(what))
    }

    fn with_context<C: fmt::Display>(self, what: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| e.into().context(what()))
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
        f.write_str(&self.message)?;
        let mut cause: Option<&(dyn std::error::Error + 'static)> =
            self.source.as_deref().map(|s| s as _);
        while let Some(c) = cause {
            let text = c.to_string();
            // Wrapping errors often repeat their cause's text; print each distinct line once.
            if !self.message.contains(&text) {
                write!(f, ": {text}")?;
            }
            cause = c.source();
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self} ({:?})", self.kind)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for Error {
    fn from(e: E) -> Self {
        let kind = if (&e as &dyn std::error::Error).is::<std::io::Error>() {
            ErrorKind::Io
        } else {
            ErrorKind::Other
        };
        let message = e.to_string();
        let source: Option<Box<dyn std::error::Error + Send + Sync>> = if e.source().is_some() {
            Some(Box::new(e))
        } else {
            None
        };
        Self {
            kind,
            message,
            source,
        }
    }
}

/// Lets `Box<dyn Error>`-returning code (`main`, tests) use `?` on this error.
#[derive(Debug)]
struct Boxed(String);

impl fmt::Display for Boxed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Boxed {}

impl From<Error> for Box<dyn std::error::Error + Send + Sync + 'static> {
    fn from(e: Error) -> Self {
        Box::new(Boxed(e.to_string()))
    }
}

impl From<Error> for Box<dyn std::error::Error + 'static> {
    fn from(e: Error) -> Self {
        Box::new(Boxed(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_keep_their_kind_and_text() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "feed dir missing");
        let e: Error = io.into();
        assert_eq!(e.kind(), ErrorKind::Io);
        assert_eq!(e.to_string(), "feed dir missing");
    }

    #[test]
    fn causes_are_printed_once() {
        let io = std::io::Error::other("disk full");
        let e = Error::new(ErrorKind::Io, "cannot write books.jsonl").with_source(io);
        assert_eq!(e.to_string(), "cannot write books.jsonl: disk full");
    }

    #[test]
    fn context_prefixes_the_message_and_keeps_the_kind() {
        let parsed: Result<f64> = "x".parse::<f64>().context("price of a book");
        let e = parsed.unwrap_err();
        assert_eq!(e.to_string(), "price of a book: invalid float literal");
        assert_eq!(e.kind(), ErrorKind::Other);

        // Nested: the outermost context first; a core error keeps its kind.
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
}
