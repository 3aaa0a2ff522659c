//! Emulations of the rate limiters real sites run, as pure state machines over explicit
//! millisecond times, so their verdicts can be checked against hand-computed sequences and
//! against the real servers (`benches/limiters.rs`).
//!
//! Both follow the arithmetic of the originals, integer for integer, because the crawler is
//! judged on how close it gets to what the real server allows: a limiter that is "about the
//! same" in floating point hides exactly the millisecond edges where refusals happen.

/// nginx `limit_req`'s parameters in nginx's own units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LimitReqParams {
    /// Requests per 1,000 seconds (nginx stores `5r/s` as 5000 and `30r/m` as 500).
    pub rate: i64,
    /// `burst`, in thousandths of a request.
    pub burst: i64,
    /// Excess (thousandths) served without delay; `None` for `nodelay`.
    pub delay: Option<i64>,
}

impl LimitReqParams {
    /// From requests per second (fractions allowed, as `r/m` gives them), `burst`, and the
    /// delay mode: `None` is `nodelay`, `Some(n)` is `delay=n` (0 is nginx's default).
    pub(crate) fn new(rate_per_sec: f64, burst: u32, delay: Option<u32>) -> Self {
        Self {
            // nginx computes `rate * 1000 / scale` in integers; flooring matches it for any
            // rate written as whole requests per second or per minute.
            rate: (rate_per_sec * 1000.0).floor().max(1.0) as i64,
            burst: i64::from(burst) * 1000,
            delay: delay.map(|d| i64::from(d) * 1000),
        }
    }
}

/// One key's node in a `limit_req` zone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LimitReq {
    /// `(excess, last)`; `None` until the key's first request. nginx creates the node on that
    /// request with excess 0 (not 1000), so a new key gets one request more than a drained
    /// one. nginx also forgets drained nodes when the zone needs room for new keys; with one
    /// key per client that never happens here, so it is not modelled.
    node: Option<(i64, u64)>,
}

/// What `limit_req` does with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LimitReqOutcome {
    /// Served after `delay_ms` (0 in `nodelay` mode or within `delay=N`); `excess` is the
    /// node's new excess.
    Accept { excess: i64, delay_ms: u64 },
    /// Refused; the node is unchanged. `excess` is what the request would have left.
    Refuse { excess: i64 },
}

impl LimitReq {
    /// The excess this request would leave, as nginx computes it:
    /// `max(excess - rate * ms / 1000 + 1000, 0)` with integer division.
    fn candidate(&self, p: &LimitReqParams, now_ms: u64) -> i64 {
        match self.node {
            None => 0,
            Some((excess, last)) => {
                // Our clock is monotonic; nginx clamps backward jumps to 0 the same way.
                let ms = now_ms.saturating_sub(last) as i64;
                (excess - p.rate.saturating_mul(ms) / 1000 + 1000).max(0)
            }
        }
    }

    /// Decides one request at `now_ms` and, when `account`, records an accepted one.
    pub(crate) fn offer(
        &mut self,
        p: &LimitReqParams,
        now_ms: u64,
        account: bool,
    ) -> LimitReqOutcome {
        let excess = self.candidate(p, now_ms);
        if excess > p.burst {
            return LimitReqOutcome::Refuse { excess };
        }
        if account {
            self.node = Some((excess, now_ms));
        }
        let delay_ms = match p.delay {
            Some(d) if excess > d => ((excess - d) * 1000 / p.rate) as u64,
            _ => 0,
        };
        LimitReqOutcome::Accept { excess, delay_ms }
    }

    /// The node's excess drained to `now_ms` (what is left of past requests).
    pub(crate) fn drained(&self, p: &LimitReqParams, now_ms: u64) -> i64 {
        self.node.map_or(0, |(excess, last)| {
            let ms = now_ms.saturating_sub(last) as i64;
            (excess - p.rate.saturating_mul(ms) / 1000).max(0)
        })
    }

    /// Milliseconds from `now_ms` until a request would be accepted.
    pub(crate) fn retry_in_ms(&self, p: &LimitReqParams, now_ms: u64) -> u64 {
        let Some((excess, last)) = self.node else {
            return 0;
        };
        // Accepted once `rate * ms / 1000 >= excess + 1000 - burst`, i.e. once
        // `ms >= ceil(need * 1000 / rate)` counted from the node's last accounted request.
        let need = excess + 1000 - p.burst;
        if need <= 0 {
            return 0;
        }
        let ms = (need * 1000 + p.rate - 1) / p.rate;
        (last + ms as u64).saturating_sub(now_ms)
    }
}

/// HAProxy's `freq_ctr` over a period, as a stick table's `http_req_rate(period)` keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HttpReqRate {
    /// Start of the current period (even, as HAProxy stores it); `None` for a new entry.
    tick: Option<u64>,
    curr: u64,
    prev: u64,
}

impl HttpReqRate {
    /// Counts one event at `now_ms` (HAProxy's `update_freq_ctr_period`).
    pub(crate) fn update(&mut self, period: u64, now_ms: u64) {
        let Some(tick) = self.tick else {
            // A new entry is zeroed, and HAProxy's clock is far from 0, so its first update
            // finds two periods missed: previous 0, the period starts now.
            *self = Self {
                tick: Some(now_ms & !1),
                curr: 1,
                prev: 0,
            };
            return;
        };
        if now_ms.saturating_sub(tick) < period {
            self.curr += 1;
            return;
        }
        // Rotation: the period just ended becomes the previous one. Periods stay aligned to
        // the first one, except after two or more idle periods, when the next starts now.
        self.prev = self.curr;
        self.curr = 1;
        let mut tick = tick + period;
        if now_ms - tick >= period {
            self.prev = 0;
            tick = now_ms;
        }
        // HAProxy keeps the tick's lowest bit for a rotation lock and stores it cleared, so a
        // period may start one ms before the request that opened it: at exactly the allowed
        // rate this decides between a reading of N and N + 1.
        self.tick = Some(tick & !1);
    }

    /// The rate HAProxy reports at `now_ms` (`read_freq_ctr_period`): events of the current
    /// period plus the previous period's count weighted by the fraction of the period not
    /// yet elapsed, floored.
    pub(crate) fn read(&self, period: u64, now_ms: u64) -> u64 {
        let Some(tick) = self.tick else {
            return 0;
        };
        let (mut past, mut curr) = (self.prev, self.curr);
        let mut remain = tick as i64 + period as i64 - now_ms as i64;
        if remain < 0 {
            remain += period as i64;
            past = if remain >= 0 { curr } else { 0 };
            curr = 0;
        }
        // HAProxy's flapping correction for very low rates.
        if curr == 0 && past <= 1 {
            return past;
        }
        let remain = remain.max(0) as u64;
        (past * remain + curr * period) / period
    }

    /// `http-request track-sc0 src` then `deny if { sc_http_req_rate(0) gt max }`: the
    /// request is counted first, refused or not. Returns whether it passes and the rate read.
    pub(crate) fn track_and_check(&mut self, period: u64, max: u64, now_ms: u64) -> (bool, u64) {
        self.update(period, now_ms);
        let rate = self.read(period, now_ms);
        (rate <= max, rate)
    }

    /// Milliseconds from `now_ms` until a request would pass (bounded by two periods, after
    /// which the counter has forgotten everything).
    pub(crate) fn retry_in_ms(&self, period: u64, max: u64, now_ms: u64) -> u64 {
        (0..=2 * period)
            .find(|&ms| {
                let mut probe = *self;
                probe.track_and_check(period, max, now_ms + ms).0
            })
            .unwrap_or(2 * period)
    }

    /// Milliseconds until the counter reads 0 again.
    pub(crate) fn reset_in_ms(&self, period: u64, now_ms: u64) -> u64 {
        self.tick
            .map_or(0, |tick| (tick + 2 * period).saturating_sub(now_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs arrivals (ms) through a node with accounting; returns the verdicts.
    fn nginx(p: LimitReqParams, arrivals: &[u64]) -> Vec<bool> {
        let mut node = LimitReq::default();
        arrivals
            .iter()
            .map(|&t| matches!(node.offer(&p, t, true), LimitReqOutcome::Accept { .. }))
            .collect()
    }

    #[test]
    fn nginx_burst_0_needs_the_full_interval_to_the_millisecond() {
        // 5r/s: rate 5000, 5 thousandths drain per ms; a request adds 1000.
        let p = LimitReqParams::new(5.0, 0, None);
        // t=0: new node, excess 0, accepted.
        // t=1: 0 - 5 + 1000 = 995 > 0, refused (state unchanged).
        // t=199: 0 - 995 + 1000 = 5, refused.
        // t=200: 0 - 1000 + 1000 = 0, accepted; last = 200.
        // t=399: refused (5); t=400 accepted; t=401 refused (995).
        assert_eq!(
            nginx(p, &[0, 1, 199, 200, 399, 400, 401]),
            [true, false, false, true, false, true, false]
        );
    }

    #[test]
    fn nginx_refusals_leave_the_node_unchanged() {
        let p = LimitReqParams::new(5.0, 0, None);
        // Refusals at 100 and 150 do not move `last`: 200 is still exactly one interval
        // after the accepted request at 0. Were refusals accounted, 200 would be refused.
        assert_eq!(nginx(p, &[0, 100, 150, 200]), [true, false, false, true]);
    }

    #[test]
    fn nginx_burst_nodelay_and_integer_drain() {
        // 5r/s burst=2 nodelay. t=0: 0 (new node). t=0: 1000. t=0: 2000. t=0: 3000 > 2000 no.
        // t=100: 2000 - 500 + 1000 = 2500 > 2000 no. t=200: 2000 - 1000 + 1000 = 2000 yes.
        // t=201: 2000 - 5 + 1000 = 2995 no. t=400: 2000 - 1000 + 1000 yes.
        let p = LimitReqParams::new(5.0, 2, None);
        assert_eq!(
            nginx(p, &[0, 0, 0, 0, 100, 200, 201, 400]),
            [true, true, true, false, false, true, false, true]
        );
        // 3r/s: rate 3000, 3 per ms; the interval is 333.3 ms, and nginx needs 334:
        // 0 - 3 * 333 + 1000 = 1 > 0 refused, at 334: 0 - 1002 + 1000 < 0 -> 0 accepted.
        let p = LimitReqParams::new(3.0, 0, None);
        assert_eq!(nginx(p, &[0, 333, 334]), [true, false, true]);
    }

    #[test]
    fn nginx_delayed_mode_delays_within_the_burst() {
        // 5r/s burst=3, no nodelay: excess/rate seconds of delay.
        let p = LimitReqParams::new(5.0, 3, Some(0));
        let mut node = LimitReq::default();
        let delays: Vec<_> = [0, 0, 0, 0, 0]
            .iter()
            .map(|&t| node.offer(&p, t, true))
            .collect();
        assert_eq!(
            delays,
            [
                LimitReqOutcome::Accept {
                    excess: 0,
                    delay_ms: 0
                },
                LimitReqOutcome::Accept {
                    excess: 1000,
                    delay_ms: 200
                },
                LimitReqOutcome::Accept {
                    excess: 2000,
                    delay_ms: 400
                },
                LimitReqOutcome::Accept {
                    excess: 3000,
                    delay_ms: 600
                },
                LimitReqOutcome::Refuse { excess: 4000 },
            ]
        );
        // delay=2: the first two of the burst go at once, the rest wait for the excess over 2.
        let p = LimitReqParams::new(5.0, 3, Some(2));
        let mut node = LimitReq::default();
        let d: Vec<_> = (0..4)
            .map(|_| match node.offer(&p, 0, true) {
                LimitReqOutcome::Accept { delay_ms, .. } => delay_ms,
                LimitReqOutcome::Refuse { .. } => u64::MAX,
            })
            .collect();
        assert_eq!(d, [0, 0, 0, 200]);
    }

    #[test]
    fn nginx_retry_in_is_the_first_accepted_millisecond() {
        let p = LimitReqParams::new(3.0, 0, None);
        let mut node = LimitReq::default();
        node.offer(&p, 1000, true);
        assert_eq!(node.retry_in_ms(&p, 1100), 234);
        assert!(matches!(
            node.offer(&p, 1333, true),
            LimitReqOutcome::Refuse { .. }
        ));
        assert!(matches!(
            node.offer(&p, 1334, true),
            LimitReqOutcome::Accept { .. }
        ));
        assert_eq!(node.drained(&p, 1334), 0);
    }

    #[test]
    fn haproxy_sliding_window_weights_the_previous_period() {
        // period 1000 ms, deny if rate > 3.
        let (period, max) = (1000, 3);
        let mut c = HttpReqRate::default();
        // First period starts at the first request (t=100): 4 requests, the 4th reads 4.
        let v: Vec<_> = [100, 200, 300, 400]
            .iter()
            .map(|&t| c.track_and_check(period, max, t))
            .collect();
        assert_eq!(v, [(true, 1), (true, 2), (true, 3), (false, 4)]);
        // t=1100: rotation, prev=4, curr=1, period starts at 1100; remain 1000:
        // (4 * 1000 + 1 * 1000) / 1000 = 5 > 3: refused, yet counted.
        assert_eq!(c.track_and_check(period, max, 1100), (false, 5));
        // t=1900: remain 200: (4 * 200 + 2 * 1000) / 1000 = 2 (floored from 2.8): passes.
        assert_eq!(c.track_and_check(period, max, 1900), (true, 2));
        // t=2099: still in the period starting at 1100: remain 1: (4*1 + 3*1000)/1000 = 3.
        assert_eq!(c.track_and_check(period, max, 2099), (true, 3));
        // t=2100: rotation, prev=3 (two of them refused-or-not all count), curr=1:
        // (3 * 1000 + 1000) / 1000 = 4 > 3: refused.
        assert_eq!(c.track_and_check(period, max, 2100), (false, 4));
    }

    #[test]
    fn haproxy_counts_refusals_so_hammering_stays_refused() {
        // Without counting refusals a client sending 2x the limit would get the limit; with
        // it, the counter stays above the threshold and nearly everything is refused.
        let (period, max) = (1000, 5);
        let mut c = HttpReqRate::default();
        let passed = (0..100)
            .filter(|i| c.track_and_check(period, max, i * 100).0)
            .count();
        // The first 5 of the first period pass; afterwards every period has 10 arrivals and
        // the reading is at least 10 * remain/1000 + arrivals so far, over 5 from the start
        // of each period: only the first period's 5 pass.
        assert_eq!(passed, 5);
    }

    #[test]
    fn haproxy_restarts_the_period_after_two_idle_periods() {
        let period = 1000;
        let mut c = HttpReqRate::default();
        c.update(period, 0);
        c.update(period, 500);
        // 1500: one rotation, period [1000, 2000), prev 2.
        c.update(period, 1500);
        assert_eq!(c.read(period, 1500), (2 * 500 + 1000) / 1000);
        // 4200: more than two periods since 1000: prev forgotten, period starts at 4200.
        c.update(period, 4200);
        assert_eq!(
            c,
            HttpReqRate {
                tick: Some(4200),
                curr: 1,
                prev: 0
            }
        );
        // Reading without an update: at 5300 the period [4200, 5200) is past, weighted by
        // remain (-100 + 1000 = 900): flapping correction returns the past (1) itself.
        assert_eq!(c.read(period, 5300), 1);
        // At 6300 both periods are gone.
        assert_eq!(c.read(period, 6300), 0);
    }

    #[test]
    fn haproxy_periods_start_on_even_milliseconds() {
        // deny if rate > 2 over 1000 ms. Two per period at exactly the rate, the first at
        // 101: the period starts at 100, so the next period starts at 1100, where requests
        // at 1101 and 1601 read (2 * 999 + 1000) / 1000 = 2 and (2 * 499 + 2000) / 1000 = 2.
        // Were the period to start at 101, 1101 would read (2 * 1000 + 1000) / 1000 = 3.
        let (period, max) = (1000, 2);
        let mut c = HttpReqRate::default();
        assert!(c.track_and_check(period, max, 101).0);
        assert!(c.track_and_check(period, max, 601).0);
        assert_eq!(c.track_and_check(period, max, 1101), (true, 2));
        assert_eq!(c.track_and_check(period, max, 1601), (true, 2));
    }

    #[test]
    fn haproxy_retry_in_finds_the_first_passing_millisecond() {
        let (period, max) = (1000, 1);
        let mut c = HttpReqRate::default();
        assert!(c.track_and_check(period, max, 0).0);
        // A second request reads 2 until the period rotates at 1000: then
        // (1 * 1000 + 1 * 1000) / 1000 = 2 still; it passes once (1 * remain + 1000) < 2000,
        // i.e. remain < 1000, which is at 1001 (remain 999 -> 1 + 0.999 floors to 1).
        assert_eq!(c.retry_in_ms(period, max, 10), 991);
        let mut probe = c;
        assert!(!probe.track_and_check(period, max, 1000).0);
        assert!(c.track_and_check(period, max, 1001).0);
    }
}
