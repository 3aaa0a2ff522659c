//! Limiter groups: the host names behind one server-side limiter share its holds.
//!
//! A server with one per-client limiter counts every host name it serves together: when it
//! tells one name to wait (Retry-After, a refusal, a backoff), a request to another name
//! lands inside that wait. So each slot belongs to a group, and a hold placed on one slot
//! reaches every live slot of its group; pacing stays per slot.
//!
//! A slot starts in the group of the address its host name resolves to (address and port,
//! as [`IpKeys::key`](crate::IpKeys::key) writes them; see
//! [`FrontierConfig::group_key`](super::FrontierConfig::group_key)). A CDN may serve the
//! names of one site from different addresses with one limiter, which no lookup reveals:
//! a refusal on one name while another name of its registrable domain is held is that
//! limiter speaking, so the two groups are joined for the rest of the crawl (logged, and
//! visible in the politeness record as `limiter group` holds).
//!
//! Joins are kept by group key, not by slot, so they outlive the slots: a name pruned and
//! seen again lands in its joined group. The member lists hold live slots only, so a slab
//! id reused after a prune never inherits its predecessor's group.

use std::collections::HashMap;

use crawler_core::{Feedback, Url};
use tokio::time::Instant;

use super::Frontier;
use super::config::domain_key;
use crate::store::QueueStore;

/// Where a slot stands in the limiter groups.
pub(super) struct Membership {
    /// The group its host name started in; a join may have merged it into another.
    group: String,
    /// Its registrable domain (joins happen between names of one domain).
    domain: String,
}

/// Which group each group key was joined into, and the live slots of each group and of each
/// registrable domain.
#[derive(Default)]
pub(super) struct Groups {
    /// A joined group key → the key it was joined into; a group's root has no entry. Only
    /// refusals add entries, one per join.
    joined: HashMap<String, String>,
    /// Root group key → live slot ids.
    members: HashMap<String, Vec<usize>>,
    /// Registrable domain → live slot ids.
    domains: HashMap<String, Vec<usize>>,
}

impl Groups {
    /// The root of the group `key` belongs to.
    fn root<'a>(&'a self, mut key: &'a str) -> &'a str {
        while let Some(up) = self.joined.get(key) {
            key = up;
        }
        key
    }

    fn add(&mut self, id: usize, m: &Membership) {
        let root = self.root(&m.group).to_owned();
        self.members.entry(root).or_default().push(id);
        self.domains.entry(m.domain.clone()).or_default().push(id);
    }

    fn remove(&mut self, id: usize, m: &Membership) {
        let root = self.root(&m.group).to_owned();
        remove_id(&mut self.members, &root, id);
        remove_id(&mut self.domains, &m.domain, id);
    }

    /// The live slots of the group `key` belongs to.
    fn members_of(&self, key: &str) -> &[usize] {
        self.members.get(self.root(key)).map_or(&[], Vec::as_slice)
    }

    /// Merge the groups of `a` and `b`; `false` when they are one already.
    fn join(&mut self, a: &str, b: &str) -> bool {
        let (ra, rb) = (self.root(a).to_owned(), self.root(b).to_owned());
        if ra == rb {
            return false;
        }
        let moved = self.members.remove(&rb).unwrap_or_default();
        self.members.entry(ra.clone()).or_default().extend(moved);
        self.joined.insert(rb, ra);
        true
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
        let Some(group) = self.config.group_key(url) else {
            return;
        };
        let m = Membership {
            group,
            domain: domain_key(url),
        };
        self.groups.add(id, &m);
        let group = m.group.clone();
        if let Some(h) = self.hosts.get_mut(id) {
            h.limiter = Some(m);
        }
        self.count_sharers(&group);
        self.spread_hold(&group, now, false);
    }

    /// Take a slot being dropped out of its groups.
    pub(super) fn leave_group(&mut self, id: usize, m: &Membership) {
        self.groups.remove(id, m);
        self.count_sharers(&m.group);
    }

    /// Tell every live slot of `group` how many names share its limiter.
    fn count_sharers(&mut self, group: &str) {
        let ids = self.groups.members_of(group).to_vec();
        for &i in &ids {
            if let Some(h) = self.hosts.get_mut(i) {
                h.throttle.set_sharers(ids.len());
            }
        }
    }

    /// After slot `id` learned from `feedback`: a hold it placed or extended (its end moved
    /// later than `before`) reaches the rest of its group, and a refusal while a name of its
    /// registrable domain is held joins their groups first.
    pub(super) fn share_holds(
        &mut self,
        id: usize,
        before: Option<Instant>,
        feedback: &Feedback,
        now: Instant,
    ) {
        let Some(host) = self.hosts.get(id) else {
            return;
        };
        let Some(group) = host.limiter.as_ref().map(|m| m.group.clone()) else {
            return;
        };
        let after = host.throttle.held_until();
        let moved = after > before && after.is_some_and(|a| a > now);
        let refusal = matches!(feedback.status, Some(429 | 503));
        let joined = refusal && self.join_held_siblings(id, now);
        if joined {
            self.count_sharers(&group);
        }
        if moved || joined {
            self.spread_hold(&group, now, refusal);
        }
    }

    /// Join the groups of the held slots of `id`'s registrable domain to `id`'s group, which
    /// was just refused. Whether any group joined.
    fn join_held_siblings(&mut self, id: usize, now: Instant) -> bool {
        let Some((key, m)) = self
            .hosts
            .get(id)
            .and_then(|h| Some((h.key.clone(), h.limiter.as_ref()?)))
        else {
            return false;
        };
        let root = self.groups.root(&m.group);
        let held: Vec<(String, String)> = self
            .groups
            .domains
            .get(&m.domain)
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .filter(|&&s| s != id)
            .filter_map(|&s| {
                let h = self.hosts.get(s)?;
                let sm = h.limiter.as_ref()?;
                let held = h.throttle.held_until().is_some_and(|u| u > now);
                (held && self.groups.root(&sm.group) != root)
                    .then(|| (h.key.clone(), sm.group.clone()))
            })
            .collect();
        let group = m.group.clone();
        let mut joined = false;
        for (sibling, theirs) in held {
            if self.groups.join(&group, &theirs) {
                tracing::info!(
                    host = %key, sibling = %sibling,
                    "limiter groups joined: {key} was refused while {sibling} is held; \
                     they share holds for the rest of the crawl"
                );
                joined = true;
            }
        }
        joined
    }

    /// Hold every live slot of `group` until the latest hold among them ends, if it has
    /// not ended; `refusal` says a 429 or 503 placed it.
    fn spread_hold(&mut self, group: &str, now: Instant, refusal: bool) {
        let ids = self.groups.members_of(group).to_vec();
        if ids.len() < 2 {
            return;
        }
        let until = ids
            .iter()
            .filter_map(|&i| self.hosts.get(i)?.throttle.held_until())
            .max();
        let Some(until) = until.filter(|&u| u > now) else {
            return;
        };
        for i in ids {
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
