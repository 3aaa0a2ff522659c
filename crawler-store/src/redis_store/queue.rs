//! The [`QueueStore`] methods of [`RedisStore`]: pushes buffered for the next round trip,
//! leases that book their send in the host's shared state in the same step, buffered
//! acknowledgements, and checkpoints.

use crawler_core::Request;
use crawler_sched::{Entry, Fingerprint, QueueStore, fingerprint};

use super::reply::{MEMBER_HEADER, member};
use super::{Ask, LeaseAsk, RedisStore, lock};
use crate::error::Error;

/// How long a host whose fleet-wide concurrency was full is not asked for a lease again:
/// first about the time a page on a fast server takes, so a slot freed by another worker is
/// used soon, then doubling while the host stays full (its pages are slow, or many workers
/// share it), up to the cap.
const FULL_BACKOFF_FIRST: std::time::Duration = std::time::Duration::from_millis(5);
const FULL_BACKOFF_CAP: std::time::Duration = std::time::Duration::from_millis(80);

/// How many of the host's intervals ahead a lease may take a slot (see [`lease_horizon`]).
const HORIZON_SLOTS: f64 = 4.0;
/// ... and at most this far ahead (ms), so a slow host's lease is not held for long.
const HORIZON_CAP_MS: f64 = 2_000.0;

/// How far ahead of the host's next slot a lease is asked for (ms): the look-ahead the
/// budget allows ([`crawler_sched::lease_ahead`]), or a few of the host's intervals. The
/// wider horizon is what keeps workers sharing a host from being refused: each of them
/// last heard the slot the others have since booked, and Redis gives it the next free one
/// (held by the frontier until its time) rather than send it away to ask again.
fn lease_horizon(m: &crawler_sched::politeness::HostMachine, ahead_ms: f64) -> f64 {
    let ahead = crawler_sched::lease_ahead(m, ahead_ms);
    if ahead <= 0.0 {
        return ahead;
    }
    ahead.max((HORIZON_SLOTS * m.interval_ms()).min(HORIZON_CAP_MS))
}

/// The fleet-wide concurrency a lease asks Redis to keep (`None`: no budget, no cap).
fn concurrency_of(params: Option<&crawler_sched::politeness::Params>) -> u32 {
    params.map_or(u32::MAX, |p| p.concurrency.max(1))
}

/// This worker's turn on a paced host (ms after the host's next slot, see
/// [`crawler_sched::SharedBudget::turn_ms`]): `others` slots (the sends the other workers
/// booked between this worker's last two leases, by the host's booking count) went to
/// other workers, and will again. Counted, not read from the `gap` between the two slots:
/// a slot nobody took is no other worker's turn, and a worker whose gaps were once two
/// intervals (another worker took the slot between) would otherwise go on leaving every
/// other slot unused after the others stopped asking. A gap of more than the lease
/// horizon's slots is a pause (the host was held, or this worker busy elsewhere), not a
/// turn: no turn then.
fn turn_of(gap: f64, others: u64, interval: f64) -> f64 {
    if interval <= 0.0 || gap >= (HORIZON_SLOTS + 1.0) * interval {
        return 0.0;
    }
    (others as f64).min(HORIZON_SLOTS - 1.0) * interval
}

/// Pushes buffered before they are sent without waiting for the next lease.
const PUSH_BATCH: usize = 256;
/// Fingerprints remembered locally as seen; past this the memory is cleared (the shared
/// seen set stays the truth, the local set only saves round trips and batching).
const LOCAL_SEEN_MAX: usize = 1 << 21;

impl super::Inner {
    /// A lease granted before the frontier asked for it: kept for its next lease of the host.
    pub(super) fn keep(&mut self, host: &str, lease: u64, member: Vec<u8>) {
        self.next_lease = self.next_lease.max(lease);
        let shard = self.layout.shard_of(host);
        self.open_leases.insert(lease, shard);
        self.lease_hosts.insert(lease, host.to_owned());
        let granted = self.now_ms();
        self.kept.insert(
            host.to_owned(),
            super::Kept {
                lease,
                member,
                granted,
            },
        );
    }

    /// A kept request that will not go: back to its host's queue and its lease closed, in
    /// the next step (the push before the acknowledgement, see `lua`).
    pub(super) fn give_back(&mut self, host: &str, kept: super::Kept) {
        self.pushes.push((host.to_owned(), None, kept.member));
        *self.lens.entry(host.to_owned()).or_default() += 1;
        self.lease_hosts.remove(&kept.lease);
        if let Some(shard) = self.open_leases.remove(&kept.lease) {
            self.acks.push(super::Ack {
                lease: kept.lease,
                shard,
                ready: false,
                host: Some(host.to_owned()),
            });
        }
    }
}

impl QueueStore for RedisStore {
    /// Answers from local memory: a fingerprint this worker has not met is taken as new,
    /// and the shared seen set decides when the push reaches Redis (in the same atomic
    /// step as the queue insert). A request another worker queued first is then dropped
    /// there and counted as a duplicate in the stats this worker saves.
    fn insert_seen(&mut self, fp: Fingerprint) -> Result<bool, crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        if inner.seen.len() >= LOCAL_SEEN_MAX {
            inner.seen.clear();
        }
        let new = inner.seen.insert(fp.0);
        inner.last_fp = new.then_some(fp.0);
        Ok(new)
    }

    fn push(&mut self, host: &str, entry: Entry) -> Result<(), crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        // Only the request whose fingerprint was just admitted carries it; a retry or a
        // `dont_filter` request skips the shared seen set.
        let fp = inner
            .last_fp
            .take()
            .filter(|fp| !entry.request.dont_filter && fingerprint(&entry.request).0 == *fp)
            .map(u128::to_be_bytes);
        let m = member(&entry, inner.job.tag())
            .map_err(|e| Error::redis_reply(&inner.link.shown, format!("cannot encode: {e}")))?;
        inner.pushes.push((host.to_owned(), fp, m));
        *inner.lens.entry(host.to_owned()).or_default() += 1;
        if inner.pushes.len() >= PUSH_BATCH {
            inner.step(Ask::default())?;
        }
        Ok(())
    }

    /// With a budget, the send is booked in the host's pacing record in the same atomic
    /// step as the lease, by the step script itself (see `lua`): the worker only says how
    /// far ahead of the host's next slot it will take a lease. So a lease never loses a
    /// race with another worker's: it takes the next free slot, or is refused while the host
    /// is held, its next slot is further off, or its fleet-wide concurrency is in flight.
    fn lease(&mut self, host: &str) -> Result<Option<(u64, Request)>, crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        // A request of the host granted with the last lease: no round trip, while the
        // host's state it came with is fresh enough for a send (see `Kept`).
        if let Some(kept) = inner.kept.remove(host) {
            let now = inner.now_ms();
            let usable = now - kept.granted <= crawler_sched::CONFIRM_LEAD_MS
                && !inner.skipped_here.contains(host)
                && inner
                    .states
                    .get(host)
                    .is_none_or(|v| v.state.hold_until <= now);
            if usable {
                let json = kept.member.get(MEMBER_HEADER..).unwrap_or_default();
                match serde_json::from_slice::<Request>(json) {
                    Ok(request) => {
                        // An open host's: sent at once, no slot booked.
                        inner.booked = None;
                        return Ok(Some((kept.lease, request)));
                    }
                    Err(e) => {
                        return Err(inner
                            .bad(&format!("a queued request of {host} does not decode: {e}"))
                            .into());
                    }
                }
            }
            // Too old to go unconfirmed: back to its queue, in the next step (this lease's),
            // before the lease asked below.
            inner.give_back(host, kept);
        }
        // The host had its fleet-wide concurrency in flight a moment ago: the frontier
        // offers it again at every turn (its own count knows nothing of the others'), and
        // asking each time cost a round trip per turn, a hundred per page with four
        // workers on open hosts.
        // Unless this worker has an acknowledgement of the host's waiting: it goes in the
        // lease's step, before the lease (see `lua`), so the lease has its room.
        let freeing = inner.acks.iter().any(|a| a.host.as_deref() == Some(host));
        if !freeing
            && inner
                .full
                .get(host)
                .is_some_and(|(until, _)| std::time::Instant::now() < *until)
        {
            return Ok(None);
        }
        let params = inner.params_for(host).cloned();
        // This worker's share of the host's fleet-wide concurrency: asking beyond it is
        // mostly refused (the other workers hold the rest), a round trip each time.
        let own = inner.lease_hosts.values().filter(|h| *h == host).count() as f64;
        if !freeing && own >= 1.0 && inner.shares.get(host).is_some_and(|s| own >= s.floor()) {
            return Ok(None);
        }
        let number = inner.next_lease + 1;
        let pooled = inner.pools.get(host).cloned();
        let ask = match &params {
            Some(params) if !inner.skipped_here.contains(host) => {
                let (m, expected) = inner.machine(host, params);
                let now = inner.now_ms();
                // A pooled name's sends are its pool's: paced by the pacer's state, after
                // the name's own hold and one gap of its own `max_rate` after its own last
                // booking (the script checks the same, see `lua`).
                let own_gap = if params.max_rate.is_finite() && params.max_rate > 0.0 {
                    1_000.0 / params.max_rate
                } else {
                    0.0
                };
                let pace = match &pooled {
                    Some(_) => inner
                        .pacing_machine(host)
                        .map_or_else(|| m.clone(), |t| t.1),
                    None => m.clone(),
                };
                let mut claim = pace.ready_at();
                if let Some(p) = &pooled {
                    claim = claim
                        .max(m.state().hold_until)
                        .max(p.own_booked.map_or(f64::NEG_INFINITY, |b| b + own_gap));
                }
                let look = crawler_sched::lease_ahead(&pace, inner.lease_ahead_ms);
                let ahead = lease_horizon(&pace, inner.lease_ahead_ms);
                if claim > now + ahead + 1.0 {
                    // Not due (less the look-ahead) by what this worker last heard; the
                    // throttle's ready time says when to come back.
                    return Ok(None);
                }
                let (iv, sl, cd) = super::state::pace_of(&m);
                // An open host (no pace, no hold) with more queued and room for two more
                // of this worker's requests: its next request comes in the same answer.
                let cap = f64::from(params.concurrency.max(1));
                let room = own + 2.0 <= inner.shares.get(host).map_or(cap, |s| s.floor());
                let open = pooled.is_none() && m.interval_ms() <= 0.0 && claim <= now;
                let more = inner.lens.get(host).is_some_and(|&n| n >= 2);
                let pool = match inner.layout.group_of(host) {
                    Some(site) => {
                        let (known, version) = pooled.as_ref().map_or((String::new(), 0), |p| {
                            let v = inner.learned.get(&p.pacer).map_or(0, |(_, v)| *v);
                            (p.pacer.clone(), v)
                        });
                        let rate = if params.max_rate.is_finite() {
                            params.max_rate
                        } else {
                            0.0
                        };
                        format!("{site},{own_gap:.3},{rate:.3},{known},{version}")
                    }
                    None => String::new(),
                };
                LeaseAsk {
                    host,
                    budget: true,
                    expected,
                    ahead,
                    look,
                    factor: super::state::gap_factor(&pace, number),
                    init: format!("{iv:.3},{sl:.3},{cd:.3}"),
                    // The configured cap, fleet-wide: pacing keeps the rate, and every
                    // worker gets a share of the host's requests to parse.
                    concurrency: params.concurrency.max(1),
                    number,
                    extra: (open && room && more).then_some(number + 1),
                    pool,
                }
            }
            _ => LeaseAsk {
                host,
                budget: false,
                expected: 0,
                ahead: 0.0,
                look: 0.0,
                factor: 1.0,
                init: String::new(),
                concurrency: u32::MAX,
                number,
                extra: None,
                pool: String::new(),
            },
        };
        let budget = ask.budget;
        // The fleet's state rides along when it is due: a busy worker then never spends a
        // round trip of its own on it.
        let sync = inner.sync_due();
        let answer = inner.step(Ask {
            lease: Some(ask),
            sync,
            peek: None,
        })?;
        // A send booked for later than now is held by the frontier until its time; a host
        // without a pace has no time to keep (its request goes at once). A pooled name's
        // pace is its pool's, booked on the pacer.
        let pacer = inner.pools.get(host).map(|p| p.pacer.clone());
        let booked_on = pacer.clone().unwrap_or_else(|| host.to_owned());
        let paced = inner
            .pacing
            .get(&booked_on)
            .is_some_and(|p| p.interval.unwrap_or(0.0) > 0.0);
        inner.booked = match &answer {
            Some(l) if l.code == 1 && budget && paced => Some((l.id, l.at)),
            _ => None,
        };
        if let Some((id, _)) = inner.booked
            && pacer.is_some()
        {
            // Turns are counted on a name's own bookings; a pool's are its pacer's, shared
            // by every name of it: no turn.
            if let Some(next) = inner.pacing.get(&booked_on).and_then(|p| p.tat) {
                inner.last_booked.insert(booked_on.clone(), (id, next));
            }
        } else if let Some((id, at)) = inner.booked {
            let interval = inner
                .pacing
                .get(host)
                .and_then(|p| p.interval)
                .unwrap_or(0.0);
            // The host's bookings, this lease's included.
            let booked = inner.pacing.get(host).map_or(0, |p| p.bookings);
            let turn = inner.turns.get(host).map_or(0.0, |(prev, seen, _)| {
                let others = booked.saturating_sub(*seen).saturating_sub(1);
                turn_of(at - prev, others, interval)
            });
            inner.turns.insert(host.to_owned(), (at, booked, turn));
            if let Some(next) = inner.pacing.get(host).and_then(|p| p.tat) {
                inner.last_booked.insert(host.to_owned(), (id, next));
            }
        }
        let cap = u64::from(concurrency_of(params.as_ref()));
        // The first wait of a full host: about the time one of its requests in flight takes
        // to end (its latency over the requests in flight), at least the floor.
        let first = inner
            .states
            .get(host)
            .and_then(|v| v.state.lat_fast)
            .filter(|l| l.is_finite() && *l > 0.0)
            .map_or(FULL_BACKOFF_FIRST, |l| {
                std::time::Duration::from_secs_f64(l / cap.max(1) as f64)
                    .clamp(FULL_BACKOFF_FIRST, FULL_BACKOFF_CAP)
            });
        // The share grows by one per `cap` shares' worth of grants (additive increase, slow:
        // each step up is a probe the other workers' leases may refuse) and falls to
        // what this worker holds at a refusal for concurrency: workers sharing a host settle
        // on a share each, without a round trip spent on each refusal.
        match &answer {
            Some(l) if l.code == 1 && budget => {
                if let Some(s) = inner.shares.get_mut(host) {
                    *s = (*s + 1.0 / (s.max(1.0) * cap as f64)).min(cap as f64);
                }
            }
            Some(l) if l.code == 2 && budget && l.in_flight >= cap => {
                inner.shares.insert(host.to_owned(), own.max(1.0));
            }
            _ => {}
        }
        if let Some(l) = &answer
            && l.code == 1
            && l.in_flight >= cap
        {
            // This lease filled the host: the next ask would be refused, unless another
            // worker acknowledged one meanwhile; wait the first step of the backoff (or
            // until this worker acknowledges one of its own, see `ack`).
            inner
                .full
                .insert(host.to_owned(), (std::time::Instant::now() + first, first));
        } else if let Some(l) = &answer
            && l.code == 2
            && l.in_flight >= cap
        {
            // Doubling while the host stays full, from the first wait to the cap.
            let wait = inner
                .full
                .get(host)
                .map_or(first, |(_, w)| (*w * 2).min(FULL_BACKOFF_CAP));
            inner
                .full
                .insert(host.to_owned(), (std::time::Instant::now() + wait, wait));
        } else {
            inner.full.remove(host);
        }
        let leased = answer;
        let Some(leased) = leased else {
            return Ok(None);
        };
        if leased.code != 1 {
            return Ok(None);
        }
        let json = leased.member.get(MEMBER_HEADER..).unwrap_or_default();
        // The number is spent even if the request does not decode: ids never repeat.
        inner.next_lease = leased.id;
        let request: Request = serde_json::from_slice(json)
            .map_err(|e| inner.bad(&format!("a queued request of {host} does not decode: {e}")))?;
        let shard = inner.layout.shard_of(host);
        inner.open_leases.insert(leased.id, shard);
        if budget {
            inner.lease_hosts.insert(leased.id, host.to_owned());
        }
        if let Some((extra, member)) = leased.extra {
            inner.keep(host, extra, member);
        }
        Ok(Some((leased.id, request)))
    }

    fn send_buffered(&mut self) -> Result<(), crawler_sched::Error> {
        lock(&self.inner).drain()?;
        Ok(())
    }

    /// Buffered: sent with the next round trip, after the pushes it follows; at once when
    /// its host waits on it alone (below).
    fn ack(&mut self, lease: u64) -> Result<(), crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        // A paced host whose whole fleet-wide concurrency this worker holds (one request
        // at a time, by default): the host waits on this acknowledgement alone, since no
        // other worker can lease its next slot before it reaches Redis. Buffered until this
        // worker's next step (its own turn, a few slots on), it left the others' slots late:
        // one send in ten of a fleet of four, behind a limiter of one at a time. With room
        // held by other workers too, the next lease waits for the first of their
        // acknowledgements, and this one rides along with the next step as usual.
        let blocking = inner
            .lease_hosts
            .get(&lease)
            .filter(|&h| {
                // Paced first: counting this worker's leases of the host walks all of them,
                // and most acknowledgements (open hosts) need not.
                let paced = inner
                    .pacing
                    .get(h)
                    .is_some_and(|p| p.interval.unwrap_or(0.0) > 0.0);
                paced && {
                    let cap = concurrency_of(inner.params_for(h)) as usize;
                    inner.lease_hosts.values().filter(|&o| o == h).count() >= cap
                }
            })
            .cloned();
        // A lease this worker does not hold (never, or no more) has no record to release.
        let host = inner.lease_hosts.remove(&lease);
        if let Some(shard) = inner.open_leases.remove(&lease) {
            inner.acks.push(super::Ack {
                lease,
                shard,
                ready: false,
                host,
            });
        }
        if let Some(host) = blocking {
            inner.drain()?;
            // The room this worker waited for is its own, free now.
            inner.full.remove(&host);
        }
        Ok(())
    }

    fn host_len(&self, host: &str) -> usize {
        let inner = lock(&self.inner);
        inner.lens.get(host).copied().unwrap_or(0) + usize::from(inner.kept.contains_key(host))
    }

    fn leased_ahead(&self, host: &str) -> bool {
        lock(&self.inner).kept.contains_key(host)
    }

    fn queued(&self) -> usize {
        let mut inner = lock(&self.inner);
        // Called by the engine every tick: a convenient time to renew leases of long
        // downloads.
        if !inner.open_leases.is_empty()
            && inner.last_renew.elapsed() >= inner.timeout / 4
            && let Err(e) = inner.step(Ask::default())
        {
            inner.keep_error("cannot renew leases", e);
        }
        inner.lens.values().sum::<usize>() + inner.kept.len()
    }

    fn hosts(&self) -> Vec<String> {
        let mut inner = lock(&self.inner);
        if let Err(e) = inner.sync_if_due() {
            inner.keep_error("cannot read the fleet's state", e);
        }
        inner
            .lens
            .iter()
            .filter(|(h, n)| **n > 0 && !inner.kept.contains_key(*h))
            .map(|(h, _)| h.clone())
            .chain(inner.kept.keys().cloned())
            .collect()
    }

    fn next_seq(&self) -> u64 {
        1
    }

    /// Saves this worker's stats (with duplicates found by the shared seen set moved from
    /// "enqueued" to "filtered") under its worker number, and sends everything buffered.
    fn checkpoint(&mut self, stats: &serde_json::Value) -> Result<(), crawler_sched::Error> {
        let mut inner = lock(&self.inner);
        let mut stats = stats.clone();
        let dups = inner.dups;
        if let Some(n) = stats.get_mut("requests_enqueued") {
            *n = (n.as_u64().unwrap_or(0).saturating_sub(dups)).into();
        }
        if let Some(serde_json::Value::Object(f)) = stats.get_mut("filtered") {
            let d = f
                .get("duplicate")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            f.insert("duplicate".into(), (d + dups).into());
        }
        inner.stats = Some(stats.to_string());
        inner.drain()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::turn_of;

    #[test]
    fn a_turn_counts_the_slots_other_workers_booked_not_the_time_between() {
        // Two intervals between this worker's slots, and another worker's send between
        // them: one slot is the other's turn.
        assert_eq!(turn_of(500.0, 1, 250.0), 250.0);
        // Two intervals, and nobody booked the slot between (it went unused): no turn, so
        // the next lease asks for the next slot rather than leave another one unused.
        assert_eq!(turn_of(500.0, 0, 250.0), 0.0);
        // At most the horizon's slots less this worker's own.
        assert_eq!(turn_of(1_000.0, 7, 250.0), 750.0);
        // A pause (the host was held) is no turn, however many the others booked.
        assert_eq!(turn_of(30_000.0, 2, 250.0), 0.0);
        // A host without a pace has no turns.
        assert_eq!(turn_of(500.0, 3, 0.0), 0.0);
    }
}
