//! A frontier that is one of a fleet: the [`Fleet`] contract a shared store implements, and
//! [`FleetFrontier`], which finds work other workers queued, holds requests leased ahead
//! of their slot until the booked time, and ends only when the whole fleet is done.

use std::time::Duration;

use crawler_core::{Admission, Feedback, HostStats, Lease, Next, Request, Scheduler};
use tokio::time::Instant;

use crate::frontier::Frontier;
use crate::store::QueueStore;

/// What the fleet as a whole has left, as last heard.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FleetStatus {
    /// Requests queued fleet-wide (hosts skipped for the run not counted).
    pub queued: usize,
    /// Requests leased by any worker and not yet acknowledged (including leases of dead
    /// workers that have not expired yet).
    pub leased: usize,
}

/// A shared frontier's view of the whole fleet.
pub trait Fleet: Send + 'static {
    /// The fleet's state now (one round trip). Asked only when this worker has nothing
    /// to do, before it concludes the crawl is over.
    fn status(&self) -> FleetStatus;

    /// A failure of the shared backend met outside the frontier's fallible calls (in
    /// `status`, or the store's `queued` and `hosts`, which cannot return one), taken once.
    /// The engine stops on it, so an idle worker whose backend failed does not wait forever.
    fn take_error(&self) -> Option<crate::Error> {
        None
    }

    /// The fleet time (ms) the send of `lease`, just handed out by the shared store, was
    /// booked for, when the store leased it ahead of its slot: the request must not be sent
    /// before it. `None`: send at once (the store books sends at the lease).
    fn booked_at(&self, _lease: u64) -> Option<f64> {
        None
    }

    /// The fleet's clock now (ms), as estimated locally.
    fn now_ms(&self) -> f64 {
        0.0
    }

    /// Read `host`'s shared state afresh (one round trip) and say whether a send booked for
    /// `at` (fleet ms) may still go: `false` when a hold placed since the lease covers it,
    /// or the fleet gave the host up, or the state cannot be read (then
    /// [`Fleet::take_error`] reports why).
    fn still_clear(&self, _host: &str, _at: f64) -> bool {
        true
    }

    /// A request held for the send booked at `at` (fleet ms) is about to go, now. Later
    /// than the host's pace allows ([`HostMachine::late_limit_ms`](crate::politeness::HostMachine::late_limit_ms)),
    /// it would follow the send before it, or precede the next one booked on time, closer
    /// than the interval (the worker was starved of CPU past its slot): the store books it
    /// a new slot instead ([`HostMachine::rebook`](crate::politeness::HostMachine::rebook)).
    fn missed(&self, _host: &str, _at: f64) -> Missed {
        Missed::OnTime
    }
}

/// Whether a held request may leave now (see [`Fleet::missed`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Missed {
    /// Within the lateness its host's pace allows: send it.
    OnTime,
    /// Too late: it was booked again for this fleet time (ms).
    Rebooked(f64),
    /// Too late, and the store could not book it again (it failed; [`Fleet::take_error`]
    /// says why): give it back.
    Unknown,
}

/// How often an idle worker looks for work queued by others (and for expired leases).
const POLL: Duration = Duration::from_millis(100);

/// A [`Frontier`] over a store shared by several workers: finds work other workers queued
/// and waits, rather than finishing, while any worker still holds leases that may yield
/// more work or come back when they expire.
///
/// Built with [`FleetFrontier::solo`], it is the plain frontier (for a crawl that is not
/// shared), so one engine type serves both.
pub struct FleetFrontier<S: QueueStore> {
    inner: Frontier<S>,
    fleet: Option<Box<dyn Fleet>>,
    /// When the fleet was last asked whether the crawl is over.
    last_status: Option<Instant>,
    /// Requests leased ahead of their booked send time, waiting for it (at most
    /// [`MAX_HELD`]; each for less than half its host's interval).
    held: Vec<Held>,
}

/// A request leased ahead of its slot, kept until the fleet's clock reaches it.
struct Held {
    lease: Lease,
    request: Request,
    /// The host's slot key.
    host: String,
    /// The booked send time (fleet ms).
    at: f64,
    /// Whether the host's state was read again since the lease (see [`CONFIRM_LEAD_MS`]).
    confirmed: bool,
}

/// Requests one worker holds for their slots at most: a broad crawl leases many hosts at
/// once, and each held request is a lease the fleet cannot give to another worker.
const MAX_HELD: usize = 64;

/// How long before a held request's slot its host's state is read again, for a hold another
/// worker placed after the lease. Holds placed later than that are missed, as a hold placed
/// between a lease and its send always was; the lead covers a round trip to the store, so
/// the re-read rarely delays the send. A read of the host's state that came back within
/// this of the slot anyway (the lease's own reply, say) is as fresh: a [`Fleet`] may answer
/// [`Fleet::still_clear`] from it without another round trip.
pub const CONFIRM_LEAD_MS: f64 = 10.0;

impl<S: QueueStore> FleetFrontier<S> {
    /// Wrap `inner`, whose store is shared; `fleet` reports on the other workers.
    pub fn new(inner: Frontier<S>, fleet: Box<dyn Fleet>) -> Self {
        Self {
            inner,
            fleet: Some(fleet),
            last_status: None,
            held: Vec::new(),
        }
    }

    /// A frontier that is not shared: every call goes straight to `inner`.
    pub fn solo(inner: Frontier<S>) -> Self {
        Self {
            inner,
            fleet: None,
            last_status: None,
            held: Vec::new(),
        }
    }

    /// Record every host's sends, outcomes and politeness changes (see
    /// [`Frontier::record_to`]).
    pub fn record_to(&mut self, recorder: crate::Recorder) {
        self.inner.record_to(recorder);
    }

    /// The wrapped frontier.
    pub fn frontier(&self) -> &Frontier<S> {
        &self.inner
    }

    /// Requests leased ahead of their slot and not handed out yet.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// When the engine should call again for the held requests: the earliest re-read or
    /// send time among them.
    fn held_wake(&self, now: Instant, now_ms: f64) -> Option<Instant> {
        let at = self
            .held
            .iter()
            .map(|h| {
                if h.confirmed {
                    h.at
                } else {
                    h.at - CONFIRM_LEAD_MS
                }
            })
            .min_by(f64::total_cmp)?;
        // Rounded up: waking a little late costs nothing, early only another call.
        let wait = (at - now_ms).max(0.0);
        Some(now + Duration::from_micros((wait * 1_000.0).ceil() as u64))
    }

    /// A held request whose slot has come, if any; re-reads the host's state of those whose
    /// slot is near, and gives back those a hold now covers.
    fn release_held(&mut self, now: Instant) -> Option<Next> {
        let mut i = 0;
        while i < self.held.len() {
            let fleet = self.fleet.as_ref()?;
            let h = &mut self.held[i];
            if !h.confirmed && h.at - fleet.now_ms() <= CONFIRM_LEAD_MS {
                h.confirmed = true;
                if !fleet.still_clear(&h.host, h.at) {
                    let h = self.held.swap_remove(i);
                    tracing::debug!(
                        host = %h.host,
                        "a hold placed after the lease covers its slot: request given back"
                    );
                    self.give_back(h, now, false);
                    continue;
                }
            }
            // Never before the booked time: that is what keeps the fleet's sends spaced.
            // Nor long after it: a request the worker could not release on time (starved of
            // CPU) takes a new slot rather than leave next to another worker's send.
            if h.confirmed && fleet.now_ms() >= h.at {
                match fleet.missed(&h.host, h.at) {
                    Missed::OnTime => {
                        let h = self.held.swap_remove(i);
                        return Some(Next::Ready(h.lease, h.request));
                    }
                    Missed::Rebooked(at) => {
                        tracing::debug!(
                            host = %h.host,
                            late_ms = fleet.now_ms() - h.at,
                            "a held request missed its slot: booked again"
                        );
                        h.at = at;
                        h.confirmed = false;
                    }
                    Missed::Unknown => {
                        let h = self.held.swap_remove(i);
                        self.give_back(h, now, false);
                        continue;
                    }
                }
            }
            i += 1;
        }
        None
    }

    /// A held request that will not be sent: its slot goes back to the host's budget, and
    /// the request to its queue (`now`: at once, as the crawl stops; otherwise through the
    /// frontier's retry queue, its lease open until the request is queued again).
    fn give_back(&mut self, h: Held, now: Instant, at_once: bool) {
        let unsent = Feedback {
            sent: false,
            ..Default::default()
        };
        self.inner.complete(h.lease, &unsent, now);
        if at_once {
            self.inner.requeue_now(h.lease, h.request, now);
        } else {
            self.inner.retry(h.lease, h.request, now);
        }
    }

    /// The plain frontier's next request, or, when none is ready, the hosts other workers
    /// queued work for, and (when nothing is queued here) whether the fleet is done.
    fn next_shared(&mut self, now: Instant) -> Next {
        let first = self.inner.next(now);
        let Some(fleet) = &self.fleet else {
            return first;
        };
        if matches!(first, Next::Ready(..)) {
            return first;
        }
        // A refused lease or another worker's pushes: give every host with work (as the
        // store last heard) a place in the ready heap; the store limits how often this asks
        // the shared backend. Twice, because a lease refused by the shared budget takes its
        // host out of the heap, and it must go back in at the slot the refusal booked.
        let mut next = first;
        for _ in 0..2 {
            if matches!(next, Next::Ready(..)) {
                return next;
            }
            self.inner.refresh_hosts(now);
            next = self.inner.next(now);
        }
        let poll = now + POLL;
        match next {
            Next::Ready(..) => next,
            Next::NotBefore(at) => Next::NotBefore(at.min(poll)),
            Next::Empty if !self.held.is_empty() => Next::NotBefore(poll),
            Next::Empty => {
                // Only a fresh answer may end the crawl (a stale one may predate another
                // worker's pushes); ask at most once per poll interval.
                let stale = self
                    .last_status
                    .is_none_or(|at| now.saturating_duration_since(at) >= POLL);
                if stale {
                    self.last_status = Some(now);
                    let fleet = fleet.status();
                    if fleet.queued == 0 && fleet.leased == 0 {
                        return Next::Empty;
                    }
                }
                Next::NotBefore(poll)
            }
        }
    }
}

impl<S: QueueStore> Drop for FleetFrontier<S> {
    /// Requests still held when the crawl ends (it was stopped between a lease and its
    /// slot) go back to their queues at once, rather than waiting in Redis for their lease
    /// to expire.
    fn drop(&mut self) {
        let now = Instant::now();
        for h in std::mem::take(&mut self.held) {
            self.give_back(h, now, true);
        }
    }
}

impl<S: QueueStore> Scheduler for FleetFrontier<S> {
    fn enqueue(&mut self, request: Request, now: Instant) -> Admission {
        self.inner.enqueue(request, now)
    }

    fn is_shared(&self) -> bool {
        self.fleet.is_some()
    }

    /// Requests leased ahead of their slot (see [`lease_ahead`](super::lease_ahead)) are kept here and handed
    /// out once the fleet's clock reaches the time their send was booked for, never before.
    fn next(&mut self, now: Instant) -> Next {
        if self.fleet.is_none() {
            return self.inner.next(now);
        }
        if let Some(ready) = self.release_held(now) {
            return ready;
        }
        loop {
            let now_ms = self.fleet.as_ref().map_or(0.0, |f| f.now_ms());
            if self.held.len() >= MAX_HELD {
                return match self.held_wake(now, now_ms) {
                    Some(at) => Next::NotBefore(at),
                    None => Next::NotBefore(now + POLL),
                };
            }
            match self.next_shared(now) {
                Next::Ready(lease, request) => {
                    let booked = self.fleet.as_ref().and_then(|f| f.booked_at(lease.0));
                    let host = self.inner.lease_host(lease).map(str::to_owned);
                    // The fleet's clock after the lease's round trip: a send booked for a
                    // moment that has passed meanwhile goes at once, without a confirming
                    // read.
                    let after = self.fleet.as_ref().map_or(now_ms, |f| f.now_ms());
                    match (booked, host) {
                        (Some(at), Some(host)) if at > after => {
                            self.held.push(Held {
                                lease,
                                request,
                                host,
                                at,
                                confirmed: false,
                            });
                            // Another host may be ready now.
                            continue;
                        }
                        _ => return Next::Ready(lease, request),
                    }
                }
                Next::NotBefore(at) => {
                    let wake = self.held_wake(now, now_ms).map_or(at, |h| h.min(at));
                    return Next::NotBefore(wake);
                }
                Next::Empty => return Next::Empty,
            }
        }
    }

    fn complete(&mut self, lease: Lease, feedback: &Feedback, now: Instant) {
        self.inner.complete(lease, feedback, now);
    }

    fn acknowledge(&mut self, lease: Lease) {
        self.inner.acknowledge(lease);
    }

    fn queued(&self) -> usize {
        self.inner.queued()
    }

    fn retry(&mut self, lease: Lease, request: Request, not_before: Instant) {
        self.inner.retry(lease, request, not_before);
    }

    fn give_back(&mut self, lease: Lease, request: Request, now: Instant) {
        self.inner.give_back(lease, request, now);
    }

    fn checkpoint(&mut self, stats: &crawler_core::Stats) {
        self.inner.checkpoint(stats);
    }

    fn restored_stats(&mut self) -> Option<crawler_core::Stats> {
        self.inner.restored_stats()
    }

    fn take_skipped(&mut self) -> Vec<(Request, String)> {
        self.inner.take_skipped()
    }

    fn host_stats(&self) -> Vec<HostStats> {
        self.inner.host_stats()
    }

    fn take_error(&mut self) -> Option<crawler_core::Error> {
        self.inner.take_error().or_else(|| {
            let e = self.fleet.as_ref()?.take_error()?;
            Some(
                crawler_core::Error::new(
                    crawler_core::ErrorKind::Storage,
                    "the shared frontier failed",
                )
                .with_source(e),
            )
        })
    }
}
