//! A [`Record`] in a memory-mapped file, shared by every process of a host
//! that opens the same path, behind a robust process-shared mutex.
//!
//! File layout: a [`Header`] (magic, layout version, sizes, a hash of the
//! configuration, the mutex), then the record's block. Creation is
//! serialised with `flock`, so the first process initialises the file and
//! the others validate it. A process that dies holding the mutex does not
//! wedge the others: the next locker is told (`EOWNERDEAD`), repairs the
//! record's derived counts and carries on.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, MaybeUninit};
use std::path::Path;
use std::ptr;

use crate::record::{Layout, Record, WindowSpec};

const MAGIC: [u8; 8] = *b"CBREAKR\0";
/// Bumped whenever the file's layout or the record's layout changes.
pub const LAYOUT_VERSION: u32 = 3;
const READY: u32 = 0x5245_4144;

#[repr(C)]
struct Header {
    magic: [u8; 8],
    version: u32,
    ready: u32,
    header_size: u64,
    record_size: u64,
    config_hash: u64,
    mutex: libc::pthread_mutex_t,
    /// `Breaker::published` of the record, stored under the mutex, read
    /// without it.
    published: std::sync::atomic::AtomicU64,
}

/// Why a shared record could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// The file exists with another configuration or layout.
    #[error("{0}")]
    Mismatch(String),
    /// The operating system refused (permissions, space, …).
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
}

fn os_error(context: impl Into<String>) -> ShmError {
    ShmError::Io { context: context.into(), source: io::Error::last_os_error() }
}

fn header_size() -> usize {
    size_of::<Header>().div_ceil(64) * 64
}

/// A shared record, mapped into this process.
pub struct MappedRecord {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is process-wide memory; every access to the record
// goes through the process-shared mutex in its header.
unsafe impl Send for MappedRecord {}
unsafe impl Sync for MappedRecord {}

/// Hashes configuration values (FNV-1a): equal configurations hash the same
/// in every process and build.
#[derive(Debug, Clone, Copy)]
pub struct ConfigHash(u64);

impl Default for ConfigHash {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl ConfigHash {
    /// Adds the bytes of one value.
    pub fn add(mut self, bytes: &[u8]) -> Self {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }

    /// Adds a float by its bits.
    pub fn f64(self, x: f64) -> Self {
        self.add(&x.to_bits().to_le_bytes())
    }

    /// Adds an integer.
    pub fn i64(self, x: i64) -> Self {
        self.add(&x.to_le_bytes())
    }

    /// Adds a window's configuration.
    pub fn spec(self, spec: &WindowSpec) -> Self {
        match *spec {
            WindowSpec::Count { size, slow_threshold_ms } => self.i64(1).i64(size).f64(slow_threshold_ms),
            WindowSpec::Time { seconds, buckets, slow_threshold_ms } => {
                self.i64(2).f64(seconds).i64(buckets).f64(slow_threshold_ms)
            }
        }
    }

    /// The hash.
    pub fn finish(self) -> u64 {
        self.0
    }
}

impl crate::config::Config {
    /// A hash of every option: processes sharing a record must agree on it.
    pub fn fingerprint(&self) -> u64 {
        let mut h = ConfigHash::default()
            .f64(self.error_rate_threshold)
            .f64(self.slow_rate_threshold)
            .i64(self.min_calls.into())
            .i64(self.open_duration)
            .i64(self.half_open_calls.into())
            .i64(self.ramp.len() as i64);
        for &share in &self.ramp {
            h = h.i64(share as i64);
        }
        h.f64(self.advance_rate)
            .f64(self.reopen_rate)
            .i64(self.half_open_timeout.unwrap_or(-1))
            .f64(self.backoff)
            .i64(self.max_open_duration.unwrap_or(-1))
            .f64(self.jitter)
            .finish()
    }
}

/// Where the record shared under `key` lives: `$CIRCUIT_BREAKER_SHM_DIR`,
/// else `/dev/shm` (memory, gone at reboot), else the temporary directory;
/// the file name holds the user id (files are private to their user) and
/// the key, with bytes other than `[A-Za-z0-9_.-]` escaped as `%XX`.
pub fn default_path(key: &[u8]) -> std::path::PathBuf {
    let dir = match std::env::var_os("CIRCUIT_BREAKER_SHM_DIR") {
        Some(d) if !d.is_empty() => std::path::PathBuf::from(d),
        _ if Path::new("/dev/shm").is_dir() => std::path::PathBuf::from("/dev/shm"),
        _ => std::env::temp_dir(),
    };
    let mut name = String::new();
    for &b in key {
        if b.is_ascii_alphanumeric() || b"_.-".contains(&b) {
            name.push(b as char);
        } else {
            name.push_str(&format!("%{b:02X}"));
        }
    }
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    dir.join(format!("circuit_breaker-{uid}-{name}"))
}

impl MappedRecord {
    /// Opens (creating when missing, mode 0600) the shared record at `path`
    /// for a window of `spec`. `config_hash` identifies the rest of the
    /// configuration: a file made with another one is refused.
    pub fn open(path: &Path, spec: &WindowSpec, config_hash: u64, seed: u64) -> Result<Self, ShmError> {
        let layout = Layout::of(spec).map_err(|e| ShmError::Mismatch(e.to_string()))?;
        let config_hash = ConfigHash(config_hash).spec(spec).finish();
        let hsize = header_size();
        let len = hsize + layout.size;
        let shown = path.display().to_string();
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| ShmError::Mismatch(format!("{shown}: a path may not contain NUL")))?;
        // SAFETY: plain system calls on a descriptor this function owns and
        // closes on every path; the mapping is checked before use.
        unsafe {
            // O_NOFOLLOW: a link planted at the path by someone else is refused.
            let flags = libc::O_RDWR | libc::O_CREAT | libc::O_CLOEXEC | libc::O_NOFOLLOW;
            let fd = libc::open(cpath.as_ptr(), flags, 0o600);
            if fd < 0 {
                return Err(os_error(format!("cannot open {shown}")));
            }
            let result = Self::map(fd, &shown, len, hsize, &layout, spec, config_hash, seed);
            libc::close(fd);
            result
        }
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn map(
        fd: i32,
        shown: &str,
        len: usize,
        hsize: usize,
        layout: &Layout,
        spec: &WindowSpec,
        config_hash: u64,
        seed: u64,
    ) -> Result<Self, ShmError> {
        // SAFETY (whole function): `fd` is an open descriptor; the mapping
        // is `len` bytes long once the size check passed.
        unsafe {
            if libc::flock(fd, libc::LOCK_EX) != 0 {
                return Err(os_error(format!("cannot lock {shown}")));
            }
            let mut st = MaybeUninit::<libc::stat>::zeroed();
            if libc::fstat(fd, st.as_mut_ptr()) != 0 {
                return Err(os_error(format!("cannot stat {shown}")));
            }
            let st = st.assume_init();
            // Only a private regular file of ours: another user's file (in a
            // world-writable directory such as /dev/shm) could be read,
            // changed or truncated under us.
            if st.st_mode & libc::S_IFMT != libc::S_IFREG || st.st_uid != libc::geteuid() || st.st_mode & 0o077 != 0 {
                return Err(ShmError::Mismatch(format!(
                    "{shown} must be a regular file owned by this user and private to it (mode 0600)"
                )));
            }
            let existing = st.st_size as usize;
            if existing != 0 && existing != len {
                return Err(ShmError::Mismatch(format!(
                    "{shown} holds a breaker of another layout or window size ({existing} bytes, expected {len})"
                )));
            }
            if existing == 0 && libc::ftruncate(fd, len as libc::off_t) != 0 {
                return Err(os_error(format!("cannot size {shown}")));
            }
            let base = libc::mmap(ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            if base == libc::MAP_FAILED {
                return Err(os_error(format!("cannot map {shown}")));
            }
            let this = Self { base: base as *mut u8, len };
            let header = this.header();
            if existing == 0 || ((*header).magic == MAGIC && (*header).ready != READY) {
                // New, or its creator died while initialising: (re)build it.
                this.initialise(hsize, layout, spec, config_hash, seed)?;
            } else if (*header).magic != MAGIC || (*header).version != LAYOUT_VERSION || (*header).ready != READY {
                return Err(ShmError::Mismatch(format!(
                    "{shown} is not a circuit_breaker file of layout version {LAYOUT_VERSION}"
                )));
            } else if (*header).header_size != hsize as u64 || (*header).record_size != layout.size as u64 {
                return Err(ShmError::Mismatch(format!("{shown} holds a breaker of another layout or window size")));
            } else if (*header).config_hash != config_hash {
                return Err(ShmError::Mismatch(format!(
                    "{shown} holds a breaker with another configuration; every process sharing it must pass the same options"
                )));
            }
            libc::flock(fd, libc::LOCK_UN);
            Ok(this)
        }
    }

    unsafe fn initialise(&self, hsize: usize, layout: &Layout, spec: &WindowSpec, config_hash: u64, seed: u64) -> Result<(), ShmError> {
        // SAFETY: the caller holds the file lock, so nobody else reads or
        // writes the mapping while it is (re)built.
        unsafe {
            ptr::write_bytes(self.base, 0, self.len);
            let header = self.header();
            let mut attr = MaybeUninit::<libc::pthread_mutexattr_t>::uninit();
            libc::pthread_mutexattr_init(attr.as_mut_ptr());
            libc::pthread_mutexattr_setpshared(attr.as_mut_ptr(), libc::PTHREAD_PROCESS_SHARED);
            libc::pthread_mutexattr_setrobust(attr.as_mut_ptr(), libc::PTHREAD_MUTEX_ROBUST);
            let rc = libc::pthread_mutex_init(ptr::addr_of_mut!((*header).mutex), attr.as_ptr());
            libc::pthread_mutexattr_destroy(attr.as_mut_ptr());
            if rc != 0 {
                return Err(ShmError::Io { context: "cannot create the shared mutex".into(), source: io::Error::from_raw_os_error(rc) });
            }
            Record::init(self.base.add(hsize), layout, spec, seed).map_err(|e| ShmError::Mismatch(e.to_string()))?;
            (*header).magic = MAGIC;
            (*header).version = LAYOUT_VERSION;
            (*header).header_size = hsize as u64;
            (*header).record_size = layout.size as u64;
            (*header).config_hash = config_hash;
            // Written last: a file is valid only once this is set.
            ptr::write_volatile(ptr::addr_of_mut!((*header).ready), READY);
            Ok(())
        }
    }

    fn header(&self) -> *mut Header {
        self.base as *mut Header
    }

    /// Runs `f` on the record under the process-shared mutex. `f` must be
    /// short and must not block.
    #[inline]
    pub fn with<T>(&self, f: impl FnOnce(&mut Record) -> T) -> T {
        // SAFETY: the header was validated at open; the mutex serialises
        // every process's access to the record that follows it.
        unsafe {
            let mutex = ptr::addr_of_mut!((*self.header()).mutex);
            let record = &mut *(self.base.add(header_size()) as *mut Record);
            let rc = libc::pthread_mutex_lock(mutex);
            if rc == libc::EOWNERDEAD {
                // Its last holder died mid-step: make the record whole again.
                record.repair();
                libc::pthread_mutex_consistent(mutex);
            }
            let out = f(record);
            libc::pthread_mutex_unlock(mutex);
            out
        }
    }

    /// The record's published word (see `Breaker::published`).
    pub fn published(&self) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: the header lives as long as the mapping; the field is only
        // ever accessed atomically.
        unsafe { &(*self.header()).published }
    }

    /// Holds the lock for `ms` milliseconds without doing anything: lets
    /// tests kill a process that holds it.
    #[doc(hidden)]
    pub fn hold_lock_for_test(&self, ms: u64) {
        self.with(|_| std::thread::sleep(std::time::Duration::from_millis(ms)));
    }
}

impl Drop for MappedRecord {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Options};
    use crate::state::{Decision, Outcome, State};

    fn path(name: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("cb-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&p);
        p
    }

    const SPEC: WindowSpec = WindowSpec::Count { size: 10, slow_threshold_ms: 800.0 };

    #[test]
    fn two_mappings_of_one_file_share_one_breaker() {
        let p = path("share");
        let a = MappedRecord::open(&p, &SPEC, 7, 1).unwrap();
        let b = MappedRecord::open(&p, &SPEC, 7, 2).unwrap();
        let cfg = Config::new(&Options { min_calls: 2, ..Options::default() }).unwrap();
        for m in [&a, &b] {
            m.with(|r| {
                let (d, _) = r.breaker.acquire(&mut r.window, &cfg, 0);
                let Decision::Allowed(p) = d else { panic!("closed") };
                r.breaker.complete(&mut r.window, &cfg, p, Outcome::Failure { duration_ms: 1.0 }, 0)
            });
        }
        assert_eq!(b.with(|r| r.breaker.state()), State::Open);
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn another_configuration_or_size_is_refused() {
        let p = path("mismatch");
        let _a = MappedRecord::open(&p, &SPEC, 7, 1).unwrap();
        assert!(matches!(MappedRecord::open(&p, &SPEC, 8, 1), Err(ShmError::Mismatch(_))));
        let other = WindowSpec::Count { size: 11, slow_threshold_ms: 800.0 };
        assert!(matches!(MappedRecord::open(&p, &other, 7, 1), Err(ShmError::Mismatch(_))));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn a_foreign_file_is_refused() {
        let p = path("foreign");
        let len = header_size() + Layout::of(&SPEC).unwrap().size;
        let mut junk = vec![0xABu8; len];
        junk[12..16].copy_from_slice(&READY.to_le_bytes()); // looks ready, wrong magic
        std::fs::write(&p, &junk).unwrap();
        assert!(matches!(MappedRecord::open(&p, &SPEC, 7, 1), Err(ShmError::Mismatch(_))));
        std::fs::write(&p, b"short").unwrap();
        assert!(matches!(MappedRecord::open(&p, &SPEC, 7, 1), Err(ShmError::Mismatch(_))));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn a_link_or_a_file_open_to_others_is_refused() {
        let p = path("link");
        std::os::unix::fs::symlink("/tmp/cb-link-target-never-created", &p).unwrap();
        assert!(MappedRecord::open(&p, &SPEC, 7, 1).is_err());
        let _ = std::fs::remove_file(&p);
        std::fs::write(&p, b"").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(matches!(MappedRecord::open(&p, &SPEC, 7, 1), Err(ShmError::Mismatch(_))));
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn an_unwritable_place_is_an_io_error() {
        let p = Path::new("/proc/cb-cannot-create-here");
        assert!(matches!(MappedRecord::open(p, &SPEC, 7, 1), Err(ShmError::Io { .. })));
    }

    #[test]
    fn paths_escape_what_a_file_name_cannot_hold() {
        let p = default_path("pay/ments ü".as_bytes());
        let name = p.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(name.ends_with("-pay%2Fments%20%C3%BC"), "{name}");
    }

    #[test]
    fn config_hashes_differ_with_values() {
        let a = ConfigHash::default().f64(0.5).i64(20).finish();
        assert_eq!(a, ConfigHash::default().f64(0.5).i64(20).finish());
        assert_ne!(a, ConfigHash::default().f64(0.5).i64(21).finish());
    }

    #[test]
    fn a_holder_that_dies_does_not_wedge_the_others() {
        let p = path("robust");
        let m = MappedRecord::open(&p, &SPEC, 7, 1).unwrap();
        // SAFETY: the child only locks (through the mapping) and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // Locks and dies holding the lock.
            unsafe {
                libc::pthread_mutex_lock(ptr::addr_of_mut!((*m.header()).mutex));
                libc::_exit(0);
            }
        }
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
        m.with(|r| r.window.record(1.0, false, 0));
        assert_eq!(m.with(|r| r.window.counts(0).total), 1);
        let _ = std::fs::remove_file(&p);
    }
}
