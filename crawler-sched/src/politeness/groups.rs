//! Limiter groups by evidence: which host names share one server-side limiter, so that a
//! hold placed on one of them reaches the others.
//!
//! - The names of one registrable domain share holds from their first request: one site's
//!   hosts behind one limiter is the common case, and sharing costs little when wrong.
//! - Names of different registrable domains are never grouped because they resolve to one
//!   address (a CDN or shared hosting serves thousands of unrelated sites from one). Their
//!   groups join only on evidence, between names on one address: one is refused while the
//!   other is held, or their RateLimit headers announce the same quota turning at the same
//!   moment.
//! - A quota announced in RateLimit headers is shared among the names of the group that
//!   sent within its window, never by idle ones.
//! - Once a refusal reaches a group of two names or more (a 429 or 503, or a hold spread to
//!   the group), the group is *pooled*: one name's machine (its pacer) paces every name of
//!   it, with the sums of the live names' in-flight caps and `max_rate`s; each name still
//!   keeps its own cap and its own `max_rate` gap. N machines climbing and probing one
//!   limiter on their own multiply its refusals; one machine learns it once.
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

/// One live name.
#[derive(Debug, Clone)]
struct Name {
    domain: String,
    address: Option<String>,
    /// The last quota its RateLimit headers announced: the limit and when it turns.
    quota: Option<(u64, Millis)>,
    /// When it last sent.
    sent_at: Option<Millis>,
    /// The user's limits for it: requests in flight and `max_rate` (requests/s).
    caps: (u32, f64),
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
    /// Address → live ids.
    at_address: HashMap<String, Vec<usize>>,
    /// Root domain → the name whose machine paces the group, once a refusal reached it.
    pooled: HashMap<String, usize>,
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

    /// A name `id` of registrable domain `domain` comes in, resolving to `address` (`None`
    /// when unknown or not looked up: it then joins no other domain's group), with the
    /// user's limits for it: `caps` is (requests in flight, `max_rate` in requests/s).
    pub fn enter(&mut self, id: usize, domain: &str, address: Option<&str>, caps: (u32, f64)) {
        self.leave(id);
        let root = self.root(domain).to_owned();
        self.members.entry(root).or_default().push(id);
        if let Some(a) = address {
            self.at_address.entry(a.to_owned()).or_default().push(id);
        }
        self.names.insert(
            id,
            Name {
                domain: domain.to_owned(),
                address: address.map(str::to_owned),
                quota: None,
                sent_at: None,
                caps,
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
        }
        if let Some(a) = &name.address {
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

    /// `id` sent a request at `now`.
    pub fn sent(&mut self, id: usize, now: Millis) {
        if let Some(n) = self.names.get_mut(&id) {
            n.sent_at = Some(n.sent_at.map_or(now, |s| s.max(now)));
        }
    }

    /// How many names of `id`'s group sent within [`ACTIVE_SHARER_MS`] before `now`, or
    /// within `window_ms` (the quota's window) when longer: a quota is theirs together.
    /// `id` always counts.
    pub fn active_sharers(&self, id: usize, window_ms: f64, now: Millis) -> u32 {
        let window_ms = window_ms.max(ACTIVE_SHARER_MS);
        let others = self
            .group(id)
            .iter()
            .filter(|&&s| s != id)
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
        let members = self.group(id);
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
    /// the pacer); `None` while each name paces itself.
    pub fn pacer(&self, id: usize) -> Option<usize> {
        self.root_of(id).and_then(|r| self.pooled.get(r)).copied()
    }

    /// The pooled machine's limits for `id`'s group: the sums over its live names of their
    /// in-flight caps and `max_rate`s.
    pub fn pool_caps(&self, id: usize) -> (u32, f64) {
        self.group(id)
            .iter()
            .filter_map(|s| self.names.get(s))
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

    /// Live names on `id`'s address outside its group.
    fn neighbours(&self, id: usize) -> Vec<usize> {
        let Some(address) = self.names.get(&id).and_then(|n| n.address.as_deref()) else {
            return Vec::new();
        };
        self.at_address
            .get(address)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .copied()
            .filter(|&s| s != id && !self.same_group(s, id))
            .collect()
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
        g.enter(0, "example.com", Some("10.0.0.1:80"), CAPS);
        g.enter(1, "example.com", Some("10.0.0.2:80"), CAPS);
        g.enter(2, "other.org", Some("10.0.0.1:80"), CAPS);
        assert!(g.same_group(0, 1));
        assert!(!g.same_group(0, 2));
        assert_eq!(g.group(2), &[2]);
    }

    #[test]
    fn a_refusal_while_a_neighbour_is_held_joins_their_groups_for_good() {
        let mut g = LimiterGroups::default();
        g.enter(0, "a.com", Some("1.1.1.1:80"), CAPS);
        g.enter(1, "b.com", Some("1.1.1.1:80"), CAPS);
        g.enter(2, "c.com", Some("2.2.2.2:80"), CAPS);
        // Nobody held: no evidence.
        assert!(g.refused(0, |_| false).is_empty());
        // c.com is held but on another address: no evidence either.
        assert!(g.refused(0, |s| s == 2).is_empty());
        let joins = g.refused(0, |s| s == 1);
        assert_eq!(joins.len(), 1);
        assert!(g.same_group(0, 1));
        // The join outlives the names: b.com seen again is in a.com's group.
        g.leave(1);
        g.enter(7, "b.com", Some("1.1.1.1:80"), CAPS);
        assert!(g.same_group(0, 7));
    }

    #[test]
    fn the_same_quota_turning_at_the_same_moment_joins_and_a_different_one_does_not() {
        let mut g = LimiterGroups::default();
        g.enter(0, "a.com", Some("1.1.1.1:443"), CAPS);
        g.enter(1, "b.com", Some("1.1.1.1:443"), CAPS);
        g.enter(2, "c.com", Some("1.1.1.1:443"), CAPS);
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
            g.enter(id, "shop.example", None, CAPS);
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
}
