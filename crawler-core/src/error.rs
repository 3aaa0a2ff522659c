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
    /// Something the spider expected on a page was not there.
    Missing,
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
}
