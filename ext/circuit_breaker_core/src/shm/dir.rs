//! Where shared files live and what they are called: the directory, the
//! key of one shared breaker and its file name.

use std::path::{Path, PathBuf};

use super::{layout_hash, ShmError, NAME_MAX};
use crate::hashing::Fnv;
use crate::window::WindowSpec;

/// What every file of this user starts with.
pub(super) fn file_prefix() -> String {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    format!("circuit_breaker-{uid}-")
}

/// Where shared files live: the directory `circuit_breaker-<euid>`, private
/// to the user (opening creates it, mode 0700, and refuses it when another
/// user owns it or may enter it), in `$CIRCUIT_BREAKER_SHM_DIR`, else in
/// `/dev/shm` (memory, gone at reboot), else in the temporary directory.
pub fn shm_dir() -> PathBuf {
    let base = match std::env::var_os("CIRCUIT_BREAKER_SHM_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        _ => std::env::temp_dir(),
    };
    // SAFETY: geteuid cannot fail.
    base.join(format!("circuit_breaker-{}", unsafe { libc::geteuid() }))
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
    pub(super) fn hash(&self) -> u64 {
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
            return Err(ShmError::NameTooLong { bytes: file.len(), max: NAME_MAX });
        }
        Ok(shm_dir().join(file))
    }
}
