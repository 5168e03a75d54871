//! The mapped record, its lock and the cleanup, on real files.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use std::sync::atomic::AtomicBool;

use super::format::{header_size, INIT, READY};
use super::*;
use crate::breaker::{Decision, Outcome};
use crate::config::{Config, Options};
use crate::record::{Layout, Record};
use crate::shm::dir::file_prefix;
use crate::shm::{layout_hash, Key, ShmError, NAME_MAX};
use crate::state::State;
use crate::store::Store;
use crate::window::WindowSpec;

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
    use std::os::unix::fs::DirBuilderExt;
    let d = std::env::temp_dir().join(format!("cb-shm-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::DirBuilder::new().mode(0o700).create(&d).unwrap();
    TestDir(d)
}

static GO: AtomicBool = AtomicBool::new(false);

fn open_at(k: &Key, path: &Path) -> Result<MappedRecord, ShmError> {
    MappedRecord::open(k, path, 1, &GO)
}

fn key<'a>(name: &'a str, config_hash: u64, spec: &'a WindowSpec) -> Key<'a> {
    Key { namespace: b"test", name: name.as_bytes(), config_hash, spec }
}

fn open_in(dir: &Path, k: &Key) -> Result<MappedRecord, ShmError> {
    let file = k.path().unwrap().file_name().unwrap().to_owned();
    open_at(k, &dir.join(file))
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
            r.breaker.complete(&mut r.window, &cfg, p, Outcome::Failure { duration_ns: 1.0e6 }, 0, 0)
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
    let Err(e @ ShmError::NameTooLong { .. }) = key(&long, 7, &SPEC).path() else { panic!("accepted") };
    let m = e.to_string();
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
    assert!(matches!(
        open_at(&k, &p),
        Err(ShmError::WrongSize { .. } | ShmError::Foreign(_) | ShmError::NotPrivate(_))
    ));
    std::fs::write(&p, b"short").unwrap();
    assert!(matches!(
        open_at(&k, &p),
        Err(ShmError::WrongSize { .. } | ShmError::Foreign(_) | ShmError::NotPrivate(_))
    ));
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
        let m = open_at(&k, &p).unwrap();
        assert_eq!(with(&m, |r| r.breaker.state()), State::Closed);
    }
}

#[test]
fn a_link_or_a_file_open_to_others_is_refused() {
    let d = dir("link");
    let k = key("p", 7, &SPEC);
    let p = d.join(k.path().unwrap().file_name().unwrap());
    std::os::unix::fs::symlink("/tmp/cb-link-target-never-created", &p).unwrap();
    assert!(matches!(open_at(&k, &p), Err(ShmError::NotPrivate(at)) if at == p), "a link is not a private file");
    let target = d.join("target");
    std::fs::write(&target, b"").unwrap();
    let _ = std::fs::remove_file(&p);
    std::os::unix::fs::symlink(&target, &p).unwrap();
    assert!(matches!(open_at(&k, &p), Err(ShmError::NotPrivate(_))), "nor a link to a file of ours");
    assert_eq!(std::fs::metadata(&target).unwrap().len(), 0, "the link is not followed");
    let _ = std::fs::remove_file(&p);
    std::fs::write(&p, b"").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert!(matches!(
        open_at(&k, &p),
        Err(ShmError::WrongSize { .. } | ShmError::Foreign(_) | ShmError::NotPrivate(_))
    ));
}

#[test]
fn an_unwritable_place_is_an_io_error() {
    let k = key("p", 7, &SPEC);
    assert!(matches!(open_at(&k, Path::new("/proc/cb-cannot-create-here/file")), Err(ShmError::Io { .. })));
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
    let third = open_in(&d, &key("third", 7, &SPEC)).unwrap();
    remove_unused(&d, &d.join("none"));
    let names: Vec<String> =
        std::fs::read_dir(&*d).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(names.iter().any(|n| n.contains("-kept-")), "{names:?}");
    assert!(names.iter().any(|n| n.contains("-third-")), "{names:?}");
    assert!(!names.iter().any(|n| n.contains("-gone-")), "{names:?}");
    assert!(foreign.exists() && other_prefix.exists());
    drop((kept, third));
}

#[test]
fn a_full_file_system_is_an_error_not_a_bus_error() {
    // Runs only where a tiny tmpfs can be mounted (root); the RSpec suite
    // covers the same through Ruby.
    let d = dir("tiny");
    let c = c_path(&d).unwrap();
    let (fs, opts) = (CString::new("tmpfs").unwrap(), CString::new("size=64k,mode=0700").unwrap());
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
    assert_eq!(
        rejected(word(State::HalfOpen, 3), 0, 0),
        (State::HalfOpen, Some(crate::breaker::HALF_OPEN_RETRY_AFTER))
    );
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
    let err = range_lock_within(own.as_raw_fd(), INIT, libc::F_WRLCK, 20_000_000, &GO).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ETIMEDOUT));
    let stop = AtomicBool::new(true);
    let err = range_lock_within(own.as_raw_fd(), INIT, libc::F_WRLCK, Nanos::MAX, &stop).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::Interrupted);
    drop(other);
    range_lock_within(own.as_raw_fd(), INIT, libc::F_WRLCK, 20_000_000, &GO).unwrap();
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

#[test]
fn a_mapped_record_keeps_no_descriptor_yet_stays_in_use_until_unmapped() {
    let d = dir("no-fd");
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let k = key("p", 7, &SPEC);
    let before = fds();
    let m = open_in(&d, &k).unwrap();
    // Other tests open files meanwhile; this one's descriptor would stay.
    let path = d.join(k.path().unwrap().file_name().unwrap());
    let own_open = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
        .any(|target| target == path);
    assert!(!own_open, "a descriptor of {} stayed open ({before} before)", path.display());
    remove_unused(&d, &d.join("none"));
    assert!(path.exists(), "removed while mapped");
    drop(m);
    remove_unused(&d, &d.join("none"));
    assert!(!path.exists(), "kept once unmapped");
}

#[test]
fn the_directory_must_be_private_to_the_user() {
    use std::os::unix::fs::PermissionsExt;
    let d = dir("private");
    let k = key("p", 7, &SPEC);
    let file = k.path().unwrap().file_name().unwrap().to_owned();
    let inner = d.join("made");
    open_at(&k, &inner.join(&file)).unwrap();
    assert_eq!(std::fs::metadata(&inner).unwrap().permissions().mode() & 0o777, 0o700, "created 0700");
    std::fs::set_permissions(&inner, std::fs::Permissions::from_mode(0o755)).unwrap();
    let Err(e @ ShmError::DirOpen { .. }) = open_at(&k, &inner.join(&file)) else {
        panic!("a directory open to others was used")
    };
    assert!(e.to_string().contains("open to other users (mode 0755)"), "{e}");
    let link = d.join("link");
    std::os::unix::fs::symlink(&*d, &link).unwrap();
    let Err(e @ ShmError::DirNotDir(_)) = open_at(&k, &link.join(&file)) else { panic!("a link was followed") };
    assert!(e.to_string().contains("not a link"), "{e}");
}

#[test]
fn cleanup_runs_at_a_process_first_open_then_at_most_once_a_minute() {
    let t = cleanup::Throttle::new();
    let sec = 1_000_000_000;
    assert!(t.due(10, 5 * sec));
    assert!(!t.due(10, 6 * sec));
    assert!(!t.due(10, 64 * sec));
    assert!(t.due(11, 64 * sec), "a forked child scans at its first open");
    assert!(!t.due(11, 65 * sec));
    assert!(t.due(11, 124 * sec));
}

#[test]
fn waits_are_on_the_kernel_monotonic_clock() {
    let a = monotonic();
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let b = monotonic();
    let libc_now = ts.tv_sec * 1_000_000_000 + ts.tv_nsec;
    assert!(a <= libc_now && libc_now <= b, "{a} {libc_now} {b}");
}
