//! Removing the files no live process maps any more.

use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

use super::format::{magic_is_zero, version_at_least_4, INIT, IN_USE};
use super::{c_path, fstat, monotonic, range_lock, still_at, Fd};
use crate::clock::Nanos;
use crate::shm::dir::file_prefix;
use crate::shm::ShmError;

/// Removes the files of this user in `dir` (other than `keep`) that no
/// live process maps: those of version 4 and later whose `IN_USE` and
/// `INIT` locks are both free, and empty or zero-headed ones nobody is
/// building. Files of older versions are left alone (they take no `IN_USE`
/// lock, so whether they are used cannot be told). Best effort: a file that
/// cannot be inspected is kept.
pub fn remove_unused(dir: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let prefix = file_prefix();
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.as_encoded_bytes().starts_with(prefix.as_bytes()) {
            continue;
        }
        let path = entry.path();
        if path == keep {
            continue;
        }
        let _ = remove_if_unused(&path);
    }
}

/// How often a process looks for unused files: at its first open (a fresh
/// process, or a forked child), then at most once per this. A scan opens
/// every file of the directory, so doing it at each open made booting N
/// breakers cost N² (docs/shared.md, "Costs").
const SCAN_EVERY: Nanos = 60_000_000_000;

/// When a process last scanned: its pid (a forked child has another, so
/// it scans at its first open) and when it may scan again.
pub(super) struct Throttle {
    pid: AtomicU32,
    next: AtomicI64,
}

impl Throttle {
    pub(super) const fn new() -> Self {
        Self { pid: AtomicU32::new(0), next: AtomicI64::new(0) }
    }

    /// Whether process `pid` scans at `now`; if so, the next scan is due
    /// [`SCAN_EVERY`] later. Two threads may both be told yes at once:
    /// a second scan is harmless.
    pub(super) fn due(&self, pid: u32, now: Nanos) -> bool {
        if self.pid.load(Ordering::Relaxed) == pid && now < self.next.load(Ordering::Relaxed) {
            return false;
        }
        self.next.store(now.saturating_add(SCAN_EVERY), Ordering::Relaxed);
        self.pid.store(pid, Ordering::Relaxed);
        true
    }
}

static THROTTLE: Throttle = Throttle::new();

/// [`remove_unused`], when this process's [`Throttle`] says it is due.
pub(super) fn remove_unused_now_and_then(dir: &Path, keep: &Path) {
    if THROTTLE.due(std::process::id(), monotonic()) {
        remove_unused(dir, keep);
    }
}

/// Removes every unused file of this user in [`crate::shm::shm_dir`] now,
/// as a process's first open does (bin/test checks with it that the test
/// suite leaves no file behind).
pub fn sweep() {
    remove_unused(&crate::shm::shm_dir(), Path::new(""));
}

fn remove_if_unused(path: &Path) -> Result<bool, ShmError> {
    let cpath = c_path(path)?;
    // O_NONBLOCK: never wait on a FIFO planted under the prefix.
    let flags = libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    // SAFETY: `cpath` is a C string.
    let fd = unsafe { libc::open(cpath.as_ptr(), flags) };
    if fd < 0 {
        return Ok(false);
    }
    let fd = Fd(fd);
    let st = fstat(fd.0).map_err(|e| ShmError::Io { context: String::new(), source: e })?;
    // SAFETY: geteuid cannot fail.
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_uid != unsafe { libc::geteuid() } {
        return Ok(false);
    }
    let ours = version_at_least_4(fd.0) || st.st_size == 0 || magic_is_zero(fd.0);
    if !ours {
        return Ok(false);
    }
    let free = range_lock(fd.0, IN_USE, libc::F_WRLCK).unwrap_or(false)
        && range_lock(fd.0, INIT, libc::F_WRLCK).unwrap_or(false);
    if !free || !still_at(fd.0, &cpath) {
        return Ok(false);
    }
    // SAFETY: `cpath` is a C string; the file is ours and unused, and the
    // INIT lock keeps an opener from adopting it until it is gone (openers
    // check, under that lock, that their file is still at its path).
    Ok(unsafe { libc::unlink(cpath.as_ptr()) } == 0)
}
