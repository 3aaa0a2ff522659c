//! Limiter groups in the frontier: the host names behind one server-side limiter share its
//! holds.
//!
//! A server with one limiter counts every host name it serves together: when it tells one
//! name to wait (Retry-After, a refusal, a backoff), a request to another name lands inside
//! that wait. So each slot belongs to a group, and a hold placed on one slot reaches every
//! live slot of its group; pacing stays per slot until a refusal (below). Which names form
//! a group is decided by evidence ([`LimiterGroups`]): the names of one registrable domain
//! from the start (a name
//! without one, such as an IP literal or `localhost`, is the site of its address); names
//! of other domains sharing an address (any of each name's; a CDN, shared hosting) only when one is refused
//! while the other is held, or both announce the same RateLimit quota window. Every join is
//! logged, and the holds it spreads are in the politeness record as `limiter group` holds.
//!
//! Once a refusal reaches a group (a 429 or 503, or a hold spread to it), the group is paced
//! as one slot: the throttle that learned the refusal paces every name of it (its rate,
//! probes and refusal memory), with the sums of the names' in-flight caps and `max_rate`s;
//! each name still keeps its own cap and its own `max_rate` gap, and only names with work
//! take sends. Before any refusal nothing changes. A name the pool's refusals keep falling
//! on leaves the pool with its share of the throttle's pace (its limiter is its own); the
//! rest of the pool goes on with the other part, on another name's slot if need be.

use std::collections::HashMap;
use std::time::Duration;

use crawler_core::{Feedback, Url};
use tokio::time::Instant;

use super::Frontier;
use super::config::host_key;
use crate::politeness::{HostMachine, Join, JoinEvidence, Leave, LimiterGroups, asks_hold};
use crate::store::QueueStore;

/// A slot's place in the limiter groups (the groups themselves know its domain and address).
pub(super) struct Membership;

/// The frontier's limiter groups, on a clock of their own (milliseconds since the first).
#[derive(Default)]
pub(super) struct Groups {
    pub(super) core: LimiterGroups,
    origin: Option<Instant>,
    /// Open leases booked on a pooled group's pacer rather than on their own slot: their
    /// answers go to the machine that booked them.
    pub(super) booked: HashMap<u64, usize>,
    /// Slots that entered their group before their name's address was in the resolver's
    /// cache (a fleet worker leasing a name another worker found; a name dropped from the
    /// cache), with a URL of theirs: they enter again once it is, so a hold on a name at
    /// the same address reaches them (keyed by name alone, they would have no neighbours
    /// for their whole life).
    unresolved: Vec<(usize, Url)>,
    /// When the unresolved slots were last looked up.
    unresolved_checked: Option<Instant>,
}

/// How often slots that entered their group without an address look it up again: the
/// resolver answers a miss in a few milliseconds, and each look is a cache read per slot.
const UNRESOLVED_RECHECK: Duration = Duration::from_millis(20);

impl Groups {
    fn ms(&mut self, now: Instant) -> f64 {
        let origin = *self.origin.get_or_insert(now);
        now.saturating_duration_since(origin).as_secs_f64() * 1_000.0
    }

    fn instant(&self, ms: f64) -> Option<Instant> {
        let origin = self.origin?;
        (ms.is_finite() && ms >= 0.0).then(|| origin + Duration::from_secs_f64(ms / 1_000.0))
    }
}

impl<S: QueueStore> Frontier<S> {
    /// Put a new slot, opened for `url`, in its limiter group (when groups are on), held as
    /// long as the group is.
    pub(super) fn enter_group(&mut self, id: usize, url: &Url, now: Instant) {
        // A throttle that cannot share holds costs no lookup.
        if self
            .hosts
            .get(id)
            .is_none_or(|h| h.throttle.held_until().is_none())
        {
            return;
        }
        // With groups by address, every address of the name (and the port) is evidence; a
        // name that does not resolve has no neighbours.
        let Some(addresses) = self.config.group_addresses(url) else {
            return;
        };
        // A domain name without an address in the cache yet: look again later.
        let unresolved = self.config.group_by_address
            && matches!(url.host(), Some(url::Host::Domain(_)))
            && addresses.is_empty();
        if unresolved && !self.groups.unresolved.iter().any(|(i, _)| *i == id) {
            self.groups.unresolved.push((id, url.clone()));
        }
        // A name without a registrable domain is the site of its lowest address (the one
        // its slot key names, whatever order the resolver answers in).
        let site = site_of(url, addresses.first().map(String::as_str));
        let caps = self.hosts.get(id).map_or((1, f64::INFINITY), |h| {
            h.throttle.pacing_machine().map_or_else(
                || {
                    (
                        u32::try_from(h.throttle.concurrency()).unwrap_or(u32::MAX),
                        f64::INFINITY,
                    )
                },
                |m| (m.params().concurrency, m.params().max_rate),
            )
        });
        self.groups.core.enter(id, &site, &addresses, caps);
        if let Some(h) = self.hosts.get_mut(id) {
            h.limiter = Some(Membership);
        }
        self.spread_hold(id, id, now, false);
        self.refresh_pool(id, now);
    }

    /// The slot whose throttle paces slot `id`: its pooled group's pacer, or itself.
    pub(super) fn pacer_of(&self, id: usize) -> usize {
        self.groups
            .core
            .pacer(id)
            .filter(|&p| self.hosts.contains(p))
            .unwrap_or(id)
    }

    /// Whether slot `id` may have another request in flight: in a pooled group, when the
    /// group's pacer has room and the name is under its own cap.
    pub(super) fn has_room(&self, id: usize) -> bool {
        let Some(host) = self.hosts.get(id) else {
            return false;
        };
        let p = self.pacer_of(id);
        if p == id && self.groups.core.pacer(id) != Some(id) {
            return host.in_flight < host.throttle.concurrency();
        }
        let own = self
            .groups
            .core
            .caps(id)
            .map_or(1, |c| usize::try_from(c.0).unwrap_or(usize::MAX));
        host.in_flight < own
            && self.hosts.get(p).is_some_and(|h| {
                h.throttle.pacing_machine().map_or(
                    h.in_flight < h.throttle.concurrency(),
                    HostMachine::has_room,
                )
            })
    }

    /// When slot `id` may send next: in a pooled group, at the pacer's next slot, after any
    /// hold of its own and one `max_rate` gap after its own last send.
    pub(super) fn ready_at_of(&self, id: usize) -> Instant {
        let Some(host) = self.hosts.get(id) else {
            return Instant::now();
        };
        let own = host.throttle.ready_at();
        let p = self.pacer_of(id);
        if p == id {
            return own;
        }
        let Some(pacer) = self.hosts.get(p) else {
            return own;
        };
        let mut at = pacer.throttle.ready_at();
        if let Some(h) = host.throttle.held_until() {
            at = at.max(h);
        }
        if let Some(f) = self.groups.instant(self.groups.core.own_floor(id)) {
            at = at.max(f);
        }
        at
    }

    /// The live slots `id`'s pool paces when its group is pooled (they wait on one pacer,
    /// so any answer may free one of them), else `id` alone.
    pub(super) fn pooled_with(&self, id: usize) -> Vec<usize> {
        self.groups.core.pool_members(id)
    }

    /// Name `l.name` leaves its pooled group (the pool's refusals kept falling on it): it
    /// takes its share of the pacer's machine as its own, with the answers of its requests
    /// booked there; the rest of the pool goes on with the other part, on the successor's
    /// slot when the leaving name was the pacer, having forgotten the limit the leaving
    /// name's refusals taught it.
    fn leave_pool(&mut self, l: Leave, now: Instant) {
        let Some((pool, at)) = self.hosts.get(l.pacer).and_then(|h| {
            let m = h.throttle.pacing_machine()?.clone();
            Some((m, h.throttle.machine_clock(now)))
        }) else {
            return;
        };
        // Every answer of the leaving name goes to its own machine from now on; the pool's
        // other answers go to the successor.
        let mut moved = 0u32;
        for (lease, q) in &mut self.groups.booked {
            if *q != l.pacer {
                continue;
            }
            if self.leases.get(lease) == Some(&l.name) {
                *q = l.name;
                moved += 1;
            } else if let Some(s) = l.successor {
                *q = s;
            }
        }
        self.groups.booked.retain(|_, q| *q != l.name);
        let mine = self
            .hosts
            .get(l.name)
            .map_or(0, |h| u32::try_from(h.in_flight).unwrap_or(u32::MAX));
        if let Some(h) = self.hosts.get_mut(l.name) {
            h.throttle
                .adopt(&pool.share_of(l.share, mine, at), at, now, None);
            tracing::info!(
                host = %h.key,
                "limiter group: the pool's refusals kept falling on this name alone (its \
                 limiter is its own): it leaves the pool with {:.0}% of its pace, and \
                 still shares the group's holds",
                l.share * 100.0
            );
        }
        self.record_audit(l.name);
        if let Some(s) = l.successor {
            let left = pool.state().in_flight.saturating_sub(moved);
            let mut rest = pool.share_of(1.0 - l.share, left, at);
            rest.forget_limit(at);
            let (c, r) = self.groups.core.pool_caps(s);
            if let Some(h) = self.hosts.get_mut(s) {
                h.throttle.adopt(
                    &rest,
                    at,
                    now,
                    Some((usize::try_from(c).unwrap_or(usize::MAX), r)),
                );
            }
            self.record_audit(s);
        }
    }

    /// A refusal reached the group of slot `q`, whose throttle learned it: pace the group
    /// as one on `q`'s throttle, the pace of the names that were sending added to it.
    fn pool_group(&mut self, q: usize, now: Instant) {
        if self
            .hosts
            .get(q)
            .is_none_or(|h| h.throttle.pacing_machine().is_none())
        {
            return;
        }
        let was = self.groups.core.pacer(q);
        let at = self.groups.ms(now);
        let absorbed = self.groups.core.pool(q, at);
        if was.is_some() || self.groups.core.pacer(q) != Some(q) {
            return;
        }
        let others: Vec<HostMachine> = absorbed
            .iter()
            .filter_map(|&j| self.hosts.get(j)?.throttle.pacing_machine().cloned())
            .collect();
        let (c, r) = self.groups.core.pool_caps(q);
        if let Some(h) = self.hosts.get_mut(q) {
            h.throttle
                .pool(usize::try_from(c).unwrap_or(usize::MAX), r, &others, now);
            tracing::info!(
                host = %h.key, names = self.groups.core.group(q).len(),
                "limiter group refused: its names are paced as one from now on (in flight \
                 up to {c}, max_rate {r:.3})"
            );
        }
        self.record_audit(q);
    }

    /// The caps of `id`'s pooled group, if it is pooled, are the sums over its live names
    /// (a name came in, or a join brought some).
    fn refresh_pool(&mut self, id: usize, now: Instant) {
        let Some(p) = self.groups.core.pacer(id) else {
            return;
        };
        let (c, r) = self.groups.core.pool_caps(p);
        if let Some(h) = self.hosts.get_mut(p) {
            h.throttle
                .pool(usize::try_from(c).unwrap_or(usize::MAX), r, &[], now);
        }
    }

    /// Take a slot being dropped out of its group.
    pub(super) fn leave_group(&mut self, id: usize, _m: &Membership) {
        self.groups.core.leave(id);
        self.groups.unresolved.retain(|(i, _)| *i != id);
    }

    /// Slots that entered their group before their address was known enter it again once
    /// the resolver's cache has it (at most every [`UNRESOLVED_RECHECK`]).
    pub(super) fn regroup_unresolved(&mut self, now: Instant) {
        if self.groups.unresolved.is_empty()
            || self
                .groups
                .unresolved_checked
                .is_some_and(|t| now.saturating_duration_since(t) < UNRESOLVED_RECHECK)
        {
            return;
        }
        self.groups.unresolved_checked = Some(now);
        let pending = std::mem::take(&mut self.groups.unresolved);
        for (id, url) in pending {
            let resolved = self
                .config
                .group_addresses(&url)
                .is_some_and(|a| !a.is_empty());
            if !resolved {
                self.groups.unresolved.push((id, url));
                continue;
            }
            if self.hosts.get(id).is_some_and(|h| h.limiter.is_some()) {
                self.groups.core.leave(id);
                self.enter_group(id, &url, now);
            }
        }
    }

    /// Slot `id` sent a request at `now` (a quota is shared by the names that send).
    pub(super) fn group_sent(&mut self, id: usize, now: Instant) {
        let at = self.groups.ms(now);
        self.groups.core.sent(id, at);
    }

    /// Before slot `id` learns from `feedback`: a quota its RateLimit headers announce is
    /// shared by the names of its group that sent within the quota's window (a pooled
    /// group's pacer has the whole quota).
    pub(super) fn count_sharers(&mut self, id: usize, feedback: &Feedback, now: Instant) {
        let Some(rl) = feedback.rate_limit else {
            return;
        };
        if self.groups.core.pacer(id).is_some() {
            return;
        }
        if self.hosts.get(id).is_none_or(|h| h.limiter.is_none()) {
            return;
        }
        // The window the quota covers: stated, or at least what is left of it.
        let window = rl
            .window
            .or(rl.reset)
            .map_or(60_000.0, |w| w.as_secs_f64() * 1_000.0);
        let at = self.groups.ms(now);
        let n = self.groups.core.active_sharers(id, window, at);
        if let Some(h) = self.hosts.get_mut(id) {
            h.throttle
                .set_sharers(usize::try_from(n).unwrap_or(usize::MAX));
        }
    }

    /// After slot `id`'s answer taught `feedback` to slot `q`'s throttle (its own, or its
    /// pooled group's pacer): the evidence the answer gives joins groups (a refusal while a
    /// neighbour on its address is held, a quota window a neighbour announced too), a hold
    /// it placed or extended (its end moved later than `before`) reaches the rest of its
    /// group, and a refusal that reached the group pools it.
    pub(super) fn share_holds(
        &mut self,
        id: usize,
        q: usize,
        before: Option<Instant>,
        feedback: &Feedback,
        now: Instant,
    ) {
        if self.hosts.get(id).is_none_or(|h| h.limiter.is_none()) {
            return;
        }
        let Some(host) = self.hosts.get(q) else {
            return;
        };
        let after = host.throttle.held_until();
        let moved = after > before && after.is_some_and(|a| a > now);
        let refusal = matches!(feedback.status, Some(429 | 503));
        let mut joins = Vec::new();
        if refusal {
            let hosts = &self.hosts;
            joins = self.groups.core.refused(id, |s| {
                hosts
                    .get(s)
                    .and_then(|h| h.throttle.held_until())
                    .is_some_and(|u| u > now)
            });
        }
        if let Some(rl) = feedback.rate_limit
            && let (Some(limit), Some(reset)) = (rl.limit, rl.reset)
        {
            let turns_at = self.groups.ms(now) + reset.as_secs_f64() * 1_000.0;
            joins.extend(self.groups.core.quota(id, limit, turns_at));
        }
        for j in &joins {
            self.log_join(j);
        }
        let spread = (moved || asks_hold(feedback)) && after.is_some_and(|a| a > now);
        if !joins.is_empty() {
            // The joined names line up on the latest hold among them.
            self.spread_hold(id, q, now, refusal);
        } else if spread && let Some(until) = after {
            // A hold this answer placed, extended or asked for (a hold shared here earlier
            // may end later than the one it announced; a sibling's shorter one must not).
            self.spread_until(id, q, until, now, refusal);
        }
        if refusal || spread {
            self.pool_group(q, now);
        }
        // A pool's refusals that keep falling on one name say its limiter is its own.
        if refusal && let Some(l) = self.groups.core.pool_refused(id) {
            self.leave_pool(l, now);
        }
        if !joins.is_empty() {
            self.refresh_pool(q, now);
        }
    }

    fn log_join(&self, j: &Join) {
        let name = |i: usize| self.hosts.get(i).map_or("?", |h| h.key.as_str());
        let (host, other) = (name(j.name), name(j.other));
        let why = match j.why {
            JoinEvidence::RefusedWhileHeld => format!("{host} was refused while {other} is held"),
            JoinEvidence::SameQuota => {
                format!("{host} and {other} announce the same RateLimit quota window")
            }
        };
        tracing::info!(
            host = %host, sibling = %other,
            "limiter groups joined: {why} (same address); they share holds for the rest of \
             the crawl"
        );
    }

    /// Hold every live slot of `id`'s group until the latest hold among them ends, if it
    /// has not ended; `refusal` says a 429 or 503 to name `from` placed it.
    fn spread_hold(&mut self, from: usize, id: usize, now: Instant, refusal: bool) {
        let until = self
            .groups
            .core
            .group(id)
            .iter()
            .filter_map(|&i| self.hosts.get(i)?.throttle.held_until())
            .max();
        if let Some(until) = until.filter(|&u| u > now) {
            self.spread_until(from, id, until, now, refusal);
        }
    }

    /// Hold every other live slot of `id`'s group until `until` at least; `refusal` says a
    /// 429 or 503 to name `from` placed the hold. A name paced apart from `from` (one of
    /// them left the group's pool) takes the hold, not the refusal: its limiter is its own;
    /// a name whose RateLimit headers announce another limit than `from`'s does not take a
    /// hold that was no refusal (a spent quota): its quota is its own.
    fn spread_until(
        &mut self,
        from: usize,
        id: usize,
        until: Instant,
        now: Instant,
        refusal: bool,
    ) {
        let ids = self.groups.core.group(id).to_vec();
        if ids.len() < 2 {
            return;
        }
        for i in ids {
            // A spent quota (no refusal) is no wait for a name announcing another limit.
            if !refusal && self.groups.core.quota_apart(from, i) {
                continue;
            }
            let refusal = refusal && !self.groups.core.paced_apart(from, i);
            let Some(h) = self.hosts.get_mut(i) else {
                continue;
            };
            if h.throttle.held_until().is_some_and(|u| u < until) {
                h.throttle.share_hold(until, now, refusal);
                self.record_audit(i);
            }
        }
    }
}

/// The site a URL's host name belongs to, for limiter groups: its registrable domain; a
/// name without one (an IP literal, `localhost`, an intranet name) is known by nothing but
/// its address, so its address is its site (an IP literal and a name resolving to it are
/// one site), or the name itself when it has no address.
fn site_of(url: &Url, address: Option<&str>) -> String {
    if let Some(url::Host::Domain(name)) = url.host()
        && let Some(domain) = psl::domain_str(name)
    {
        return domain.to_owned();
    }
    address.map_or_else(|| host_key(url), |a| format!("address {a}"))
}
