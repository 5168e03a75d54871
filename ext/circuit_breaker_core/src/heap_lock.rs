//! The lock of a record in this process's memory: one 32-bit word, used as
//! a `lock_api::RawMutex` and `RawMutexTimed`, so that its holders get it
//! only through `lock_api::Mutex` and its guard (docs/choices.md, "The heap
//! record's lock").
//!
//! The word is 0 when free; a holder writes `tag << 1`, where `tag` names
//! its process by fork count (1 + [`forks`], kept within 30 bits), and a
//! waiter that goes to sleep sets bit 0. Invariants:
//! - taking is one compare-and-swap; giving back is one swap, whose old
//!   value shows whether a waiter sleeps on the word (then one is woken);
//! - waiters sleep on the word itself (a futex on Linux, short naps
//!   elsewhere), in slices of at most [`SLICE`], never in a process-global
//!   table that a fork could leave locked;
//! - a forked child inherits the word but not the parent's other threads:
//!   a word whose tag is not this process's was left by a thread of an
//!   ancestor, which will never give it back, so taking it takes it over.
//!   What that thread guarded may be half-changed. lock_api's `try_lock`
//!   answers only yes or no, so the lock does not say so: a takeover
//!   happens only at a forked child's first use, which the record notices
//!   by its fork count, and repairs (`HeapRecord::after_forks`).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

static FORKS: AtomicU64 = AtomicU64::new(0);

#[cfg(not(miri))]
extern "C" fn count_fork_in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
}

/// How many times this process is a fork of its ancestors' records.
pub(crate) fn forks() -> u64 {
    // Miri runs no fork and has no pthread_atfork.
    #[cfg(not(miri))]
    {
        static HOOK: std::sync::Once = std::sync::Once::new();
        // SAFETY: registers a handler that only bumps an atomic counter,
        // which is async-signal-safe as a child handler of fork must be.
        HOOK.call_once(|| unsafe {
            libc::pthread_atfork(None, None, Some(count_fork_in_child));
        });
    }
    FORKS.load(Ordering::Relaxed)
}

/// [`forks`] for a record's lock: the record's creation called [`forks`],
/// which put the fork hook in place, so one load does.
#[inline]
pub(crate) fn forks_hooked() -> u64 {
    FORKS.load(Ordering::Relaxed)
}

/// Bit 0 of the word: a waiter sleeps on it.
const PARKED: u32 = 1;

/// The longest a waiter sleeps before it looks at the word again.
pub const SLICE: Duration = Duration::from_millis(1);

/// The raw lock: the word and its rules. Used through
/// `lock_api::Mutex<HeapLock, T>` and its guard, which unlock on drop.
#[derive(Debug, Default)]
pub struct HeapLock(AtomicU32);

/// The tag of a process forked `forks` times: 1 + its fork count, within
/// 31 bits (never 0).
#[inline]
fn tag(forks: u64) -> u32 {
    (forks & 0x3FFF_FFFF) as u32 + 1
}

impl HeapLock {
    /// Takes the lock if it is free now, or held by an ancestor's thread,
    /// leaving `mark` in the word: a waiter that slept takes it marked,
    /// since others may sleep too and its release must wake the next.
    #[inline]
    fn take_marked(&self, mark: u32) -> bool {
        let mine = tag(forks()) << 1 | mark;
        match self.0.compare_exchange(0, mine, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => true,
            // Held in an ancestor process: nobody here will give it back. A
            // sleeper's mark is kept, so the taker's release wakes it.
            Err(held) if held >> 1 != mine >> 1 => {
                self.0.compare_exchange(held, mine | (held & PARKED), Ordering::Acquire, Ordering::Relaxed).is_ok()
            }
            Err(_) => false,
        }
    }

    /// Waits for the lock until `deadline` (None: for good): spins
    /// briefly, then sleeps on the word in slices of at most [`SLICE`].
    fn take_until(&self, deadline: Option<Instant>) -> bool {
        const SPINS: u32 = 100;
        for _ in 0..SPINS {
            if self.take_marked(0) {
                return true;
            }
            std::hint::spin_loop();
        }
        let mut mark = 0;
        loop {
            if self.take_marked(mark) {
                return true;
            }
            let slice = match deadline {
                None => SLICE,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(SLICE),
                    _ => return false,
                },
            };
            let held = self.0.load(Ordering::Relaxed);
            if held == 0 {
                continue;
            }
            // Marked before sleeping, so the holder's release (a swap) sees
            // it and wakes a sleeper.
            if held & PARKED != 0
                || self.0.compare_exchange(held, held | PARKED, Ordering::Relaxed, Ordering::Relaxed).is_ok()
            {
                sys::wait(&self.0, held | PARKED, slice);
                mark = PARKED;
            }
        }
    }
}

// SAFETY: `take_marked` hands the lock to one holder at a time (Acquire on
// taking, Release on giving back); `unlock` is only called by the holder, as
// lock_api's guard guarantees.
unsafe impl lock_api::RawMutex for HeapLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = HeapLock(AtomicU32::new(0));
    type GuardMarker = lock_api::GuardSend;

    fn lock(&self) {
        self.take_until(None);
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.take_marked(0)
    }

    /// Gives the lock back, waking one sleeper if the word says one sleeps.
    #[inline]
    unsafe fn unlock(&self) {
        if self.0.swap(0, Ordering::Release) & PARKED != 0 {
            sys::wake_one(&self.0);
        }
    }

    fn is_locked(&self) -> bool {
        self.0.load(Ordering::Relaxed) != 0
    }
}

// SAFETY: as for RawMutex: a timed take is the same compare-and-swap,
// retried until the deadline.
unsafe impl lock_api::RawMutexTimed for HeapLock {
    type Duration = Duration;
    type Instant = Instant;

    /// Waits up to `timeout` (one past `Instant`'s range: for good).
    fn try_lock_for(&self, timeout: Duration) -> bool {
        self.take_until(Instant::now().checked_add(timeout))
    }

    #[inline]
    fn try_lock_until(&self, deadline: Instant) -> bool {
        self.take_until(Some(deadline))
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
mod sys {
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    /// Sleeps while `word` holds `expected`, for at most `slice` (or until
    /// woken, or spuriously).
    pub fn wait(word: &AtomicU32, expected: u32, slice: Duration) {
        let ts = libc::timespec { tv_sec: slice.as_secs() as libc::time_t, tv_nsec: slice.subsec_nanos() as _ };
        // SAFETY: FUTEX_WAIT reads the word at this address (alive for the
        // call) and sleeps only while it equals `expected`; `ts` is a
        // relative timeout that outlives the call.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                expected,
                &ts as *const _,
            );
        }
    }

    /// Wakes one thread sleeping on `word`.
    pub fn wake_one(word: &AtomicU32) {
        // SAFETY: FUTEX_WAKE only uses the address as a key.
        unsafe {
            libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1);
        }
    }
}

#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
mod sys {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    /// No futex: a short nap, bounded by the slice.
    pub fn wait(word: &AtomicU32, expected: u32, slice: Duration) {
        if word.load(Ordering::Relaxed) == expected {
            std::thread::sleep(slice.min(Duration::from_micros(50)));
        }
    }

    /// Sleepers wake by themselves.
    pub fn wake_one(_word: &AtomicU32) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use lock_api::{RawMutex, RawMutexTimed};
    use std::sync::Arc;

    type Mutex<T> = lock_api::Mutex<HeapLock, T>;

    #[test]
    fn threads_hammering_one_lock_lose_no_count() {
        const THREADS: usize = 4;
        // Miri runs a few hundred steps a second.
        const EACH: u64 = if cfg!(miri) { 200 } else { 200_000 };
        let counter = Arc::new(Mutex::new(0u64));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let counter = Arc::clone(&counter);
                std::thread::spawn(move || {
                    for _ in 0..EACH {
                        // A plain read-modify-write: only the lock keeps
                        // two threads from interleaving it.
                        let mut n = counter.lock();
                        *n = std::hint::black_box(*n) + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*counter.lock(), THREADS as u64 * EACH);
    }

    #[test]
    fn threads_taking_it_in_timed_slices_lose_no_count() {
        const THREADS: usize = 3;
        const EACH: u64 = if cfg!(miri) { 100 } else { 50_000 };
        let counter = Arc::new(Mutex::new(0u64));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let counter = Arc::clone(&counter);
                std::thread::spawn(move || {
                    for _ in 0..EACH {
                        let mut n = loop {
                            if let Some(n) = counter.try_lock_for(SLICE) {
                                break n;
                            }
                        };
                        *n = std::hint::black_box(*n) + 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*counter.lock(), THREADS as u64 * EACH);
    }

    #[test]
    fn a_sleeping_waiter_is_woken_by_the_release() {
        let lock = Arc::new(HeapLock::INIT);
        assert!(lock.try_lock());
        let waiter = {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || lock.try_lock_for(Duration::from_secs(60)))
        };
        // Until the waiter has marked the word, it has not gone to sleep.
        while lock.0.load(Ordering::Relaxed) & PARKED == 0 {
            std::thread::yield_now();
        }
        // SAFETY: taken above by this thread.
        unsafe { lock.unlock() };
        assert!(waiter.join().unwrap());
        assert_ne!(lock.0.load(Ordering::Relaxed) & !PARKED, 0, "held by the waiter");
    }

    #[test]
    fn a_timed_take_ends_at_its_deadline() {
        let lock = HeapLock::INIT;
        assert!(lock.try_lock());
        assert!(!lock.try_lock_until(Instant::now() + Duration::from_millis(3)));
        assert!(!lock.try_lock_for(Duration::ZERO));
        let gone = Instant::now().checked_sub(Duration::from_millis(1)).unwrap_or_else(Instant::now);
        assert!(!lock.try_lock_until(gone), "a deadline gone by");
        // SAFETY: taken above by this thread.
        unsafe { lock.unlock() };
        assert!(lock.try_lock_until(Instant::now()), "a free lock is taken whatever the deadline");
    }

    #[test]
    fn a_word_left_by_an_ancestor_is_taken_over() {
        let lock = HeapLock::INIT;
        // A tag of another process (this one's, plus one), with a sleeper.
        lock.0.store(((tag(forks()) + 1) << 1) | PARKED, Ordering::Relaxed);
        assert!(lock.is_locked());
        assert!(lock.try_lock());
        assert_eq!(lock.0.load(Ordering::Relaxed), (tag(forks()) << 1) | PARKED, "the sleeper's mark is kept");
        assert!(!lock.try_lock(), "held by this process now");
        assert!(!lock.try_lock_for(Duration::from_millis(1)));
    }
}
