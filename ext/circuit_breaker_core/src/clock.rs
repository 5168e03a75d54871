//! The clocks callers read `now` from.
//!
//! The rules never read a clock by themselves: every entry point takes
//! `now` in [`Nanos`] (the rules crate's time arithmetic, re-exported here),
//! read once by the caller. This file provides the two sources callers
//! use: the system-wide monotonic clock (the same in every process of a
//! host, which shared state relies on) and a manual clock for tests. Both
//! are cheap enough for the hot path and never go backwards on their own.
//!
//! A process-wide offset, set by the test helpers ([`advance_secs`],
//! [`follow_secs`]), is added to the two system clocks so that a test suite
//! can move every breaker of the process at once (docs/testing.md); unused,
//! it costs one relaxed load per reading. It can move back (a test's
//! `travel_back`), so a record may hold times ahead of `now`: the state
//! machine and the time window clamp them at their next step (the rules
//! crate's breaker/ and window.rs). Records other processes read (`shared:`) use
//! [`HostClock`], which the offset never moves.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError};

pub use circuit_breaker_rules::time::{
    checked_nanos_from_secs, nanos_from_secs, secs_from_nanos, Nanos, NANOS_PER_SEC,
};

/// The most the offset moves the clocks: half of what a reading holds
/// (about 146 years), so that a reading (the time since boot plus the
/// offset) never saturates and no clock stops.
pub const MAX_TRAVEL: Nanos = i64::MAX / 2;

/// The offset's two parts: what `advance_circuit_breakers` added since the
/// last [`follow_secs`] that started a test, and how far the test's
/// `Time.now` is ahead of the real time (its time helpers: ActiveSupport's,
/// Timecop). Written under this lock, rarely; clocks read the sum in
/// [`TRAVELLED`].
struct Travel {
    advanced: Nanos,
    ahead: Nanos,
}

static TRAVEL: Mutex<Travel> = Mutex::new(Travel { advanced: 0, ahead: 0 });

/// How far the offset moves [`MonotonicClock`] and [`CoarseClock`]
/// forward: the parts' sum, within [`MAX_TRAVEL`].
static TRAVELLED: AtomicI64 = AtomicI64::new(0);

/// Changes the parts under the lock and publishes their sum.
fn set_travel(f: impl FnOnce(&mut Travel)) -> Nanos {
    // Nothing panics under this lock; a poisoned one holds valid numbers.
    let mut t = TRAVEL.lock().unwrap_or_else(PoisonError::into_inner);
    f(&mut t);
    let total = t.advanced.saturating_add(t.ahead).min(MAX_TRAVEL);
    TRAVELLED.store(total, Ordering::Relaxed);
    total
}

/// Moves this process's system clocks forward by `secs` more (the test
/// helpers' `advance_circuit_breakers`): finite, >= 0, and the offset stays
/// within [`MAX_TRAVEL`] (an error otherwise, never a clock that stops).
/// Returns the offset.
pub fn advance_secs(secs: f64) -> Result<Nanos, crate::check::ConfigError> {
    const RANGE: &str = "a finite Numeric >= 0, keeping the breakers' clock within about 146 years of the real time";
    let by = checked_nanos_from_secs(secs).filter(|_| secs >= 0.0);
    let mut fits = false;
    let total = set_travel(|t| {
        if let Some(advanced) = by.and_then(|by| t.advanced.checked_add(by)) {
            if advanced.saturating_add(t.ahead) <= MAX_TRAVEL {
                t.advanced = advanced;
                fits = true;
            }
        }
    });
    fits.then_some(total).ok_or_else(|| crate::check::out_of_range("seconds", RANGE, secs))
}

/// Sets how far the test's `Time.now` is `ahead_secs` ahead of the real
/// time (the time helpers, after each move of `Time.now`; 0 or less: not
/// ahead, and so is NaN), as far as [`MAX_TRAVEL`]. `new_test` also drops
/// what [`advance_secs`] added: each test starts at the real time (or
/// where its `Time.now` is). The offset is set, never added to, so it
/// never grows past the furthest `Time.now` of one test. Returns it.
pub fn follow_secs(ahead_secs: f64, new_test: bool) -> Nanos {
    // NaN and negatives become 0; the cast saturates.
    let ahead = nanos_from_secs(ahead_secs.max(0.0)).clamp(0, MAX_TRAVEL);
    set_travel(|t| {
        t.ahead = ahead;
        if new_test {
            t.advanced = 0;
        }
    })
}

/// The offset (0 unless a test suite moved time).
pub fn travelled() -> Nanos {
    TRAVELLED.load(Ordering::Relaxed)
}

/// A source of `now`.
pub trait Clock {
    /// The current time; never smaller than a previous reading, but for
    /// the test helpers' offset moving back.
    fn now(&self) -> Nanos;
}

/// The monotonic clock. On Linux `CLOCK_MONOTONIC`: system-wide, so the
/// processes of a host agree (shared breakers rely on it). Elsewhere, and
/// with the `portable` feature, the standard library's monotonic `Instant`
/// (counted from this process's first reading), which every platform Rust
/// supports has (docs/install.md).
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now(&self) -> Nanos {
        sys::monotonic().saturating_add(travelled())
    }
}

/// The monotonic clock at the resolution of the kernel's tick (a few ms),
/// for a fraction of the cost of a read: `CLOCK_MONOTONIC_COARSE`, Linux
/// only. Elsewhere it has no [`resolution`](CoarseClock::resolution) and
/// reads [`MonotonicClock`].
#[derive(Debug, Default, Clone, Copy)]
pub struct CoarseClock;

impl CoarseClock {
    /// The clock's resolution; None where the system has no coarse clock.
    pub fn resolution() -> Option<Nanos> {
        sys::coarse_resolution()
    }
}

impl Clock for CoarseClock {
    fn now(&self) -> Nanos {
        sys::coarse().saturating_add(travelled())
    }
}

/// The system's monotonic clock (`coarse`: at tick resolution, as
/// [`CoarseClock`]) without the test helpers' offset: the clock of a record
/// other processes read (`shared:`), so that a test's time travel is never
/// written where they see it (docs/testing.md).
#[derive(Debug, Default, Clone, Copy)]
pub struct HostClock {
    pub coarse: bool,
}

impl Clock for HostClock {
    fn now(&self) -> Nanos {
        if self.coarse {
            sys::coarse()
        } else {
            sys::monotonic()
        }
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
mod sys {
    use super::Nanos;
    use std::sync::OnceLock;

    // time_t and c_long are i32 on 32-bit targets: the casts are needed there.
    // Plain arithmetic: the clocks read here count from boot (and a
    // resolution is a tick), ages away from overflowing.
    #[allow(clippy::unnecessary_cast)]
    #[inline]
    pub(super) fn to_nanos(ts: libc::timespec) -> Nanos {
        (ts.tv_sec as i64) * 1_000_000_000 + ts.tv_nsec as i64
    }

    pub(super) type ClockGettime = unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> libc::c_int;

    /// The kernel's `clock_gettime` in the vDSO, called directly: for the
    /// coarse clock, libc's wrapper around it costs about as much again
    /// (docs/performance.md). Resolved once, through the handle glibc gives
    /// the vDSO; without one (no vDSO, another libc), or when something
    /// interposes `clock_gettime` (`LD_PRELOAD`: libfaketime), the symbol
    /// as the process resolves it, which is what Ruby's own clock reads.
    fn gettime() -> ClockGettime {
        static GETTIME: OnceLock<ClockGettime> = OnceLock::new();
        *GETTIME.get_or_init(|| if interposed() { None } else { vdso_gettime() }.unwrap_or(libc::clock_gettime))
    }

    /// Whether the process's `clock_gettime` is not glibc's own.
    pub(super) fn interposed() -> bool {
        let name = b"clock_gettime\0".as_ptr().cast();
        // SAFETY: RTLD_NOLOAD only looks up a loaded object; lookups in
        // live handles. The handle is never closed.
        unsafe {
            let libc = libc::dlopen(b"libc.so.6\0".as_ptr().cast(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
            libc.is_null() || libc::dlsym(libc, name) != libc::dlsym(libc::RTLD_DEFAULT, name)
        }
    }

    pub(super) fn vdso_gettime() -> Option<ClockGettime> {
        // SAFETY: RTLD_NOLOAD only looks the object up; the handle is never
        // closed, so the vDSO (mapped for the process's lifetime) stays.
        let vdso = unsafe { libc::dlopen(b"linux-vdso.so.1\0".as_ptr().cast(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if vdso.is_null() {
            return None;
        }
        // The name on x86 and RISC-V, then on arm64, PowerPC and s390.
        [&b"__vdso_clock_gettime\0"[..], b"__kernel_clock_gettime\0"].iter().find_map(|name| {
            // SAFETY: a symbol lookup in a live handle.
            let f = unsafe { libc::dlsym(vdso, name.as_ptr().cast()) };
            // SAFETY: the vDSO's clock_gettime has clock_gettime's signature.
            (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, ClockGettime>(f) })
        })
    }

    #[inline]
    fn read(clock: libc::clockid_t) -> Nanos {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec; both clocks read here
        // exist on every Linux Ruby runs on (2.6.32 and later), so the call
        // cannot fail.
        unsafe { gettime()(clock, &mut ts) };
        to_nanos(ts)
    }

    pub fn monotonic() -> Nanos {
        read(libc::CLOCK_MONOTONIC)
    }

    pub fn coarse_resolution() -> Option<Nanos> {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec.
        let rc = unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        (rc == 0).then(|| to_nanos(ts))
    }

    pub fn coarse() -> Nanos {
        read(libc::CLOCK_MONOTONIC_COARSE)
    }
}

#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
mod sys {
    use super::Nanos;
    use std::sync::OnceLock;
    use std::time::Instant;

    static ORIGIN: OnceLock<Instant> = OnceLock::new();

    pub fn monotonic() -> Nanos {
        let origin = *ORIGIN.get_or_init(Instant::now);
        Nanos::try_from(origin.elapsed().as_nanos()).unwrap_or(Nanos::MAX)
    }

    pub fn coarse_resolution() -> Option<Nanos> {
        None
    }

    pub fn coarse() -> Nanos {
        monotonic()
    }
}

/// A clock that only moves when told to: tests use it instead of sleeping.
/// Shared between threads without a lock.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock that reads `start` until advanced.
    pub fn new(start: Nanos) -> Self {
        Self { now: AtomicI64::new(start) }
    }

    /// A clock that reads `start` seconds: finite, within about ±292 years
    /// (what a reading can hold).
    pub fn starting_at(start: f64) -> Result<Self, crate::check::ConfigError> {
        const RANGE: &str = "a finite Numeric within about ±292 years (±9.2e9 seconds)";
        checked_nanos_from_secs(start).map(Self::new).ok_or_else(|| crate::check::out_of_range("start", RANGE, start))
    }

    /// Moves the clock forward by `secs` (finite, >= 0), unless that would
    /// pass the largest time it can hold: an error then, never a clock
    /// that silently stops.
    pub fn advance_secs(&self, secs: f64) -> Result<(), crate::check::ConfigError> {
        let by = checked_nanos_from_secs(secs).filter(|_| secs >= 0.0).ok_or_else(|| {
            crate::check::out_of_range("seconds", "a finite Numeric >= 0, within about 292 years", secs)
        })?;
        self.now.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| t.checked_add(by)).map(|_| ()).map_err(|_| {
            crate::check::out_of_range("seconds", "small enough to keep the clock within about 292 years", secs)
        })
    }

    /// Moves the clock forward by `by` (negative values are ignored: the
    /// clock never goes backwards), saturating at the end of the range.
    pub fn advance(&self, by: Nanos) {
        let by = by.max(0);
        // fetch_update with a closure that always returns Some cannot fail.
        let _ = self.now.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| Some(t.saturating_add(by)));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.now.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offset is process-wide and tests run in parallel threads: every
    /// test that moves it, or reads a clock it moves ([`MonotonicClock`],
    /// [`CoarseClock`]) and compares readings, takes its turn. (A reading
    /// taken while another test had moved the offset a year ahead once
    /// failed the portable build's coarse-clock test, about 2 runs in 15.)
    static TRAVELLING: Mutex<()> = Mutex::new(());

    fn turn() -> std::sync::MutexGuard<'static, ()> {
        TRAVELLING.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[test]
    fn a_manual_clock_refuses_times_it_cannot_hold() {
        assert_eq!(ManualClock::starting_at(9e9).map(|c| c.now()), Ok(9_000_000_000_000_000_000));
        assert_eq!(ManualClock::starting_at(1e10).unwrap_err().name, "start");
        assert_eq!(ManualClock::starting_at(-1e10).unwrap_err().name, "start");
        assert_eq!(ManualClock::starting_at(f64::NAN).unwrap_err().name, "start");
        let c = ManualClock::starting_at(9e9).unwrap();
        assert!(c.advance_secs(0.2e9).is_ok());
        let e = c.advance_secs(0.1e9).unwrap_err();
        assert_eq!(e.name, "seconds");
        assert_eq!(c.now(), 9_200_000_000_000_000_000, "a refused advance leaves the clock where it was");
        assert!(c.advance_secs(-1.0).is_err());
        assert!(c.advance_secs(f64::INFINITY).is_err());
    }

    #[test]
    fn manual_clock_moves_only_forward_when_told() {
        let clock = ManualClock::new(5);
        assert_eq!(clock.now(), 5);
        clock.advance(10);
        clock.advance(-100);
        assert_eq!(clock.now(), 15);
        clock.advance(i64::MAX);
        assert_eq!(clock.now(), i64::MAX);
    }

    #[test]
    #[cfg(all(target_os = "linux", not(feature = "portable")))]
    fn the_coarse_clock_keeps_up_with_the_monotonic_one() {
        let _turn = turn();
        let res = CoarseClock::resolution().expect("Linux has CLOCK_MONOTONIC_COARSE");
        let (fine, coarse) = (MonotonicClock.now(), CoarseClock.now());
        assert!(coarse <= fine + res && fine <= coarse + 2 * res + 1_000_000, "{fine} {coarse} {res}");
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu", not(feature = "portable")))]
    fn the_vdso_clock_reads_what_libc_reads() {
        assert!(!sys::interposed(), "nothing interposes clock_gettime in the tests");
        let vdso = sys::vdso_gettime().expect("glibc hands out the vDSO");
        let read = |f: sys::ClockGettime, clock| {
            let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: a valid, writable timespec.
            assert_eq!(unsafe { f(clock, &mut ts) }, 0);
            sys::to_nanos(ts)
        };
        for clock in [libc::CLOCK_MONOTONIC, libc::CLOCK_MONOTONIC_COARSE] {
            let before = read(libc::clock_gettime, clock);
            let direct = read(vdso, clock);
            let after = read(libc::clock_gettime, clock);
            assert!(before <= direct && direct <= after, "{clock}: {before} {direct} {after}");
        }
    }

    #[test]
    #[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
    fn without_a_coarse_clock_the_coarse_clock_reads_the_monotonic_one() {
        let _turn = turn();
        assert_eq!(CoarseClock::resolution(), None);
        let (before, coarse, after) = (MonotonicClock.now(), CoarseClock.now(), MonotonicClock.now());
        assert!(before <= coarse && coarse <= after, "{before} {coarse} {after}");
    }

    #[test]
    fn the_offset_moves_both_system_clocks_and_not_the_host_clock() {
        let _turn = turn();
        let (fine, coarse) = (MonotonicClock.now(), CoarseClock.now());
        assert_eq!(advance_secs(3600.0), Ok(3_600_000_000_000));
        assert!(MonotonicClock.now() >= fine + 3_600_000_000_000);
        assert!(CoarseClock.now() >= coarse + 3_600_000_000_000);
        assert!(HostClock { coarse: false }.now() < fine + 3_600_000_000_000);
        assert!(HostClock { coarse: true }.now() < coarse + 3_600_000_000_000);
        assert_eq!(follow_secs(0.0, true), 0);
        assert!(MonotonicClock.now() < fine + 3_600_000_000_000, "a new test starts at the real time");
    }

    #[test]
    fn the_offset_follows_time_now_and_its_parts_add_up() {
        let _turn = turn();
        assert_eq!(follow_secs(86_400.0, true), 86_400_000_000_000);
        assert_eq!(advance_secs(31.0), Ok(86_431_000_000_000));
        // travel_back: Time.now is real again; the advance stays.
        assert_eq!(follow_secs(0.0, false), 31_000_000_000);
        assert_eq!(follow_secs(-5.0, false), 31_000_000_000, "Time.now behind the real time: not ahead");
        assert_eq!(follow_secs(f64::NAN, false), 31_000_000_000);
        assert_eq!(follow_secs(0.0, true), 0);
    }

    #[test]
    fn three_hundred_tests_a_year_ahead_never_stop_a_clock() {
        let _turn = turn();
        const YEAR: f64 = 365.0 * 86_400.0;
        for _ in 0..300 {
            // travel_to 1.year.from_now, with and without travel_back.
            assert_eq!(follow_secs(YEAR, true), nanos_from_secs(YEAR));
            assert_eq!(advance_secs(YEAR), Ok(nanos_from_secs(2.0 * YEAR)));
        }
        let before = MonotonicClock.now();
        assert!(before < nanos_from_secs(3.0 * YEAR), "two years ahead, not hundreds: {before}");
        // Past the limit: an error for an explicit advance, the limit for a
        // Time.now that far ahead.
        assert_eq!(advance_secs(200.0 * YEAR).unwrap_err().name, "seconds");
        assert_eq!(travelled(), nanos_from_secs(2.0 * YEAR), "a refused advance changes nothing");
        assert!(advance_secs(-1.0).is_err() && advance_secs(f64::INFINITY).is_err());
        assert_eq!(follow_secs(1e12, true), MAX_TRAVEL);
        assert!(MonotonicClock.now() < i64::MAX && MonotonicClock.now() > MAX_TRAVEL);
        assert_eq!(follow_secs(0.0, true), 0);
    }

    #[test]
    fn monotonic_clock_never_goes_backwards() {
        // Unless the offset moves back.
        let _turn = turn();
        let clock = MonotonicClock;
        let mut last = clock.now();
        for _ in 0..1000 {
            let t = clock.now();
            assert!(t >= last);
            last = t;
        }
    }
}
