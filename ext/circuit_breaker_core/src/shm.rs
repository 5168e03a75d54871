//! A [`Record`] in a memory-mapped file, shared by every process of a host
//! that opens the same key, behind a robust process-shared mutex.
//!
//! The file's name holds a hash of everything its bytes depend on: the
//! namespace and name, the configuration, the window and the layout of
//! every struct stored in it ([`layout_hash`]). Two processes whose options
//! or gem builds differ therefore never open the same file, so a rolling
//! deploy never meets a file it cannot use (docs/shared.md).
//!
//! File layout: a [`Header`] (magic, layout version and hash, sizes, the
//! configuration hash, the mutex, the published words), then the record's
//! block. Two open-file-description locks on the file's first bytes
//! coordinate the processes: `INIT` (exclusive) while one process creates,
//! validates or removes the file, `IN_USE` (shared) for as long as a
//! process maps it, so that [`remove_unused`] deletes only files no live
//! process maps. Opening waits for them at most [`OPEN_WAIT`]. The space is reserved with `posix_fallocate` before any
//! page is touched: a full file system is an error at construction, never
//! a SIGBUS later.
//!
//! The mutex is taken through a [`Guard`] that unlocks when dropped (also
//! on a panic). A holder that died is recovered (`EOWNERDEAD`: the window's
//! running totals are recounted); a holder that is stuck (stopped, frozen,
//! paused in a debugger) is waited for only up to a bound the caller
//! chooses ([`MappedRecord::lock_within`]); any other lock error is
//! returned, never ignored.
//!
//! The file half needs robust process-shared mutexes, open-file-description
//! locks and `posix_fallocate`: it is built on Linux only. Elsewhere, and
//! with the `portable` feature, [`SUPPORTED`] is false, the keys and hashes
//! are built as everywhere, and [`MappedRecord::open`] refuses with
//! [`ShmError::Unsupported`] (a record that cannot exist is never used;
//! docs/install.md says why this is an error, not a quiet fallback).

use std::io;
use std::mem::{align_of, size_of};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use crate::clock::Nanos;
use crate::hashing::Fnv;
use crate::record::Record;
use crate::store::{Published, Store};
use crate::window::WindowSpec;
#[cfg(all(target_os = "linux", not(feature = "portable")))]
use {crate::record::Layout, std::ffi::CString, std::mem::MaybeUninit, std::ptr, std::sync::atomic::Ordering};

/// Whether this build maps shared records (Linux, without the `portable`
/// feature; see the module doc).
pub const SUPPORTED: bool = cfg!(all(target_os = "linux", not(feature = "portable")));

#[cfg(all(target_os = "linux", not(feature = "portable")))]
const MAGIC: [u8; 8] = *b"CBREAKR\0";
/// Bumped whenever the meaning of the file's bytes changes in a way the
/// structural [`layout_hash`] cannot see. Files of version 4 and later take
/// the `IN_USE` lock, which lets [`remove_unused`] tell when they are free.
pub const LAYOUT_VERSION: u32 = 4;
#[cfg(all(target_os = "linux", not(feature = "portable")))]
const READY: u32 = 0x5245_4144;
/// Byte ranges locked by open-file-description locks (see the module doc).
#[cfg(all(target_os = "linux", not(feature = "portable")))]
const INIT: i64 = 0;
#[cfg(all(target_os = "linux", not(feature = "portable")))]
const IN_USE: i64 = 1;
/// The longest file name most file systems take (NAME_MAX).
pub const NAME_MAX: usize = 255;
/// What every file of this user starts with.
fn file_prefix() -> String {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    format!("circuit_breaker-{uid}-")
}

#[repr(C)]
struct Header {
    magic: [u8; 8],
    version: u32,
    ready: u32,
    header_size: u64,
    record_size: u64,
    config_hash: u64,
    layout_hash: u64,
    mutex: libc::pthread_mutex_t,
    /// Stored under the mutex, read without it (host-wide).
    published: Published,
}

/// Why a shared record could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// The file exists but is not one this build can use, or the name
    /// cannot be a file name.
    #[error("{0}")]
    Mismatch(String),
    /// The operating system refused (permissions, space, …).
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    /// This build has no shared records (see the module doc); the message
    /// names `shared:` and the platform.
    #[error("{0}")]
    Unsupported(String),
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
fn os_error(context: impl Into<String>) -> ShmError {
    ShmError::Io { context: context.into(), source: io::Error::last_os_error() }
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
fn header_size() -> usize {
    size_of::<Header>().div_ceil(64) * 64
}

/// A hash of the layout of every struct stored in a shared file, the
/// file's version and the crate's version: part of every file's key and
/// header, so two builds never read each other's bytes.
pub fn layout_hash() -> u64 {
    let h = Fnv::default().i64(LAYOUT_VERSION.into()).text(env!("CARGO_PKG_VERSION").as_bytes());
    let h = crate::hash_layout!(
        h,
        Header { magic, version, ready, header_size, record_size, config_hash, layout_hash, mutex, published }
    );
    let h = Published::layout(h);
    let h = h.usize(size_of::<libc::pthread_mutex_t>()).usize(align_of::<libc::pthread_mutex_t>());
    Record::layout(h).finish()
}

/// Where shared files live: `$CIRCUIT_BREAKER_SHM_DIR`, else `/dev/shm`
/// (memory, gone at reboot), else the temporary directory.
pub fn shm_dir() -> PathBuf {
    match std::env::var_os("CIRCUIT_BREAKER_SHM_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        _ => std::env::temp_dir(),
    }
}

fn escape(bytes: &[u8], into: &mut String) {
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"_.-".contains(&b) {
            into.push(b as char);
        } else {
            into.push_str(&format!("%{b:02X}"));
        }
    }
}

/// What names one shared breaker: its namespace and name (UTF-8 bytes,
/// compared as such), and the hash of its configuration and window.
#[derive(Debug, Clone, Copy)]
pub struct Key<'a> {
    pub namespace: &'a [u8],
    pub name: &'a [u8],
    pub config_hash: u64,
    pub spec: &'a WindowSpec,
}

impl Key<'_> {
    /// The hash of everything the file's bytes depend on.
    fn hash(&self) -> u64 {
        self.spec
            .hash(Fnv::from_hash(self.config_hash))
            .text(self.namespace)
            .text(self.name)
            .i64(layout_hash() as i64)
            .finish()
    }

    /// The file in [`shm_dir`]: `circuit_breaker-<uid>-<namespace>-<name>-<hash>`,
    /// with bytes other than `[A-Za-z0-9_.-]` escaped as `%XX`. A name
    /// longer than a file name may be is an error naming the option.
    pub fn path(&self) -> Result<PathBuf, ShmError> {
        let mut file = file_prefix();
        if !self.namespace.is_empty() {
            escape(self.namespace, &mut file);
            file.push('-');
        }
        escape(self.name, &mut file);
        file.push_str(&format!("-{:016x}", self.hash()));
        if file.len() > NAME_MAX {
            return Err(ShmError::Mismatch(format!(
                "shared: name too long: its file name would be {} bytes (with namespace and escapes; at most {NAME_MAX}); \
                 use a shorter shared: name or namespace:",
                file.len()
            )));
        }
        Ok(shm_dir().join(file))
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
/// How long opening a file waits for another process's `INIT` or cleanup
/// step: they take microseconds, so this long means that process is
/// stopped; opening then fails (`ETIMEDOUT`) instead of hanging boot.
const OPEN_WAIT: Nanos = 10_000_000_000;

#[cfg(all(target_os = "linux", not(feature = "portable")))]
/// Locks (`F_OFD_SETLK`) or unlocks one byte of the file, without waiting.
fn range_lock(fd: i32, byte: i64, kind: i32) -> io::Result<bool> {
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

#[cfg(all(target_os = "linux", not(feature = "portable")))]
/// Locks one byte of the file, retrying for up to `wait` nanoseconds:
/// `ETIMEDOUT` when another process keeps it that long.
fn range_lock_within(fd: i32, byte: i64, kind: i32, wait: Nanos) -> io::Result<()> {
    let deadline = monotonic().saturating_add(wait);
    while !range_lock(fd, byte, kind)? {
        if monotonic() >= deadline {
            return Err(io::Error::from_raw_os_error(libc::ETIMEDOUT));
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Ok(())
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
fn fstat(fd: i32) -> io::Result<libc::stat> {
    let mut st = MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `fd` is open; fstat fills `st` when it returns 0.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: initialised by fstat.
    Ok(unsafe { st.assume_init() })
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
/// Whether `fd` is still the file at `path` (not removed or replaced).
fn still_at(fd: i32, path: &CString) -> bool {
    let mut st = MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `path` is a C string; lstat fills `st` when it returns 0.
    if unsafe { libc::lstat(path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: initialised by lstat.
    let at_path = unsafe { st.assume_init() };
    fstat(fd).is_ok_and(|own| own.st_ino == at_path.st_ino && own.st_dev == at_path.st_dev && own.st_nlink > 0)
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
fn c_path(path: &Path) -> Result<CString, ShmError> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| ShmError::Mismatch(format!("{}: a path may not contain NUL", path.display())))
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
/// An open descriptor, closed when dropped (which also drops its locks).
struct Fd(i32);

#[cfg(all(target_os = "linux", not(feature = "portable")))]
impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: closes the descriptor this value owns, once.
        unsafe { libc::close(self.0) };
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
/// A shared record, mapped into this process.
pub struct MappedRecord {
    base: *mut u8,
    len: usize,
    /// Holds the `IN_USE` lock for as long as the mapping lives.
    _fd: Fd,
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
// SAFETY: the mapping is process-wide memory; every access to the record
// goes through the process-shared mutex in its header, and the header's
// other shared fields are atomics.
unsafe impl Send for MappedRecord {}
#[cfg(all(target_os = "linux", not(feature = "portable")))]
// SAFETY: as for Send.
unsafe impl Sync for MappedRecord {}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
impl MappedRecord {
    /// Opens (creating when missing, mode 0600) the shared record of `key`
    /// at `path` (see [`Key::path`]); removes files of this user that no
    /// live process maps any more.
    pub fn open(key: &Key, path: &Path, seed: u64) -> Result<Self, ShmError> {
        let layout = Layout::of(key.spec).map_err(|e| ShmError::Mismatch(e.to_string()))?;
        let hsize = header_size();
        let len = hsize + layout.size;
        let shown = path.display().to_string();
        let cpath = c_path(path)?;
        if let Some(dir) = path.parent() {
            remove_unused(dir, path);
        }
        loop {
            // O_NOFOLLOW: a link planted at the path by someone else is refused.
            let flags = libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW;
            // SAFETY: `cpath` is a C string.
            let fd = unsafe { libc::open(cpath.as_ptr(), flags, 0o600) };
            if fd < 0 {
                return Err(os_error(format!("cannot open {shown}")));
            }
            let fd = Fd(fd);
            range_lock_within(fd.0, INIT, libc::F_WRLCK, OPEN_WAIT)
                .map_err(|e| ShmError::Io { context: format!("cannot lock {shown}"), source: e })?;
            if !still_at(fd.0, &cpath) {
                // Removed by `remove_unused` of another process between our
                // open and our lock: open the path again.
                continue;
            }
            let this = Self::map(fd, &shown, len, hsize, &layout, key, seed)?;
            range_lock_within(this._fd.0, IN_USE, libc::F_RDLCK, OPEN_WAIT)
                .map_err(|e| ShmError::Io { context: format!("cannot lock {shown}"), source: e })?;
            range_lock(this._fd.0, INIT, libc::F_UNLCK)
                .map_err(|e| ShmError::Io { context: format!("cannot unlock {shown}"), source: e })?;
            return Ok(this);
        }
    }

    /// Sizes (reserving the space), maps, and validates or builds the file
    /// open at `fd`, whose `INIT` lock the caller holds.
    fn map(
        fd: Fd,
        shown: &str,
        len: usize,
        hsize: usize,
        layout: &Layout,
        key: &Key,
        seed: u64,
    ) -> Result<Self, ShmError> {
        let st = fstat(fd.0).map_err(|e| ShmError::Io { context: format!("cannot stat {shown}"), source: e })?;
        // Only a private regular file of ours: another user's file (in a
        // world-writable directory such as /dev/shm) could be read,
        // changed or truncated under us.
        // SAFETY: geteuid cannot fail.
        let euid = unsafe { libc::geteuid() };
        if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_uid != euid || st.st_mode & 0o077 != 0 {
            return Err(ShmError::Mismatch(format!(
                "{shown} must be a regular file owned by this user and private to it (mode 0600); \
                 delete it, or choose another shared: name"
            )));
        }
        let existing = usize::try_from(st.st_size).unwrap_or(usize::MAX);
        let half_built = existing == 0 || Self::magic_is_zero(fd.0);
        if !half_built && existing != len {
            return Err(ShmError::Mismatch(format!(
                "{shown} is not a circuit_breaker file of this build ({existing} bytes, expected {len}); \
                 delete it, or choose another shared: name"
            )));
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
        // SAFETY: maps `len` bytes of a file that now has at least `len`
        // bytes, all allocated.
        let base =
            unsafe { libc::mmap(ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.0, 0) };
        if base == libc::MAP_FAILED {
            return Err(os_error(format!("cannot map {shown}")));
        }
        let this = Self { base: base as *mut u8, len, _fd: fd };
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
            return Err(ShmError::Mismatch(format!(
                "{shown} is not a circuit_breaker file of layout version {LAYOUT_VERSION} made by this build for these options; \
                 delete it, or choose another shared: name"
            )));
        }
        Ok(this)
    }

    /// Whether the file's first 8 bytes are zero (or missing): the header
    /// of a file whose creator died before writing it.
    fn magic_is_zero(fd: i32) -> bool {
        let mut magic = [0u8; 8];
        // SAFETY: reads at most 8 bytes into `magic`.
        let n = unsafe { libc::pread(fd, magic.as_mut_ptr() as *mut libc::c_void, magic.len(), 0) };
        n >= 0 && magic[..n as usize].iter().all(|&b| b == 0)
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
        unsafe { Record::init(self.base.add(hsize), layout, spec, seed) }
            .map_err(|e| ShmError::Mismatch(e.to_string()))?;
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

    fn mutex(&self) -> *mut libc::pthread_mutex_t {
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

#[cfg(all(target_os = "linux", not(feature = "portable")))]
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
            // timedlock measures against CLOCK_REALTIME; each slice is short,
            // so a clock step shortens or stretches only one slice.
            let until = realtime().saturating_add(left.min(SLICE));
            let ts = libc::timespec { tv_sec: until / 1_000_000_000, tv_nsec: until % 1_000_000_000 };
            // SAFETY: the mutex was initialised when the file was built.
            let rc = unsafe { libc::pthread_mutex_timedlock(self.mutex(), &ts) };
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

#[cfg(all(target_os = "linux", not(feature = "portable")))]
impl Drop for MappedRecord {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`; the descriptor
        // (and its IN_USE lock) goes after.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
/// The shared lock, held: unlocks when dropped, on every path out
/// (returns, `?`, panics).
pub struct Guard<'a> {
    mapped: &'a MappedRecord,
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
impl std::ops::Deref for Guard<'_> {
    type Target = Record;
    #[inline]
    fn deref(&self) -> &Record {
        // SAFETY: the header was validated at open; the record follows it,
        // and this guard holds the mutex that serialises every access.
        unsafe { &*(self.mapped.base.add(header_size()) as *const Record) }
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
impl std::ops::DerefMut for Guard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Record {
        // SAFETY: as for `deref`.
        unsafe { &mut *(self.mapped.base.add(header_size()) as *mut Record) }
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
impl Drop for Guard<'_> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: this guard exists only while this thread holds the mutex.
        unsafe { libc::pthread_mutex_unlock(self.mapped.mutex()) };
    }
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
fn clock_ns(clock: libc::clockid_t) -> Nanos {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes `ts`; both clocks always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as Nanos).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as Nanos)
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
fn monotonic() -> Nanos {
    clock_ns(libc::CLOCK_MONOTONIC)
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
fn realtime() -> Nanos {
    clock_ns(libc::CLOCK_REALTIME)
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
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

#[cfg(all(target_os = "linux", not(feature = "portable")))]
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
    let ours = version_at_least_4(fd.0) || st.st_size == 0 || MappedRecord::magic_is_zero(fd.0);
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

#[cfg(all(target_os = "linux", not(feature = "portable")))]
/// Whether the file holds a header of version 4 or later (which take the
/// `IN_USE` lock).
fn version_at_least_4(fd: i32) -> bool {
    let mut head = [0u8; 12];
    // SAFETY: reads at most 12 bytes into `head`.
    let n = unsafe { libc::pread(fd, head.as_mut_ptr() as *mut libc::c_void, head.len(), 0) };
    n == 12 && head[..8] == MAGIC && u32::from_ne_bytes([head[8], head[9], head[10], head[11]]) >= 4
}

/// Without shared records no mapped record can exist (see the module doc):
/// [`MappedRecord::open`] refuses, and the other methods, which need a
/// value, are never reached.
#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
pub enum MappedRecord {}

#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
impl MappedRecord {
    /// Refuses: this build has no shared records.
    pub fn open(_key: &Key, _path: &Path, _seed: u64) -> Result<Self, ShmError> {
        let platform = if cfg!(feature = "portable") {
            "by this build (CIRCUIT_BREAKER_PORTABLE=1: the code paths of systems other than Linux)".to_owned()
        } else {
            format!("on {}", std::env::consts::OS)
        };
        Err(ShmError::Unsupported(format!(
            "shared: is not supported {platform}: it needs robust process-shared mutexes (a process that dies \
             holding the lock must not wedge the others), which only Linux has; breakers of one process work \
             (docs/install.md)"
        )))
    }

    pub fn hold_lock_for_test(&self, _ms: u64) -> io::Result<()> {
        match *self {}
    }
}

#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
impl Store for MappedRecord {
    type Guard<'a> = Guard<'a>;

    fn try_lock(&self) -> io::Result<Option<Guard<'_>>> {
        match *self {}
    }

    fn lock_within(&self, _wait: Nanos, _stop: &AtomicBool) -> io::Result<Option<Guard<'_>>> {
        match *self {}
    }

    fn published(&self) -> &Published {
        match *self {}
    }
}

/// Never held without shared records (see [`MappedRecord`]).
#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
pub struct Guard<'a> {
    mapped: &'a MappedRecord,
}

#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
impl std::ops::Deref for Guard<'_> {
    type Target = Record;
    fn deref(&self) -> &Record {
        match *self.mapped {}
    }
}

#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
impl std::ops::DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut Record {
        match *self.mapped {}
    }
}

#[cfg(all(test, not(all(target_os = "linux", not(feature = "portable")))))]
mod unsupported_tests {
    use super::*;

    #[test]
    fn opening_a_shared_record_is_refused_naming_the_option_and_the_platform() {
        let spec = WindowSpec::Count { size: 10, slow_threshold_ms: 800.0 };
        let key = Key { namespace: b"app", name: b"payments", config_hash: 1, spec: &spec };
        let path = key.path().expect("a short name has a path");
        match MappedRecord::open(&key, &path, 0) {
            Err(ShmError::Unsupported(m)) => {
                assert!(m.starts_with("shared: is not supported "), "{m}");
                assert!(m.contains("docs/install.md"), "{m}");
            }
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("opened without shared records"),
        }
        assert!(!path.exists(), "nothing is created");
    }
}

#[cfg(all(test, target_os = "linux", not(feature = "portable")))]
mod tests {
    use super::*;
    use crate::config::{Config, Options};
    use crate::state::{Decision, Outcome, State};

    const SPEC: WindowSpec = WindowSpec::Count { size: 10, slow_threshold_ms: 800.0 };

    /// A directory of this test only, removed when the test ends.
    struct TestDir(PathBuf);

    impl std::ops::Deref for TestDir {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TestDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir(name: &str) -> TestDir {
        let d = std::env::temp_dir().join(format!("cb-shm-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TestDir(d)
    }

    fn key<'a>(name: &'a str, config_hash: u64, spec: &'a WindowSpec) -> Key<'a> {
        Key { namespace: b"test", name: name.as_bytes(), config_hash, spec }
    }

    fn open_in(dir: &Path, k: &Key) -> Result<MappedRecord, ShmError> {
        let file = k.path().unwrap().file_name().unwrap().to_owned();
        MappedRecord::open(k, &dir.join(file), 1)
    }

    fn with<T>(m: &MappedRecord, f: impl FnOnce(&mut Record) -> T) -> T {
        let mut g = m.try_lock().unwrap().expect("free");
        f(&mut g)
    }

    #[test]
    fn two_mappings_of_one_file_share_one_breaker() {
        let d = dir("share");
        let a = open_in(&d, &key("p", 7, &SPEC)).unwrap();
        let b = open_in(&d, &key("p", 7, &SPEC)).unwrap();
        let cfg = Config::new(&Options { min_calls: 2, ..Options::default() }).unwrap();
        for m in [&a, &b] {
            with(m, |r| {
                let (d, _) = r.breaker.acquire(&mut r.window, &cfg, 0);
                let Decision::Allowed(p) = d else { panic!("closed") };
                r.breaker.complete(&mut r.window, &cfg, p, Outcome::Failure { duration_ns: 1.0e6 }, 0)
            });
        }
        assert_eq!(with(&b, |r| r.breaker.state()), State::Open);
    }

    #[test]
    fn keys_differ_by_namespace_name_configuration_and_window() {
        let base = key("p", 7, &SPEC).path().unwrap();
        let other = WindowSpec::Count { size: 11, slow_threshold_ms: 800.0 };
        let others = [
            Key { namespace: b"other", ..key("p", 7, &SPEC) },
            key("q", 7, &SPEC),
            key("p", 8, &SPEC),
            key("p", 7, &other),
            // The separator cannot make two pairs one: "a-b"+"c" vs "a"+"b-c".
            Key { namespace: b"test-p", name: b"", ..key("p", 7, &SPEC) },
        ];
        for k in others {
            assert_ne!(k.path().unwrap(), base, "{k:?}");
        }
        assert_eq!(key("p", 7, &SPEC).path().unwrap(), base);
    }

    #[test]
    fn a_name_too_long_for_a_file_name_is_refused_by_name() {
        let long = "x".repeat(NAME_MAX);
        let Err(ShmError::Mismatch(m)) = key(&long, 7, &SPEC).path() else { panic!("accepted") };
        assert!(m.starts_with("shared: name too long"), "{m}");
        assert!(key(&"x".repeat(150), 7, &SPEC).path().is_ok());
    }

    #[test]
    fn a_foreign_file_is_refused() {
        let d = dir("foreign");
        let k = key("p", 7, &SPEC);
        let p = d.join(k.path().unwrap().file_name().unwrap());
        let len = header_size() + Layout::of(&SPEC).unwrap().size;
        let mut junk = vec![0xABu8; len];
        junk[12..16].copy_from_slice(&READY.to_le_bytes()); // looks ready, wrong magic
        std::fs::write(&p, &junk).unwrap();
        assert!(matches!(MappedRecord::open(&k, &p, 1), Err(ShmError::Mismatch(_))));
        std::fs::write(&p, b"short").unwrap();
        assert!(matches!(MappedRecord::open(&k, &p, 1), Err(ShmError::Mismatch(_))));
    }

    #[test]
    fn a_zero_header_left_by_a_dead_creator_is_rebuilt() {
        let d = dir("zero");
        let k = key("p", 7, &SPEC);
        let p = d.join(k.path().unwrap().file_name().unwrap());
        for size in [8, 100, header_size() + Layout::of(&SPEC).unwrap().size] {
            std::fs::write(&p, vec![0u8; size]).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            let m = MappedRecord::open(&k, &p, 1).unwrap();
            assert_eq!(with(&m, |r| r.breaker.state()), State::Closed);
        }
    }

    #[test]
    fn a_link_or_a_file_open_to_others_is_refused() {
        let d = dir("link");
        let k = key("p", 7, &SPEC);
        let p = d.join(k.path().unwrap().file_name().unwrap());
        std::os::unix::fs::symlink("/tmp/cb-link-target-never-created", &p).unwrap();
        assert!(MappedRecord::open(&k, &p, 1).is_err());
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, b"").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(MappedRecord::open(&k, &p, 1), Err(ShmError::Mismatch(_))));
    }

    #[test]
    fn an_unwritable_place_is_an_io_error() {
        let k = key("p", 7, &SPEC);
        assert!(matches!(
            MappedRecord::open(&k, Path::new("/proc/cb-cannot-create-here"), 1),
            Err(ShmError::Io { .. })
        ));
    }

    #[test]
    fn paths_escape_what_a_file_name_cannot_hold() {
        let k = Key { namespace: b"app 1", ..key("pay/ments \u{fc}", 7, &SPEC) };
        let p = k.path().unwrap();
        let name = p.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(name.starts_with(&format!("{}app%201-pay%2Fments%20%C3%BC-", file_prefix())), "{name}");
    }

    #[test]
    fn the_layout_hash_is_stable_within_a_build() {
        assert_eq!(layout_hash(), layout_hash());
        assert_ne!(layout_hash(), 0);
    }

    #[test]
    fn files_nobody_maps_are_removed_and_mapped_ones_kept() {
        let d = dir("cleanup");
        let kept = open_in(&d, &key("kept", 7, &SPEC)).unwrap();
        let gone = open_in(&d, &key("gone", 7, &SPEC)).unwrap();
        drop(gone);
        let foreign = d.join(format!("{}foreign", file_prefix()));
        std::fs::write(&foreign, b"not ours, not empty").unwrap();
        let other_prefix = d.join("unrelated");
        std::fs::write(&other_prefix, b"").unwrap();
        let _third = open_in(&d, &key("third", 7, &SPEC)).unwrap();
        let names: Vec<String> =
            std::fs::read_dir(&*d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert!(names.iter().any(|n| n.contains("-kept-")), "{names:?}");
        assert!(names.iter().any(|n| n.contains("-third-")), "{names:?}");
        assert!(!names.iter().any(|n| n.contains("-gone-")), "{names:?}");
        assert!(foreign.exists() && other_prefix.exists());
        drop(kept);
    }

    #[test]
    fn a_full_file_system_is_an_error_not_a_bus_error() {
        // Runs only where a tiny tmpfs can be mounted (root); the RSpec suite
        // covers the same through Ruby.
        let d = dir("tiny");
        let c = c_path(&d).unwrap();
        let (fs, opts) = (CString::new("tmpfs").unwrap(), CString::new("size=64k").unwrap());
        // SAFETY: plain mount(2) with C strings.
        if unsafe { libc::mount(fs.as_ptr(), c.as_ptr(), fs.as_ptr(), 0, opts.as_ptr() as *const libc::c_void) } != 0 {
            eprintln!("skipped: cannot mount a tmpfs here ({})", io::Error::last_os_error());
            return;
        }
        let big = WindowSpec::Count { size: 1_000_000, slow_threshold_ms: 800.0 };
        let result = open_in(&d, &key("big", 7, &big));
        // SAFETY: unmounts what this test mounted.
        unsafe { libc::umount(c.as_ptr()) };
        match result {
            Err(ShmError::Io { source, .. }) => assert_eq!(source.raw_os_error(), Some(libc::ENOSPC)),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a 1 MB record fitted in 64 KiB"),
        }
    }

    #[test]
    fn without_the_lock_closed_admits_open_rejects_and_half_open_refuses() {
        let word = |state: State, generation: u64| (generation << 3) | state as u64;
        let sec = 1_000_000_000;
        let allowed = Decision::unlocked(word(State::Closed, 5), 0, 0);
        assert!(matches!(allowed, Decision::Allowed(p) if p.generation == 5 && !p.probe));
        assert!(matches!(Decision::unlocked(word(State::Disabled, 1), 0, 0), Decision::Allowed(_)));
        let rejected = |w, at, now| match Decision::unlocked(w, at, now) {
            Decision::Rejected(r) => (r.state, r.retry_after),
            Decision::Allowed(_) => panic!("admitted"),
        };
        assert_eq!(rejected(word(State::Open, 2), 30 * sec, 10 * sec), (State::Open, Some(20 * sec)));
        assert_eq!(rejected(word(State::Open, 2), 30 * sec, 40 * sec), (State::Open, Some(0)));
        assert_eq!(rejected(word(State::HalfOpen, 3), 0, 0), (State::HalfOpen, Some(0)));
        assert_eq!(rejected(word(State::ForcedOpen, 4), 0, 0), (State::ForcedOpen, None));
        assert_eq!(State::published(word(State::HalfOpen, 9)), State::HalfOpen);
    }

    #[test]
    fn a_file_lock_kept_by_a_stuck_process_is_waited_for_only_up_to_a_bound() {
        let d = dir("init-bound");
        let m = open_in(&d, &key("p", 7, &SPEC)).unwrap();
        let p = key("p", 7, &SPEC).path().unwrap();
        let p = d.join(p.file_name().unwrap());
        let other = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
        use std::os::fd::AsRawFd;
        // Another open file description (as another process has) takes INIT.
        assert!(range_lock(other.as_raw_fd(), INIT, libc::F_WRLCK).unwrap());
        let own = std::fs::OpenOptions::new().read(true).write(true).open(&p).unwrap();
        let err = range_lock_within(own.as_raw_fd(), INIT, libc::F_WRLCK, 20_000_000).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ETIMEDOUT));
        drop(other);
        range_lock_within(own.as_raw_fd(), INIT, libc::F_WRLCK, 20_000_000).unwrap();
        drop(m);
    }

    #[test]
    fn the_guard_unlocks_on_a_panic() {
        let d = dir("panic");
        let m = open_in(&d, &key("p", 7, &SPEC)).unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with(&m, |_| panic!("mid-step"));
        }));
        assert!(caught.is_err());
        assert!(m.try_lock().unwrap().is_some(), "still locked after the panic");
    }

    #[test]
    fn a_busy_lock_is_waited_for_only_up_to_the_bound_or_the_stop_flag() {
        let d = dir("bound");
        let m = open_in(&d, &key("p", 7, &SPEC)).unwrap();
        let never = AtomicBool::new(false);
        let held = m.try_lock().unwrap().expect("free");
        std::thread::scope(|s| {
            // Another thread: a robust mutex is owned by one thread.
            s.spawn(|| {
                assert!(m.try_lock().unwrap().is_none());
                assert!(m.lock_within(20_000_000, &never).unwrap().is_none());
                let stop = AtomicBool::new(true);
                assert!(m.lock_within(Nanos::MAX, &stop).unwrap().is_none());
            })
            .join()
            .unwrap();
        });
        drop(held);
        assert!(m.lock_within(0, &never).unwrap().is_some());
    }

    #[test]
    fn a_holder_that_dies_does_not_wedge_the_others() {
        let d = dir("robust");
        let m = open_in(&d, &key("p", 7, &SPEC)).unwrap();
        // SAFETY: the child only locks (through the mapping) and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // Locks and dies holding the lock.
            // SAFETY: the mutex is initialised; _exit ends the child at once.
            unsafe {
                libc::pthread_mutex_lock(m.mutex());
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        with(&m, |r| r.window.record(1.0e6, false, 0));
        assert_eq!(with(&m, |r| r.window.counts(0).total), 1);
    }
}
