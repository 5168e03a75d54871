//! Tests of the adaptive cap: its settings, single samples, and the
//! properties docs/choices.md ("The adaptive concurrency cap") measures, against a
//! simulated dependency: closed-loop callers, a server whose latency grows
//! with the calls in flight, and simulated time (nothing sleeps).

use super::*;
use proptest::prelude::*;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The dependency's no-load latency in the simulations: 10 ms.
const L0: u64 = 10_000_000;

/// N: at 10 × L0, the cap is at C/2 or less within this many samples
/// (docs/choices.md quotes it and the value measured).
const N: u64 = 50;
/// M: back at L0, the cap is at C or more within this many samples.
const M: u64 = 80;

/// splitmix64: a fixed-seed source of noise.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A server with `workers` workers answering in `base` nanoseconds; more
/// calls than workers share them (each takes `in_flight / workers` times
/// longer). `noise` spreads each latency uniformly by ± that share, and one
/// call in `straggler_every` (0: none) takes 20 times longer. A call that
/// would take longer than `timeout` fails at the timeout.
#[derive(Clone, Copy)]
struct Dependency {
    base: u64,
    workers: u32,
    noise: f64,
    straggler_every: u64,
    timeout: Option<u64>,
}

impl Dependency {
    fn steady(base: u64) -> Self {
        Self { base, workers: 20, noise: 0.0, straggler_every: 0, timeout: None }
    }

    /// A call's latency and whether it succeeded, begun with `in_flight`
    /// calls in flight (itself included).
    fn call(&self, in_flight: u32, rng: &mut Rng) -> (u64, bool) {
        let load = (f64::from(in_flight) / f64::from(self.workers)).max(1.0);
        let mut latency = self.base as f64 * load;
        if self.noise > 0.0 {
            latency *= 1.0 + self.noise * (2.0 * rng.unit() - 1.0);
        }
        if self.straggler_every > 0 && rng.next() % self.straggler_every == 0 {
            latency *= 20.0;
        }
        let latency = latency as u64;
        match self.timeout {
            Some(t) if latency > t => (t, false),
            _ => (latency, true),
        }
    }
}

/// An event of the simulation, in time order: a call ends (with its
/// latency, outcome and the calls in flight when it began), or a caller
/// tries to begin one.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    at: u64,
    seq: u64,
    end: Option<(u64, bool, u32)>,
}

/// `callers` callers, each calling again as soon as its call ends; a caller
/// refused at the cap tries again L0 later.
struct Sim {
    s: AdaptiveSettings,
    cap: AdaptiveLimit,
    dep: Dependency,
    rng: Rng,
    events: BinaryHeap<Reverse<Event>>,
    seq: u64,
    in_flight: u32,
    rejected: u64,
    samples: u64,
}

impl Sim {
    fn new(callers: u32, s: AdaptiveSettings, dep: Dependency) -> Self {
        let mut sim = Self {
            s,
            cap: AdaptiveLimit::new(&s),
            dep,
            rng: Rng(u64::from(callers)),
            events: BinaryHeap::new(),
            seq: 0,
            in_flight: 0,
            rejected: 0,
            samples: 0,
        };
        for i in 0..callers {
            // Spread over one latency, so callers are out of step.
            sim.push(u64::from(i) * L0 / u64::from(callers), None);
        }
        sim
    }

    fn push(&mut self, at: u64, end: Option<(u64, bool, u32)>) {
        self.seq += 1;
        self.events.push(Reverse(Event { at, seq: self.seq, end }));
    }

    /// Runs until `samples` more calls have ended, calling `each` after
    /// every one with the number of samples so far in this run.
    fn run(&mut self, samples: u64, mut each: impl FnMut(&Self, u64)) {
        let mut n = 0;
        while n < samples {
            let Reverse(e) = self.events.pop().expect("callers never vanish");
            match e.end {
                Some((latency, ok, began_with)) => {
                    self.in_flight -= 1;
                    self.cap.sample(&self.s, latency as f64, ok, began_with);
                    self.samples += 1;
                    n += 1;
                    each(self, n);
                    self.push(e.at, None);
                }
                None if self.in_flight >= self.cap.limit() => {
                    self.rejected += 1;
                    self.push(e.at + L0, None);
                }
                None => {
                    self.in_flight += 1;
                    let (latency, ok) = self.dep.call(self.in_flight, &mut self.rng);
                    self.push(e.at + latency, Some((latency, ok, self.in_flight)));
                }
            }
        }
    }

    /// The samples it takes (at most `limit`) until `done` holds.
    fn samples_until(&mut self, limit: u64, done: impl Fn(u32) -> bool) -> Option<u64> {
        let mut first = None;
        self.run(limit, |sim, n| {
            if first.is_none() && done(sim.cap.limit()) {
                first = Some(n);
            }
        });
        first
    }

    /// The lowest cap seen over `samples` more samples.
    fn lowest(&mut self, samples: u64) -> u32 {
        let mut low = u32::MAX;
        self.run(samples, |sim, _| low = low.min(sim.cap.limit()));
        low
    }
}

fn defaults() -> AdaptiveSettings {
    AdaptiveSettings::check(None, None, None, None).unwrap()
}

// ---- settings ----

#[test]
fn the_defaults_are_initial_20_min_1_max_1000_smoothing_0_2() {
    assert_eq!(defaults(), AdaptiveSettings { initial: 20, min: 1, max: 1000, smoothing: 0.2 });
    assert_eq!(defaults(), AdaptiveSettings::default());
}

#[test]
fn defaults_follow_the_bounds_given() {
    let s = AdaptiveSettings::check(None, Some(50), None, None).unwrap();
    assert_eq!((s.initial, s.min, s.max), (50, 50, 1000));
    let s = AdaptiveSettings::check(None, Some(2_000), None, None).unwrap();
    assert_eq!((s.initial, s.min, s.max), (2_000, 2_000, 2_000));
    let s = AdaptiveSettings::check(None, None, Some(8), None).unwrap();
    assert_eq!((s.initial, s.min, s.max), (8, 1, 8));
}

#[test]
fn bad_settings_name_the_option_and_its_range() {
    let err = |r: Result<AdaptiveSettings, ConfigError>| {
        let e = r.unwrap_err();
        (e.name, e.range, e.got)
    };
    assert_eq!(
        err(AdaptiveSettings::check(None, Some(0), None, None)),
        ("adaptive_min", "an Integer in 1..100_000", "0".to_string())
    );
    assert_eq!(err(AdaptiveSettings::check(None, Some(100_001), None, None)).0, "adaptive_min");
    assert_eq!(
        err(AdaptiveSettings::check(None, Some(5), Some(4), None)),
        ("adaptive_max", "an Integer in adaptive_min..100_000", "4".to_string())
    );
    assert_eq!(err(AdaptiveSettings::check(None, None, Some(100_001), None)).0, "adaptive_max");
    assert_eq!(
        err(AdaptiveSettings::check(Some(11), None, Some(10), None)),
        ("adaptive_initial", "an Integer in adaptive_min..adaptive_max", "11".to_string())
    );
    assert_eq!(err(AdaptiveSettings::check(Some(0), None, None, None)).0, "adaptive_initial");
    for bad in [0.0, -0.1, 1.5, f64::NAN, f64::INFINITY] {
        let (name, range, _) = err(AdaptiveSettings::check(None, None, None, Some(bad)));
        assert_eq!((name, range), ("adaptive_smoothing", "a Float in (0.0, 1.0]"));
    }
    assert!(AdaptiveSettings::check(Some(1), Some(1), Some(1), Some(1.0)).is_ok());
    assert!(AdaptiveSettings::check(Some(100_000), Some(100_000), Some(100_000), Some(1e-9)).is_ok());
}

#[test]
fn settings_change_the_fingerprint() {
    let a = defaults().fingerprint(Fnv::default()).finish();
    let b = AdaptiveSettings { smoothing: 0.3, ..defaults() }.fingerprint(Fnv::default()).finish();
    assert_ne!(a, b);
}

// ---- single samples ----

#[test]
fn the_cap_starts_at_initial_and_knows_no_latency() {
    let cap = AdaptiveLimit::new(&defaults());
    assert_eq!(cap.limit(), 20);
    assert_eq!((cap.noload_ns(), cap.recent_ns()), (0.0, 0.0));
}

#[test]
fn a_default_state_starts_at_initial() {
    let s = AdaptiveSettings { initial: 7, ..defaults() };
    let mut cap = AdaptiveLimit::default();
    assert_eq!(cap.current(&s), 7);
    cap.sample(&s, 10e6, true, 1);
    assert_eq!((cap.current(&s), cap.limit()), (7, 7));
}

#[test]
fn nan_infinite_and_negative_latencies_change_nothing() {
    let s = defaults();
    let mut cap = AdaptiveLimit::new(&s);
    cap.sample(&s, 5e6, true, 20);
    let before = cap;
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -5e6] {
        for ok in [true, false] {
            cap.sample(&s, bad, ok, 20);
            assert_eq!(cap, before, "{bad} {ok}");
        }
    }
}

#[test]
fn a_zero_latency_counts_as_the_floor() {
    let s = defaults();
    let mut cap = AdaptiveLimit::new(&s);
    cap.sample(&s, 0.0, true, 1);
    assert_eq!(cap.noload_ns(), FLOOR_NS);
    // A real call at the floor's ten times is then a rise, not a collapse
    // to a no-load of zero.
    cap.sample(&s, 10.0 * FLOOR_NS, true, 1);
    assert!(cap.limit() >= 18, "{cap:?}");
}

#[test]
fn failures_before_any_success_change_nothing() {
    let s = defaults();
    let mut cap = AdaptiveLimit::new(&s);
    cap.sample(&s, 30e9, false, 20);
    assert_eq!(cap, AdaptiveLimit::new(&s));
}

#[test]
fn a_fast_failure_changes_nothing_and_a_slow_one_cuts_the_cap() {
    let s = defaults();
    let mut cap = AdaptiveLimit::new(&s);
    cap.sample(&s, 10e6, true, 1);
    let before = cap;
    cap.sample(&s, 1e6, false, 20);
    cap.sample(&s, 19e6, false, 20);
    assert_eq!(cap, before);
    // A timeout: half the cap as the target, smoothed by 0.2.
    cap.sample(&s, 1e9, false, 20);
    assert_eq!(cap.limit(), 18);
    assert_eq!(cap.noload_ns(), 10e6);
    assert!(cap.recent_ns() > 10e6);
}

#[test]
fn one_stuck_call_moves_the_cap_little() {
    let s = AdaptiveSettings { initial: 100, ..defaults() };
    let mut cap = AdaptiveLimit::new(&s);
    cap.sample(&s, 10e6, true, 100);
    // One 30 s call among 10 ms ones moves the recent latency as if it
    // took OUTLIER × 10 ms: by 20 %, within the tolerance.
    cap.sample(&s, 30e9, true, 100);
    assert!((cap.recent_ns() - 12e6).abs() < 1.0, "{cap:?}");
    assert!(cap.limit() >= 100, "{cap:?}");
}

#[test]
fn the_cap_grows_only_while_callers_use_half_of_it() {
    let s = defaults();
    let mut cap = AdaptiveLimit::new(&s);
    for _ in 0..100 {
        cap.sample(&s, 10e6, true, 9);
    }
    assert_eq!(cap.limit(), 20);
    cap.sample(&s, 10e6, true, 10);
    assert_eq!(cap.limit(), 20, "20 + 0.2·√20 rounds down to 20");
    cap.sample(&s, 10e6, true, 10);
    assert_eq!(cap.limit(), 20, "10 calls in flight use less than half of 20.9");
    cap.sample(&s, 10e6, true, 11);
    assert_eq!(cap.limit(), 21);
}

#[test]
fn one_very_slow_call_barely_moves_the_no_load_latency() {
    let s = defaults();
    let mut cap = AdaptiveLimit::new(&s);
    cap.sample(&s, 0.0, true, 1);
    cap.sample(&s, 0.5e9, true, 1);
    assert!(cap.noload_ns() <= FLOOR_NS * (1.0 + 2.0 * NOLOAD_DRIFT) + 1e-6, "{cap:?}");
    // Slow calls in a row then cut the cap, as a test's clock makes them.
    for _ in 0..10 {
        cap.sample(&s, 0.5e9, true, 1);
    }
    assert!(cap.limit() < 20, "{cap:?}");
}

#[test]
fn the_no_load_latency_drifts_up_to_a_lasting_new_latency() {
    let s = defaults();
    let mut cap = AdaptiveLimit::new(&s);
    cap.sample(&s, 10e6, true, 1);
    for _ in 0..(5.0 / NOLOAD_DRIFT) as usize {
        cap.sample(&s, 100e6, true, 1);
    }
    assert!(cap.noload_ns() > 99e6, "{cap:?}");
}

// ---- the properties, against the simulated dependency ----

#[test]
fn at_steady_latency_up_to_20_callers_are_never_refused() {
    for c in 1..=20 {
        for noise in [0.0, 0.2] {
            let dep = Dependency { noise, ..Dependency::steady(L0) };
            let mut sim = Sim::new(c, defaults(), dep);
            let low = sim.lowest(20_000);
            assert_eq!(sim.rejected, 0, "C = {c}, noise {noise}: cap fell to {low}");
            assert!(low >= c, "C = {c}, noise {noise}: cap fell to {low}");
        }
    }
}

/// Callers warmed up at L0, then the dependency at `slow` × L0: the
/// samples it takes the cap to reach C/2 or less.
fn samples_to_halve(c: u32, dep: Dependency) -> u64 {
    let mut sim = Sim::new(c, defaults(), Dependency::steady(L0));
    sim.run(5_000, |_, _| {});
    sim.dep = dep;
    sim.samples_until(10 * N, |cap| cap <= c / 2).unwrap_or_else(|| panic!("C = {c}: never at C/2"))
}

#[test]
fn at_ten_times_the_latency_the_cap_halves_within_n_samples() {
    // C = 1 is left out: C/2 rounds down to 0, below any cap.
    let worst = (2..=20).map(|c| samples_to_halve(c, Dependency::steady(10 * L0))).max().unwrap();
    println!("at 10 × L0, the cap reached C/2 within {worst} samples (N = {N})");
    assert!(worst <= N, "{worst} samples > N = {N}");
}

#[test]
fn timeouts_halve_the_cap_faster_than_slow_answers() {
    let slow = (2..=20).map(|c| samples_to_halve(c, Dependency::steady(10 * L0))).max().unwrap();
    let timing_out = Dependency { timeout: Some(5 * L0), ..Dependency::steady(10 * L0) };
    let timeouts = (2..=20).map(|c| samples_to_halve(c, timing_out)).max().unwrap();
    println!("calls timing out at 5 × L0: C/2 within {timeouts} samples (slow answers: {slow})");
    assert!(timeouts < slow, "{timeouts} >= {slow}");
}

#[test]
fn back_at_the_no_load_latency_the_cap_returns_to_c_within_m_samples() {
    let mut worst = 0;
    for c in 1..=20 {
        // A slow phase ending as the cap halves, and ones long enough that
        // it reached the minimum.
        for slow_samples in [N, 100, 300, 1_000] {
            let mut sim = Sim::new(c, defaults(), Dependency::steady(L0));
            sim.run(5_000, |_, _| {});
            sim.dep = Dependency::steady(10 * L0);
            sim.run(slow_samples, |_, _| {});
            sim.dep = Dependency::steady(L0);
            let n = sim
                .samples_until(10 * M, |cap| cap >= c)
                .unwrap_or_else(|| panic!("C = {c} after {slow_samples} slow samples: never back at C"));
            worst = worst.max(n);
        }
    }
    println!("back at L0, the cap returned to C within {worst} samples (M = {M})");
    assert!(worst <= M, "{worst} samples > M = {M}");
}

#[test]
fn a_long_noisy_run_never_pins_the_cap_to_its_minimum() {
    // ±30 % noise and one call in 100 twenty times slower, for 200,000
    // calls: no schedule ever drives the cap down, and it stays at C.
    for c in [1, 5, 10, 20] {
        let dep = Dependency { noise: 0.3, straggler_every: 100, ..Dependency::steady(L0) };
        let mut sim = Sim::new(c, defaults(), dep);
        let low = sim.lowest(200_000);
        println!("C = {c}: lowest cap {low} over 200,000 noisy calls, {} refused", sim.rejected);
        assert!(low > defaults().min, "C = {c}: the cap fell to its minimum");
        assert!(low >= c, "C = {c}: the cap fell to {low}");
    }
}

#[test]
fn an_overloaded_server_keeps_the_cap_off_its_minimum_and_below_the_callers() {
    // 60 callers, 10 workers: latency passes TOLERANCE × L0 beyond 20
    // calls in flight. The cap swings around there (it grows by √cap per
    // call, and learns of the queue a round trip late), never pinned to 1
    // and never letting every caller in.
    let dep = Dependency { workers: 10, noise: 0.1, ..Dependency::steady(L0) };
    let mut sim = Sim::new(60, defaults(), dep);
    sim.run(2_000, |_, _| {});
    let (mut low, mut high, mut sum) = (u32::MAX, 0, 0u64);
    sim.run(100_000, |sim, _| {
        low = low.min(sim.cap.limit());
        high = high.max(sim.cap.limit());
        sum += u64::from(sim.cap.limit());
    });
    println!("60 callers on 10 workers: the cap stayed within {low}..={high}, {} on average", sum / 100_000);
    assert!(low >= 5, "{low}");
    assert!(high <= 50, "{high}");
}

#[test]
fn a_dependency_slower_for_good_gets_its_cap_back() {
    // Three times slower whatever the load, from some moment on: the cap
    // falls, calls at the minimum teach the rule the new no-load latency,
    // and the cap returns; no schedule is needed for it.
    for c in [5, 20] {
        let mut sim = Sim::new(c, defaults(), Dependency::steady(L0));
        sim.run(5_000, |_, _| {});
        sim.dep = Dependency::steady(3 * L0);
        let mut low = u32::MAX;
        let mut back = None;
        sim.run(5_000, |sim, n| {
            low = low.min(sim.cap.limit());
            if back.is_none() && low < c && sim.cap.limit() >= c {
                back = Some(n);
            }
        });
        println!("C = {c}, 3 × L0 for good: the cap fell to {low}, back at C after {back:?} samples");
        assert!(back.is_some_and(|n| n <= 1_000), "C = {c}: {back:?}");
    }
}

// ---- random samples never corrupt the state ----

fn latency() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(-0.0),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
        -1e12..0.0f64,
        0.0..1e6f64,
        0.0..1e12f64,
        1e12..1e300f64,
    ]
}

fn settings() -> impl Strategy<Value = AdaptiveSettings> {
    (1u32..50, 0u32..200, 0u32..200, 1e-6..=1.0f64).prop_map(|(min, up, at, smoothing)| {
        let max = min + up;
        AdaptiveSettings { initial: min + at % (up + 1), min, max, smoothing }
    })
}

proptest! {
    #[test]
    fn the_cap_stays_within_its_bounds_and_the_state_finite(
        s in settings(),
        samples in prop::collection::vec((latency(), any::<bool>(), any::<u32>()), 0..300),
    ) {
        let mut cap = AdaptiveLimit::new(&s);
        for (latency, ok, in_flight) in samples {
            cap.sample(&s, latency, ok, in_flight);
            prop_assert!((s.min..=s.max).contains(&cap.limit()), "{:?} {:?}", s, cap);
            prop_assert!(cap.limit.is_finite() && (f64::from(s.min)..=f64::from(s.max)).contains(&cap.limit));
            for v in [cap.noload, cap.noload_at, cap.recent] {
                prop_assert!(v.is_finite() && v >= 0.0, "{:?}", cap);
            }
            prop_assert!(cap.noload == 0.0 || cap.noload >= FLOOR_NS);
        }
    }
}
