//! The host's fleet doorbell (docs/fleet.md, "When a host sends"): one
//! futex word in a file of the shared directory, mapped by every process
//! of the user that has `shared:` + `fleet:` breakers. A failure of such a
//! breaker in any process rings it when a sender waits for one, so the
//! process that sends for the host (`Breaker::fleet_claim`) sends at once,
//! whichever process recorded the failure.
//!
//! The word: bit 0 is `ARMED` (a sender waits for the next failure), the
//! other bits count rings. A failure costs one atomic load unless armed;
//! the first failure after arming clears `ARMED`, counts a ring and wakes
//! every waiter (a system call), so a burst of failures rings once.
//!
//! The file goes with the processes that map it, as shared records do
//! (docs/shared.md): it is opened under the `INIT` lock and mapped with the
//! `IN_USE` lock held, and the cleanup of unused files removes it once no
//! process maps it (its first bytes are zero, as a record's that was never
//! built: the word lies past them).

use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use std::sync::atomic::AtomicBool;

use super::format::{INIT, IN_USE};
use super::{c_path, os_error, private_dir::ensure_private, range_lock, range_lock_within, still_at, Fd};
use crate::shm::dir::file_prefix;
use crate::shm::{shm_dir, ShmError};

const ARMED: u32 = 1;
const RING: u32 = 2;
/// The file's length: one page.
const LEN: usize = 4096;
/// Where the word lies: past the bytes the cleanup reads as a record's magic.
const WORD_AT: usize = 64;
/// How long opening waits for another process's `INIT` step (microseconds
/// long): a stopped process holding it costs this process its doorbell.
const OPEN_WAIT: i64 = 100_000_000;

/// A mapped doorbell word.
#[derive(Debug)]
pub struct Doorbell {
    word: NonNull<AtomicU32>,
}

// SAFETY: the word is only touched atomically, and the mapping lives as
// long as the value (the host's lives as long as the process).
unsafe impl Send for Doorbell {}
// SAFETY: as above.
unsafe impl Sync for Doorbell {}

impl Doorbell {
    /// The host's doorbell (`fleet-doorbell` in [`shm_dir`]), opened once
    /// per process (a forked child shares the parent's mapping); None when
    /// it cannot be (a failure then waits for the sender's slot).
    pub fn host() -> Option<&'static Doorbell> {
        static HOST: OnceLock<Option<Doorbell>> = OnceLock::new();
        HOST.get_or_init(|| {
            let dir = shm_dir();
            ensure_private(&dir).ok()?;
            Doorbell::open(&dir.join(format!("{}fleet-doorbell", file_prefix()))).ok()
        })
        .as_ref()
    }

    /// Maps the doorbell of the file at `path`, created (mode 0600) when
    /// missing.
    pub fn open(path: &Path) -> Result<Doorbell, ShmError> {
        let shown = path.display();
        let cpath = c_path(path)?;
        let lock_error = |e| ShmError::Io { context: format!("cannot lock {shown}"), source: e };
        let stop = AtomicBool::new(false);
        loop {
            let flags = libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW;
            // SAFETY: `cpath` is a C string.
            let fd = Fd(unsafe { libc::open(cpath.as_ptr(), flags, 0o600) });
            if fd.0 < 0 {
                return Err(os_error(format!("cannot open {shown}")));
            }
            range_lock_within(fd.0, INIT, libc::F_WRLCK, OPEN_WAIT, &stop).map_err(lock_error)?;
            if !still_at(fd.0, &cpath) {
                continue; // removed by another process's cleanup meanwhile
            }
            // Growing to the same length twice is harmless: the word stays.
            // SAFETY: `fd` is open for writing.
            if unsafe { libc::ftruncate(fd.0, LEN as libc::off_t) } != 0 {
                return Err(os_error(format!("cannot size {shown}")));
            }
            // SAFETY: a new shared mapping of the file's first page, never
            // unmapped while the value lives.
            let ptr = unsafe {
                libc::mmap(std::ptr::null_mut(), LEN, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.0, 0)
            };
            if ptr == libc::MAP_FAILED {
                return Err(os_error(format!("cannot map {shown}")));
            }
            // SAFETY: inside the page just mapped, 4-aligned.
            let word = NonNull::new(unsafe { (ptr as *mut u8).add(WORD_AT) } as *mut AtomicU32)
                .ok_or_else(|| os_error(format!("cannot map {shown}")))?;
            let bell = Doorbell { word };
            // The mapping keeps this open file description, and so its
            // IN_USE lock, once `fd` closes (as a MappedRecord's).
            range_lock_within(fd.0, IN_USE, libc::F_RDLCK, OPEN_WAIT, &stop).map_err(lock_error)?;
            range_lock(fd.0, INIT, libc::F_UNLCK)
                .map_err(|e| ShmError::Io { context: format!("cannot unlock {shown}"), source: e })?;
            return Ok(bell);
        }
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: mapped, page-aligned, alive while `self` is.
        unsafe { self.word.as_ref() }
    }

    /// The word as it is now (for [`Doorbell::wait`]).
    pub fn load(&self) -> u32 {
        self.word().load(Ordering::Acquire)
    }

    /// How many times it rang (wrapping).
    pub fn rings(word: u32) -> u32 {
        word >> 1
    }

    /// A sender waits: the next failure rings.
    pub fn arm(&self) {
        self.word().fetch_or(ARMED, Ordering::AcqRel);
    }

    /// A failure of a `shared:` + `fleet:` breaker: rings when a sender
    /// waits for one. Returns whether this one rang.
    #[inline]
    pub fn ring(&self) -> bool {
        let w = self.word().load(Ordering::Relaxed);
        if w & ARMED == 0 {
            return false;
        }
        let rung = (w & !ARMED).wrapping_add(RING);
        if self.word().compare_exchange(w, rung, Ordering::AcqRel, Ordering::Relaxed).is_err() {
            return false;
        }
        self.wake();
        true
    }

    /// Wakes every process's waiter (they look again at what they wait for).
    pub fn wake(&self) {
        // SAFETY: FUTEX_WAKE (shared: other processes map the word) only
        // uses the address as a key.
        unsafe { libc::syscall(libc::SYS_futex, self.word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
    }

    /// Sleeps while the word is `seen`, for at most `timeout` (or until
    /// woken, or spuriously).
    pub fn wait(&self, seen: u32, timeout: Duration) {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        // SAFETY: FUTEX_WAIT reads the mapped word and sleeps only while it
        // equals `seen`; `ts` outlives the call.
        unsafe { libc::syscall(libc::SYS_futex, self.word.as_ptr(), libc::FUTEX_WAIT, seen, &ts as *const _) };
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        // SAFETY: the mapping `open` made (the word lies WORD_AT into it),
        // unmapped once.
        unsafe { libc::munmap((self.word.as_ptr() as *mut u8).sub(WORD_AT) as *mut libc::c_void, LEN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_bell() -> (Doorbell, std::path::PathBuf) {
        let path =
            std::env::temp_dir().join(format!("cb-doorbell-{}-{:?}", std::process::id(), std::thread::current().id()));
        (Doorbell::open(&path).unwrap(), path)
    }

    #[test]
    fn rings_only_when_armed_and_once_per_arming() {
        let (bell, path) = temp_bell();
        let before = Doorbell::rings(bell.load());
        assert!(!bell.ring(), "nobody waits");
        bell.arm();
        assert!(bell.ring());
        assert!(!bell.ring(), "rung already: a burst rings once");
        assert_eq!(Doorbell::rings(bell.load()), before.wrapping_add(1));
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn the_cleanup_removes_it_once_no_process_maps_it() {
        let dir = std::env::temp_dir().join(format!("cb-doorbell-dir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}fleet-doorbell", file_prefix()));
        let bell = Doorbell::open(&path).unwrap();
        bell.arm();
        assert!(bell.ring());
        crate::shm::remove_unused(&dir, Path::new(""));
        assert!(path.exists(), "mapped: kept");
        drop(bell);
        crate::shm::remove_unused(&dir, Path::new(""));
        assert!(!path.exists(), "unused: removed");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_ring_in_another_process_wakes_a_waiter() {
        let (bell, path) = temp_bell();
        bell.arm();
        let seen = bell.load();
        // SAFETY: the child only rings the mapped word, then exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let other = Doorbell::open(&path).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            let rang = other.ring();
            // SAFETY: ends the forked child at once.
            unsafe { libc::_exit(if rang { 0 } else { 1 }) };
        }
        let start = std::time::Instant::now();
        while bell.load() == seen && start.elapsed() < Duration::from_secs(30) {
            bell.wait(seen, Duration::from_secs(30));
        }
        assert_ne!(bell.load(), seen, "woken by the other process's ring");
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(libc::WEXITSTATUS(status), 0);
        let _ = std::fs::remove_file(path);
    }
}
