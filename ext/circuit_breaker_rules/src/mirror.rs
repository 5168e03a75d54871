//! The fleet's mirror in a breaker's record: what this host follows of the
//! fleet, the probe slots it was granted, and the command or proposal that
//! waits for the next send (docs/fleet.md). Plain data inside
//! [`Breaker`](crate::breaker::Breaker), under the record's lock; the state
//! machine consults it, the host's side of the fleet (`fleet/host.rs`)
//! fills it.

use crate::hashing::hash_layout;
use crate::ramp::Verdict;
use crate::state::{Reason, State};
use crate::time::Nanos;
use crate::window::Counts;

/// A value or nothing, as plain data: Rust's `Option` has a layout of
/// Rust's own choosing, and what a shared file holds must have a pinned one.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Maybe<T> {
    present: bool,
    value: T,
}

impl<T: Copy + Default> Maybe<T> {
    /// Nothing.
    pub fn none() -> Self {
        Self::default()
    }

    /// The value, if there is one.
    pub fn get(&self) -> Option<T> {
        self.present.then_some(self.value)
    }

    pub fn is_some(&self) -> bool {
        self.present
    }
}

impl<T: Default> From<Option<T>> for Maybe<T> {
    fn from(v: Option<T>) -> Self {
        match v {
            Some(value) => Self { present: true, value },
            None => Self { present: false, value: T::default() },
        }
    }
}

/// A manual action waiting for the next send: the state it set, and how
/// long an opening lasts (0 otherwise).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Command {
    pub to: State,
    pub open_for: Nanos,
}

/// A change of the fleet state a host sends: a proposal (compare-and-set
/// on `expected`) or a command (unconditional: manual actions).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Proposal {
    /// Nothing: a command.
    pub expected: Maybe<u64>,
    pub state: State,
    pub reason: Reason,
    /// How long an opening lasts (0 otherwise).
    pub open_for: Nanos,
    /// The backed-off length the next reopen multiplies.
    pub open_base: Nanos,
    pub stage: u32,
    /// Rounds in a row of this stage that ended between the rates
    /// (`ramp::step`): the fleet keeps them with its state.
    pub rounds_between: u32,
}

/// An opening of this host on its own window (docs/fleet.md, "When hosts
/// open alone"): the counts it opened with, sent instead of its emptied
/// window while the opening lasts and the fleet has not opened since.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Alone {
    pub counts: Counts,
    pub reason: Reason,
    /// When it opened (the host's clock), and the breaker's generation
    /// then: any later change of the host's state ends it.
    pub at: Nanos,
    pub generation: u64,
    /// The fleet state the host followed then: only a later fleet opening
    /// ends it.
    pub epoch: u64,
    pub version: u64,
}

/// The host's side of a fleet breaker. Plain data, inside the breaker's
/// record (so a `shared:` breaker has one per host).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HostSide {
    /// A fleet breaker: manual actions become fleet commands.
    pub(crate) attached: bool,
    /// The last send succeeded.
    pub(crate) connected: bool,
    /// The fleet state last followed.
    pub(crate) epoch: u64,
    pub(crate) version: u64,
    /// Enforcing a fleet opening or half-open: probes only within grants.
    pub(crate) following: bool,
    /// A push showed a fleet state of another epoch (its keys rebuilt):
    /// the next send goes, idle or not, until a reply comes.
    pub(crate) resync: bool,
    /// The fleet stage whose probes this host counts, and its slots.
    pub(crate) stage_generation: u64,
    pub(crate) granted: u32,
    /// When the fleet last granted this host more slots: unused ones are
    /// kept until [`Breaker::fleet_send`](crate::breaker::Breaker::fleet_send)'s hold
    /// has passed since (docs/fleet.md, "Probes across hosts").
    pub(crate) granted_at: Nanos,
    /// Calls that found no slot in the followed stage since the last send
    /// (they want one).
    pub(crate) starved: u32,
    pub(crate) passed: u32,
    pub(crate) failed: u32,
    /// A manual action waiting for the next send.
    pub(crate) command: Maybe<Command>,
    /// Counts manual actions; `command_sent` is the count a report
    /// carried, so a reply clears only a command it answers (an action
    /// taken while a send was in flight goes out with the next one).
    pub(crate) command_seq: u32,
    pub(crate) command_sent: u32,
    /// A proposal decided from the last reply, for the next send.
    pub(crate) proposal: Maybe<Proposal>,
    /// The process that sends for this record (one per host with
    /// `shared:`), and when it last claimed it; 0: nobody yet.
    pub(crate) syncer_pid: u32,
    pub(crate) syncer_beat: Nanos,
    /// This host's own opening, while its counts are still sent.
    pub(crate) alone: Maybe<Alone>,
    /// The fleet generation of the last `reset!` this host's window
    /// follows (its reports count only in it).
    pub(crate) reset_generation: u64,
}

/// Adds the layout of [`HostSide`] (see `circuit_breaker_core::shm::layout_hash`); keep
/// the field list whole.
pub(crate) fn layout(h: crate::hashing::Fnv) -> crate::hashing::Fnv {
    hash_layout!(
        h,
        HostSide {
            attached,
            connected,
            epoch,
            version,
            following,
            resync,
            stage_generation,
            granted,
            granted_at,
            starved,
            passed,
            failed,
            command,
            command_seq,
            command_sent,
            proposal,
            syncer_pid,
            syncer_beat,
            alone,
            reset_generation
        }
    );
    let h = hash_layout!(h, Maybe<Alone> { present, value });
    let h = hash_layout!(h, Alone { counts, reason, at, generation, epoch, version });
    let h = hash_layout!(h, Maybe<Command> { present, value });
    let h = hash_layout!(h, Maybe<Proposal> { present, value });
    let h = hash_layout!(h, Maybe<u64> { present, value });
    let h = hash_layout!(h, Command { to, open_for });
    let h = hash_layout!(h, enum Reason);
    hash_layout!(h, Proposal { expected, state, reason, open_for, open_base, stage, rounds_between })
}

impl HostSide {
    /// Probe slots this host may hand out in the current stage.
    pub(crate) fn probe_quota(&self, half_open_calls: u32) -> u32 {
        if self.following {
            self.granted.min(half_open_calls)
        } else {
            half_open_calls
        }
    }

    /// A manual action on this host, to become the fleet's.
    pub(crate) fn command(&mut self, to: State, open_for: Nanos) {
        if self.attached {
            self.command = Some(Command { to, open_for }).into();
            self.command_seq = self.command_seq.wrapping_add(1);
        }
    }

    /// A call found no probe slot: while following a fleet stage, it
    /// wants one (asked for at the next send).
    pub(crate) fn starve(&mut self) {
        if self.following {
            self.starved = self.starved.saturating_add(1);
        }
    }

    /// A probe of the followed stage finished (or timed out: failed).
    pub(crate) fn probe_finished(&mut self, passed: bool) {
        if self.following {
            let tally = if passed { &mut self.passed } else { &mut self.failed };
            *tally = tally.saturating_add(1);
        }
    }

    /// In a forked child's copy of a record: nobody sends for it yet, and
    /// the parent's opening is the parent's to report.
    pub(crate) fn after_fork(&mut self) {
        self.syncer_pid = 0;
        self.alone = Maybe::none();
    }

    /// This host's own opening counts from `now` at the latest (the clock
    /// went back: `Breaker::clamp_ahead`, breaker/timers.rs).
    pub(crate) fn clamp_ahead(&mut self, now: Nanos) {
        if let Some(alone) = self.alone.get().filter(|a| a.at > now) {
            self.alone = Some(Alone { at: now, ..alone }).into();
        }
    }

    /// The host opened on its own window with `counts`.
    pub(crate) fn opened_alone(&mut self, counts: Counts, reason: Reason, at: Nanos, generation: u64) {
        if self.attached {
            let (epoch, version) = (self.epoch, self.version);
            self.alone = Some(Alone { counts, reason, at, generation, epoch, version }).into();
        }
    }

    /// Only the fleet advances or restarts a stage it runs.
    pub(crate) fn restrain(&self, v: Verdict) -> Verdict {
        match v {
            Verdict::Advance | Verdict::Restart if self.following => Verdict::Pending,
            v => v,
        }
    }

    pub(crate) fn enter_stage(&mut self, generation: u64) {
        *self = Self {
            following: true,
            stage_generation: generation,
            granted: 0,
            granted_at: 0,
            starved: 0,
            passed: 0,
            failed: 0,
            ..*self
        };
    }
}
