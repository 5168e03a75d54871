//! What a call gets and gives back: a [`Permit`] (or a [`Rejection`]),
//! and the [`Outcome`] that settles it.

use crate::ramp::TAG_LIMIT;
use crate::state::State;
use crate::time::Nanos;
use crate::window::{Buckets, Mark, Slots, Window};

/// A permission to run one call, to be settled with [`Breaker::complete`](super::Breaker::complete).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permit {
    /// The generation it was issued in.
    pub generation: u64,
    /// Whether it holds a half-open probe slot.
    pub probe: bool,
    /// A probe's cohort tag (`ramp::Cohort`); 0 for other permits.
    pub cohort: u32,
}

/// Bits of a generation that [`Permit::to_bits`] keeps: generations are
/// compared on these bits only (2^43 transitions never happen).
const GENERATION_MASK: u64 = (1 << 43) - 1;

/// Whether two generations are the same, as a permit's bits carry them.
pub(super) fn same_generation(a: u64, b: u64) -> bool {
    (a ^ b) & GENERATION_MASK == 0
}

impl Permit {
    /// The permit as one integer (for callers that keep permits as
    /// numbers): 43 bits of generation, 20 of cohort, 1 of probe.
    pub fn to_bits(self) -> u64 {
        ((self.generation & GENERATION_MASK) << 21) | (u64::from(self.cohort % TAG_LIMIT) << 1) | u64::from(self.probe)
    }

    /// Whether `self` and `other` come from one generation.
    pub fn same_generation(self, other: Permit) -> bool {
        same_generation(self.generation, other.generation)
    }

    /// The permit a call gets from a breaker whose [`Breaker::published`](super::Breaker::published)
    /// word is `word`, when one may be had without the lock: closed or
    /// disabled breakers admit every call and change nothing doing so.
    pub fn admitting(word: u64) -> Option<Self> {
        const CLOSED: u64 = State::Closed as u64;
        const DISABLED: u64 = State::Disabled as u64;
        match word & 7 {
            CLOSED | DISABLED => Some(Self { generation: word >> 3, probe: false, cohort: 0 }),
            _ => None,
        }
    }

    /// The inverse of [`Permit::to_bits`].
    pub fn from_bits(bits: u64) -> Self {
        Self { generation: bits >> 21, probe: bits & 1 == 1, cohort: ((bits >> 1) as u32) % TAG_LIMIT }
    }
}

/// What a half-open rejection tells the caller to wait (docs/semantics.md):
/// a probe slot frees when a probe finishes, at a time nobody knows, and
/// "retry now" made clients retry in a loop (`Retry-After: 0`) against a
/// breaker that was still rejecting.
pub const HALF_OPEN_RETRY_AFTER: Nanos = 1_000_000_000;

/// A rejected call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rejection {
    /// Open, half-open (no probe slot) or forced open.
    pub state: State,
    /// Time until probes may be admitted: [`HALF_OPEN_RETRY_AFTER`] in
    /// half-open, None when forced open.
    pub retry_after: Option<Nanos>,
}

/// The answer to [`Breaker::acquire`](super::Breaker::acquire).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    Allowed(Permit),
    Rejected(Rejection),
}

impl Decision {
    /// The decision for a call when the lock cannot be had (its holder is
    /// stuck), from the published word alone: closed and disabled admit,
    /// open and forced open reject, and half-open refuses (a probe slot
    /// cannot be taken without the lock). `half_open_at` is the published
    /// end of the open period (see [`Breaker::half_open_at`](super::Breaker::half_open_at)).
    pub fn unlocked(word: u64, half_open_at: Nanos, now: Nanos) -> Self {
        if let Some(p) = Permit::admitting(word) {
            return Decision::Allowed(p);
        }
        let (state, retry_after) = match word & 7 {
            w if w == State::HalfOpen as u64 => (State::HalfOpen, Some(HALF_OPEN_RETRY_AFTER)),
            w if w == State::ForcedOpen as u64 => (State::ForcedOpen, None),
            _ => (State::Open, Some(half_open_at.saturating_sub(now).max(0))),
        };
        Decision::Rejected(Rejection { state, retry_after })
    }
}

/// How a permitted call ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// Finished successfully after `duration_ns` nanoseconds.
    Success { duration_ns: f64 },
    /// Finished as a failure after `duration_ns` nanoseconds.
    Failure { duration_ns: f64 },
    /// Ended without an outcome (ignored error, killed thread…): nothing is
    /// recorded and a probe slot is given back.
    Released,
}

impl Outcome {
    /// How `w` counts this call; None when it ended without an outcome.
    #[inline]
    pub(super) fn mark<S: Slots, B: Buckets>(self, w: &Window<S, B>) -> Option<Mark> {
        match self {
            Outcome::Success { duration_ns } => Some(w.mark(duration_ns, true)),
            Outcome::Failure { duration_ns } => Some(w.mark(duration_ns, false)),
            Outcome::Released => None,
        }
    }
}
