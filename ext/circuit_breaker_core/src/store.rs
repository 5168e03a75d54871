//! Where a breaker's record lives: one idea, two places
//! (docs/development.md, "How the code is laid out").
//!
//! A [`Record`] is plain data with no pointer in it, so it can live in this
//! process's memory ([`HeapStore`]) or in a file every process of the host
//! maps (`shm::MappedRecord`, `shared:`). A [`Store`] is such a place: it
//! hands out the record under its lock, and keeps the [`Published`] words
//! that callers read without the lock. The fleet mirror (`fleet::HostSide`,
//! `fleet:`) is not a third place but a part of the record, so a fleet
//! breaker works the same over either store. Every rule runs on the record
//! (the rules crate's `breaker/`); a store decides nothing.

use std::io;
use std::ops::DerefMut;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::breaker::{Decision, Permit};
use crate::clock::Nanos;
use crate::config::ConfigError;
use crate::heap_lock::{forks_hooked, HeapLock, SLICE};
use crate::record::{HeapRecord, Record};
use crate::slots::InFlight;
use crate::state::State;
use crate::window::WindowSpec;

/// What a store publishes after every step, for callers that take no lock:
/// the call path's closed check ([`Published::admitting`]), the decision
/// for a call whose lock stays busy ([`Published::decide`]), and the calls
/// in flight against the cap ([`Published::in_flight`]).
#[repr(C)]
#[derive(Debug, Default)]
pub struct Published {
    /// `Breaker::published` of the record.
    word: AtomicU64,
    /// `Breaker::half_open_at` of the record (0: not open): the retry time
    /// of a call rejected without the lock.
    half_open_at: AtomicI64,
    /// Records dropped because the lock stayed busy past the caller's bound
    /// (a stuck holder); for a mapped record, host-wide.
    dropped: AtomicU64,
    /// Calls in flight and their cap (`max_concurrent:`), taken and given
    /// back without the lock (`crate::slots`); for a mapped record,
    /// host-wide.
    in_flight: InFlight,
}

impl Published {
    /// Publishes `record`'s state; called with the lock held, after a step.
    #[inline]
    pub fn publish(&self, record: &Record) {
        self.word.store(record.breaker.published(), Ordering::Release);
        self.half_open_at.store(record.breaker.half_open_at().unwrap_or(0), Ordering::Release);
    }

    /// A permit taken without the lock, when the breaker admits every call.
    #[inline]
    pub fn admitting(&self) -> Option<Permit> {
        Permit::admitting(self.word.load(Ordering::Acquire))
    }

    /// The decision for a call when the lock could not be had, from the
    /// published state alone (docs/shared.md).
    pub fn decide(&self, now: Nanos) -> Decision {
        Decision::unlocked(self.word.load(Ordering::Acquire), self.half_open_at.load(Ordering::Acquire), now)
    }

    /// The state last published (timers not applied).
    pub fn state(&self) -> State {
        State::published(self.word.load(Ordering::Acquire))
    }

    /// Counts a record dropped because the lock stayed busy.
    pub fn count_dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Records dropped because the lock stayed busy.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The count of calls in flight and its cap (see [`crate::slots`]).
    pub fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// Adds the layout of `Published` (it is stored in shared files; see
    /// `crate::shm::layout_hash`); keep the field list whole.
    pub(crate) fn layout(h: crate::hashing::Fnv) -> crate::hashing::Fnv {
        let h = crate::hashing::hash_layout!(h, Published { word, half_open_at, dropped, in_flight });
        InFlight::layout(h)
    }
}

/// A place that holds one breaker's record behind a lock.
pub trait Store {
    /// The record, held: the lock is released when it is dropped.
    type Guard<'a>: DerefMut<Target = Record>
    where
        Self: 'a;

    /// Takes the lock if it is free now (a dead holder's lock is recovered).
    fn try_lock(&self) -> io::Result<Option<Self::Guard<'_>>>;

    /// Waits up to `wait` nanoseconds for the lock, giving up early once
    /// `stop` is set by another thread. None: not taken. Blocks: call it
    /// without any runtime lock held.
    fn lock_within(&self, wait: Nanos, stop: &AtomicBool) -> io::Result<Option<Self::Guard<'_>>>;

    /// The words published after every step.
    fn published(&self) -> &Published;

    /// Runs `f` on the held record, then publishes the result.
    #[inline]
    fn update<T>(&self, guard: &mut Self::Guard<'_>, f: impl FnOnce(&mut Record) -> T) -> T {
        let out = f(guard);
        self.published().publish(guard);
        out
    }
}

/// A record in this process's memory, behind a lock of its own.
///
/// The lock is held only for one step of plain Rust (no Ruby code, no
/// I/O): it is a word of its own ([`HeapLock`], a `lock_api::RawMutex`),
/// taken with one compare-and-swap and given back with one swap, whose
/// waiters sleep on the word itself (docs/choices.md, "The heap record's
/// lock"), and the store takes it only through `lock_api::Mutex`. Its word
/// names the process that took it, so a lock a parent's thread held when
/// this process was forked is taken over here. That happens only at this
/// process's first use of the record, which the record notices by its fork
/// count: it then repairs what that thread may have left half-changed
/// ([`HeapRecord::after_forks`]).
pub struct HeapStore {
    record: lock_api::Mutex<HeapLock, HeapRecord>,
    published: Published,
}

/// A [`HeapStore`]'s record, held; dropping it gives the lock back.
pub struct HeapGuard<'a>(lock_api::MutexGuard<'a, HeapLock, HeapRecord>);

impl HeapStore {
    /// A new record for a window of `spec`, closed; `seed` seeds the
    /// jitter of its open durations.
    pub fn new(spec: &WindowSpec, seed: u64) -> Result<Self, ConfigError> {
        Ok(Self { record: lock_api::Mutex::new(HeapRecord::new(spec, seed)?), published: Published::default() })
    }

    /// The guard of a lock just taken: a forked child's first use repairs
    /// the record and frees what its parent's other threads held.
    #[inline]
    fn held(mut guard: lock_api::MutexGuard<'_, HeapLock, HeapRecord>) -> HeapGuard<'_> {
        guard.after_forks(forks_hooked());
        HeapGuard(guard)
    }
}

impl std::ops::Deref for HeapGuard<'_> {
    type Target = Record;
    #[inline]
    fn deref(&self) -> &Record {
        self.0.record()
    }
}

impl DerefMut for HeapGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Record {
        self.0.record_mut()
    }
}

impl Store for HeapStore {
    type Guard<'a> = HeapGuard<'a>;

    #[inline]
    fn try_lock(&self) -> io::Result<Option<HeapGuard<'_>>> {
        Ok(self.record.try_lock().map(Self::held))
    }

    /// Waits in slices of at most [`SLICE`] (`try_lock_until`), checking
    /// `stop` between them.
    fn lock_within(&self, wait: Nanos, stop: &AtomicBool) -> io::Result<Option<HeapGuard<'_>>> {
        if let Some(guard) = self.record.try_lock() {
            return Ok(Some(Self::held(guard)));
        }
        // None: past `Instant`'s range, for good.
        let deadline = Instant::now().checked_add(Duration::from_nanos(wait.max(0) as u64));
        loop {
            if stop.load(Ordering::Acquire) {
                return Ok(None);
            }
            let now = Instant::now();
            let slice_end = now.checked_add(SLICE).unwrap_or(now);
            let until = match deadline {
                Some(d) if d <= now => return Ok(None),
                Some(d) => d.min(slice_end),
                None => slice_end,
            };
            if let Some(guard) = self.record.try_lock_until(until) {
                return Ok(Some(Self::held(guard)));
            }
        }
    }

    #[inline]
    fn published(&self) -> &Published {
        &self.published
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::Outcome;
    use crate::config::{Config, Options};

    const SPEC: WindowSpec = WindowSpec::Count { size: 4, slow_threshold_ms: 800.0 };

    fn trip<S: Store>(store: &S) {
        let cfg = Config::new(&Options { min_calls: 2, ..Options::default() }).unwrap();
        for now in 0..2 {
            let mut g = store.try_lock().unwrap().expect("free");
            store.update(&mut g, |r| {
                let p = store.published().admitting().expect("closed admits");
                r.breaker.complete(&mut r.window, &cfg, p, Outcome::Failure { duration_ns: 1.0 }, now, 0)
            });
        }
    }

    #[test]
    fn a_step_publishes_the_state_for_lock_free_readers() {
        let store = HeapStore::new(&SPEC, 1).unwrap();
        assert!(store.published().admitting().is_some());
        trip(&store);
        assert_eq!(store.published().state(), State::Open);
        assert!(store.published().admitting().is_none());
        assert!(matches!(store.published().decide(0), Decision::Rejected(_)));
    }

    #[test]
    fn a_held_record_is_not_handed_out_twice() {
        let store = HeapStore::new(&SPEC, 1).unwrap();
        let held = store.try_lock().unwrap().expect("free");
        assert!(store.try_lock().unwrap().is_none());
        let stop = AtomicBool::new(false);
        assert!(store.lock_within(3_000_000, &stop).unwrap().is_none());
        stop.store(true, Ordering::Release);
        assert!(store.lock_within(Nanos::MAX, &stop).unwrap().is_none(), "stop ends the wait");
        drop(held);
        assert!(store.lock_within(0, &stop).unwrap().is_some());
    }

    #[test]
    fn a_lock_held_by_a_thread_of_the_parent_is_free_in_a_forked_child() {
        let store = std::sync::Arc::new(HeapStore::new(&SPEC, 1).unwrap());
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let holder = {
            let store = store.clone();
            std::thread::spawn(move || {
                let _held = store.try_lock().unwrap().expect("free");
                held_tx.send(()).unwrap();
                done_rx.recv().unwrap();
            })
        };
        held_rx.recv().unwrap();
        assert!(store.try_lock().unwrap().is_none(), "held in this process");
        // SAFETY: the child only takes the lock (atomics) and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let freed = matches!(store.try_lock(), Ok(Some(_)));
            // SAFETY: ends the child without running the parent's destructors.
            unsafe { libc::_exit(if freed { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status}");
        assert!(store.try_lock().unwrap().is_none(), "still held in the parent");
        done_tx.send(()).unwrap();
        holder.join().unwrap();
        assert!(store.try_lock().unwrap().is_some());
    }

    #[test]
    fn dropped_records_are_counted() {
        let store = HeapStore::new(&SPEC, 1).unwrap();
        store.published().count_dropped();
        assert_eq!(store.published().dropped(), 1);
    }
}
