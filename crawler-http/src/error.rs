//! The one error type of crawler-http.

/// Why the downloader could not be built.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    pub(crate) fn new(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

/// A downloader that cannot be built is a crawl that cannot start: `?` in the facade and in
/// spider code turns it into the crawl's error of kind `Http`, this error as its source.
impl From<Error> for crawler_core::Error {
    fn from(e: Error) -> Self {
        crawler_core::Error::new(crawler_core::ErrorKind::Http, e.to_string()).with_source(e)
    }
}
