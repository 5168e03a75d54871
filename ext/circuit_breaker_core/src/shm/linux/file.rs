//! The mapped record and its lock: a file of one [`Header`] and one
//! [`Record`], mapped by every process that opens the same key, and the
//! robust process-shared mutex in its header, taken through a [`Guard`].

use std::io;
use std::mem::MaybeUninit;
use std::path::Path;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::cleanup::remove_unused_now_and_then;
use super::format::{header_size, magic_is_zero, INIT, IN_USE, MAGIC, READY};
use super::private_dir::ensure_private;
use super::{c_path, fstat, monotonic, os_error, pthread_mutex_clocklock, range_lock, range_lock_within, still_at, Fd};
use crate::clock::Nanos;
use crate::record::{Layout, Record};
use crate::shm::{layout_hash, Header, Key, ShmError, LAYOUT_VERSION};
use crate::slots::Slots;
use crate::store::{Published, Store};
use crate::window::WindowSpec;

/// How long opening a file waits for another process's `INIT` or cleanup
/// step: they take microseconds, so this long means that process is
/// stopped; opening then fails (`ETIMEDOUT`) instead of hanging boot. The
/// wait holds no runtime lock (the binding releases Ruby's GVL around
/// [`MappedRecord::open`]), so the process's other threads run meanwhile.
const OPEN_WAIT: Nanos = 10_000_000_000;

/// A shared record, mapped into this process.
///
/// It keeps no file descriptor: the descriptor it was opened with is
/// closed once the file is mapped. Its `IN_USE` lock (an open file
/// description lock) stays held anyway, because the mapping keeps that
/// open file description alive, and the kernel drops such locks only when
/// the description's last reference goes: the last `munmap` of this
/// mapping, in this process and in every child that inherited it, or their
/// exit or `exec`. So a process holds no descriptor per shared breaker
/// (docs/shared.md, "Costs").
pub struct MappedRecord {
    base: *mut u8,
    len: usize,
    /// This process's entry among the header's slot holders (see
    /// `Slots::shared`).
    holder: AtomicU64,
}

// SAFETY: the mapping is process-wide memory; every access to the record
// goes through the process-shared mutex in its header, and the header's
// other shared fields are atomics.
unsafe impl Send for MappedRecord {}
// SAFETY: as for Send.
unsafe impl Sync for MappedRecord {}

impl MappedRecord {
    /// Opens (creating when missing, mode 0600, in a directory private to
    /// the user, created mode 0700) the shared record of `key` at `path`
    /// (see [`Key::path`]); now and then removes files of this user that
    /// no live process maps any more. Waits for other processes' `INIT`
    /// locks up to [`OPEN_WAIT`], and stops waiting (an `Interrupted` I/O
    /// error) once `stop` is set by another thread. Blocks: call it
    /// without any runtime lock held.
    pub fn open(key: &Key, path: &Path, seed: u64, stop: &AtomicBool) -> Result<Self, ShmError> {
        let layout = Layout::of(key.spec)?;
        let hsize = header_size();
        let len = hsize + layout.size;
        let shown = path.display().to_string();
        let cpath = c_path(path)?;
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        ensure_private(dir)?;
        remove_unused_now_and_then(dir, path);
        let lock_error = |e| ShmError::Io { context: format!("cannot lock {shown}"), source: e };
        loop {
            // O_NOFOLLOW: a link planted at the path by someone else is refused.
            let flags = libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW;
            // SAFETY: `cpath` is a C string.
            let fd = unsafe { libc::open(cpath.as_ptr(), flags, 0o600) };
            if fd < 0 {
                let e = io::Error::last_os_error();
                // ELOOP is O_NOFOLLOW's answer for a link at the path (the
                // directory above is private and no link, ensure_private):
                // refused like any file that is not a private regular one.
                if e.raw_os_error() == Some(libc::ELOOP) {
                    return Err(ShmError::NotPrivate(path.to_owned()));
                }
                return Err(ShmError::Io { context: format!("cannot open {shown}"), source: e });
            }
            let fd = Fd(fd);
            range_lock_within(fd.0, INIT, libc::F_WRLCK, OPEN_WAIT, stop).map_err(lock_error)?;
            if !still_at(fd.0, &cpath) {
                // Removed by `remove_unused` of another process between our
                // open and our lock: open the path again.
                continue;
            }
            let this = Self::map(&fd, &shown, len, hsize, &layout, key, seed)?;
            range_lock_within(fd.0, IN_USE, libc::F_RDLCK, OPEN_WAIT, stop).map_err(lock_error)?;
            range_lock(fd.0, INIT, libc::F_UNLCK)
                .map_err(|e| ShmError::Io { context: format!("cannot unlock {shown}"), source: e })?;
            // `fd` closes here; the mapping keeps its IN_USE lock (see
            // MappedRecord's doc).
            return Ok(this);
        }
    }

    /// Sizes (reserving the space), maps, and validates or builds the file
    /// open at `fd`, whose `INIT` lock the caller holds.
    fn map(
        fd: &Fd,
        shown: &str,
        len: usize,
        hsize: usize,
        layout: &Layout,
        key: &Key,
        seed: u64,
    ) -> Result<Self, ShmError> {
        let half_built = Self::reserve(fd, shown, len)?;
        // SAFETY: maps `len` bytes of a file that now has at least `len`
        // bytes, all allocated.
        let base =
            unsafe { libc::mmap(ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.0, 0) };
        if base == libc::MAP_FAILED {
            return Err(os_error(format!("cannot map {shown}")));
        }
        let this = Self { base: base as *mut u8, len, holder: AtomicU64::new(0) };
        // SAFETY: the header lies within the mapping; the INIT lock keeps
        // every other process from building or validating it meanwhile.
        let h = unsafe { &*this.header() };
        let config_hash = key.hash();
        if half_built || (h.magic == MAGIC && h.ready != READY) {
            // SAFETY: the caller holds the INIT lock, and no process maps a
            // file that was never ready.
            unsafe { this.initialise(hsize, layout, key.spec, config_hash, seed) }?;
        } else if h.magic != MAGIC
            || h.version != LAYOUT_VERSION
            || h.ready != READY
            || h.layout_hash != layout_hash()
            || h.header_size != hsize as u64
            || h.record_size != layout.size as u64
            || h.config_hash != config_hash
        {
            return Err(ShmError::Foreign(shown.into()));
        }
        Ok(this)
    }

    /// Checks that the file open at `fd` is a private regular file of
    /// this user of `len` bytes, or one its creator left half-built (then
    /// emptied: true), and reserves its `len` bytes.
    fn reserve(fd: &Fd, shown: &str, len: usize) -> Result<bool, ShmError> {
        let st = fstat(fd.0).map_err(|e| ShmError::Io { context: format!("cannot stat {shown}"), source: e })?;
        // Only a private regular file of ours: another user's file (in a
        // world-writable directory such as /dev/shm) could be read,
        // changed or truncated under us.
        // SAFETY: geteuid cannot fail.
        let euid = unsafe { libc::geteuid() };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_uid != euid || st.st_mode & 0o077 != 0 {
            return Err(ShmError::NotPrivate(shown.into()));
        }
        let existing = usize::try_from(st.st_size).unwrap_or(usize::MAX);
        let half_built = existing == 0 || magic_is_zero(fd.0);
        if !half_built && existing != len {
            return Err(ShmError::WrongSize { path: shown.into(), size: existing, expected: len });
        }
        if half_built {
            // A file its creator left before it was ready: start afresh.
            // SAFETY: `fd` is open for writing.
            if unsafe { libc::ftruncate(fd.0, 0) } != 0 {
                return Err(os_error(format!("cannot size {shown}")));
            }
        }
        // Reserve every page now: a file system without room reports it
        // here, instead of a SIGBUS at the first write to a missing page.
        // SAFETY: `fd` is open for writing.
        let rc = unsafe { libc::posix_fallocate(fd.0, 0, len as libc::off_t) };
        if rc != 0 {
            // SAFETY: as above; leaves an empty file, which is rebuilt (or
            // removed once unused) later.
            unsafe { libc::ftruncate(fd.0, 0) };
            return Err(ShmError::Io {
                context: format!("cannot reserve {len} bytes for {shown}"),
                source: io::Error::from_raw_os_error(rc),
            });
        }
        Ok(half_built)
    }

    /// Builds the header and an empty record.
    ///
    /// # Safety
    /// The caller holds the file's INIT lock and nobody uses the mapping.
    unsafe fn initialise(
        &self,
        hsize: usize,
        layout: &Layout,
        spec: &WindowSpec,
        config_hash: u64,
        seed: u64,
    ) -> Result<(), ShmError> {
        // SAFETY: the mapping is `len` bytes, reserved, used by nobody else.
        unsafe { ptr::write_bytes(self.base, 0, self.len) };
        let header = self.header();
        let mut attr = MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
        // SAFETY: initialises an attribute object, then the mutex in the
        // header with it, then destroys the attribute object.
        let rc = unsafe {
            libc::pthread_mutexattr_init(attr.as_mut_ptr());
            libc::pthread_mutexattr_setpshared(attr.as_mut_ptr(), libc::PTHREAD_PROCESS_SHARED);
            libc::pthread_mutexattr_setrobust(attr.as_mut_ptr(), libc::PTHREAD_MUTEX_ROBUST);
            let rc = libc::pthread_mutex_init(ptr::addr_of_mut!((*header).mutex), attr.as_ptr());
            libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
            rc
        };
        if rc != 0 {
            return Err(ShmError::Io {
                context: "cannot create the shared mutex".into(),
                source: io::Error::from_raw_os_error(rc),
            });
        }
        // SAFETY: the block after the header is `layout.size` bytes, 64-aligned.
        unsafe { Record::init(self.base.add(hsize), layout, spec, seed) }?;
        // SAFETY: plain writes to the header, which nobody else reads yet.
        unsafe {
            (*header).magic = MAGIC;
            (*header).version = LAYOUT_VERSION;
            (*header).header_size = hsize as u64;
            (*header).record_size = layout.size as u64;
            (*header).config_hash = config_hash;
            (*header).layout_hash = layout_hash();
            // Written last: a file is valid only once this is set.
            ptr::write_volatile(ptr::addr_of_mut!((*header).ready), READY);
        }
        Ok(())
    }

    fn header(&self) -> *mut Header {
        self.base as *mut Header
    }

    pub(super) fn mutex(&self) -> *mut libc::pthread_mutex_t {
        // SAFETY: the header lies within the mapping.
        unsafe { ptr::addr_of_mut!((*self.header()).mutex) }
    }

    /// The guard of a lock call that returned `rc`: None when the mutex is
    /// busy (or the wait timed out); an error for anything but success or a
    /// recovered dead owner.
    fn locked(&self, rc: i32) -> io::Result<Option<Guard<'_>>> {
        match rc {
            0 => Ok(Some(Guard { mapped: self })),
            libc::EOWNERDEAD => {
                // Its last holder died mid-step: mark the mutex usable, then
                // make the record whole again under the guard.
                // SAFETY: this thread owns the mutex (EOWNERDEAD locks it).
                let rc = unsafe { libc::pthread_mutex_consistent(self.mutex()) };
                let mut guard = Guard { mapped: self };
                if rc != 0 {
                    return Err(io::Error::from_raw_os_error(rc));
                }
                guard.repair();
                Ok(Some(guard))
            }
            libc::EBUSY | libc::ETIMEDOUT => Ok(None),
            rc => Err(io::Error::from_raw_os_error(rc)),
        }
    }

    /// The cap's slots: counted host-wide, with each process's apart.
    pub fn slots(&self) -> Slots<'_> {
        // SAFETY: the header lives as long as the mapping; its slot fields
        // are atomics.
        let header = unsafe { &*self.header() };
        Slots::shared(header.published.in_flight(), &header.holders, &self.holder)
    }

    /// Holds the lock for `ms` milliseconds without doing anything: lets
    /// tests stop or kill a process that holds it. None: it was busy.
    #[doc(hidden)]
    pub fn hold_lock_for_test(&self, ms: u64) -> io::Result<()> {
        let never = AtomicBool::new(false);
        let _guard = self.lock_within(Nanos::MAX, &never)?;
        std::thread::sleep(std::time::Duration::from_millis(ms));
        Ok(())
    }
}

impl Store for MappedRecord {
    type Guard<'a> = Guard<'a>;

    /// Takes the lock if it is free now (a dead owner recovered).
    #[inline]
    fn try_lock(&self) -> io::Result<Option<Guard<'_>>> {
        // SAFETY: the mutex was initialised when the file was built.
        let rc = unsafe { libc::pthread_mutex_trylock(self.mutex()) };
        self.locked(rc)
    }

    /// Waits up to `wait` nanoseconds for the lock, in short slices, and
    /// gives up early once `stop` is set (by another thread: an interrupt
    /// for the waiting one). None: not taken. Blocks: call it without any
    /// runtime lock held (the binding releases Ruby's GVL around it).
    fn lock_within(&self, wait: Nanos, stop: &AtomicBool) -> io::Result<Option<Guard<'_>>> {
        const SLICE: Nanos = 5_000_000;
        let deadline = monotonic().saturating_add(wait.max(0));
        loop {
            if stop.load(Ordering::Acquire) {
                return Ok(None);
            }
            let left = deadline.saturating_sub(monotonic());
            if left <= 0 {
                return self.try_lock();
            }
            // On the monotonic clock (timedlock's CLOCK_REALTIME would
            // stretch the wait when the wall clock is stepped back or
            // faked); in slices, so that `stop` is noticed.
            let until = monotonic().saturating_add(left.min(SLICE));
            let ts = libc::timespec { tv_sec: until / 1_000_000_000, tv_nsec: until % 1_000_000_000 };
            // SAFETY: the mutex was initialised when the file was built.
            let rc = unsafe { pthread_mutex_clocklock(self.mutex(), libc::CLOCK_MONOTONIC, &ts) };
            if rc == libc::ETIMEDOUT {
                continue;
            }
            return self.locked(rc);
        }
    }

    fn published(&self) -> &Published {
        // SAFETY: the header lives as long as the mapping; its fields are
        // atomics.
        unsafe { &(*self.header()).published }
    }
}

impl Drop for MappedRecord {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open` (which drops
        // its IN_USE lock unless a forked child still maps it).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// The shared lock, held: unlocks when dropped, on every path out
/// (returns, `?`, panics).
pub struct Guard<'a> {
    mapped: &'a MappedRecord,
}

impl std::ops::Deref for Guard<'_> {
    type Target = Record;
    #[inline]
    fn deref(&self) -> &Record {
        // SAFETY: the header was validated at open; the record follows it,
        // and this guard holds the mutex that serialises every access.
        unsafe { &*(self.mapped.base.add(header_size()) as *const Record) }
    }
}

impl std::ops::DerefMut for Guard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Record {
        // SAFETY: as for `deref`.
        unsafe { &mut *(self.mapped.base.add(header_size()) as *mut Record) }
    }
}

impl Drop for Guard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this guard exists only while this thread holds the mutex.
        unsafe { libc::pthread_mutex_unlock(self.mapped.mutex()) };
    }
}
