//! The crate's one error type.

/// Why the browser could not be started or a page could not be rendered.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            source: None,
        }
    }

    pub(crate) fn with(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// A browser that cannot start or render is a settings problem for the crawl (no chromium
/// where the settings point, a rendering that cannot be set up): `?` turns it into the
/// crawl's error of kind `Settings`, this error as its source.
impl From<Error> for crawler_core::Error {
    fn from(e: Error) -> Self {
        crawler_core::Error::new(crawler_core::ErrorKind::Settings, e.to_string()).with_source(e)
    }
}
