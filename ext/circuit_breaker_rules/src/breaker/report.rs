//! What a step reports: the [`Metrics`] of an instant, and the
//! [`Transitions`] it made.

use super::permit::HALF_OPEN_RETRY_AFTER;
use super::{Breaker, Phase};
use crate::config::Config;
use crate::counters::Counters;
use crate::state::{Reason, State};
use crate::time::Nanos;
use crate::window::{Buckets, Counts, Slots, Window};

/// The breaker and its window at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Metrics {
    pub state: State,
    pub counts: Counts,
    /// What happened since creation.
    pub counters: Counters,
    /// While open or half-open: the window that opened the breaker (entering
    /// open empties the window, so this is what a dashboard shows). None in
    /// the other states.
    pub tripped: Option<Counts>,
    /// The half-open ramp stage; None outside half-open.
    pub stage: Option<u32>,
    /// Share of calls admitted now: 1.0 closed or disabled, 0.0 open or
    /// forced open, the stage's share in half-open.
    pub admit_share: f64,
    /// Time until probes may be admitted: 0 closed or disabled,
    /// [`HALF_OPEN_RETRY_AFTER`] half-open; None when forced open.
    pub retry_after: Option<Nanos>,
}

/// One state change, with the metrics taken just after it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transition {
    pub from: State,
    pub to: State,
    pub reason: Reason,
    pub metrics: Metrics,
    /// The window just before the change (entering closed or open empties
    /// it): the rates that opened a breaker.
    pub window_before: Counts,
}

/// The state changes of one step: at most two (a timer, then the step's own).
/// Boxed: a step usually changes nothing, and then this is one empty word
/// (the hot path returns it from every step).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transitions(Option<Box<[Option<Transition>; 2]>>);

impl Transitions {
    pub(super) fn push(&mut self, t: Transition) {
        let slots = self.0.get_or_insert_with(Default::default);
        if let Some(slot) = slots.iter_mut().find(|s| s.is_none()) {
            *slot = Some(t);
        }
    }

    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The changes, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Transition> {
        self.0.iter().flat_map(|slots| slots.iter().flatten())
    }
}

impl Breaker {
    pub(super) fn snapshot<S: Slots, B: Buckets>(&self, w: &mut Window<S, B>, cfg: &Config, now: Nanos) -> Metrics {
        let (stage, admit_share, retry_after) = match &self.phase {
            Phase::Closed | Phase::Disabled => (None, 1.0, Some(0)),
            Phase::Open { .. } => (None, 0.0, Some(self.remaining(now))),
            Phase::ForcedOpen => (None, 0.0, None),
            Phase::HalfOpen(stage) => {
                (Some(stage.index), cfg.ramp_shares[stage.index as usize], Some(HALF_OPEN_RETRY_AFTER))
            }
        };
        let tripped = matches!(self.phase, Phase::Open { .. } | Phase::HalfOpen(_)).then_some(self.tripped);
        Metrics {
            state: self.state(),
            counts: w.counts(now),
            counters: self.counters,
            tripped,
            stage,
            admit_share,
            retry_after,
        }
    }
}
