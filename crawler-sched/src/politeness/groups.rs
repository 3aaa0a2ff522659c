//! Limiter groups by evidence: which host names share one server-side limiter, so that a
//! hold placed on one of them reaches the others.
//!
//! - The names of one registrable domain share holds from their first request: one site's
//!   hosts behind one limiter is the common case, and sharing costs little when wrong.
//! - Names of different registrable domains are never grouped because they resolve to one
//!   address (a CDN or shared hosting serves thousands of unrelated sites from one). Their
//!   groups join only on evidence, between names sharing an address (any of each name's
//!   addresses): one is refused while the
//!   other is held, or their RateLimit headers announce the same quota turning at the same
//!   moment.
//! - A quota announced in RateLimit headers is shared among the names of the group that
//!   sent within its window, never by idle ones, nor by names announcing another limit
//!   (their quota is their own: their machines stay their own when a refusal pools the
//!   group, and a spent quota's hold does not reach them).
//! - Once a refusal reaches a group of two names or more (a 429 or 503, or a hold spread to
//!   the group), the group is *pooled*: one name's machine (its pacer) paces every name of
//!   it, with the sums of the live names' in-flight caps and `max_rate`s; each name still
//!   keeps its own cap and its own `max_rate` gap. N machines climbing and probing one
//!   limiter on their own multiply its refusals; one machine learns it once.
//! - A name the pool's refusals keep falling on, as a shared limiter would rarely have
//!   done ([`LEAVE_POOL_CHANCE`]), has a limiter of its own: it leaves the pool with its
//!   share of the pace ([`LimiterGroups::pool_refused`]), still sharing the group's holds.
//!
//! Pure: ids are the caller's (frontier slots, the judge's names), times are milliseconds on
//! the caller's clock. The frontier and the judge run this same code, so the judge's worlds
//! judge the rules the crawl keeps. Joins are kept by domain, so they outlive the names: a
//! name dropped and seen again lands in its joined group.

use std::collections::HashMap;

use crawler_core::Feedback;

use super::params::Millis;

/// Whether an answer asks the host to wait (a refusal, a Retry-After, a spent RateLimit
/// quota, a challenge page): the hold it leaves reaches the rest of the name's limiter
/// group even when the name's own hold did not move (a hold shared to it earlier may end
/// later than the one this answer announced, and a sibling's shorter one must not).
pub fn asks_hold(fb: &Feedback) -> bool {
    matches!(fb.status, Some(429 | 503))
        || fb.retry_after.is_some()
        || fb.soft_block
        || fb.rate_limit.is_some_and(|rl| rl.remaining == 0)
}

/// How far apart (ms) two quota windows may turn and still be one: resets are whole
/// seconds (rounded up by most servers) read after a transit, so one window read by two
/// names differs by up to a second and a little.
pub const QUOTA_TURN_TOLERANCE_MS: f64 = 1_500.0;

/// A name counts among a quota's sharers when it sent within this long (ms), or within the
/// quota's window when that is longer: a name that sends holds its share of a window
/// however short the window is, and one idle for a minute takes none. The same span says
/// which names' paces a refused group's machine takes over when it pools them
/// ([`LimiterGroups::pool`]): what the limiter saw in its last minute.
pub const ACTIVE_SHARER_MS: f64 = 60_000.0;

/// A name of a pooled group leaves the pool when the group's refusals since it was first
/// refused in a row all fell on it, and a limiter the names shared would have done so at
/// most this often: each refusal after the first lands on the name with the chance of its
/// share of the pool's sends since, so a run of `r` has the chance `share^(r - 1)`. One in
/// ten sits clear of the runs of names sending alike (two names: five refusals in a row,
/// 1/16, as four would be 1/8 give or take the shares' noise; three: four; four or five:
/// three): a shared limiter keeps its pool in most draws (a wrong leave costs refusals:
/// two machines probing one limiter), and the tight name of a site whose names have
/// separate limits leaves after a few refusals, each of which held the whole group.
pub const LEAVE_POOL_CHANCE: f64 = 0.1;

/// One live name.
#[derive(Debug, Clone)]
struct Name {
    domain: String,
    /// Every address it resolves to (empty when unknown or not looked up).
    addresses: Vec<String>,
    /// The last quota its RateLimit headers announced: the limit and when it turns.
    quota: Option<(u64, Millis)>,
    /// When it last sent.
    sent_at: Option<Millis>,
    /// The user's limits for it: requests in flight and `max_rate` (requests/s).
    caps: (u32, f64),
    /// Requests it sent.
    sends: u64,
    /// It left its group's pool: the group's refusals kept falling on it alone, so its
    /// limiter is its own (it still shares the group's holds).
    apart: bool,
}

/// The refusals of a pooled group that fell on one name in a row.
#[derive(Debug, Clone)]
struct Run {
    name: usize,
    count: u32,
    /// Each pool member's sends when the run began.
    start: Vec<(usize, u64)>,
}

/// A name leaves its group's pool ([`LimiterGroups::pool_refused`]): the caller splits the
/// pacer's machine between it and the rest of the pool.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Leave {
    /// The name leaving: from now on it is paced by a machine of its own.
    pub name: usize,
    /// The machine that paced the pool (the name's own slot when it was the pacer).
    pub pacer: usize,
    /// The name whose machine paces the rest of the pool from now on (`pacer`, unless
    /// the leaving name was the pacer), `None` when no name is left in the pool.
    pub successor: Option<usize>,
    /// The leaving name's share of the pool's sends during the run: its part of the pace.
    pub share: f64,
}

/// A join the evidence made: `name` and `other` now share holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Join {
    /// The name whose answer was the evidence.
    pub name: usize,
    /// A name of the group it joined.
    pub other: usize,
    /// What the evidence was.
    pub why: JoinEvidence,
}

/// Why two groups were joined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinEvidence {
    /// One was refused while the other was held.
    RefusedWhileHeld,
    /// Both announced the same quota turning at the same moment.
    SameQuota,
}

/// The limiter groups of a crawl's live names.
#[derive(Debug, Default)]
pub struct LimiterGroups {
    names: HashMap<usize, Name>,
    /// Domain → the domain its group joined (a union-find parent); roots have no entry.
    joined: HashMap<String, String>,
    /// Root domain → live ids.
    members: HashMap<String, Vec<usize>>,
    /// Address → live ids (a name is under each of its addresses).
    at_address: HashMap<String, Vec<usize>>,
    /// Root domain → the name whose machine paces the group, once a refusal reached it.
    pooled: HashMap<String, usize>,
    /// Root domain → the pool's refusals that fell on one name in a row.
    runs: HashMap<String, Run>,
}

impl LimiterGroups {
    fn root<'a>(&'a self, mut domain: &'a str) -> &'a str {
        while let Some(up) = self.joined.get(domain) {
            domain = up;
        }
        domain
    }

    fn root_of(&self, id: usize) -> Option<&str> {
        self.names.get(&id).map(|n| self.root(&n.domain))
    }

    /// A name `id` of registrable domain `domain` comes in, resolving to `addresses` (every
    /// one of them: names of other domains sharing any one may be behind one limiter;
    /// empty when unknown or not looked up: it then joins no other domain's group), with
    /// the user's limits for it: `caps` is (requests in flight, `max_rate` in requests/s).
    pub fn enter(&mut self, id: usize, domain: &str, addresses: &[String], caps: (u32, f64)) {
        self.leave(id);
        let root = self.root(domain).to_owned();
        self.members.entry(root).or_default().push(id);
        let mut addresses = addresses.to_vec();
        addresses.sort_unstable();
        addresses.dedup();
        for a in &addresses {
            self.at_address.entry(a.clone()).or_default().push(id);
        }
        self.names.insert(
            id,
            Name {
                domain: domain.to_owned(),
                addresses,
                quota: None,
                sent_at: None,
                caps,
                sends: 0,
                apart: false,
            },
        );
    }

    /// The name `id` is gone (its slot dropped). Joins stay, by domain.
    pub fn leave(&mut self, id: usize) {
        let Some(name) = self.names.remove(&id) else {
            return;
        };
        let root = self.root(&name.domain).to_owned();
        remove_id(&mut self.members, &root, id);
        if self.pooled.get(&root) == Some(&id) {
            // Its machine goes with it: the rest of the group learns afresh, each on its
            // own, until a refusal pools it again.
            self.pooled.remove(&root);
            self.runs.remove(&root);
        }
        for a in &name.addresses {
            remove_id(&mut self.at_address, a, id);
        }
    }

    /// The live names of `id`'s group, itself included (empty for an unknown id).
    pub fn group(&self, id: usize) -> &[usize] {
        self.root_of(id)
            .and_then(|r| self.members.get(r))
            .map_or(&[], Vec::as_slice)
    }

    /// Whether `a` and `b` are in one group.
    pub fn same_group(&self, a: usize, b: usize) -> bool {
        matches!((self.root_of(a), self.root_of(b)), (Some(x), Some(y)) if x == y)
    }

    /// Whether `a` and `b` are paced apart although in one group: one of them left the
    /// group's pool (its refusals were its own), so a refusal of one is no refusal of the
    /// other's pace, and a quota one announces is not the other's.
    pub fn paced_apart(&self, a: usize, b: usize) -> bool {
        a != b
            && [a, b]
                .iter()
                .any(|i| self.names.get(i).is_some_and(|n| n.apart))
    }

    /// Whether the last RateLimit headers of `a` and `b` announced different limits: each
    /// has a quota of its own, so one's spent quota is no wait for the other.
    pub fn quota_apart(&self, a: usize, b: usize) -> bool {
        let limit = |s: usize| self.names.get(&s).and_then(|n| n.quota).map(|q| q.0);
        matches!((limit(a), limit(b)), (Some(x), Some(y)) if x != y)
    }

    /// The names of `id`'s group its pool paces (all but those that left it), or `id`
    /// alone when it is not pooled.
    pub fn pool_members(&self, id: usize) -> Vec<usize> {
        if self.pacer(id).is_none() {
            return vec![id];
        }
        self.group(id)
            .iter()
            .copied()
            .filter(|s| self.names.get(s).is_some_and(|n| !n.apart))
            .collect()
    }

    /// `id` sent a request at `now`.
    pub fn sent(&mut self, id: usize, now: Millis) {
        if let Some(n) = self.names.get_mut(&id) {
            n.sent_at = Some(n.sent_at.map_or(now, |s| s.max(now)));
            n.sends += 1;
        }
    }

    /// How many names of `id`'s group sent within [`ACTIVE_SHARER_MS`] before `now`, or
    /// within `window_ms` (the quota's window) when longer: a quota is theirs together.
    /// `id` always counts. A name whose last RateLimit headers announced another limit
    /// than `id`'s last ones has a quota of its own, and takes no part of this one.
    pub fn active_sharers(&self, id: usize, window_ms: f64, now: Millis) -> u32 {
        let window_ms = window_ms.max(ACTIVE_SHARER_MS);
        let others = self
            .group(id)
            .iter()
            .filter(|&&s| s != id && !self.paced_apart(id, s) && !self.quota_apart(id, s))
            .filter(|s| {
                self.names
                    .get(s)
                    .and_then(|n| n.sent_at)
                    .is_some_and(|t| now - t <= window_ms)
            })
            .count();
        u32::try_from(others + 1).unwrap_or(u32::MAX)
    }

    /// `id` was refused: the groups of names on its address that are held now (`held`
    /// says which) join its group. Returns the joins made.
    pub fn refused(&mut self, id: usize, held: impl Fn(usize) -> bool) -> Vec<Join> {
        let candidates: Vec<usize> = self
            .neighbours(id)
            .into_iter()
            .filter(|&s| held(s))
            .collect();
        self.join_all(id, candidates, JoinEvidence::RefusedWhileHeld)
    }

    /// `id`'s answer announced a quota of `limit` turning at `turns_at`: the groups of names
    /// on its address whose last announcement was the same quota turning at the same moment
    /// join its group. Returns the joins made.
    pub fn quota(&mut self, id: usize, limit: u64, turns_at: Millis) -> Vec<Join> {
        let Some(n) = self.names.get_mut(&id) else {
            return Vec::new();
        };
        n.quota = Some((limit, turns_at));
        let candidates: Vec<usize> = self
            .neighbours(id)
            .into_iter()
            .filter(|s| {
                self.names
                    .get(s)
                    .and_then(|n| n.quota)
                    .is_some_and(|(l, t)| {
                        l == limit && (t - turns_at).abs() <= QUOTA_TURN_TOLERANCE_MS
                    })
            })
            .collect();
        self.join_all(id, candidates, JoinEvidence::SameQuota)
    }

    /// A refusal reached `id`'s group (a 429 or 503, or a hold spread to the group) at
    /// `now`: from now on one machine paces it, `id`'s (which learned the refusal). Returns
    /// the names whose pace it takes over, the others that sent within
    /// [`ACTIVE_SHARER_MS`] (an idle name's rate is no part of what the limiter saw): the
    /// caller adds their rates to the pacer's (see [`HostMachine::absorb`]). Empty when the
    /// group was pooled already or has one name.
    ///
    /// [`HostMachine::absorb`]: super::HostMachine::absorb
    pub fn pool(&mut self, id: usize, now: Millis) -> Vec<usize> {
        let Some(root) = self.root_of(id).map(str::to_owned) else {
            return Vec::new();
        };
        if self.names.get(&id).is_none_or(|n| n.apart) || self.pooled.contains_key(&root) {
            return Vec::new();
        }
        // Names whose RateLimit headers announce another limit than `id`'s have a limiter
        // of their own: they are paced apart from the pool.
        let others: Vec<usize> = self
            .group(id)
            .iter()
            .copied()
            .filter(|&s| self.quota_apart(id, s))
            .collect();
        for s in others {
            if let Some(n) = self.names.get_mut(&s) {
                n.apart = true;
            }
        }
        let members: Vec<usize> = self
            .group(id)
            .iter()
            .copied()
            .filter(|s| self.names.get(s).is_some_and(|n| !n.apart))
            .collect();
        if members.len() < 2 || self.pooled.contains_key(&root) {
            return Vec::new();
        }
        let active = members
            .iter()
            .copied()
            .filter(|&s| s != id)
            .filter(|s| {
                self.names
                    .get(s)
                    .and_then(|n| n.sent_at)
                    .is_some_and(|t| now - t <= ACTIVE_SHARER_MS)
            })
            .collect();
        self.pooled.insert(root, id);
        active
    }

    /// The name whose machine paces `id`, once `id`'s group is pooled (itself when it is
    /// the pacer); `None` while each name paces itself, and for a name that left the pool.
    pub fn pacer(&self, id: usize) -> Option<usize> {
        if self.names.get(&id).is_some_and(|n| n.apart) {
            return None;
        }
        self.root_of(id).and_then(|r| self.pooled.get(r)).copied()
    }

    /// A 429 or 503 answered a request `id` sent while its group is pooled (booked on the
    /// pool's machine). Returns the leave it makes, when the pool's refusals since the first
    /// of a run on `id` all fell on it and a limiter the pool's names shared would have
    /// done so with a chance under [`LEAVE_POOL_CHANCE`] (see there): `id` leaves the pool
    /// for the rest of the crawl, and the caller splits the pacer's machine
    /// ([`HostMachine::share_of`](super::HostMachine::share_of)).
    pub fn pool_refused(&mut self, id: usize) -> Option<Leave> {
        let pacer = self.pacer(id)?;
        let root = self.root_of(id)?.to_owned();
        let members = self.pool_members(id);
        let sends = |s: usize| self.names.get(&s).map_or(0, |n| n.sends);
        let fresh = || Run {
            name: id,
            count: 1,
            start: members.iter().map(|&s| (s, sends(s))).collect(),
        };
        let run = match self.runs.get(&root) {
            Some(r) if r.name == id => Run {
                count: r.count + 1,
                ..r.clone()
            },
            _ => fresh(),
        };
        // The pool's sends since the run began, and the name's part of them.
        let (mine, all) = run.start.iter().filter(|(s, _)| members.contains(s)).fold(
            (0u64, 0u64),
            |(m, a), &(s, at)| {
                let d = sends(s).saturating_sub(at);
                (if s == id { m + d } else { m }, a + d)
            },
        );
        let share = if all > 0 {
            mine as f64 / all as f64
        } else {
            1.0
        };
        let chance = share.powi(i32::try_from(run.count - 1).unwrap_or(i32::MAX));
        if members.len() < 2 || run.count < 2 || chance > LEAVE_POOL_CHANCE {
            self.runs.insert(root, run);
            return None;
        }
        self.runs.remove(&root);
        if let Some(n) = self.names.get_mut(&id) {
            n.apart = true;
        }
        let rest: Vec<usize> = members.into_iter().filter(|&s| s != id).collect();
        let successor = if pacer == id {
            rest.first().copied()
        } else {
            Some(pacer)
        };
        match successor {
            Some(p) => {
                self.pooled.insert(root, p);
            }
            None => {
                self.pooled.remove(&root);
            }
        }
        Some(Leave {
            name: id,
            pacer,
            successor,
            share,
        })
    }

    /// The pooled machine's limits for `id`'s group: the sums over the names its pool
    /// paces of their in-flight caps and `max_rate`s.
    pub fn pool_caps(&self, id: usize) -> (u32, f64) {
        self.group(id)
            .iter()
            .filter_map(|s| self.names.get(s))
            .filter(|n| !n.apart)
            .fold((0u32, 0.0), |(c, r), n| {
                (c.saturating_add(n.caps.0), r + n.caps.1)
            })
    }

    /// The user's limits for `id` alone: (requests in flight, `max_rate`).
    pub fn caps(&self, id: usize) -> Option<(u32, f64)> {
        self.names.get(&id).map(|n| n.caps)
    }

    /// The earliest `id` may send again by its own `max_rate` (ms): in a pooled group the
    /// group's rate is shared, but no name goes faster than the user allows it alone.
    pub fn own_floor(&self, id: usize) -> Millis {
        self.names
            .get(&id)
            .and_then(|n| Some(n.sent_at? + 1_000.0 / n.caps.1.max(1e-9)))
            .unwrap_or(f64::NEG_INFINITY)
    }

    /// When `id` last sent (for sharing a pooled group's sends: the longest waiting name
    /// goes first).
    pub fn sent_at(&self, id: usize) -> Option<Millis> {
        self.names.get(&id).and_then(|n| n.sent_at)
    }

    /// Live names outside `id`'s group sharing any address with it (each once).
    fn neighbours(&self, id: usize) -> Vec<usize> {
        let Some(name) = self.names.get(&id) else {
            return Vec::new();
        };
        let mut out: Vec<usize> = name
            .addresses
            .iter()
            .filter_map(|a| self.at_address.get(a))
            .flatten()
            .copied()
            .filter(|&s| s != id && !self.same_group(s, id))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    fn join_all(&mut self, id: usize, others: Vec<usize>, why: JoinEvidence) -> Vec<Join> {
        let mut joins = Vec::new();
        for other in others {
            if self.same_group(id, other) {
                continue;
            }
            let (Some(a), Some(b)) = (self.root_of(id), self.root_of(other)) else {
                continue;
            };
            let (a, b) = (a.to_owned(), b.to_owned());
            let moved = self.members.remove(&b).unwrap_or_default();
            self.members.entry(a.clone()).or_default().extend(moved);
            // A pooled side keeps its pacer (the first side's when both were pooled).
            if let Some(p) = self.pooled.remove(&b) {
                self.pooled.entry(a.clone()).or_insert(p);
            }
            self.joined.insert(b, a);
            joins.push(Join {
                name: id,
                other,
                why,
            });
        }
        joins
    }
}

fn remove_id(map: &mut HashMap<String, Vec<usize>>, key: &str, id: usize) {
    if let Some(ids) = map.get_mut(key) {
        if let Some(i) = ids.iter().position(|&x| x == id) {
            ids.swap_remove(i);
        }
        if ids.is_empty() {
            map.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: (u32, f64) = (1, 20.0);

    #[test]
    fn names_of_one_domain_share_from_the_start_and_other_domains_never_by_address_alone() {
        let mut g = LimiterGroups::default();
        g.enter(0, "example.com", &["10.0.0.1:80".into()], CAPS);
        g.enter(1, "example.com", &["10.0.0.2:80".into()], CAPS);
        g.enter(2, "other.org", &["10.0.0.1:80".into()], CAPS);
        assert!(g.same_group(0, 1));
        assert!(!g.same_group(0, 2));
        assert_eq!(g.group(2), &[2]);
    }

    #[test]
    fn a_refusal_while_a_neighbour_is_held_joins_their_groups_for_good() {
        let mut g = LimiterGroups::default();
        g.enter(0, "a.com", &["1.1.1.1:80".into()], CAPS);
        g.enter(1, "b.com", &["1.1.1.1:80".into()], CAPS);
        g.enter(2, "c.com", &["2.2.2.2:80".into()], CAPS);
        // Nobody held: no evidence.
        assert!(g.refused(0, |_| false).is_empty());
        // c.com is held but on another address: no evidence either.
        assert!(g.refused(0, |s| s == 2).is_empty());
        let joins = g.refused(0, |s| s == 1);
        assert_eq!(joins.len(), 1);
        assert!(g.same_group(0, 1));
        // The join outlives the names: b.com seen again is in a.com's group.
        g.leave(1);
        g.enter(7, "b.com", &["1.1.1.1:80".into()], CAPS);
        assert!(g.same_group(0, 7));
    }

    #[test]
    fn the_same_quota_turning_at_the_same_moment_joins_and_a_different_one_does_not() {
        let mut g = LimiterGroups::default();
        g.enter(0, "a.com", &["1.1.1.1:443".into()], CAPS);
        g.enter(1, "b.com", &["1.1.1.1:443".into()], CAPS);
        g.enter(2, "c.com", &["1.1.1.1:443".into()], CAPS);
        assert!(g.quota(0, 100, 60_000.0).is_empty());
        // Another limit, or the same limit turning 10 s apart: not one quota.
        assert!(g.quota(1, 50, 60_000.0).is_empty());
        assert!(g.quota(2, 100, 70_000.0).is_empty());
        assert!(!g.same_group(0, 2));
        // The same limit turning within the tolerance: one quota.
        let joins = g.quota(2, 100, 60_800.0);
        assert_eq!(joins.len(), 1);
        assert!(g.same_group(0, 2));
        assert!(!g.same_group(0, 1));
    }

    #[test]
    fn a_quota_is_shared_by_the_names_that_sent_within_its_window_only() {
        let mut g = LimiterGroups::default();
        for id in 0..5 {
            g.enter(id, "shop.example", &[], CAPS);
        }
        g.sent(0, 100_000.0);
        g.sent(1, 95_000.0);
        g.sent(2, 10_000.0);
        // Within the last minute (a 10 s quota window counts a minute): 0 and 1 (3 and 4
        // never sent, 2 long ago).
        assert_eq!(g.active_sharers(0, 10_000.0, 100_000.0), 2);
        // A two-minute window counts 2 as well.
        assert_eq!(g.active_sharers(0, 120_000.0, 100_000.0), 3);
        // A name that never sent still counts itself.
        assert_eq!(g.active_sharers(3, 60_000.0, 100_000.0), 3);
    }

    #[test]
    fn every_address_of_a_name_is_evidence_and_an_address_alone_joins_nothing() {
        let mut g = LimiterGroups::default();
        // a.com resolves to two addresses; b.com shares only the second, c.com the first.
        g.enter(
            0,
            "a.com",
            &["1.1.1.1:80".into(), "2.2.2.2:80".into()],
            CAPS,
        );
        g.enter(1, "b.com", &["2.2.2.2:80".into()], CAPS);
        g.enter(2, "c.com", &["1.1.1.1:80".into()], CAPS);
        g.enter(3, "d.com", &["3.3.3.3:80".into()], CAPS);
        // Sharing an address groups nothing.
        assert!(!g.same_group(0, 1) && !g.same_group(0, 2));
        // a.com refused while b.com, on a.com's second address, is held: one limiter.
        let joins = g.refused(0, |s| s == 1);
        assert_eq!(joins.len(), 1);
        assert!(g.same_group(0, 1));
        // Evidence is between names sharing an address: b.com shares none with c.com.
        assert!(g.refused(1, |s| s == 2).is_empty());
        // From a.com (sharing 1.1.1.1 with c.com) it is: a refusal while c.com is held.
        assert_eq!(g.refused(0, |s| s == 2 || s == 3).len(), 1);
        assert!(g.same_group(1, 2));
        assert!(!g.same_group(0, 3));
        // A name leaving takes itself off each of its addresses.
        g.leave(0);
        assert!(g.refused(1, |_| true).is_empty());
    }

    #[test]
    fn a_name_the_pool_refusals_keep_falling_on_leaves_the_pool() {
        let mut g = LimiterGroups::default();
        for id in 0..2 {
            g.enter(id, "shop.example", &["1.1.1.1:443".into()], CAPS);
        }
        g.sent(0, 0.0);
        g.sent(1, 0.0);
        assert!(g.pool(0, 1.0).contains(&1));
        assert_eq!(g.pacer(1), Some(0));
        // Two names sending alike: a shared limiter puts four more refusals in a row on one
        // of them once in sixteen (three more: once in eight, not rare enough).
        let send_both = |g: &mut LimiterGroups, n: u32| {
            for _ in 0..n {
                g.sent(0, 2.0);
                g.sent(1, 2.0);
            }
        };
        assert_eq!(g.pool_refused(0), None);
        send_both(&mut g, 10);
        assert_eq!(g.pool_refused(0), None);
        // The other name refused once: the run starts again.
        send_both(&mut g, 10);
        assert_eq!(g.pool_refused(1), None);
        for _ in 0..4 {
            send_both(&mut g, 10);
            assert_eq!(g.pool_refused(0), None);
        }
        send_both(&mut g, 10);
        let leave = g
            .pool_refused(0)
            .expect("five refusals in a row on one of two names");
        assert_eq!(leave.name, 0);
        assert_eq!(leave.pacer, 0);
        assert_eq!(leave.successor, Some(1));
        assert!((leave.share - 0.5).abs() < 0.05, "{leave:?}");
        // It is paced apart from now on; the rest of the pool on the successor's machine.
        assert_eq!(g.pacer(0), None);
        assert_eq!(g.pacer(1), Some(1));
        assert!(g.paced_apart(0, 1));
        assert_eq!(g.pool_members(1), vec![1]);
        assert_eq!(g.pool_caps(1), CAPS);
        // Still one group: holds are shared.
        assert!(g.same_group(0, 1));
        // A name the others did not send beside is no evidence: its run never ends it.
        let mut h = LimiterGroups::default();
        for id in 0..2 {
            h.enter(id, "shop.example", &[], CAPS);
        }
        h.sent(0, 0.0);
        h.sent(1, 0.0);
        h.pool(0, 1.0);
        for _ in 0..10 {
            h.sent(0, 2.0);
            assert_eq!(h.pool_refused(0), None);
        }
    }

    #[test]
    fn names_announcing_other_limits_keep_their_quota_and_their_pace() {
        let mut g = LimiterGroups::default();
        for id in 0..3 {
            g.enter(id, "shop.example", &[], CAPS);
            g.sent(id, 1_000.0);
        }
        // api. and www. announce 100 per window, img. 50: img.'s quota is its own.
        assert!(g.quota(0, 100, 60_000.0).is_empty());
        assert!(g.quota(1, 50, 60_000.0).is_empty());
        assert!(g.quota(2, 100, 60_200.0).is_empty());
        assert!(g.quota_apart(0, 1) && !g.quota_apart(0, 2));
        // The quota of 100 is shared by the two that announce it.
        assert_eq!(g.active_sharers(0, 60_000.0, 2_000.0), 2);
        assert_eq!(g.active_sharers(1, 60_000.0, 2_000.0), 1);
        // A refusal pools the names of one quota; img. keeps its own machine.
        assert_eq!(g.pool(0, 2_000.0), vec![2]);
        assert_eq!(g.pacer(2), Some(0));
        assert_eq!(g.pacer(1), None);
        assert!(g.paced_apart(0, 1));
        assert_eq!(g.pool_members(0).len(), 2);
        // Still one group: a refusal's hold reaches img. too.
        assert!(g.same_group(0, 1));
    }
}
