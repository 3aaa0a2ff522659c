//! Booked send times in a fleet: a worker may lease a host's request a little before its
//! slot, and then hands it out at the slot it booked, never earlier, whatever the delay of
//! the lease's reply; a request still held when the worker stops goes back to its queue at
//! once; and a hold another worker places after the lease keeps the request back.
//!
//! Each test starts its own `redis-server` (without persistence) on a free loopback port.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crawler_core::{Feedback, Next, Request, Scheduler, Settings, ThrottleMode};
use crawler_sched::politeness::Params;
use crawler_sched::{
    Entry, Fleet, FleetFrontier, Frontier, FrontierConfig, Missed, QueueStore, SharedThrottle,
};
use crawler_store::{RedisOptions, RedisStore};
use tokio::time::Instant;

#[path = "support/redis.rs"]
mod redis_server;

use redis_server::Redis;

/// A fixed 200 ms pace, no randomisation: the booked interval the sends must keep.
const GAP_MS: f64 = 200.0;

fn settings() -> Settings {
    Settings {
        throttle: ThrottleMode::Fixed,
        download_delay: Duration::from_millis(GAP_MS as u64),
        randomize_delay: false,
        concurrency_per_host: 4,
        ..Default::default()
    }
}

fn open(redis: &Redis, job: &str, ahead: Duration) -> RedisStore {
    RedisStore::open(RedisOptions {
        retry_for: Duration::from_secs(10),
        budget: Some(Params::from_settings(&settings())),
        lease_ahead: ahead,
        ..RedisOptions::new(redis.url(), job)
    })
    .unwrap()
}

/// A store whose lease replies come back late by a varying delay (0-20 ms), as they do
/// on a busy machine: the jitter that compressed the fleet's gaps at the server.
struct SlowReplies {
    inner: RedisStore,
    draw: u64,
}

impl QueueStore for SlowReplies {
    fn insert_seen(
        &mut self,
        fp: crawler_sched::Fingerprint,
    ) -> Result<bool, crawler_sched::Error> {
        self.inner.insert_seen(fp)
    }
    fn push(&mut self, host: &str, entry: Entry) -> Result<(), crawler_sched::Error> {
        self.inner.push(host, entry)
    }
    fn lease(&mut self, host: &str) -> Result<Option<(u64, Request)>, crawler_sched::Error> {
        let leased = self.inner.lease(host)?;
        if leased.is_some() {
            // A fixed-sequence generator: the delays vary, the test does not.
            self.draw = self
                .draw
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            std::thread::sleep(Duration::from_millis((self.draw >> 33) % 21));
        }
        Ok(leased)
    }
    fn ack(&mut self, lease: u64) -> Result<(), crawler_sched::Error> {
        self.inner.ack(lease)
    }
    fn host_len(&self, host: &str) -> usize {
        self.inner.host_len(host)
    }
    fn queued(&self) -> usize {
        self.inner.queued()
    }
    fn hosts(&self) -> Vec<String> {
        self.inner.hosts()
    }
    fn next_seq(&self) -> u64 {
        self.inner.next_seq()
    }
    fn send_buffered(&mut self) -> Result<(), crawler_sched::Error> {
        self.inner.send_buffered()
    }
}

fn request(n: usize) -> Request {
    Request::get(format!("http://h.test/{n}")).unwrap()
}

fn answered() -> Feedback {
    Feedback {
        sent: true,
        status: Some(200),
        latency: Duration::from_millis(5),
        ..Default::default()
    }
}

/// Two workers, each lease reply late by up to 20 ms: every request is handed out at or
/// after the time its send was booked for (on the fleet's clock), the booked times are the
/// interval apart, and the hand-outs keep to them: half come within 3 ms of their booked
/// time. Sent when the lease's reply arrived (without booked send times), they were late by
/// the reply's delay, 10 ms in the median here, and the next worker's send on time followed
/// closer than the interval.
#[test]
fn a_fleets_sends_leave_at_their_booked_times_whatever_the_reply_delays() {
    let redis = Redis::start();
    let job = "booked-spacing";
    let ahead = Duration::from_millis(50);
    let booked = Booked::default();
    let mut fa = noting_worker_of(open(&redis, job, ahead), 1, Arc::clone(&booked));
    let fb = noting_worker_of(open(&redis, job, ahead), 7, Arc::clone(&booked));
    let clock = open(&redis, job, ahead).budget();
    let pages = 16;
    let now = Instant::now();
    for n in 0..pages {
        assert_eq!(fa.enqueue(request(n), now), crawler_core::Admission::Queued);
    }
    // (booked send time, hand-out time), fleet ms.
    let sent = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = [fa, fb]
        .into_iter()
        .map(|mut f| {
            let sent = Arc::clone(&sent);
            let booked = Arc::clone(&booked);
            let clock = Arc::clone(&clock);
            std::thread::spawn(move || {
                loop {
                    let now = Instant::now();
                    match f.next(now) {
                        Next::Ready(lease, _) => {
                            let at = clock.now_ms();
                            let slot = booked.lock().unwrap().get(&lease.0).copied();
                            sent.lock().unwrap().push((slot.unwrap_or(f64::NAN), at));
                            f.complete(lease, &answered(), Instant::now());
                            f.acknowledge(lease);
                        }
                        Next::NotBefore(at) => {
                            std::thread::sleep(at.saturating_duration_since(now));
                        }
                        Next::Empty => break,
                    }
                }
                f.held()
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 0, "nothing is left held at the end");
    }
    let mut sent = sent.lock().unwrap().clone();
    assert_eq!(sent.len(), pages);
    sent.sort_by(|a, b| a.0.total_cmp(&b.0));
    // 1 ms for the estimates of the Redis clock by the workers and by this test.
    for (slot, at) in &sent {
        assert!(
            *at >= slot - 1.0,
            "handed out {:.1} ms before its booked time: {sent:.1?}",
            slot - at
        );
    }
    for w in sent.windows(2) {
        assert!(
            w[1].0 - w[0].0 >= GAP_MS - 0.01,
            "booked {:.1} ms apart: {sent:.1?}",
            w[1].0 - w[0].0
        );
    }
    let mut late: Vec<f64> = sent.iter().map(|(slot, at)| at - slot).collect();
    late.sort_by(f64::total_cmp);
    let median = late[late.len() / 2];
    assert!(
        median <= 3.0,
        "hand-outs late by {median:.1} ms in the median: {sent:.1?}"
    );
}

/// The fleet view of a store, noting the booked send time of every lease it is asked about,
/// and every new slot booked for a held request that missed its own.
struct Noting {
    inner: Box<dyn Fleet>,
    booked: Booked,
    rebooked: Rebooked,
}

/// (missed slot, new slot), fleet ms.
type Rebooked = Arc<Mutex<Vec<(f64, f64)>>>;

/// Booked send times by lease, as a worker's frontier learnt them.
type Booked = Arc<Mutex<std::collections::HashMap<u64, f64>>>;

impl Fleet for Noting {
    fn status(&self) -> crawler_sched::FleetStatus {
        self.inner.status()
    }
    fn booked_at(&self, lease: u64) -> Option<f64> {
        let at = self.inner.booked_at(lease)?;
        self.booked.lock().unwrap().insert(lease, at);
        Some(at)
    }
    fn now_ms(&self) -> f64 {
        self.inner.now_ms()
    }
    fn still_clear(&self, host: &str, at: f64) -> bool {
        self.inner.still_clear(host, at)
    }
    fn missed(&self, host: &str, at: f64) -> Missed {
        let missed = self.inner.missed(host, at);
        if let Missed::Rebooked(slot) = missed {
            self.rebooked.lock().unwrap().push((at, slot));
        }
        missed
    }
}

/// A worker over its own store with slow lease replies, noting each lease's booked time.
fn noting_worker_of(store: RedisStore, draw: u64, booked: Booked) -> FleetFrontier<SlowReplies> {
    rebooking_worker_of(store, draw, booked, Rebooked::default())
}

/// A worker noting booked times and new slots for missed ones.
fn rebooking_worker_of(
    store: RedisStore,
    draw: u64,
    booked: Booked,
    rebooked: Rebooked,
) -> FleetFrontier<SlowReplies> {
    let budget = store.budget();
    let fleet = Box::new(Noting {
        inner: store.fleet(),
        booked,
        rebooked,
    });
    let mut config = FrontierConfig::from_settings(&settings(), vec![]);
    config.throttle = Box::new(move |host, _now| {
        Box::new(SharedThrottle::new(
            host,
            Arc::clone(&budget),
            Params::from_settings(&settings()),
        ))
    });
    FleetFrontier::new(
        Frontier::with_store(config, SlowReplies { inner: store, draw }),
        fleet,
    )
}

/// Send one request, then lease the next one ahead of its slot, and return the worker
/// holding it.
fn holding(store: RedisStore) -> FleetFrontier<SlowReplies> {
    holding_noted(store, Booked::default(), Rebooked::default())
}

/// [`holding`], noting booked times and new slots.
fn holding_noted(
    store: RedisStore,
    booked: Booked,
    rebooked: Rebooked,
) -> FleetFrontier<SlowReplies> {
    let mut f = rebooking_worker_of(store, 0, booked, rebooked);
    let now = Instant::now();
    for n in 0..3 {
        f.enqueue(request(n), now);
    }
    let mut sent = 0;
    for _ in 0..100 {
        match f.next(Instant::now()) {
            Next::Ready(lease, _) => {
                assert_eq!(sent, 0, "the second request must be held for its slot");
                sent += 1;
                f.complete(lease, &answered(), Instant::now());
                f.acknowledge(lease);
            }
            Next::NotBefore(_) if sent == 1 && f.held() == 1 => return f,
            Next::NotBefore(at) => {
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
            }
            Next::Empty => panic!("requests are queued"),
        }
    }
    panic!("the second request was never leased ahead of its slot");
}

#[test]
fn a_request_held_for_its_slot_goes_back_to_its_queue_when_the_worker_stops() {
    let redis = Redis::start();
    let job = "booked-stop";
    let ahead = Duration::from_millis(150);
    let f = holding(open(&redis, job, ahead));
    assert_eq!(f.held(), 1);
    drop(f);
    // At once, not when the lease expires (30 s): nothing leased, both requests queued.
    let other = open(&redis, job, ahead);
    let status = other.fleet().status();
    assert_eq!(status.leased, 0, "{status:?}");
    assert_eq!(status.queued, 2, "{status:?}");
}

#[test]
fn a_hold_placed_after_the_lease_keeps_the_held_request_back() {
    let redis = Redis::start();
    let job = "booked-hold";
    let ahead = Duration::from_millis(150);
    let mut f = holding(open(&redis, job, ahead));
    // Another worker learns of a Retry-After and holds the host for a minute.
    let other = open(&redis, job, ahead);
    // Read the host's state (any time is clear of holds so far, at the end of time).
    assert!(other.fleet().still_clear("h.test", f64::INFINITY));
    let budget = other.budget();
    let v = budget.cached("h.test").unwrap();
    let mut held = v.state.clone();
    held.hold_until = budget.now_ms() + 60_000.0;
    assert!(budget.commit("h.test", v.version, &held, None).unwrap());
    // The held request's slot comes and goes: it is not handed out, but queued again.
    let until = Instant::now() + Duration::from_millis(400);
    while Instant::now() < until {
        match f.next(Instant::now()) {
            Next::Ready(..) => panic!("a request was handed out inside a hold"),
            Next::NotBefore(at) => {
                std::thread::sleep(at.min(until).saturating_duration_since(Instant::now()));
            }
            Next::Empty => break,
        }
    }
    assert_eq!(f.held(), 0);
    assert_eq!(f.queued(), 2, "the held request is queued again");
}

/// A name's held request waits out a hold placed on its pool after the lease, even a pool
/// formed since: a refusal of any name of the pool holds the pacer's state first (the
/// other names' own states one commit each, later), so the confirming read before the send
/// reads the pacer's too.
#[test]
fn a_hold_placed_on_a_pool_after_the_lease_keeps_a_pooled_names_held_request_back() {
    let redis = Redis::start();
    let job = "booked-pool-hold";
    let ahead = Duration::from_millis(150);
    let mut f = rebooking_worker_of(
        open(&redis, job, ahead),
        0,
        Booked::default(),
        Rebooked::default(),
    );
    let other = open(&redis, job, ahead);
    let budget = other.budget();
    let now = Instant::now();
    for url in [
        "http://a.site.test/0",
        "http://b.site.test/0",
        "http://b.site.test/1",
    ] {
        f.enqueue(Request::get(url).unwrap(), now);
    }
    // One request of each name sent and answered (both are the site's members), and `b.`'s
    // second one leased ahead of its slot.
    let mut sent = Vec::new();
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        match f.next(Instant::now()) {
            Next::Ready(lease, request) => {
                sent.push(request.url.host_str().unwrap_or_default().to_owned());
                f.complete(lease, &answered(), Instant::now());
                f.acknowledge(lease);
            }
            Next::NotBefore(_) if sent.len() == 2 && f.held() == 1 => break,
            Next::NotBefore(at) => {
                std::thread::sleep(at.min(until).saturating_duration_since(Instant::now()));
            }
            Next::Empty => panic!("requests are queued"),
        }
    }
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(f.held(), 1, "b.'s second request is held for its slot");
    // Then a refusal of `a.` reaches another worker: it pools the group on `a.` and holds
    // the pool for a minute, committed to the pacer's state alone (this worker has not
    // heard of the pool: the confirming read finds it).
    let (pool, _) = budget.pool("a.site.test").unwrap().unwrap();
    assert_eq!(pool.pacer, "a.site.test");
    assert!(other.fleet().still_clear("a.site.test", f64::INFINITY));
    let v = budget.cached("a.site.test").unwrap();
    let mut held = v.state.clone();
    held.hold_until = budget.now_ms() + 60_000.0;
    assert!(
        budget
            .commit("a.site.test", v.version, &held, None)
            .unwrap()
    );
    let until = Instant::now() + Duration::from_millis(600);
    while Instant::now() < until {
        match f.next(Instant::now()) {
            Next::Ready(_, request) => panic!("{} handed out inside its pool's hold", request.url),
            Next::NotBefore(at) => {
                std::thread::sleep(at.min(until).saturating_duration_since(Instant::now()));
            }
            Next::Empty => break,
        }
    }
    assert_eq!(f.held(), 0);
    assert_eq!(f.queued(), 1, "the held request is queued again");
}

/// Call the worker, sleeping as it asks, until it hands a request out (within 5 s).
fn first_hand_out(f: &mut FleetFrontier<SlowReplies>) -> Option<crawler_core::Lease> {
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        match f.next(Instant::now()) {
            Next::Ready(lease, _) => return Some(lease),
            Next::NotBefore(at) => {
                std::thread::sleep(at.min(until).saturating_duration_since(Instant::now()));
            }
            Next::Empty => return None,
        }
    }
    None
}

/// A worker starved of CPU past the slot of the request it holds (here it simply does not
/// call for 600 ms) does not send it late, next to the send booked after it: the request
/// takes a new slot, at least the look-ahead after the moment it was found late, and
/// leaves at it. Sent late, it would have followed the previous send, or preceded the next
/// one booked on time, closer than the interval.
#[test]
fn a_held_request_that_missed_its_slot_takes_a_new_one() {
    let redis = Redis::start();
    let job = "booked-missed";
    let ahead = Duration::from_millis(150);
    let booked = Booked::default();
    let rebooked = Rebooked::default();
    let mut f = holding_noted(
        open(&redis, job, ahead),
        Arc::clone(&booked),
        Arc::clone(&rebooked),
    );
    let clock = open(&redis, job, ahead).budget();
    let missed = *booked
        .lock()
        .unwrap()
        .values()
        .max_by(|a, b| a.total_cmp(b))
        .unwrap();
    // The stall: the slot passes by far more than the pace allows (5 ms at a 200 ms gap).
    std::thread::sleep(Duration::from_millis(600));
    let found = clock.now_ms();
    assert!(found - missed > 300.0, "{found} {missed}");
    let lease = first_hand_out(&mut f).expect("the held request is handed out");
    let out = clock.now_ms();
    f.complete(lease, &answered(), Instant::now());
    f.acknowledge(lease);
    let rebooked = rebooked.lock().unwrap().clone();
    assert_eq!(rebooked.len(), 1, "{rebooked:?}");
    let (was, slot) = rebooked[0];
    assert!((was - missed).abs() < 1e-6, "{rebooked:?} {missed}");
    // The look-ahead is half the 200 ms interval here.
    assert!(
        slot >= found + 99.0,
        "new slot {slot}, found late at {found}"
    );
    assert!(
        out >= slot - 1.0,
        "handed out at {out}, booked again for {slot}"
    );
}

/// The same worker, called on time: the held request leaves at its slot, with no new one.
#[test]
fn a_held_request_called_on_time_keeps_its_slot() {
    let redis = Redis::start();
    let job = "booked-on-time";
    let ahead = Duration::from_millis(150);
    let rebooked = Rebooked::default();
    let mut f = holding_noted(
        open(&redis, job, ahead),
        Booked::default(),
        Arc::clone(&rebooked),
    );
    let lease = first_hand_out(&mut f).expect("the held request is handed out");
    f.complete(lease, &answered(), Instant::now());
    f.acknowledge(lease);
    assert!(
        rebooked.lock().unwrap().is_empty(),
        "{:?}",
        rebooked.lock().unwrap()
    );
}

/// A send that left late (the worker was starved between releasing it and writing it)
/// moves the host's next slot to one interval after its departure, and the worker commits
/// that at once: another worker booking the next slot knows of it. Folded into the
/// worker's next commit like a routine answer, it came too late for that booking.
#[test]
fn a_late_departure_reaches_the_other_workers_at_once() {
    let redis = Redis::start();
    let job = "booked-late-departure";
    let ahead = Duration::from_millis(50);
    let mut f = noting_worker_of(open(&redis, job, ahead), 0, Booked::default());
    let other = open(&redis, job, ahead);
    let clock = other.budget();
    f.enqueue(request(0), Instant::now());
    let lease = first_hand_out(&mut f).expect("the request is handed out");
    // Written 120 ms after it was handed out.
    std::thread::sleep(Duration::from_millis(120));
    let departed = clock.now_ms();
    let late = Feedback {
        sent_at: Some(Instant::now()),
        ..answered()
    };
    std::thread::sleep(Duration::from_millis(5));
    f.complete(lease, &late, Instant::now());
    assert!(other.fleet().still_clear("h.test", f64::INFINITY));
    let tat = clock.cached("h.test").unwrap().state.tat;
    assert!(
        tat >= departed + GAP_MS - 3.0,
        "the next slot at {tat:.1}, {:.1} ms after a departure at {departed:.1}",
        tat - departed
    );
}

/// The send gap a fleet measures (the pace the server saw, where a refusal's cut starts)
/// runs from a late send's departure, not from its booking. Measured from the bookings, a
/// busy machine's late sends read as long gaps: a young host's first refusal then cut to
/// 0.45 r/s where the server had refused 1 r/s, and a local crawl cut to 0.8.
#[test]
fn a_late_departure_dates_the_fleets_send_gap() {
    let redis = Redis::start();
    let job = "booked-late-gap";
    let ahead = Duration::from_millis(50);
    let mut f = noting_worker_of(open(&redis, job, ahead), 0, Booked::default());
    let mut other = open(&redis, job, ahead);
    f.enqueue(request(0), Instant::now());
    f.enqueue(request(1), Instant::now());
    let lease = first_hand_out(&mut f).expect("the request is handed out");
    let booked = other.budget().now_ms();
    // Written 150 ms after it was handed out.
    std::thread::sleep(Duration::from_millis(150));
    let late = Feedback {
        sent_at: Some(Instant::now()),
        ..answered()
    };
    std::thread::sleep(Duration::from_millis(5));
    f.complete(lease, &late, Instant::now());
    let (id, _) = other
        .lease("h.test")
        .unwrap()
        .expect("the next slot, one interval after the departure");
    other.ack(id).unwrap();
    let state = other.budget().cached("h.test").unwrap().state;
    let since_booking = state.booked_at.unwrap() - booked;
    assert!(
        since_booking > GAP_MS + 100.0,
        "the second booking {since_booking:.1} ms after the first"
    );
    assert!(
        state.send_gap < GAP_MS + 30.0,
        "the send gap {:.1} ms: measured from the booking, not the departure",
        state.send_gap
    );
}

fn open_with(redis: &Redis, job: &str, settings: &Settings) -> RedisStore {
    RedisStore::open(RedisOptions {
        retry_for: Duration::from_secs(10),
        budget: Some(Params::from_settings(settings)),
        ..RedisOptions::new(redis.url(), job)
    })
    .unwrap()
}

fn queue_for(store: &mut RedisStore, url: &str) {
    let request = Request::get(url).unwrap();
    assert!(
        store
            .insert_seen(crawler_sched::fingerprint(&request))
            .unwrap()
    );
    store
        .push(
            "h.test",
            Entry {
                priority: 0,
                seq: 1,
                request,
            },
        )
        .unwrap();
}

/// A host without a pace (fixed mode, no delay) has no gap to keep: a held request is
/// never late for it. (Judged late by the 2 ms dispatch allowance on a busy machine, it was
/// booked again "now", late again after the next round trip, and so on without end.)
#[test]
fn a_held_request_for_an_unpaced_host_is_never_late() {
    let redis = Redis::start();
    let unpaced = Settings {
        throttle: ThrottleMode::Fixed,
        download_delay: Duration::ZERO,
        randomize_delay: false,
        concurrency_per_host: 4,
        ..Default::default()
    };
    let mut store = open_with(&redis, "unpaced", &unpaced);
    queue_for(&mut store, "http://h.test/1");
    store.flush().unwrap();
    assert!(store.lease("h.test").unwrap().is_some());
    let fleet = store.fleet();
    let trips = store.round_trips();
    assert_eq!(
        fleet.missed("h.test", fleet.now_ms() - 500.0),
        Missed::OnTime
    );
    assert_eq!(store.round_trips(), trips, "nothing booked again");
}

/// A host with its fleet-wide concurrency in flight is not asked for again at every turn
/// of the frontier: each ask was a round trip, a hundred per page with four workers.
#[test]
fn a_full_host_is_not_asked_for_again_at_once() {
    let redis = Redis::start();
    let one = Settings {
        throttle: ThrottleMode::Fixed,
        download_delay: Duration::ZERO,
        randomize_delay: false,
        concurrency_per_host: 1,
        ..Default::default()
    };
    let mut store = open_with(&redis, "full", &one);
    for i in 0..3 {
        queue_for(&mut store, &format!("http://h.test/{i}"));
    }
    store.flush().unwrap();
    let (first, _) = store.lease("h.test").unwrap().expect("a slot is free");
    assert!(
        store.lease("h.test").unwrap().is_none(),
        "one in flight: full"
    );
    let trips = store.round_trips();
    for _ in 0..50 {
        assert!(store.lease("h.test").unwrap().is_none());
    }
    assert_eq!(
        store.round_trips(),
        trips,
        "asked Redis again while it was full"
    );
    // Once the slot is free and the wait is over, the next ask gets it. (The host has no
    // pace: its acknowledgement waits for the next round trip, as on open hosts.)
    store.ack(first).unwrap();
    assert_eq!(
        store.round_trips(),
        trips,
        "an unpaced host's ack is buffered"
    );
    store.flush().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(store.lease("h.test").unwrap().is_some());
}

/// A request that is not sent (a robots.txt refusal from cache: nothing reaches the host)
/// gives its slot back, fleet-wide as in a local crawl, so the next request may take it;
/// but only while its booking is the last: a slot another worker booked since stays
/// booked. Kept in the worker's state only, the slot went unused by the whole fleet (a
/// gap of two intervals at the server in every fleet crawl of the lab's shop, whose index
/// links a page under its disallowed /private/).
#[test]
fn a_request_not_sent_gives_its_slot_back_while_its_booking_is_the_last() {
    let redis = Redis::start();
    let job = "booked-given-back";
    let ahead = Duration::from_millis(50);
    let mut f = noting_worker_of(open(&redis, job, ahead), 0, Booked::default());
    let mut other = open(&redis, job, ahead);
    let clock = other.budget();
    let next_slot = |other: &RedisStore| {
        assert!(other.fleet().still_clear("h.test", f64::INFINITY));
        clock.cached("h.test").unwrap().state.tat
    };
    let unsent = Feedback::default();
    for n in 0..3 {
        f.enqueue(request(n), Instant::now());
    }
    // The slot comes back: the next one is now, not an interval after the unsent request.
    let lease = first_hand_out(&mut f).expect("the request is handed out");
    let booked = next_slot(&other);
    f.complete(lease, &unsent, Instant::now());
    f.acknowledge(lease);
    let back = next_slot(&other);
    assert!(
        back <= booked - GAP_MS / 2.0 && back <= clock.now_ms(),
        "the next slot at {back:.1}, {:.1} ms before the one booked",
        booked - back
    );
    // Another worker booked a slot after it: the slot stays spent.
    let lease = first_hand_out(&mut f).expect("the request is handed out");
    let (theirs, _) = other
        .lease("h.test")
        .unwrap()
        .expect("the other worker leases");
    let booked = next_slot(&other);
    f.complete(lease, &unsent, Instant::now());
    f.acknowledge(lease);
    assert_eq!(
        next_slot(&other),
        booked,
        "a slot booked since stays booked"
    );
    other.ack(theirs).unwrap();
}

/// A worker's turn on a shared host (the slots the others take before its own) counts down
/// as the others book, and ends once a reading shows the host's next slot due with nobody
/// booked on it. Kept whole, a turn read after the others had booked counted their slots
/// twice, and when the others stopped taking slots (their requests held back by the host's
/// concurrency) every worker waited out its turn and the slot went unused (a fleet of four
/// behind a fixed window reached 67% of its rate where a local crawl reached 99%).
#[test]
fn a_turn_counts_down_as_the_others_book_and_ends_with_an_unbooked_slot() {
    let redis = Redis::start();
    let job = "booked-turns";
    let ahead = Duration::from_millis(50);
    let mut a = open(&redis, job, ahead);
    let mut b = open(&redis, job, ahead);
    for n in 0..6 {
        queue_for(&mut a, &format!("http://h.test/{n}"));
    }
    a.flush().unwrap();
    let lease = |store: &mut RedisStore| {
        let (id, _) = store
            .lease("h.test")
            .unwrap()
            .expect("a slot within the lease horizon");
        store.ack(id).unwrap();
    };
    let turn = |store: &RedisStore| {
        // A fresh reading of the host's record first.
        assert!(store.fleet().still_clear("h.test", f64::INFINITY));
        store.budget().turn_ms("h.test")
    };
    // A, B, A: one slot between A's two was B's, so A's turn is one interval.
    lease(&mut a);
    lease(&mut b);
    lease(&mut a);
    assert_eq!(turn(&a), GAP_MS, "one of the others' slots before A's");
    // B takes that slot: A's turn has come.
    lease(&mut b);
    assert_eq!(turn(&a), 0.0, "the others' slot is booked: A's turn now");
    // A books again after B's one slot (its turn is one interval again), and nobody books
    // the next slot: once it is due, A's turn is over.
    std::thread::sleep(Duration::from_millis(100));
    lease(&mut a);
    assert_eq!(turn(&a), GAP_MS, "the next slot is not due yet");
    let next = a.budget().cached("h.test").unwrap().state.tat;
    let clock = a.budget();
    while clock.now_ms() <= next + 20.0 {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(turn(&a), 0.0, "the next slot went unbooked: no turn");
}

/// A paced host whose fleet-wide concurrency a lease filled is freed in Redis as soon as
/// that request is acknowledged, not with this worker's next step: until then no other
/// worker can lease the host's next slot, and buffered until this worker's own next turn
/// the acknowledgement left one send in ten of a fleet of four late, by up to 300 ms, behind
/// a limiter allowing one at a time (the default `concurrency_per_host`).
#[test]
fn an_acknowledgement_that_frees_a_full_paced_host_goes_at_once() {
    let redis = Redis::start();
    let one = Settings {
        concurrency_per_host: 1,
        ..settings()
    };
    let mut a = open_with(&redis, "freed", &one);
    let mut b = open_with(&redis, "freed", &one);
    for i in 0..3 {
        queue_for(&mut a, &format!("http://h.test/{i}"));
    }
    a.flush().unwrap();
    let (first, _) = a.lease("h.test").unwrap().expect("a slot is free");
    assert!(
        b.lease("h.test").unwrap().is_none(),
        "one in flight fleet-wide: full"
    );
    let trips = a.round_trips();
    a.ack(first).unwrap();
    assert_eq!(
        a.round_trips(),
        trips + 1,
        "the acknowledgement went at once"
    );
    // The other worker's next ask (once its wait for a full host is over) gets the slot.
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        b.lease("h.test").unwrap().is_some(),
        "the host is free in Redis"
    );
}
