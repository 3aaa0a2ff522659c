//! The delivery rate: requests the server accepted per second over a window longer than any
//! burst, counted in a fixed ring of bins so a host's state stays small and serialises in a
//! few dozen bytes.
//!
//! Why a count and not a model: whatever the limiter (a token bucket, a sliding or fixed
//! window, a gateway's quota), what it accepted over a window longer than its burst or its
//! period, holds included, is what it sustains. A burst inflates the count by the burst over
//! the window; a window shorter than the limiter's period can read a full period's quota as
//! a rate. Both errors are on the high side, and the multiplicative decrease per refusal
//! episode catches them (see `machine/control.rs`).

use serde::{Deserialize, Serialize};

use super::params::Millis;

/// Length of one bin (ms).
const BIN_MS: f64 = 5_000.0;
/// Bins in the ring: 24 x 5 s = two minutes, longer than HAProxy's and nginx's common
/// windows and than the burst of most buckets at the rates they are set to.
const BINS: usize = 24;

/// Accepted requests per 5-second bin over the last two minutes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// Start of the newest bin (ms on the machine's clock).
    #[serde(default)]
    start: Millis,
    /// Counts, newest last; at most [`BINS`].
    #[serde(default)]
    bins: Vec<u32>,
}

impl Delivery {
    /// The window the rate is measured over (ms).
    pub const WINDOW_MS: f64 = BIN_MS * BINS as f64;

    /// Move the ring so that its newest bin is the one of `at`.
    fn advance(&mut self, at: Millis) {
        if self.bins.is_empty() {
            self.start = at;
            self.bins.push(0);
            return;
        }
        let steps = ((at - self.start) / BIN_MS).floor();
        if steps < 1.0 {
            return;
        }
        if steps >= BINS as f64 {
            self.bins.clear();
            self.bins.push(0);
        } else {
            for _ in 0..steps as usize {
                self.bins.push(0);
            }
            let excess = self.bins.len().saturating_sub(BINS);
            self.bins.drain(..excess);
        }
        self.start += steps * BIN_MS;
    }

    /// A request sent at `at` was accepted.
    pub fn accepted(&mut self, at: Millis) {
        self.advance(at);
        let back = ((self.start - at) / BIN_MS).ceil().max(0.0) as usize;
        let len = self.bins.len();
        if back < len {
            self.bins[len - 1 - back] = self.bins[len - 1 - back].saturating_add(1);
        }
    }

    /// Accepted requests/s over the window ending at `now`, or over the time since `since`
    /// when that is shorter (a young host), never shorter than one bin.
    pub fn rate(&mut self, now: Millis, since: Millis) -> f64 {
        self.advance(now);
        let elapsed = (now - self.start).clamp(0.0, BIN_MS);
        let full = BIN_MS * (BINS - 1) as f64 + elapsed;
        let span = (now - since).max(BIN_MS).min(full).max(1.0);
        let mut count = 0.0;
        let mut left = span;
        for (k, &c) in self.bins.iter().rev().enumerate() {
            let width = if k == 0 { elapsed } else { BIN_MS };
            if left >= width {
                count += f64::from(c);
                left -= width;
            } else {
                count += f64::from(c) * left / width;
                break;
            }
        }
        count * 1_000.0 / span
    }

    /// The counts, oldest first.
    pub fn bins(&self) -> &[u32] {
        &self.bins
    }

    /// Multiply every count by `factor` (rounded): a machine that takes over the pace of
    /// other names behind its limiter reads what they delivered too, in proportion to
    /// their rates (their rings are on other clocks).
    pub fn scale(&mut self, factor: f64) {
        for c in &mut self.bins {
            *c = (f64::from(*c) * factor.max(0.0))
                .round()
                .min(f64::from(u32::MAX)) as u32;
        }
    }

    /// Move every instant by `delta` ms (a restored state on a new clock).
    pub fn shift(&mut self, delta: f64) {
        self.start += delta;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_stream_reads_its_rate() {
        let mut d = Delivery::default();
        // 4 r/s for five minutes.
        for k in 0..1_200 {
            d.accepted(k as f64 * 250.0);
        }
        let r = d.rate(300_000.0, 0.0);
        assert!((r - 4.0).abs() < 0.1, "{r}");
    }

    #[test]
    fn a_young_host_is_measured_over_its_age_and_a_hold_counts_as_time() {
        let mut d = Delivery::default();
        for k in 0..40 {
            d.accepted(k as f64 * 500.0);
        }
        // 40 in 20 s: 2 r/s over the host's age.
        let r = d.rate(20_000.0, 0.0);
        assert!((r - 2.0).abs() < 0.15, "{r}");
        // A 60-second hold after it: 40 in 80 s.
        let r = d.rate(80_000.0, 0.0);
        assert!((r - 0.5).abs() < 0.05, "{r}");
        // Beyond the window everything is forgotten.
        assert_eq!(d.rate(400_000.0, 0.0), 0.0);
    }

    #[test]
    fn it_serialises_small() {
        let mut d = Delivery::default();
        for k in 0..2_400 {
            d.accepted(k as f64 * 50.0);
        }
        let json = serde_json::to_string(&d).unwrap_or_default();
        assert!(json.len() < 200, "{json}");
    }
}
