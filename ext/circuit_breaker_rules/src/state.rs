//! What a breaker is doing ([`State`]) and why it moved ([`Reason`]):
//! plain enums, low in the crate, so that the state machine (breaker/), the
//! fleet's mirror kept inside its record (mirror.rs) and the fleet's wire
//! codes (fleet/wire.rs) all name them without importing one another.

/// The breaker's states.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum State {
    /// Admits every call and watches the rates.
    #[default]
    Closed,
    /// Rejects every call until the open duration has passed.
    Open,
    /// Admits probes along the ramp.
    HalfOpen,
    /// Rejects every call until reset (manual).
    ForcedOpen,
    /// Admits every call, records, never trips, until reset (manual).
    Disabled,
}

impl State {
    /// The state in a [`Breaker::published`](crate::breaker::Breaker::published) word.
    pub fn published(word: u64) -> Self {
        [State::Closed, State::Open, State::HalfOpen, State::ForcedOpen, State::Disabled]
            .into_iter()
            .find(|s| *s as u64 == word & 7)
            .unwrap_or(State::Open)
    }
}

/// Why a transition happened.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reason {
    /// The error rate reached its threshold.
    ErrorRate,
    /// The slow-call rate reached its threshold.
    SlowCallRate,
    /// Half-open probes could no longer reach `reopen_rate`.
    ProbeFailed,
    /// The last ramp stage's probes reached `advance_rate`.
    ProbesPassed,
    /// The open duration passed.
    CoolDownElapsed,
    /// A half-open stage took longer than `half_open_timeout`.
    HalfOpenTimeout,
    /// A probe not settled within `probe_timeout` failed the stage.
    ProbeTimeout,
    /// `trip!`, `reset!`, `force_open!` or `disable!`.
    #[default]
    Manual,
    /// `consecutive_failures` calls failed in a row.
    ConsecutiveFailures,
}
