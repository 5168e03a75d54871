//! How a failure on the call path makes a fleet syncer send at once
//! (docs/fleet.md, "When a host sends"), within the budget of one send per
//! `fleet_interval`.
//!
//! The syncer sends once per interval *slot*: at the slot's end, or at once
//! when a failure arrives first (the slot's send is pulled forward; the
//! rest of the slot is quiet, and a failure during it pulls the next slot's
//! send to that slot's start). Invariants:
//! - the call path pays one atomic load per failure, an atomic swap and a
//!   thread unpark for the first failure of a slot only, and nothing at all
//!   per success (the binding calls [`Wake::failure`] from failure branches);
//! - no lock is ever taken by a thread that does not hold Ruby's GVL
//!   (the waiting syncer only parks and reads atomics), so a `fork` never
//!   finds one held by a thread that no longer exists;
//! - a wake is never lost: the failure bit is set before the unpark, and a
//!   park after an unpark returns at once;
//! - a wait's timeout is relative, measured by the kernel: a clock the
//!   process reads differently (libfaketime an hour ahead) never stretches
//!   it (see [`park`]).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// A failure arrived since the syncer last read the hosts' reports.
const FAILED: u8 = 1;
/// The slot's send already went: failures only set [`FAILED`].
const QUIET: u8 = 2;
/// The syncer stops: every wait returns at once.
const CLOSED: u8 = 4;

use crate::check::{out_of_range, ConfigError};
use crate::shm::Doorbell;

/// The longest one [`Wake::wait`] lasts: a longer `timeout` is cut to it
/// (a syncer's slot is far shorter).
pub const LONGEST_WAIT: Duration = Duration::from_secs(3600);

/// A wait's `timeout`, given in seconds: a finite number >= 0, cut to
/// [`LONGEST_WAIT`]. NaN, infinities and negative seconds are refused
/// (`Duration::from_secs_f64` panics on them, and a panic while Ruby's lock
/// is released aborts the process).
pub fn wait_timeout(secs: f64) -> Result<Duration, ConfigError> {
    if secs.is_finite() && secs >= 0.0 {
        Ok(Duration::from_secs_f64(secs).min(LONGEST_WAIT))
    } else {
        Err(out_of_range("timeout", "a finite Numeric >= 0 (seconds)", secs))
    }
}

/// One per syncer; its fleet breakers hold it too.
#[derive(Debug, Default)]
pub struct Wake {
    state: AtomicU8,
    /// The syncer's thread, recorded before each wait (while it still holds
    /// the GVL); the failure path reads it with the GVL held too. A
    /// `parking_lot` mutex: no poisoning to handle, and no holder without
    /// the GVL, so a fork never finds it held.
    thread: Mutex<Option<Thread>>,
    /// With `shared:` + `fleet:` breakers: the host's doorbell, rung by a
    /// failure in any process (crate::shm::Doorbell). The syncer then
    /// waits on it instead of its thread's parker, and an unpark wakes it
    /// there too.
    doorbell: OnceLock<&'static Doorbell>,
    /// Its rings when the syncer last read the reports.
    rings_seen: AtomicU32,
    /// Bumped by every unpark: the word the syncer's thread sleeps on
    /// (see [`park`]).
    parked: AtomicU32,
}

/// The syncer's sleep, with a relative timeout. `std::thread::park_timeout`
/// sleeps until an absolute deadline it computes from `clock_gettime`,
/// which the kernel then measures on its own clock: in a process whose
/// `clock_gettime` is interposed (libfaketime an hour ahead), a 0.1 s wait
/// lasted an hour, and the host's syncer stopped sending (a `reset!` made
/// there never reached the fleet). On Linux a futex wait with a relative
/// timeout instead; elsewhere the thread's parker (the unpark reaches
/// either).
mod park {
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    /// Sleeps while `word` is `seen`, for at most `timeout` (None: until
    /// woken), or until woken, or spuriously.
    #[cfg(all(target_os = "linux", not(feature = "portable")))]
    pub fn wait(word: &AtomicU32, seen: u32, timeout: Option<Duration>) {
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: t.subsec_nanos() as _,
        });
        let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: FUTEX_WAIT reads the word at this address (alive for the
        // call) and sleeps only while it equals `seen`; `ts_ptr` is null or
        // points to a relative timeout that outlives the call.
        unsafe {
            libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, seen, ts_ptr);
        }
    }

    /// Wakes the thread sleeping on `word`.
    #[cfg(all(target_os = "linux", not(feature = "portable")))]
    pub fn wake(word: &AtomicU32) {
        // SAFETY: FUTEX_WAKE only uses the address as a key.
        unsafe {
            libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX);
        }
    }

    #[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
    pub fn wait(_word: &AtomicU32, _seen: u32, timeout: Option<Duration>) {
        match timeout {
            Some(t) => std::thread::park_timeout(t),
            None => std::thread::park(),
        }
    }

    #[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
    pub fn wake(_word: &AtomicU32) {}
}

impl Wake {
    /// A failure was recorded (the call path). Returns whether this one
    /// woke the syncer: the first failure since it last read the reports,
    /// while it waits for a slot's send. Every other failure costs one load.
    #[inline]
    pub fn failure(&self) -> bool {
        if self.state.load(Ordering::Relaxed) & FAILED != 0 {
            return false;
        }
        if self.state.fetch_or(FAILED, Ordering::AcqRel) != 0 {
            return false;
        }
        self.unpark();
        true
    }

    /// The syncer's thread: waits until a failure arrives while it is not
    /// quiet (true), or until `timeout` passed, `stop` was set (Ruby wants
    /// the thread back) or the wake was closed (false). Call
    /// [`Wake::register`] on this thread first.
    pub fn wait(&self, timeout: Duration, stop: &AtomicBool) -> bool {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            // Read before the state: an unpark after this read changes the
            // word, and the sleep below returns at once.
            let parked = self.parked.load(Ordering::Acquire);
            // Read first: a ring after this read changes the word, and the
            // futex wait below returns at once.
            let bell = self.doorbell.get().map(|d| (d, d.load()));
            if let Some((_, word)) = bell {
                if Doorbell::rings(word) != self.rings_seen.load(Ordering::Acquire) {
                    // A failure elsewhere on the host: as one of ours (in a
                    // quiet slot, noted for the next one).
                    self.rings_seen.store(Doorbell::rings(word), Ordering::Release);
                    self.state.fetch_or(FAILED, Ordering::AcqRel);
                }
            }
            let s = self.state.load(Ordering::Acquire);
            if s == FAILED {
                return true;
            }
            if s & CLOSED != 0 || stop.load(Ordering::Acquire) {
                return false;
            }
            let now = Instant::now();
            let left = match deadline {
                Some(d) if now >= d => return false,
                Some(d) => Some(d - now),
                None => None,
            };
            match (bell, left) {
                (Some((d, word)), left) => d.wait(word, left.unwrap_or(Duration::from_secs(3600))),
                (None, left) => park::wait(&self.parked, parked, left),
            }
        }
    }

    /// Records the calling thread as the one to unpark (before [`Wake::wait`]).
    pub fn register(&self) {
        let current = std::thread::current();
        let mut t = self.thread.lock();
        if t.as_ref().map(Thread::id) != Some(current.id()) {
            *t = Some(current);
        }
    }

    /// The syncer is about to read the reports for a send: failures from now
    /// on are news. `quiet`: the send was pulled forward, and the slot's
    /// other failures wait for its end.
    pub fn arm(&self, quiet: bool) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| Some((s & CLOSED) | if quiet { QUIET } else { 0 }));
        if let Some(d) = self.doorbell.get() {
            self.rings_seen.store(Doorbell::rings(d.load()), Ordering::Release);
            if !quiet {
                d.arm();
            }
        }
    }

    /// A new slot begins: a failure that arrived during the quiet part of
    /// the last one makes the next [`Wake::wait`] return at once.
    pub fn unquiet(&self) {
        self.state.fetch_and(!QUIET, Ordering::AcqRel);
        if let Some(d) = self.doorbell.get() {
            d.arm();
        }
    }

    /// This syncer sends for `shared:` + `fleet:` breakers: it waits on the
    /// host's doorbell too (see [`Doorbell`]).
    pub fn use_doorbell(&self, d: &'static Doorbell) {
        if self.doorbell.set(d).is_ok() {
            self.rings_seen.store(Doorbell::rings(d.load()), Ordering::Release);
            d.arm();
            d.wake(); // a wait already under way moves to the doorbell
        }
    }

    /// Ruby wants the waiting thread back: wakes it wherever it waits
    /// (callable without the GVL: atomics, an unpark, a futex wake).
    pub fn interrupt(&self, thread: &Thread) {
        self.parked.fetch_add(1, Ordering::AcqRel);
        park::wake(&self.parked);
        thread.unpark();
        if let Some(d) = self.doorbell.get() {
            d.wake();
        }
    }

    /// Sends soon, as a failure would (a new breaker to report).
    pub fn signal(&self) {
        self.failure();
    }

    /// Stops the syncer's waits for good.
    pub fn close(&self) {
        self.state.fetch_or(CLOSED, Ordering::AcqRel);
        self.unpark();
    }

    /// In a forked child: a new syncer thread will wait here; the parent's
    /// does not exist.
    pub fn after_fork(&self) {
        self.state.store(0, Ordering::Release);
        *self.thread.lock() = None;
    }

    fn unpark(&self) {
        if let Some(d) = self.doorbell.get() {
            d.wake();
        }
        self.parked.fetch_add(1, Ordering::AcqRel);
        park::wake(&self.parked);
        if let Some(t) = self.thread.lock().as_ref() {
            t.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const LONG: Duration = Duration::from_secs(30);

    fn waiting(wake: &Arc<Wake>, timeout: Duration) -> std::thread::JoinHandle<bool> {
        let (tx, rx) = std::sync::mpsc::channel();
        let w = Arc::clone(wake);
        let h = std::thread::spawn(move || {
            w.register();
            tx.send(()).unwrap();
            w.wait(timeout, &AtomicBool::new(false))
        });
        rx.recv().unwrap();
        h
    }

    #[test]
    fn the_first_failure_wakes_a_waiting_syncer_and_later_ones_do_not() {
        let wake = Arc::new(Wake::default());
        let h = waiting(&wake, LONG);
        assert!(wake.failure());
        assert!(!wake.failure());
        assert!(h.join().unwrap());
        // Until the syncer reads the reports again, failures are old news.
        assert!(!wake.failure());
        wake.arm(false);
        assert!(wake.failure());
    }

    #[test]
    fn a_wait_timeout_is_finite_seconds_at_least_zero_cut_to_an_hour() {
        assert_eq!(wait_timeout(0.25), Ok(Duration::from_millis(250)));
        assert_eq!(wait_timeout(0.0), Ok(Duration::ZERO));
        assert_eq!(wait_timeout(1e12), Ok(LONGEST_WAIT));
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.5] {
            let e = wait_timeout(bad).unwrap_err();
            assert_eq!(e.name, "timeout", "{bad}");
            assert!(e.to_string().starts_with("timeout must be a finite Numeric >= 0"), "{e}");
        }
    }

    #[test]
    fn a_failure_before_the_wait_is_not_lost() {
        let wake = Wake::default();
        wake.register();
        assert!(wake.failure());
        assert!(wake.wait(LONG, &AtomicBool::new(false)));
    }

    #[test]
    fn a_quiet_slot_is_not_woken_and_its_failure_pulls_the_next_slot() {
        let wake = Arc::new(Wake::default());
        wake.arm(true);
        assert!(!wake.failure(), "quiet: no wake");
        assert!(!wake.failure());
        // The quiet wait runs to its end.
        wake.register();
        assert!(!wake.wait(Duration::from_millis(20), &AtomicBool::new(false)));
        wake.unquiet();
        assert!(wake.wait(LONG, &AtomicBool::new(false)), "the next slot's send at its start");
    }

    #[test]
    fn a_slot_without_failures_ends_at_its_timeout() {
        let wake = Wake::default();
        wake.register();
        assert!(!wake.wait(Duration::from_millis(10), &AtomicBool::new(false)));
    }

    #[test]
    fn close_and_stop_end_a_wait() {
        let wake = Arc::new(Wake::default());
        let h = waiting(&wake, LONG);
        wake.close();
        assert!(!h.join().unwrap());
        assert!(!wake.failure(), "a closed wake wakes nobody");
        let open = Wake::default();
        assert!(!open.wait(LONG, &AtomicBool::new(true)));
    }

    #[test]
    fn after_fork_starts_armed_with_no_thread() {
        let wake = Wake::default();
        wake.register();
        wake.close();
        wake.after_fork();
        assert!(wake.failure(), "open again; no thread to unpark yet");
        wake.register();
        assert!(wake.wait(LONG, &AtomicBool::new(false)));
    }

    #[cfg(all(target_os = "linux", not(feature = "portable")))]
    #[test]
    fn a_ring_of_the_host_doorbell_pulls_the_send() {
        let path = std::env::temp_dir().join(format!("cb-wake-doorbell-{}", std::process::id()));
        let bell: &'static Doorbell = Box::leak(Box::new(Doorbell::open(&path).unwrap()));
        let elsewhere = Doorbell::open(&path).unwrap(); // another process's mapping
        let wake = Arc::new(Wake::default());
        wake.use_doorbell(bell);
        wake.arm(false);
        let h = waiting(&wake, LONG);
        assert!(elsewhere.ring(), "armed by the waiting syncer");
        assert!(h.join().unwrap(), "a failure elsewhere on the host pulls the send");
        assert!(!elsewhere.ring(), "rung once until the syncer waits again");
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn many_threads_failing_wake_the_syncer_once() {
        let wake = Arc::new(Wake::default());
        let h = waiting(&wake, LONG);
        let woke: usize = (0..8)
            .map(|_| {
                let w = Arc::clone(&wake);
                std::thread::spawn(move || (0..1000).filter(|_| w.failure()).count())
            })
            .map(|t| t.join().unwrap())
            .sum();
        assert_eq!(woke, 1);
        assert!(h.join().unwrap());
    }
}
