//! The pushes of a worker's recent steps, per shard, so that what a shard loses in a
//! rollback is queued again.
//!
//! On a cluster, each master replicates on its own, asynchronously: a master that dies and
//! is replaced by a replica a little behind loses the last writes of its shards, and only
//! those. A page's links may have gone to such a shard while the page's acknowledgement
//! went to another that kept it: the page is done for good, its links are gone, and
//! nothing would ever queue them again. Every section of a step counts itself in the
//! worker's entry of its shard's `steps`, so the worker learns exactly which of its steps a
//! shard lost (those numbered above the count the shard still has), and queues again the
//! pushes it logged for them: what was lost in the shard is written again, and what the
//! shard kept (or another worker queued since) is found in the seen set and dropped.
//!
//! The log keeps the pushes of the last `KEEP_FOR` and at most `KEEP_BYTES`. A failover
//! promotes only a replica whose data is recent (`cluster-replica-validity-factor`), so
//! losses are seconds old; a loss older than the log on a cluster stops the worker with an
//! error saying what was lost. On one server every shard is written by one atomic script
//! and a rollback (an older snapshot) takes a page's acknowledgement back with its links:
//! the page is fetched again, so older losses there are made good without the log.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::Push;

/// How long a step's pushes are kept.
const KEEP_FOR: Duration = Duration::from_secs(300);
/// The most bytes of pushes kept (all shards).
const KEEP_BYTES: usize = 32 << 20;

struct Logged {
    step: i64,
    at: Instant,
    bytes: usize,
    pushes: Vec<Push>,
}

/// Recent pushes by shard and step number.
pub(crate) struct PushLog {
    shards: Vec<VecDeque<Logged>>,
    /// Per shard, the highest step number whose pushes were dropped from the log.
    dropped: Vec<i64>,
    bytes: usize,
}

/// Some steps a shard lost are older than the log: their pushes cannot be told.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Beyond {
    /// How many of this worker's steps the shard lost.
    pub(crate) steps: i64,
    /// How many of those the log still had (and replays).
    pub(crate) kept: usize,
}

impl PushLog {
    pub(crate) fn new(shards: usize) -> Self {
        Self {
            shards: (0..shards).map(|_| VecDeque::new()).collect(),
            dropped: vec![0; shards],
            bytes: 0,
        }
    }

    /// Record the pushes `shard` confirmed as this worker's step number `step`.
    pub(crate) fn record(&mut self, shard: usize, step: i64, pushes: Vec<Push>) {
        if pushes.is_empty() || shard >= self.shards.len() {
            return;
        }
        let bytes = pushes
            .iter()
            .map(|(h, _, m)| h.len() + m.len() + 16 + 48)
            .sum();
        self.bytes += bytes;
        self.shards[shard].push_back(Logged {
            step,
            at: Instant::now(),
            bytes,
            pushes,
        });
        self.trim();
    }

    fn trim(&mut self) {
        let now = Instant::now();
        loop {
            // The oldest entry of all shards.
            let oldest = self
                .shards
                .iter()
                .enumerate()
                .filter_map(|(s, q)| q.front().map(|l| (s, l.at)))
                .min_by_key(|(_, at)| *at);
            let Some((s, at)) = oldest else { return };
            if self.bytes <= KEEP_BYTES && now.duration_since(at) <= KEEP_FOR {
                return;
            }
            if let Some(l) = self.shards[s].pop_front() {
                self.bytes -= l.bytes;
                self.dropped[s] = self.dropped[s].max(l.step);
            }
        }
    }

    /// `shard` has `had` of this worker's steps where this worker last read `last`: the
    /// pushes of the steps it lost that the log still has, and whether it lost older ones
    /// too. The replayed steps leave the log (their pushes are logged again under the step
    /// that carries them).
    pub(crate) fn lost(
        &mut self,
        shard: usize,
        had: i64,
        last: i64,
    ) -> (Vec<Push>, Option<Beyond>) {
        let Some(q) = self.shards.get_mut(shard) else {
            return (Vec::new(), None);
        };
        let mut steps = Vec::new();
        while q.back().is_some_and(|l| l.step > had) {
            if let Some(l) = q.pop_back() {
                self.bytes -= l.bytes;
                steps.push(l.pushes);
            }
        }
        let kept = steps.len();
        // Oldest first, as they were sent.
        steps.reverse();
        let pushes = steps.into_iter().flatten().collect();
        let beyond = (self.dropped[shard] > had).then_some(Beyond {
            steps: last - had,
            kept,
        });
        (pushes, beyond)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(n: u8) -> Push {
        (format!("h{n}"), Some([n; 16]), vec![n])
    }

    #[test]
    fn the_pushes_of_the_lost_steps_come_back_oldest_first() {
        let mut log = PushLog::new(2);
        log.record(0, 3, vec![push(3)]);
        log.record(0, 5, vec![push(5), push(6)]);
        log.record(1, 4, vec![push(9)]);
        log.record(0, 7, vec![push(7)]);
        // Shard 0 kept its steps up to 4: steps 5 and 7 are gone.
        assert_eq!(log.lost(0, 4, 7), (vec![push(5), push(6), push(7)], None));
        // Shard 1 is untouched; and shard 0 lost nothing more.
        assert_eq!(log.lost(1, 4, 4), (Vec::new(), None));
        assert_eq!(log.lost(0, 4, 4), (Vec::new(), None));
        assert_eq!(log.lost(0, 0, 4), (vec![push(3)], None));
    }

    #[test]
    fn a_loss_older_than_the_log_is_named() {
        let mut log = PushLog::new(1);
        let big = vec![0u8; KEEP_BYTES / 3];
        log.record(0, 1, vec![("h".into(), None, big.clone())]);
        log.record(0, 2, vec![("h".into(), None, big.clone())]);
        log.record(0, 3, vec![("h".into(), None, big)]);
        // Step 1 had to go to keep within the budget.
        let (pushes, beyond) = log.lost(0, 0, 3);
        assert_eq!(pushes.len(), 2);
        assert_eq!(beyond, Some(Beyond { steps: 3, kept: 2 }));
        let mut log = PushLog::new(1);
        log.record(0, 1, vec![push(1)]);
        assert_eq!(log.lost(0, 1, 1), (Vec::new(), None));
    }
}
