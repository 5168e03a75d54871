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
//! start over only once all `quota` probes have finished.

use crate::clock::Nanos;
use crate::config::PPB;

/// What a finished probe decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not decided yet: probes are still to come.
    Pending,
    /// Success share reached `advance_rate`: next stage (or closed).
    Advance,
    /// Success share can no longer reach `reopen_rate`: back to open.
    Reopen,
    /// Between the two rates: the stage starts over.
    Restart,
}

/// Counters of one half-open stage. Plain data.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stage {
    /// Index into the ramp.
    pub index: u32,
    /// When the stage began; `half_open_timeout` counts from here.
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
}

impl Stage {
    /// Stage `index`, beginning at `now`, with no probe issued.
    pub fn new(index: u32, now: Nanos) -> Self {
        Self { index, started_at: now, asked: 0, issued: 0, in_flight: 0, succeeded: 0, failed: 0 }
    }

    /// Whether the next asking call gets a probe slot, at `share_ppb` parts
    /// per billion and at most `quota` probes per stage.
    pub fn admit(&mut self, share_ppb: u64, quota: u32) -> bool {
        let n = self.asked;
        self.asked = (self.asked + 1) % PPB;
        let on_beat = (n * share_ppb) % PPB < share_ppb;
        if on_beat && self.issued < quota {
            self.issued += 1;
            self.in_flight += 1;
            true
        } else {
            false
        }
    }

    /// Probes currently running.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// A probe ended without an outcome: its slot is free again.
    pub fn release(&mut self) {
        self.issued = self.issued.saturating_sub(1);
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// Frees every probe slot still taken (see `Breaker::after_fork`).
    pub fn forget_in_flight(&mut self) {
        self.issued -= self.in_flight.min(self.issued);
        self.in_flight = 0;
    }

    /// A probe finished; returns what the stage now knows.
    pub fn finish(&mut self, success: bool, quota: u32, advance_rate: f64, reopen_rate: f64) -> Verdict {
        self.in_flight = self.in_flight.saturating_sub(1);
        if success {
            self.succeeded += 1;
        } else {
            self.failed += 1;
        }
        let finished = self.succeeded + self.failed;
        let quota_f = f64::from(quota);
        let best = f64::from(self.succeeded + quota.saturating_sub(finished)) / quota_f;
        if best < reopen_rate {
            Verdict::Reopen
        } else if finished < quota {
            Verdict::Pending
        } else if f64::from(self.succeeded) / quota_f >= advance_rate {
            Verdict::Advance
        } else {
            Verdict::Restart
        }
    }
}

/// Adds the layout of a stage (see [`crate::shm::layout_hash`]).
pub(crate) fn layout(h: crate::shm::ConfigHash) -> crate::shm::ConfigHash {
    crate::hash_layout!(h, Stage { index, started_at, asked, issued, in_flight, succeeded, failed })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admitted(share: f64, quota: u32, calls: usize) -> Vec<usize> {
        let mut stage = Stage::new(0, 0);
        let ppb = (share * PPB as f64).round() as u64;
        (0..calls).filter(|_| stage.admit(ppb, quota)).collect()
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
        let mut stage = Stage::new(0, 0);
        assert!(stage.admit(PPB, 1));
        assert!(!stage.admit(PPB, 1));
        stage.release();
        assert_eq!(stage.in_flight(), 0);
        assert!(stage.admit(PPB, 1));
    }

    #[test]
    fn one_failure_reopens_at_once_with_the_default_rates() {
        let mut stage = Stage::new(0, 0);
        stage.admit(PPB, 2);
        stage.admit(PPB, 2);
        assert_eq!(stage.finish(false, 2, 1.0, 1.0), Verdict::Reopen);
    }

    #[test]
    fn advancing_waits_for_every_probe() {
        let mut stage = Stage::new(0, 0);
        assert_eq!(stage.finish(true, 2, 1.0, 1.0), Verdict::Pending);
        assert_eq!(stage.finish(true, 2, 1.0, 1.0), Verdict::Advance);
    }

    #[test]
    fn between_the_rates_the_stage_starts_over() {
        // 20 probes, advance at 90 %, reopen below 50 %.
        let mut stage = Stage::new(0, 0);
        let outcomes: Vec<Verdict> = (0..20).map(|i| stage.finish(i >= 3, 20, 0.9, 0.5)).collect();
        assert_eq!(outcomes[19], Verdict::Restart);
        assert!(outcomes[..19].iter().all(|v| *v == Verdict::Pending));
    }

    #[test]
    fn reopening_comes_as_soon_as_it_is_certain() {
        let mut stage = Stage::new(0, 0);
        let verdicts: Vec<Verdict> = (0..20).map(|_| stage.finish(false, 20, 0.9, 0.5)).collect();
        // After 11 failures of 20, at most 9/20 = 45 % can succeed.
        assert_eq!(verdicts.iter().position(|v| *v == Verdict::Reopen), Some(10));
    }

    #[test]
    fn exactly_the_advance_rate_advances() {
        let mut stage = Stage::new(0, 0);
        let last = (0..20).map(|i| stage.finish(i >= 2, 20, 0.9, 0.5)).last();
        assert_eq!(last, Some(Verdict::Advance));
    }
}
