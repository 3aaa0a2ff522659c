//! The crate's one error type.

use std::net::SocketAddr;

/// Why the lab could not be configured or started.
///
/// Opaque on purpose: callers print it or propagate it; the message names what went wrong and
/// what would be valid.
#[derive(thiserror::Error)]
#[error(transparent)]
pub struct Error(Box<Kind>);

// `main` returning `Result` prints the error with `Debug`: make that the readable message.
impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum Kind {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("unknown scenario `{name}`; valid names: {valid}")]
    UnknownScenario { name: String, valid: String },
    #[error("books must be between {min} and {max}, got {got}")]
    BooksOutOfRange { got: usize, min: usize, max: usize },
    #[error("invalid lab option: {0}")]
    Invalid(String),
    #[error("waiting for Ctrl-C failed: {0}")]
    Signal(std::io::Error),
}

impl Error {
    pub(crate) fn new(kind: Kind) -> Self {
        Self(Box::new(kind))
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Self::new(Kind::Invalid(msg.into()))
    }
}
