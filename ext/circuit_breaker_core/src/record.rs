//! A breaker's whole mutable state as one block of plain data.
//!
//! `[Record][window storage]`: the window (with position-independent
//! references to its storage, see [`RelSlice`](crate::window::RelSlice))
//! and the breaker's state, followed by the window's ring or buckets. The
//! block holds no pointer, so it can live on the heap of one process or in
//! memory mapped by several; its owner keeps it behind one lock and never
//! moves it.

use std::mem::{align_of, size_of};

use crate::breaker::Breaker;
use crate::check::{check_int, ConfigError};
use crate::heap_lock::forks;
use crate::window::{Bucket, CountWindow, PlacedWindow, TimeWindow, Window, WindowSpec};

/// The state a lock protects: the window and the breaker built on it.
#[repr(C)]
#[derive(Debug)]
pub struct Record {
    pub window: PlacedWindow,
    pub breaker: Breaker,
}

/// Where things go in a record's block of memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Bytes of the whole block.
    pub size: usize,
    /// Required alignment of the block's start.
    pub align: usize,
    storage_offset: usize,
    storage_len: usize,
}

/// Alignment of every record block.
pub const ALIGN: usize = 8;

fn round_up(n: usize, to: usize) -> usize {
    n.div_ceil(to) * to
}

impl Layout {
    /// The block a record of this window needs; the error names a bad
    /// size or bucket count.
    pub fn of(spec: &WindowSpec) -> Result<Self, ConfigError> {
        let (storage_len, bytes) = match *spec {
            WindowSpec::Count { size, .. } => {
                let n = check_int("size", "an Integer in 1..1_000_000", size, 1, 1_000_000)? as usize;
                (n, n)
            }
            WindowSpec::Time { buckets, .. } => {
                let n = check_int("buckets", "an Integer in 1..3600", buckets, 1, 3600)? as usize;
                (n, n * size_of::<Bucket>())
            }
        };
        const _: () = assert!(align_of::<Record>() <= ALIGN && align_of::<Bucket>() <= ALIGN);
        let storage_offset = round_up(size_of::<Record>(), ALIGN);
        Ok(Self { size: round_up(storage_offset + bytes, ALIGN), align: ALIGN, storage_offset, storage_len })
    }
}

impl Record {
    /// Builds a record in the block at `block`: an empty window of `spec`
    /// and a closed breaker.
    ///
    /// # Safety
    /// `block` must be valid for writes of `layout.size` bytes, aligned to
    /// `layout.align`, and the record must never move afterwards. `layout`
    /// must be `Layout::of(spec)`.
    pub unsafe fn init<'a>(
        block: *mut u8,
        layout: &Layout,
        spec: &WindowSpec,
        seed: u64,
    ) -> Result<&'a mut Record, ConfigError> {
        // SAFETY: the caller guarantees the block; the storage lies after
        // the record, inside it, at an offset aligned for its items.
        let storage = unsafe { block.add(layout.storage_offset) };
        let window = match *spec {
            WindowSpec::Count { slow_threshold_ms, .. } => {
                // SAFETY: `storage_len` bytes of the block, after the record.
                let slots = unsafe { std::slice::from_raw_parts_mut(storage, layout.storage_len) };
                Window::Count(CountWindow::with_storage(slots, slow_threshold_ms)?)
            }
            WindowSpec::Time { seconds, slow_threshold_ms, .. } => {
                let buckets = storage as *mut Bucket;
                // Initialised before a slice of them exists.
                for i in 0..layout.storage_len {
                    // SAFETY: bucket `i` of `storage_len`, inside the block, aligned.
                    unsafe { buckets.add(i).write(Bucket::default()) };
                }
                // SAFETY: the `storage_len` buckets just written.
                let buckets = unsafe { std::slice::from_raw_parts_mut(buckets, layout.storage_len) };
                Window::Time(TimeWindow::with_storage(buckets, seconds, slow_threshold_ms)?)
            }
        };
        let record = block as *mut Record;
        // SAFETY: `block` is aligned and large enough for a Record; once
        // written, the window is anchored where it will stay.
        unsafe {
            record.write(Record { window: window.into_relative(), breaker: Breaker::new(seed) });
            (*record).window.anchor();
            Ok(&mut *record)
        }
    }
}

impl Record {
    /// Adds the layout of the record and of everything it holds (see
    /// [`crate::shm::layout_hash`]).
    pub(crate) fn layout(h: crate::hashing::Fnv) -> crate::hashing::Fnv {
        let h = crate::hashing::hash_layout!(h, Record { window, breaker });
        Breaker::layout(crate::window::layout(h))
    }

    /// Recomputes what a step interrupted half-way (a process killed while
    /// holding the lock) could have left inconsistent: the window's running
    /// totals, from its storage. The breaker's own fields need no repair to
    /// stay usable (at worst one counter of the cut step is off by one, and
    /// the next transition starts afresh); permits of every other process
    /// stay good, and a probe slot the dead process held is freed by
    /// `probe_timeout` (by default `open_duration`).
    pub fn repair(&mut self) {
        self.window.recount();
    }
}

/// A record in a heap block of its own (one process).
pub struct HeapRecord {
    block: Box<[u64]>,
    /// The process's fork count when the record was last used: a forked
    /// child notices the change and frees what dead threads held.
    forks_seen: u64,
}

impl HeapRecord {
    /// A new record for a window of `spec`.
    pub fn new(spec: &WindowSpec, seed: u64) -> Result<Self, ConfigError> {
        let layout = Layout::of(spec)?;
        let mut block = vec![0u64; layout.size / size_of::<u64>()].into_boxed_slice();
        // SAFETY: a boxed slice of u64 is 8-aligned, `layout.size` bytes
        // long, and never moves while the Box lives.
        unsafe { Record::init(block.as_mut_ptr() as *mut u8, &layout, spec, seed)? };
        Ok(Self { block, forks_seen: forks() })
    }

    /// The record (its owner provides the lock), once a forked child has
    /// freed what its parent's other threads held.
    #[inline]
    pub fn get(&mut self) -> &mut Record {
        self.after_forks(forks());
        self.record_mut()
    }

    /// In a forked child, on the first use since the fork (`forks` is the
    /// process's count now): repairs what a thread of the parent may have
    /// left half-changed (one held the lock at the fork: its lock word is
    /// taken over by this first use, heap_lock.rs), and frees what the
    /// parent's other threads held (`Breaker::after_fork`). A fleet
    /// breaker's child is a new host: its window starts empty, so the
    /// parent's calls, which the parent reports, are never reported twice
    /// (docs/fleet.md, "Processes").
    #[inline]
    pub fn after_forks(&mut self, forks: u64) {
        if forks != self.forks_seen {
            self.forks_seen = forks;
            let r = self.record_mut();
            r.repair();
            r.breaker.after_fork();
            if r.breaker.fleet_attached() {
                r.window.reset();
            }
        }
    }

    /// The record as it is (see [`HeapRecord::get`]).
    #[inline]
    pub fn record(&self) -> &Record {
        // SAFETY: `new` wrote a Record at the start of the block.
        unsafe { &*(self.block.as_ptr() as *const Record) }
    }

    /// The record as it is, to change (see [`HeapRecord::get`]).
    #[inline]
    pub fn record_mut(&mut self) -> &mut Record {
        // SAFETY: `new` wrote a Record at the start of the block.
        unsafe { &mut *(self.block.as_mut_ptr() as *mut Record) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Nanos;

    const SEC: Nanos = 1_000_000_000;

    #[test]
    fn a_heap_record_holds_a_working_count_window() {
        let mut h = HeapRecord::new(&WindowSpec::Count { size: 3, slow_threshold_ms: 800.0 }, 1).unwrap();
        let r = h.get();
        for ok in [false, true, true, true] {
            r.window.record(900.0e6, ok, 0);
        }
        let c = r.window.counts(0);
        assert_eq!((c.total, c.failures, c.slow_calls), (3, 0, 3));
    }

    #[test]
    fn a_heap_record_holds_a_working_time_window() {
        let spec = WindowSpec::Time { seconds: 10.0, buckets: 10, slow_threshold_ms: 800.0 };
        let mut h = HeapRecord::new(&spec, 1).unwrap();
        let r = h.get();
        r.window.record(1.0e6, false, 0);
        r.window.record(1.0e6, true, 5 * SEC);
        assert_eq!(r.window.counts(9 * SEC).total, 2);
        assert_eq!(r.window.counts(10 * SEC).total, 1);
    }

    #[test]
    fn a_record_works_wherever_its_bytes_are_copied() {
        // What another process sees: the same bytes at another address.
        let spec = WindowSpec::Count { size: 4, slow_threshold_ms: 800.0 };
        let mut h = HeapRecord::new(&spec, 1).unwrap();
        h.get().window.record(1.0e6, false, 0);
        let mut copy = h.block.clone();
        drop(h);
        // SAFETY: the copy holds a whole record, 8-aligned, and stays put.
        let r = unsafe { &mut *(copy.as_mut_ptr() as *mut Record) };
        r.window.record(1.0e6, false, 0);
        assert_eq!(r.window.counts(0).failures, 2);
    }

    /// Forks while a probe is out (taken on another thread when `elsewhere`);
    /// returns whether the child could take a probe of its own.
    fn child_gets_a_probe_after_fork(elsewhere: bool) -> bool {
        use crate::breaker::Decision;
        use crate::config::{Config, Options};
        use crate::state::State;
        let cfg = Config::new(&Options { half_open_calls: 1, ..Options::default() }).unwrap();
        let mut h = HeapRecord::new(&WindowSpec::Count { size: 4, slow_threshold_ms: 800.0 }, 1).unwrap();
        let r = h.get();
        r.breaker.trip(&mut r.window, &cfg, 0);
        let mut take = || matches!(r.breaker.acquire(&mut r.window, &cfg, cfg.open_duration).0, Decision::Allowed(_));
        let taken = if elsewhere { std::thread::scope(|s| s.spawn(take).join().unwrap()) } else { take() };
        assert!(taken);
        assert_eq!(h.get().breaker.state(), State::HalfOpen);
        // SAFETY: the child only touches its copy of the record, then exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let r = h.get();
            let ok = matches!(r.breaker.acquire(&mut r.window, &cfg, cfg.open_duration).0, Decision::Allowed(_));
            // SAFETY: ends the forked child at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        let r = h.get();
        assert!(matches!(r.breaker.acquire(&mut r.window, &cfg, cfg.open_duration).0, Decision::Rejected(_)));
        libc::WEXITSTATUS(status) == 0
    }

    #[test]
    fn a_forked_fleet_breakers_window_starts_empty_and_a_local_ones_is_kept() {
        for fleet in [true, false] {
            let mut h = HeapRecord::new(&WindowSpec::Count { size: 4, slow_threshold_ms: 800.0 }, 1).unwrap();
            let r = h.get();
            if fleet {
                r.breaker.attach_fleet();
            }
            r.window.record(1.0e6, false, 0);
            h.after_forks(h.forks_seen + 1); // as a forked child's first use
            assert_eq!(h.get().window.counts(0).total, if fleet { 0 } else { 1 });
        }
    }

    #[test]
    fn a_forked_child_frees_the_probe_slots_of_threads_it_does_not_have() {
        assert!(child_gets_a_probe_after_fork(true));
    }

    #[test]
    fn a_forked_child_keeps_the_probe_of_the_thread_that_forked_and_the_quota_holds() {
        assert!(!child_gets_a_probe_after_fork(false));
    }

    #[test]
    fn layouts_refuse_bad_sizes_by_name() {
        assert_eq!(Layout::of(&WindowSpec::Count { size: 0, slow_threshold_ms: 1.0 }).unwrap_err().name, "size");
        let t = WindowSpec::Time { seconds: 1.0, buckets: 0, slow_threshold_ms: 1.0 };
        assert_eq!(Layout::of(&t).unwrap_err().name, "buckets");
        let t = WindowSpec::Time { seconds: 0.0, buckets: 1, slow_threshold_ms: 1.0 };
        assert_eq!(HeapRecord::new(&t, 0).err().unwrap().name, "seconds");
    }
}
