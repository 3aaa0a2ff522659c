//! Where a quota window turns, on the machine's clock, from the resets a server announces.
//!
//! A gateway that counts requests in fixed windows says how long until its window turns
//! (`RateLimit-Reset`, `X-RateLimit-Reset`), usually in whole seconds rounded up. Taken
//! alone, a reading of `3` means "between 2 and 3 seconds", and a crawler that waits the
//! full 3 s each time its quota runs out loses half a second per window on average: a
//! tenth of a ten-second window at 1 request/s. But every response brackets the same edge
//! (the window's end lies after `sent + reset - 1 s` and no later than `answered + reset`),
//! and the windows repeat with a fixed period, so the brackets of many responses, moved by
//! whole periods onto the current window, narrow the edge to a few milliseconds.

use serde::{Deserialize, Serialize};

use super::params::Millis;

/// The bracket on the end of the current quota window, and the window's period.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WindowEdge {
    /// The window ends after this instant...
    pub lo: Millis,
    /// ... and no later than this one.
    pub hi: Millis,
    /// The window's length (ms): announced by the server, or the longest reset seen.
    pub period: f64,
}

/// How far apart the bracket's ends may cross before the readings are taken to disagree
/// (the server's clock stepped, or its windows are not fixed): transit and clock reading.
const TOLERANCE_MS: f64 = 20.0;

impl WindowEdge {
    /// Fold in one reading: a reset of `reset_ms` (whole seconds when `whole`) on a
    /// request sent at `sent` and answered at `now`, with the window length the server
    /// announced, if it did. Returns the bracket for this reading's window.
    pub fn observe(
        prev: Option<Self>,
        reset_ms: f64,
        whole: bool,
        window_ms: Option<f64>,
        sent: Millis,
        now: Millis,
    ) -> Self {
        let hi = now + reset_ms;
        let lo = sent + reset_ms - if whole { 1_000.0 } else { 0.0 };
        let period = window_ms
            .unwrap_or(reset_ms)
            .max(prev.map_or(0.0, |p| if window_ms.is_some() { 0.0 } else { p.period }));
        let fresh = Self { lo, hi, period };
        let Some(p) = prev.filter(|p| (p.period - period).abs() < 1.0 && period > 0.0) else {
            return fresh;
        };
        // Move the old bracket by whole periods onto this reading's window.
        let k = ((hi - p.hi) / period).round();
        let (plo, phi) = (p.lo + k * period, p.hi + k * period);
        let (nlo, nhi) = (plo.max(lo), phi.min(hi));
        if nlo > nhi + TOLERANCE_MS {
            // The readings disagree: start over from this one.
            return fresh;
        }
        Self {
            lo: nlo.min(nhi),
            hi: nhi,
            period,
        }
    }

    /// Milliseconds from `now` until the window has surely turned.
    pub fn wait(&self, now: Millis) -> f64 {
        (self.hi - now).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Readings of a 10 s window that turns at 10,000 + 10,000 k ms, one a second with a
    /// drifting phase: the whole-second resets narrow the edge to the true one.
    #[test]
    fn whole_second_resets_narrow_to_the_true_edge() {
        let mut edge = None;
        let mut t: f64 = 3.0;
        for _ in 0..60 {
            let edge_at = (t / 10_000.0).floor() * 10_000.0 + 10_000.0;
            let reset = ((edge_at - t) / 1_000.0).ceil() * 1_000.0;
            edge = Some(WindowEdge::observe(edge, reset, true, None, t, t + 2.0));
            t += 1_037.0;
        }
        let e = edge.expect("an edge");
        let edge_at = (e.hi / 10_000.0).round() * 10_000.0;
        assert!(e.hi >= edge_at && e.hi - edge_at < 40.0, "{e:?}");
        assert!((e.period - 10_000.0).abs() < 1.0, "{e:?}");
    }

    #[test]
    fn disagreeing_readings_start_over() {
        let e = WindowEdge::observe(None, 5_000.0, true, Some(10_000.0), 0.0, 1.0);
        // The server's clock jumped by 3.5 s: no period shift explains the new reading.
        let f = WindowEdge::observe(Some(e), 5_000.0, true, Some(10_000.0), 3_500.0, 3_501.0);
        assert_eq!(f.hi, 8_501.0);
        assert_eq!(f.lo, 7_500.0);
    }
}
