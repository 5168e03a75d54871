//! Sliding windows of recent calls.
//!
//! Both windows keep running totals, so recording and reading are O(1) in
//! the window's size; a time window also touches at most `buckets` buckets
//! when time has moved on (whole buckets expire at once).
//!
//! Storage is a type parameter so that the same code can run on a slice of
//! memory shared between processes; by default it is a boxed slice. Every
//! field is plain data (integers, floats): a window has no pointers of its
//! own besides its storage.

use crate::check::{check_f64, check_int, out_of_range, ConfigError};
use crate::hashing::hash_layout;
use crate::hashing::Fnv;
use crate::time::Nanos;

/// The window a record is built with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum WindowSpec {
    /// The last `size` calls.
    Count { size: i64, slow_threshold_ms: f64 },
    /// The last `seconds`, in `buckets` buckets.
    Time { seconds: f64, buckets: i64, slow_threshold_ms: f64 },
}

impl WindowSpec {
    /// Adds this window's configuration to a hash.
    pub fn hash(&self, h: Fnv) -> Fnv {
        match *self {
            WindowSpec::Count { size, slow_threshold_ms } => h.i64(1).i64(size).f64(slow_threshold_ms),
            WindowSpec::Time { seconds, buckets, slow_threshold_ms } => {
                h.i64(2).f64(seconds).i64(buckets).f64(slow_threshold_ms)
            }
        }
    }
}

/// Storage of a [`CountWindow`]: one byte per call.
pub trait Slots: AsRef<[u8]> + AsMut<[u8]> {}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Slots for T {}

/// Storage of a [`TimeWindow`].
pub trait Buckets: AsRef<[Bucket]> + AsMut<[Bucket]> {}
impl<T: AsRef<[Bucket]> + AsMut<[Bucket]>> Buckets for T {}

/// What a window holds at one instant.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Calls in the window.
    pub total: u64,
    /// Calls recorded as failures.
    pub failures: u64,
    /// Calls at least as long as the slow-call threshold (a call can be both).
    pub slow_calls: u64,
}

impl Counts {
    /// `failures / total`; 0.0 when empty.
    pub fn error_rate(&self) -> f64 {
        ratio(self.failures, self.total)
    }

    /// `slow_calls / total`; 0.0 when empty.
    pub fn slow_call_rate(&self) -> f64 {
        ratio(self.slow_calls, self.total)
    }

    fn add(&mut self, failure: bool, slow: bool) {
        self.total += 1;
        self.failures += u64::from(failure);
        self.slow_calls += u64::from(slow);
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

const SLOW_RANGE: &str = "a finite number of milliseconds > 0";

fn check_slow_threshold(ms: f64) -> Result<f64, ConfigError> {
    check_f64("slow_threshold_ms", SLOW_RANGE, ms, 0.0, true, f64::MAX)
}

/// The last `size` recorded calls, in a ring of one byte each.
#[repr(C)]
#[derive(Debug)]
pub struct CountWindow<S = Box<[u8]>> {
    slots: S,
    slow_threshold_ms: f64,
    /// Index of the slot the next call goes to.
    head: u32,
    len: u32,
    failures: u32,
    slow_calls: u32,
}

const FAILURE: u8 = 1;
const SLOW: u8 = 2;

impl CountWindow {
    /// A window of the last `size` calls (1..=1_000_000).
    pub fn new(size: i64, slow_threshold_ms: f64) -> Result<Self, ConfigError> {
        let size = check_int("size", "an Integer in 1..1_000_000", size, 1, 1_000_000)?;
        let slots = vec![0u8; size as usize].into_boxed_slice();
        Self::with_storage(slots, slow_threshold_ms)
    }
}

impl<S: Slots> CountWindow<S> {
    /// A window over caller-provided storage (its length is the size),
    /// starting empty.
    pub fn with_storage(slots: S, slow_threshold_ms: f64) -> Result<Self, ConfigError> {
        let size = slots.as_ref().len();
        if size == 0 || size > 1_000_000 {
            return Err(out_of_range("size", "an Integer in 1..1_000_000", size));
        }
        let slow_threshold_ms = check_slow_threshold(slow_threshold_ms)?;
        Ok(Self { slots, slow_threshold_ms, head: 0, len: 0, failures: 0, slow_calls: 0 })
    }

    /// How many calls the window holds at most.
    pub fn size(&self) -> u32 {
        self.slots.as_ref().len() as u32
    }

    #[inline]
    fn record(&mut self, failure: bool, slow: bool) {
        let size = self.size();
        let head = self.head as usize;
        let slots = self.slots.as_mut();
        if self.len == size {
            let evicted = slots[head];
            self.failures -= u32::from(evicted & FAILURE != 0);
            self.slow_calls -= u32::from(evicted & SLOW != 0);
        } else {
            self.len += 1;
        }
        slots[head] = (if failure { FAILURE } else { 0 }) | (if slow { SLOW } else { 0 });
        self.failures += u32::from(failure);
        self.slow_calls += u32::from(slow);
        self.head = if self.head + 1 == size { 0 } else { self.head + 1 };
    }

    fn recount(&mut self) {
        let size = self.size();
        self.len = self.len.min(size);
        self.head %= size.max(1);
        let slots = self.slots.as_ref();
        let live = (0..self.len).map(|k| slots[((self.head + size - 1 - k) % size) as usize]);
        let (mut failures, mut slow) = (0, 0);
        for s in live {
            failures += u32::from(s & FAILURE != 0);
            slow += u32::from(s & SLOW != 0);
        }
        self.failures = failures;
        self.slow_calls = slow;
    }

    fn counts(&self) -> Counts {
        Counts { total: self.len.into(), failures: self.failures.into(), slow_calls: self.slow_calls.into() }
    }

    fn reset(&mut self) {
        // Slots past `len` are never read, so they need no clearing.
        self.head = 0;
        self.len = 0;
        self.failures = 0;
        self.slow_calls = 0;
    }
}

/// One bucket of a [`TimeWindow`]: the calls that finished in one slice of
/// time, identified by its `epoch` (`finish_time / bucket_width`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    epoch: i64,
    counts: Counts,
}

/// Calls that finished in the last `span`, in `buckets` buckets of
/// `span / buckets` each; a bucket expires whole.
#[repr(C)]
#[derive(Debug)]
pub struct TimeWindow<B = Box<[Bucket]>> {
    buckets: B,
    span: Nanos,
    width: Nanos,
    slow_threshold_ms: f64,
    totals: Counts,
    /// The newest epoch seen; every bucket older than `newest - buckets`
    /// has been expired. `i64::MIN`: nothing seen yet.
    newest: i64,
}

/// The longest time window, in seconds.
pub const MAX_SECONDS: f64 = 1e9;

impl TimeWindow {
    /// A window of the last `seconds` in `buckets` buckets (1..=3600).
    pub fn new(seconds: f64, buckets: i64, slow_threshold_ms: f64) -> Result<Self, ConfigError> {
        let n = check_int("buckets", "an Integer in 1..3600", buckets, 1, 3600)?;
        let storage = vec![Bucket::default(); n as usize].into_boxed_slice();
        Self::with_storage(storage, seconds, slow_threshold_ms)
    }
}

impl<B: Buckets> TimeWindow<B> {
    /// A window over caller-provided buckets (their count is `buckets`),
    /// starting empty.
    pub fn with_storage(mut buckets: B, seconds: f64, slow_threshold_ms: f64) -> Result<Self, ConfigError> {
        const RANGE: &str = "a finite number of seconds in (0, 1e9], at least 1 ns per bucket";
        let n = buckets.as_ref().len();
        if n == 0 || n > 3600 {
            return Err(out_of_range("buckets", "an Integer in 1..3600", n));
        }
        let seconds = check_f64("seconds", RANGE, seconds, 0.0, true, MAX_SECONDS)?;
        let span = crate::time::nanos_from_secs(seconds);
        let width = span / n as i64;
        if width < 1 {
            return Err(out_of_range("seconds", RANGE, seconds));
        }
        let slow_threshold_ms = check_slow_threshold(slow_threshold_ms)?;
        buckets.as_mut().fill(Bucket::default());
        Ok(Self { buckets, span, width, slow_threshold_ms, totals: Counts::default(), newest: i64::MIN })
    }

    /// The window's length.
    pub fn span(&self) -> Nanos {
        self.span
    }

    /// How many buckets the window has.
    pub fn bucket_count(&self) -> u32 {
        self.buckets.as_ref().len() as u32
    }

    /// Expires the buckets that `now` has left behind: at most all of them.
    /// A `now` a little behind the newest bucket (a thread that read the
    /// clock, then lost the race to record) changes nothing. A window that
    /// lies a whole span ahead of `now` (the clock went back, as a test's
    /// `travel_back` moves it, docs/testing.md) is emptied and starts at
    /// `now`: its deadline, the expiry of its newest bucket, is then never
    /// further ahead than its span, and calls count again at once instead
    /// of after the clock caught up.
    fn advance(&mut self, now: Nanos) {
        let epoch = now.div_euclid(self.width);
        if epoch == self.newest {
            return;
        }
        if self.newest == i64::MIN {
            self.newest = epoch;
            return;
        }
        let n = self.buckets.as_ref().len() as i64;
        if epoch < self.newest {
            if epoch <= self.newest.saturating_sub(n) {
                self.reset();
                self.newest = epoch;
            }
            return;
        }
        let steps = epoch.saturating_sub(self.newest).min(n);
        let oldest_kept = epoch.saturating_sub(n - 1);
        for k in 1..=steps {
            let slot = self.newest.saturating_add(k).rem_euclid(n) as usize;
            let bucket = &mut self.buckets.as_mut()[slot];
            if bucket.epoch < oldest_kept {
                self.totals.total -= bucket.counts.total;
                self.totals.failures -= bucket.counts.failures;
                self.totals.slow_calls -= bucket.counts.slow_calls;
                bucket.counts = Counts::default();
            }
        }
        self.newest = epoch;
    }

    fn record(&mut self, failure: bool, slow: bool, now: Nanos) {
        self.advance(now);
        let epoch = now.div_euclid(self.width);
        let n = self.buckets.as_ref().len() as i64;
        let bucket = &mut self.buckets.as_mut()[epoch.rem_euclid(n) as usize];
        if bucket.epoch != epoch {
            // Already expired by `advance`, so its counts are zero.
            *bucket = Bucket { epoch, counts: Counts::default() };
        }
        bucket.counts.add(failure, slow);
        self.totals.add(failure, slow);
    }

    fn counts(&mut self, now: Nanos) -> Counts {
        self.advance(now);
        self.totals
    }

    fn recount(&mut self) {
        let n = self.buckets.as_ref().len() as i64;
        let oldest_kept = self.newest.saturating_sub(n - 1);
        let mut totals = Counts::default();
        for b in self.buckets.as_mut() {
            if self.newest != i64::MIN && b.epoch >= oldest_kept && b.epoch <= self.newest {
                totals.total += b.counts.total;
                totals.failures += b.counts.failures;
                totals.slow_calls += b.counts.slow_calls;
            } else {
                b.counts = Counts::default();
            }
        }
        self.totals = totals;
    }

    fn reset(&mut self) {
        self.buckets.as_mut().fill(Bucket::default());
        self.totals = Counts::default();
        self.newest = i64::MIN;
    }
}

/// A slice stored as an offset from the `RelSlice` itself, so that a window
/// holding it is position-independent plain data: the same bytes work in
/// every process that maps them, wherever the mapping lands.
///
/// Valid only while it stays where [`Window::anchor`] put it, inside the
/// block of memory it points into; it is neither `Clone` nor `Copy`, and
/// the block that holds it must never be moved.
#[repr(C)]
#[derive(Debug)]
pub struct RelSlice<T> {
    offset: isize,
    len: usize,
    _items: std::marker::PhantomData<T>,
}

impl<T> RelSlice<T> {
    /// Points at `items` by absolute address, until anchored.
    fn absolute(items: &mut [T]) -> Self {
        Self { offset: items.as_mut_ptr() as isize, len: items.len(), _items: std::marker::PhantomData }
    }

    /// Turns the absolute address into an offset from where `self` now is.
    fn anchor(&mut self) {
        self.offset -= self as *mut Self as isize;
    }

    fn ptr(&self) -> *mut T {
        (self as *const Self as *const u8).wrapping_offset(self.offset) as *mut T
    }
}

impl<T> AsRef<[T]> for RelSlice<T> {
    fn as_ref(&self) -> &[T] {
        // SAFETY: anchored, the offset leads to `len` initialised items
        // inside the same block of memory as `self` (see the type's doc).
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len) }
    }
}

impl<T> AsMut<[T]> for RelSlice<T> {
    fn as_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `as_ref`; `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr(), self.len) }
    }
}

/// A window whose storage follows it in one block of memory.
pub type PlacedWindow = Window<RelSlice<u8>, RelSlice<Bucket>>;

impl<'a> Window<&'a mut [u8], &'a mut [Bucket]> {
    /// The same window with its storage referred to by [`RelSlice`]s, to
    /// be written into its final place and then [`anchor`](Window::anchor)ed.
    pub fn into_relative(self) -> PlacedWindow {
        match self {
            Window::Count(w) => Window::Count(CountWindow {
                slots: RelSlice::absolute(w.slots),
                slow_threshold_ms: w.slow_threshold_ms,
                head: w.head,
                len: w.len,
                failures: w.failures,
                slow_calls: w.slow_calls,
            }),
            Window::Time(w) => Window::Time(TimeWindow {
                buckets: RelSlice::absolute(w.buckets),
                span: w.span,
                width: w.width,
                slow_threshold_ms: w.slow_threshold_ms,
                totals: w.totals,
                newest: w.newest,
            }),
        }
    }
}

impl PlacedWindow {
    /// Fixes the storage references once the window is in its final place.
    ///
    /// # Safety
    /// Call exactly once, on a window made by [`Window::into_relative`]
    /// and written to the address it will keep.
    pub unsafe fn anchor(&mut self) {
        match self {
            Window::Count(w) => w.slots.anchor(),
            Window::Time(w) => w.buckets.anchor(),
        }
    }
}

/// Either window, as a breaker uses it.
#[repr(C, u8)]
#[derive(Debug)]
pub enum Window<S = Box<[u8]>, B = Box<[Bucket]>> {
    /// Count-based: the last N calls.
    Count(CountWindow<S>),
    /// Time-based: the last S seconds.
    Time(TimeWindow<B>),
}

/// How a window counts one call: what its slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub failure: bool,
    /// It took at least the slow-call threshold ([`Window::is_slow`]).
    pub slow: bool,
}

impl<S: Slots, B: Buckets> Window<S, B> {
    /// Records one call that finished at `now` and took `duration_ns`
    /// nanoseconds.
    pub fn record(&mut self, duration_ns: f64, success: bool, now: Nanos) {
        self.add(self.mark(duration_ns, success), now);
    }

    /// How this window counts a call of `duration_ns` nanoseconds; a
    /// breaker marks a call once and counts the mark twice (its counters,
    /// its window).
    #[inline]
    pub fn mark(&self, duration_ns: f64, success: bool) -> Mark {
        Mark { failure: !success, slow: self.is_slow(duration_ns) }
    }

    /// Records one call, marked, that finished at `now`.
    #[inline]
    pub fn add(&mut self, m: Mark, now: Nanos) {
        match self {
            Window::Count(w) => w.record(m.failure, m.slow),
            Window::Time(w) => w.record(m.failure, m.slow, now),
        }
    }

    /// The window's counts at `now`.
    pub fn counts(&mut self, now: Nanos) -> Counts {
        match self {
            Window::Count(w) => w.counts(),
            Window::Time(w) => w.counts(now),
        }
    }

    /// Recomputes the running totals from the storage.
    pub fn recount(&mut self) {
        match self {
            Window::Count(w) => w.recount(),
            Window::Time(w) => w.recount(),
        }
    }

    /// Empties the window.
    pub fn reset(&mut self) {
        match self {
            Window::Count(w) => w.reset(),
            Window::Time(w) => w.reset(),
        }
    }

    /// Whether a call of `duration_ns` nanoseconds is slow: it took at
    /// least `slow_threshold_ms`. Compared in nanoseconds, so timing a call
    /// costs no division (docs/performance.md); both sides are exact for
    /// whole nanoseconds and for thresholds of up to nine decimals.
    #[inline]
    pub fn is_slow(&self, duration_ns: f64) -> bool {
        duration_ns >= self.slow_threshold_ms() * 1e6
    }

    /// Calls at least this long (in ms) are slow.
    pub fn slow_threshold_ms(&self) -> f64 {
        match self {
            Window::Count(w) => w.slow_threshold_ms,
            Window::Time(w) => w.slow_threshold_ms,
        }
    }

    /// The largest number of calls the window can hold, when bounded.
    pub fn capacity(&self) -> Option<u32> {
        match self {
            Window::Count(w) => Some(w.size()),
            Window::Time(_) => None,
        }
    }
}

/// Adds the layout of a placed window and its parts (see
/// `circuit_breaker_core::shm::layout_hash`).
pub fn layout(h: crate::hashing::Fnv) -> crate::hashing::Fnv {
    let h = hash_layout!(h, enum PlacedWindow);
    let h = hash_layout!(h, CountWindow<RelSlice<u8>> { slots, slow_threshold_ms, head, len, failures, slow_calls });
    let h = hash_layout!(h, TimeWindow<RelSlice<Bucket>> { buckets, span, width, slow_threshold_ms, totals, newest });
    let h = hash_layout!(h, RelSlice<u8> { offset, len, _items });
    let h = hash_layout!(h, RelSlice<Bucket> { offset, len, _items });
    let h = hash_layout!(h, Bucket { epoch, counts });
    hash_layout!(h, Counts { total, failures, slow_calls })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SEC: Nanos = 1_000_000_000;

    fn count(size: i64) -> Window {
        Window::Count(CountWindow::new(size, 800.0).unwrap())
    }

    fn time(seconds: f64, buckets: i64) -> Window {
        Window::Time(TimeWindow::new(seconds, buckets, 800.0).unwrap())
    }

    #[test]
    fn a_slow_failure_counts_as_both() {
        let mut w = count(100);
        w.record(900.0e6, false, 0);
        let c = w.counts(0);
        assert_eq!((c.error_rate(), c.slow_call_rate()), (1.0, 1.0));
    }

    #[test]
    fn slow_means_at_least_the_threshold() {
        let mut w = count(10);
        w.record(799.999e6, true, 0);
        w.record(800.0e6, true, 0);
        assert_eq!(w.counts(0), Counts { total: 2, failures: 0, slow_calls: 1 });
        // Thresholds with decimals meet whole nanoseconds exactly.
        for (ms, at) in [(0.1, 100_000), (1.5, 1_500_000), (0.000001, 1), (123.456789, 123_456_789)] {
            let mut w: Window = Window::Count(CountWindow::new(10, ms).unwrap());
            w.record((at - 1) as f64, true, 0);
            w.record(at as f64, true, 0);
            assert_eq!(w.counts(0).slow_calls, 1, "{ms} ms");
        }
    }

    #[test]
    fn an_empty_window_has_zero_rates() {
        let mut w = count(3);
        assert_eq!((w.counts(0).error_rate(), w.counts(0).slow_call_rate()), (0.0, 0.0));
    }

    #[test]
    fn a_full_ring_forgets_its_oldest_call() {
        let mut w = count(3);
        w.record(0.0e6, false, 0);
        w.record(0.0e6, true, 0);
        w.record(0.0e6, true, 0);
        assert_eq!(w.counts(0).failures, 1);
        w.record(0.0e6, true, 0);
        assert_eq!(w.counts(0), Counts { total: 3, failures: 0, slow_calls: 0 });
    }

    #[test]
    fn reset_empties_a_window() {
        let mut w = count(3);
        w.record(900.0e6, false, 0);
        w.reset();
        assert_eq!(w.counts(0), Counts::default());
        w.record(0.0e6, false, 0);
        assert_eq!(w.counts(0).total, 1);
    }

    #[test]
    fn time_buckets_expire_whole() {
        let mut w = time(10.0, 10);
        w.record(0.0e6, false, 0);
        w.record(0.0e6, true, SEC / 2);
        w.record(0.0e6, true, 5 * SEC);
        assert_eq!(w.counts(9 * SEC + SEC / 2).total, 3);
        // At 10 s the bucket [0, 1) leaves the window, both its calls with it.
        assert_eq!(w.counts(10 * SEC), Counts { total: 1, failures: 0, slow_calls: 0 });
        assert_eq!(w.counts(15 * SEC).total, 0);
        w.record(0.0e6, false, 100 * SEC);
        assert_eq!(w.counts(100 * SEC).failures, 1);
    }

    #[test]
    fn a_window_a_whole_span_ahead_of_now_starts_again_at_now() {
        // The clock went back (a test's travel_back): the calls recorded
        // ahead are dropped and the window counts from now, at once.
        let mut w = time(1.0, 2);
        w.record(0.0e6, false, 10 * SEC);
        w.record(0.0e6, false, 2 * SEC);
        assert_eq!(w.counts(2 * SEC), Counts { total: 1, failures: 1, slow_calls: 0 });
        w.record(0.0e6, false, 2 * SEC + SEC / 2);
        assert_eq!(w.counts(2 * SEC + SEC / 2).failures, 2);
        // A read a span behind does too: a year ahead, then back.
        let mut w = time(60.0, 6);
        w.record(0.0e6, false, 365 * 86_400 * SEC);
        assert_eq!(w.counts(30 * SEC).total, 0);
        w.record(0.0e6, false, 31 * SEC);
        assert_eq!(w.counts(40 * SEC).total, 1);
        // Less than a span back, the window keeps its calls until they expire.
        w.record(0.0e6, false, 80 * SEC);
        assert_eq!(w.counts(60 * SEC).total, 2);
        assert_eq!(w.counts(160 * SEC).total, 0);
    }

    #[test]
    fn a_late_record_inside_the_window_counts() {
        let mut w = time(10.0, 10);
        w.record(0.0e6, true, 5 * SEC);
        w.record(0.0e6, false, 4 * SEC);
        assert_eq!(w.counts(5 * SEC).total, 2);
        assert_eq!(w.counts(14 * SEC).total, 1);
    }

    #[test]
    fn extreme_times_do_not_overflow() {
        let mut w = time(1e-9, 1);
        for t in [i64::MIN, -1, 0, 1, i64::MAX - 1, i64::MAX] {
            w.record(0.0e6, true, t);
            let _ = w.counts(t);
        }
        let mut w = time(MAX_SECONDS, 3600);
        w.record(f64::MAX, false, i64::MAX);
        assert_eq!(w.counts(i64::MAX).total, 1);
    }

    #[test]
    fn bad_configuration_is_refused_with_its_name() {
        assert_eq!(CountWindow::new(0, 1.0).unwrap_err().name, "size");
        assert_eq!(CountWindow::new(1_000_001, 1.0).unwrap_err().name, "size");
        assert_eq!(CountWindow::new(1, 0.0).unwrap_err().name, "slow_threshold_ms");
        assert_eq!(CountWindow::new(1, f64::INFINITY).unwrap_err().name, "slow_threshold_ms");
        assert_eq!(TimeWindow::new(0.0, 1, 1.0).unwrap_err().name, "seconds");
        assert_eq!(TimeWindow::new(1e-9, 2, 1.0).unwrap_err().name, "seconds");
        assert_eq!(TimeWindow::new(1.0, 3601, 1.0).unwrap_err().name, "buckets");
        assert_eq!(TimeWindow::new(f64::NAN, 1, 1.0).unwrap_err().name, "seconds");
    }

    proptest! {
        /// The ring agrees with a list of the last `size` calls.
        #[test]
        fn count_window_matches_a_naive_model(size in 1i64..20, calls in prop::collection::vec((any::<bool>(), 0.0f64..1600e6), 0..200)) {
            let mut w = count(size);
            let mut model: Vec<(bool, f64)> = Vec::new();
            for &(success, ns) in &calls {
                w.record(ns, success, 0);
                model.push((success, ns));
                let last = &model[model.len().saturating_sub(size as usize)..];
                let expected = Counts {
                    total: last.len() as u64,
                    failures: last.iter().filter(|c| !c.0).count() as u64,
                    slow_calls: last.iter().filter(|c| c.1 >= 800e6).count() as u64,
                };
                prop_assert_eq!(w.counts(0), expected);
            }
        }

        /// Buckets agree with a scan of every call that finished in the
        /// buckets covering the last `seconds`.
        #[test]
        fn time_window_matches_a_naive_model(buckets in 1i64..8, steps in prop::collection::vec((0i64..3 * SEC, any::<bool>(), any::<bool>()), 0..100)) {
            let mut w = time(4.0, buckets);
            let width = 4 * SEC / buckets;
            let mut now = 0;
            let mut model: Vec<(Nanos, bool, bool)> = Vec::new();
            for &(dt, success, slow) in &steps {
                now += dt;
                w.record(if slow { 900e6 } else { 1e6 }, success, now);
                model.push((now, success, slow));
                let oldest = now.div_euclid(width) - buckets + 1;
                let live: Vec<_> = model.iter().filter(|c| c.0.div_euclid(width) >= oldest).collect();
                let expected = Counts {
                    total: live.len() as u64,
                    failures: live.iter().filter(|c| !c.1).count() as u64,
                    slow_calls: live.iter().filter(|c| c.2).count() as u64,
                };
                prop_assert_eq!(w.counts(now), expected);
            }
        }
    }
}
