//! crawler-core's [`Scheduler`] for [`Frontier`]: admission, handing out requests as their
//! hosts allow, outcomes, retries, checkpoints and the stats.

use std::cmp::Reverse;

use crawler_core::{
    Admission, Feedback, FilterReason, HostStats, Lease, Next, Request, SUBREQUEST_META, Scheduler,
};
use tokio::time::Instant;

use super::hosts::sort_busiest;
use super::{DelayedRequest, Frontier};
use crate::error::Error;
use crate::fingerprint::fingerprint;
use crate::store::QueueStore;
use crate::throttle::Verdict;

impl<S: QueueStore> Scheduler for Frontier<S> {
    fn enqueue(&mut self, request: Request, now: Instant) -> Admission {
        if let Some(reason) = self.filter(&request) {
            return Admission::Filtered(reason);
        }
        if !request.dont_filter {
            match self.store.insert_seen(fingerprint(&request)) {
                Ok(true) => {}
                Ok(false) => return Admission::Filtered(FilterReason::Duplicate),
                Err(e) => self.failed(e),
            }
        }
        self.push(request, now);
        Admission::Queued
    }

    fn next(&mut self, now: Instant) -> Next {
        self.regroup_unresolved(now);
        self.release_delayed(now);
        self.prune_idle(now);
        let retry_at = self.delayed.peek().map(|Reverse((at, _, _))| *at);
        while let Some(&Reverse((at, _, id))) = self.ready.peek() {
            if at > now {
                return Next::NotBefore(retry_at.map_or(at, |r| r.min(at)));
            }
            self.ready.pop();
            let Some(host) = self.hosts.get_mut(id) else {
                continue;
            };
            host.scheduled = false;
            if !self.has_room(id) {
                continue;
            }
            // A hold may have arrived since this entry was pushed (or, in a pooled limiter
            // group, another name took the group's slot).
            if self.ready_at_of(id) > now {
                self.reschedule(id, now);
                continue;
            }
            let pacer = self.pacer_of(id);
            let Some(host) = self.hosts.get_mut(id) else {
                continue;
            };
            let (lease, mut request) = match self.store.lease(&host.key) {
                Ok(Some(leased)) => leased,
                Ok(None) => continue,
                Err(e) => {
                    self.failed(e);
                    continue;
                }
            };
            // A first contact with nothing else queued for the host (a broad crawl's one
            // page per host) asks the server to close the connection after answering: kept
            // alive in the pool, one idle connection per host touched would cost a file
            // descriptor and tens of KiB each until it expires. A host with more work, or
            // seen before, keeps its connection (reused, and kinder to the server).
            if host.figures.requests == 0
                && host.in_flight == 0
                && self.store.host_len(&host.key) == 0
                && request.header_value("connection").is_none()
            {
                request
                    .headers
                    .push(("Connection".to_owned(), "close".to_owned()));
            }
            host.in_flight += 1;
            host.figures.requests += 1;
            if let Some(r) = self.recorder.as_mut() {
                let (retry, sub) = (
                    request.retries > 0,
                    request.meta.contains_key(SUBREQUEST_META),
                );
                r.sent(&host.key, retry, sub, now);
                self.handed_out.insert(lease, (now, retry, sub));
            }
            if pacer == id {
                host.throttle.on_send(now);
            } else if let Some(p) = self.hosts.get_mut(pacer) {
                // A pooled limiter group: the slot is the group's, booked on its pacer.
                p.throttle.on_send(now);
                self.groups.booked.insert(lease, pacer);
            }
            self.leases.insert(lease, id);
            self.group_sent(id, now);
            self.reschedule(id, now);
            return Next::Ready(Lease(lease), request);
        }
        match retry_at {
            Some(at) => Next::NotBefore(at),
            None => Next::Empty,
        }
    }

    fn complete(&mut self, lease: Lease, feedback: &Feedback, now: Instant) {
        // Handed out but never on the wire (refused by robots.txt or the address policy, a
        // sub-request its page stopped waiting for): not one of the host's requests.
        let handed_out = self.handed_out.remove(&lease.0);
        if !feedback.sent
            && let Some(&id) = self.leases.get(&lease.0)
            && let Some(host) = self.hosts.get_mut(id)
        {
            host.figures.requests = host.figures.requests.saturating_sub(1);
            host.figures.unsent += 1;
            // The record counts only what reached the wire, too.
            if let (Some(r), Some((at, retry, sub))) = (self.recorder.as_mut(), handed_out) {
                r.refused_before_wire(&host.key, retry, sub, at, now);
            }
        }
        self.settle(lease, feedback, now);
    }

    fn queued(&self) -> usize {
        self.store.queued() + self.delayed.len()
    }

    fn acknowledge(&mut self, lease: Lease) {
        if let Err(e) = self.store.ack(lease.0) {
            self.failed(e);
        }
    }

    fn host_unwell(&self, url: &url::Url) -> bool {
        // In a pooled limiter group the group's machine learns every name's failures.
        self.host_ids
            .get(&self.config.key(url))
            .and_then(|&id| self.hosts.get(self.pacer_of(id)))
            .is_some_and(|h| h.throttle.unwell())
    }

    fn retry(&mut self, lease: Lease, request: Request, not_before: Instant) {
        let skipped = self
            .host_ids
            .get(&self.config.key(&request.url))
            .and_then(|&id| self.hosts.get(id))
            .and_then(|h| h.skipped.clone());
        if let Some(why) = skipped {
            self.skipped.push((request, why));
            self.acknowledge(lease);
            return;
        }
        self.seq += 1;
        // The old lease stays open while the retry waits in memory: a crash in between
        // returns the request to its queue instead of losing it.
        self.delayed.push(Reverse((
            not_before,
            self.seq,
            DelayedRequest(request, lease),
        )));
    }

    fn give_back(&mut self, lease: Lease, request: Request, now: Instant) {
        self.handed_out.remove(&lease.0);
        // Never sent: the hand-out counted it among the host's requests and in the record.
        if let Some(&id) = self.leases.get(&lease.0)
            && let Some(host) = self.hosts.get_mut(id)
        {
            host.figures.requests = host.figures.requests.saturating_sub(1);
            if let Some(r) = self.recorder.as_mut() {
                let sub = request.meta.contains_key(SUBREQUEST_META);
                r.unsent(&host.key, request.retries > 0, sub, now);
            }
        }
        self.settle(lease, &Feedback::default(), now);
        self.retry(lease, request, now);
    }

    fn checkpoint(&mut self, stats: &crawler_core::Stats) {
        let now = Instant::now();
        // Only for a store that keeps them, and only hosts with something to keep: a broad
        // crawl has many hosts a fresh slot would treat the same (serialising them all every
        // second would cost more memory and time than the crawl itself).
        let states: Vec<(String, serde_json::Value)> = if self.store.keeps_host_states() {
            self.hosts
                .iter()
                .filter(|(_, h)| !h.throttle.forgettable(now))
                .map(|(_, h)| (h.key.clone(), h.throttle.save(now)))
                .filter(|(_, v)| !v.is_null())
                .collect()
        } else {
            Vec::new()
        };
        // Host states first: the checkpoint's flush then makes both durable together.
        let saved = self
            .store
            .save_host_states(&states)
            .and_then(|()| {
                serde_json::to_value(stats)
                    .map_err(|e| Error::new("cannot serialise the stats", Some(Box::new(e))))
            })
            .and_then(|v| self.store.checkpoint(&v));
        if let Err(e) = saved {
            self.failed(e);
        }
        if let Some(r) = self.recorder.as_mut() {
            r.flush(now);
        }
    }

    fn restored_stats(&mut self) -> Option<crawler_core::Stats> {
        let saved = self.store.saved_stats()?;
        match serde_json::from_value(saved) {
            Ok(stats) => Some(stats),
            Err(e) => {
                tracing::warn!("saved stats are unreadable, starting the counters afresh: {e}");
                None
            }
        }
    }

    fn take_skipped(&mut self) -> Vec<(Request, String)> {
        std::mem::take(&mut self.skipped)
    }

    fn host_stats(&self) -> Vec<HostStats> {
        let mut out: Vec<HostStats> = self
            .hosts
            .iter()
            .map(|(_, h)| self.stats_of(h))
            .chain(self.retired.iter().cloned())
            .collect();
        sort_busiest(&mut out);
        out
    }

    fn take_error(&mut self) -> Option<crawler_core::Error> {
        self.error.take().map(|e| {
            crawler_core::Error::new(
                crawler_core::ErrorKind::Storage,
                "the frontier store failed",
            )
            .with_source(e)
        })
    }
}

impl<S: QueueStore> Frontier<S> {
    /// A lease ends with `feedback`: the host's figures, its slot, its limiter group.
    fn settle(&mut self, lease: Lease, feedback: &Feedback, now: Instant) {
        let Some(id) = self.leases.remove(&lease.0) else {
            return;
        };
        let mut verdict = Verdict::Continue;
        let mut held_before = None;
        // The throttle the send was booked on: the slot's own, or its pooled group's pacer.
        let q = self
            .groups
            .booked
            .remove(&lease.0)
            .filter(|&q| self.hosts.contains(q))
            .unwrap_or(id);
        self.count_sharers(q, feedback, now);
        if let Some(host) = self.hosts.get_mut(id) {
            host.in_flight = host.in_flight.saturating_sub(1);
            host.figures.record(feedback);
            if let Some(r) = self.recorder.as_mut() {
                r.outcome(&host.key, feedback, now);
            }
        }
        if let Some(host) = self.hosts.get_mut(q) {
            held_before = host.throttle.held_until();
            verdict = host.throttle.on_feedback(feedback, now);
            self.record_audit(q);
        }
        // Other host names behind the same limiter wait as long as this one does.
        self.share_holds(id, q, held_before, feedback, now);
        if let Verdict::Skip(why) = verdict {
            // A pooled group's machine gave up on the group's limiter: all its names.
            for s in self.pooled_with(id) {
                self.skip_host(s, why.clone());
            }
        }
        // The feedback may have moved the host's ready time (in a pooled group, every
        // name's); a heap entry already pushed is re-checked when it comes up in next().
        for s in self.pooled_with(id) {
            self.reschedule(s, now);
        }
        if let Some(host) = self.hosts.get(id)
            && host.in_flight == 0
            && !host.scheduled
            && self.idle.len() < self.hosts.len().saturating_mul(2).max(64)
        {
            self.idle.push_back((now, id));
        }
    }
}
