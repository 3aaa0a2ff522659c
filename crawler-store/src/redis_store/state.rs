//! The worker's view of each host's shared politeness state: its parameters, the machine on
//! the state last heard (the learning state with the pacing record laid over it, see
//! `lua`), and routine outcomes folded into commits; and the small helpers every step uses
//! (the fleet's clock, kept errors).

use crawler_sched::Versioned;
use crawler_sched::politeness::{HostMachine, HostState, Params};

use super::{Commit, Inner};
use crate::error::Error;

/// Routine outcomes wait at most this long (fleet ms) before they are folded into the
/// host's learning state: what they teach (the delivery rate, latency, growth) is for the
/// next refusal's fit and the next rate change, which a second's delay does not spoil, and
/// each fold is a compare-and-set of the whole state.
const FOLD_AFTER_MS: f64 = 1_000.0;
/// ... or once this many are waiting.
const FOLD_BATCH: usize = 64;
/// ... or at once when they change the host's interval by more than this share: every
/// worker must book at the new pace.
const FOLD_PACE_CHANGE: f64 = 0.02;

/// A host's pacing record as the step script returns it (see `lua`): what a lease books
/// against, a few dozen bytes.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Pacing {
    /// The next slot (GCRA theoretical arrival time).
    pub(super) tat: Option<f64>,
    /// The interval, the burst's slack and the Crawl-delay floor (ms).
    pub(super) interval: Option<f64>,
    pub(super) slack: Option<f64>,
    pub(super) crawl_delay: Option<f64>,
    pub(super) hold_until: Option<f64>,
    pub(super) spent_until: Option<f64>,
    pub(super) quota_left: Option<f64>,
    pub(super) quota_turn_by: Option<f64>,
    pub(super) last_gap: Option<f64>,
    pub(super) booked_at: Option<f64>,
    pub(super) send_gap: Option<f64>,
    /// Sends booked in the record so far.
    pub(super) bookings: u64,
    /// Requests in flight fleet-wide.
    pub(super) in_flight: u64,
}

impl Pacing {
    /// Decode `t,iv,sl,cd,hu,su,ql,qt,lg,ba,sg,n,fl` (empty fields absent). `None` when the
    /// text is not such a record.
    pub(super) fn parse(text: &str) -> Option<Self> {
        let f: Vec<Option<f64>> = text
            .split(',')
            .map(|x| (!x.is_empty()).then(|| x.parse::<f64>().ok()).flatten())
            .collect();
        if f.len() != 13 {
            return None;
        }
        let count = |x: Option<f64>| x.map_or(0, |v| v.max(0.0) as u64);
        Some(Self {
            tat: f[0],
            interval: f[1],
            slack: f[2],
            crawl_delay: f[3],
            hold_until: f[4],
            spent_until: f[5],
            quota_left: f[6],
            quota_turn_by: f[7],
            last_gap: f[8],
            booked_at: f[9],
            send_gap: f[10],
            bookings: count(f[11]),
            in_flight: count(f[12]),
        })
    }

    /// Lay the record over `state`: the fleet's bookings, hold and quota are the record's.
    pub(super) fn overlay(&self, state: &mut HostState) {
        if let Some(t) = self.tat {
            state.tat = t;
        }
        if let Some(h) = self.hold_until {
            state.hold_until = state.hold_until.max(h);
        }
        // The quota fields exist in the record once a commit carried a reading.
        if self.quota_turn_by.is_some() || self.quota_left.is_some() || self.spent_until.is_some() {
            state.quota_left = self.quota_left.map(|q| q as i64);
            state.quota_turn_by = self.quota_turn_by;
            state.spent_until = self.spent_until;
        }
        if let Some(g) = self.last_gap {
            state.last_gap = g;
        }
        if self.booked_at.is_some() {
            state.booked_at = self.booked_at;
        }
        if let Some(g) = self.send_gap {
            state.send_gap = g;
        }
        state.in_flight = u32::try_from(self.in_flight).unwrap_or(u32::MAX);
    }
}

/// What a machine's state makes of the host's pacing: its interval, its burst's slack (the
/// next send is due `slack` before the next slot) and its Crawl-delay floor, ms.
pub(super) fn pace_of(m: &HostMachine) -> (f64, f64, f64) {
    let interval = m.interval_ms();
    // `ready_at` is the next slot less the slack, or a hold or spent quota: without those,
    // what is left is the slack.
    let mut s = m.state().clone();
    s.hold_until = f64::NEG_INFINITY;
    s.spent_until = None;
    let tat = s.tat;
    let free = HostMachine::with_state(m.params().clone(), s);
    let slack = (tat - free.ready_at()).max(0.0);
    (interval, slack, m.state().crawl_delay_ms)
}

/// The gap the machine would book for its next send, as a share of its interval (1 but in
/// fixed mode with randomised delays, where each send draws its own): `draw` varies the
/// draw from one lease to the next, since the learning state's generator only moves with
/// its commits.
pub(super) fn gap_factor(m: &HostMachine, draw: u64) -> f64 {
    let interval = m.interval_ms();
    if interval <= 0.0 {
        return 1.0;
    }
    let mut s = m.state().clone();
    s.seed ^= draw.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    s.tat = 0.0;
    let mut probe = HostMachine::with_state(m.params().clone(), s);
    probe.on_send(0.0);
    let factor = probe.state().tat / interval;
    if factor.is_finite() && factor > 0.0 {
        factor
    } else {
        1.0
    }
}

/// The arguments a learning commit merges into the pacing record (see `lua`, step 4):
/// `iv,sl,cd,hu,t,quota_changed,ql,qt,su,bookings_seen,departed_at,departure_floor`. The quota is rewritten only when
/// the commit changed it from what the worker last heard (`heard`).
pub(super) fn merge_arg(m: &HostMachine, heard: Option<&(HostState, Pacing)>) -> String {
    let (iv, sl, cd) = pace_of(m);
    let s = m.state();
    let f = |x: Option<f64>| x.map_or(String::new(), |v| format!("{v:.3}"));
    let quota = (s.quota_left, s.quota_turn_by, s.spent_until);
    let (changed, seen) = match heard {
        Some((h, p)) => (
            quota != (h.quota_left, h.quota_turn_by, h.spent_until),
            p.bookings,
        ),
        None => (quota != (None, None, None), 0),
    };
    format!(
        "{iv:.3},{sl:.3},{cd:.3},{:.3},{:.3},{},{},{},{},{seen},{},{:.3}",
        s.hold_until,
        s.tat,
        u8::from(changed),
        s.quota_left.map_or(String::new(), |q| q.to_string()),
        f(s.quota_turn_by),
        f(s.spent_until),
        f(s.departed_at),
        s.departure_floor,
    )
}

impl Inner {
    /// Keep a failure that could not be returned, for [`Fleet::take_error`](crawler_sched::Fleet::take_error).
    pub(super) fn keep_error(&mut self, what: &str, e: Error) {
        tracing::error!("{what}: {e}");
        self.error.get_or_insert(e);
    }

    pub(super) fn params_for(&self, host: &str) -> Option<&Params> {
        self.params.get(host).or(self.default_params.as_ref())
    }

    /// The parameters the host's shared state is paced by: a pool pacer's pool parameters
    /// (see [`crawler_sched::Pooled::params`]), else the host's own.
    pub(super) fn pacing_params(&self, host: &str) -> Option<&Params> {
        self.pool_params.get(host).or_else(|| self.params_for(host))
    }

    /// The state that paces `host` as last heard: its pooled group's pacer and that state
    /// under the pool's parameters, or its own; with the learning state's version.
    pub(super) fn pacing_machine(&self, host: &str) -> Option<(String, HostMachine, u64)> {
        let target = self
            .pools
            .get(host)
            .map_or(host, |p| p.pacer.as_str())
            .to_owned();
        let params = self.pacing_params(&target)?.clone();
        let (m, v) = self.machine(&target, &params);
        Some((target, m, v))
    }

    /// Keep what a reply says of `host`'s pooled limiter group (see `lua`): `info` is
    /// `{pacer, version, state, pacing, concurrency, max_rate, own_booked | members}`, the
    /// pacer's learning state only when it is not the one the worker holds.
    pub(super) fn learn_pool(&mut self, host: &str, info: &[redis::Value]) {
        use super::reply::{float_at, int_at, text};
        let pacer = text(info.first());
        if pacer.is_empty() {
            return;
        }
        let version = int_at(info, 1).unsigned_abs();
        // A state for another pacer than the one known is read whole (the script sends it).
        self.remember(&pacer, version, &text(info.get(2)), &text(info.get(3)));
        let concurrency = u32::try_from(int_at(info, 4)).unwrap_or(1).max(1);
        let max_rate = float_at(info, 5);
        let own_booked = text(info.get(6)).parse::<f64>().ok();
        let own_booked = own_booked.or_else(|| self.pools.get(host).and_then(|p| p.own_booked));
        let pool = crawler_sched::Pooled {
            pacer: pacer.clone(),
            concurrency,
            max_rate: if max_rate > 0.0 {
                max_rate
            } else {
                f64::INFINITY
            },
            own_booked,
        };
        if let Some(own) = self.params_for(&pacer) {
            let params = pool.params(own);
            self.pool_params.insert(pacer.clone(), params);
        }
        if self.pools.get(host).is_none_or(|p| p.pacer != pacer) {
            tracing::info!(
                host, pacer = %pacer,
                "limiter group pooled in the fleet: its names are paced as one (in flight up                  to {concurrency}, max_rate {max_rate:.3})"
            );
        }
        self.pools.insert(host.to_owned(), pool);
    }

    /// The Redis server's clock now, as estimated from the round trips so far (ms).
    pub(super) fn now_ms(&self) -> f64 {
        self.origin.elapsed().as_secs_f64() * 1_000.0 + self.clock.offset_ms()
    }

    /// The host's state as last heard, or a fresh one on the fleet's clock.
    pub(super) fn machine(&self, host: &str, params: &Params) -> (HostMachine, u64) {
        match self.states.get(host) {
            Some(v) => (
                HostMachine::with_state(params.clone(), v.state.clone()),
                v.version,
            ),
            None => (HostMachine::new(params.clone(), self.now_ms()), 0),
        }
    }

    /// Keep what a reply says of `host`: the learning state (`state`, JSON; empty when the
    /// worker's is current) at `version`, and the pacing record (`pacing`; empty when the
    /// reply carries none), laid over it.
    pub(super) fn remember(&mut self, host: &str, version: u64, state: &str, pacing: &str) {
        let pacing = Pacing::parse(pacing);
        if !state.is_empty() {
            match serde_json::from_str::<HostState>(state) {
                Ok(state) => {
                    self.learned.insert(host.to_owned(), (state, version));
                }
                Err(e) => tracing::warn!(host, "unreadable politeness state in Redis: {e}"),
            }
        }
        if let Some(p) = pacing {
            self.pacing.insert(host.to_owned(), p);
            let now = self.now_ms();
            self.heard_at.insert(host.to_owned(), now);
        }
        if !self.learned.contains_key(host) {
            // No learning state committed yet: a fresh machine's from the first reply on,
            // under the record (made once, so its hold and slot stay in the past).
            let Some(params) = self.params_for(host).cloned() else {
                return;
            };
            if !self.pacing.contains_key(host) {
                return;
            }
            let fresh = HostMachine::new(params, self.now_ms()).state().clone();
            self.learned.insert(host.to_owned(), (fresh, 0));
        }
        let Some((learned, version)) = self.learned.get(host) else {
            return;
        };
        let mut state = learned.clone();
        let version = *version;
        if let Some(p) = self.pacing.get(host) {
            p.overlay(&mut state);
        }
        self.states
            .insert(host.to_owned(), Versioned { state, version });
    }

    /// The state and pacing record last heard of `host`, for a commit's merge.
    pub(super) fn heard(&self, host: &str) -> Option<(HostState, Pacing)> {
        let v = self.states.get(host)?;
        Some((
            v.state.clone(),
            self.pacing.get(host).cloned().unwrap_or_default(),
        ))
    }

    /// Turn the routine outcomes waiting for each host into learning commits for this step,
    /// when they are due: after [`FOLD_AFTER_MS`], in batches of [`FOLD_BATCH`], at once
    /// when they move the host's pace, and always with `all` (a flush). Folding each answer
    /// on its own was a compare-and-set of the whole state per page, which every other
    /// worker's fold then lost.
    pub(super) fn fold_deferred(&mut self, all: bool) {
        let now = self.now_ms();
        let hosts: Vec<String> = self.deferred.keys().cloned().collect();
        for host in hosts {
            let Some(params) = self.pacing_params(&host).cloned() else {
                self.deferred.remove(&host);
                continue;
            };
            let waiting = self.deferred.get(&host).map_or(&[][..], Vec::as_slice);
            let oldest = waiting
                .iter()
                .map(|(_, at)| *at)
                .fold(f64::INFINITY, f64::min);
            let (mut m, expected) = self.machine(&host, &params);
            let before = m.interval_ms();
            for (fb, at) in waiting {
                let _ = crawler_sched::apply_feedback(&mut m, fb, *at, now);
            }
            let after = m.interval_ms();
            let moved = (after - before).abs() > FOLD_PACE_CHANGE * before.max(1e-9);
            let due = all || moved || waiting.len() >= FOLD_BATCH || now - oldest >= FOLD_AFTER_MS;
            if !due {
                continue;
            }
            let folded = self.deferred.remove(&host).unwrap_or_default();
            // Routine outcomes change little (discovery growth), but every change is logged
            // with its trigger, here as on a local crawl.
            crawler_sched::log_changes(&host, m.take_audit(), &mut Default::default());
            self.commits.push(Commit {
                host,
                expected,
                state: m.state().clone(),
                skip: String::new(),
                folded,
            });
        }
    }
}
