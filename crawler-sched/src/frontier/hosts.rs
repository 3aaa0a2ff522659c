//! The frontier's per-host slots: made on first use (with any state an earlier run kept),
//! dropped once idle with nothing learned, and the running figures each reports in
//! [`HostStats`].

use std::time::Duration;

use crawler_core::{Feedback, HostStats, Url};
use tokio::time::Instant;

use super::Frontier;
use super::config::host_key;
use super::groups::Membership;
use crate::store::QueueStore;
use crate::throttle::Throttle;

/// How long a host stays idle before its slot may be dropped. Short, because only slots
/// with nothing learned are dropped, and a fresh slot is at least as careful.
const PRUNE_AFTER: Duration = Duration::from_secs(5);

/// Dropped hosts whose figures are kept for the stats (the busiest ones).
pub(super) const RETIRED_KEPT: usize = 1_000;

/// Busiest first, then by name (a stable order for reports).
pub(super) fn sort_busiest(hosts: &mut [HostStats]) {
    hosts.sort_by(|a, b| {
        b.requests
            .cmp(&a.requests)
            .then_with(|| a.host.cmp(&b.host))
    });
}

pub(super) struct Host {
    pub(super) key: String,
    pub(super) in_flight: usize,
    pub(super) throttle: Box<dyn Throttle>,
    /// Whether an entry for this host sits in the ready heap (at most one at a time).
    pub(super) scheduled: bool,
    /// Why the host is skipped for this run, once it is.
    pub(super) skipped: Option<String>,
    pub(super) figures: Figures,
    /// Audit records of the throttle already recorded (see [`Throttle::audit_since`]).
    pub(super) audit_seen: u64,
    /// Its limiter group, with limiter groups on.
    pub(super) limiter: Option<Membership>,
}

/// Running per-host figures for [`HostStats`].
#[derive(Default)]
pub(super) struct Figures {
    pub(super) requests: u64,
    /// Handed out and never sent (see `HostStats::unsent`).
    pub(super) unsent: u64,
    pub(super) status: std::collections::BTreeMap<u16, u64>,
    pub(super) latency_sum: f64,
    pub(super) latency_n: u64,
    /// Latency histogram: bucket i counts latencies in [1.25^(i-1), 1.25^i) ms.
    pub(super) buckets: Vec<u32>,
}

impl Figures {
    pub(super) fn record(&mut self, fb: &Feedback) {
        if let Some(s) = fb.status {
            *self.status.entry(s).or_default() += 1;
        }
        if fb.sent {
            let secs = fb.latency.as_secs_f64();
            self.latency_sum += secs;
            self.latency_n += 1;
            let ms = (secs * 1000.0).max(1.0);
            let i = (ms.ln() / 1.25f64.ln()).ceil().clamp(0.0, 79.0) as usize;
            if self.buckets.len() <= i {
                self.buckets.resize(i + 1, 0);
            }
            if let Some(b) = self.buckets.get_mut(i) {
                *b += 1;
            }
        }
    }

    fn p95(&self) -> f64 {
        let total: u64 = self.buckets.iter().map(|&b| u64::from(b)).sum();
        let mut seen = 0u64;
        for (i, &b) in self.buckets.iter().enumerate() {
            seen += u64::from(b);
            if seen * 100 >= total * 95 && total > 0 {
                return 1.25f64.powi(i as i32) / 1000.0;
            }
        }
        0.0
    }
}

impl<S: QueueStore> Frontier<S> {
    /// The slot for `key`, made on first use. `[[hosts]]` rules are matched against the
    /// host of the URL that opens the slot, not the slot key: with `host_key = "domain"` a
    /// rule for `*.example.com` still finds `a.example.com`. Restored slots have no URL at
    /// hand (`None`): their key stands for the host.
    pub(super) fn host_id(&mut self, key: String, url: Option<&Url>, now: Instant) -> usize {
        if let Some(&id) = self.host_ids.get(&key) {
            return id;
        }
        let url_host = url.map_or_else(|| key.clone(), host_key);
        let mut throttle = (self.config.throttle)(&url_host, now);
        if let Some(state) = self.restored.remove(&key) {
            throttle.restore(&state, now);
        }
        let id = self.hosts.insert(Host {
            key: key.clone(),
            in_flight: 0,
            throttle,
            scheduled: false,
            skipped: None,
            figures: Figures::default(),
            audit_seen: 0,
            limiter: None,
        });
        match url {
            Some(url) => self.enter_group(id, url, now),
            None => {
                if let Ok(url) = Url::parse(&format!("http://{key}/")) {
                    self.enter_group(id, &url, now);
                }
            }
        }
        self.host_ids.insert(key, id);
        id
    }

    /// Hand the audit records slot `id` made since the last call to the recorder, if any.
    pub(super) fn record_audit(&mut self, id: usize) {
        let (Some(r), Some(host)) = (self.recorder.as_mut(), self.hosts.get_mut(id)) else {
            return;
        };
        let (made, new) = host.throttle.audit_since(host.audit_seen);
        host.audit_seen = made;
        r.audit(new);
    }

    /// Drop the slots of hosts idle for [`PRUNE_AFTER`] whose throttle has nothing worth
    /// keeping (see [`Throttle::forgettable`]): a host seen again later gets a fresh slot,
    /// which is as careful as the dropped one. Their figures join [`Frontier::retired`].
    pub(super) fn prune_idle(&mut self, now: Instant) {
        while let Some(&(at, id)) = self.idle.front() {
            if now.saturating_duration_since(at) < PRUNE_AFTER {
                break;
            }
            self.idle.pop_front();
            let Some(host) = self.hosts.get(id) else {
                continue;
            };
            let idle = host.in_flight == 0
                && !host.scheduled
                && host.skipped.is_none()
                && self.store.host_len(&host.key) == 0
                && host.throttle.forgettable(now);
            if !idle {
                continue;
            }
            let host = self.hosts.remove(id);
            self.host_ids.remove(&host.key);
            if let Some(m) = &host.limiter {
                self.leave_group(id, m);
            }
            let stats = self.stats_of(&host);
            self.retired.push(stats);
            if self.retired.len() >= 2 * RETIRED_KEPT {
                sort_busiest(&mut self.retired);
                self.retired.truncate(RETIRED_KEPT);
            }
        }
    }

    pub(super) fn stats_of(&self, h: &Host) -> HostStats {
        let (holds, held) = h.throttle.holds();
        let f = &h.figures;
        HostStats {
            host: h.key.clone(),
            requests: f.requests,
            unsent: f.unsent,
            status: f.status.clone(),
            latency_mean: if f.latency_n > 0 {
                f.latency_sum / f.latency_n as f64
            } else {
                0.0
            },
            latency_p95: f.p95(),
            rate: Some(h.throttle.rate()),
            holds,
            hold_secs: held.as_secs_f64(),
            queued: self.store.host_len(&h.key),
            skipped: h.skipped.clone(),
        }
    }
}
