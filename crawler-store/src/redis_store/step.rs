//! One step of a [`RedisStore`](super::RedisStore): the step script's sections (one per
//! shard the step concerns) from what is buffered, sent as one call on a plain Redis or
//! one call per shard at once on a cluster (one round trip either way), and the replies
//! applied to the worker's view of the fleet.

use std::collections::BTreeMap;

use redis::Value;

use super::link::{Call, Purpose};
use super::reply::{float_at, int, int_at, text, wire_len};
use super::{Ask, Inner, Leased};
use crate::error::Error;
use crawler_sched::FleetStatus;
use crawler_sched::politeness::HostMachine;

/// Arguments of a section that asks for no lease (the lease block's placeholders).
const NO_LEASE: [&str; 11] = ["", "0", "0", "0", "0", "1", "", "0", "", "", ""];

/// A learning commit as sent: host, expected version, state JSON, pacing merge (see
/// `state::merge_arg`).
type SentState = (String, u64, String, String);

/// What one section (one shard) of a step carries, as indexes into the buffers.
#[derive(Default)]
struct Section {
    pushes: Vec<usize>,
    acks: Vec<usize>,
    renews: Vec<u64>,
    commits: Vec<usize>,
    ops: Vec<usize>,
    lease: bool,
    sync: bool,
    peek: bool,
}

/// The parts of the replies that concern the step as a whole.
#[derive(Default)]
struct Merged {
    dups: i64,
    reclaimed: i64,
    lease: Option<Value>,
    peek: Option<Value>,
    /// Shards that lost some of this worker's steps.
    rolled_back: Vec<usize>,
    /// The pushes of those steps, to send again.
    replay: Vec<super::Push>,
    /// Shards that lost steps older than the push log.
    beyond: Vec<(usize, super::replay::Beyond)>,
    /// Per shard read: (shard, leased, gen, hosts as `host, len, skipped` triples).
    sync: Vec<(usize, i64, i64, Vec<Value>)>,
}

impl Inner {
    /// One round trip: send what is buffered, plus a lease, a read of the fleet's state or
    /// of one host's state if asked; apply the answer. Buffers are cleared only after Redis
    /// confirmed, so an outage loses nothing.
    pub(super) fn step(&mut self, ask: Ask<'_>) -> Result<Option<Leased>, Error> {
        if let Some(detail) = &self.lost {
            return Err(Error::redis_lost(&self.link.shown, &self.job.name, detail));
        }
        self.fold_deferred(false);
        let renew = self.last_renew.elapsed() >= self.timeout / 4 && !self.open_leases.is_empty();

        let mut sections: BTreeMap<usize, Section> = BTreeMap::new();
        for (i, (host, _, _)) in self.pushes.iter().enumerate() {
            let shard = self.layout.shard_of(host);
            sections.entry(shard).or_default().pushes.push(i);
        }
        // On a cluster, pushes to other shards and an acknowledgement would land in no
        // set order: an acknowledgement goes with them only if they are all in its own
        // shard (applied before it, in the same script), else in the next step.
        let push_shards: Vec<usize> = sections.keys().copied().collect();
        for (i, a) in self.acks.iter().enumerate() {
            let alone = push_shards.iter().all(|&s| s == a.shard);
            if a.ready || alone || !self.link.cluster {
                sections.entry(a.shard).or_default().acks.push(i);
            }
        }
        if renew {
            for (&lease, &shard) in &self.open_leases {
                sections.entry(shard).or_default().renews.push(lease);
            }
        }
        for (i, c) in self.commits.iter().enumerate() {
            let shard = self.layout.shard_of(&c.host);
            sections.entry(shard).or_default().commits.push(i);
        }
        for (i, op) in self.ops.iter().enumerate() {
            let shard = self.layout.shard_of(&op.host);
            sections.entry(shard).or_default().ops.push(i);
        }
        if let Some(l) = &ask.lease {
            sections
                .entry(self.layout.shard_of(l.host))
                .or_default()
                .lease = true;
        }
        if let Some(h) = ask.peek {
            sections.entry(self.layout.shard_of(h)).or_default().peek = true;
        }
        if ask.sync {
            for shard in 0..self.layout.shards.len() {
                sections.entry(shard).or_default().sync = true;
            }
        }

        let mut states: Vec<SentState> = Vec::with_capacity(self.commits.len());
        for c in &self.commits {
            let json = serde_json::to_string(&c.state)
                .map_err(|e| self.bad(&format!("cannot encode a politeness state: {e}")))?;
            let merge = match self.pacing_params(&c.host) {
                Some(params) => {
                    let m = HostMachine::with_state(params.clone(), c.state.clone());
                    super::state::merge_arg(&m, self.heard(&c.host).as_ref())
                }
                None => String::new(),
            };
            states.push((c.host.clone(), c.expected, json, merge));
        }
        let order: Vec<usize> = sections.keys().copied().collect();
        let bodies: Vec<Vec<Vec<u8>>> = sections
            .iter()
            .map(|(&shard, sec)| self.section_args(shard, sec, &ask, &states))
            .collect();
        let calls: Vec<(Vec<usize>, Call)> = if self.link.cluster {
            // One call per shard, each routed to the master of that shard's slot.
            order
                .iter()
                .zip(bodies)
                .map(|(&shard, body)| (vec![shard], self.call(&[shard], body)))
                .collect()
        } else if order.is_empty() {
            Vec::new()
        } else {
            // A plain Redis holds every shard: one call, one atomic script.
            let body = bodies.into_iter().flatten().collect();
            vec![(order.clone(), self.call(&order, body))]
        };

        let (what, purpose) = if ask.lease.is_some() {
            ("lease a request", Purpose::Lease)
        } else if ask.peek.is_some() {
            // With the fleet's state too, when it was due: counted as the host's read.
            ("read a host's state", Purpose::HostRead)
        } else if ask.sync {
            ("read the fleet's state", Purpose::FleetRead)
        } else {
            ("write buffered updates", Purpose::Write)
        };
        // The stats go in the same round trip, as a command of their own (they live in the
        // job's global slot).
        let stats = self.stats.as_deref().map(|s| self.save_stats(s));
        let sent_stats = stats.is_some();
        let before = self.origin.elapsed().as_secs_f64() * 1_000.0;
        let replies = if !calls.is_empty() {
            let only: Vec<Call> = calls.iter().map(|(_, c)| c.clone()).collect();
            self.link.scripts(&only, stats.as_ref(), what, purpose)?
        } else {
            if let Some(cmd) = &stats {
                self.link.query::<Value>(cmd, "save the stats")?;
            }
            Vec::new()
        };
        let after = self.origin.elapsed().as_secs_f64() * 1_000.0;
        if self.link.reconnects != self.reconnects_seen {
            // A new connection may be to a server that restarted and forgot: the shared
            // seen set is the truth, so the local memory of it goes.
            self.reconnects_seen = self.link.reconnects;
            self.seen.clear();
        }
        if sent_stats {
            self.stats = None;
        }
        // Checked before anything buffered is dropped: a shard that lost the job applied
        // nothing of its section.
        for ((shards, _), reply) in calls.iter().zip(&replies) {
            if let Value::Array(parts) = reply
                && let Some((section, detail)) = self.job.lost(parts)
            {
                let shard = shards.get(section).copied().unwrap_or(0);
                let detail = format!(
                    "{detail}; noticed in shard {shard} of {} ({})",
                    self.layout.shards.len(),
                    self.layout.shards.get(shard).map_or("", String::as_str)
                );
                let e = Error::redis_lost(&self.link.shown, &self.job.name, &detail);
                tracing::error!("{e}");
                self.lost = Some(detail);
                return Err(e);
            }
        }

        // Everything sent is confirmed: clear what was sent.
        let sent_acks: Vec<usize> = sections.values().flat_map(|s| s.acks.clone()).collect();
        let mut kept = Vec::new();
        for (i, a) in std::mem::take(&mut self.acks).into_iter().enumerate() {
            if !sent_acks.contains(&i) {
                // The pushes before it went in this step.
                kept.push(super::Ack { ready: true, ..a });
            }
        }
        self.acks = kept;
        let mut sent_pushes: BTreeMap<usize, Vec<super::Push>> = BTreeMap::new();
        for push in std::mem::take(&mut self.pushes) {
            let shard = self.layout.shard_of(&push.0);
            sent_pushes.entry(shard).or_default().push(push);
        }
        self.commits_sent = self.commits.drain(..).map(|c| (c.host, c.folded)).collect();
        let sent_ops: Vec<usize> = sections.values().flat_map(|s| s.ops.clone()).collect();
        let mut i = 0;
        self.ops.retain(|_| {
            i += 1;
            !sent_ops.contains(&(i - 1))
        });
        self.op_slots.clear();
        if renew {
            self.last_renew = std::time::Instant::now();
        }

        let mut merged = Merged::default();
        self.committed.clear();
        for ((shards, _), reply) in calls.iter().zip(replies) {
            self.apply_call(
                shards,
                reply,
                (before, after),
                &states,
                &mut sent_pushes,
                &mut merged,
            )?;
        }
        if !merged.beyond.is_empty() && self.link.cluster {
            // A page whose links that shard lost may be acknowledged in another: nothing
            // would queue them again. Stop, saying so, rather than end a partial crawl.
            let detail = merged
                .beyond
                .iter()
                .map(|(shard, b)| {
                    format!(
                        "shard {shard} ({}) lost {} of this worker's confirmed steps (a \
                         failover to a replica that was behind), {} of them older than the \
                         pushes this worker keeps to queue such losses again, so links it \
                         queued there may be gone",
                        self.layout.shards.get(*shard).map_or("", String::as_str),
                        b.steps,
                        b.steps - b.kept as i64
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            let e = Error::redis_lost(&self.link.shown, &self.job.name, &detail);
            tracing::error!("{e}");
            self.lost = Some(detail);
            return Err(e);
        }
        if !merged.replay.is_empty() {
            tracing::warn!(
                redis = %self.link.shown,
                job = %self.job.name,
                links = merged.replay.len(),
                "queueing again the links a Redis rollback lost"
            );
            self.pushes.append(&mut merged.replay);
        }
        if !merged.rolled_back.is_empty() {
            self.job.rollbacks += 1;
            tracing::warn!(
                redis = %self.link.shown,
                job = %self.job.name,
                shards = ?merged.rolled_back,
                "Redis lost some of this worker's confirmed updates (it restarted from an \
                 older snapshot, or failed over to a replica that was behind): forgetting \
                 the local seen cache, so links whose queueing Redis lost are queued again"
            );
            self.seen.clear();
        }
        self.finish(ask, merged)
    }

    /// One call: the first section's prefix routes it; the sections follow.
    fn call(&self, shards: &[usize], body: Vec<Vec<u8>>) -> Call {
        let prefix = |s: usize| self.layout.shards.get(s).cloned().unwrap_or_default();
        let mut args = vec![
            self.worker.to_string().into_bytes(),
            self.timeout.as_millis().to_string().into_bytes(),
            self.idle_ttl.as_millis().to_string().into_bytes(),
            self.job.epoch.clone().into_bytes(),
            self.job.token.clone().into_bytes(),
            shards.len().to_string().into_bytes(),
        ];
        args.extend(shards.iter().map(|&s| prefix(s).into_bytes()));
        args.extend(body);
        Call {
            keys: vec![prefix(shards.first().copied().unwrap_or(0)).into_bytes()],
            args,
        }
    }

    /// The lease block of a section's arguments (see `lua`).
    fn lease_args(&self, l: &super::LeaseAsk<'_>) -> Vec<Vec<u8>> {
        let drain = self.skipped_here.contains(l.host);
        let flag = |b: bool| if b { b"1".to_vec() } else { b"0".to_vec() };
        vec![
            l.host.as_bytes().to_vec(),
            flag(drain),
            flag(l.budget),
            l.expected.to_string().into_bytes(),
            format!("{:.3},{:.3}", l.ahead, l.look).into_bytes(),
            format!("{:.6}", l.factor).into_bytes(),
            l.init.clone().into_bytes(),
            l.concurrency.to_string().into_bytes(),
            self.job.lease_id(l.number).into_bytes(),
            l.extra
                .map(|n| self.job.lease_id(n).into_bytes())
                .unwrap_or_default(),
            l.pool.clone().into_bytes(),
        ]
    }

    fn section_args(
        &self,
        shard: usize,
        sec: &Section,
        ask: &Ask<'_>,
        states: &[SentState],
    ) -> Vec<Vec<u8>> {
        let n = |k: usize| k.to_string().into_bytes();
        let mut args = vec![
            self.job
                .steps
                .get(shard)
                .copied()
                .unwrap_or(0)
                .to_string()
                .into_bytes(),
        ];
        args.push(n(sec.pushes.len()));
        for &i in &sec.pushes {
            let (host, fp, member) = &self.pushes[i];
            args.push(host.clone().into_bytes());
            args.push(fp.map(|f| f.to_vec()).unwrap_or_default());
            args.push(member.clone());
        }
        args.push(n(sec.acks.len()));
        args.extend(
            sec.acks
                .iter()
                .map(|&i| self.job.lease_id(self.acks[i].lease).into_bytes()),
        );
        args.push(n(sec.renews.len()));
        args.extend(
            sec.renews
                .iter()
                .map(|&l| self.job.lease_id(l).into_bytes()),
        );
        args.push(n(sec.commits.len()));
        for &i in &sec.commits {
            let c = &self.commits[i];
            args.push(c.host.clone().into_bytes());
            args.push(c.expected.to_string().into_bytes());
            args.push(states[i].2.clone().into_bytes());
            args.push(c.skip.clone().into_bytes());
            args.push(states[i].3.clone().into_bytes());
        }
        args.push(n(sec.ops.len()));
        for &i in &sec.ops {
            let op = &self.ops[i];
            args.push(op.host.clone().into_bytes());
            args.push(op.kind.as_bytes().to_vec());
            args.push(format!("{:.3}", op.at).into_bytes());
            args.push(format!("{:.6}", op.factor).into_bytes());
        }
        match ask.lease.as_ref().filter(|_| sec.lease) {
            Some(l) => args.extend(self.lease_args(l)),
            None => args.extend(NO_LEASE.iter().map(|a| a.as_bytes().to_vec())),
        }
        args.push(if sec.sync {
            b"1".to_vec()
        } else {
            b"0".to_vec()
        });
        let peek = ask.peek.filter(|_| sec.peek);
        args.push(peek.unwrap_or("").as_bytes().to_vec());
        let known = peek
            .and_then(|h| self.learned.get(h))
            .map_or(0, |(_, v)| *v);
        args.push(known.to_string().into_bytes());
        // A pooled name's pacer is read with it (see `lua`, step 8).
        let pacer_known = peek
            .and_then(|h| self.pools.get(h))
            .and_then(|p| self.learned.get(&p.pacer))
            .map_or(0, |(_, v)| *v);
        args.push(pacer_known.to_string().into_bytes());
        args
    }

    /// Each worker's last stats go to the job's global part (with the time-to-live of its
    /// keys renewed): one command, at checkpoints only.
    fn save_stats(&self, stats: &str) -> redis::Cmd {
        const SAVE: &str = r"
local P = KEYS[1]
redis.call('HSET', P .. 'stats', ARGV[1], ARGV[2])
local ttl = tonumber(ARGV[3])
if ttl > 0 then
  for _, k in ipairs({ 'stats', 'epoch', 'meta', 'ready' }) do redis.call('PEXPIRE', P .. k, ttl) end
end
return 1";
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(SAVE)
            .arg(1)
            .arg(&self.layout.global)
            .arg(self.worker)
            .arg(stats)
            .arg(self.idle_ttl.as_millis().to_string());
        cmd
    }

    pub(super) fn bad(&self, detail: &str) -> Error {
        Error::redis_reply(&self.link.shown, detail)
    }

    /// One call's reply: `{now, section*}`, the sections in the order of `shards`.
    fn apply_call(
        &mut self,
        shards: &[usize],
        reply: Value,
        (before, after): (f64, f64),
        sent_states: &[SentState],
        sent_pushes: &mut BTreeMap<usize, Vec<super::Push>>,
        merged: &mut Merged,
    ) -> Result<(), Error> {
        let Value::Array(parts) = reply else {
            return Err(self.bad("the step script did not return an array"));
        };
        if parts.len() != shards.len() + 1 {
            return Err(self.bad("the step script returned the wrong number of sections"));
        }
        let mut parts = parts.into_iter();
        // The server's clock, read somewhere in the round trip: it narrows the estimate of
        // its offset from ours (see `clock`).
        let now = parts.next().unwrap_or_default();
        let server_now = float_at(std::slice::from_ref(&now), 0);
        if server_now > 0.0 {
            self.clock.sample(before, after, server_now);
        }
        for (&shard, section) in shards.iter().zip(parts) {
            let Value::Array(section) = section else {
                return Err(self.bad("a section of the step's reply is not an array"));
            };
            let [dups, reclaimed, lease, cas, sync, had, steps, peek, ops] =
                <[Value; 9]>::try_from(section)
                    .map_err(|_| self.bad("a section of the step's reply has the wrong size"))?;
            let (had, steps) = (int(&had), int(&steps));
            let last = self.job.steps.get(shard).copied().unwrap_or(0);
            if self.job.rolled_back(shard, had, steps) {
                merged.rolled_back.push(shard);
                let (pushes, beyond) = self.pushed.lost(shard, had, last);
                merged.replay.extend(pushes);
                if let Some(b) = beyond {
                    merged.beyond.push((shard, b));
                }
            }
            self.pushed
                .record(shard, steps, sent_pushes.remove(&shard).unwrap_or_default());
            merged.dups += int(&dups);
            merged.reclaimed += int(&reclaimed);
            self.apply_cas(cas, sent_states);
            self.apply_ops(ops);
            if let Value::Array(l) = &lease
                && int_at(l, 0) != -1
            {
                merged.lease = Some(lease);
            }
            if let Value::Array(p) = &peek
                && !p.is_empty()
            {
                merged.peek = Some(peek);
            }
            if let Value::Array(s) = sync
                && !s.is_empty()
            {
                let leased = int_at(&s, 0);
                let generation = int_at(&s, 1);
                merged
                    .sync
                    .push((shard, leased, generation, s.into_iter().skip(2).collect()));
            }
        }
        Ok(())
    }

    fn apply_ops(&mut self, ops: Value) {
        let Value::Array(results) = ops else { return };
        for r in results {
            let Value::Array(f) = r else { continue };
            let host = text(f.first());
            let slot = float_at(&f, 1);
            let version = self.learned.get(&host).map_or(0, |(_, v)| *v);
            self.remember(&host, version, "", &text(f.get(2)));
            if let Some(Value::Array(info)) = f.get(3)
                && !info.is_empty()
            {
                self.learn_pool(&host, info);
                self.pool_members = text(info.get(6))
                    .split(',')
                    .filter(|m| !m.is_empty())
                    .map(str::to_owned)
                    .collect();
            }
            self.op_slots.insert(host, slot);
        }
    }

    fn apply_cas(&mut self, cas: Value, sent_states: &[SentState]) {
        let Value::Array(results) = cas else { return };
        for r in results {
            let Value::Array(f) = r else { continue };
            let host = text(f.first());
            let ok = int_at(&f, 1) == 1;
            let version = int_at(&f, 2).unsigned_abs();
            let pacing = text(f.get(4));
            if ok {
                if let Some((_, _, json, _)) =
                    sent_states.iter().rev().find(|(h, _, _, _)| *h == host)
                {
                    let json = json.clone();
                    self.remember(&host, version, &json, &pacing);
                }
            } else {
                let state = text(f.get(3));
                self.remember(&host, version, &state, &pacing);
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

    /// The step's answer from every call's sections.
    fn finish(&mut self, ask: Ask<'_>, merged: Merged) -> Result<Option<Leased>, Error> {
        self.dups += merged.dups.unsigned_abs();
        let reclaimed = merged.reclaimed.unsigned_abs();
        if reclaimed > 0 {
            tracing::info!(
                reclaimed,
                "leases of a stopped worker returned to their queues"
            );
            self.reclaimed += reclaimed;
        }
        if ask.sync {
            self.last_sync = Some(std::time::Instant::now());
            for n in self.lens.values_mut() {
                *n = 0;
            }
            let (mut queued, mut leased) = (0, 0);
            for (shard, shard_leased, generation, hosts) in merged.sync {
                leased += usize::try_from(shard_leased).unwrap_or(0);
                if let Some(g) = self.gens.get_mut(shard) {
                    *g = generation;
                }
                for chunk in hosts.chunks(3) {
                    let host = text(chunk.first());
                    let n = usize::try_from(int_at(chunk, 1)).unwrap_or(0);
                    if int_at(chunk, 2) == 0 {
                        queued += n;
                    }
                    self.lens.insert(host, n);
                }
            }
            // Pushes still buffered here (links a rollback lost, to be queued again) are
            // work too.
            for (host, _, _) in &self.pushes {
                *self.lens.entry(host.clone()).or_default() += 1;
                queued += 1;
            }
            self.fleet = FleetStatus { queued, leased };
        }
        if let (Some(host), Some(Value::Array(p))) = (ask.peek, &merged.peek) {
            let version = int_at(p, 0).unsigned_abs();
            let state = text(p.get(1));
            self.remember(host, version, &state, &text(p.get(3)));
            if int_at(p, 2) == 1 {
                self.skipped_here.insert(host.to_owned());
            }
            let pacer = text(p.get(4));
            if !pacer.is_empty() {
                let version = int_at(p, 5).unsigned_abs();
                self.remember(&pacer, version, &text(p.get(6)), &text(p.get(8)));
                if int_at(p, 7) == 1 {
                    self.skipped_here.insert(pacer.clone());
                }
                self.peek_pacer = Some(pacer);
            }
        }
        let Some(ask) = ask.lease else {
            return Ok(None);
        };
        let host = ask.host;
        let Some(Value::Array(l)) = merged.lease else {
            return Err(self.bad("the lease answer is missing"));
        };
        let code = int_at(&l, 0);
        // The lease's own bytes (the request it hands out aside): what a lease costs.
        let received: usize = l
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 2 && *i != 9)
            .map(|(_, v)| wire_len(v))
            .sum();
        let sent: usize = self.lease_args(&ask).iter().map(Vec::len).sum();
        let full = code == 2 && int_at(&l, 6).unsigned_abs() >= u64::from(ask.concurrency);
        super::link::count_lease(code, full, sent, received);
        let left = usize::try_from(int_at(&l, 3)).unwrap_or(0);
        let version = int_at(&l, 4).unsigned_abs();
        let in_flight = int_at(&l, 6).unsigned_abs();
        tracing::debug!(
            worker = self.worker,
            host,
            code,
            left,
            in_flight,
            at = float_at(&l, 7),
            pacing = %text(l.get(8)),
            "lease answer"
        );
        self.lens.insert(host.to_owned(), left);
        if ask.budget {
            self.remember(host, version, &text(l.get(5)), &text(l.get(8)));
            if let Some(Value::Array(info)) = l.get(10) {
                self.learn_pool(host, info);
            }
        }
        let at = float_at(&l, 7);
        let member = match l.get(2) {
            Some(Value::BulkString(b)) => b.clone(),
            _ => Vec::new(),
        };
        let extra = match (ask.extra, l.get(9)) {
            (Some(n), Some(Value::BulkString(b))) if code == 1 && !b.is_empty() => {
                Some((n, b.clone()))
            }
            _ => None,
        };
        Ok(Some(Leased {
            code,
            // Redis echoes `TOKEN:N`; N is ours.
            id: ask.number,
            member,
            in_flight,
            at,
            extra,
        }))
    }

    /// Send everything buffered: one step, and a second for acknowledgements that had to
    /// wait for the pushes before them (cluster only).
    pub(super) fn drain(&mut self) -> Result<(), Error> {
        self.step(Ask::default())?;
        if !self.acks.is_empty() {
            self.step(Ask::default())?;
        }
        Ok(())
    }

    /// Whether the fleet's state is due to be read again (every `sync_every`). Not less
    /// often for a busy worker: the hosts other workers queued are how a worker learns the
    /// other names behind a limiter it shares, and a hold spreads only to the names a
    /// worker knows.
    pub(super) fn sync_due(&self) -> bool {
        self.last_sync
            .is_none_or(|t| t.elapsed() >= self.sync_every)
    }

    /// A read of the fleet's state on its own, when one is overdue: within twice
    /// `sync_every`, the next lease or confirming read of this worker carries it for free
    /// (see `sync_due`), and a busy worker makes one soon.
    pub(super) fn sync_if_due(&mut self) -> Result<(), Error> {
        let overdue = self
            .last_sync
            .is_none_or(|t| t.elapsed() >= self.sync_every * 2);
        if overdue {
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

    /// The fleet's state, read so that "nothing left" is never a mix of two moments: on a
    /// cluster the shards are read one by one (a page's links may land in one shard just
    /// after it was read, and the page's acknowledgement in another just before), so an
    /// empty-looking read is read again, and trusted only if no shard changed in between
    /// (then every shard held its state through one common instant). A plain Redis reads
    /// every shard in one script: one consistent read.
    pub(super) fn read_fleet(&mut self) -> Result<FleetStatus, Error> {
        self.step(Ask {
            lease: None,
            sync: true,
            peek: None,
        })?;
        let first = self.fleet;
        if !self.link.cluster || first.queued > 0 || first.leased > 0 {
            return Ok(first);
        }
        let gens = self.gens.clone();
        self.step(Ask {
            lease: None,
            sync: true,
            peek: None,
        })?;
        if self.gens != gens && self.fleet.queued == 0 && self.fleet.leased == 0 {
            // Something moved meanwhile: not done yet as far as anyone can tell; ask again
            // at the next poll.
            self.fleet.leased = 1;
        }
        Ok(self.fleet)
    }
}
