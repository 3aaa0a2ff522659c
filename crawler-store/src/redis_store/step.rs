//! One round trip of a [`RedisStore`](super::RedisStore): the step script's arguments
//! from what is buffered, and its reply applied to the worker's view of the fleet.

use redis::Value;

use super::reply::{float_at, int, int_at, text};
use super::{Ask, Inner, Leased};
use crate::error::Error;
use crawler_sched::FleetStatus;

/// Arguments of a step that asks for no lease (the lease block's placeholders).
const NO_LEASE: [&str; 9] = ["", "0", "0", "0", "0", "0", "", "0", ""];

impl Inner {
    /// One round trip: send what is buffered, plus a lease or a sync if asked; apply the
    /// answer. Buffers are cleared only after Redis confirmed, so an outage loses nothing.
    pub(super) fn step(&mut self, ask: Ask<'_>) -> Result<Option<Leased>, Error> {
        if let Some(detail) = &self.lost {
            return Err(Error::redis_lost(&self.link.shown, &self.job.name, detail));
        }
        let lease_host = ask.lease.as_ref().map(|l| l.host.to_owned());
        self.fold_deferred(lease_host.as_deref());
        let renew = self.last_renew.elapsed() >= self.timeout / 4 && !self.open_leases.is_empty();
        let mut args = self.key_arg();
        args.push(self.stats.clone().unwrap_or_default().into_bytes());
        args.push(self.idle_ttl.as_millis().to_string().into_bytes());
        args.push(self.job.epoch.clone().into_bytes());
        args.push(self.job.token.clone().into_bytes());
        args.push(self.job.steps.to_string().into_bytes());
        args.push(self.pushes.len().to_string().into_bytes());
        for (host, fp, member) in &self.pushes {
            args.push(host.clone().into_bytes());
            args.push(fp.map(|f| f.to_vec()).unwrap_or_default());
            args.push(member.clone());
        }
        args.push(self.acks.len().to_string().into_bytes());
        args.extend(self.acks.iter().map(|&a| self.job.lease_id(a).into_bytes()));
        if renew {
            args.push(self.open_leases.len().to_string().into_bytes());
            args.extend(
                self.open_leases
                    .iter()
                    .map(|&a| self.job.lease_id(a).into_bytes()),
            );
        } else {
            args.push(b"0".to_vec());
        }
        args.push(self.commits.len().to_string().into_bytes());
        let mut states = Vec::with_capacity(self.commits.len());
        for c in &self.commits {
            let json = serde_json::to_string(&c.state)
                .map_err(|e| self.bad(&format!("cannot encode a politeness state: {e}")))?;
            args.push(c.host.clone().into_bytes());
            args.push(c.expected.to_string().into_bytes());
            args.push(json.clone().into_bytes());
            args.push(c.skip.clone().into_bytes());
            states.push((c.host.clone(), c.expected, json));
        }
        match &ask.lease {
            Some(l) => {
                let drain = self.skipped_here.contains(l.host);
                args.push(l.host.as_bytes().to_vec());
                args.push(if drain { b"1".to_vec() } else { b"0".to_vec() });
                args.push(if l.budget {
                    b"1".to_vec()
                } else {
                    b"0".to_vec()
                });
                args.push(l.expected.to_string().into_bytes());
                args.push(format!("{:.3}", l.claim).into_bytes());
                args.push(format!("{:.3}", l.ahead).into_bytes());
                args.push(l.state.clone().into_bytes());
                args.push(l.concurrency.to_string().into_bytes());
                args.push(self.job.lease_id(l.number).into_bytes());
            }
            None => {
                for a in NO_LEASE {
                    args.push(a.as_bytes().to_vec());
                }
            }
        }
        args.push(if ask.sync {
            b"1".to_vec()
        } else {
            b"0".to_vec()
        });
        args.push(ask.peek.unwrap_or("").as_bytes().to_vec());

        let what = if ask.lease.is_some() {
            "lease a request"
        } else if ask.sync {
            "read the fleet's state"
        } else {
            "write buffered updates"
        };
        let before = self.origin.elapsed().as_secs_f64() * 1_000.0;
        let reply = self.link.step(&args, what)?;
        let after = self.origin.elapsed().as_secs_f64() * 1_000.0;
        if self.link.reconnects != self.reconnects_seen {
            // A new connection may be to a server that restarted and forgot: the shared
            // seen set is the truth, so the local memory of it goes.
            self.reconnects_seen = self.link.reconnects;
            self.seen.clear();
        }
        self.pushes.clear();
        self.acks.clear();
        self.commits_sent = self.commits.drain(..).map(|c| (c.host, c.folded)).collect();
        self.stats = None;
        if renew {
            self.last_renew = std::time::Instant::now();
        }
        self.apply(reply, ask, (before, after), &states)
    }

    pub(super) fn bad(&self, detail: &str) -> Error {
        Error::redis_reply(&self.link.shown, detail)
    }

    fn apply(
        &mut self,
        reply: Value,
        ask: Ask<'_>,
        (before, after): (f64, f64),
        sent_states: &[(String, u64, String)],
    ) -> Result<Option<Leased>, Error> {
        let Value::Array(parts) = reply else {
            return Err(self.bad("the step script did not return an array"));
        };
        if let Some(detail) = self.job.lost(&parts) {
            // Nothing was applied; nothing more will be.
            let e = Error::redis_lost(&self.link.shown, &self.job.name, &detail);
            tracing::error!("{e}");
            self.lost = Some(detail);
            return Err(e);
        }
        let [dups, reclaimed, lease, cas, sync, now, had, steps, peek] =
            <[Value; 9]>::try_from(parts)
                .map_err(|_| self.bad("the step script returned the wrong number of parts"))?;
        if self.job.rolled_back(int(&had), int(&steps)) {
            tracing::warn!(
                redis = %self.link.shown,
                job = %self.job.name,
                "Redis lost some of this worker's confirmed updates (it restarted from an \
                 older snapshot, or failed over to a replica that was behind): forgetting the \
                 local seen cache, so links whose queueing Redis lost are queued again"
            );
            self.seen.clear();
        }
        // The server's clock, read somewhere in the round trip: it narrows the estimate of
        // its offset from ours (see `clock`).
        let server_now = float_at(std::slice::from_ref(&now), 0);
        if server_now > 0.0 {
            self.clock.sample(before, after, server_now);
        }
        self.dups += int(&dups).unsigned_abs();
        let reclaimed = int(&reclaimed).unsigned_abs();
        if reclaimed > 0 {
            tracing::info!(
                reclaimed,
                "leases of a stopped worker returned to their queues"
            );
            self.reclaimed += reclaimed;
        }
        self.committed.clear();
        if let Value::Array(results) = cas {
            for r in results {
                let Value::Array(f) = r else { continue };
                let host = text(f.first());
                let ok = int_at(&f, 1) == 1;
                let version = int_at(&f, 2).unsigned_abs();
                if ok {
                    if let Some((_, _, json)) =
                        sent_states.iter().rev().find(|(h, _, _)| *h == host)
                    {
                        let json = json.clone();
                        self.remember(&host, version, &json);
                    }
                } else {
                    let state = text(f.get(3));
                    self.remember(&host, version, &state);
                }
                if !ok && let Some(pos) = self.commits_sent.iter().position(|(h, _)| *h == host) {
                    let (_, folded) = self.commits_sent.swap_remove(pos);
                    if !folded.is_empty() {
                        // Lost the race: fold them into the fresher state next time.
                        self.deferred
                            .entry(host.clone())
                            .or_default()
                            .extend(folded);
                    }
                }
                self.committed.insert(host, ok);
            }
        }
        if ask.sync
            && let Value::Array(s) = sync
        {
            self.last_sync = Some(std::time::Instant::now());
            let leased = usize::try_from(int_at(&s, 0)).unwrap_or(0);
            for n in self.lens.values_mut() {
                *n = 0;
            }
            let mut queued = 0;
            for chunk in s.get(1..).unwrap_or_default().chunks(3) {
                let host = text(chunk.first());
                let n = usize::try_from(int_at(chunk, 1)).unwrap_or(0);
                if int_at(chunk, 2) == 0 {
                    queued += n;
                }
                self.lens.insert(host, n);
            }
            // Pushes still buffered here are work too.
            for (host, _, _) in &self.pushes {
                *self.lens.entry(host.clone()).or_default() += 1;
            }
            self.fleet = FleetStatus { queued, leased };
        }
        if let (Some(host), Value::Array(p)) = (ask.peek, &peek)
            && !p.is_empty()
        {
            let version = int_at(p, 0).unsigned_abs();
            let state = text(p.get(1));
            self.remember(host, version, &state);
            if int_at(p, 2) == 1 {
                self.skipped_here.insert(host.to_owned());
            }
        }
        let Some(ask) = ask.lease else {
            return Ok(None);
        };
        let host = ask.host;
        let Value::Array(l) = lease else {
            return Err(self.bad("the lease answer is not an array"));
        };
        let code = int_at(&l, 0);
        let left = usize::try_from(int_at(&l, 3)).unwrap_or(0);
        let version = int_at(&l, 4).unsigned_abs();
        let in_flight = int_at(&l, 6).unsigned_abs();
        tracing::debug!(
            worker = self.worker,
            host,
            code,
            left,
            in_flight,
            "lease answer"
        );
        self.lens.insert(host.to_owned(), left);
        if ask.budget {
            if code == 1 {
                self.remember(host, version, &ask.state);
            } else {
                let state = text(l.get(5));
                self.remember(host, version, &state);
            }
        }
        let member = match l.get(2) {
            Some(Value::BulkString(b)) => b.clone(),
            _ => Vec::new(),
        };
        Ok(Some(Leased {
            code,
            // Redis echoes `TOKEN:N`; N is ours.
            id: ask.number,
            member,
        }))
    }

    pub(super) fn sync_if_due(&mut self) -> Result<(), Error> {
        let due = self
            .last_sync
            .is_none_or(|t| t.elapsed() >= self.sync_every);
        if due {
            self.step(Ask {
                lease: None,
                sync: true,
                peek: None,
            })?;
        } else if !self.open_leases.is_empty() && self.last_renew.elapsed() >= self.timeout / 4 {
            self.step(Ask::default())?;
        }
        Ok(())
    }
}
