//! The one error type of the `crawler` facade.

/// Why a crawl could not be set up or run.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Error(String);

impl Error {
    pub(crate) fn from_message(message: String) -> Self {
        Self(message)
    }
}

impl From<crawler_core::Error> for Error {
    fn from(e: crawler_core::Error) -> Self {
        Self(e.to_string())
    }
}

impl From<crawler_http::Error> for Error {
    fn from(e: crawler_http::Error) -> Self {
        let mut text = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            text.push_str(": ");
            text.push_str(&c.to_string());
            cause = c.source();
        }
        Self(text)
    }
}
