//! The step script books sends by the machine's own rule: random sequences of leases,
//! answers, slots given back, late requests booked again, holds and quotas, each applied
//! to a real Redis through the script (with the arguments a worker sends) and to a
//! [`HostMachine`] beside it, must leave the same slots, holds, quota and send gap.
//!
//! A second property does the same for a pooled limiter group (`lua`, "pooled groups"):
//! leases of its names book the pacer's record as the machine pacing the pool (under the
//! summed caps) books, each name keeping its own cap and its own `max_rate` gap.
//!
//! A fleet's sends are booked by the script alone (`lua`, steps 4b and 6), a local crawl's
//! by the machine (`machine/pacing.rs`): two implementations of one rule, which drift
//! apart silently unless something drives both on the same inputs.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crawler_core::{Feedback, Settings, ThrottleMode};
use crawler_sched::politeness::{HostMachine, Params};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

use super::lua::STEP;
use super::reply::{float_at, int_at, text};
use super::state::{Pacing, gap_factor, merge_arg, pace_of};

#[path = "../../tests/support/redis.rs"]
mod redis_server;

const PREFIX: &str = "{bk}:";
const HOST: &str = "h.test";
const EPOCH: &str = "e1";
/// The record keeps milliseconds to the microsecond (`fmt` in the script) and the worker
/// sends factors to six places, but the reply's clock is Lua's `tostring` of it, fourteen
/// digits: a tenth of a millisecond. The two sides agree to this much (slots are tens to
/// thousands of milliseconds apart).
const EPS_MS: f64 = 0.2;

/// One worker's view of one host, as `RedisStore` keeps it: the machine the script's
/// bookings are compared with, and what the worker last heard of the record.
struct Case {
    rng: StdRng,
    machine: HostMachine,
    version: u64,
    heard: Option<(crawler_sched::politeness::HostState, Pacing)>,
    /// Lease numbers granted and not yet answered, oldest first, with their booked slots.
    open: Vec<u64>,
    booked: std::collections::HashMap<u64, f64>,
    next_lease: u64,
    concurrency: u32,
}

/// The step script's arguments for one section (see `lua`'s module docs).
#[derive(Default)]
struct Section {
    pushes: Vec<String>,
    acks: Vec<u64>,
    commits: Vec<(u64, String, String)>,
    ops: Vec<(&'static str, f64, f64)>,
    lease: Option<Vec<String>>,
    /// The host of the pushes, commits and operations ([`HOST`] when empty).
    host: &'static str,
}

fn lease_id(n: u64) -> String {
    format!("tok:{n}")
}

/// Run one step of the script and return `(now_ms, section reply)`.
fn step(con: &mut redis::Connection, s: Section) -> (f64, Vec<Value>) {
    let host = if s.host.is_empty() { HOST } else { s.host };
    let mut args: Vec<String> = ["1", "60000", "0", EPOCH, "tok", "1", PREFIX, "0"]
        .iter()
        .map(|a| (*a).to_owned())
        .collect();
    args.push(s.pushes.len().to_string());
    for (i, m) in s.pushes.iter().enumerate() {
        args.extend([host.to_owned(), String::new(), format!("{i:08}{m}")]);
    }
    args.push(s.acks.len().to_string());
    args.extend(s.acks.iter().map(|&n| lease_id(n)));
    args.push("0".into());
    args.push(s.commits.len().to_string());
    for (expected, state, merge) in &s.commits {
        args.extend([
            host.to_owned(),
            expected.to_string(),
            state.clone(),
            String::new(),
            merge.clone(),
        ]);
    }
    args.push(s.ops.len().to_string());
    for (kind, at, factor) in &s.ops {
        args.extend([
            host.to_owned(),
            (*kind).to_owned(),
            format!("{at:.3}"),
            format!("{factor:.6}"),
        ]);
    }
    match s.lease {
        Some(l) => args.extend(l),
        None => args.extend(
            ["", "0", "0", "0", "0", "1", "", "0", "", "", ""]
                .iter()
                .map(|a| (*a).to_owned()),
        ),
    }
    // sync, peek host (none), its expected version and its pacer's.
    args.extend([
        "0".to_owned(),
        String::new(),
        "0".to_owned(),
        "0".to_owned(),
    ]);
    let reply: Value = redis::cmd("EVAL")
        .arg(STEP.as_str())
        .arg(1)
        .arg(PREFIX)
        .arg(&args)
        .query(con)
        .expect("the step script runs");
    let Value::Array(top) = reply else {
        panic!("unexpected reply {reply:?}")
    };
    let now = float_at(&top, 0);
    let Some(Value::Array(section)) = top.get(1).cloned() else {
        panic!("no section in {top:?}")
    };
    (now, section)
}

fn array(v: Option<&Value>) -> Vec<Value> {
    match v {
        Some(Value::Array(a)) => a.clone(),
        _ => Vec::new(),
    }
}

/// `x` to the microsecond, as the script keeps times.
fn micros(x: f64) -> f64 {
    (x * 1_000.0).round() / 1_000.0
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= EPS_MS
}

impl Case {
    fn new(seed: u64, now: f64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let fixed = rng.random_bool(0.5);
        let settings = Settings {
            throttle: if fixed {
                ThrottleMode::Fixed
            } else {
                ThrottleMode::Adaptive
            },
            download_delay: std::time::Duration::from_millis(if fixed {
                rng.random_range(20..2_000)
            } else {
                0
            }),
            randomize_delay: rng.random_bool(0.5),
            concurrency_per_host: rng.random_range(1..6),
            ..Default::default()
        };
        let mut params = Params::from_settings(&settings);
        if !fixed {
            params.burst = rng.random_range(1..5);
        }
        let concurrency = params.concurrency;
        let mut machine = HostMachine::new(params.clone(), now);
        let mut state = machine.state().clone();
        if !fixed {
            state.rate = rng.random_range(0.5..20.0);
        }
        if rng.random_bool(0.3) {
            state.crawl_delay_ms = rng.random_range(100.0..1_500.0);
        }
        state.seed = rng.random();
        machine = HostMachine::with_state(params, state);
        Self {
            rng,
            machine,
            version: 0,
            heard: None,
            open: Vec::new(),
            booked: std::collections::HashMap::new(),
            next_lease: 1,
            concurrency,
        }
    }

    /// The record as the script returned it, laid over the machine's state, must be the
    /// machine's own: the comparison of every field a booking moves.
    fn check(&self, what: &str, p: &Pacing) {
        let s = self.machine.state();
        let ctx = || format!("after {what}: record {p:?}, machine {s:?}");
        assert!(
            close(p.tat.unwrap_or(f64::NAN), s.tat),
            "next slot {}",
            ctx()
        );
        if let Some(h) = p.hold_until {
            assert!(close(h, s.hold_until), "hold {}", ctx());
        }
        if let Some(g) = p.last_gap {
            assert!(close(g, s.last_gap), "last gap {}", ctx());
        }
        if let Some(b) = p.booked_at {
            assert!(
                close(b, s.booked_at.unwrap_or(f64::NAN)),
                "booked at {}",
                ctx()
            );
        }
        if let Some(g) = p.send_gap {
            assert!(close(g, s.send_gap), "send gap {}", ctx());
        }
        assert_eq!(
            p.quota_left.map(|q| q as i64),
            s.quota_left,
            "quota left {}",
            ctx()
        );
        match (p.spent_until, s.spent_until) {
            (Some(a), Some(b)) => assert!(close(a, b), "spent until {}", ctx()),
            (a, b) => assert_eq!(a.is_some(), b.is_some(), "spent until {}", ctx()),
        }
        assert_eq!(p.in_flight, u64::from(s.in_flight), "in flight {}", ctx());
    }

    /// A lease, as `RedisStore` asks for one (look-ahead 0, reach `ahead`): granted by the
    /// script exactly when the machine is ready within reach and has room, at the slot the
    /// machine books.
    fn lease(&mut self, con: &mut redis::Connection, ahead: f64) {
        let draw = self.rng.random::<u64>();
        let factor = gap_factor(&self.machine, draw);
        let (iv, sl, cd) = pace_of(&self.machine);
        let n = self.next_lease;
        self.next_lease += 1;
        let lease = vec![
            HOST.to_owned(),
            "0".into(),
            "1".into(),
            self.version.to_string(),
            format!("{ahead:.3},0.000"),
            format!("{factor:.6}"),
            format!("{iv:.3},{sl:.3},{cd:.3}"),
            self.concurrency.to_string(),
            lease_id(n),
            String::new(),
            String::new(),
        ];
        let (now, sec) = step(
            con,
            Section {
                lease: Some(lease),
                ..Section::default()
            },
        );
        let reply = array(sec.get(2));
        let code = int_at(&reply, 0);
        let ready = self.machine.ready_at();
        let room = self.machine.state().in_flight < self.concurrency;
        let due = ready <= now + ahead + 2.0;
        // A slot within a rounding of the reach is either side's to call.
        if (ready - (now + ahead + 2.0)).abs() > EPS_MS {
            assert_eq!(
                code == 1,
                due && room,
                "lease granted: ready {ready}, now {now}, ahead {ahead}, room {room}, reply {reply:?}"
            );
        }
        if code != 1 {
            return;
        }
        let at = float_at(&reply, 7);
        let expect = ready.max(now);
        assert!(
            close(at, expect),
            "booked at {at}, the machine's slot {expect} (ready {ready}, now {now})"
        );
        // The machine books the same send with the same draw (the worker's factor).
        let mut state = self.machine.state().clone();
        state.seed ^= draw.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let seed_after = self.machine.state().seed;
        let mut m = HostMachine::with_state(self.machine.params().clone(), state);
        m.on_send(at);
        let mut state = m.state().clone();
        state.seed = seed_after;
        self.machine = HostMachine::with_state(self.machine.params().clone(), state);
        self.open.push(n);
        self.booked.insert(n, at);
        let pacing = Pacing::parse(&text(reply.get(8))).expect("a pacing record");
        self.check("a lease", &pacing);
        self.hear(pacing);
    }

    /// What the worker keeps of a reply's record (`RedisStore::remember`): a later commit's
    /// quota counts the bookings made since.
    fn hear(&mut self, pacing: Pacing) {
        let mut heard = self.machine.state().clone();
        pacing.overlay(&mut heard);
        self.heard = Some((heard, pacing));
    }

    /// The oldest open request is answered (acknowledged): one fewer in flight.
    fn answer(&mut self, con: &mut redis::Connection) {
        let Some(n) = (!self.open.is_empty()).then(|| self.open.remove(0)) else {
            return;
        };
        let mut state = self.machine.state().clone();
        state.in_flight = state.in_flight.saturating_sub(1);
        self.machine = HostMachine::with_state(self.machine.params().clone(), state);
        step(
            con,
            Section {
                acks: vec![n],
                ..Section::default()
            },
        );
    }

    /// The oldest open request is answered with a page, having left late (a worker
    /// starved of CPU between the booking and the send), and the worker folds what it
    /// learned into a commit, as `RedisStore` does with routine answers.
    fn answer_late(&mut self, con: &mut redis::Connection, now: f64) {
        if self.open.is_empty() {
            return;
        }
        let n = self.open.remove(0);
        let booked = self.booked.get(&n).copied().unwrap_or(now);
        let sent_at = micros(booked + self.rng.random_range(0.0..400.0)).min(now);
        let latency = self.rng.random_range(5..300);
        let fb = Feedback {
            sent: true,
            status: Some(200),
            latency: std::time::Duration::from_millis(latency),
            ..Feedback::default()
        };
        self.machine
            .on_feedback_sent(&fb, sent_at, sent_at + latency as f64);
        let merge = merge_arg(&self.machine, self.heard.as_ref());
        let state = serde_json::to_string(self.machine.state()).unwrap();
        let (_, sec) = step(
            con,
            Section {
                acks: vec![n],
                commits: vec![(self.version, state, merge)],
                ..Section::default()
            },
        );
        self.committed(&sec, "a late departure answered");
    }

    /// The last open request was not sent (a robots refusal from cache): the machine gives
    /// its slot back when it was the only one open, and the worker commits that with the
    /// give-back operation, as `RedisFleet::commit` does.
    fn give_back(&mut self, con: &mut redis::Connection, now: f64) {
        if self.open.len() != 1 {
            return;
        }
        let n = self.open.remove(0);
        let before = self.machine.clone();
        let fb = Feedback {
            sent: false,
            ..Feedback::default()
        };
        // The commit is made at the worker's clock; the script gives the slot back at its
        // own, a little later: the machine's slot is compared at the script's.
        self.machine.on_feedback_sent(&fb, now, now);
        let gave = self.machine.state().tat < before.state().tat;
        let merge = merge_arg(&self.machine, self.heard.as_ref());
        let state = serde_json::to_string(self.machine.state()).unwrap();
        let (script_now, sec) = step(
            con,
            Section {
                acks: vec![n],
                commits: vec![(self.version, state, merge)],
                ops: if gave {
                    vec![("g", before.state().tat, 1.0)]
                } else {
                    vec![]
                },
                ..Section::default()
            },
        );
        self.machine = before;
        self.machine.on_feedback_sent(&fb, script_now, script_now);
        self.committed(&sec, "a slot given back");
    }

    /// A hold (another name's refusal shared with this one) or a quota reading, committed.
    fn learn(&mut self, con: &mut redis::Connection, now: f64) {
        let mut state = self.machine.state().clone();
        if self.rng.random_bool(0.5) {
            let until = now + self.rng.random_range(10.0..5_000.0);
            self.machine
                .share_hold(until, now, self.rng.random_bool(0.5));
            state = self.machine.state().clone();
        } else {
            let left: i64 = self.rng.random_range(0..6);
            state.quota_left = Some(left);
            state.quota_turn_by = Some(now + self.rng.random_range(100.0..10_000.0));
            state.spent_until = (left <= 0).then_some(state.quota_turn_by).flatten();
        }
        // Times travel to the microsecond (`merge_arg`): the machine keeps what the record
        // keeps, or a send booked exactly at a hold's end is after it on one side only.
        state.hold_until = micros(state.hold_until);
        state.quota_turn_by = state.quota_turn_by.map(micros);
        state.spent_until = state.spent_until.map(micros);
        self.machine = HostMachine::with_state(self.machine.params().clone(), state);
        let merge = merge_arg(&self.machine, self.heard.as_ref());
        let json = serde_json::to_string(self.machine.state()).unwrap();
        let (_, sec) = step(
            con,
            Section {
                commits: vec![(self.version, json, merge)],
                ..Section::default()
            },
        );
        self.committed(&sec, "a hold or quota committed");
    }

    /// A request that missed its slot is booked again at `at` or after, as
    /// `RedisFleet::missed` asks and `HostMachine::rebook` books.
    fn rebook(&mut self, con: &mut redis::Connection, now: f64) {
        if self.open.is_empty() {
            return;
        }
        let at = now + self.rng.random_range(12.0..2_000.0);
        let draw = self.rng.random::<u64>();
        let factor = gap_factor(&self.machine, draw);
        let (_, sec) = step(
            con,
            Section {
                ops: vec![("b", at, factor)],
                ..Section::default()
            },
        );
        let ops = array(sec.get(8));
        let op = array(ops.first());
        let slot = float_at(&op, 1);
        let mut state = self.machine.state().clone();
        state.seed ^= draw.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let seed_after = self.machine.state().seed;
        let mut m = HostMachine::with_state(self.machine.params().clone(), state);
        let expect = m.rebook(at);
        let mut state = m.state().clone();
        state.seed = seed_after;
        self.machine = HostMachine::with_state(self.machine.params().clone(), state);
        assert!(
            close(slot, expect),
            "booked again at {slot}, the machine's slot {expect}"
        );
        let pacing = Pacing::parse(&text(op.get(2))).expect("a pacing record");
        self.check("a late request booked again", &pacing);
        self.hear(pacing);
    }

    /// A commit's reply: it must have won (one worker), and the record it left is the
    /// machine's.
    fn committed(&mut self, sec: &[Value], what: &str) {
        let cas = array(array(sec.get(3)).first());
        assert_eq!(int_at(&cas, 1), 1, "{what}: the commit won");
        self.version = int_at(&cas, 2) as u64;
        let ops = array(sec.get(8));
        let pacing_text = match ops.first() {
            Some(op) => text(array(Some(op)).get(2)),
            None => text(cas.get(4)),
        };
        let pacing = Pacing::parse(&pacing_text).expect("a pacing record");
        self.check(what, &pacing);
        self.hear(pacing);
    }
}

/// Random sequences of what a worker does with one host, on each side; seeds printed.
#[test]
fn the_step_script_books_sends_as_the_machine_does() {
    let redis = redis_server::Redis::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let base: u64 = std::env::var("BOOKING_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let cases = 40;
    eprintln!("booking property: seeds {base}..{}", base + cases);
    for seed in base..base + cases {
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        let _: () = redis::cmd("SET")
            .arg(format!("{PREFIX}epoch"))
            .arg(EPOCH)
            .query(&mut con)
            .unwrap();
        let (now, _) = step(
            &mut con,
            Section {
                pushes: (0..400).map(|i| format!("r{i}")).collect(),
                ..Section::default()
            },
        );
        let mut case = Case::new(seed, now);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for _ in 0..120 {
                let now: f64 = {
                    let t: Vec<String> = redis::cmd("TIME").query(&mut con).unwrap();
                    super::reply::server_ms(&t).unwrap()
                };
                match case.rng.random_range(0..10) {
                    0..=4 => {
                        let ahead = case.rng.random_range(0.0..3_000.0);
                        case.lease(&mut con, ahead);
                    }
                    5 => case.answer(&mut con),
                    6 => case.answer_late(&mut con, now),
                    7 => case.give_back(&mut con, now),
                    8 => case.learn(&mut con, now),
                    _ => case.rebook(&mut con, now),
                }
            }
        }));
        if let Err(e) = result {
            eprintln!("booking property failed on seed {seed} (BOOKING_SEED={seed})");
            std::panic::resume_unwind(e);
        }
    }
}

/// The names of the pooled group the second property drives, and their site.
const NAMES: [&str; 3] = ["a.pool.test", "b.pool.test", "c.pool.test"];
const SITE: &str = "pool.test";

/// A pooled limiter group (`lua`, "pooled groups"): the pacer's record against the
/// machine that paces the pool (under the pool's summed caps), and each name's own cap and
/// own `max_rate` gap against the worker's bookkeeping.
struct Pool {
    rng: StdRng,
    /// The pool's machine: the pacer's state under the pool's parameters.
    machine: HostMachine,
    version: u64,
    heard: Option<(crawler_sched::politeness::HostState, Pacing)>,
    /// Each name's own in-flight cap, `max_rate`, last booking and requests in flight.
    own: Vec<(u32, f64, Option<f64>, u32)>,
    /// Open leases: name index, lease number.
    open: Vec<(usize, u64)>,
    next_lease: u64,
}

impl Pool {
    fn cap(&self) -> u32 {
        self.own.iter().map(|o| o.0).sum()
    }

    fn in_flight(&self) -> u32 {
        self.own.iter().map(|o| o.3).sum()
    }

    /// The record must be the pool machine's (in flight aside: the record's is the pacer
    /// name's own, the pool's is counted apart).
    fn check(&self, what: &str, p: &Pacing) {
        let s = self.machine.state();
        let ctx = || format!("after {what}: record {p:?}, machine {s:?}");
        assert!(
            close(p.tat.unwrap_or(f64::NAN), s.tat),
            "next slot {}",
            ctx()
        );
        if let Some(h) = p.hold_until {
            assert!(close(h, s.hold_until), "hold {}", ctx());
        }
        if let Some(g) = p.last_gap {
            assert!(close(g, s.last_gap), "last gap {}", ctx());
        }
        if let Some(b) = p.booked_at {
            let m = s.booked_at.unwrap_or(f64::NAN);
            assert!(close(b, m), "booked at {}", ctx());
        }
        if let Some(g) = p.send_gap {
            assert!(close(g, s.send_gap), "send gap {}", ctx());
        }
    }

    /// A lease of name `i`: granted exactly when the pool's machine is due within reach,
    /// the name's own gap has passed and both caps have room, at the pool machine's slot.
    fn lease(&mut self, con: &mut redis::Connection, i: usize, ahead: f64) {
        let draw = self.rng.random::<u64>();
        let factor = gap_factor(&self.machine, draw);
        let (iv, sl, cd) = pace_of(&self.machine);
        let (own_cap, own_rate, own_booked, own_fl) = self.own[i];
        let own_gap = 1_000.0 / own_rate;
        let n = self.next_lease;
        self.next_lease += 1;
        let lease = vec![
            NAMES[i].to_owned(),
            "0".into(),
            "1".into(),
            "0".into(),
            format!("{ahead:.3},0.000"),
            format!("{factor:.6}"),
            format!("{iv:.3},{sl:.3},{cd:.3}"),
            own_cap.to_string(),
            lease_id(n),
            String::new(),
            format!(
                "{SITE},{own_gap:.3},{own_rate:.3},{},{}",
                NAMES[0], self.version
            ),
        ];
        let (now, sec) = step(
            con,
            Section {
                lease: Some(lease),
                ..Section::default()
            },
        );
        let reply = array(sec.get(2));
        let code = int_at(&reply, 0);
        let ready = self
            .machine
            .ready_at()
            .max(own_booked.map_or(f64::NEG_INFINITY, |b| micros(b) + own_gap));
        let room = own_fl < own_cap && self.in_flight() < self.cap();
        let due = ready <= now + ahead + 2.0;
        if (ready - (now + ahead + 2.0)).abs() > EPS_MS {
            assert_eq!(
                code == 1,
                due && room,
                "pooled lease of {}: ready {ready}, now {now}, ahead {ahead}, room {room}, \
                 reply {reply:?}",
                NAMES[i]
            );
        }
        let pool = array(reply.get(10));
        assert_eq!(text(pool.first()), NAMES[0], "the pool's pacer: {reply:?}");
        assert_eq!(int_at(&pool, 4), i64::from(self.cap()), "the pool's cap");
        if code != 1 {
            return;
        }
        let at = float_at(&reply, 7);
        assert!(
            close(at, ready.max(now)),
            "booked at {at}, the pool's slot {} (ready {ready}, now {now})",
            ready.max(now)
        );
        let mut state = self.machine.state().clone();
        state.seed ^= draw.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let seed_after = self.machine.state().seed;
        let mut m = HostMachine::with_state(self.machine.params().clone(), state);
        m.on_send(at);
        let mut state = m.state().clone();
        state.seed = seed_after;
        self.machine = HostMachine::with_state(self.machine.params().clone(), state);
        self.own[i].2 = Some(at);
        self.own[i].3 += 1;
        self.open.push((i, n));
        assert!(
            close(float_at(&pool, 6), at),
            "the name's own booking {pool:?}"
        );
        let pacing = Pacing::parse(&text(pool.get(3))).expect("the pacer's record");
        self.check("a pooled lease", &pacing);
        self.hear(pacing);
    }

    fn hear(&mut self, pacing: Pacing) {
        let mut heard = self.machine.state().clone();
        pacing.overlay(&mut heard);
        self.heard = Some((heard, pacing));
    }

    /// A random open request is answered: one fewer in flight for its name and the pool.
    fn answer(&mut self, con: &mut redis::Connection) {
        if self.open.is_empty() {
            return;
        }
        let k = self.rng.random_range(0..self.open.len());
        let (i, n) = self.open.remove(k);
        self.own[i].3 -= 1;
        let mut state = self.machine.state().clone();
        state.in_flight = state.in_flight.saturating_sub(1);
        self.machine = HostMachine::with_state(self.machine.params().clone(), state);
        step(
            con,
            Section {
                acks: vec![n],
                ..Section::default()
            },
        );
    }

    /// What a pooled name's answer taught the pacer (a new rate up to the pool's
    /// `max_rate`, or a hold), committed to the pacer's state as `SharedThrottle` does.
    fn learn(&mut self, con: &mut redis::Connection, now: f64) {
        let mut state = self.machine.state().clone();
        if self.rng.random_bool(0.5) {
            let until = now + self.rng.random_range(10.0..3_000.0);
            self.machine.share_hold(until, now, false);
            state = self.machine.state().clone();
        } else {
            state.rate = self.rng.random_range(0.5..self.machine.params().max_rate);
        }
        state.hold_until = micros(state.hold_until);
        self.machine = HostMachine::with_state(self.machine.params().clone(), state);
        let merge = merge_arg(&self.machine, self.heard.as_ref());
        let json = serde_json::to_string(self.machine.state()).unwrap();
        let (_, sec) = step(
            con,
            Section {
                commits: vec![(self.version, json, merge)],
                host: NAMES[0],
                ..Section::default()
            },
        );
        let cas = array(array(sec.get(3)).first());
        assert_eq!(int_at(&cas, 1), 1, "the pacer's commit won");
        self.version = int_at(&cas, 2) as u64;
        let pacing = Pacing::parse(&text(cas.get(4))).expect("a pacing record");
        self.check("a commit to the pacer", &pacing);
        self.hear(pacing);
    }
}

/// Random leases of a pooled group's names, answers and commits to its pacer, on each
/// side; seeds printed (`BOOKING_SEED=N` replays).
#[test]
fn the_step_script_books_a_pooled_group_as_the_machine_paces_its_pool() {
    let redis = redis_server::Redis::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let base: u64 = std::env::var("BOOKING_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let cases = 30;
    eprintln!("pooled booking property: seeds {base}..{}", base + cases);
    for seed in base..base + cases {
        let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
        let _: () = redis::cmd("SET")
            .arg(format!("{PREFIX}epoch"))
            .arg(EPOCH)
            .query(&mut con)
            .unwrap();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pooled_case(&mut con, seed);
        }));
        if let Err(e) = result {
            eprintln!("pooled booking property failed on seed {seed} (BOOKING_SEED={seed})");
            std::panic::resume_unwind(e);
        }
    }
}

fn pooled_case(con: &mut redis::Connection, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let settings = Settings {
        throttle: ThrottleMode::Adaptive,
        ..Default::default()
    };
    let mut own_params = Params::from_settings(&settings);
    own_params.burst = rng.random_range(1..4);
    let own: Vec<(u32, f64, Option<f64>, u32)> = (0..NAMES.len())
        .map(|_| (rng.random_range(1..4), rng.random_range(1.0..30.0), None, 0))
        .collect();
    let mut now = 0.0;
    // Each name's first lease joins the site's group (booked on its own record), and is
    // answered; then the first name's refusal pools the group on it.
    for (i, name) in NAMES.iter().enumerate() {
        let (t, _) = step(
            con,
            Section {
                pushes: (0..200).map(|k| format!("r{k}")).collect(),
                host: name,
                ..Section::default()
            },
        );
        now = t;
        let lease = vec![
            (*name).to_owned(),
            "0".into(),
            "1".into(),
            "0".into(),
            "0.000,0.000".into(),
            "1.000000".into(),
            "0.000,0.000,0.000".into(),
            own[i].0.to_string(),
            lease_id(1_000 + i as u64),
            String::new(),
            format!("{SITE},{:.3},{:.3},,0", 1_000.0 / own[i].1, own[i].1),
        ];
        let (_, sec) = step(
            con,
            Section {
                lease: Some(lease),
                acks: vec![],
                ..Section::default()
            },
        );
        assert_eq!(int_at(&array(sec.get(2)), 0), 1, "{name}'s first lease");
        step(
            con,
            Section {
                acks: vec![1_000 + i as u64],
                ..Section::default()
            },
        );
    }
    let (_, sec) = step(
        con,
        Section {
            ops: vec![("p", 0.0, 1.0)],
            host: NAMES[0],
            ..Section::default()
        },
    );
    let op = array(array(sec.get(8)).first());
    let info = array(op.get(3));
    assert_eq!(
        text(info.first()),
        NAMES[0],
        "the refused name paces the pool"
    );
    let cap: u32 = own.iter().map(|o| o.0).sum();
    let rate: f64 = own.iter().map(|o| o.1).sum();
    assert_eq!(int_at(&info, 4), i64::from(cap), "the pool's cap: the sum");
    assert!(
        (float_at(&info, 5) - rate).abs() < 0.01,
        "the pool's max_rate"
    );
    let mut formed: Vec<String> = text(info.get(6)).split(',').map(str::to_owned).collect();
    formed.sort();
    assert_eq!(formed, NAMES.to_vec(), "the group's names");
    // A second ask changes nothing: the pacer stays.
    let (_, sec) = step(
        con,
        Section {
            ops: vec![("p", 0.0, 1.0)],
            host: NAMES[1],
            ..Section::default()
        },
    );
    let again = array(array(array(sec.get(8)).first()).get(3));
    assert_eq!(text(again.first()), NAMES[0]);
    assert_eq!(text(again.get(6)), "", "not formed again");
    // The pool's machine: the pacer's first booking (a fresh record at `now`, interval 0
    // from the first lease's `init`) under the pool's caps, with a state the worker then
    // commits (a random rate), as `SharedThrottle` commits the pace it absorbed.
    let mut params = own_params;
    params.concurrency = cap;
    params.max_rate = rate;
    params.sharers = 1;
    let pacer: Vec<Value> = redis::cmd("HMGET")
        .arg(format!("{PREFIX}b:{}", NAMES[0]))
        .arg(&["t", "ba"])
        .query(con)
        .unwrap();
    let t = text(pacer.first()).parse::<f64>().unwrap_or(now);
    let mut state = HostMachine::new(params.clone(), now).state().clone();
    state.tat = t;
    state.booked_at = text(pacer.get(1)).parse::<f64>().ok();
    state.rate = rng.random_range(0.5..rate);
    state.in_flight = 0;
    let mut pool = Pool {
        rng,
        machine: HostMachine::with_state(params, state),
        version: 0,
        heard: None,
        own,
        open: Vec::new(),
        next_lease: 1,
    };
    // The first commit carries the whole pace: the record was the pacer name's own.
    let merge = merge_arg(&pool.machine, None);
    let json = serde_json::to_string(pool.machine.state()).unwrap();
    let (_, sec) = step(
        con,
        Section {
            commits: vec![(0, json, merge)],
            host: NAMES[0],
            ..Section::default()
        },
    );
    let cas = array(array(sec.get(3)).first());
    assert_eq!(int_at(&cas, 1), 1);
    pool.version = int_at(&cas, 2) as u64;
    pool.hear(Pacing::parse(&text(cas.get(4))).unwrap());
    for _ in 0..100 {
        let t: Vec<String> = redis::cmd("TIME").query(con).unwrap();
        let now = super::reply::server_ms(&t).unwrap();
        match pool.rng.random_range(0..10) {
            0..=5 => {
                let i = pool.rng.random_range(0..NAMES.len());
                let ahead = pool.rng.random_range(0.0..2_000.0);
                pool.lease(con, i, ahead);
            }
            6..=8 => pool.answer(con),
            _ => pool.learn(con, now),
        }
    }
}
