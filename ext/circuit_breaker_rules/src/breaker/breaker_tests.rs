//! Tests of the state machine: docs/semantics.md (states, ramp, timers,
//! generations) and docs/operating.md (manual control, metrics). Time is always an
//! explicit `now` in nanoseconds; nothing sleeps.

use super::Reason::*;
use super::State::*;
use super::*;
use crate::config::{Options, ProbeTimeout};
use crate::window::{CountWindow, TimeWindow};
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering::SeqCst};
use std::sync::Mutex;

const MS: Nanos = 1_000_000;
const SEC: Nanos = 1_000_000_000;

const OK: Outcome = Outcome::Success { duration_ns: 1.0e6 };
const FAIL: Outcome = Outcome::Failure { duration_ns: 1.0e6 };
/// A success exactly at the windows' slow threshold (800 ms): a slow call.
const SLOW_OK: Outcome = Outcome::Success { duration_ns: 800.0e6 };

fn config(f: impl FnOnce(&mut Options)) -> Config {
    let mut o = Options::default();
    f(&mut o);
    Config::new(&o).expect("valid options")
}

fn count_window(size: i64) -> Window {
    Window::Count(CountWindow::new(size, 800.0).unwrap())
}

fn changes(t: &Transitions) -> Vec<(State, State, Reason)> {
    t.iter().map(|t| (t.from, t.to, t.reason)).collect()
}

/// The single transition of a step.
fn only(t: &Transitions) -> Transition {
    let all: Vec<Transition> = t.iter().copied().collect();
    assert_eq!(all.len(), 1, "expected one transition, got {all:?}");
    all[0]
}

/// Whether call `n` of a stage (from 0) is on the beat of a share of
/// `tenths`/10: a whole number lies in ((n-1)·share, n·share].
fn on_beat(n: u64, tenths: u64) -> bool {
    n == 0 || (n * tenths) / 10 != ((n - 1) * tenths) / 10
}

/// A breaker, its window and its configuration.
struct Rig {
    b: Breaker,
    w: Window,
    cfg: Config,
}

impl Rig {
    /// Defaults of docs/configuration.md with overrides, over a count window of `size`.
    fn new(size: i64, f: impl FnOnce(&mut Options)) -> Self {
        Self::with_window(count_window(size), f)
    }

    fn with_window(w: Window, f: impl FnOnce(&mut Options)) -> Self {
        Self { b: Breaker::new(42), w, cfg: config(f) }
    }

    fn acquire(&mut self, now: Nanos) -> (Decision, Transitions) {
        self.b.acquire(&mut self.w, &self.cfg, now)
    }

    fn permit(&mut self, now: Nanos) -> Permit {
        match self.acquire(now).0 {
            Decision::Allowed(p) => p,
            Decision::Rejected(r) => panic!("rejected at {now}: {r:?}"),
        }
    }

    fn rejection(&mut self, now: Nanos) -> Rejection {
        match self.acquire(now).0 {
            Decision::Allowed(p) => panic!("admitted at {now}: {p:?}"),
            Decision::Rejected(r) => r,
        }
    }

    fn admitted(&mut self, now: Nanos) -> bool {
        matches!(self.acquire(now).0, Decision::Allowed(_))
    }

    fn complete(&mut self, p: Permit, o: Outcome, now: Nanos) -> Transitions {
        self.b.complete(&mut self.w, &self.cfg, p, o, now, 0)
    }

    /// One permitted call that ends at once.
    fn call(&mut self, o: Outcome, now: Nanos) -> Transitions {
        let p = self.permit(now);
        self.complete(p, o, now)
    }

    fn unpermitted(&mut self, o: Outcome, now: Nanos) -> Transitions {
        self.b.record_unpermitted(&mut self.w, &self.cfg, o, now)
    }

    fn tick(&mut self, now: Nanos) -> Transitions {
        self.b.tick(&mut self.w, &self.cfg, now)
    }

    fn metrics(&mut self, now: Nanos) -> Metrics {
        self.b.metrics(&mut self.w, &self.cfg, now).0
    }

    fn state(&mut self, now: Nanos) -> State {
        self.metrics(now).state
    }

    fn counts(&mut self, now: Nanos) -> Counts {
        self.metrics(now).counts
    }

    fn trip(&mut self, now: Nanos) -> Transitions {
        self.b.trip(&mut self.w, &self.cfg, now)
    }

    fn reset(&mut self, now: Nanos) -> Transitions {
        self.b.reset(&mut self.w, &self.cfg, now)
    }

    fn force_open(&mut self, now: Nanos) -> Transitions {
        self.b.force_open(&mut self.w, &self.cfg, now)
    }

    fn disable(&mut self, now: Nanos) -> Transitions {
        self.b.disable(&mut self.w, &self.cfg, now)
    }

    /// Fails calls at `now` until the breaker opens on the error rate.
    fn open_by_errors(&mut self, now: Nanos) -> Transition {
        for _ in 0..=self.cfg.min_calls {
            let t = self.call(FAIL, now);
            if !t.is_empty() {
                assert_eq!(changes(&t), [(Closed, Open, ErrorRate)]);
                return only(&t);
            }
        }
        panic!("min_calls failures did not open the breaker");
    }

    /// Opens on errors at `now`, then notices half-open when the open
    /// duration has passed (no jitter); returns that instant.
    fn half_open(&mut self, now: Nanos) -> Nanos {
        self.open_by_errors(now);
        let at = now + self.cfg.open_duration;
        assert_eq!(changes(&self.tick(at)), [(Open, HalfOpen, CoolDownElapsed)]);
        at
    }
}

// ---------------------------------------------------------------------------
// 1. The narrated scenario
// ---------------------------------------------------------------------------

#[test]
fn a_breaker_opens_probes_reopens_longer_then_recovers_step_by_step() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 4;
        o.open_duration = 10.0;
        o.backoff = 2.0;
        o.ramp = vec![0.5, 1.0];
    });
    let t0 = SEC;

    // Closed: no verdict below min_calls, whatever the rates.
    assert!(r.call(OK, t0).is_empty());
    assert!(r.call(FAIL, t0 + MS).is_empty());
    assert!(r.call(OK, t0 + 2 * MS).is_empty());
    assert_eq!(r.counts(t0 + 2 * MS), Counts { total: 3, failures: 1, slow_calls: 0 });

    // The fourth call makes 2 failures in 4: 50 % reaches the threshold.
    let opened = t0 + 3 * MS;
    let t = r.call(FAIL, opened);
    assert_eq!(changes(&t), [(Closed, Open, ErrorRate)]);
    // Counters keep what happened; `tripped` keeps the window that opened it.
    let open_metrics = Metrics {
        state: Open,
        counts: Counts::default(),
        counters: Counters { calls: 4, successes: 2, failures: 2, slow: 0, rejected: 0, opened: 1 },
        tripped: Some(Counts { total: 4, failures: 2, slow_calls: 0 }),
        stage: None,
        admit_share: 0.0,
        retry_after: Some(10 * SEC),
    };
    assert_eq!(only(&t).metrics, open_metrics);

    // Open: every call is rejected with the real remaining time.
    assert_eq!(r.rejection(opened + 4 * SEC), Rejection { state: Open, retry_after: Some(6 * SEC) });

    // After open_duration the next call notices half-open and is the first
    // probe of stage 0 (share 0.5: one call in two).
    let half = opened + 10 * SEC;
    let (d, t) = r.acquire(half);
    assert_eq!(changes(&t), [(Open, HalfOpen, CoolDownElapsed)]);
    let m = only(&t).metrics;
    assert_eq!(
        (m.state, m.stage, m.admit_share, m.retry_after, m.counters.rejected),
        (HalfOpen, Some(0), 0.5, Some(HALF_OPEN_RETRY_AFTER), 1)
    );
    assert_eq!(m.tripped, open_metrics.tripped);
    let Decision::Allowed(p1) = d else { panic!("first call of a stage rejected: {d:?}") };
    assert!(p1.probe);
    assert_eq!(r.rejection(half), Rejection { state: HalfOpen, retry_after: Some(HALF_OPEN_RETRY_AFTER) });
    let p2 = r.permit(half);
    // Both probes of the stage are out: even the call on the beat waits.
    assert!(!r.admitted(half));
    assert!(!r.admitted(half));
    assert_eq!(r.b.probes_in_flight(), 2);
    assert_eq!(r.metrics(half).counters.rejected, 4);

    // One failed probe can no longer reach advance_rate 1.0: open at once,
    // for twice as long (backoff 2).
    let reopened = half + SEC;
    let t = r.complete(p1, FAIL, reopened);
    assert_eq!(changes(&t), [(HalfOpen, Open, ProbeFailed)]);
    let counters = Counters { calls: 5, failures: 3, rejected: 4, opened: 2, ..open_metrics.counters };
    let tripped = Some(Counts { total: 1, failures: 1, slow_calls: 0 });
    assert_eq!(only(&t).metrics, Metrics { counters, tripped, retry_after: Some(20 * SEC), ..open_metrics });

    // The other probe belongs to the previous generation: it decides nothing.
    assert!(r.complete(p2, OK, reopened + SEC).is_empty());
    let m = r.metrics(reopened + SEC);
    assert_eq!((m.state, m.counts.total, m.retry_after), (Open, 0, Some(19 * SEC)));
    assert_eq!(r.state(reopened + 20 * SEC - 1), Open);

    // Half-open again. Stage 0 passes: stage 1 begins, with no state change.
    let half2 = reopened + 20 * SEC;
    let (d, t) = r.acquire(half2);
    assert_eq!(changes(&t), [(Open, HalfOpen, CoolDownElapsed)]);
    let Decision::Allowed(p) = d else { panic!("first call of a stage rejected: {d:?}") };
    assert!(!r.admitted(half2));
    let q = r.permit(half2);
    assert!(r.complete(p, OK, half2 + MS).is_empty());
    assert!(r.complete(q, OK, half2 + 2 * MS).is_empty());
    let m = r.metrics(half2 + 2 * MS);
    assert_eq!((m.state, m.stage, m.admit_share), (HalfOpen, Some(1), 1.0));

    // Stage 1 (share 1.0) admits consecutive calls; both pass: closed.
    let p = r.permit(half2 + 3 * MS);
    let q = r.permit(half2 + 3 * MS);
    assert!(r.complete(p, OK, half2 + 4 * MS).is_empty());
    let t = r.complete(q, OK, half2 + 5 * MS);
    assert_eq!(changes(&t), [(HalfOpen, Closed, ProbesPassed)]);
    assert_eq!(
        only(&t).metrics,
        Metrics {
            state: Closed,
            // The late probe p2 counts too: it happened, though it decided nothing.
            counters: Counters { calls: 10, successes: 7, failures: 3, slow: 0, rejected: 5, opened: 2 },
            tripped: None,
            admit_share: 1.0,
            retry_after: Some(0),
            ..open_metrics
        }
    );

    // Closing reset the backoff: the next opening lasts open_duration again.
    let t = r.open_by_errors(half2 + SEC);
    assert_eq!(t.metrics.retry_after, Some(10 * SEC));
}

// ---------------------------------------------------------------------------
// 2. Trip thresholds
// ---------------------------------------------------------------------------

#[test]
fn exactly_the_error_rate_threshold_opens() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 10;
        o.error_rate_threshold = 0.3;
    });
    for i in 0..3 {
        assert!(r.call(FAIL, i).is_empty());
    }
    for i in 3..9 {
        assert!(r.call(OK, i).is_empty());
    }
    // 3 / 10 == 0.3: `>=`, not `>`.
    assert_eq!(changes(&r.call(OK, 9)), [(Closed, Open, ErrorRate)]);
}

#[test]
fn an_error_rate_just_below_the_threshold_does_not_open() {
    let mut r = Rig::new(10, |o| o.min_calls = 10);
    for i in 0..6 {
        assert!(r.call(OK, i).is_empty());
    }
    for i in 6..10 {
        assert!(r.call(FAIL, i).is_empty());
    }
    assert_eq!(r.state(10), Closed);
    // The eleventh call evicts the oldest success: 5 failures in 10.
    assert_eq!(changes(&r.call(FAIL, 10)), [(Closed, Open, ErrorRate)]);
}

#[test]
fn the_slow_call_rate_opens_with_its_own_reason() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 4;
        o.slow_rate_threshold = 0.5;
    });
    assert!(r.call(OK, 0).is_empty());
    assert!(r.call(SLOW_OK, 1).is_empty());
    // 799.9 ms is just below the slow threshold.
    assert!(r.call(Outcome::Success { duration_ns: 799.9e6 }, 2).is_empty());
    assert_eq!(changes(&r.call(SLOW_OK, 3)), [(Closed, Open, SlowCallRate)]);
}

#[test]
fn the_error_rate_is_checked_first_when_both_rates_are_reached() {
    let mut r = Rig::new(10, |o| o.min_calls = 2);
    let slow_failure = Outcome::Failure { duration_ns: 900.0e6 };
    assert!(r.call(slow_failure, 0).is_empty());
    assert_eq!(changes(&r.call(slow_failure, 1)), [(Closed, Open, ErrorRate)]);
}

#[test]
fn fewer_than_min_calls_never_open() {
    let mut r = Rig::new(100, |o| o.min_calls = 5);
    // Slow failures: both rates at 100 %, yet no verdict below min_calls.
    let slow_failure = Outcome::Failure { duration_ns: 900.0e6 };
    for i in 0..4 {
        assert!(r.call(slow_failure, i).is_empty());
    }
    assert_eq!(r.counts(4), Counts { total: 4, failures: 4, slow_calls: 4 });
    assert_eq!(changes(&r.call(slow_failure, 4)), [(Closed, Open, ErrorRate)]);
}

#[test]
fn min_calls_is_clamped_to_a_count_windows_size() {
    let mut r = Rig::new(5, |o| o.min_calls = 20);
    for i in 0..4 {
        assert!(r.call(FAIL, i).is_empty());
    }
    assert_eq!(changes(&r.call(FAIL, 4)), [(Closed, Open, ErrorRate)]);
}

#[test]
fn min_calls_is_not_clamped_for_a_time_window() {
    let w = Window::Time(TimeWindow::new(10.0, 10, 800.0).unwrap());
    let mut r = Rig::with_window(w, |o| {
        o.min_calls = 20;
        o.consecutive_failures = None;
    });
    for i in 0..19 {
        assert!(r.call(FAIL, i * MS).is_empty());
    }
    assert_eq!(changes(&r.call(FAIL, 19 * MS)), [(Closed, Open, ErrorRate)]);
}

// ---------------------------------------------------------------------------
// 3. The half-open ramp
// ---------------------------------------------------------------------------

/// ramp [0.1, 0.3, 0.6, 1.0], 20 probes per stage, advance at 90 %, reopen
/// below 50 %: the gradual-recovery article. One failure opens.
fn gradual() -> Rig {
    Rig::new(100, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
        o.ramp = vec![0.1, 0.3, 0.6, 1.0];
        o.half_open_calls = 20;
        o.advance_rate = 0.9;
        o.reopen_rate = Some(0.5);
    })
}

/// Asks calls at `now` until the stage's 20 probes are issued, checking that
/// exactly the calls on the beat of `tenths`/10 are admitted; then checks
/// that the spent quota rejects every further call.
fn issue_stage(r: &mut Rig, now: Nanos, tenths: u64) -> Vec<Permit> {
    let mut permits = Vec::new();
    let mut n = 0;
    while permits.len() < 20 {
        let admitted = match r.acquire(now).0 {
            Decision::Allowed(p) => {
                assert!(p.probe);
                permits.push(p);
                true
            }
            Decision::Rejected(rej) => {
                assert_eq!(rej, Rejection { state: HalfOpen, retry_after: Some(HALF_OPEN_RETRY_AFTER) });
                false
            }
        };
        assert_eq!(admitted, on_beat(n, tenths), "call {n} at share {tenths}/10");
        n += 1;
    }
    assert_eq!(r.b.probes_in_flight(), 20);
    for _ in 0..30 {
        assert!(!r.admitted(now), "more than 20 probes issued in one stage");
    }
    permits
}

#[test]
fn each_ramp_stage_admits_its_share_within_its_quota_and_advances_after_all_probes() {
    let mut r = gradual();
    let mut now = r.half_open(0);
    for (stage, tenths) in [(0u32, 1u64), (1, 3), (2, 6), (3, 10)] {
        let m = r.metrics(now);
        assert_eq!((m.state, m.stage, m.admit_share), (HalfOpen, Some(stage), tenths as f64 / 10.0));
        let permits = issue_stage(&mut r, now, tenths);
        // Two failures first: 18 of 20 is exactly advance_rate, but only
        // once the last probe has finished.
        for (i, p) in permits.into_iter().enumerate() {
            now += MS;
            let t = r.complete(p, if i < 2 { FAIL } else { OK }, now);
            if i < 19 {
                assert!(t.is_empty(), "stage {stage}, probe {i}: {:?}", changes(&t));
                assert_eq!(r.metrics(now).stage, Some(stage));
            } else if stage < 3 {
                assert!(t.is_empty(), "advancing a stage is no state change");
                assert_eq!(r.metrics(now).stage, Some(stage + 1));
            } else {
                assert_eq!(changes(&t), [(HalfOpen, Closed, ProbesPassed)]);
            }
        }
    }
}

#[test]
fn a_stage_between_the_two_rates_starts_over() {
    let mut r = gradual();
    let now = r.half_open(0);
    let before = r.b.generation();
    let permits = issue_stage(&mut r, now, 1);
    // 17 of 20 = 85 %: below advance_rate, not below reopen_rate.
    for (i, p) in permits.into_iter().enumerate() {
        assert!(r.complete(p, if i < 3 { FAIL } else { OK }, now).is_empty());
    }
    let m = r.metrics(now);
    assert_eq!((m.state, m.stage), (HalfOpen, Some(0)));
    assert_ne!(r.b.generation(), before);
    assert_eq!(r.b.probes_in_flight(), 0);
    // A fresh quota, spaced from the first call again.
    let permits = issue_stage(&mut r, now, 1);
    for p in permits {
        r.complete(p, OK, now);
    }
    assert_eq!(r.metrics(now).stage, Some(1));
}

#[test]
fn a_second_round_in_a_row_between_the_two_rates_reopens() {
    let mut r = gradual();
    let now = r.half_open(0);
    // 17 of 20 = 85 %, twice: the first round starts over, the second reopens.
    for round in 0..2 {
        let permits = issue_stage(&mut r, now, 1);
        let mut seen = Vec::new();
        for (i, p) in permits.into_iter().enumerate() {
            seen.extend(changes(&r.complete(p, if i < 3 { FAIL } else { OK }, now)));
        }
        if round == 0 {
            assert!(seen.is_empty(), "{seen:?}");
            assert_eq!(r.metrics(now).stage, Some(0));
        } else {
            assert_eq!(seen, [(HalfOpen, Open, ProbeFailed)]);
        }
    }
}

#[test]
fn a_round_after_one_between_the_rates_reopens_as_soon_as_it_can_no_longer_pass() {
    // Issue #34 item 4: such a round can only pass or reopen, so it reopens
    // once advance_rate is out of reach, not at its last probe.
    let mut r = gradual();
    let now = r.half_open(0);
    let mut permits = issue_stage(&mut r, now, 1).into_iter();
    // A first round that can no longer pass, but may still land between
    // the rates, runs to its end: 3 failures leave at best 17 / 20.
    for p in permits.by_ref().take(3) {
        assert!(r.complete(p, FAIL, now).is_empty());
    }
    for p in permits {
        assert!(r.complete(p, OK, now).is_empty(), "17 of 20: between the rates, a new round");
    }
    assert_eq!(r.metrics(now).stage, Some(0));
    let mut permits = issue_stage(&mut r, now, 1).into_iter();
    // 2 failures leave at best 18 / 20 = advance_rate: it may still pass.
    for p in permits.by_ref().take(2) {
        assert!(r.complete(p, FAIL, now).is_empty());
    }
    // The 3rd leaves at best 17 / 20: reopen while 17 probes still run.
    let t = r.complete(permits.next().unwrap(), FAIL, now);
    assert_eq!(changes(&t), [(HalfOpen, Open, ProbeFailed)]);
    for p in permits {
        assert!(r.complete(p, OK, now).is_empty(), "a later probe decides nothing");
    }
    assert_eq!(r.state(now), Open);
}

#[test]
fn with_min_stage_duration_a_round_after_one_between_the_rates_reopens_at_its_first_failure() {
    // Rounds of 4 probes, advance at 100 %: after a round between the
    // rates, one failure is enough; after a round that passed too early,
    // the streak is broken and a failure waits for the round's end.
    let mut r = Rig::new(100, |o| {
        o.min_calls = 1;
        o.open_duration = 1.0;
        o.half_open_calls = 4;
        o.advance_rate = 1.0;
        o.reopen_rate = Some(0.5);
        o.min_stage_duration = 10.0;
    });
    let now = r.half_open(0);
    let round = |r: &mut Rig, outcomes: &[Outcome]| -> Vec<(State, State, Reason)> {
        let permits: Vec<Permit> = (0..4).map(|_| r.permit(now)).collect();
        permits.into_iter().zip(outcomes).flat_map(|(p, o)| changes(&r.complete(p, *o, now))).collect()
    };
    assert!(round(&mut r, &[FAIL, OK, OK, OK]).is_empty(), "between the rates, once");
    assert!(round(&mut r, &[OK; 4]).is_empty(), "passed before min_stage_duration: the streak ends");
    let permits: Vec<Permit> = (0..4).map(|_| r.permit(now)).collect();
    let mut permits = permits.into_iter();
    assert!(r.complete(permits.next().unwrap(), FAIL, now).is_empty(), "a first round again: it goes on");
    for p in permits {
        assert!(r.complete(p, OK, now).is_empty());
    }
    assert_eq!(r.metrics(now).stage, Some(0), "3 of 4: between the rates, a new round");
    let permits: Vec<Permit> = (0..4).map(|_| r.permit(now)).collect();
    let mut permits = permits.into_iter();
    let t = r.complete(permits.next().unwrap(), FAIL, now);
    assert_eq!(changes(&t), [(HalfOpen, Open, ProbeFailed)], "the first failure of the next round");
    for p in permits {
        assert!(r.complete(p, OK, now).is_empty());
    }
}

#[test]
fn a_timed_out_probe_of_a_round_after_one_between_the_rates_reopens_at_once() {
    let mut r = Rig::new(100, |o| {
        o.min_calls = 1;
        o.open_duration = 1.0;
        o.half_open_calls = 2;
        o.advance_rate = 1.0;
        o.reopen_rate = Some(0.5);
        o.probe_timeout = ProbeTimeout::Seconds(3.0);
    });
    let now = r.half_open(0);
    let (a, b) = (r.permit(now), r.permit(now));
    r.complete(a, FAIL, now);
    assert!(r.complete(b, OK, now).is_empty(), "1 of 2: between the rates");
    let hung = r.permit(now);
    let _other = r.permit(now + SEC);
    assert_eq!(changes(&r.tick(now + 3 * SEC)), [(HalfOpen, Open, ProbeTimeout)], "the hung probe alone decides");
    assert!(r.complete(hung, OK, now + 3 * SEC).is_empty());
}

#[test]
fn a_round_that_passes_between_two_rounds_between_the_rates_keeps_the_stage() {
    // Rounds of 4 probes; a stage lasts at least 10 s, so a round that
    // passes earlier starts it over too, and breaks the streak.
    let mut r = Rig::new(100, |o| {
        o.min_calls = 1;
        o.open_duration = 1.0;
        o.half_open_calls = 4;
        o.advance_rate = 1.0;
        o.reopen_rate = Some(0.5);
        o.min_stage_duration = 10.0;
    });
    let now = r.half_open(0);
    let round = |r: &mut Rig, failures: usize| -> Vec<(State, State, Reason)> {
        let permits: Vec<Permit> = (0..4).map(|_| r.permit(now)).collect();
        permits
            .into_iter()
            .enumerate()
            .flat_map(|(i, p)| changes(&r.complete(p, if i < failures { FAIL } else { OK }, now)))
            .collect()
    };
    assert!(round(&mut r, 1).is_empty(), "3 of 4: between the rates, once");
    assert!(round(&mut r, 0).is_empty(), "passed before min_stage_duration: a new round");
    assert!(round(&mut r, 1).is_empty(), "between the rates, once again");
    assert_eq!(round(&mut r, 1), [(HalfOpen, Open, ProbeFailed)], "twice in a row");
}

#[test]
fn a_stage_reopens_as_soon_as_reopen_rate_is_out_of_reach() {
    let mut r = gradual();
    let now = r.half_open(0);
    for p in issue_stage(&mut r, now, 1) {
        r.complete(p, OK, now);
    }
    assert_eq!(r.metrics(now).stage, Some(1));
    let mut permits = issue_stage(&mut r, now, 3).into_iter();
    // After 10 failures the best case is 10 / 20 = reopen_rate: not yet.
    for p in permits.by_ref().take(10) {
        assert!(r.complete(p, FAIL, now).is_empty());
    }
    // The 11th leaves at most 9 / 20: reopen while 9 probes still run.
    let t = r.complete(permits.next().unwrap(), FAIL, now);
    assert_eq!(changes(&t), [(HalfOpen, Open, ProbeFailed)]);
    for p in permits {
        assert!(r.complete(p, OK, now).is_empty());
    }
    assert_eq!(r.state(now), Open);
}

#[test]
fn a_share_of_a_fifth_admits_exactly_one_call_in_five() {
    let mut r = Rig::new(100, |o| {
        o.min_calls = 1;
        o.ramp = vec![0.2];
        o.half_open_calls = 10;
    });
    let now = r.half_open(0);
    let mut permits = Vec::new();
    for n in 0..50 {
        match r.acquire(now).0 {
            Decision::Allowed(p) => permits.push((n, p)),
            Decision::Rejected(_) => assert_ne!(n % 5, 0, "call {n} is on the beat"),
        }
    }
    assert_eq!(permits.iter().map(|(n, _)| *n).collect::<Vec<_>>(), (0..50).step_by(5).collect::<Vec<_>>());
    // Ten probes issued: call 50, on the beat, is over the quota.
    for _ in 50..=60 {
        assert!(!r.admitted(now));
    }
    let last = permits.pop().unwrap().1;
    for (_, p) in permits {
        assert!(r.complete(p, OK, now).is_empty());
    }
    assert_eq!(changes(&r.complete(last, OK, now)), [(HalfOpen, Closed, ProbesPassed)]);
}

#[test]
fn with_the_defaults_two_successful_probes_close() {
    let mut r = Rig::new(100, |o| o.min_calls = 1);
    let now = r.half_open(0);
    let p1 = r.permit(now);
    let p2 = r.permit(now);
    assert!(!r.admitted(now));
    assert!(r.complete(p1, OK, now).is_empty());
    assert_eq!(changes(&r.complete(p2, OK, now)), [(HalfOpen, Closed, ProbesPassed)]);
}

#[test]
fn with_the_defaults_one_failed_probe_reopens_at_once() {
    let mut r = Rig::new(100, |o| o.min_calls = 1);
    let now = r.half_open(0);
    let p1 = r.permit(now);
    let p2 = r.permit(now);
    assert_eq!(changes(&r.complete(p2, FAIL, now)), [(HalfOpen, Open, ProbeFailed)]);
    assert!(r.complete(p1, OK, now).is_empty());
    assert_eq!(r.state(now), Open);
}

// ---------------------------------------------------------------------------
// 4. Slow probes
// ---------------------------------------------------------------------------

#[test]
fn a_slow_probe_counts_as_a_failed_probe() {
    let mut r = Rig::new(100, |o| o.min_calls = 1);
    let now = r.half_open(0);
    let p1 = r.permit(now);
    let _p2 = r.permit(now);
    assert_eq!(changes(&r.complete(p1, SLOW_OK, now)), [(HalfOpen, Open, ProbeFailed)]);

    // Just under the threshold is a passed probe.
    let now = now + r.metrics(now).retry_after.unwrap();
    let p1 = r.permit(now);
    let p2 = r.permit(now);
    assert!(r.complete(p1, Outcome::Success { duration_ns: 799.9e6 }, now).is_empty());
    assert_eq!(changes(&r.complete(p2, OK, now)), [(HalfOpen, Closed, ProbesPassed)]);
}

#[test]
fn slow_probes_lower_the_success_share_of_a_stage() {
    let mut r = gradual();
    let now = r.half_open(0);
    // 3 slow successes: 17 of 20 passed, so the stage starts over.
    for (i, p) in issue_stage(&mut r, now, 1).into_iter().enumerate() {
        r.complete(p, if i < 3 { SLOW_OK } else { OK }, now);
    }
    assert_eq!(r.metrics(now).stage, Some(0));
}

// ---------------------------------------------------------------------------
// 5. Generations
// ---------------------------------------------------------------------------

#[test]
fn a_closed_permit_completed_after_the_breaker_opened_does_not_count() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 2;
        o.open_duration = 10.0;
    });
    let late1 = r.permit(0);
    let late2 = r.permit(0);
    r.open_by_errors(MS);
    // Neither recorded nor deciding anything, in open or in half-open.
    assert!(r.complete(late1, FAIL, SEC).is_empty());
    assert_eq!(r.counts(SEC).total, 0);
    let half = MS + 10 * SEC;
    r.tick(half);
    let probe = r.permit(half);
    assert!(r.complete(late2, FAIL, half).is_empty());
    assert_eq!((r.state(half), r.counts(half).total, r.b.probes_in_flight()), (HalfOpen, 0, 1));
    r.complete(probe, OK, half);
    assert_eq!(changes(&r.call(OK, half)), [(HalfOpen, Closed, ProbesPassed)]);
}

#[test]
fn a_probe_of_a_previous_stage_neither_counts_nor_frees_a_slot() {
    let mut r = Rig::new(100, |o| {
        o.min_calls = 1;
        o.ramp = vec![0.5, 1.0];
    });
    let now = r.half_open(0);
    let p1 = r.permit(now);
    assert!(!r.admitted(now));
    let p2 = r.permit(now);
    r.complete(p1, OK, now);
    r.complete(p2, OK, now);
    assert_eq!(r.metrics(now).stage, Some(1));
    let q1 = r.permit(now);
    let q2 = r.permit(now);
    // A stage ends only once all its probes finished, so a stage-0 permit
    // reaching stage 1 is a late duplicate; it must still be dropped.
    assert!(r.complete(p1, Outcome::Released, now).is_empty());
    assert!(!r.admitted(now), "a stale release freed a slot");
    assert!(r.complete(p2, FAIL, now).is_empty());
    assert!(r.complete(p1, OK, now).is_empty());
    assert_eq!((r.state(now), r.b.probes_in_flight()), (HalfOpen, 2));
    // Only the stage's own probes decide.
    assert!(r.complete(q1, OK, now).is_empty());
    assert_eq!(changes(&r.complete(q2, OK, now)), [(HalfOpen, Closed, ProbesPassed)]);
}

#[test]
fn a_hung_probe_of_an_earlier_half_open_period_does_not_block_a_new_one() {
    let mut r = Rig::new(100, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
    });
    let now = r.half_open(0);
    let failed = r.permit(now);
    let hung = r.permit(now);
    r.complete(failed, FAIL, now);
    let now = now + 10 * SEC;
    assert_eq!(changes(&r.tick(now)), [(Open, HalfOpen, CoolDownElapsed)]);
    // Two fresh slots although `hung` never finished.
    assert_eq!(r.b.probes_in_flight(), 0);
    let q1 = r.permit(now);
    let q2 = r.permit(now);
    assert!(r.complete(hung, FAIL, now).is_empty());
    assert!(r.complete(hung, Outcome::Released, now).is_empty());
    assert!(!r.admitted(now));
    r.complete(q1, OK, now);
    assert_eq!(changes(&r.complete(q2, OK, now)), [(HalfOpen, Closed, ProbesPassed)]);
}

#[test]
fn a_permit_from_before_a_manual_change_is_dropped() {
    let mut r = Rig::new(10, |o| o.min_calls = 1);
    let closed = r.permit(0);
    r.disable(0);
    assert!(r.complete(closed, FAIL, 0).is_empty());
    assert_eq!(r.counts(0).total, 0);
    let disabled = r.permit(0);
    r.reset(0);
    // It would open the breaker (min_calls 1) if it counted.
    assert!(r.complete(disabled, FAIL, 0).is_empty());
    assert_eq!((r.state(0), r.counts(0).total), (Closed, 0));
}

// ---------------------------------------------------------------------------
// 6. Released probes
// ---------------------------------------------------------------------------

#[test]
fn a_released_probe_gives_its_slot_back_and_the_stage_still_completes() {
    let mut r = Rig::new(100, |o| o.min_calls = 1);
    let now = r.half_open(0);
    let p1 = r.permit(now);
    let p2 = r.permit(now);
    assert!(!r.admitted(now));
    assert!(r.complete(p2, Outcome::Released, now).is_empty());
    assert_eq!(r.b.probes_in_flight(), 1);
    assert_eq!(r.counts(now).total, 0, "a released probe records nothing");
    let p3 = r.permit(now);
    assert!(!r.admitted(now));
    assert!(r.complete(p1, OK, now).is_empty());
    assert_eq!(changes(&r.complete(p3, OK, now)), [(HalfOpen, Closed, ProbesPassed)]);
}

#[test]
fn a_released_call_in_closed_state_records_nothing() {
    let mut r = Rig::new(10, |o| o.min_calls = 1);
    assert!(r.call(Outcome::Released, 0).is_empty());
    assert!(r.unpermitted(Outcome::Released, 0).is_empty());
    assert_eq!((r.state(0), r.counts(0).total), (Closed, 0));
}

// ---------------------------------------------------------------------------
// 7. Timers
// ---------------------------------------------------------------------------

#[test]
fn open_turns_half_open_exactly_when_the_open_duration_has_passed() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
    });
    r.open_by_errors(5 * SEC);
    assert!(r.tick(15 * SEC - 1).is_empty());
    assert_eq!(r.rejection(15 * SEC - 1), Rejection { state: Open, retry_after: Some(1) });
    let (d, t) = r.acquire(15 * SEC);
    assert_eq!(changes(&t), [(Open, HalfOpen, CoolDownElapsed)]);
    assert!(matches!(d, Decision::Allowed(Permit { probe: true, .. })));
}

#[test]
fn half_open_is_noticed_lazily_by_any_entry_point() {
    let mut r = Rig::new(10, |o| o.min_calls = 1);
    r.open_by_errors(0);
    assert_eq!(r.b.state(), Open);
    let late = 1_000 * SEC;
    assert_eq!(changes(&r.unpermitted(FAIL, late)), [(Open, HalfOpen, CoolDownElapsed)]);
    let mut r = Rig::new(10, |o| o.min_calls = 1);
    r.open_by_errors(0);
    let (m, t) = r.b.metrics(&mut r.w, &r.cfg, late);
    assert_eq!(changes(&t), [(Open, HalfOpen, CoolDownElapsed)]);
    assert_eq!(m.state, HalfOpen);
}

#[test]
fn retry_after_while_open_is_the_real_remaining_time() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
    });
    r.open_by_errors(5 * SEC);
    assert_eq!(r.rejection(5 * SEC).retry_after, Some(10 * SEC));
    assert_eq!(r.rejection(7 * SEC + SEC / 2).retry_after, Some(7 * SEC + SEC / 2));
    assert_eq!(r.metrics(14 * SEC).retry_after, Some(SEC));
}

#[test]
fn peek_describes_the_breaker_without_applying_due_timers() {
    // Issue #34 item 8: `inspect` delivered open -> half_open.
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
    });
    r.open_by_errors(0);
    let before = r.b;
    let m = r.b.peek(&mut r.w, &r.cfg, 11 * SEC);
    assert_eq!((m.state, m.retry_after, m.stage), (Open, Some(0), None));
    assert_eq!(r.b, before, "nothing changed");
    assert_eq!(changes(&r.tick(11 * SEC)), [(Open, HalfOpen, CoolDownElapsed)], "the timer is still due");
}

#[test]
fn half_open_timeout_reopens_counting_from_when_half_open_was_noticed() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
        o.half_open_timeout = Some(5.0);
    });
    r.open_by_errors(0);
    // Noticed 2 s late: the stage begins at 12 s and times out at 17 s.
    let hung = r.permit(12 * SEC);
    assert_eq!(r.state(17 * SEC - 1), HalfOpen);
    let (d, t) = r.acquire(17 * SEC);
    assert_eq!(changes(&t), [(HalfOpen, Open, HalfOpenTimeout)]);
    assert_eq!(d, Decision::Rejected(Rejection { state: Open, retry_after: Some(10 * SEC) }));
    assert!(r.complete(hung, OK, 17 * SEC).is_empty());
    assert_eq!(r.state(17 * SEC), Open);
}

#[test]
fn each_ramp_stage_has_its_own_half_open_timeout() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
        o.half_open_timeout = Some(5.0);
        o.ramp = vec![0.5, 1.0];
    });
    let half = r.half_open(0);
    let p = r.permit(half);
    assert!(!r.admitted(half));
    let q = r.permit(half);
    r.complete(p, OK, half + 4 * SEC);
    r.complete(q, OK, half + 4 * SEC);
    // Stage 1 began at half + 4 s: past the first stage's deadline, not its own.
    assert_eq!(r.metrics(half + 5 * SEC).stage, Some(1));
    assert_eq!(r.state(half + 9 * SEC - 1), HalfOpen);
    assert_eq!(changes(&r.tick(half + 9 * SEC)), [(HalfOpen, Open, HalfOpenTimeout)]);
}

#[test]
fn backoff_multiplies_each_reopen_from_half_open_up_to_the_cap() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
        o.backoff = 2.0;
        o.max_open_duration = Some(35.0);
    });
    let mut now = 0;
    assert_eq!(r.open_by_errors(now).metrics.retry_after, Some(10 * SEC));
    let mut open_for = 10 * SEC;
    for expected in [20, 35, 35] {
        now += open_for;
        let p = r.permit(now);
        let t = r.complete(p, FAIL, now);
        assert_eq!(changes(&t), [(HalfOpen, Open, ProbeFailed)]);
        open_for = only(&t).metrics.retry_after.unwrap();
        assert_eq!(open_for, expected * SEC);
    }
    // Closing resets the backoff.
    now += open_for;
    r.call(OK, now);
    assert_eq!(changes(&r.call(OK, now)), [(HalfOpen, Closed, ProbesPassed)]);
    assert_eq!(r.open_by_errors(now).metrics.retry_after, Some(10 * SEC));
}

#[test]
fn a_half_open_timeout_reopen_is_backed_off_too() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
        o.backoff = 3.0;
        o.half_open_timeout = Some(1.0);
    });
    let half = r.half_open(0);
    let t = r.tick(half + SEC);
    assert_eq!(changes(&t), [(HalfOpen, Open, HalfOpenTimeout)]);
    assert_eq!(only(&t).metrics.retry_after, Some(30 * SEC));
}

#[test]
fn trip_opens_for_the_open_duration_without_backoff_or_jitter() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
        o.backoff = 2.0;
        o.jitter = 0.5;
    });
    assert_eq!(only(&r.trip(0)).metrics.retry_after, Some(10 * SEC));
    // Reopen from half-open (backed off), then trip while open.
    let now = 10 * SEC;
    let p = r.permit(now);
    r.complete(p, FAIL, now);
    assert!(r.metrics(now).retry_after.unwrap() > 10 * SEC);
    assert!(r.trip(now + SEC).is_empty(), "open → open is no state change");
    assert_eq!(r.metrics(now + SEC).retry_after, Some(10 * SEC));
}

#[test]
fn trip_from_half_open_opens_for_the_open_duration_without_backoff() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
        o.backoff = 2.0;
    });
    let half = r.half_open(0);
    let t = r.trip(half);
    assert_eq!(changes(&t), [(HalfOpen, Open, Manual)]);
    assert_eq!(only(&t).metrics.retry_after, Some(10 * SEC));
}

#[test]
fn jitter_shortens_open_durations_within_its_share() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
        o.backoff = 2.0;
        o.jitter = 0.25;
    });
    let mut seen = HashSet::new();
    let mut now = 0;
    for _ in 0..100 {
        let first = r.open_by_errors(now).metrics.retry_after.unwrap();
        assert!((7 * SEC + SEC / 2..=10 * SEC).contains(&first), "{first}");
        seen.insert(first);
        // A reopen backs off the unjittered 10 s, then jitters 20 s.
        now += first;
        let p = r.permit(now);
        let t = r.complete(p, FAIL, now);
        let second = only(&t).metrics.retry_after.unwrap();
        assert!((15 * SEC..=20 * SEC).contains(&second), "{second}");
        r.reset(now);
    }
    assert!(seen.len() > 10, "jitter spreads the durations: {seen:?}");
}

// ---------------------------------------------------------------------------
// 8. Manual control
// ---------------------------------------------------------------------------

const STATES: [State; 5] = [Closed, Open, HalfOpen, ForcedOpen, Disabled];

/// A breaker in `state` (window of 10, min_calls 2, open 10 s) and the
/// instant it is so. Closed holds one success; forced open and disabled hold
/// one failure; half-open holds one finished probe of two.
fn in_state(state: State) -> (Rig, Nanos) {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 2;
        o.open_duration = 10.0;
    });
    let now = match state {
        Closed => {
            r.call(OK, 0);
            0
        }
        Open => {
            r.open_by_errors(0);
            0
        }
        HalfOpen => {
            let now = r.half_open(0);
            r.call(OK, now);
            now
        }
        ForcedOpen => {
            r.call(FAIL, 0);
            r.force_open(0);
            0
        }
        Disabled => {
            r.call(FAIL, 0);
            r.disable(0);
            0
        }
    };
    assert_eq!(r.state(now), state);
    (r, now)
}

fn expected_change(from: State, to: State) -> Vec<(State, State, Reason)> {
    if from == to {
        vec![]
    } else {
        vec![(from, to, Manual)]
    }
}

#[test]
fn trip_opens_from_every_state_and_empties_the_window() {
    for s in STATES {
        let (mut r, now) = in_state(s);
        let now = now + SEC;
        assert_eq!(changes(&r.trip(now)), expected_change(s, Open), "from {s:?}");
        let m = r.metrics(now);
        assert_eq!((m.state, m.counts, m.retry_after), (Open, Counts::default(), Some(10 * SEC)), "from {s:?}");
        assert_eq!(r.state(now + 10 * SEC), HalfOpen, "from {s:?}");
    }
}

#[test]
fn reset_closes_from_every_state_and_empties_the_window() {
    for s in STATES {
        let (mut r, now) = in_state(s);
        assert_eq!(changes(&r.reset(now)), expected_change(s, Closed), "from {s:?}");
        assert_eq!((r.state(now), r.counts(now)), (Closed, Counts::default()), "from {s:?}");
        assert!(!r.permit(now).probe);
    }
}

#[test]
fn force_open_rejects_until_reset_with_no_retry_after() {
    for s in STATES {
        let (mut r, now) = in_state(s);
        assert_eq!(changes(&r.force_open(now)), expected_change(s, ForcedOpen), "from {s:?}");
        // No timer ends it.
        let later = now + 1_000_000 * SEC;
        assert_eq!(r.rejection(later), Rejection { state: ForcedOpen, retry_after: None });
        let m = r.metrics(later);
        assert_eq!((m.state, m.stage, m.admit_share, m.retry_after), (ForcedOpen, None, 0.0, None));
        assert_eq!(changes(&r.reset(later)), [(ForcedOpen, Closed, Manual)]);
        assert!(r.admitted(later));
    }
}

#[test]
fn disable_admits_everything_records_and_never_trips() {
    for s in STATES {
        let (mut r, now) = in_state(s);
        let before = r.counts(now);
        assert_eq!(changes(&r.disable(now)), expected_change(s, Disabled), "from {s:?}");
        // Only reset and entering closed or open empty the window.
        assert_eq!(r.counts(now), before, "from {s:?}");
        for i in 0..30 {
            let p = r.permit(now + i);
            assert!(!p.probe);
            assert!(r.complete(p, FAIL, now + i).is_empty());
            assert!(r.unpermitted(SLOW_OK, now + i).is_empty());
        }
        let m = r.metrics(now + 30);
        assert_eq!((m.state, m.stage, m.admit_share, m.retry_after), (Disabled, None, 1.0, Some(0)));
        assert_eq!(m.counts, Counts { total: 10, failures: 5, slow_calls: 5 });
        assert_eq!(changes(&r.reset(now + 30)), [(Disabled, Closed, Manual)]);
        assert_eq!(r.counts(now + 30), Counts::default());
    }
}

#[test]
fn entering_forced_open_keeps_the_window() {
    let (mut r, now) = in_state(Closed);
    r.force_open(now);
    assert_eq!(r.counts(now), Counts { total: 1, failures: 0, slow_calls: 0 });
}

#[test]
fn record_unpermitted_counts_in_closed_and_disabled_and_is_ignored_otherwise() {
    let (mut r, now) = in_state(Closed);
    assert_eq!(changes(&r.unpermitted(FAIL, now)), [(Closed, Open, ErrorRate)]);

    let (mut r, now) = in_state(Disabled);
    for _ in 0..5 {
        assert!(r.unpermitted(FAIL, now).is_empty());
    }
    assert_eq!((r.state(now), r.counts(now).failures), (Disabled, 6));

    for s in [Open, HalfOpen, ForcedOpen] {
        let (mut r, now) = in_state(s);
        let before = r.metrics(now);
        for _ in 0..5 {
            assert!(r.unpermitted(FAIL, now).is_empty(), "in {s:?}");
        }
        assert_eq!(r.metrics(now), before, "in {s:?}");
    }
    // In half-open it neither counts as a probe nor frees one.
    let (mut r, now) = in_state(HalfOpen);
    assert_eq!(r.b.probes_in_flight(), 0);
    let p = r.permit(now);
    r.unpermitted(OK, now);
    assert_eq!((r.state(now), r.b.probes_in_flight()), (HalfOpen, 1));
    assert_eq!(changes(&r.complete(p, OK, now)), [(HalfOpen, Closed, ProbesPassed)]);
}

// ---------------------------------------------------------------------------
// 9. Metrics
// ---------------------------------------------------------------------------

#[test]
fn metrics_describe_each_state() {
    let expected = [
        (Closed, None, 1.0, Some(0)),
        (Open, None, 0.0, Some(6 * SEC)),
        (HalfOpen, Some(0), 1.0, Some(HALF_OPEN_RETRY_AFTER)),
        (ForcedOpen, None, 0.0, None),
        (Disabled, None, 1.0, Some(0)),
    ];
    for (s, stage, admit_share, retry_after) in expected {
        let (mut r, now) = in_state(s);
        // Open was entered at 0 for 10 s: 6 s remain at 4 s.
        let now = if s == Open { 4 * SEC } else { now };
        let m = r.metrics(now);
        assert_eq!((m.state, m.stage, m.admit_share, m.retry_after), (s, stage, admit_share, retry_after));
    }
    // In half-open: the current stage and its share.
    let mut r = gradual();
    let now = r.half_open(0);
    for p in issue_stage(&mut r, now, 1) {
        r.complete(p, OK, now);
    }
    let m = r.metrics(now);
    assert_eq!((m.stage, m.admit_share, m.retry_after), (Some(1), 0.3, Some(HALF_OPEN_RETRY_AFTER)));
}

#[test]
fn every_rejection_is_counted() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
        o.ramp = vec![0.5];
        o.half_open_calls = 1;
    });
    r.open_by_errors(0);
    for i in 0..3 {
        r.rejection(i * SEC);
    }
    assert_eq!(r.metrics(3 * SEC).counters.rejected, 3);
    let half = 10 * SEC;
    let t = r.acquire(half).1;
    assert_eq!(only(&t).metrics.counters.rejected, 3);
    // Off the beat, then on the beat over the quota.
    r.rejection(half);
    r.rejection(half);
    assert_eq!(r.metrics(half).counters.rejected, 5);
    r.force_open(half);
    r.rejection(half);
    r.rejection(half);
    // Admitted calls are no rejections.
    r.reset(half);
    r.call(OK, half);
    assert_eq!(r.metrics(half).counters.rejected, 7);
}

/// Counters through every path a call can take (docs/operating.md).
#[test]
fn counters_count_every_path_since_creation() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 2;
        o.open_duration = 10.0;
    });
    let c = |r: &mut Rig, now| r.metrics(now).counters;
    r.call(OK, 0);
    r.call(SLOW_OK, 0);
    let p = r.permit(0);
    // Ignored error or killed thread: a call, without an outcome.
    r.complete(p, Outcome::Released, 0);
    assert_eq!(c(&mut r, 0), Counters { calls: 3, successes: 2, failures: 0, slow: 1, rejected: 0, opened: 0 });
    // A slow failure is both; two failures in 4 open it.
    let late = r.permit(0);
    r.call(Outcome::Failure { duration_ns: 900.0e6 }, 0);
    r.call(FAIL, 0);
    assert_eq!(r.state(0), Open);
    // A call admitted before the opening counts when it ends, deciding nothing.
    assert!(r.complete(late, OK, SEC).is_empty());
    // Without a permit while open: neither recorded nor counted.
    r.unpermitted(FAIL, SEC);
    r.rejection(SEC);
    assert_eq!(c(&mut r, SEC), Counters { calls: 6, successes: 3, failures: 2, slow: 2, rejected: 1, opened: 1 });
    // trip! while open restarts the opening: not a second one.
    r.trip(2 * SEC);
    assert_eq!(c(&mut r, 2 * SEC).opened, 1);
    // Forced open rejects (and counts the rejections); disabled admits and counts.
    r.force_open(2 * SEC);
    r.rejection(2 * SEC);
    r.disable(2 * SEC);
    r.call(FAIL, 2 * SEC);
    r.call(FAIL, 2 * SEC);
    r.unpermitted(OK, 2 * SEC);
    assert_eq!(r.state(2 * SEC), Disabled);
    assert_eq!(c(&mut r, 2 * SEC), Counters { calls: 9, successes: 4, failures: 4, slow: 2, rejected: 2, opened: 1 });
    // Reset keeps the counters (they are since creation); trip! from closed is an opening.
    r.reset(3 * SEC);
    r.trip(3 * SEC);
    assert_eq!(c(&mut r, 3 * SEC), Counters { calls: 9, successes: 4, failures: 4, slow: 2, rejected: 2, opened: 2 });
}

#[test]
fn the_rates_that_opened_it_show_while_open_and_half_open_only() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 4;
        o.open_duration = 10.0;
        o.half_open_timeout = Some(5.0);
    });
    r.call(OK, 0);
    r.call(SLOW_OK, 0);
    r.call(FAIL, 0);
    assert_eq!(r.metrics(0).tripped, None);
    r.call(FAIL, 0);
    let opened_by = Some(Counts { total: 4, failures: 2, slow_calls: 1 });
    let m = r.metrics(0);
    assert_eq!((m.counts.total, m.tripped), (0, opened_by));
    assert_eq!(m.tripped.map(|t| (t.error_rate(), t.slow_call_rate())), Some((0.5, 0.25)));
    assert_eq!(r.metrics(10 * SEC).tripped, opened_by, "half-open");
    // A stage that times out before any probe finished keeps them.
    let t = r.tick(15 * SEC);
    assert_eq!(changes(&t), [(HalfOpen, Open, HalfOpenTimeout)]);
    assert_eq!(only(&t).metrics.tripped, opened_by);
    // A failed probe reopens it: its window is what opened it now.
    let p = r.permit(25 * SEC);
    r.complete(p, FAIL, 25 * SEC);
    assert_eq!(r.metrics(25 * SEC).tripped, Some(Counts { total: 1, failures: 1, slow_calls: 0 }));
    for manual in [Rig::force_open, Rig::disable, Rig::reset] {
        manual(&mut r, 26 * SEC);
        assert_eq!(r.metrics(26 * SEC).tripped, None);
    }
}

// ---------------------------------------------------------------------------
// 10. The trip rule against a naive model
// ---------------------------------------------------------------------------

/// Rates on a grid (so `==` the threshold happens often) or anywhere.
fn rate() -> impl Strategy<Value = f64> {
    prop_oneof![(1u32..=20).prop_map(|k| f64::from(k) / 20.0), 0.01f64..=1.0]
}

fn duration_ns() -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), 0.0f64..800e6, Just(800e6), 800e6f64..2000e6]
}

proptest! {
    /// The breaker opens exactly when the last `size` calls reach
    /// `min(min_calls, size)` and a rate reaches its threshold.
    #[test]
    fn closed_breaker_opens_exactly_when_a_naive_model_says_so(
        size in 1i64..25,
        min_calls in 1i64..40,
        error_rate_threshold in rate(),
        slow_rate_threshold in rate(),
        calls in prop::collection::vec((any::<bool>(), duration_ns(), any::<bool>()), 0..150),
    ) {
        let mut r = Rig::new(size, |o| {
            o.min_calls = min_calls;
            o.error_rate_threshold = error_rate_threshold;
            o.slow_rate_threshold = slow_rate_threshold;
            o.consecutive_failures = None; // the model judges the window alone
        });
        let verdict_at = min_calls.min(size) as usize;
        let mut model: Vec<(bool, f64)> = Vec::new();
        for (i, &(success, duration_ns, permitted)) in calls.iter().enumerate() {
            let now = i as Nanos * MS;
            let outcome = if success { Outcome::Success { duration_ns } } else { Outcome::Failure { duration_ns } };
            let t = if permitted {
                let p = r.permit(now);
                r.complete(p, outcome, now)
            } else {
                r.unpermitted(outcome, now)
            };
            model.push((success, duration_ns));
            let last = &model[model.len().saturating_sub(size as usize)..];
            let total = last.len() as f64;
            let error_rate = last.iter().filter(|c| !c.0).count() as f64 / total;
            let slow_rate = last.iter().filter(|c| c.1 >= 800e6).count() as f64 / total;
            let expected = if last.len() < verdict_at {
                vec![]
            } else if error_rate >= error_rate_threshold {
                vec![(Closed, Open, ErrorRate)]
            } else if slow_rate >= slow_rate_threshold {
                vec![(Closed, Open, SlowCallRate)]
            } else {
                vec![]
            };
            prop_assert_eq!(changes(&t), expected.clone(), "call {}", i);
            if !expected.is_empty() {
                r.reset(now);
                model.clear();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 11. Many threads
// ---------------------------------------------------------------------------

#[test]
fn many_threads_never_exceed_the_probe_quota() {
    const THREADS: usize = 8;
    const PERIODS: u32 = 25;
    let cfg = config(|o| {
        o.min_calls = 1;
        o.open_duration = 1.0;
        o.ramp = vec![0.25, 0.5, 1.0];
        o.half_open_calls = 3;
    });
    let quota = cfg.half_open_calls;
    let mut b = Breaker::new(3);
    let mut w = count_window(100);
    b.trip(&mut w, &cfg, 0);
    assert_eq!(changes(&b.tick(&mut w, &cfg, SEC)), [(Open, HalfOpen, CoolDownElapsed)]);
    let shared = Mutex::new((b, w));
    // Time and the count of half-open periods move only under the lock.
    let clock = AtomicI64::new(SEC);
    let periods = AtomicU32::new(1);
    let issued: Mutex<HashMap<u64, u32>> = Mutex::new(HashMap::new());
    let running = AtomicU32::new(0);
    let most_running = AtomicU32::new(0);

    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                // A cap instead of a hang if probes were ever lost.
                for _ in 0..10_000_000 {
                    let permit = {
                        let mut guard = shared.lock().unwrap();
                        let (b, w) = &mut *guard;
                        let mut now = clock.load(SeqCst);
                        if b.state() == Closed {
                            if periods.load(SeqCst) == PERIODS {
                                return;
                            }
                            periods.fetch_add(1, SeqCst);
                            b.trip(w, &cfg, now);
                            now += SEC;
                            clock.store(now, SeqCst);
                            assert_eq!(changes(&b.tick(w, &cfg, now)), [(Open, HalfOpen, CoolDownElapsed)]);
                        }
                        match b.acquire(w, &cfg, now).0 {
                            Decision::Allowed(p) => {
                                assert!(p.probe);
                                assert!(b.probes_in_flight() <= quota);
                                let mut issued = issued.lock().unwrap();
                                let n = issued.entry(p.generation).or_default();
                                *n += 1;
                                assert!(*n <= quota, "{n} probes issued in generation {}", p.generation);
                                Some(p)
                            }
                            Decision::Rejected(_) => None,
                        }
                    };
                    let Some(permit) = permit else {
                        std::thread::yield_now();
                        continue;
                    };
                    // Held without the lock, as `call` runs its block.
                    let n = running.fetch_add(1, SeqCst) + 1;
                    most_running.fetch_max(n, SeqCst);
                    for _ in 0..20 {
                        std::thread::yield_now();
                    }
                    running.fetch_sub(1, SeqCst);
                    let mut guard = shared.lock().unwrap();
                    let (b, w) = &mut *guard;
                    b.complete(w, &cfg, permit, OK, clock.load(SeqCst), 0);
                }
            });
        }
    });

    assert!(most_running.load(SeqCst) <= quota, "{} probes ran at once", most_running.load(SeqCst));
    assert_eq!(periods.load(SeqCst), PERIODS);
    assert_eq!(shared.lock().unwrap().0.state(), Closed);
    // Every stage (3) of every period issued exactly its quota.
    let issued = issued.into_inner().unwrap();
    assert_eq!(issued.len(), 3 * PERIODS as usize);
    assert!(issued.values().all(|&n| n == quota), "{issued:?}");
}

// ---------------------------------------------------------------------------
// 12. Extreme values
// ---------------------------------------------------------------------------

#[test]
fn a_huge_open_duration_saturates_instead_of_overflowing() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 1e300;
    });
    assert_eq!(r.cfg.open_duration, i64::MAX);
    assert_eq!(r.open_by_errors(0).metrics.retry_after, Some(i64::MAX));
    assert_eq!(r.state(i64::MAX - 1), Open);
    assert_eq!(r.state(i64::MAX), HalfOpen);
    // Opened at the start of time, a trip still reports the whole duration.
    assert_eq!(only(&r.trip(i64::MIN)).metrics.retry_after, Some(i64::MAX));
}

#[test]
fn many_reopens_with_a_huge_backoff_saturate() {
    for backoff in [2.0, 1e300] {
        let mut r = Rig::new(10, |o| {
            o.min_calls = 1;
            o.open_duration = 1e-3;
            o.backoff = backoff;
        });
        r.open_by_errors(0);
        let mut now: Nanos = 0;
        let mut last = 0;
        for _ in 0..1_000 {
            now = now.saturating_add(r.metrics(now).retry_after.unwrap());
            let p = r.permit(now);
            let t = r.complete(p, FAIL, now);
            assert_eq!(changes(&t), [(HalfOpen, Open, ProbeFailed)]);
            let open_for = r.b.open_for();
            assert!(open_for >= last, "open durations never shrink: {open_for} < {last}");
            last = open_for;
        }
        assert_eq!(last, i64::MAX);
    }
}

#[test]
fn extreme_times_and_durations_never_panic() {
    let nows = [i64::MIN, i64::MIN + 1, -SEC, -1, 0, 1, SEC, i64::MAX - 1, i64::MAX];
    let outcomes = [
        OK,
        FAIL,
        SLOW_OK,
        Outcome::Released,
        Outcome::Failure { duration_ns: f64::MAX },
        Outcome::Success { duration_ns: f64::INFINITY },
        Outcome::Success { duration_ns: f64::NAN },
    ];
    let configs = [
        config(|o| o.min_calls = 1),
        config(|o| {
            o.min_calls = 1;
            o.open_duration = 1e300;
            o.half_open_timeout = Some(1e300);
            o.backoff = 1e300;
            o.jitter = 0.999;
        }),
        config(|o| {
            o.min_calls = 1;
            o.open_duration = 1e-9;
            o.backoff = 1e300;
            o.max_open_duration = Some(1e300);
            o.half_open_timeout = Some(1e-9);
            o.ramp = vec![1e-9, 0.5, 1.0];
            o.half_open_calls = 1_000_000;
            o.reopen_rate = Some(0.0);
        }),
    ];
    for cfg in configs {
        let mut r = Rig { b: Breaker::new(u64::MAX), w: count_window(3), cfg };
        let mut step = 0;
        for &a in &nows {
            for &b in &nows {
                for o in outcomes {
                    if let Decision::Allowed(p) = r.acquire(a).0 {
                        r.complete(p, o, b);
                    }
                    r.unpermitted(o, b);
                    let m = r.metrics(b);
                    assert!(m.retry_after.map_or(true, |t| t >= 0), "{m:?}");
                    assert!((0.0..=1.0).contains(&m.admit_share), "{m:?}");
                }
                step += 1;
                match step % 6 {
                    0 => r.trip(a),
                    1 => r.tick(b),
                    2 => r.disable(a),
                    3 => r.reset(b),
                    4 => r.force_open(a),
                    _ => r.reset(a),
                };
            }
        }
    }
}

#[test]
fn a_wrapping_generation_still_drops_stale_permits() {
    let mut r = Rig::new(10, |o| o.min_calls = 1);
    r.b.generation = u64::MAX;
    let stale = r.permit(0);
    r.disable(0);
    assert_eq!(r.b.generation(), 0);
    assert!(r.complete(stale, FAIL, 0).is_empty());
    assert_eq!(r.counts(0).total, 0);
}

#[test]
fn a_permit_survives_its_bit_encoding() {
    for p in [
        Permit { generation: 0, probe: false, cohort: 0 },
        Permit { generation: 7, probe: true, cohort: 3 },
        Permit { generation: (1 << 43) - 1, probe: true, cohort: (1 << 20) - 1 },
    ] {
        assert_eq!(Permit::from_bits(p.to_bits()), p);
    }
}

#[test]
fn the_published_word_admits_without_the_lock_only_closed_or_disabled() {
    let mut rig = Rig::new(10, |_| {});
    let word = rig.b.published();
    assert_eq!(Permit::admitting(word), Some(Permit { generation: rig.b.generation(), probe: false, cohort: 0 }));
    rig.b.trip(&mut rig.w, &rig.cfg, 0);
    assert_eq!(Permit::admitting(rig.b.published()), None);
    rig.b.disable(&mut rig.w, &rig.cfg, 0);
    assert_eq!(Permit::admitting(rig.b.published()).map(|p| p.generation), Some(rig.b.generation()));
    rig.b.force_open(&mut rig.w, &rig.cfg, 0);
    assert_eq!(Permit::admitting(rig.b.published()), None);
}

// ---------------------------------------------------------------------------
// probe_timeout (docs/semantics.md): a probe not settled in time is a failed probe
// ---------------------------------------------------------------------------

#[test]
fn an_unsettled_probe_fails_open_duration_after_its_admission_by_default() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
        o.half_open_calls = 1;
    });
    let half = r.half_open(0);
    let hung = r.permit(half + SEC); // admitted 1 s into half-open
    assert!(!r.admitted(half + SEC), "its slot is taken");
    assert_eq!(r.state(half + 11 * SEC - 1), HalfOpen);
    let t = r.tick(half + 11 * SEC);
    assert_eq!(changes(&t), [(HalfOpen, Open, ProbeTimeout)]);
    // Its late outcome decides nothing.
    assert!(r.complete(hung, OK, half + 12 * SEC).is_empty());
    assert_eq!(r.state(half + 12 * SEC), Open);
}

#[test]
fn probe_timeout_false_waits_forever() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.half_open_calls = 1;
        o.probe_timeout = ProbeTimeout::Never;
    });
    let half = r.half_open(0);
    let hung = r.permit(half);
    assert_eq!(r.state(i64::MAX), HalfOpen);
    assert!(!r.admitted(i64::MAX));
    assert_eq!(changes(&r.complete(hung, FAIL, i64::MAX)), [(HalfOpen, Open, ProbeFailed)]);
}

#[test]
fn each_probe_times_out_from_its_own_admission_and_a_timed_out_one_decides_nothing_late() {
    // 4 probes; advance at 75 %, reopen below 50 %: one timed-out probe
    // leaves the stage undecided.
    let mut r = Rig::new(100, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
        o.half_open_calls = 4;
        o.advance_rate = 0.75;
        o.reopen_rate = Some(0.5);
        o.probe_timeout = ProbeTimeout::Seconds(2.0);
    });
    let half = r.half_open(0);
    let early = r.permit(half);
    let p2 = r.permit(half + SEC);
    let p3 = r.permit(half + SEC);
    let p4 = r.permit(half + SEC);
    assert!(r.tick(half + 2 * SEC).is_empty(), "the early probe failed; 3 of 4 can still pass");
    assert_eq!(r.b.probes_in_flight(), 3);
    // Reporting late, it neither counts nor frees a slot a second time.
    assert!(r.complete(early, FAIL, half + 2 * SEC).is_empty());
    assert_eq!(r.b.probes_in_flight(), 3);
    r.complete(p2, OK, half + 2 * SEC);
    r.complete(p3, OK, half + 2 * SEC);
    let t = r.complete(p4, OK, half + 2 * SEC);
    assert_eq!(changes(&t), [(HalfOpen, Closed, ProbesPassed)], "3 of 4 = advance_rate");
}

#[test]
fn a_timed_out_probe_never_settles_another_probe_of_the_stage_in_its_place() {
    let mut r = Rig::new(100, |o| {
        o.min_calls = 1;
        o.half_open_calls = 3;
        o.advance_rate = 0.6;
        o.reopen_rate = Some(0.3);
        o.probe_timeout = ProbeTimeout::Seconds(1.0);
    });
    let half = r.half_open(0);
    let stale = r.permit(half);
    let fresh = r.permit(half + SEC / 2);
    r.tick(half + SEC); // `stale` failed
    assert!(r.complete(stale, OK, half + SEC).is_empty());
    assert_eq!(r.b.probes_in_flight(), 1, "`fresh` still holds its slot");
    r.complete(fresh, OK, half + SEC);
    assert_eq!(r.b.probes_in_flight(), 0);
}

#[test]
fn the_earlier_of_a_probes_and_the_rounds_deadline_decides_the_reason() {
    let both = |probe: f64| {
        let mut r = Rig::new(10, |o| {
            o.min_calls = 1;
            o.open_duration = 10.0;
            o.half_open_timeout = Some(5.0);
            o.probe_timeout = ProbeTimeout::Seconds(probe);
        });
        let half = r.half_open(0);
        r.permit(half);
        // Both deadlines have passed when it is noticed.
        changes(&r.tick(half + 100 * SEC))
    };
    assert_eq!(both(4.0), [(HalfOpen, Open, ProbeTimeout)]);
    assert_eq!(both(5.0), [(HalfOpen, Open, HalfOpenTimeout)]);
    assert_eq!(both(6.0), [(HalfOpen, Open, HalfOpenTimeout)]);
}

#[test]
fn a_stale_closed_permit_never_settles_a_probe() {
    let mut r = Rig::new(10, |o| o.min_calls = 1);
    let abandoned = r.permit(0); // closed; its call raised, unreported
    let half = r.half_open(0);
    let probe = r.permit(half);
    assert!(r.complete(abandoned, OK, half).is_empty());
    assert_eq!(r.b.probes_in_flight(), 1);
    r.complete(probe, OK, half);
    assert_eq!(r.b.probes_in_flight(), 0);
}

#[test]
fn many_unsettled_probes_of_many_instants_time_out_early_at_worst_never_late() {
    let mut r = Rig::new(100, |o| {
        o.min_calls = 1;
        o.half_open_calls = 100;
        o.advance_rate = 0.01;
        o.reopen_rate = Some(0.0);
        o.probe_timeout = ProbeTimeout::Seconds(100.0);
    });
    let half = r.half_open(0);
    for i in 0..50 {
        r.permit(half + i * SEC);
    }
    // The last probe (admitted at +49 s) is due at +149 s at the latest.
    r.tick(half + 149 * SEC);
    assert_eq!(r.b.probes_in_flight(), 0);
}

// ---------------------------------------------------------------------------
// min_stage_duration (docs/semantics.md): stages that last
// ---------------------------------------------------------------------------

fn lasting(d: f64) -> Rig {
    Rig::new(100, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
        o.ramp = vec![0.5, 1.0];
        o.half_open_calls = 2;
        o.min_stage_duration = d;
        o.probe_timeout = ProbeTimeout::Never;
    })
}

/// Admits the stage's two probes at `now` (asking until both are issued)
/// and lets them succeed at `now`; returns the transitions of the last.
fn pass_round(r: &mut Rig, now: Nanos) -> Transitions {
    let mut permits = Vec::new();
    for _ in 0..10 {
        if let Decision::Allowed(p) = r.acquire(now).0 {
            permits.push(p);
        }
        if permits.len() == 2 {
            break;
        }
    }
    assert_eq!(permits.len(), 2, "a fresh quota of probes at {now}");
    r.complete(permits[0], OK, now);
    r.complete(permits[1], OK, now)
}

#[test]
fn a_round_that_passes_before_min_stage_duration_starts_a_new_round_of_the_same_stage() {
    let mut r = lasting(5.0);
    let e = r.half_open(0);
    let g = r.b.generation();
    assert!(pass_round(&mut r, e + SEC).is_empty());
    let m = r.metrics(e + SEC);
    assert_eq!((m.state, m.stage, m.admit_share), (HalfOpen, Some(0), 0.5));
    assert_ne!(r.b.generation(), g, "a new round has a new generation");
    assert_eq!(r.b.stage().map(|s| s.entered_at), Some(e), "starting over keeps the stage's entry time");
    // Its first call is admitted, with a fresh quota; the share is spaced anew.
    assert!(pass_round(&mut r, e + 4 * SEC).is_empty());
    assert_eq!(r.metrics(e + 4 * SEC).stage, Some(0));
    // The first round that passes at or after e + d advances.
    assert!(pass_round(&mut r, e + 5 * SEC).is_empty());
    assert_eq!(r.metrics(e + 5 * SEC).stage, Some(1));
    // The last stage closes only after it too has lasted d.
    let s1 = e + 5 * SEC;
    assert!(pass_round(&mut r, s1 + 5 * SEC - 1).is_empty());
    assert_eq!(r.state(s1 + 5 * SEC - 1), HalfOpen);
    assert_eq!(changes(&pass_round(&mut r, s1 + 5 * SEC)), [(HalfOpen, Closed, ProbesPassed)]);
}

#[test]
fn a_lasting_stage_reopens_at_once_and_waits_without_traffic() {
    let mut r = lasting(5.0);
    let e = r.half_open(0);
    // No traffic: no timer advances a stage.
    assert_eq!(r.metrics(e + 1_000 * SEC).stage, Some(0));
    let p = r.permit(e + 1_000 * SEC);
    assert!(r.complete(p, OK, e + 1_000 * SEC).is_empty());
    // One failure reopens, however young the round.
    let mut r = lasting(5.0);
    let e = r.half_open(0);
    let p = r.permit(e);
    assert_eq!(changes(&r.complete(p, FAIL, e)), [(HalfOpen, Open, ProbeFailed)]);
}

#[test]
fn half_open_timeout_counts_from_the_rounds_start_and_probe_timeout_from_each_admission() {
    let mut r = Rig::new(100, |o| {
        o.min_calls = 1;
        o.open_duration = 10.0;
        o.half_open_calls = 1;
        o.min_stage_duration = 4.0;
        o.half_open_timeout = Some(4.0);
        o.probe_timeout = ProbeTimeout::Seconds(3.0);
    });
    let e = r.half_open(0);
    let p = r.permit(e + 3 * SEC);
    r.complete(p, OK, e + 3 * SEC); // passed before e + 4 s: a new round from e + 3 s
    assert_eq!(r.state(e + 7 * SEC - 1), HalfOpen, "the new round times out at e + 7 s, not e + 4 s");
    let q = r.permit(e + 5 * SEC);
    assert_eq!(r.state(e + 7 * SEC - 1), HalfOpen);
    let t = r.tick(e + 7 * SEC);
    assert_eq!(changes(&t), [(HalfOpen, Open, HalfOpenTimeout)]);
    assert!(r.complete(q, OK, e + 7 * SEC).is_empty());
}

#[test]
fn zero_min_stage_duration_advances_on_probes_alone() {
    let mut r = lasting(0.0);
    let e = r.half_open(0);
    assert!(pass_round(&mut r, e).is_empty());
    assert_eq!(r.metrics(e).stage, Some(1));
}

// ---------------------------------------------------------------------------
// consecutive_failures (docs/semantics.md, docs/choices.md)
// ---------------------------------------------------------------------------

#[test]
fn failures_in_a_row_open_a_breaker_whose_window_is_full_of_successes() {
    let mut r = Rig::new(100, |o| o.consecutive_failures = Some(5));
    for _ in 0..100 {
        assert!(r.call(OK, 0).is_empty());
    }
    for i in 0..4 {
        assert!(r.call(FAIL, 0).is_empty(), "failure {i}: 4 of 100 is far below the error rate");
    }
    assert_eq!(changes(&r.call(FAIL, 0)), [(Closed, Open, ConsecutiveFailures)]);
}

#[test]
fn failures_in_a_row_open_below_min_calls_and_a_success_starts_the_count_again() {
    let mut r = Rig::new(100, |o| {
        o.consecutive_failures = Some(3);
        o.min_calls = 50;
    });
    for _ in 0..2 {
        r.call(FAIL, 0);
    }
    r.call(OK, 0);
    for _ in 0..2 {
        assert!(r.call(FAIL, 0).is_empty());
    }
    assert_eq!(changes(&r.call(FAIL, 0)), [(Closed, Open, ConsecutiveFailures)]);
    // Closing again starts from nothing.
    r.b.reset(&mut r.w, &r.cfg, 0);
    for _ in 0..2 {
        assert!(r.call(FAIL, 0).is_empty());
    }
}

#[test]
fn without_consecutive_failures_only_the_rates_open() {
    let mut r = Rig::new(100, |o| {
        o.consecutive_failures = None;
        o.min_calls = 50;
    });
    for _ in 0..49 {
        assert!(r.call(FAIL, 0).is_empty());
    }
    assert_eq!(changes(&r.call(FAIL, 0)), [(Closed, Open, ErrorRate)]);
}

#[test]
fn consecutive_failures_is_checked_and_part_of_the_fingerprint() {
    let bad = Config::new(&Options { consecutive_failures: Some(0), ..Options::default() }).unwrap_err();
    assert_eq!(bad.name, "consecutive_failures");
    let a = config(|o| o.consecutive_failures = Some(8)).fingerprint();
    let b = config(|o| o.consecutive_failures = None).fingerprint();
    assert_ne!(a, b);
}

/// Trips of a breaker with the default options and `consecutive_failures`
/// `n`, over `calls` calls failing at random with probability `p`
/// (a fixed-seed generator: the same run every time).
fn trips_at_error_rate(n: Option<i64>, p: f64, calls: usize) -> usize {
    let mut r = Rig::new(100, |o| o.consecutive_failures = n);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut trips = 0;
    let mut now = 0;
    for _ in 0..calls {
        now += 10 * MS; // 100 calls/s
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let failed = (x >> 11) as f64 / (1u64 << 53) as f64 > 1.0 - p;
        match r.acquire(now).0 {
            Decision::Allowed(permit) => {
                let t = r.complete(permit, if failed { FAIL } else { OK }, now);
                trips += changes(&t).iter().filter(|c| c.1 == Open).count();
            }
            Decision::Rejected(_) => {}
        }
    }
    trips
}

#[test]
fn the_default_streak_rarely_trips_on_a_steady_twenty_percent_of_errors() {
    // 100 minutes at 100 calls/s: 600,000 calls, each failing with p = 0.2.
    // A run of 8 failures starts at a given call with 0.8 * 0.2^8: about
    // 0.15 times per 10 minutes (60,000 calls); a run of 5, 15 times.
    assert_eq!(Options::default().consecutive_failures, Some(8));
    let trips = trips_at_error_rate(Options::default().consecutive_failures, 0.2, 600_000);
    assert!(trips < 10, "{trips} trips in 100 minutes: more than once per 10 minutes");
    assert!(trips_at_error_rate(Some(5), 0.2, 600_000) > 50, "a streak of 5 would trip all the time");
    assert_eq!(trips_at_error_rate(None, 0.2, 600_000), 0, "the window's 50 % is never reached");
}

// ---------------------------------------------------------------------------
// The clock going back (a test's travel_back, docs/testing.md): a time a
// timer counts from that lies ahead of now is clamped to now at the next
// step, so no deadline is further ahead than its own length.

const YEAR: Nanos = 365 * 86_400 * SEC;

#[test]
fn a_breaker_opened_a_year_ahead_is_open_for_open_duration_from_now_after_travel_back() {
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 30.0;
    });
    r.open_by_errors(YEAR);
    // Back to the real time, 0: open, but for 30 s, not for a year.
    assert_eq!(r.rejection(0).retry_after, Some(30 * SEC));
    assert_eq!(r.metrics(10 * SEC).retry_after, Some(20 * SEC));
    assert_eq!(changes(&r.tick(30 * SEC)), [(Open, HalfOpen, CoolDownElapsed)]);
}

#[test]
fn half_open_timers_started_ahead_count_from_now_after_travel_back() {
    let rig = |probe_timeout| {
        Rig::new(100, move |o| {
            o.min_calls = 1;
            o.open_duration = 10.0;
            o.half_open_calls = 2;
            o.half_open_timeout = Some(5.0);
            o.probe_timeout = probe_timeout;
        })
    };
    // A probe admitted a year ahead times out 2 s after the clock came back.
    let mut r = rig(ProbeTimeout::Seconds(2.0));
    let half = r.half_open(YEAR);
    let hung = r.permit(half);
    assert!(r.tick(0).is_empty());
    assert!(r.tick(2 * SEC - 1).is_empty());
    assert_eq!(changes(&r.tick(2 * SEC)), [(HalfOpen, Open, ProbeTimeout)]);
    assert!(r.complete(hung, OK, 2 * SEC).is_empty(), "a timed-out probe settles nothing");
    // A round begun a year ahead times out 5 s after.
    let mut r = rig(ProbeTimeout::Never);
    r.half_open(YEAR);
    assert_eq!(r.state(0), HalfOpen);
    assert_eq!(r.state(5 * SEC - 1), HalfOpen);
    assert_eq!(changes(&r.tick(5 * SEC)), [(HalfOpen, Open, HalfOpenTimeout)]);
}

#[test]
fn a_time_window_a_year_ahead_counts_again_at_once_after_travel_back() {
    let mut r = Rig::with_window(Window::Time(TimeWindow::new(10.0, 10, 800.0).unwrap()), |o| {
        o.min_calls = 3;
    });
    r.call(OK, YEAR);
    r.call(OK, YEAR);
    // Back at 0: the calls of a year ahead no longer count, and new ones do.
    assert_eq!(r.counts(0).total, 0);
    r.call(FAIL, 0);
    r.call(FAIL, SEC);
    let t = r.call(FAIL, 2 * SEC);
    assert_eq!(changes(&t), [(Closed, Open, ErrorRate)]);
}

#[test]
fn a_step_a_little_behind_another_moves_nothing_that_matters() {
    // A thread that read the clock just before another thread's step.
    let mut r = Rig::new(10, |o| {
        o.min_calls = 1;
        o.open_duration = 30.0;
    });
    r.open_by_errors(10 * SEC);
    assert_eq!(r.rejection(10 * SEC - MS).retry_after, Some(30 * SEC));
    assert_eq!(r.state(40 * SEC - MS - 1), Open);
    assert_eq!(r.state(40 * SEC - MS), HalfOpen);
}

#[test]
fn settled_calls_feed_the_adaptive_cap_whatever_the_state() {
    use crate::concurrency::AdaptiveSettings;
    use crate::config::{Concurrency, MaxConcurrent};
    let mut r = Rig::new(100, |o| o.max_concurrent = MaxConcurrent::Adaptive);
    assert_eq!(r.cfg.max_concurrent, Concurrency::Adaptive(AdaptiveSettings::default()));
    assert_eq!(r.b.concurrency_limit(&r.cfg), Some(20), "adaptive_initial before any call");
    let mut now = 0;
    let mut settle = |r: &mut Rig, o: Outcome, in_flight: u32| {
        now += MS;
        let p = r.permit(now);
        r.b.complete(&mut r.w, &r.cfg, p, o, now, in_flight);
    };
    for _ in 0..50 {
        settle(&mut r, Outcome::Success { duration_ns: 10.0e6 }, 20);
    }
    let grown = r.b.concurrency_limit(&r.cfg).unwrap();
    assert!(grown > 20, "{grown}");
    for _ in 0..50 {
        settle(&mut r, Outcome::Success { duration_ns: 100.0e6 }, 20);
    }
    let fallen = r.b.concurrency_limit(&r.cfg).unwrap();
    assert!(fallen <= 10, "{fallen}");
    // Released calls say nothing; an older generation's still count.
    let p = r.permit(now);
    r.b.complete(&mut r.w, &r.cfg, p, Outcome::Released, now, 20);
    assert_eq!(r.b.concurrency_limit(&r.cfg), Some(fallen));
    r.b.trip(&mut r.w, &r.cfg, now);
    r.b.complete(&mut r.w, &r.cfg, p, Outcome::Failure { duration_ns: 1.0e9 }, now, fallen);
    assert!(r.b.concurrency_limit(&r.cfg).unwrap() < fallen);

    r.b.reset(&mut r.w, &r.cfg, now);
    assert_eq!(r.b.concurrency_limit(&r.cfg), Some(20), "reset starts it afresh");

    let fixed = Rig::new(100, |o| o.max_concurrent = MaxConcurrent::Fixed(3));
    assert_eq!(fixed.b.concurrency_limit(&fixed.cfg), Some(3));
    let none = Rig::new(100, |_| ());
    assert_eq!(none.b.concurrency_limit(&none.cfg), None);
}

#[test]
fn a_permit_given_back_frees_its_probe_slot_and_counts_no_call() {
    let mut r = Rig::new(10, |o| {
        o.half_open_calls = 1;
        o.min_calls = 4;
        o.consecutive_failures = None;
    });
    let now = r.half_open(0);
    let calls = r.metrics(now).counters.calls;
    let probe = r.permit(now);
    assert!(!r.admitted(now), "the one probe slot is taken");
    assert!(r.b.give_back(&mut r.w, &r.cfg, probe, now).is_empty());
    assert_eq!(r.metrics(now).counters.calls, calls, "a call that never ran is not a call");
    let again = r.permit(now);
    assert_eq!(changes(&r.complete(again, OK, now)), [(HalfOpen, Closed, ProbesPassed)]);
    // Given back twice, or a permit of another generation: nothing.
    assert!(r.b.give_back(&mut r.w, &r.cfg, probe, now).is_empty());
    assert_eq!(r.metrics(now).counters.calls, calls + 1);
}
