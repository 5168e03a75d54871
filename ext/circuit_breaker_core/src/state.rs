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

use crate::clock::Nanos;
use crate::config::Config;
use crate::counters::Counters;
use crate::mirror::HostSide;
use crate::ramp::{step, Cohort, Stage, Step, Verdict, TAG_LIMIT};
pub use crate::states::{Reason, State};
use crate::window::{Buckets, Counts, Mark, Slots, Window};

/// A permission to run one call, to be settled with [`Breaker::complete`].
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
fn same_generation(a: u64, b: u64) -> bool {
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

    /// The permit a call gets from a breaker whose [`Breaker::published`]
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

/// The answer to [`Breaker::acquire`].
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
    /// end of the open period (see [`Breaker::half_open_at`]).
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
    fn mark<S: Slots, B: Buckets>(self, w: &Window<S, B>) -> Option<Mark> {
        match self {
            Outcome::Success { duration_ns } => Some(w.mark(duration_ns, true)),
            Outcome::Failure { duration_ns } => Some(w.mark(duration_ns, false)),
            Outcome::Released => None,
        }
    }
}

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
    fn push(&mut self, t: Transition) {
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
        }
    }

    /// The current state, without applying timers.
    pub fn state(&self) -> State {
        self.phase.state()
    }

    /// The half-open stage (None unless half-open).
    fn stage(&self) -> Option<&Stage> {
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
    /// [`crate::shm::layout_hash`]); keep the field list whole.
    pub(crate) fn layout(h: crate::hashing::Fnv) -> crate::hashing::Fnv {
        let h = crate::hash_layout!(h, enum State);
        let h = crate::hash_layout!(h, enum Phase);
        let h = crate::hash_layout!(
            h,
            Breaker { phase, generation, open_base, counters, tripped, rng, fleet, failure_streak }
        );
        let h =
            crate::hash_layout!(h, crate::counters::Counters { calls, successes, failures, slow, rejected, opened });
        let h = crate::mirror::layout(h);
        crate::ramp::layout(h)
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

    /// Settles a permitted call finished at `now`. An outcome from an
    /// older generation, or of a probe that timed out, is dropped.
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
    ) -> Transitions {
        let mut out = Transitions::default();
        self.apply_timers(w, cfg, now, &mut out);
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

    /// Closes now and empties the window.
    pub fn reset<S: Slots, B: Buckets>(&mut self, w: &mut Window<S, B>, cfg: &Config, now: Nanos) -> Transitions {
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

    /// Applies the timers that are due. Inlined: only open and half-open
    /// breakers have timers, and the closed call path should not pay a
    /// function call to learn that (docs/performance.md).
    #[inline]
    fn apply_timers<S: Slots, B: Buckets>(
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

    #[inline(always)]
    fn record_closed<S: Slots, B: Buckets>(
        &mut self,
        w: &mut Window<S, B>,
        cfg: &Config,
        m: Mark,
        now: Nanos,
        out: &mut Transitions,
    ) {
        w.add(m, now);
        if !matches!(self.phase, Phase::Closed) {
            return;
        }
        self.failure_streak = if m.failure { self.failure_streak.saturating_add(1) } else { 0 };
        // A dependency gone hard down is caught whatever the window holds,
        // below min_calls too (docs/semantics.md).
        let streak = cfg.consecutive_failures.is_some_and(|n| self.failure_streak >= n);
        let reason =
            trip_reason(cfg, &w.counts(now), w.capacity()).or_else(|| streak.then_some(Reason::ConsecutiveFailures));
        if let Some(reason) = reason {
            self.enter(State::Open, reason, w, cfg, now, out);
            // A fleet host keeps reporting what it opened with (fleet.rs).
            self.fleet.opened_alone(self.tripped, reason, now, self.generation);
        }
    }

    /// Acts on a stage's verdict; a reopen is for `reopen_reason`.
    fn judge<S: Slots, B: Buckets>(
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
        // for good would keep rejecting most calls (`ramp::step`).
        match step(verdict, rounds_between, lasted) {
            Step::Stay => {}
            Step::Reopen => self.enter(State::Open, reopen_reason, w, cfg, now, out),
            Step::NewRound(rounds) => self.new_round(now, rounds),
            Step::Advance if (index as usize) + 1 < cfg.ramp.len() => {
                self.generation = self.generation.wrapping_add(1);
                self.phase = Phase::HalfOpen(Stage::new(index + 1, now, now));
            }
            Step::Advance => self.enter(State::Closed, Reason::ProbesPassed, w, cfg, now, out),
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

    /// Half-open at stage `index` from now: a fleet's stage (fleet.rs), a
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

    fn enter<S: Slots, B: Buckets>(
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
    /// remaining time, fleet.rs), else by the backoff rules.
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

    fn snapshot<S: Slots, B: Buckets>(&self, w: &mut Window<S, B>, cfg: &Config, now: Nanos) -> Metrics {
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

/// Why a window's counts open a closed breaker, if they do: at least
/// `min_calls` calls (clamped to what the window can hold; None: no limit)
/// and a rate at its threshold (docs/semantics.md). A host's window and the
/// fleet's sum (fleet.rs) are judged by this one rule.
pub fn trip_reason(cfg: &Config, counts: &Counts, capacity: Option<u32>) -> Option<Reason> {
    let min_calls = cfg.min_calls.min(capacity.unwrap_or(u32::MAX));
    // Thresholds are > 0, so a zero count can never reach one: the common
    // healthy case skips the divisions.
    if counts.total < u64::from(min_calls) {
        None
    } else if counts.failures > 0 && counts.error_rate() >= cfg.error_rate_threshold {
        Some(Reason::ErrorRate)
    } else if counts.slow_calls > 0 && counts.slow_call_rate() >= cfg.slow_rate_threshold {
        Some(Reason::SlowCallRate)
    } else {
        None
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
