//! Requests a downloader makes on its own while it answers a page: a browser's scripts,
//! styles, XHR and images. They are the crawl's requests like any other, so they go through
//! the engine's scheduler (the slot of their host, which holds and paces them with the
//! pages) and the downloader's gate (robots.txt of their origin), and are counted in
//! [`Stats::subrequests`](crate::Stats::subrequests); the downloader gets the answer back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{mpsc, oneshot};

use crate::fetch::{Download, Failure, FailureKind, Feedback, Fetched};
use crate::request::Request;

/// The meta key that marks a request as a sub-request (its value is the engine's id for
/// the waiting downloader). Set by the engine; a spider never needs it.
pub const SUBREQUEST_META: &str = "subrequest";

/// One sub-request on its way to the engine, with where its answer goes.
#[derive(Debug)]
pub struct SubRequest {
    /// The request to send through the crawl.
    pub request: Request,
    /// Where the engine sends its download.
    pub reply: oneshot::Sender<Download>,
}

/// How a downloader sends its own requests through the crawl (see the module docs). Given
/// to the downloader by the engine with [`Downloader::attach`](crate::Downloader::attach);
/// cheap to clone.
#[derive(Debug, Clone)]
pub struct SubRequests {
    tx: mpsc::UnboundedSender<SubRequest>,
    /// Sub-requests answered without reaching the engine (blocked by the downloader's own
    /// rules), counted here so the crawl's stats show them beside the ones sent.
    blocked: Arc<AtomicU64>,
    /// Sub-requests still in flight when a rendered page was taken (its DOM may lack what
    /// they would have brought).
    pending_at_render: Arc<AtomicU64>,
}

impl SubRequests {
    /// A handle and the receiving end the engine reads.
    pub fn channel() -> (Self, mpsc::UnboundedReceiver<SubRequest>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Self {
                tx,
                blocked: Arc::new(AtomicU64::new(0)),
                pending_at_render: Arc::new(AtomicU64::new(0)),
            },
            rx,
        )
    }

    /// Send `request` through the crawl's scheduler and gate, and wait for its answer.
    ///
    /// The wait is as long as the host's slot makes it (a held host holds its sub-requests
    /// too), so callers put their own deadline around it. A crawl that has ended answers
    /// with a failure at once.
    pub async fn fetch(&self, request: Request) -> Download {
        let (reply, answer) = oneshot::channel();
        if self.tx.send(SubRequest { request, reply }).is_err() {
            return gone();
        }
        answer.await.unwrap_or_else(|_| gone())
    }

    /// Count a sub-request the downloader refused itself (a blocked resource type).
    pub fn count_blocked(&self) {
        self.blocked.fetch_add(1, Ordering::Relaxed);
    }

    /// Sub-requests the downloader refused itself so far.
    pub fn blocked(&self) -> u64 {
        self.blocked.load(Ordering::Relaxed)
    }

    /// Count `n` sub-requests still in flight when a rendered page was taken.
    pub fn count_pending_at_render(&self, n: u64) {
        self.pending_at_render.fetch_add(n, Ordering::Relaxed);
    }

    /// Sub-requests still in flight when their pages were taken, so far.
    pub fn pending_at_render(&self) -> u64 {
        self.pending_at_render.load(Ordering::Relaxed)
    }
}

/// The answer to a sub-request the engine can no longer take.
fn gone() -> Download {
    Download {
        outcome: Fetched::Failed(Failure::new(FailureKind::Other, "the crawl has ended")),
        feedback: Feedback::default(),
    }
}
