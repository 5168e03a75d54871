//! One stage of the half-open ramp.
//!
//! A stage admits asking calls at its share, spread evenly: call `n` of the
//! stage (from 0) is admitted when `n * share` crosses a whole number, so the
//! first call is always admitted and a share of 0.2 admits exactly one call
//! in five. Shares are integers in parts per billion, so decimal shares
//! space exactly. At most `quota` probes are issued per stage; a probe whose
//! call ended without an outcome (released) gives its slot back.
//!
//! The verdict comes as soon as it is certain: reopen when even all the
//! remaining probes succeeding could not reach `reopen_rate`; advance or
//! start over only once all `quota` probes have finished. A stage starts
//! over once between the two rates; the next round in a row that lands
//! between them reopens, so a dependency that half works never keeps the
//! breaker half-open for good. Such a round can only pass or reopen, so it
//! reopens as soon as it can no longer reach `advance_rate` (its floor is
//! `advance_rate`, [`reopen_floor`], from [`Stage::rounds_between`]).
//!
//! Probes in flight are kept in a few cohorts (probes admitted at one
//! instant on one thread), so that each can time out `probe_timeout` after
//! its admission, in plain data of a fixed size (the record may live in
//! shared memory). With more than [`COHORTS`] cohorts in flight at once, a
//! new probe joins the newest cohort: it may then time out a little early,
//! never late (docs/semantics-permits.md).

use crate::config::PPB;
use crate::hashing::hash_layout;
use crate::time::Nanos;

/// What a finished probe decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not decided yet: probes are still to come.
    Pending,
    /// Success share reached `advance_rate`: next stage (or closed).
    Advance,
    /// Success share can no longer reach the round's floor
    /// ([`reopen_floor`]): back to open.
    Reopen,
    /// Between the two rates: the stage starts over.
    Restart,
}

/// How many cohorts of probes a stage tracks apart.
pub const COHORTS: usize = 8;

/// Cohort tags are below this (they fit a permit's bits, `Permit::to_bits`).
pub const TAG_LIMIT: u32 = 1 << 20;

/// Probes admitted at one instant by one thread, not settled yet.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cohort {
    /// Names the cohort in its permits (never 0, unique among the stage's
    /// live cohorts).
    pub tag: u32,
    /// When its first probe was admitted; its probes time out from here.
    pub admitted_at: Nanos,
    /// The admitting thread (`Cohort::thread_id`); 0 once cohorts merged.
    pub thread: u64,
    /// Probes of the cohort neither settled nor timed out; 0: a free entry.
    pub unsettled: u32,
}

impl Cohort {
    /// The calling thread, as cohorts record it: a forked child keeps the
    /// probes of the thread that forked (`Stage::after_fork`).
    pub fn thread_id() -> u64 {
        // SAFETY: pthread_self has no preconditions; in a forked child it
        // returns what it returned in the forking thread.
        unsafe { libc::pthread_self() as u64 }
    }
}

/// Counters of one half-open stage. Plain data.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stage {
    /// Index into the ramp.
    pub index: u32,
    /// When the stage was entered; `min_stage_duration` counts from here,
    /// and starting the stage over keeps it.
    pub entered_at: Nanos,
    /// When the current round of the stage began; `half_open_timeout`
    /// counts from here.
    pub started_at: Nanos,
    /// Calls that asked during this stage, modulo 1e9 (only the phase of
    /// the spacing matters).
    asked: u64,
    /// Probes handed out and not released.
    issued: u32,
    /// Probes handed out that have neither finished nor been released.
    in_flight: u32,
    succeeded: u32,
    failed: u32,
    /// The probes in flight, by cohort.
    cohorts: [Cohort; COHORTS],
    /// The tag the next cohort gets.
    next_tag: u32,
    /// Rounds of this stage in a row that ended between `reopen_rate` and
    /// `advance_rate` (0 in a new stage, and after a round that passed):
    /// at 1, the next round between the rates reopens.
    pub rounds_between: u32,
}

impl Stage {
    /// Stage `index`, entered at `entered_at`, its round beginning at
    /// `now`, with no probe issued.
    pub fn new(index: u32, entered_at: Nanos, now: Nanos) -> Self {
        Self {
            index,
            entered_at,
            started_at: now,
            asked: 0,
            issued: 0,
            in_flight: 0,
            succeeded: 0,
            failed: 0,
            cohorts: [Cohort::default(); COHORTS],
            next_tag: 1,
            rounds_between: 0,
        }
    }

    /// Whether the next asking call gets a probe slot, at `share_ppb` parts
    /// per billion and at most `quota` probes per stage: the tag of its
    /// cohort, or None.
    pub fn admit(&mut self, share_ppb: u64, quota: u32, now: Nanos, thread: u64) -> Option<u32> {
        let n = self.asked;
        self.asked = (self.asked + 1) % PPB;
        let on_beat = (n * share_ppb) % PPB < share_ppb;
        if !(on_beat && self.issued < quota) {
            return None;
        }
        self.issued += 1;
        self.in_flight += 1;
        Some(self.join_cohort(now, thread))
    }

    fn join_cohort(&mut self, now: Nanos, thread: u64) -> u32 {
        let live = |c: &&mut Cohort| c.unsettled > 0;
        if let Some(c) = self.cohorts.iter_mut().filter(live).find(|c| c.admitted_at == now && c.thread == thread) {
            c.unsettled += 1;
            return c.tag;
        }
        let tag = self.next_tag;
        if let Some(c) = self.cohorts.iter_mut().find(|c| c.unsettled == 0) {
            self.next_tag = if tag + 1 >= TAG_LIMIT { 1 } else { tag + 1 };
            *c = Cohort { tag, admitted_at: now, thread, unsettled: 1 };
            return tag;
        }
        // Every entry is taken: join the newest cohort. It times out no
        // later than this probe would, and its thread is no longer known.
        let [first, rest @ ..] = &mut self.cohorts;
        let newest =
            rest.iter_mut().fold(first, |a, b| if (b.admitted_at, b.tag) > (a.admitted_at, a.tag) { b } else { a });
        newest.unsettled += 1;
        newest.thread = 0;
        newest.tag
    }

    /// Takes a probe of cohort `tag` out of its cohort, to be settled;
    /// false when it already timed out (its outcome decides nothing).
    pub fn settle(&mut self, tag: u32) -> bool {
        match self.cohorts.iter_mut().find(|c| c.unsettled > 0 && c.tag == tag) {
            Some(c) => {
                c.unsettled -= 1;
                true
            }
            None => false,
        }
    }

    /// The cohort whose probes time out first, with `probe_timeout`, if it
    /// is due at `now`: its probes leave their cohort and must be finished
    /// as failed probes; returns how many.
    pub fn expire(&mut self, probe_timeout: Nanos, now: Nanos) -> u32 {
        let due = self
            .cohorts
            .iter_mut()
            // A deadline past the end of time never comes.
            .filter(|c| c.unsettled > 0 && c.admitted_at.checked_add(probe_timeout).is_some_and(|d| now >= d))
            .min_by_key(|c| c.admitted_at);
        match due {
            Some(c) => std::mem::take(&mut c.unsettled),
            None => 0,
        }
    }

    /// Moves the stage's times that are later than `now` to `now` (the
    /// clock went back: `Breaker::clamp_ahead`, breaker/timers.rs).
    pub fn clamp_ahead(&mut self, now: Nanos) {
        self.entered_at = self.entered_at.min(now);
        self.started_at = self.started_at.min(now);
        for c in &mut self.cohorts {
            c.admitted_at = c.admitted_at.min(now);
        }
    }

    /// Probes currently running.
    /// Probes handed out in this stage and not released (finished or in
    /// flight).
    pub fn issued(&self) -> u32 {
        self.issued
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// A probe ended without an outcome: its slot is free again.
    pub fn release(&mut self) {
        self.issued = self.issued.saturating_sub(1);
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// In a forked child: frees the probe slots of every thread but
    /// `thread`, the one that forked (see `Breaker::after_fork`).
    pub fn after_fork(&mut self, thread: u64) {
        for c in self.cohorts.iter_mut().filter(|c| c.unsettled > 0 && c.thread != thread) {
            let gone = std::mem::take(&mut c.unsettled);
            self.issued = self.issued.saturating_sub(gone);
            self.in_flight = self.in_flight.saturating_sub(gone);
        }
    }

    /// A probe finished; returns what the stage now knows.
    pub fn finish(&mut self, success: bool, quota: u32, advance_rate: f64, reopen_rate: f64) -> Verdict {
        self.in_flight = self.in_flight.saturating_sub(1);
        if success {
            self.succeeded += 1;
        } else {
            self.failed += 1;
        }
        let floor = reopen_floor(self.rounds_between, advance_rate, reopen_rate);
        verdict(self.succeeded, self.failed, quota, advance_rate, floor)
    }
}

/// The success share below which a round reopens, in a stage whose last
/// `rounds_between` rounds in a row ended between `reopen_rate` and
/// `advance_rate`: `reopen_rate` in a first round; `advance_rate` in a
/// round after one between the rates, which reopens whether it ends below
/// `reopen_rate` or between the rates again, so reopening is certain as
/// soon as it can no longer pass (docs/semantics.md). One rule for a host's
/// stage and the fleet's.
pub fn reopen_floor(rounds_between: u32, advance_rate: f64, reopen_rate: f64) -> f64 {
    if rounds_between > 0 {
        advance_rate
    } else {
        reopen_rate
    }
}

/// What a round of `quota` probes knows once `succeeded` passed and
/// `failed` failed, reopening below `floor` ([`reopen_floor`]): one rule
/// for a host's stage and the fleet's summed stage (fleet/decide.rs).
pub fn verdict(succeeded: u32, failed: u32, quota: u32, advance_rate: f64, floor: f64) -> Verdict {
    let finished = succeeded.saturating_add(failed);
    let quota_f = f64::from(quota.max(1));
    let best = f64::from(succeeded.saturating_add(quota.saturating_sub(finished))) / quota_f;
    if best < floor {
        Verdict::Reopen
    } else if finished < quota {
        Verdict::Pending
    } else if f64::from(succeeded) / quota_f >= advance_rate {
        Verdict::Advance
    } else {
        Verdict::Restart
    }
}

/// What a stage does next on a verdict: one rule for a host's stage
/// (`breaker/half_open.rs`) and the fleet's (`fleet/decide.rs`), so a
/// dependency that half works reopens the fleet as it reopens a host
/// (docs/semantics.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Probes are still to come.
    Stay,
    /// Back to open.
    Reopen,
    /// The stage starts over: a new round, after this many rounds in a row
    /// that ended between the rates.
    NewRound(u32),
    /// The next stage (after the last: closed).
    Advance,
}

impl Next {
    /// What a `verdict` leads to, in a stage whose last `rounds_between`
    /// rounds in a row ended between `reopen_rate` and `advance_rate`, and
    /// which has (`lasted`) or has not yet lasted `min_stage_duration`: a
    /// round between the rates starts the stage over (a second one in a
    /// row never gets here: its floor, [`reopen_floor`], reopened it); a
    /// pass before `min_stage_duration` starts a new round, and ends the
    /// streak.
    pub fn after(verdict: Verdict, rounds_between: u32, lasted: bool) -> Self {
        match verdict {
            Verdict::Pending => Next::Stay,
            Verdict::Reopen => Next::Reopen,
            Verdict::Restart => Next::NewRound(rounds_between.saturating_add(1)),
            Verdict::Advance if !lasted => Next::NewRound(0),
            Verdict::Advance => Next::Advance,
        }
    }
}

/// Adds the layout of a stage (see `circuit_breaker_core::shm::layout_hash`).
pub(crate) fn layout(h: crate::hashing::Fnv) -> crate::hashing::Fnv {
    let h = hash_layout!(
        h,
        Stage {
            index,
            entered_at,
            started_at,
            asked,
            issued,
            in_flight,
            succeeded,
            failed,
            cohorts,
            next_tag,
            rounds_between
        }
    );
    hash_layout!(h, Cohort { tag, admitted_at, thread, unsettled })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(share: f64, quota: u32, calls: usize) -> Vec<usize> {
        let mut stage = Stage::new(0, 0, 0);
        let ppb = (share * PPB as f64).round() as u64;
        (0..calls).filter(|_| stage.admit(ppb, quota, 0, 1).is_some()).collect()
    }

    #[test]
    fn one_in_five_at_a_fifth_starting_with_the_first_call() {
        assert_eq!(admitted(0.2, 100, 21), vec![0, 5, 10, 15, 20]);
    }

    #[test]
    fn decimal_shares_space_exactly() {
        assert_eq!(admitted(0.3, 100, 10), vec![0, 4, 7]);
        assert_eq!(admitted(0.1, 100, 30), vec![0, 10, 20]);
        assert_eq!(admitted(0.6, 100, 5), vec![0, 2, 4]);
        assert_eq!(admitted(1.0, 100, 4), vec![0, 1, 2, 3]);
        for (share, per_1000) in [(0.1, 100), (0.3, 300), (0.6, 600), (0.25, 250), (0.07, 70)] {
            assert_eq!(admitted(share, u32::MAX, 1000).len(), per_1000, "share {share}");
        }
    }

    #[test]
    fn never_more_than_the_quota_per_stage() {
        assert_eq!(admitted(1.0, 3, 100), vec![0, 1, 2]);
    }

    #[test]
    fn a_released_slot_can_be_issued_again() {
        let mut stage = Stage::new(0, 0, 0);
        let tag = stage.admit(PPB, 1, 0, 1).unwrap();
        assert!(stage.admit(PPB, 1, 0, 1).is_none());
        assert!(stage.settle(tag));
        stage.release();
        assert_eq!(stage.in_flight(), 0);
        assert!(stage.admit(PPB, 1, 0, 1).is_some());
    }

    #[test]
    fn one_failure_reopens_at_once_with_the_default_rates() {
        let mut stage = Stage::new(0, 0, 0);
        stage.admit(PPB, 2, 0, 1);
        stage.admit(PPB, 2, 0, 1);
        assert_eq!(stage.finish(false, 2, 1.0, 1.0), Verdict::Reopen);
    }

    #[test]
    fn advancing_waits_for_every_probe() {
        let mut stage = Stage::new(0, 0, 0);
        assert_eq!(stage.finish(true, 2, 1.0, 1.0), Verdict::Pending);
        assert_eq!(stage.finish(true, 2, 1.0, 1.0), Verdict::Advance);
    }

    #[test]
    fn between_the_rates_the_stage_starts_over() {
        // 20 probes, advance at 90 %, reopen below 50 %.
        let mut stage = Stage::new(0, 0, 0);
        let outcomes: Vec<Verdict> = (0..20).map(|i| stage.finish(i >= 3, 20, 0.9, 0.5)).collect();
        assert_eq!(outcomes[19], Verdict::Restart);
        assert!(outcomes[..19].iter().all(|v| *v == Verdict::Pending));
    }

    #[test]
    fn reopening_comes_as_soon_as_it_is_certain() {
        let mut stage = Stage::new(0, 0, 0);
        let verdicts: Vec<Verdict> = (0..20).map(|_| stage.finish(false, 20, 0.9, 0.5)).collect();
        // After 11 failures of 20, at most 9/20 = 45 % can succeed.
        assert_eq!(verdicts.iter().position(|v| *v == Verdict::Reopen), Some(10));
    }

    #[test]
    fn a_round_after_one_between_the_rates_reopens_once_it_can_no_longer_pass() {
        // 20 probes, advance at 90 %, reopen below 50 %.
        let mut stage = Stage::new(0, 0, 0);
        let first: Vec<Verdict> = (0..3).map(|_| stage.finish(false, 20, 0.9, 0.5)).collect();
        assert_eq!(first, [Verdict::Pending; 3], "a first round waits: it may still land between the rates");
        let mut stage = Stage::new(0, 0, 0);
        stage.rounds_between = 1;
        let next: Vec<Verdict> = (0..3).map(|_| stage.finish(false, 20, 0.9, 0.5)).collect();
        assert_eq!(next, [Verdict::Pending, Verdict::Pending, Verdict::Reopen], "at best 17 / 20 after 3 failures");
        assert_eq!(reopen_floor(0, 0.9, 0.5), 0.5);
        assert_eq!(reopen_floor(1, 0.9, 0.5), 0.9);
    }

    #[test]
    fn a_restart_counts_the_rounds_between_the_rates() {
        assert_eq!(Next::after(Verdict::Restart, 0, true), Next::NewRound(1));
        assert_eq!(Next::after(Verdict::Advance, 1, false), Next::NewRound(0));
    }

    #[test]
    fn exactly_the_advance_rate_advances() {
        let mut stage = Stage::new(0, 0, 0);
        let last = (0..20).map(|i| stage.finish(i >= 2, 20, 0.9, 0.5)).last();
        assert_eq!(last, Some(Verdict::Advance));
    }

    #[test]
    fn probes_of_one_instant_and_thread_share_a_cohort_and_time_out_together() {
        let mut stage = Stage::new(0, 0, 0);
        let a = stage.admit(PPB, 10, 5, 1).unwrap();
        let b = stage.admit(PPB, 10, 5, 1).unwrap();
        let c = stage.admit(PPB, 10, 6, 1).unwrap();
        let d = stage.admit(PPB, 10, 6, 2).unwrap();
        assert_eq!(a, b);
        assert!(a != c && c != d);
        assert_eq!(stage.expire(10, 14), 0, "nothing is due before admitted_at + timeout");
        assert_eq!(stage.expire(10, 15), 2, "the cohort of instant 5 is due at 15");
        assert!(!stage.settle(a), "a timed-out probe settles nothing");
        assert!(stage.settle(c));
        assert_eq!(stage.expire(10, 100), 1, "the other thread's probe of instant 6");
        assert_eq!(stage.expire(10, 100), 0);
    }

    #[test]
    fn with_every_cohort_taken_a_probe_joins_the_newest_and_never_times_out_late() {
        let mut stage = Stage::new(0, 0, 0);
        let tags: Vec<u32> = (0..COHORTS as i64).map(|t| stage.admit(PPB, 100, t, 1).unwrap()).collect();
        let late = stage.admit(PPB, 100, 50, 1).unwrap();
        assert_eq!(late, *tags.last().unwrap());
        let newest = COHORTS as i64 - 1;
        for t in 0..newest {
            assert_eq!(stage.expire(10, t + 10), 1, "cohort of instant {t}");
        }
        assert_eq!(stage.expire(10, newest + 10), 2, "the late probe goes with the newest cohort, early");
    }

    #[test]
    fn a_forked_child_keeps_only_the_forking_threads_probes() {
        let mut stage = Stage::new(0, 0, 0);
        stage.admit(PPB, 2, 0, 1).unwrap();
        stage.admit(PPB, 2, 0, 2).unwrap();
        stage.after_fork(1);
        assert_eq!(stage.in_flight(), 1);
        assert!(stage.admit(PPB, 2, 0, 1).is_some());
        assert!(stage.admit(PPB, 2, 0, 1).is_none(), "the forking thread's probe still counts: the quota holds");
    }
}
