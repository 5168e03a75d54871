//! Calls in flight, held to a cap (`max_concurrent:`, docs/concurrency.md).
//!
//! [`InFlight`] is the count and the cap, plain atomics that live beside
//! the published words ([`Published`](crate::store::Published)): in this
//! process's memory for a breaker of one process, in the shared file for
//! host scope and `shared:`, so the cap is host-wide there. Taking a slot
//! takes no lock: a compare-and-swap of the count against the cap.
//!
//! In a shared file, [`Holders`] keeps how many slots each process holds,
//! so that the slots of a process that died (SIGKILL included) are given
//! back: a caller that finds the cap reached looks, at most every
//! [`SWEEP_EVERY`], for holders that are gone (their pid no longer runs,
//! is a zombie, or runs another program started later: a reused pid) and
//! takes their slots off the count.
//!
//! Within a process, slots are taken and given back one at a time (the
//! binding does so holding Ruby's GVL): what only this process writes (the
//! count in process memory, its holder's count in a shared file) is
//! written with plain atomic loads and stores, not read-modify-writes,
//! which keeps a capped call within a few nanoseconds of an uncapped one
//! (docs/performance.md); the host-wide count of a shared file, which
//! other processes change too, is compare-and-swapped. A waiter
//! ([`Slots::wait_for_free`]) runs without that serialization, so it only
//! watches the count and looks for dead holders; its caller takes the
//! slot once serialized again.
//!
//! Invariants:
//! - a slot is taken by raising its holder's count first, then the total;
//!   given back by lowering the total first, then the holder's. A process
//!   killed between the two leaves its holder's count one too high, so the
//!   sweep takes one slot too many off the total: the count errs low (one
//!   more call admitted), never high (a slot lost for good). The total
//!   never goes below zero, so such an error heals once the host is idle;
//! - a slot belongs to the process that took it: a forked child starts
//!   with none of its parent's (a slot it inherited is given back by
//!   nobody in the child, [`Slot`] carries the fork count);
//! - giving a slot back while a waiter (`max_wait:`) sleeps bumps the word
//!   it sleeps on (a futex on Linux, shared between processes for a shared
//!   file) and wakes one. A release that races with a waiter going to
//!   sleep may miss it; the waiter then looks again after at most
//!   [`WAIT_SLICE`].

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};

use crate::clock::{Clock, HostClock, Nanos};
use crate::heap_lock::{forks, forks_hooked};

/// Processes of a host whose slots a shared file tracks apart; a process
/// that finds every entry taken by a live process takes slots that are
/// counted but not tracked (a SIGKILL then loses them until the host is
/// idle; docs/concurrency.md).
pub const HOLDERS: usize = 256;
/// How often at most a caller at the cap looks for dead holders.
pub const SWEEP_EVERY: Nanos = 100_000_000;
/// The longest a waiter sleeps before it looks again (for a release it
/// missed, dead holders, and Ruby wanting its thread back).
pub const WAIT_SLICE: Nanos = 10_000_000;

/// The count of calls in flight and its cap: plain atomics, in process
/// memory or in a shared file (its layout is hashed, [`InFlight::layout`]).
#[repr(C)]
#[derive(Debug, Default)]
pub struct InFlight {
    /// Calls in flight (every holder's).
    count: AtomicU32,
    /// The cap; 0: none set.
    cap: AtomicU32,
    /// Bumped whenever a slot is given back: waiters sleep on it.
    released: AtomicU32,
    /// Waiters asleep on `released` (a release wakes one only if some are).
    sleepers: AtomicU32,
    /// Calls refused at the cap, cumulative.
    limited: AtomicU64,
    /// When dead holders were last looked for (the host's monotonic clock).
    swept_at: AtomicI64,
    /// In process memory: the fork count `count` belongs to (a forked
    /// child starts from none). Unused in a shared file.
    forks: AtomicU64,
}

/// One process's slots in a shared file.
#[repr(C)]
#[derive(Debug, Default)]
struct Holder {
    /// `pid << 32 | start time` of the holding process (see [`Process`]);
    /// 0: free; [`SWEEPING`]: being freed.
    owner: AtomicU64,
    /// Slots it holds.
    held: AtomicU32,
    _pad: u32,
}

const SWEEPING: u64 = u64::MAX;

/// Every process's slots in a shared file.
#[repr(C)]
#[derive(Debug)]
pub struct Holders {
    entries: [Holder; HOLDERS],
}

impl Default for Holders {
    fn default() -> Self {
        Self { entries: std::array::from_fn(|_| Holder::default()) }
    }
}

impl InFlight {
    /// Adds the layout of `InFlight` (stored in shared files).
    pub(crate) fn layout(h: crate::hashing::Fnv) -> crate::hashing::Fnv {
        crate::hashing::hash_layout!(h, InFlight { count, cap, released, sleepers, limited, swept_at, forks })
    }
}

impl Holders {
    /// Adds the layout of `Holders` (stored in shared files).
    pub(crate) fn layout(h: crate::hashing::Fnv) -> crate::hashing::Fnv {
        let h = crate::hashing::hash_layout!(h, Holders { entries });
        crate::hashing::hash_layout!(h, Holder { owner, held, _pad })
    }
}

/// A slot taken: give it back with [`Slots::release`], once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The holder entry counted, or [`UNTRACKED`] / [`UNCOUNTED`].
    holder: u32,
    /// Calls in flight once it was taken, itself included (0: uncounted).
    began_with: u32,
    /// The process's fork count when it was taken.
    forks: u64,
}

impl Slot {
    /// Calls in flight (in the cap's scope) once this one was taken, itself
    /// included; 0 when it was not counted. What the adaptive cap samples.
    pub fn began_with(&self) -> u32 {
        self.began_with
    }
}

/// A slot counted in the total but in no holder's entry.
const UNTRACKED: u32 = u32::MAX;
/// A slot counted nowhere (every holder entry of the host taken).
const UNCOUNTED: u32 = u32::MAX - 1;

/// The slots of one breaker, as one process sees them: the count and cap,
/// and in a shared file the holders and this process's entry among them.
#[derive(Clone, Copy)]
pub struct Slots<'a> {
    counts: &'a InFlight,
    /// In a shared file: the holders, and this process's entry (a cache in
    /// process memory, `forks << 32 | index + 1`; 0: none yet).
    holders: Option<(&'a Holders, &'a AtomicU64)>,
}

impl<'a> Slots<'a> {
    /// The slots of a breaker of this process.
    pub fn heap(counts: &'a InFlight) -> Self {
        Self { counts, holders: None }
    }

    /// The slots of a shared file; `mine` is this process's cache of its
    /// holder entry (0 to start).
    pub fn shared(counts: &'a InFlight, holders: &'a Holders, mine: &'a AtomicU64) -> Self {
        Self { counts, holders: Some((holders, mine)) }
    }

    /// Sets the cap (a breaker without one takes no slots: 0 refuses
    /// every take). Every process sharing a file sets the same one: its
    /// configuration is part of the file's key.
    pub fn set_cap(&self, cap: u32) {
        forks(); // the fork hook, which `forks_hooked` relies on
        self.publish_cap(cap);
    }

    /// Publishes a new cap (the adaptive rule's, after a step that settled
    /// a call), once [`Slots::set_cap`] set the first.
    #[inline]
    pub fn publish_cap(&self, cap: u32) {
        self.counts.cap.store(cap, Ordering::Release);
    }

    /// The cap; None: none.
    pub fn cap(&self) -> Option<u32> {
        Some(self.counts.cap.load(Ordering::Acquire)).filter(|&c| c > 0)
    }

    /// Calls in flight now (for this process's fork, in process memory).
    pub fn in_flight(&self) -> u32 {
        if self.holders.is_none() && self.counts.forks.load(Ordering::Acquire) != forks_hooked() {
            return 0;
        }
        self.counts.count.load(Ordering::Acquire)
    }

    /// Calls refused at the cap so far.
    pub fn limited(&self) -> u64 {
        self.counts.limited.load(Ordering::Relaxed)
    }

    /// Counts a call refused at the cap.
    pub fn count_limited(&self) {
        self.counts.limited.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes a slot if the count is below the cap, without waiting. The
    /// process's callers must take and give back slots one at a time (see
    /// the module doc).
    #[inline]
    pub fn try_take(&self) -> Option<Slot> {
        let forks = forks_hooked();
        let Some((holders, mine)) = self.holders else {
            self.heap_fork(forks);
            // Only this process writes it: see the module doc.
            let cap = self.counts.cap.load(Ordering::Acquire);
            let n = self.counts.count.load(Ordering::Relaxed);
            if n >= cap {
                return None;
            }
            self.counts.count.store(n + 1, Ordering::Relaxed);
            return Some(Slot { holder: UNTRACKED, began_with: n + 1, forks });
        };
        let Some(index) = self.holder(holders, mine, forks) else {
            // Every entry taken by a live process: admitted, uncounted
            // (errs toward admitting).
            return Some(Slot { holder: UNCOUNTED, began_with: 0, forks });
        };
        let held = &holders.entries[index].held;
        // The holder's count first (see the module doc); only this
        // process writes it.
        let mine_now = held.load(Ordering::Relaxed);
        held.store(mine_now.saturating_add(1), Ordering::Release);
        if let Some(began_with) = self.raise_total() {
            Some(Slot { holder: index as u32, began_with, forks })
        } else {
            held.store(mine_now, Ordering::Release);
            None
        }
    }

    /// Raises the host-wide total by one unless it is at the cap: the new
    /// total.
    #[inline]
    fn raise_total(&self) -> Option<u32> {
        let cap = self.counts.cap.load(Ordering::Acquire);
        let mut n = self.counts.count.load(Ordering::Acquire);
        loop {
            if n >= cap {
                return None;
            }
            match self.counts.count.compare_exchange_weak(n, n + 1, Ordering::SeqCst, Ordering::Acquire) {
                Ok(_) => return Some(n + 1),
                Err(now) => n = now,
            }
        }
    }

    /// Lowers the host-wide total by up to `n`, never below zero.
    fn lower_total(&self, n: u32) {
        let _ = self.counts.count.fetch_update(Ordering::SeqCst, Ordering::Acquire, |c| Some(c.saturating_sub(n)));
    }

    /// In process memory, a forked child's first use starts from no slot.
    #[inline]
    fn heap_fork(&self, forks: u64) {
        let seen = self.counts.forks.load(Ordering::Acquire);
        if seen != forks && self.counts.forks.compare_exchange(seen, forks, Ordering::AcqRel, Ordering::Acquire).is_ok()
        {
            self.counts.count.store(0, Ordering::Release);
        }
    }

    /// Gives `slot` back, and wakes a waiter if one sleeps. A slot taken
    /// before this process was forked (in its parent) is not this
    /// process's to give. Serialized as [`Slots::try_take`].
    #[inline]
    pub fn release(&self, slot: Slot) {
        if slot.holder == UNCOUNTED || slot.forks != forks_hooked() {
            return;
        }
        match self.holders {
            None => {
                let n = self.counts.count.load(Ordering::Relaxed);
                self.counts.count.store(n.saturating_sub(1), Ordering::Release);
            }
            Some((holders, _)) => {
                // The total first: see the module doc.
                self.lower_total(1);
                if let Some(entry) = holders.entries.get(slot.holder as usize) {
                    let held = entry.held.load(Ordering::Relaxed);
                    entry.held.store(held.saturating_sub(1), Ordering::Release);
                }
            }
        }
        if self.counts.sleepers.load(Ordering::SeqCst) > 0 {
            self.counts.released.fetch_add(1, Ordering::SeqCst);
            sys::wake(&self.counts.released, 1, self.holders.is_some());
        }
    }

    /// This process's holder entry: the cached one, or a new one (one of
    /// this process left by an earlier mapping, else a free one, else one
    /// freed by a sweep). None: every entry is a live process's.
    fn holder(&self, holders: &Holders, mine: &AtomicU64, forks: u64) -> Option<usize> {
        let cached = mine.load(Ordering::Acquire);
        if cached != 0 && cached >> 32 == forks & 0xFFFF_FFFF {
            return Some((cached & 0xFFFF_FFFF) as usize - 1);
        }
        let me = Process::me()?.owner();
        let claim = || {
            let found = holders.entries.iter().position(|e| e.owner.load(Ordering::Acquire) == me);
            found.or_else(|| {
                holders
                    .entries
                    .iter()
                    .position(|e| e.owner.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire).is_ok())
            })
        };
        let index = claim().or_else(|| {
            self.sweep(true);
            claim()
        })?;
        mine.store((forks & 0xFFFF_FFFF) << 32 | (index as u64 + 1), Ordering::Release);
        Some(index)
    }

    /// Gives back the slots of holders that are gone, at most every
    /// [`SWEEP_EVERY`] unless `now`; whether any came back.
    pub fn sweep(&self, now: bool) -> bool {
        let Some((holders, _)) = self.holders else { return false };
        let t = HostClock::default().now();
        let last = self.counts.swept_at.load(Ordering::Acquire);
        if !now
            && (t.saturating_sub(last) < SWEEP_EVERY
                || self.counts.swept_at.compare_exchange(last, t, Ordering::AcqRel, Ordering::Acquire).is_err())
        {
            return false;
        }
        let me = Process::me().map(|p| p.owner());
        let mut freed = 0u32;
        for entry in &holders.entries {
            let owner = entry.owner.load(Ordering::Acquire);
            if owner == 0 || owner == SWEEPING || Some(owner) == me || Process::alive(owner) {
                continue;
            }
            if entry.owner.compare_exchange(owner, SWEEPING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                let held = entry.held.swap(0, Ordering::AcqRel);
                self.lower_total(held);
                freed = freed.saturating_add(held);
                entry.owner.store(0, Ordering::Release);
            }
        }
        if freed > 0 {
            self.counts.released.fetch_add(1, Ordering::Release);
            sys::wake(&self.counts.released, i32::MAX, true);
        }
        freed > 0
    }

    /// Waits until the count is below the cap (true), looking for dead
    /// holders meanwhile, or until `deadline` on the host's monotonic clock
    /// ([`HostClock`]) or `stop` is set by another thread (false). Takes
    /// nothing: the caller takes the slot with [`Slots::try_take`], which
    /// another caller may have taken first. Blocks: call it without any
    /// runtime lock held.
    pub fn wait_for_free(&self, deadline: Nanos, stop: &AtomicBool) -> bool {
        let clock = HostClock::default();
        loop {
            self.counts.sleepers.fetch_add(1, Ordering::SeqCst);
            // Ordered with a release's lowering of the count and its look
            // at `sleepers` (see the module doc).
            std::sync::atomic::fence(Ordering::SeqCst);
            let seen = self.counts.released.load(Ordering::SeqCst);
            let free = self.has_room();
            let left = deadline.saturating_sub(clock.now());
            if !free && left > 0 && !stop.load(Ordering::Acquire) {
                // Asleep only while no slot was given back since `seen`.
                sys::wait(&self.counts.released, seen, left.min(WAIT_SLICE), self.holders.is_some());
            }
            self.counts.sleepers.fetch_sub(1, Ordering::SeqCst);
            if free || self.has_room() || self.sweep(false) {
                return true;
            }
            if clock.now() >= deadline || stop.load(Ordering::Acquire) {
                return false;
            }
        }
    }

    /// Whether the count is below the cap now (for this process's fork, in
    /// process memory).
    fn has_room(&self) -> bool {
        self.in_flight() < self.counts.cap.load(Ordering::Acquire)
    }
}

/// A process as a holder entry names it: its pid, and its start time
/// (clock ticks after boot, `/proc/PID/stat`), so that a reused pid is not
/// taken for the process that died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    pid: u32,
    started: u64,
}

impl Process {
    /// This process (computed once per fork).
    pub fn me() -> Option<Process> {
        static ME: AtomicU64 = AtomicU64::new(0);
        static ME_FORKS: AtomicU64 = AtomicU64::new(u64::MAX);
        let forks = forks();
        if ME_FORKS.load(Ordering::Acquire) == forks {
            let owner = ME.load(Ordering::Acquire);
            return Some(Process { pid: (owner >> 32) as u32, started: owner & 0xFFFF_FFFF });
        }
        // SAFETY: getpid cannot fail.
        let pid = unsafe { libc::getpid() } as u32;
        let me = Process { pid, started: sys::started(pid).map_or(0, |(_, started)| started) };
        ME.store(me.owner(), Ordering::Release);
        ME_FORKS.store(forks, Ordering::Release);
        Some(me)
    }

    /// The word a holder entry keeps: `pid << 32 | start time` (its low 32
    /// bits).
    pub fn owner(self) -> u64 {
        (u64::from(self.pid) << 32) | (self.started & 0xFFFF_FFFF)
    }

    /// Whether the process an entry names still runs: its pid exists, is
    /// not a zombie, and started when the entry says.
    pub fn alive(owner: u64) -> bool {
        let pid = (owner >> 32) as u32;
        match sys::started(pid) {
            None => false,
            Some((zombie, started)) => !zombie && started & 0xFFFF_FFFF == owner & 0xFFFF_FFFF,
        }
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use std::sync::atomic::AtomicU32;

    /// Whether `pid` is a zombie, and its start time; None: no such
    /// process. Where /proc cannot be read, a process that exists counts
    /// as alive and not started at a known time (0).
    pub fn started(pid: u32) -> Option<(bool, u64)> {
        // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
        if unsafe { libc::kill(pid as libc::pid_t, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        {
            return None;
        }
        // Unreadable: gone meanwhile (a start time of 0 then differs from
        // the entry's), or no /proc (this process's own reads 0 as well).
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return Some((false, 0)) };
        // "pid (comm) state ppid ...": the name may hold spaces and
        // parentheses; the fields after its last ')' start at field 3.
        let rest = stat.rsplit_once(')').map(|(_, r)| r)?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let zombie = matches!(fields.first(), Some(&("Z" | "X" | "x")));
        // Field 22, starttime.
        let started = fields.get(19).and_then(|s| s.parse().ok()).unwrap_or(0);
        Some((zombie, started))
    }

    /// Sleeps while `word` holds `expected`, for at most `nanos` (or until
    /// woken, or spuriously); `shared`: the word is in a shared mapping.
    pub fn wait(word: &AtomicU32, expected: u32, nanos: i64, shared: bool) {
        let ts = libc::timespec {
            tv_sec: (nanos / 1_000_000_000) as libc::time_t,
            tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
        };
        let op = if shared { libc::FUTEX_WAIT } else { libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG };
        // SAFETY: FUTEX_WAIT reads the word at this address (alive for the
        // call) and sleeps only while it equals `expected`; `ts` is a
        // relative timeout that outlives the call.
        unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), op, expected, &ts as *const libc::timespec) };
    }

    /// Wakes up to `n` threads sleeping on `word`.
    pub fn wake(word: &AtomicU32, n: i32, shared: bool) {
        let op = if shared { libc::FUTEX_WAKE } else { libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG };
        // SAFETY: FUTEX_WAKE only uses the address as a key.
        unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), op, n) };
    }
}

#[cfg(not(target_os = "linux"))]
mod sys {
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Whether `pid` exists (never a zombie here), start time unknown (0).
    pub fn started(pid: u32) -> Option<(bool, u64)> {
        // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
        let gone = unsafe { libc::kill(pid as libc::pid_t, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        (!gone).then_some((false, 0))
    }

    /// No futex: a short nap.
    pub fn wait(word: &AtomicU32, expected: u32, nanos: i64, _shared: bool) {
        if word.load(Ordering::Acquire) == expected {
            std::thread::sleep(std::time::Duration::from_nanos(nanos.clamp(0, 1_000_000) as u64));
        }
    }

    /// Sleepers wake by themselves.
    pub fn wake(_word: &AtomicU32, _n: i32, _shared: bool) {}
}

#[cfg(test)]
#[path = "slots_tests.rs"]
mod tests;
