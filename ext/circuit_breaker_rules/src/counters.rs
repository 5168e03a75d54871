//! Cumulative counters of a breaker since its creation (docs/operating.md).
//!
//! Unlike the window, which forgets old calls and is emptied whenever the
//! breaker closes or opens, these only ever grow (saturating), so a
//! dashboard can graph their rates. They are plain data inside the
//! breaker's record: a `shared:` breaker's counters are host-wide.
//!
//! Invariants: `successes + failures <= calls` (the rest are calls that
//! ended without an outcome: ignored errors, killed threads); a call counts
//! when it is settled, whatever generation admitted it (a late outcome still
//! happened, even though it decides nothing); a rejected call is never in
//! `calls`.

use crate::window::Mark;

/// What happened to a breaker's calls since it was created.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Calls admitted (and settled), with or without an outcome.
    pub calls: u64,
    /// Calls recorded as successes.
    pub successes: u64,
    /// Calls recorded as failures.
    pub failures: u64,
    /// Calls with an outcome that took at least the slow-call threshold
    /// (successes or failures).
    pub slow: u64,
    /// Calls rejected (open, forced open, or half-open without a probe slot).
    pub rejected: u64,
    /// Times the breaker entered the open state (tripped, reopened, `trip!`).
    pub opened: u64,
}

impl Counters {
    /// Counts one settled call, marked as the window counts it (None: it
    /// ended without an outcome).
    #[inline]
    pub fn settled(&mut self, mark: Option<Mark>) {
        self.calls = self.calls.saturating_add(1);
        let Some(m) = mark else { return };
        if m.failure {
            self.failures = self.failures.saturating_add(1);
        } else {
            self.successes = self.successes.saturating_add(1);
        }
        if m.slow {
            self.slow = self.slow.saturating_add(1);
        }
    }

    /// Counts one rejected call.
    #[inline]
    pub fn rejected(&mut self) {
        self.rejected = self.rejected.saturating_add(1);
    }

    /// Counts one entry into the open state.
    pub fn opened(&mut self) {
        self.opened = self.opened.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settled_call_counts_by_outcome_and_duration() {
        let mut c = Counters::default();
        c.settled(Some(Mark { failure: false, slow: false }));
        c.settled(Some(Mark { failure: false, slow: true }));
        c.settled(Some(Mark { failure: true, slow: true }));
        c.settled(None);
        assert_eq!(c, Counters { calls: 4, successes: 2, failures: 1, slow: 2, rejected: 0, opened: 0 });
    }

    #[test]
    fn counters_saturate_instead_of_overflowing() {
        let mut c = Counters { calls: u64::MAX, rejected: u64::MAX, opened: u64::MAX, ..Counters::default() };
        c.settled(Some(Mark { failure: true, slow: false }));
        c.rejected();
        c.opened();
        assert_eq!((c.calls, c.failures, c.rejected, c.opened), (u64::MAX, 1, u64::MAX, u64::MAX));
    }
}
