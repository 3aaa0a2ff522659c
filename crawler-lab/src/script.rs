//! Scripted answers: a test gives the lab a function that may answer any request itself
//! (a status, headers, a body, even a `Date` from a clock that is off) before the scenario
//! and the site see it. Requests it answers are recorded like any other; those it declines
//! (`None`) go on to the scenario and the book site.
//!
//! ```
//! use crawler_lab::{Lab, ScriptReply};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // robots.txt answers 503 for the lab's first two seconds, then the usual rules.
//! let lab = Lab::builder()
//!     .script(|req| {
//!         (req.path == "/robots.txt" && req.since_start.as_secs() < 2)
//!             .then(|| ScriptReply::new(503).header("Retry-After", "1"))
//!     })
//!     .start()
//!     .await?;
//! # lab.shutdown().await;
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A request as a script sees it.
#[derive(Debug, Clone, Copy)]
pub struct ScriptRequest<'a> {
    /// The method.
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// Path and query, as sent.
    pub target: &'a str,
    /// The client key (see the crate docs).
    pub client: &'a str,
    /// Time since the lab started.
    pub since_start: Duration,
}

/// A scripted answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptReply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    pub(crate) date: Option<SystemTime>,
    pub(crate) announce: Option<Duration>,
}

impl ScriptReply {
    /// An answer with this status, no extra headers and an empty body.
    pub fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Vec::new(),
            date: None,
            announce: None,
        }
    }

    /// A `301 Moved Permanently` (or any 3xx given) to `location`.
    pub fn redirect(status: u16, location: impl Into<String>) -> Self {
        Self::new(status).header("Location", location.into())
    }

    /// Add a header line. A `Retry-After` in delta-seconds is also announced to the
    /// recorder, so requests arriving inside it count as violations.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        let (name, value) = (name.into(), value.into());
        if name.eq_ignore_ascii_case("retry-after")
            && let Ok(secs) = value.trim().parse::<u64>()
        {
            self.announce = Some(Duration::from_secs(secs));
        }
        self.headers.push((name, value));
        self
    }

    /// An HTML body (sets `Content-Type: text/html; charset=utf-8`).
    pub fn html(self, body: impl Into<String>) -> Self {
        let mut r = self.header("Content-Type", "text/html; charset=utf-8");
        r.body = body.into().into_bytes();
        r
    }

    /// Send this `Date` instead of the lab's clock (a server whose clock is off).
    pub fn date(mut self, at: SystemTime) -> Self {
        self.date = Some(at);
        self
    }

    /// `at` as an HTTP-date (for `Retry-After` or `Date`-like headers).
    pub fn http_date(at: SystemTime) -> String {
        httpdate::fmt_http_date(at)
    }

    /// Tell the recorder the client was asked to wait this long from the response (for
    /// waits the recorder cannot read from the headers, such as an HTTP-date).
    pub fn announce(mut self, wait: Duration) -> Self {
        self.announce = Some(wait);
        self
    }
}

type ScriptFn = dyn Fn(&ScriptRequest<'_>) -> Option<ScriptReply> + Send + Sync;

/// A script given to [`LabBuilder::script`](crate::LabBuilder::script).
#[derive(Clone)]
pub(crate) struct Script(Arc<ScriptFn>);

impl Script {
    pub(crate) fn new(
        f: impl Fn(&ScriptRequest<'_>) -> Option<ScriptReply> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(f))
    }

    pub(crate) fn answer(&self, req: &ScriptRequest<'_>) -> Option<ScriptReply> {
        (self.0)(req)
    }
}

impl std::fmt::Debug for Script {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Script(..)")
    }
}
