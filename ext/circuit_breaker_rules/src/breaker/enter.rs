//! Entering a state: a new generation, the window emptied on entering
//! closed or open, the length of an opening (backoff, jitter).

use super::{Breaker, Phase, Transition, Transitions};
use crate::config::Config;
use crate::ramp::Stage;
use crate::state::{Reason, State};
use crate::time::Nanos;
use crate::window::{Buckets, Slots, Window};

impl Breaker {
    pub(super) fn enter<S: Slots, B: Buckets>(
        &mut self,
        to: State,
        reason: Reason,
        w: &mut Window<S, B>,
        cfg: &Config,
        now: Nanos,
        out: &mut Transitions,
    ) {
        self.enter_for(to, reason, None, w, cfg, now, out);
    }

    /// Enters `to`; an opening lasts `open_for` when given (a fleet's
    /// remaining time, fleet/host.rs), else by the backoff rules.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn enter_for<S: Slots, B: Buckets>(
        &mut self,
        to: State,
        reason: Reason,
        open_for: Option<Nanos>,
        w: &mut Window<S, B>,
        cfg: &Config,
        now: Nanos,
        out: &mut Transitions,
    ) {
        let from = self.state();
        let window_before = w.counts(now);
        self.generation = self.generation.wrapping_add(1);
        self.failure_streak = 0;
        self.phase = match to {
            State::Closed => {
                w.reset();
                self.open_base = 0;
                Phase::Closed
            }
            State::Open => {
                if from != State::Open {
                    self.counters.opened();
                    // A half-open stage that timed out before any probe
                    // finished keeps the rates that opened it before.
                    if !(from == State::HalfOpen && window_before.total == 0) {
                        self.tripped = window_before;
                    }
                }
                w.reset();
                let open_for = match open_for {
                    Some(t) => t.max(1),
                    None => self.next_open_duration(from, reason, cfg),
                };
                Phase::Open { opened_at: now, open_for }
            }
            State::HalfOpen => Phase::HalfOpen(Stage::new(0, now, now)),
            State::ForcedOpen => Phase::ForcedOpen,
            State::Disabled => Phase::Disabled,
        };
        if from != to {
            out.push(Transition { from, to, reason, metrics: self.snapshot(w, cfg, now), window_before });
        }
    }

    /// The first opening lasts `open_duration`; each reopen from half-open
    /// multiplies the last one by `backoff`, up to `max_open_duration`.
    /// Jitter shortens all but manual openings.
    fn next_open_duration(&mut self, from: State, reason: Reason, cfg: &Config) -> Nanos {
        let base = if from == State::HalfOpen && reason != Reason::Manual && self.open_base > 0 {
            cfg.backed_off(self.open_base)
        } else {
            cfg.open_duration
        };
        self.open_base = base;
        if reason == Reason::Manual || cfg.jitter == 0.0 {
            return base;
        }
        let cut = (base as f64 * cfg.jitter * self.next_unit()) as Nanos;
        (base - cut).max(1)
    }

    /// A pseudo-random number in [0, 1) (splitmix64), mixed with the
    /// process id so that forked processes that opened together spread out.
    fn next_unit(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng ^ (u64::from(std::process::id()) << 32);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}
