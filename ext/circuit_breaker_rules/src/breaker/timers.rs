//! The timers: open to half-open, a round's `half_open_timeout`, a probe's
//! `probe_timeout`; lazy, applied at the start of every step.

use super::{Breaker, Phase, Transitions};
use crate::config::Config;
use crate::ramp::Verdict;
use crate::state::{Reason, State};
use crate::time::Nanos;
use crate::window::{Buckets, Slots, Window};

impl Breaker {
    /// Applies the timers that are due. Inlined: only open and half-open
    /// breakers have timers, and the closed call path should not pay a
    /// function call to learn that (docs/performance.md).
    #[inline]
    pub(super) fn apply_timers<S: Slots, B: Buckets>(
        &mut self,
        w: &mut Window<S, B>,
        cfg: &Config,
        now: Nanos,
        out: &mut Transitions,
    ) {
        if matches!(self.phase, Phase::Open { .. } | Phase::HalfOpen(_)) {
            self.run_timers(w, cfg, now, out);
        }
    }

    fn run_timers<S: Slots, B: Buckets>(
        &mut self,
        w: &mut Window<S, B>,
        cfg: &Config,
        now: Nanos,
        out: &mut Transitions,
    ) {
        self.clamp_ahead(now);
        match self.phase {
            Phase::Open { opened_at, open_for } if now >= opened_at.saturating_add(open_for) => {
                self.enter(State::HalfOpen, Reason::CoolDownElapsed, w, cfg, now, out);
            }
            Phase::HalfOpen(stage) => {
                let round_deadline = cfg.half_open_timeout.map(|t| stage.started_at.saturating_add(t));
                if let Some(timeout) = cfg.probe_timeout {
                    // Probes due before the round's own deadline fail first.
                    let until = round_deadline.map_or(now, |d| now.min(d.saturating_sub(1)));
                    self.expire_probes(timeout, until, w, cfg, now, out);
                }
                // Probes that timed out may have started a new round.
                let started_at = self.stage().map(|s| s.started_at);
                let round_deadline = cfg.half_open_timeout.zip(started_at).map(|(t, s)| s.saturating_add(t));
                if round_deadline.is_some_and(|d| now >= d) {
                    self.enter(State::Open, Reason::HalfOpenTimeout, w, cfg, now, out);
                }
            }
            _ => {}
        }
    }

    /// Moves each time a timer counts from, when it is later than `now`, to
    /// `now`: no deadline then lies further ahead than its own length
    /// (`open_for`, `half_open_timeout`, `probe_timeout`,
    /// `min_stage_duration`). The clock goes back when a test's time
    /// helpers move it back (`travel_back`, docs/testing.md): a breaker
    /// opened a year ahead is then open for `open_for` from now, not for a
    /// year. A step whose `now` was read just before another thread's step
    /// moves a start back by that little.
    fn clamp_ahead(&mut self, now: Nanos) {
        match &mut self.phase {
            Phase::Open { opened_at, .. } => {
                *opened_at = (*opened_at).min(now);
                self.fleet.clamp_ahead(now);
            }
            Phase::HalfOpen(stage) => stage.clamp_ahead(now),
            _ => {}
        }
    }

    /// Counts the probes not settled `timeout` after their admission (as of
    /// `until`) as failed probes, oldest first, until the stage decides.
    fn expire_probes<S: Slots, B: Buckets>(
        &mut self,
        timeout: Nanos,
        until: Nanos,
        w: &mut Window<S, B>,
        cfg: &Config,
        now: Nanos,
        out: &mut Transitions,
    ) {
        let generation = self.generation;
        while self.generation == generation {
            let Some(stage) = self.stage_mut() else { return };
            let due = stage.expire(timeout, until);
            if due == 0 {
                return;
            }
            for _ in 0..due {
                // Recorded as what it was: a call that failed after at least `timeout`.
                w.record(timeout as f64, false, now);
                let Some(stage) = self.stage_mut() else { return };
                let verdict = stage.finish(false, cfg.half_open_calls, cfg.advance_rate, cfg.reopen_rate);
                self.fleet.probe_finished(false);
                let verdict = self.fleet.restrain(verdict);
                if verdict != Verdict::Pending {
                    self.judge(verdict, Reason::ProbeTimeout, w, cfg, now, out);
                    break;
                }
            }
        }
    }
}
