//! The file's first bytes, as every process reads them before it maps the
//! file, and the bytes its range locks take: what the mapped record
//! (`file.rs`) writes, and what the cleanup (`cleanup.rs`) and the doorbell
//! (`doorbell.rs`) read or lock. It imports nothing of theirs, so those
//! three stand on it, and `file.rs`, which runs the cleanup now and then,
//! stands above `cleanup.rs`.
//!
//! Two open-file-description locks on one byte each coordinate the
//! processes (see `shm/mod.rs`): [`INIT`] (exclusive) while one process
//! creates, validates or removes the file, [`IN_USE`] (shared) for as long
//! as a process maps it.

use std::mem::size_of;

use crate::shm::Header;

/// The header's first 8 bytes in a file this gem built.
pub(super) const MAGIC: [u8; 8] = *b"CBREAKR\0";
/// The header's `ready` word once the file is built.
pub(super) const READY: u32 = 0x5245_4144;
/// The byte whose lock is held while a process builds, validates or
/// removes the file.
pub(super) const INIT: i64 = 0;
/// The byte whose shared lock every process that maps the file holds.
pub(super) const IN_USE: i64 = 1;

/// The header's size in the file: [`Header`], rounded up to 64 bytes so
/// that the record after it starts on a cache line.
pub(crate) fn header_size() -> usize {
    size_of::<Header>().div_ceil(64) * 64
}

/// Whether the file's first 8 bytes are zero (or missing): the header
/// of a file whose creator died before writing it.
pub(super) fn magic_is_zero(fd: i32) -> bool {
    let mut magic = [0u8; 8];
    // SAFETY: reads at most 8 bytes into `magic`.
    let n = unsafe { libc::pread(fd, magic.as_mut_ptr() as *mut libc::c_void, magic.len(), 0) };
    n >= 0 && magic[..n as usize].iter().all(|&b| b == 0)
}

/// Whether the file holds a header of version 4 or later (which take the
/// [`IN_USE`] lock).
pub(super) fn version_at_least_4(fd: i32) -> bool {
    let mut head = [0u8; 12];
    // SAFETY: reads at most 12 bytes into `head`.
    let n = unsafe { libc::pread(fd, head.as_mut_ptr() as *mut libc::c_void, head.len(), 0) };
    n == 12 && head[..8] == MAGIC && u32::from_ne_bytes([head[8], head[9], head[10], head[11]]) >= 4
}
