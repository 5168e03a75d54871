//! Linux: the system calls the mapped record and the cleanup share
//! (open-file-description range locks, `fstat`, descriptors, the kernel's
//! monotonic clock).

use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::ShmError;
use crate::clock::Nanos;

mod cleanup;
mod doorbell;
mod file;
mod format;
mod private_dir;
#[cfg(test)]
#[path = "linux_tests.rs"]
mod tests;

pub use cleanup::{remove_unused, sweep};
pub use doorbell::Doorbell;
pub use file::{Guard, MappedRecord};

pub(super) fn os_error(context: impl Into<String>) -> ShmError {
    ShmError::Io { context: context.into(), source: io::Error::last_os_error() }
}

/// Locks (`F_OFD_SETLK`) or unlocks one byte of the file, without waiting.
pub(super) fn range_lock(fd: i32, byte: i64, kind: i32) -> io::Result<bool> {
    // SAFETY: a zeroed flock is a valid value; fcntl only reads it.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = kind as libc::c_short;
    lock.l_whence = libc::SEEK_SET as libc::c_short;
    lock.l_start = byte;
    lock.l_len = 1;
    loop {
        // SAFETY: `fd` is open; `lock` is a valid flock.
        if unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &lock) } == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN | libc::EACCES) => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Locks one byte of the file, retrying for up to `wait` nanoseconds of
/// the monotonic clock: `ETIMEDOUT` when another process keeps it that
/// long, `Interrupted` as soon as `stop` is set (by another thread).
pub(super) fn range_lock_within(fd: i32, byte: i64, kind: i32, wait: Nanos, stop: &AtomicBool) -> io::Result<()> {
    let deadline = monotonic().saturating_add(wait);
    while !range_lock(fd, byte, kind)? {
        if stop.load(Ordering::Acquire) {
            return Err(io::ErrorKind::Interrupted.into());
        }
        if monotonic() >= deadline {
            return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Ok(())
}

pub(super) fn fstat(fd: i32) -> io::Result<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `fd` is open; fstat fills `st` when it returns 0.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: initialised by fstat.
    Ok(unsafe { st.assume_init() })
}

/// Whether `fd` is still the file at `path` (not removed or replaced).
pub(super) fn still_at(fd: i32, path: &CString) -> bool {
    let mut st = MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `path` is a C string; lstat fills `st` when it returns 0.
    if unsafe { libc::lstat(path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: initialised by lstat.
    let at_path = unsafe { st.assume_init() };
    fstat(fd).is_ok_and(|own| own.st_ino == at_path.st_ino && own.st_dev == at_path.st_dev && own.st_nlink > 0)
}

pub(super) fn c_path(path: &Path) -> Result<CString, ShmError> {
    CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| ShmError::NulInPath(path.to_owned()))
}

/// An open descriptor, closed when dropped (which also drops its locks).
pub(super) struct Fd(pub(super) i32);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this value owns, once.
        unsafe { libc::close(self.0) };
    }
}

/// The kernel's monotonic clock, which bounds every wait here and is the
/// clock of `pthread_mutex_clocklock`'s deadlines. Read with the system
/// call itself rather than libc's `clock_gettime`: a library preloaded to
/// fake time (libfaketime fakes `CLOCK_MONOTONIC` too) would otherwise
/// hand the kernel a deadline a day away, and a bounded wait would last as
/// long as the holder (docs/shared.md, "Waiting for the lock"). Only waits
/// read it, never the call path.
pub(super) fn monotonic() -> Nanos {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime(2) writes `ts`; CLOCK_MONOTONIC always exists.
    unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_MONOTONIC, &mut ts as *mut libc::timespec) };
    (ts.tv_sec as Nanos).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as Nanos)
}

extern "C" {
    /// glibc 2.30 and later: `pthread_mutex_timedlock` on a clock of the
    /// caller's choosing (the libc crate does not declare it yet).
    pub(super) fn pthread_mutex_clocklock(
        mutex: *mut libc::pthread_mutex_t,
        clock: libc::clockid_t,
        abstime: *const libc::timespec,
    ) -> libc::c_int;
}
