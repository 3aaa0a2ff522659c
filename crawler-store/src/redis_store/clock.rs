//! A worker's estimate of the Redis server's clock, which is the fleet's clock.
//!
//! Each round trip reads the server's clock once, somewhere between the moment the worker
//! sent the step and the moment its reply was read: the server's clock minus ours lies in
//! `[server - after, server - before]`. Taking the middle of each round trip as the moment
//! of the reading (what the worker did) is off by up to half the round trip, and on a busy
//! machine a round trip of a few hundred ms is common (the worker's thread waits for a core
//! before it reads the reply, or before it writes the step). A worker that holds a request
//! until the fleet's clock reaches the send time booked for it ([`crawler_sched::
//! FleetFrontier`]) then sends it that much early or late, and two workers' sends land
//! closer at the server than the interval they booked.
//!
//! So the estimate keeps the intersection of the round trips' intervals: a slow round trip
//! narrows nothing and moves nothing, and the fast ones pin the offset to within half the
//! fastest. The interval widens slowly with time (clock rates differ a little between
//! machines, and NTP slews the server's clock), and a reading outside it (the server's
//! clock stepped, or the store reconnected to another server) starts it again from that
//! reading.

/// How fast the interval widens on each side, ms per ms: 200 ppm, above the rate NTP
/// slews a clock at (at most 500 ppm, shared between both machines in practice) and above
/// the drift of ordinary quartz.
const DRIFT: f64 = 2e-4;

/// Slack for the server's reading (the step script reports it to 0.1 ms).
const READ_SLACK_MS: f64 = 0.5;

/// The server's clock minus the worker's (ms), as bounded by the round trips so far.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerClock {
    /// Lowest and highest offset consistent with every round trip (widened since).
    lo: f64,
    hi: f64,
    /// Local time (ms) the bounds were last set.
    at: f64,
}

impl ServerClock {
    /// From one reading of the server's clock (`server`, ms) taken during a round trip that
    /// left at local ms `before` and came back at `after`.
    pub(crate) fn new(before: f64, after: f64, server: f64) -> Self {
        let (lo, hi) = Self::bounds(before, after, server);
        Self { lo, hi, at: after }
    }

    fn bounds(before: f64, after: f64, server: f64) -> (f64, f64) {
        (
            server - after.max(before) - READ_SLACK_MS,
            server - before + READ_SLACK_MS,
        )
    }

    /// Narrow the estimate with one more round trip's reading.
    pub(crate) fn sample(&mut self, before: f64, after: f64, server: f64) {
        let widen = DRIFT * (after - self.at).max(0.0);
        let (lo, hi) = Self::bounds(before, after, server);
        let (cur_lo, cur_hi) = (self.lo - widen, self.hi + widen);
        let (new_lo, new_hi) = (cur_lo.max(lo), cur_hi.min(hi));
        if new_lo <= new_hi {
            self.lo = new_lo;
            self.hi = new_hi;
        } else {
            // Inconsistent with every reading before: the server's clock is not the one it
            // was (stepped, restarted elsewhere). This reading is all that is known.
            tracing::debug!(
                jump_ms = (lo + hi) / 2.0 - (cur_lo + cur_hi) / 2.0,
                "the Redis server's clock moved: its offset is estimated afresh"
            );
            self.lo = lo;
            self.hi = hi;
        }
        self.at = after;
    }

    /// The best estimate of the server's clock minus ours (ms): the middle of the interval.
    pub(crate) fn offset_ms(&self) -> f64 {
        (self.lo + self.hi) / 2.0
    }

    /// How far the estimate may be off, at most (ms), at local time `now`.
    #[cfg(test)]
    pub(crate) fn error_ms(&self, now: f64) -> f64 {
        (self.hi - self.lo) / 2.0 + DRIFT * (now - self.at).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The old estimate took the middle of each round trip: one slow round trip moved the
    /// worker's clock by half its length. Here it moves nothing.
    #[test]
    fn a_slow_round_trip_does_not_move_the_estimate() {
        // The server's clock is ours plus 1,000 ms; fast round trips of 1 ms.
        let mut c = ServerClock::new(0.0, 1.0, 1_000.5);
        c.sample(10.0, 11.0, 1_010.4);
        assert!((c.offset_ms() - 1_000.0).abs() <= 1.0, "{c:?}");
        // The thread waited 400 ms for a core before it read the reply (the middle of the
        // round trip said 800 ms)...
        c.sample(20.0, 420.0, 1_020.2);
        assert!((c.offset_ms() - 1_000.0).abs() <= 1.0, "{c:?}");
        // ... or before it wrote the step (the middle said 1,200 ms).
        c.sample(500.0, 900.0, 1_899.7);
        assert!((c.offset_ms() - 1_000.0).abs() <= 1.0, "{c:?}");
        assert!(c.error_ms(900.0) <= 1.5, "{c:?}");
    }

    #[test]
    fn fast_round_trips_pin_the_offset() {
        let mut c = ServerClock::new(0.0, 300.0, 1_250.0);
        assert!(c.error_ms(300.0) > 100.0);
        c.sample(400.0, 402.0, 1_401.0);
        assert!((c.offset_ms() - 1_000.0).abs() <= 1.5, "{c:?}");
    }

    #[test]
    fn a_clock_that_stepped_is_estimated_afresh() {
        let mut c = ServerClock::new(0.0, 1.0, 1_000.5);
        // The server's clock jumped 5 s ahead.
        c.sample(100.0, 101.0, 6_100.5);
        assert!((c.offset_ms() - 6_000.0).abs() <= 1.0, "{c:?}");
        // And back.
        c.sample(200.0, 201.0, 1_200.5);
        assert!((c.offset_ms() - 1_000.0).abs() <= 1.0, "{c:?}");
    }

    #[test]
    fn the_interval_widens_with_time() {
        let mut c = ServerClock::new(0.0, 1.0, 1_000.5);
        // An hour later, the server's clock runs 100 ms ahead of where it was (28 ppm):
        // consistent with the widened interval, so no restart, and the new reading wins.
        let hour = 3_600_000.0;
        c.sample(hour, hour + 1.0, hour + 1_100.5);
        assert!((c.offset_ms() - 1_100.0).abs() <= 1.0, "{c:?}");
    }
}
