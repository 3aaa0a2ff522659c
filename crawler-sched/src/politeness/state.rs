//! The whole state of one host: what resume keeps and what a fleet commits.

use serde::{Deserialize, Serialize};

use super::audit::Phase;
use super::edge::WindowEdge;
use super::estimate::SendLog;
use super::params::Millis;

/// The whole state of one host (serialisable: resume and the fleet keep it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostState {
    /// The pacing rate, requests/s.
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
    /// robots.txt Crawl-delay (ms), a floor on the gap.
    pub crawl_delay_ms: f64,
    /// Consecutive backoff holds (refusals without Retry-After, robots outages).
    pub backoff_level: u32,
    /// Consecutive 403 responses.
    pub forbidden: u32,
    /// Since when robots.txt has been unavailable.
    pub robots_down_since: Option<Millis>,
    /// Requests in flight.
    pub in_flight: u32,
    /// Where the adaptive search stands.
    pub phase: Phase,
    /// Best estimate of the rate the server sustains, once a refusal taught one.
    pub estimate: Option<f64>,
    /// A budget the server declared in RateLimit headers (requests/s), the stricter of
    /// it and the estimate wins.
    pub declared: Option<f64>,
    /// The lowest rate at which the server refused (an upper bound on its limit).
    pub ceiling: Option<f64>,
    /// Whether the estimate comes from a narrow fit (then the rate settles under it and
    /// probes rarely) or is a guess (then the rate climbs towards the ceiling).
    pub confident: bool,
    /// Whether the estimate is a narrow fit that explains several refusal episodes (see
    /// [`Tuning::verified_episodes`](super::Tuning::verified_episodes)): a bucket's rate,
    /// probed rarely, never fast.
    #[serde(default)]
    pub verified: bool,
    /// The fastest refill rate of a token-bucket fit narrow enough to pin the server's
    /// rate (see [`Tuning::pinned_fit`](super::Tuning::pinned_fit)): probes stay under it.
    /// Cleared when a later refusal leaves no bucket that explains the log.
    #[serde(default)]
    pub pinned: Option<f64>,
    /// Refusals in a row met while climbing without a trusted estimate (towards the
    /// lowest refused rate). Each one means the climb approached the limit from above, so
    /// the next climb stops a margin further under the refused rate. Back to 0 when an
    /// estimate is trusted, one less each time a rate holds through a calm period.
    #[serde(default)]
    pub climb_refusals: u32,
    /// The last rate that held through a calm period (a failed probe returns to it).
    pub safe_rate: Option<f64>,
    /// Responses to requests sent before this do not cut again (one episode, one cut).
    pub last_cut: Option<Millis>,
    /// When the latest request was booked: answers read after a cut with nothing booked
    /// since belong to requests sent before it, whatever send time they are dated.
    #[serde(default)]
    pub booked_at: Option<Millis>,
    /// When the last backoff hold was placed: refusals of requests in flight then are the
    /// refusal it answered, not a new one.
    #[serde(default)]
    pub backoff_at: Option<Millis>,
    /// Since when the host has been calm (no refusal, no easing): probes wait for it.
    pub calm_since: Millis,
    /// Calm needed before the next probe (doubles after a failed one).
    pub probe_calm_ms: f64,
    /// Fast and slow latency averages (seconds).
    pub lat_fast: Option<f64>,
    /// Baseline latency.
    pub lat_slow: Option<f64>,
    /// When the rate last grew (discovery growth is per elapsed time).
    pub grown_at: Millis,
    /// End of the last hold (the accepted rate is measured from here).
    pub active_since: Millis,
    /// The last refusal episode: when its active period began (the end of the hold
    /// before it) and the send time of its first refused request. The limiter had nothing
    /// left then, so what it accepted since is what it refilled.
    #[serde(default)]
    pub last_episode: Option<(Millis, Millis)>,
    /// Where the server's quota window turns, from its RateLimit resets.
    #[serde(default)]
    pub edge: Option<WindowEdge>,
    /// Requests the server's quota still allows, by its last RateLimit reading, less the
    /// requests booked and not answered then or since (`None`: no reading yet).
    #[serde(default)]
    pub quota_left: Option<i64>,
    /// The latest instant the window of that reading can turn, as an answer in it will
    /// announce it: the narrowed edge, plus a second when the resets are whole seconds
    /// (rounded up by the server, a reset read just before the edge says one second).
    #[serde(default)]
    pub quota_turn_by: Option<Millis>,
    /// The requests booked spend the rest of the quota, and the answer that will say how
    /// long to wait has not been read: no send before the latest end it can announce.
    /// The next RateLimit reading replaces it (with its own hold, when nothing remains).
    /// Without it, a send booked past the window's edge would leave before that answer
    /// is read and inside the wait it announces: in a fleet, when the worker holding the
    /// answer is starved of CPU; on a single crawler, when latency is longer than the time
    /// between the last request of a window and the edge.
    #[serde(default)]
    pub spent_until: Option<Millis>,
    /// What was sent and how it was answered.
    pub log: SendLog,
    /// Pseudo-random state for jitter (deterministic, so the machine stays pure).
    pub seed: u64,
}
