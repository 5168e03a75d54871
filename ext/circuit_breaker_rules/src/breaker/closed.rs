//! When a closed breaker opens: the window's rates, and failures in a row.

use super::{Breaker, Phase, Transitions};
use crate::config::Config;
use crate::state::{Reason, State};
use crate::time::Nanos;
use crate::window::{Buckets, Counts, Mark, Slots, Window};

impl Breaker {
    #[inline(always)]
    pub(super) fn record_closed<S: Slots, B: Buckets>(
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
            // A fleet host keeps reporting what it opened with (fleet/host.rs).
            self.fleet.opened_alone(self.tripped, reason, now, self.generation);
        }
    }
}

/// Why a window's counts open a closed breaker, if they do: at least
/// `min_calls` calls (clamped to what the window can hold; None: no limit)
/// and a rate at its threshold (docs/semantics.md). A host's window and the
/// fleet's sum (fleet/decide.rs) are judged by this one rule.
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
