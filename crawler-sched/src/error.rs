//! The one error type of crawler-sched.

/// A frontier failure: a queue store could not read or write.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl Error {
    /// An error with a message and, optionally, its cause.
    pub fn new(
        message: impl Into<String>,
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self {
            message: message.into(),
            source,
        }
    }
}

/// A frontier that cannot read or write its queues fails the crawl with kind `Storage`,
/// this error as its source.
impl From<Error> for crawler_core::Error {
    fn from(e: Error) -> Self {
        crawler_core::Error::new(crawler_core::ErrorKind::Storage, e.to_string()).with_source(e)
    }
}
