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
//! configuration hash, the mutex, the published words, each process's
//! slots of the concurrency cap), then the record's block. Two open-file-description locks on the file's first bytes
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
//!
//! The files: this one holds what both kinds of build share (the header's
//! layout and hash, the errors); `dir.rs` the directory, the keys and the
//! file names; `linux/` the mapped record and its lock (`file.rs`), the
//! cleanup of unused files (`cleanup.rs`), the bytes both read and lock
//! (`format.rs`, below both) and the system calls they use;
//! `unsupported.rs` the refusal elsewhere. Each platform sits behind one
//! `cfg`, on its `mod` line below.

use std::io;
use std::mem::{align_of, size_of};
use std::path::PathBuf;

use crate::check::ConfigError;

use crate::hashing::Fnv;
use crate::record::Record;
use crate::slots::Holders;
use crate::store::Published;

mod dir;
#[cfg(all(target_os = "linux", not(feature = "portable")))]
mod linux;
#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
mod unsupported;

pub use dir::{shm_dir, Key};
#[cfg(all(target_os = "linux", not(feature = "portable")))]
pub use linux::{remove_unused, sweep, Doorbell, Guard, MappedRecord};
#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
pub use unsupported::{sweep, Doorbell, Guard, MappedRecord};

/// Whether this build maps shared records (Linux, without the `portable`
/// feature; see the module doc).
pub const SUPPORTED: bool = cfg!(all(target_os = "linux", not(feature = "portable")));
/// Bumped whenever the meaning of the file's bytes changes in a way the
/// structural [`layout_hash`] cannot see. Files of version 4 and later take
/// the `IN_USE` lock, which lets [`remove_unused`] tell when they are free.
pub const LAYOUT_VERSION: u32 = 4;
/// The longest file name most file systems take (NAME_MAX).
pub const NAME_MAX: usize = 255;

#[repr(C)]
pub(crate) struct Header {
    pub(crate) magic: [u8; 8],
    pub(crate) version: u32,
    pub(crate) ready: u32,
    pub(crate) header_size: u64,
    pub(crate) record_size: u64,
    pub(crate) config_hash: u64,
    pub(crate) layout_hash: u64,
    pub(crate) mutex: libc::pthread_mutex_t,
    /// Stored under the mutex, read without it (host-wide).
    pub(crate) published: Published,
    /// Each process's slots of the cap (`crate::slots`), so that a dead
    /// process's come back.
    pub(crate) holders: Holders,
}

/// Why a shared record could not be opened. Every message but `Io`'s
/// starts with `shared:` and says what to do; the binding raises them as
/// `ArgumentError`, `Io` as `SystemCallError` and `Unsupported` as
/// `NotImplementedError`.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// The file name of `shared:` and `namespace:` would be too long.
    #[error(
        "shared: name too long: its file name would be {bytes} bytes (with namespace and escapes; at most {max}); \
         use a shorter shared: name or namespace:"
    )]
    NameTooLong { bytes: usize, max: usize },
    /// A path with a NUL byte.
    #[error("shared: {}: a path may not contain NUL", .0.display())]
    NulInPath(PathBuf),
    /// The window's settings make no record.
    #[error("shared: {0}")]
    Window(#[from] ConfigError),
    /// Something other than a private regular file of this user is there.
    #[error(
        "shared: {} must be a regular file owned by this user and private to it (mode 0600); \
         delete it, or choose another shared: name",
        .0.display()
    )]
    NotPrivate(PathBuf),
    /// A file of another size: not one this build makes for these options.
    #[error(
        "shared: {} is not a circuit_breaker file of this build ({size} bytes, expected {expected}); \
         delete it, or choose another shared: name",
        path.display()
    )]
    WrongSize { path: PathBuf, size: usize, expected: usize },
    /// A file of the right size whose header is another build's, version's
    /// or configuration's (or not a header at all).
    #[error(
        "shared: {} is not a circuit_breaker file of layout version {LAYOUT_VERSION} made by this build for these \
         options; delete it, or choose another shared: name",
        .0.display()
    )]
    Foreign(PathBuf),
    /// The directory of shared files belongs to another user (who may
    /// have made it first to block or spy on this one).
    #[error(
        "shared: {} belongs to {owner}, not to this user ({me}): shared files live only in a directory private to \
         their user; remove it, or point CIRCUIT_BREAKER_SHM_DIR elsewhere (docs/shared.md)",
        dir.display()
    )]
    DirNotOwned { dir: PathBuf, owner: String, me: String },
    /// The directory of shared files is this user's but others may enter it.
    #[error(
        "shared: {} is open to other users (mode {mode:04o}): shared files live only in a directory private to \
         their user; chmod 700 it, remove it, or point CIRCUIT_BREAKER_SHM_DIR elsewhere (docs/shared.md)",
        dir.display()
    )]
    DirOpen { dir: PathBuf, mode: u32 },
    /// A link or a file where the directory of shared files should be.
    #[error(
        "shared: {} must be a directory private to this user, not a link or a file; remove it, or point \
         CIRCUIT_BREAKER_SHM_DIR elsewhere (docs/shared.md)",
        .0.display()
    )]
    DirNotDir(PathBuf),
    /// The operating system refused (permissions, space, …).
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    /// This build has no shared records (see the module doc); `platform`
    /// says which ("on macos", "by this build …").
    #[error(
        "shared: is not supported {platform}: it needs robust process-shared mutexes (a process that dies holding \
         the lock must not wedge the others), which only Linux has; breakers of one process work (docs/install.md)"
    )]
    Unsupported { platform: String },
}

/// Where the header's mutex starts in a shared file (for the specs that
/// play a dead or stuck holder by writing its owner word).
pub fn mutex_offset() -> usize {
    let header = std::mem::MaybeUninit::<Header>::uninit();
    let base = header.as_ptr();
    // SAFETY: `addr_of!` on a field of an uninitialised value only computes
    // its address; nothing is read.
    let mutex = unsafe { std::ptr::addr_of!((*base).mutex) };
    mutex as usize - base as usize
}

/// A hash of the layout of every struct stored in a shared file, the
/// file's version and the crate's version: part of every file's key and
/// header, so two builds never read each other's bytes.
pub fn layout_hash() -> u64 {
    let h = Fnv::default().i64(LAYOUT_VERSION.into()).text(env!("CARGO_PKG_VERSION").as_bytes());
    let h = crate::hashing::hash_layout!(
        h,
        Header { magic, version, ready, header_size, record_size, config_hash, layout_hash, mutex, published, holders }
    );
    let h = Holders::layout(Published::layout(h));
    let h = h.usize(size_of::<libc::pthread_mutex_t>()).usize(align_of::<libc::pthread_mutex_t>());
    Record::layout(h).finish()
}
