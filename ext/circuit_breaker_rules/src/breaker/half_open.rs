//! The half-open stage as the state machine runs it: what a verdict of the
//! ramp (`ramp.rs`) leads to, a new round, a new stage.

use super::{Breaker, Phase, Transitions};
use crate::config::Config;
use crate::ramp::{Next, Stage, Verdict};
use crate::state::{Reason, State};
use crate::time::Nanos;
use crate::window::{Buckets, Slots, Window};

impl Breaker {
    /// Acts on a stage's verdict; a reopen is for `reopen_reason`.
    pub(super) fn judge<S: Slots, B: Buckets>(
        &mut self,
        verdict: Verdict,
        reopen_reason: Reason,
        w: &mut Window<S, B>,
        cfg: &Config,
        now: Nanos,
        out: &mut Transitions,
    ) {
        // A stage advances only once it has lasted min_stage_duration; a
        // round that passes earlier starts the stage over (docs/semantics.md).
        let Some(&Stage { index, entered_at, rounds_between, .. }) = self.stage() else { return };
        let lasted = now >= entered_at.saturating_add(cfg.min_stage_duration);
        // Between the rates a second round in a row: the dependency still
        // fails too often to advance (docs/semantics.md), and starting over
        // for good would keep rejecting most calls (`ramp::Next`).
        match Next::after(verdict, rounds_between, lasted) {
            Next::Stay => {}
            Next::Reopen => self.enter(State::Open, reopen_reason, w, cfg, now, out),
            Next::NewRound(rounds) => self.new_round(now, rounds),
            Next::Advance if (index as usize) + 1 < cfg.ramp.len() => {
                self.generation = self.generation.wrapping_add(1);
                self.phase = Phase::HalfOpen(Stage::new(index + 1, now, now));
            }
            Next::Advance => self.enter(State::Closed, Reason::ProbesPassed, w, cfg, now, out),
        }
    }

    /// The stage starts over: a new round with a new generation, the same
    /// share, a fresh quota, and the stage's entry time kept;
    /// `rounds_between` rounds in a row ended between the rates.
    fn new_round(&mut self, now: Nanos, rounds_between: u32) {
        if let Some(&Stage { index, entered_at, .. }) = self.stage() {
            self.generation = self.generation.wrapping_add(1);
            let mut stage = Stage::new(index, entered_at, now);
            stage.rounds_between = rounds_between;
            self.phase = Phase::HalfOpen(stage);
        }
    }

    /// Half-open at stage `index` from now: a fleet's stage (fleet/host.rs), a
    /// new generation with a fresh quota.
    pub(crate) fn enter_stage<S: Slots, B: Buckets>(
        &mut self,
        index: u32,
        reason: Reason,
        w: &mut Window<S, B>,
        cfg: &Config,
        now: Nanos,
        out: &mut Transitions,
    ) {
        if self.state() != State::HalfOpen {
            self.enter(State::HalfOpen, reason, w, cfg, now, out);
        }
        self.generation = self.generation.wrapping_add(1);
        self.phase = Phase::HalfOpen(Stage::new(index.min(cfg.ramp.len().saturating_sub(1) as u32), now, now));
    }
}
