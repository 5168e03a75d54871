//! The adaptive concurrency limit (`max_concurrent: :adaptive`): a cap on
//! calls in flight that follows the dependency's latency, in the manner of
//! Netflix's concurrency-limits (its gradient limits) and Envoy's adaptive
//! concurrency filter. docs/choices.md ("The adaptive concurrency cap")
//! gives the formula, its defaults and where it departs from those designs.
//!
//! Each settled call is one sample: its latency, whether it succeeded, and
//! how many calls were in flight when it began. From the samples the rule
//! keeps the no-load latency (the shortest recent latency of a successful
//! call, drifting up slowly with calls that ran under no more load, so
//! that it can rise again) and the recent
//! latency (smoothed), and moves the cap: up while the recent latency stays
//! within [`TOLERANCE`] of no-load and the callers use at least half of the
//! cap, down in proportion as it rises above that, and by the smallest
//! gradient on a slow failure.
//!
//! Invariants:
//! - [`AdaptiveLimit`] is plain data (`repr(C)`, numbers only): it lives in
//!   a breaker's record, under its lock, in process memory or in a file
//!   every process of the host maps; its layout is hashed ([`layout`]);
//! - after any sequence of samples the cap is within `[min, max]` and every
//!   field is finite and not negative; a latency that is NaN, infinite or
//!   negative is ignored, and one below [`FLOOR_NS`] counts as [`FLOOR_NS`];
//! - nothing is re-measured on a schedule: the cap moves only with samples,
//!   so no periodic window pins it to its minimum (Envoy's minRTT window
//!   does);
//! - without a no-load latency yet (no success so far) the cap stays where
//!   it is.

use crate::check::{check_f64, check_int, ConfigError};
use crate::hashing::{hash_layout, Fnv};

/// The recent latency may be this many times the no-load latency before
/// the cap shrinks; within it the cap may grow. Netflix's gradient limit
/// calls it the RTT tolerance and compares it, as here, with a minimum (2
/// by default there too): a dependency's typical latency is often half
/// again its fastest, and that is no overload.
pub const TOLERANCE: f64 = 2.0;

/// The smallest gradient: one sample's target is at least half the cap, so
/// the cap shrinks at most by `smoothing / 2` of itself per sample (the
/// bound Netflix's gradient limits and Envoy's filter both use).
pub const MIN_GRADIENT: f64 = 0.5;

/// The weight of one sample in the recent latency (an exponential moving
/// average over about ten calls).
pub const RECENT_WEIGHT: f64 = 0.1;

/// How far the no-load latency moves towards a slower successful call, per
/// sample: it is the shortest latency seen, forgotten over about
/// `1 / NOLOAD_DRIFT` samples, so that a dependency that became slower for
/// good is, in time, its new no-load (Netflix's Gradient2 lets its long
/// average drift the same way), instead of a schedule re-measuring it.
/// Only calls that ran with no more calls in flight than the one that set
/// it (or at the minimum cap) move it.
pub const NOLOAD_DRIFT: f64 = 1.0 / 500.0;

/// A sample moves the recent latency at most as if it were this many times
/// the recent latency (so by at most 20 % of it): one stuck call (a 30 s
/// timeout among 10 ms calls) or a straggler in a hundred barely moves the
/// cap, a lasting rise (every call slower) compounds within a few calls.
pub const OUTLIER: f64 = 3.0;

/// Latencies below 100 µs count as 100 µs: below it a call's time is mostly
/// the caller's own (the block, a GC step), and a no-load latency of a few
/// nanoseconds (a block that returned at once) would make every real call
/// look like an overload.
pub const FLOOR_NS: f64 = 100_000.0;

/// Latencies above about 11.6 days count as that: it keeps every field far
/// from overflow.
pub const CEILING_NS: f64 = 1.0e15;

/// The caps accepted for `adaptive_min`, `adaptive_max` and
/// `adaptive_initial` (the range of a fixed `max_concurrent`).
pub const MAX_CAP: i64 = 100_000;

/// The default of `adaptive_initial`: at most 20 callers never meet the cap
/// before it has learnt anything (docs/choices.md).
pub const DEFAULT_INITIAL: u32 = 20;
/// The default of `adaptive_min`.
pub const DEFAULT_MIN: u32 = 1;
/// The default of `adaptive_max`.
pub const DEFAULT_MAX: u32 = 1_000;
/// The default of `adaptive_smoothing`.
pub const DEFAULT_SMOOTHING: f64 = 0.2;

/// The validated settings of the adaptive cap (`adaptive_initial:`,
/// `adaptive_min:`, `adaptive_max:`, `adaptive_smoothing:`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveSettings {
    /// The cap before any sample (`min <= initial <= max`).
    pub initial: u32,
    /// The cap never goes below this (>= 1).
    pub min: u32,
    /// The cap never goes above this (`min <= max <= 100_000`).
    pub max: u32,
    /// The share of the way to a sample's target the cap moves per sample
    /// (0 < x <= 1; 1: no smoothing).
    pub smoothing: f64,
}

impl Default for AdaptiveSettings {
    fn default() -> Self {
        Self { initial: DEFAULT_INITIAL, min: DEFAULT_MIN, max: DEFAULT_MAX, smoothing: DEFAULT_SMOOTHING }
    }
}

impl AdaptiveSettings {
    /// Checks the four options as given (None: not given). The defaults
    /// follow the options given: without `adaptive_max`, the maximum is
    /// 1000 or `adaptive_min` if that is more; without `adaptive_initial`,
    /// the initial cap is 20 brought within `[min, max]`. The error names
    /// the first bad option and its range.
    pub fn check(
        initial: Option<i64>,
        min: Option<i64>,
        max: Option<i64>,
        smoothing: Option<f64>,
    ) -> Result<Self, ConfigError> {
        let min = match min {
            None => DEFAULT_MIN,
            Some(m) => check_int("adaptive_min", "an Integer in 1..100_000", m, 1, MAX_CAP)?,
        };
        let max = match max {
            None => DEFAULT_MAX.max(min),
            Some(m) => check_int("adaptive_max", "an Integer in adaptive_min..100_000", m, i64::from(min), MAX_CAP)?,
        };
        let initial = match initial {
            None => DEFAULT_INITIAL.clamp(min, max),
            Some(i) => check_int(
                "adaptive_initial",
                "an Integer in adaptive_min..adaptive_max",
                i,
                i64::from(min),
                i64::from(max),
            )?,
        };
        let smoothing = match smoothing {
            None => DEFAULT_SMOOTHING,
            Some(s) => check_f64("adaptive_smoothing", "a Float in (0.0, 1.0]", s, 0.0, true, 1.0)?,
        };
        Ok(Self { initial, min, max, smoothing })
    }

    /// Adds the settings to a configuration's fingerprint.
    pub fn fingerprint(&self, h: Fnv) -> Fnv {
        h.i64(i64::from(self.initial)).i64(i64::from(self.min)).i64(i64::from(self.max)).f64(self.smoothing)
    }
}

/// The adaptive cap's state: plain numbers, kept in a breaker's record.
/// `Default` is all zeros: not started, the cap is the settings' `initial`
/// until the first sample ([`AdaptiveLimit::current`]), as a record made
/// without the settings at hand holds it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct AdaptiveLimit {
    /// The cap before rounding down, within `[min, max]`; 0: not started.
    limit: f64,
    /// The no-load latency in nanoseconds; 0: no successful call yet.
    noload: f64,
    /// The calls in flight when the call that set `noload` began.
    noload_at: f64,
    /// The recent latency in nanoseconds (smoothed); 0: no sample yet.
    recent: f64,
}

impl AdaptiveLimit {
    /// The cap before any sample: `initial`.
    pub fn new(s: &AdaptiveSettings) -> Self {
        Self { limit: f64::from(s.initial), noload: 0.0, noload_at: 0.0, recent: 0.0 }
    }

    /// One settled call: its latency in nanoseconds, whether it succeeded,
    /// and how many calls were in flight when it began (itself included).
    ///
    /// A successful call lowers the no-load latency if it is shorter, and
    /// lets it drift a little towards its own latency if not. A failure
    /// never touches the no-load latency (a fast error is no measure of the
    /// dependency's speed); a failure within [`TOLERANCE`] of no-load is
    /// left out altogether (the window judges errors), and a slower one (a
    /// timeout: the clearest sign of overload) enters the recent latency
    /// and cuts the cap by the smallest gradient, [`MIN_GRADIENT`].
    pub fn sample(&mut self, s: &AdaptiveSettings, latency_ns: f64, success: bool, in_flight: u32) {
        // NaN, a clock gone back, or no end: no information.
        if !(latency_ns >= 0.0 && latency_ns.is_finite()) {
            return;
        }
        if self.limit < 1.0 {
            self.limit = f64::from(s.initial);
        }
        let x = latency_ns.clamp(FLOOR_NS, CEILING_NS);
        let used = f64::from(in_flight);
        if success {
            if self.noload <= 0.0 || x <= self.noload {
                self.noload = x;
                self.noload_at = used;
            } else if used <= self.noload_at.max(f64::from(s.min)) {
                // Only a call that began with no more calls in flight than
                // the one that measured the no-load latency (or at the
                // minimum cap) may raise it: a call slowed by a queue the
                // cap let grow must not teach the cap that the queue is
                // normal (it would then grow the queue further).
                // Towards at most OUTLIER × itself, as the recent
                // latency: one call 5,000 times slower (a test's clock, a
                // hang) moves it by 0.4 %, not by ten times itself.
                self.noload += (x.min(self.noload * OUTLIER) - self.noload) * NOLOAD_DRIFT;
            }
        } else if self.noload <= 0.0 || x <= TOLERANCE * self.noload {
            return;
        }
        self.recent = if self.recent <= 0.0 {
            x
        } else {
            self.recent + (x.min(self.recent * OUTLIER) - self.recent) * RECENT_WEIGHT
        };
        let limit = self.limit;
        let target = if success && self.recent <= TOLERANCE * self.noload {
            // The gradient is 1: latency near no-load.
            if used * 2.0 < limit {
                // The callers use less than half the cap: a higher cap
                // would be a guess (Netflix's Gradient2 does not grow then
                // either). Nothing moves (the common case, kept short).
                return;
            }
            // The cap in use: room for a queue of √limit more, as
            // Netflix's gradient limit and Envoy's filter leave.
            limit + limit.sqrt()
        } else {
            // A slow failure takes the smallest gradient.
            let gradient =
                if success { (TOLERANCE * self.noload / self.recent).max(MIN_GRADIENT) } else { MIN_GRADIENT };
            // The gradient scales the cap, or the calls in flight when this
            // call began if they were more: such a call began before the
            // cap was last cut, and cutting the cut cap again by its
            // latency would take the cap far below what the dependency
            // serves at that latency (the cut lags a round trip).
            limit.min(limit.max(used) * gradient)
        };
        self.limit = (limit + (target - limit) * s.smoothing).clamp(f64::from(s.min), f64::from(s.max));
    }

    /// The current cap: calls in flight beyond it are refused (at least 1).
    pub fn limit(&self) -> u32 {
        // `as` rounds down and saturates; the record holds a value within
        // [min, max], and a cap is never 0.
        (self.limit as u32).max(1)
    }

    /// The current cap under `s`: [`AdaptiveLimit::limit`], or `initial`
    /// before the first sample of a default (not started) state.
    pub fn current(&self, s: &AdaptiveSettings) -> u32 {
        if self.limit < 1.0 {
            s.initial
        } else {
            self.limit()
        }
    }

    /// The no-load latency in nanoseconds (0: no successful call yet).
    pub fn noload_ns(&self) -> f64 {
        self.noload
    }

    /// The recent latency in nanoseconds (0: no sample yet).
    pub fn recent_ns(&self) -> f64 {
        self.recent
    }
}

/// Adds the layout of [`AdaptiveLimit`] (see
/// `circuit_breaker_core::shm::layout_hash`); keep the field list whole.
pub fn layout(h: Fnv) -> Fnv {
    hash_layout!(h, AdaptiveLimit { limit, noload, noload_at, recent })
}

// Named *_tests.rs like the crate's other test files, so a search of the
// library's own code for panics (unwrap, expect) can leave tests out.
#[cfg(test)]
#[path = "concurrency_tests.rs"]
mod tests;
