//! The whole state of one host: what resume keeps and what a fleet commits.

use serde::{Deserialize, Serialize};

use super::audit::Phase;
use super::delivery::Delivery;
use super::edge::WindowEdge;
use super::params::Millis;

/// The whole state of one host (serialisable: resume and the fleet keep it). Small by
/// design: a few dozen numbers and the delivery bins, under 1 KB as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostState {
    /// The pacing rate, requests/s (before the latency factor).
    pub rate: f64,
    /// GCRA theoretical arrival time: the next send is due at `tat - (burst - 1) x interval`.
    pub tat: Millis,
    /// No send before this.
    pub hold_until: Millis,
    /// The gap booked by the last send (given back when that send did not happen).
    #[serde(default)]
    pub last_gap: f64,
    /// No send before this: one gap after the latest departure an answer dated (less the
    /// ordinary dispatch delay). A slot given back never moves the next one before it.
    #[serde(default)]
    pub departure_floor: Millis,
    /// Holds placed and their total length (ms).
    pub holds: u64,
    /// Total time held.
    pub held_ms: f64,
    /// Holds that refusals asked for (Retry-After or backoff) and their total length (ms):
    /// what a probe risks, for the payback rule.
    #[serde(default)]
    pub refusal_holds: u32,
    /// Their total length (ms).
    #[serde(default)]
    pub refusal_held_ms: f64,
    /// robots.txt Crawl-delay (ms), a floor on the gap.
    pub crawl_delay_ms: f64,
    /// Consecutive backoff holds (refusals without Retry-After, failure runs, robots
    /// outages).
    pub backoff_level: u32,
    /// Consecutive 403 responses.
    pub forbidden: u32,
    /// Since when robots.txt has been unavailable.
    pub robots_down_since: Option<Millis>,
    /// Requests in flight.
    pub in_flight: u32,
    /// Where the adaptive controller stands.
    pub phase: Phase,
    /// The rate the last refusal episode settled on (requests/s), for the audit and report.
    #[serde(default)]
    pub estimate: Option<f64>,
    /// A budget the server declared in RateLimit headers (requests/s).
    pub declared: Option<f64>,
    /// The lowest pace the server refused (requests/s), and when: an upper bound on its
    /// limit that the climb stays under, forgotten after
    /// [`Tuning::ceiling_memory_ms`](super::Tuning::ceiling_memory_ms).
    pub ceiling: Option<f64>,
    /// When the ceiling was last lowered.
    #[serde(default)]
    pub ceiling_at: Option<Millis>,
    /// The next probe's step (fraction of the rate).
    #[serde(default)]
    pub probe_step: f64,
    /// The rate before the probe in progress (requests/s): where a refused probe returns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_from: Option<f64>,
    /// Probes refused in a row: each doubles the wait before the next.
    #[serde(default)]
    pub probes_refused: u32,
    /// Responses to requests sent before this do not cut again (one episode, one cut).
    pub last_cut: Option<Millis>,
    /// Average gap between bookings (ms, a moving average): the pace requests actually
    /// left at, which is under the rate when the queue runs dry.
    #[serde(default)]
    pub send_gap: f64,
    /// A refusal episode is open: it began with a decrease and ends at the first served
    /// answer to a request sent after it. Refusals in between (the limiter had not
    /// recovered when the hold ended) grow the hold, not the decrease.
    #[serde(default)]
    pub in_episode: bool,
    /// When the latest request was booked: answers read after a cut with nothing booked
    /// since belong to requests sent before it, whatever send time they are dated.
    #[serde(default)]
    pub booked_at: Option<Millis>,
    /// When the latest request known to have left actually left. A booking is not a
    /// departure when a send leaves late (a busy machine): the send gap is measured from
    /// this too, or a late send's booking would read as a long gap, a slow pace, and the
    /// next refusal would cut far below the pace the server refused. Not serialised: a
    /// fleet's commit hands it to the pacing record from the worker's memory, and the
    /// learning state every lease may carry stays as small as it was.
    #[serde(skip)]
    pub departed_at: Option<Millis>,
    /// When the last backoff hold was placed: failures of requests in flight then are the
    /// failure it answered, not a new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_at: Option<Millis>,
    /// Since when the host has been calm (no refusal, no hold): probes wait for it.
    pub calm_since: Millis,
    /// The latest send time of a served answer: failures of requests sent before it do not
    /// count towards a run.
    #[serde(default)]
    pub served_sent: Option<Millis>,
    /// Consecutive failed answers (5xx, connection, timeout).
    #[serde(default)]
    pub failures: u32,
    /// Since when the host has been failing or refusing at the minimum rate without a
    /// served answer in between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub troubled_since: Option<Millis>,
    /// Fast latency average (seconds).
    pub lat_fast: Option<f64>,
    /// Page latency baseline (seconds): the lowest the fast average has been over the
    /// last [`Tuning::latency_window_ms`](super::Tuning::latency_window_ms).
    #[serde(default)]
    pub lat_base: Option<f64>,
    /// The lowest fast average in the current half of the baseline window, and in the
    /// half before it (a windowed minimum in two halves: the baseline forgets a level
    /// between half a window and a window after it was last seen).
    #[serde(default)]
    pub lat_min: (Option<f64>, Option<f64>),
    /// When the current half of the baseline window began.
    #[serde(default)]
    pub lat_half_at: Millis,
    /// A latency episode is open (the server answers slower than twice its normal).
    #[serde(default)]
    pub slow: bool,
    /// The fast latency average when latency last eased the rate (seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_eased: Option<f64>,
    /// When latency last eased the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eased_at: Option<Millis>,
    /// Requests in flight the server's queue allows (`None`: no cap but the user's):
    /// set when the pages' latency shows our requests waiting behind each other, then
    /// moved by one at a time towards the most that do not wait (see
    /// [`Tuning::latency_knee`](super::Tuning::latency_knee)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_cap: Option<u32>,
    /// When the in-flight cap may move next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_cap_at: Option<Millis>,
    /// The fast latency average when the in-flight cap last moved (seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_cap_ref: Option<f64>,
    /// The pace a latency episode opened at and the rate before it (requests/s), while
    /// it is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lat_open: Option<(f64, f64)>,
    /// When the latency was last folded in.
    #[serde(default)]
    pub lat_at: Millis,
    /// When the rate last grew (growth is per elapsed time).
    pub grown_at: Millis,
    /// When the host's machine was made (the delivery rate of a young host is measured
    /// over its age).
    #[serde(default)]
    pub born: Millis,
    /// The end of the last hold longer than the delivery window: the delivery rate is
    /// measured from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_hold_end: Option<Millis>,
    /// What the server accepted, per 5-second bin over the last two minutes.
    #[serde(default)]
    pub delivery: Delivery,
    /// Where the server's quota window turns, from its RateLimit resets.
    #[serde(default)]
    pub edge: Option<WindowEdge>,
    /// Requests the server's quota still allows, by its last RateLimit reading, less the
    /// requests booked and not answered then or since (`None`: no reading yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_left: Option<i64>,
    /// The latest instant the window of that reading can turn, as an answer in it will
    /// announce it: the narrowed edge, plus a second when the resets are whole seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_turn_by: Option<Millis>,
    /// The requests booked spend the rest of the quota, and the answer that will say how
    /// long to wait has not been read: no send before the latest end it can announce.
    /// Without it, a send booked past the window's edge would leave before that answer is
    /// read and inside the wait it announces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent_until: Option<Millis>,
    /// When RateLimit headers last steered the rate: a host whose headers stop coming
    /// returns to learning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steered_at: Option<Millis>,
    /// Pseudo-random state for jitter (deterministic, so the machine stays pure).
    pub seed: u64,
}
