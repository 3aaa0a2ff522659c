//! The contracts between the engine and the crates that download and schedule.
//!
//! The engine owns the loop; a [`Downloader`] turns a request into an outcome plus
//! [`Feedback`] for the host's politeness slot, and a [`Scheduler`] decides what may be sent
//! next and when. Both are traits here so crawler-core stays free of HTTP and storage crates.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::request::Request;
use crate::response::Response;

/// Why a request ended without a usable response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FailureKind {
    /// The request took longer than `download_timeout` (body included).
    Timeout,
    /// The connection could not be made or broke.
    Connection,
    /// The host name did not resolve.
    Dns,
    /// The TLS handshake failed.
    Tls,
    /// The body was larger than `max_body_size`.
    TooLarge,
    /// More redirects than `max_redirects`, or a loop.
    TooManyRedirects,
    /// A redirect to a URL that cannot be crawled (non-http scheme, malformed).
    BadRedirect,
    /// The body could not be decoded (bad compression), or no character encoding fits
    /// an HTML page's bytes.
    Decode,
    /// The page was deeper, had more elements or took longer to parse than the `parse_*`
    /// settings allow (not retried: the same page would fail the same way).
    TooComplex,
    /// The server answered with a status the spider does not handle.
    Status,
    /// The spider's callback failed or panicked.
    Spider,
    /// A 200 response that was really a challenge or block page.
    SoftBlock,
    /// The address is refused by settings (`deny_private_addresses`).
    Forbidden,
    /// The host is skipped for this run (it asked for a wait longer than
    /// `max_retry_after`, its robots.txt stayed unavailable or found it unreachable…: see
    /// docs/retries.md); the request was not sent, or not again.
    HostSkipped,
    /// Anything else.
    Other,
    /// robots.txt forbids the URL; nothing was sent. Only an errback sees this kind
    /// ([`FailedRequest::kind`](crate::FailedRequest::kind)): the stats count such requests
    /// as `disallowed`, not as failed.
    Disallowed,
    /// The proxy the request goes through failed: it refused the connection or answered
    /// the tunnel (`CONNECT`) with an error (407, 502). Retried, as a connection failure;
    /// the target host's pace is not lowered for it (the host was not reached).
    Proxy,
    /// An extension stopped the download when its headers arrived
    /// ([`Extension::headers_received`](crate::Extension::headers_received): a body too
    /// large, a content type not wanted). Not retried: the same answer would be stopped
    /// again.
    DownloadStopped,
    /// A crawl replayed from WARC files (`replay_warc`) asked for a request the archive
    /// holds no response to: nothing goes to the network in a replay. Not retried.
    NotArchived,
}

impl FailureKind {
    /// Every kind, in declaration order (the docs checks walk it; a test below fails when a
    /// new kind is missing from it).
    pub const ALL: [FailureKind; 19] = [
        Self::Timeout,
        Self::Connection,
        Self::Dns,
        Self::Tls,
        Self::TooLarge,
        Self::TooManyRedirects,
        Self::BadRedirect,
        Self::Decode,
        Self::TooComplex,
        Self::Status,
        Self::Spider,
        Self::SoftBlock,
        Self::Forbidden,
        Self::HostSkipped,
        Self::Other,
        Self::Disallowed,
        Self::Proxy,
        Self::DownloadStopped,
        Self::NotArchived,
    ];

    /// The short, stable name used in stats and failure files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Connection => "connection",
            Self::Dns => "dns",
            Self::Tls => "tls",
            Self::TooLarge => "too_large",
            Self::TooManyRedirects => "too_many_redirects",
            Self::BadRedirect => "bad_redirect",
            Self::Decode => "decode",
            Self::TooComplex => "too_complex",
            Self::Status => "http_status",
            Self::Spider => "spider_error",
            Self::SoftBlock => "soft_block",
            Self::Forbidden => "forbidden_address",
            Self::HostSkipped => "host_skipped",
            Self::Other => "other",
            Self::Disallowed => "robots_disallowed",
            Self::Proxy => "proxy",
            Self::DownloadStopped => "download_stopped",
            Self::NotArchived => "not_archived",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A request that produced no usable response.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The class of failure.
    pub kind: FailureKind,
    /// A human-readable explanation.
    pub message: String,
    /// The last HTTP status seen, if any.
    pub status: Option<u16>,
    /// Body bytes received before the request failed (a body aborted at `max_body_size`,
    /// cut off, or a challenge page): they crossed the network, so the stats' bytes
    /// received count them.
    pub bytes: u64,
}

impl Failure {
    /// A failure of `kind` with a message.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            status: None,
            bytes: 0,
        }
    }
}

/// What a downloader made of a request.
// Moved once per request; boxing the response would cost an allocation on the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Fetched {
    /// A response arrived (any status).
    Response(Response),
    /// robots.txt forbids the URL; nothing was sent.
    Disallowed,
    /// No usable response.
    Failed(Failure),
    /// Not fetched yet and not terminal: the request goes back to its host's queue for a
    /// later send (robots.txt was fetched in its place, or is unavailable and the host is
    /// held). Not a retry attempt.
    Requeue(String),
}

/// What the host's slot learns from one request. Adaptive politeness reads this.
#[derive(Debug, Clone, Default)]
pub struct Feedback {
    /// Whether anything was sent to the host (false for robots refusals made from cache).
    pub sent: bool,
    /// The HTTP status, if a response arrived.
    pub status: Option<u16>,
    /// Time from sending to the end of the body.
    pub latency: Duration,
    /// When the request left (the downloader's clock just before it sent it), if known.
    /// The slot dates the send with it; without it, as the time the answer is read less
    /// `latency`, which is late by however long the engine took to read the answer.
    pub sent_at: Option<Instant>,
    /// The failure class, if the request failed.
    pub failure: Option<FailureKind>,
    /// A Retry-After the server asked for (on any status), already converted to a wait
    /// from now; an HTTP-date is read against the server's own `Date` when it sent one.
    pub retry_after: Option<Duration>,
    /// robots.txt Crawl-delay for this host, once known.
    pub crawl_delay: Option<Duration>,
    /// What the response's RateLimit headers said, in whichever dialect they came.
    pub rate_limit: Option<RateLimitReading>,
    /// The response was a challenge page (soft block) rather than content, on any status.
    pub soft_block: bool,
    /// robots.txt could not be read for this host (429, 5xx, network error, timeout): the
    /// page was not sent and goes back to the queue; the host should be held (by
    /// `retry_after` when the robots.txt response carried one, else by a growing backoff)
    /// and skipped once the outage outlasts `robots_outage_max`.
    pub robots_unavailable: bool,
    /// This send fetched a robots.txt that is not text (binary data): read as having no
    /// rules, as before, but warned about and counted (`robots_not_text` in the stats).
    pub robots_not_text: bool,
    /// How far the server's clock (its `Date` header) is ahead of ours, negative when
    /// behind; `None` without a usable `Date` or when the offset is implausible (over 24 h).
    /// Waits above are already corrected with it; this is for logs and diagnostics.
    pub server_clock_offset: Option<ClockOffset>,
    /// The answer cost the server little and is not a page: robots.txt, a sitemap. Its
    /// latency says nothing of how long the host's pages take, so it never sets the page
    /// latency baseline (a static robots.txt in front of dynamic pages would make every
    /// page look slow). Redirects and 304s are known as such by their status.
    pub cheap: bool,
    /// The HTTP version the answer came in, when one came from the network (counted per
    /// version in [`Stats::http_versions`](crate::Stats::http_versions)).
    pub http_version: Option<http::Version>,
    /// The proxy the request went through, its URL with any password redacted, when it went
    /// through one (counted per proxy in [`Stats::proxies`](crate::Stats::proxies)).
    pub proxy: Option<std::sync::Arc<str>>,
}

/// The name of an HTTP version as the stats and logs write it: `HTTP/1.1`, `HTTP/2`.
pub fn http_version_name(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_11 => "HTTP/1.1",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/?",
    }
}

/// A signed difference between a server's clock and ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockOffset {
    /// The size of the difference.
    pub amount: Duration,
    /// Whether the server's clock is ahead of ours (else behind or equal).
    pub ahead: bool,
}

/// A server's statement of its remaining quota, normalised from any RateLimit dialect.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimitReading {
    /// Requests left in the current window.
    pub remaining: u64,
    /// Time until the window resets (the quota refills), against the server's clock (a
    /// Unix-time reset is read against the server's `Date` when it sent one); `None` when
    /// the server did not say.
    pub reset: Option<Duration>,
    /// The window's quota, when the server said.
    pub limit: Option<u64>,
    /// The policy window, when stated (`RateLimit-Policy: 50;w=10`, structured `w=`).
    pub window: Option<Duration>,
}

/// Per-host figures for the final summary and progress displays.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct HostStats {
    /// The host key.
    pub host: String,
    /// Requests sent (that reached the wire).
    pub requests: u64,
    /// Requests handed out for the host that never reached it: refused by robots.txt or the
    /// address policy, or sub-requests whose page stopped waiting.
    pub unsent: u64,
    /// Responses by status.
    pub status: std::collections::BTreeMap<u16, u64>,
    /// Mean latency in seconds.
    pub latency_mean: f64,
    /// 95th percentile latency in seconds.
    pub latency_p95: f64,
    /// The current rate the host is paced at (requests/s), if the throttle sets one.
    pub rate: Option<f64>,
    /// Holds placed on the host (Retry-After, RateLimit exhausted, soft block).
    pub holds: u64,
    /// Total time under holds, in seconds.
    pub hold_secs: f64,
    /// Requests queued for the host right now.
    pub queued: usize,
    /// Why the host was skipped for this run, if it was.
    pub skipped: Option<String>,
}

/// A downloader's full answer: the outcome and the slot's feedback.
#[derive(Debug)]
pub struct Download {
    /// The outcome.
    pub outcome: Fetched,
    /// What the host's slot should learn.
    pub feedback: Feedback,
}

/// Turns requests into responses. Implemented by crawler-http.
pub trait Downloader: Send + Sync + 'static {
    /// Fetch one request: robots gate, HTTP, limits, classification.
    fn fetch(&self, request: &Request) -> impl Future<Output = Download> + Send;

    /// What must happen before the request itself may be sent in its slot (robots.txt),
    /// checked by the engine ahead of the middlewares: `Some` answers the request without
    /// sending it (a refusal, or back to the queue because robots.txt took the slot's
    /// send), so request middlewares only ever see requests that go out. `None` by default.
    fn gate(&self, _request: &Request) -> impl Future<Output = Option<Download>> + Send {
        std::future::ready(None)
    }

    /// Called once by the engine before the first request: how this downloader sends
    /// requests of its own (a browser's sub-requests) through the crawl's scheduler and
    /// gate. Nothing by default.
    fn attach(&self, _subrequests: crate::subrequest::SubRequests) {}

    /// Whether [`Downloader::render`] does work for `request` (a cheap check): while it
    /// does, the engine does not count the request against `concurrency`, because the
    /// sub-requests it waits for need the engine to hand them out. `false` by default.
    fn renders(&self, _request: &Request) -> bool {
        false
    }

    /// How many pages that [`Downloader::renders`] may be in flight at once, from their
    /// hand-out to the end of their worker (fetched and waiting for the renderer
    /// included). While that many are, the engine hands out no new page: the next ones
    /// wait in the frontier, unfetched, instead of in memory with their render's deadline
    /// running (sub-requests still go out: the pages rendering wait for them). Unbounded
    /// by default.
    fn render_limit(&self) -> usize {
        usize::MAX
    }

    /// Turn a fetched 2xx page into the response the spider parses, after its host's slot
    /// has learned from the fetch (a browser renders it here, its sub-requests paced by
    /// their own slots). The response as it is by default.
    fn render(
        &self,
        _request: &Request,
        response: Response,
    ) -> impl Future<Output = Fetched> + Send {
        std::future::ready(Fetched::Response(response))
    }
}

/// Identifies one request handed out by a scheduler until the engine completes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease(pub u64);

/// Why the frontier refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FilterReason {
    /// Seen before (same fingerprint).
    Duplicate,
    /// Outside the spider's allowed domains.
    Offsite,
    /// Deeper than `depth_limit`.
    Depth,
    /// Longer than `max_url_length`.
    UrlTooLong,
}

impl FilterReason {
    /// The short, stable name used in stats.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Duplicate => "duplicate",
            Self::Offsite => "offsite",
            Self::Depth => "depth",
            Self::UrlTooLong => "url_too_long",
        }
    }
}

/// The frontier's answer to a new request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Queued for fetching.
    Queued,
    /// Refused, with the reason.
    Filtered(FilterReason),
}

/// The scheduler's answer to "what next?".
// Moved once per request; boxing the request would cost an allocation on the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Next {
    /// Send this request now.
    Ready(Lease, Request),
    /// Nothing may be sent before this instant (every queued host is waiting).
    NotBefore(Instant),
    /// Nothing is queued.
    Empty,
}

/// Decides what is fetched next and when: dedup, filters, per-host queues and politeness.
///
/// All waiting lives here as "not before T", so the engine never parks a worker on a host
/// that must wait while other hosts have work.
pub trait Scheduler: Send + 'static {
    /// Offer a request to the frontier.
    fn enqueue(&mut self, request: Request, now: Instant) -> Admission;
    /// The next request whose host allows a send at `now`.
    fn next(&mut self, now: Instant) -> Next;
    /// Report the end of a leased request, with what its host's slot should learn. The
    /// lease stays open (a persistent frontier keeps the request) until
    /// [`Scheduler::acknowledge`] or [`Scheduler::retry`].
    fn complete(&mut self, lease: Lease, feedback: &Feedback, now: Instant);
    /// The leased request reached a terminal state and everything it produced (follow-up
    /// requests, items in the feeds) is safe: forget it.
    fn acknowledge(&mut self, lease: Lease);
    /// Requests queued and not yet handed out.
    fn queued(&self) -> usize;
    /// Queue a leased request again for another attempt, not to be sent before
    /// `not_before`. It was admitted once, so it skips the filters; its old lease is
    /// acknowledged once the new attempt is safely queued.
    fn retry(&mut self, lease: Lease, request: Request, not_before: Instant);

    /// `request`, handed out by [`Scheduler::next`] under `lease`, goes back unsent (the
    /// engine had no room for it after all): its slot gets the send back and it is queued
    /// again at once. A scheduler that counts hand-outs as requests sent takes this one
    /// back. By default, completed as unsent and retried now.
    fn give_back(&mut self, lease: Lease, request: Request, now: Instant) {
        self.complete(lease, &Feedback::default(), now);
        self.retry(lease, request, now);
    }
    /// Whether the host of `url` is held for a run of failures (5xx, broken connections,
    /// timeouts): a failure answered now is the host's, not the page's, so a retry of it
    /// does not spend one of the page's attempts (the host's hold makes it wait, and a host
    /// that stays down is skipped with a reason).
    fn host_unwell(&self, _url: &url::Url) -> bool {
        false
    }
    /// Save progress (the stats so far) and make the frontier durable, for stores that can.
    fn checkpoint(&mut self, _stats: &crate::Stats) {}
    /// Stats saved by an earlier run of this job, when resuming one.
    fn restored_stats(&mut self) -> Option<crate::Stats> {
        None
    }
    /// Requests dropped because their host was skipped for this run (a wait longer than
    /// allowed), each with the reason. The engine counts them as terminal.
    fn take_skipped(&mut self) -> Vec<(Request, String)> {
        Vec::new()
    }
    /// Per-host figures.
    fn host_stats(&self) -> Vec<HostStats> {
        Vec::new()
    }
    /// Whether other processes share this frontier (then one worker's requests may be fetched
    /// by another, and only the fleet's summed stats add up).
    fn is_shared(&self) -> bool {
        false
    }
    /// A failure of the scheduler's storage since the last call. The engine stops the crawl
    /// (finishing what is in flight) and reports it.
    fn take_error(&mut self) -> Option<crate::Error> {
        None
    }
}

#[cfg(test)]
mod failure_kind_tests {
    use super::FailureKind::{self, *};

    /// An exhaustive match: a new kind fails to compile here until it gets the next number,
    /// and then the test fails until it is in [`FailureKind::ALL`].
    fn ordinal(k: FailureKind) -> usize {
        match k {
            Timeout => 0,
            Connection => 1,
            Dns => 2,
            Tls => 3,
            TooLarge => 4,
            TooManyRedirects => 5,
            BadRedirect => 6,
            Decode => 7,
            TooComplex => 8,
            Status => 9,
            Spider => 10,
            SoftBlock => 11,
            Forbidden => 12,
            HostSkipped => 13,
            Other => 14,
            Disallowed => 15,
            Proxy => 16,
            DownloadStopped => 17,
            NotArchived => 18,
        }
    }

    #[test]
    fn all_lists_every_kind_once_in_order() {
        assert!(FailureKind::ALL.iter().map(|&k| ordinal(k)).eq(0..19));
    }
}
