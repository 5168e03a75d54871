//! The lock of a record in this process's memory: one 32-bit word, used as
//! a `lock_api::RawMutex` (docs/choices.md, "The heap record's lock").
//!
//! The word is 0 when free; a holder writes `tag << 1`, where `tag` names
//! its process by fork count (1 + [`forks`], kept within 30 bits), and a
//! waiter that goes to sleep sets bit 0. Invariants:
//! - taking is one compare-and-swap; giving back is one swap, whose old
//!   value shows whether a waiter sleeps on the word (then one is woken);
//! - waiters sleep on the word itself (a futex on Linux, short naps
//!   elsewhere), in slices, never in a process-global table that a fork
//!   could leave locked;
//! - a forked child inherits the word but not the parent's other threads:
//!   a word whose tag is not this process's was left by a thread of an
//!   ancestor, which will never give it back, so it is taken over, and the
//!   taker is told ([`Taken::over`]) so that the record, which that thread
//!   may have left half-changed, is repaired.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

static FORKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn count_fork_in_child() {
    FORKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// How many times this process is a fork of its ancestors' records.
pub(crate) fn forks() -> u64 {
    static HOOK: std::sync::Once = std::sync::Once::new();
    // SAFETY: registers a handler that only bumps an atomic counter, which
    // is async-signal-safe as a child handler of fork must be.
    HOOK.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(count_fork_in_child));
    });
    FORKS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Bit 0 of the word: a waiter sleeps on it.
const PARKED: u32 = 1;

/// How a lock was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    /// From a thread of an ancestor process (see the module doc): what it
    /// guarded may be half-changed.
    pub over: bool,
    /// This process's fork count ([`forks`]), read once for the taker.
    pub forks: u64,
}

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
    /// Takes the lock if it is free now, or held by an ancestor's thread.
    #[inline]
    pub fn try_take(&self) -> Option<Taken> {
        self.try_take_marked(0)
    }

    /// [`HeapLock::try_take`], leaving `mark` in the word: a waiter that
    /// slept takes it marked, since others may sleep too and its release
    /// must wake the next.
    #[inline]
    fn try_take_marked(&self, mark: u32) -> Option<Taken> {
        let forks = forks();
        let mine = tag(forks) << 1 | mark;
        match self.0.compare_exchange(0, mine, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => Some(Taken { over: false, forks }),
            // Held in an ancestor process: nobody here will give it back. A
            // sleeper's mark is kept, so the taker's release wakes it.
            Err(held) if held >> 1 != mine >> 1 => self
                .0
                .compare_exchange(held, mine | (held & PARKED), Ordering::Acquire, Ordering::Relaxed)
                .ok()
                .map(|_| Taken { over: true, forks }),
            Err(_) => None,
        }
    }

    /// Waits for the lock until `deadline` (None: for good) or until `stop`
    /// is set by another thread: spins briefly, then sleeps on the word in
    /// slices of at most a millisecond, checking both between slices.
    pub fn take_within(&self, deadline: Option<Instant>, stop: &AtomicBool) -> Option<Taken> {
        const SPINS: u32 = 100;
        const SLICE: Duration = Duration::from_millis(1);
        for _ in 0..SPINS {
            if let Some(t) = self.try_take() {
                return Some(t);
            }
            std::hint::spin_loop();
        }
        let mut mark = 0;
        loop {
            if let Some(t) = self.try_take_marked(mark) {
                return Some(t);
            }
            if stop.load(Ordering::Acquire) {
                return None;
            }
            let slice = match deadline {
                None => SLICE,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(SLICE),
                    _ => return None,
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

    /// Gives the lock back, waking one sleeper if the word says one sleeps.
    ///
    /// # Safety
    /// The lock is held by the caller (in this process).
    #[inline]
    pub unsafe fn give_back(&self) {
        if self.0.swap(0, Ordering::Release) & PARKED != 0 {
            sys::wake_one(&self.0);
        }
    }
}

// SAFETY: `try_take` hands the lock to one holder at a time (Acquire on
// taking, Release on giving back); `unlock` is only called by the holder, as
// lock_api's guard guarantees.
unsafe impl lock_api::RawMutex for HeapLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = HeapLock(AtomicU32::new(0));
    type GuardMarker = lock_api::GuardSend;

    fn lock(&self) {
        let never = AtomicBool::new(false);
        while self.take_within(None, &never).is_none() {}
    }

    #[inline]
    fn try_lock(&self) -> bool {
        self.try_take().is_some()
    }

    #[inline]
    unsafe fn unlock(&self) {
        // SAFETY: lock_api calls this only for a lock the caller holds.
        unsafe { self.give_back() }
    }

    fn is_locked(&self) -> bool {
        self.0.load(Ordering::Relaxed) != 0
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
    use std::sync::Arc;

    type Mutex<T> = lock_api::Mutex<HeapLock, T>;

    #[test]
    fn threads_hammering_one_lock_lose_no_count() {
        const THREADS: usize = 4;
        const EACH: u64 = 200_000;
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
    fn a_sleeping_waiter_is_woken_by_the_release() {
        let lock = Arc::new(HeapLock::default());
        assert_eq!(lock.try_take(), Some(Taken { over: false, forks: forks() }));
        let waiter = {
            let lock = Arc::clone(&lock);
            std::thread::spawn(move || {
                let never = AtomicBool::new(false);
                let deadline = Instant::now() + Duration::from_secs(60);
                lock.take_within(Some(deadline), &never)
            })
        };
        // Until the waiter has marked the word, it has not gone to sleep.
        while lock.0.load(Ordering::Relaxed) & PARKED == 0 {
            std::thread::yield_now();
        }
        // SAFETY: taken above by this thread.
        unsafe { lock.give_back() };
        assert_eq!(waiter.join().unwrap(), Some(Taken { over: false, forks: forks() }));
        assert_ne!(lock.0.load(Ordering::Relaxed) & !PARKED, 0, "held by the waiter");
    }

    #[test]
    fn a_wait_ends_at_its_deadline_or_when_stopped() {
        let lock = HeapLock::default();
        assert!(lock.try_take().is_some());
        let stop = AtomicBool::new(false);
        assert_eq!(lock.take_within(Some(Instant::now() + Duration::from_millis(3)), &stop), None);
        stop.store(true, Ordering::Release);
        assert_eq!(lock.take_within(None, &stop), None, "stop ends a wait without deadline");
    }

    #[test]
    fn a_word_left_by_an_ancestor_is_taken_over_and_says_so() {
        let lock = HeapLock::default();
        // A tag of another process (this one's, plus one), with a sleeper.
        lock.0.store(((tag(forks()) + 1) << 1) | PARKED, Ordering::Relaxed);
        assert_eq!(lock.try_take(), Some(Taken { over: true, forks: forks() }));
        assert_eq!(lock.0.load(Ordering::Relaxed), (tag(forks()) << 1) | PARKED, "the sleeper's mark is kept");
        assert_eq!(lock.try_take(), None, "held by this process now");
    }
}
