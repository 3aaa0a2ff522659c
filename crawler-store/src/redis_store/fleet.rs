//! The fleet-facing handles of a [`RedisStore`](super::RedisStore)'s job: [`SharedBudget`]
//! for [`RedisBudget`] and [`Fleet`] for [`RedisFleet`].

use crawler_core::Feedback;
use crawler_sched::politeness::{HostState, Params};
use crawler_sched::{Fleet, FleetStatus, Missed, Pooled, SharedBudget, Versioned};

use super::{Ask, Commit, PacingOp, RedisBudget, RedisFleet, lock};

impl SharedBudget for RedisBudget {
    fn register(&self, host: &str, params: &Params) {
        let mut inner = lock(&self.inner);
        if inner.default_params.is_some() {
            inner.params.insert(host.to_owned(), params.clone());
        }
    }

    fn cached(&self, host: &str) -> Option<Versioned> {
        lock(&self.inner).states.get(host).cloned()
    }

    fn now_ms(&self) -> f64 {
        lock(&self.inner).now_ms()
    }

    fn lease_ahead_ms(&self) -> f64 {
        lock(&self.inner).lease_ahead_ms
    }

    /// The turn learnt at this worker's last lease of the host, less the slots the others
    /// have booked since (as last heard): a turn is the others' slots still to come, counted
    /// from the host's next slot, and each booking moves that slot on by one. Read after
    /// the others booked, a turn kept whole would count their slots twice and ask a
    /// whole turn late. And none at all once a reading shows the host's next slot due with
    /// nobody booked on it: the others are not taking their slots (their requests are held
    /// by the host's concurrency, or they have none of the host's to send), and every
    /// worker waiting out its turn left that slot unused.
    fn turn_ms(&self, host: &str) -> f64 {
        let inner = lock(&self.inner);
        let Some(&(_, booked, turn)) = inner.turns.get(host) else {
            return 0.0;
        };
        let Some(p) = inner.pacing.get(host) else {
            return turn;
        };
        let heard = inner.heard_at.get(host).copied().unwrap_or(f64::MIN);
        if p.tat.is_some_and(|t| t <= heard) {
            return 0.0;
        }
        let since = p.bookings.saturating_sub(booked) as f64;
        (turn - since * p.interval.unwrap_or(0.0)).max(0.0)
    }

    fn pooled(&self, host: &str) -> Option<Pooled> {
        lock(&self.inner).pools.get(host).cloned()
    }

    /// The pooling operation (`lua`, step 4b `p`) in a step of its own: the first name of
    /// a group to ask becomes its pacer, and every later ask answers with that one.
    fn pool(&self, host: &str) -> Result<Option<(Pooled, Vec<String>)>, crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        if inner.params_for(host).is_none() || inner.layout.group_of(host).is_none() {
            return Ok(None);
        }
        inner.pool_members.clear();
        inner.ops.push(PacingOp {
            host: host.to_owned(),
            kind: "p",
            at: 0.0,
            factor: 1.0,
        });
        inner.step(Ask::default())?;
        let members = std::mem::take(&mut inner.pool_members);
        Ok(inner.pools.get(host).cloned().map(|p| (p, members)))
    }

    fn defer(&self, host: &str, feedback: &Feedback, at: f64) {
        let mut inner = lock(&self.inner);
        if inner.params_for(host).is_some() {
            inner
                .deferred
                .entry(host.to_owned())
                .or_default()
                .push((feedback.clone(), at));
        }
    }

    fn commit(
        &self,
        host: &str,
        expected: u64,
        state: &HostState,
        skip: Option<&str>,
    ) -> Result<bool, crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        if inner.params_for(host).is_none() {
            return Ok(true);
        }
        if let Some(why) = skip {
            inner.skipped_here.insert(host.to_owned());
            tracing::warn!(host, "host skipped for the whole fleet: {why}");
        }
        // The machine gave the host's next slot back (the one rule that moves it back: a
        // request booked last was not sent, say refused by robots.txt from cache). The
        // record must give it back too, or the slot goes unused fleet-wide where a local
        // crawl would use it. The script does, for this worker's last lease of the host
        // while it is still open (an earlier lease's request, given back after the last was
        // answered, is not the last booking), and if nothing booked or moved the slot since.
        let gave_back = inner
            .states
            .get(host)
            .is_some_and(|v| state.tat < v.state.tat);
        if let Some(&(lease, next)) = inner.last_booked.get(host)
            && gave_back
            && inner.lease_hosts.contains_key(&lease)
        {
            inner.ops.push(PacingOp {
                host: host.to_owned(),
                kind: "g",
                at: next,
                factor: 1.0,
            });
            // That slot was this worker's turn, and is again: with a turn, the worker would
            // ask a turn after it, and the slot it gave back would go unused after all.
            if let Some(turn) = inner.turns.get_mut(host) {
                turn.2 = 0.0;
            }
        }
        inner.commits.push(Commit {
            host: host.to_owned(),
            expected,
            state: state.clone(),
            skip: skip.unwrap_or("").to_owned(),
            folded: Vec::new(),
        });
        inner.step(Ask::default())?;
        Ok(inner.committed.get(host).copied().unwrap_or(false))
    }
}

/// The least time ahead a missed slot is booked again (ms): the frontier's confirming
/// read starts 10 ms before a slot, and the send may leave 2 ms late.
const REBOOK_LEAD_MS: f64 = 12.0;

impl Fleet for RedisFleet {
    fn status(&self) -> FleetStatus {
        let mut inner = lock(&self.inner);
        let fresh = inner.read_fleet();
        if let Err(e) = fresh {
            // The last known state stands for this call; the engine takes the error next
            // (through `take_error`) and stops, so an idle worker never waits forever.
            inner.keep_error("cannot read the fleet's state", e);
        }
        inner.fleet
    }

    fn take_error(&self) -> Option<crawler_sched::Error> {
        lock(&self.inner).error.take().map(Into::into)
    }

    fn booked_at(&self, lease: u64) -> Option<f64> {
        let (id, at) = lock(&self.inner).booked?;
        (id == lease).then_some(at)
    }

    fn now_ms(&self) -> f64 {
        lock(&self.inner).now_ms()
    }

    /// One round trip that reads the host's state (and sends whatever is buffered). A
    /// pooled name is clear when its own hold and its pacer's both end by the slot: a
    /// refusal of any name of the pool holds the pacer first, the names one commit each
    /// after it.
    fn still_clear(&self, host: &str, at: f64) -> bool {
        let mut inner = lock(&self.inner);
        if inner.params_for(host).is_none() {
            return true;
        }
        let pacer = inner
            .pools
            .get(host)
            .map(|p| p.pacer.clone())
            .filter(|p| p != host);
        let mut names: Vec<String> = std::iter::once(host.to_owned()).chain(pacer).collect();
        // Every record came back within the confirming lead of the slot already (this
        // worker's own lease of it, say): as fresh as the read would be.
        let fresh = names.iter().all(|n| {
            inner
                .heard_at
                .get(n)
                .is_some_and(|&t| t >= at - crawler_sched::CONFIRM_LEAD_MS)
        });
        if !fresh {
            // The fleet's state rides along when it is due (an idle worker holding a request
            // reads both anyway).
            let sync = inner.sync_due();
            inner.peek_pacer = None;
            let read = inner.step(Ask {
                lease: None,
                sync,
                peek: Some(host),
            });
            if let Err(e) = read {
                // Unknown is not clear: the request goes back to its queue, its lease open
                // until it is queued again, and the engine stops on the error.
                inner.keep_error("cannot read a host's politeness state", e);
                return false;
            }
            // The read finds the host's pool even before this worker heard of it (a group
            // pooled since the lease).
            names.truncate(1);
            names.extend(inner.peek_pacer.take().filter(|p| p != host));
        }
        // A hold placed since the lease ends after the booked send; one placed before it
        // ended at or before it (the slot was booked after it).
        names.iter().all(|n| {
            !inner.skipped_here.contains(n)
                && inner.states.get(n).is_none_or(|v| v.state.hold_until <= at)
        })
    }

    /// Judged on the host's state as last heard (the confirming read moments ago); a new
    /// slot is booked in the host's pacing record by the step script, as a lease books.
    fn missed(&self, host: &str, at: f64) -> Missed {
        let mut inner = lock(&self.inner);
        let Some(params) = inner.params_for(host).cloned() else {
            return Missed::OnTime;
        };
        // A pooled name's slots are its pool's: booked again on the pacer's record.
        let host = &inner
            .pools
            .get(host)
            .map_or_else(|| host.to_owned(), |p| p.pacer.clone());
        let params = inner.pacing_params(host).cloned().unwrap_or(params);
        // Within the ordinary dispatch delay (the least any pace allows): on time, without
        // building the host's machine.
        if inner.now_ms() - at <= params.tuning.late_send_ms {
            return Missed::OnTime;
        }
        // A request already booked again once goes at its new slot, however late: that
        // slot was booked a confirming read ahead, so what made it late is the worker's own
        // wake-up delay (a starved machine, a millisecond timer), and booking again would
        // cost two more round trips each time while the starvation lasts; on a fast pace
        // (1,000 r/s) the worker did little else.
        if inner.rebooked.get(host) == Some(&at) {
            inner.rebooked.remove(host);
            return Missed::OnTime;
        }
        let (m, _) = inner.machine(host, &params);
        let now = inner.now_ms();
        // A host without a pace (an open host) has no gap to keep: never late. (Booked
        // again "now", such a request was late again after the next round trip on a busy
        // machine, and again, without end.)
        let unpaced = m.interval_ms() <= 0.0;
        if unpaced || now - at <= m.late_limit_ms() {
            return Missed::OnTime;
        }
        // Booked as a lease books: never sooner than the look-ahead from now, so the
        // request leaves on its own timer whatever this round trip's delay. And far enough
        // ahead that the re-read of the host's state before the send (`FleetFrontier`'s
        // confirmation, a round trip) fits before it, or a fast pace (a look-ahead of a ms
        // or two) makes it late again each time. The script books it in the pacing record
        // (`HostMachine::rebook`'s rule): no compare-and-set to lose.
        let ahead = crawler_sched::lease_ahead(&m, inner.lease_ahead_ms).max(REBOOK_LEAD_MS);
        let draw = inner.next_lease.wrapping_add(inner.ops.len() as u64);
        inner.ops.push(PacingOp {
            host: host.to_owned(),
            kind: "b",
            at: now + ahead,
            factor: super::state::gap_factor(&m, draw),
        });
        if let Err(e) = inner.step(Ask::default()) {
            inner.keep_error("cannot book a new slot for a late request", e);
            return Missed::Unknown;
        }
        match inner.op_slots.get(host).copied() {
            Some(slot) if slot > 0.0 => {
                inner.rebooked.insert(host.to_owned(), slot);
                Missed::Rebooked(slot)
            }
            _ => Missed::Unknown,
        }
    }
}
