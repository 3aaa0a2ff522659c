//! The worker's view of each host's shared politeness state: its parameters, the machine on
//! the state last heard, and routine outcomes folded into commits; and the small helpers
//! every step uses (the script's fixed arguments, the fleet's clock, kept errors).

use crawler_sched::Versioned;
use crawler_sched::politeness::{HostMachine, HostState, Params};

use super::{Commit, Inner};
use crate::error::Error;

impl Inner {
    /// Keep a failure that could not be returned, for [`Fleet::take_error`](crawler_sched::Fleet::take_error).
    pub(super) fn keep_error(&mut self, what: &str, e: Error) {
        tracing::error!("{what}: {e}");
        self.error.get_or_insert(e);
    }

    pub(super) fn params_for(&self, host: &str) -> Option<&Params> {
        self.params.get(host).or(self.default_params.as_ref())
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

    pub(super) fn remember(&mut self, host: &str, version: u64, state: &str) {
        if state.is_empty() {
            return;
        }
        match serde_json::from_str::<HostState>(state) {
            Ok(state) => {
                self.states
                    .insert(host.to_owned(), Versioned { state, version });
            }
            Err(e) => tracing::warn!(host, "unreadable politeness state in Redis: {e}"),
        }
    }

    /// Turn the routine outcomes waiting for each host (but `except`, whose lease will
    /// carry them) into state commits for this step.
    pub(super) fn fold_deferred(&mut self, except: Option<&str>) {
        let hosts: Vec<String> = self
            .deferred
            .keys()
            .filter(|h| Some(h.as_str()) != except)
            .cloned()
            .collect();
        for host in hosts {
            let Some(params) = self.params_for(&host).cloned() else {
                self.deferred.remove(&host);
                continue;
            };
            let folded = self.deferred.remove(&host).unwrap_or_default();
            let (mut m, expected) = self.machine(&host, &params);
            let now = self.now_ms();
            for (fb, at) in &folded {
                let _ = crawler_sched::apply_feedback(&mut m, fb, *at, now);
            }
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
