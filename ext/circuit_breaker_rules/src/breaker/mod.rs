//! The breaker's state machine.
//!
//! [`Breaker`] is the whole mutable state of a breaker besides its window:
//! a fixed-size record of plain data, meant to live behind one lock (in a
//! process today, in memory shared by processes later). Every entry point
//! takes the window, the configuration and `now`, applies the timers that
//! are due, does its step and returns what changed, so the caller can
//! notify listeners after releasing the lock.
//!
//! Invariants:
//! - every state change and every ramp stage starts a new generation; an
//!   outcome carrying an older generation is dropped, and probe slots of an
//!   older generation no longer count;
//! - entering closed or open empties the window;
//! - timers are lazy: a breaker opened at `t` is half-open from
//!   `t + open_for` on, whenever that is noticed; a stage begins when it is
//!   entered (noticed), and a round of it times out `half_open_timeout`
//!   after the round began; a probe not settled `probe_timeout` after its
//!   admission counts as a failed probe (the earlier deadline first);
//! - a stage advances only when a round passes at or after
//!   `entered_at + min_stage_duration`; an earlier pass starts a new round;
//! - after a step no timer counts from a time later than its `now`, so no
//!   deadline lies further ahead than its own length (the clock goes back
//!   when a test travels back, docs/testing.md).
//!
//! By concept, one file each: the values a call gets and gives back
//! (`permit.rs`), what a step reports (`report.rs`), the timers
//! (`timers.rs`), a closed breaker's rule for opening (`closed.rs`), the
//! half-open stage's verdicts (`half_open.rs`) and entering a state
//! (`enter.rs`); the record and its entry points here.

mod closed;
mod enter;
mod half_open;
mod permit;
mod report;
mod timers;

pub use closed::trip_reason;
pub use permit::{Decision, Outcome, Permit, Rejection, HALF_OPEN_RETRY_AFTER};
pub use report::{Metrics, Transition, Transitions};

use crate::concurrency::AdaptiveLimit;
use crate::config::{Concurrency, Config};
use crate::counters::Counters;
use crate::hashing::hash_layout;
use crate::mirror::HostSide;
use crate::ramp::{Cohort, Stage};
use crate::state::{Reason, State};
use crate::time::Nanos;
use crate::window::{Buckets, Counts, Slots, Window};
use permit::same_generation;

/// A breaker's mutable state, besides its window. Plain data, stored in
/// shared files: its layout is pinned (`repr(C)`) and hashed (`layout`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Breaker {
    /// The state, with what only that state has.
    phase: Phase,
    generation: u64,
    /// The backed-off length of the last opening before jitter, which the
    /// next reopen multiplies; 0 once closed.
    open_base: Nanos,
    counters: Counters,
    /// The window just before the last opening (see [`Metrics::tripped`]).
    tripped: Counts,
    rng: u64,
    /// The fleet's view and this host's part in it (docs/fleet.md);
    /// inert unless the breaker was attached to a fleet.
    pub(crate) fleet: HostSide,
    /// Calls recorded as failures in a row while closed (0 after a success
    /// and at every transition): `consecutive_failures` opens on it.
    failure_streak: u32,
    /// The adaptive concurrency cap (`max_concurrent: :adaptive`,
    /// crate::concurrency), fed by every settled call; inert otherwise.
    adaptive: AdaptiveLimit,
}

/// A breaker's state with the data only that state has. Plain data, stored
/// in shared files: its layout is pinned (`repr(C, u8)`: a tag byte, then
/// the variant's fields as a `repr(C)` struct) and hashed.
#[repr(C, u8)]
#[derive(Debug, Clone, Copy, PartialEq)]
// A stage is large, but a record is plain data in place (shared memory
// included): nothing in it may point elsewhere.
#[allow(clippy::large_enum_variant)]
enum Phase {
    Closed,
    /// Rejects until `opened_at + open_for` (`open_for`: the length of this
    /// opening, backed off and jittered).
    Open {
        opened_at: Nanos,
        open_for: Nanos,
    },
    /// Runs a stage of the ramp.
    HalfOpen(Stage),
    ForcedOpen,
    Disabled,
}

impl Phase {
    #[inline]
    fn state(&self) -> State {
        match self {
            Phase::Closed => State::Closed,
            Phase::Open { .. } => State::Open,
            Phase::HalfOpen(_) => State::HalfOpen,
            Phase::ForcedOpen => State::ForcedOpen,
            Phase::Disabled => State::Disabled,
        }
    }
}

impl Breaker {
    /// A closed breaker. `seed` feeds the jitter of open durations.
    pub fn new(seed: u64) -> Self {
        Self {
            phase: Phase::Closed,
            generation: 0,
            open_base: 0,
            counters: Counters::default(),
            tripped: Counts::default(),
            rng: seed,
            fleet: HostSide::default(),
            failure_streak: 0,
            adaptive: AdaptiveLimit::default(),
        }
    }

    /// The current state, without applying timers.
    pub fn state(&self) -> State {
        self.phase.state()
    }

    /// The half-open stage (None unless half-open).
    pub(crate) fn stage(&self) -> Option<&Stage> {
        match &self.phase {
            Phase::HalfOpen(stage) => Some(stage),
            _ => None,
        }
    }

    fn stage_mut(&mut self) -> Option<&mut Stage> {
        match &mut self.phase {
            Phase::HalfOpen(stage) => Some(stage),
            _ => None,
        }
    }

    /// The length of the current opening (0 unless open).
    fn open_for(&self) -> Nanos {
        match self.phase {
            Phase::Open { open_for, .. } => open_for,
            _ => 0,
        }
    }

    /// The current generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// State and generation in one word, for [`Permit::admitting`]. Owners
    /// store it in an atomic after every step, under the lock. A generation
    /// that does not fit (never in practice) publishes "ask the lock".
    pub fn published(&self) -> u64 {
        if self.generation >> 61 == 0 {
            (self.generation << 3) | self.state() as u64
        } else {
            State::Open as u64
        }
    }

    /// When an open breaker turns half-open (None unless open): the retry
    /// time of a call rejected from the published state alone.
    pub fn half_open_at(&self) -> Option<Nanos> {
        match self.phase {
            Phase::Open { opened_at, open_for } => Some(opened_at.saturating_add(open_for)),
            _ => None,
        }
    }

    /// Adds the layout of the breaker's state (see
    /// `circuit_breaker_core::shm::layout_hash`); keep the field list whole.
    pub fn layout(h: crate::hashing::Fnv) -> crate::hashing::Fnv {
        let h = hash_layout!(h, enum State);
        let h = hash_layout!(h, enum Phase);
        let h = hash_layout!(
            h,
            Breaker { phase, generation, open_base, counters, tripped, rng, fleet, failure_streak, adaptive }
        );
        let h = crate::concurrency::layout(h);
        let h = hash_layout!(h, crate::counters::Counters { calls, successes, failures, slow, rejected, opened });
        let h = crate::mirror::layout(h);
        crate::ramp::layout(h)
    }

    /// The concurrency cap now: the fixed one, or the adaptive rule's
    /// current one; None without a cap. Owners publish it where admission
    /// reads it after every step that settles a call.
    pub fn concurrency_limit(&self, cfg: &Config) -> Option<u32> {
        match &cfg.max_concurrent {
            Concurrency::Unlimited => None,
            Concurrency::Fixed(n) => Some(*n),
            Concurrency::Adaptive(s) => Some(self.adaptive.current(s)),
        }
    }

    /// Half-open probes currently running in this generation.
    pub fn probes_in_flight(&self) -> u32 {
        self.stage().map_or(0, Stage::in_flight)
    }

    /// In a forked child: the probes other threads of the parent were
    /// running will never report back (those threads do not exist here), so
    /// their slots are freed. The forking thread's own permits stay valid,
    /// and keep their slots.
    pub fn after_fork(&mut self) {
        if let Some(stage) = self.stage_mut() {
            stage.after_fork(Cohort::thread_id());
        }
        // The child is a host of its own: it sends for its copy at once.
        self.fleet.after_fork();
    }

    /// Applies the timers due at `now`.
    pub fn tick<S: Slots, B: Buckets>(&mut self, w: &mut Window<S, B>, cfg: &Config, now: Nanos) -> Transitions {
        let mut out = Transitions::default();
        self.apply_timers(w, cfg, now, &mut out);
        out
    }

    /// Asks to run one call.
    pub fn acquire<S: Slots, B: Buckets>(
        &mut self,
        w: &mut Window<S, B>,
        cfg: &Config,
        now: Nanos,
    ) -> (Decision, Transitions) {
        let mut out = Transitions::default();
        self.apply_timers(w, cfg, now, &mut out);
        let generation = self.generation;
        let decision = match &mut self.phase {
            Phase::Closed | Phase::Disabled => Decision::Allowed(Permit { generation, probe: false, cohort: 0 }),
            Phase::HalfOpen(stage) => {
                let share = cfg.ramp[stage.index as usize];
                let quota = self.fleet.probe_quota(cfg.half_open_calls);
                match stage.admit(share, quota, now, Cohort::thread_id()) {
                    Some(cohort) => Decision::Allowed(Permit { generation, probe: true, cohort }),
                    None => {
                        self.fleet.starve();
                        self.reject(State::HalfOpen, Some(HALF_OPEN_RETRY_AFTER))
                    }
                }
            }
            Phase::Open { .. } => self.reject(State::Open, Some(self.remaining(now))),
            Phase::ForcedOpen => self.reject(State::ForcedOpen, None),
        };
        (decision, out)
    }

    /// Settles a permitted call finished at `now`, begun with `in_flight`
    /// calls in flight (its own included; 0: not counted). An outcome from
    /// an older generation, or of a probe that timed out, is dropped from
    /// the window; its latency still feeds the adaptive cap (it says how
    /// fast the dependency answers, whatever the breaker's state).
    /// Inlined into each caller's locked step, one native call fewer on the
    /// success path (docs/performance.md).
    #[inline(always)]
    pub fn complete<S: Slots, B: Buckets>(
        &mut self,
        w: &mut Window<S, B>,
        cfg: &Config,
        permit: Permit,
        outcome: Outcome,
        now: Nanos,
        in_flight: u32,
    ) -> Transitions {
        let mut out = Transitions::default();
        self.apply_timers(w, cfg, now, &mut out);
        if let Concurrency::Adaptive(s) = &cfg.max_concurrent {
            match outcome {
                Outcome::Success { duration_ns } => self.adaptive.sample(s, duration_ns, true, in_flight),
                Outcome::Failure { duration_ns } => self.adaptive.sample(s, duration_ns, false, in_flight),
                Outcome::Released => {}
            }
        }
        let mark = outcome.mark(w);
        self.counters.settled(mark);
        if !same_generation(permit.generation, self.generation) {
            return out;
        }
        if matches!(self.phase, Phase::Closed | Phase::Disabled) {
            if let Some(m) = mark {
                self.record_closed(w, cfg, m, now, &mut out);
            }
            return out;
        }
        let Some(stage) = self.stage_mut() else { return out };
        if !permit.probe || !stage.settle(permit.cohort) {
            return out;
        }
        match mark {
            None => stage.release(),
            Some(m) => {
                w.add(m, now);
                let passed = !m.failure && !m.slow;
                let verdict = stage.finish(passed, cfg.half_open_calls, cfg.advance_rate, cfg.reopen_rate);
                self.fleet.probe_finished(passed);
                self.judge(self.fleet.restrain(verdict), Reason::ProbeFailed, w, cfg, now, &mut out);
            }
        }
        out
    }

    /// Gives back a permit whose call never ran (refused at the
    /// concurrency cap after the breaker admitted it): a probe's slot is
    /// freed, and nothing is counted, since the call counts as rejected.
    pub fn give_back<S: Slots, B: Buckets>(
        &mut self,
        w: &mut Window<S, B>,
        cfg: &Config,
        permit: Permit,
        now: Nanos,
    ) -> Transitions {
        let mut out = Transitions::default();
        self.apply_timers(w, cfg, now, &mut out);
        if permit.probe && same_generation(permit.generation, self.generation) {
            if let Some(stage) = self.stage_mut() {
                if stage.settle(permit.cohort) {
                    stage.release();
                }
            }
        }
        out
    }

    /// Records an outcome that came without a permit: counted while closed
    /// or disabled, ignored otherwise.
    pub fn record_unpermitted<S: Slots, B: Buckets>(
        &mut self,
        w: &mut Window<S, B>,
        cfg: &Config,
        outcome: Outcome,
        now: Nanos,
    ) -> Transitions {
        let mut out = Transitions::default();
        self.apply_timers(w, cfg, now, &mut out);
        if matches!(self.phase, Phase::Closed | Phase::Disabled) {
            let mark = outcome.mark(w);
            self.counters.settled(mark);
            if let Some(m) = mark {
                self.record_closed(w, cfg, m, now, &mut out);
            }
        }
        out
    }

    /// Opens now for `open_duration`, without backoff or jitter.
    pub fn trip<S: Slots, B: Buckets>(&mut self, w: &mut Window<S, B>, cfg: &Config, now: Nanos) -> Transitions {
        self.manual(State::Open, w, cfg, now)
    }

    /// Closes now, empties the window, and starts the adaptive cap afresh
    /// (at `adaptive_initial`): a breaker as new, as a test suite resetting
    /// its breakers between examples expects.
    pub fn reset<S: Slots, B: Buckets>(&mut self, w: &mut Window<S, B>, cfg: &Config, now: Nanos) -> Transitions {
        self.adaptive = AdaptiveLimit::default();
        self.manual(State::Closed, w, cfg, now)
    }

    /// Rejects everything until reset.
    pub fn force_open<S: Slots, B: Buckets>(&mut self, w: &mut Window<S, B>, cfg: &Config, now: Nanos) -> Transitions {
        self.manual(State::ForcedOpen, w, cfg, now)
    }

    /// Admits everything, records, never trips, until reset.
    pub fn disable<S: Slots, B: Buckets>(&mut self, w: &mut Window<S, B>, cfg: &Config, now: Nanos) -> Transitions {
        self.manual(State::Disabled, w, cfg, now)
    }

    /// Applies the timers due at `now`, then describes the breaker.
    pub fn metrics<S: Slots, B: Buckets>(
        &mut self,
        w: &mut Window<S, B>,
        cfg: &Config,
        now: Nanos,
    ) -> (Metrics, Transitions) {
        let out = self.tick(w, cfg, now);
        (self.snapshot(w, cfg, now), out)
    }

    /// Describes the breaker at `now` without applying the timers that are
    /// due: a snapshot that changes nothing (no transition), as `inspect`
    /// shows it. A breaker whose open duration has passed still reads open,
    /// with nothing left to wait.
    pub fn peek<S: Slots, B: Buckets>(&self, w: &mut Window<S, B>, cfg: &Config, now: Nanos) -> Metrics {
        self.snapshot(w, cfg, now)
    }

    fn manual<S: Slots, B: Buckets>(
        &mut self,
        to: State,
        w: &mut Window<S, B>,
        cfg: &Config,
        now: Nanos,
    ) -> Transitions {
        let mut out = Transitions::default();
        self.apply_timers(w, cfg, now, &mut out);
        self.enter(to, Reason::Manual, w, cfg, now, &mut out);
        self.fleet.command(to, self.open_for());
        out
    }

    fn reject(&mut self, state: State, retry_after: Option<Nanos>) -> Decision {
        self.counters.rejected();
        Decision::Rejected(Rejection { state, retry_after })
    }

    pub(crate) fn remaining(&self, now: Nanos) -> Nanos {
        self.half_open_at().map_or(0, |at| at.saturating_sub(now).max(0))
    }
}

// Named *_tests.rs like the core's other test files, so a search of the
// library's own code for panics (unwrap, expect) can leave tests out.
#[cfg(test)]
#[path = "breaker_tests.rs"]
mod tests;
