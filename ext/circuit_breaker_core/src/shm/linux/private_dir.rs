//! The directory shared files live in: created private to the user (mode
//! 0700), and refused when it is not, so that other local users can
//! neither read the application's breaker names nor create files under
//! them first (docs/shared.md, "Where").

use std::ffi::CStr;
use std::mem::MaybeUninit;
use std::path::Path;

use super::{c_path, os_error};
use crate::shm::ShmError;

/// Creates `dir` (mode 0700) when missing, then checks that it is a
/// directory (not a link) of this user that nobody else may enter. Costs
/// two system calls per open.
pub(super) fn ensure_private(dir: &Path) -> Result<(), ShmError> {
    let shown = dir.display();
    let cdir = c_path(dir)?;
    // SAFETY: `cdir` is a C string.
    if unsafe { libc::mkdir(cdir.as_ptr(), 0o700) } != 0
        && std::io::Error::last_os_error().kind() != std::io::ErrorKind::AlreadyExists
    {
        return Err(os_error(format!("cannot create the directory {shown}")));
    }
    let mut st = MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `cdir` is a C string; lstat fills `st` when it returns 0.
    if unsafe { libc::lstat(cdir.as_ptr(), st.as_mut_ptr()) } != 0 {
        return Err(os_error(format!("cannot stat the directory {shown}")));
    }
    // SAFETY: initialised by lstat.
    let st = unsafe { st.assume_init() };
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(ShmError::DirNotDir(dir.to_owned()));
    }
    if st.st_uid != euid {
        return Err(ShmError::DirNotOwned { dir: dir.to_owned(), owner: user(st.st_uid), me: user(euid) });
    }
    if st.st_mode & 0o077 != 0 {
        return Err(ShmError::DirOpen { dir: dir.to_owned(), mode: st.st_mode & 0o7777 });
    }
    Ok(())
}

/// `name (uid N)`, or `uid N` for a uid without a name.
fn user(uid: libc::uid_t) -> String {
    let mut pw = MaybeUninit::<libc::passwd>::zeroed();
    let mut buf = vec![0 as libc::c_char; 1024];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes `pw` and strings into `buf` (of the given
    // length), and sets `found` to `pw` on success.
    let rc = unsafe { libc::getpwuid_r(uid, pw.as_mut_ptr(), buf.as_mut_ptr(), buf.len(), &mut found) };
    if rc != 0 || found.is_null() {
        return format!("uid {uid}");
    }
    // SAFETY: on success pw_name points to a C string in `buf`.
    let name = unsafe { CStr::from_ptr((*found).pw_name) }.to_string_lossy();
    format!("{name} (uid {uid})")
}
