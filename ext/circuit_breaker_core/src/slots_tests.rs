use super::*;
use std::sync::Arc;

fn shared() -> (InFlight, Box<Holders>, AtomicU64) {
    (InFlight::default(), Box::default(), AtomicU64::new(0))
}

#[test]
fn a_cap_admits_up_to_its_count_and_a_release_frees_one() {
    let counts = InFlight::default();
    let slots = Slots::heap(&counts);
    slots.set_cap(2);
    let a = slots.try_take().expect("first");
    let _b = slots.try_take().expect("second");
    assert_eq!(slots.try_take(), None, "at the cap");
    assert_eq!(slots.in_flight(), 2);
    slots.release(a);
    assert_eq!(slots.in_flight(), 1);
    assert!(slots.try_take().is_some());
}

#[test]
fn a_shared_cap_counts_each_process_apart_and_in_total() {
    let (counts, holders, mine) = shared();
    let slots = Slots::shared(&counts, &holders, &mine);
    slots.set_cap(3);
    let taken: Vec<Slot> = (0..3).map(|_| slots.try_take().expect("below the cap")).collect();
    assert_eq!(slots.try_take(), None);
    let me = Process::me().unwrap().owner();
    let entry = holders.entries.iter().find(|e| e.owner.load(Ordering::Relaxed) == me).expect("an entry of mine");
    assert_eq!(entry.held.load(Ordering::Relaxed), 3);
    for s in taken {
        slots.release(s);
    }
    assert_eq!((slots.in_flight(), entry.held.load(Ordering::Relaxed)), (0, 0));
}

#[test]
fn threads_taking_and_giving_back_never_pass_the_cap() {
    const CAP: u32 = 3;
    let (counts, holders, mine) = shared();
    // Takes and releases one at a time, as the binding does under the GVL;
    // the block between them runs in parallel.
    let serial = Arc::new(std::sync::Mutex::new(()));
    let state = Arc::new((counts, holders, mine, AtomicU32::new(0), AtomicU32::new(0)));
    Slots::shared(&state.0, &state.1, &state.2).set_cap(CAP);
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let state = Arc::clone(&state);
            let serial = Arc::clone(&serial);
            std::thread::spawn(move || {
                let (counts, holders, mine, running, most) = &*state;
                let slots = Slots::shared(counts, holders, mine);
                for _ in 0..20_000 {
                    let taken = { serial.lock().map(|_| slots.try_take()).unwrap() };
                    if let Some(s) = taken {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        running.fetch_sub(1, Ordering::SeqCst);
                        serial.lock().map(|_| slots.release(s)).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let (counts, holders, mine, _, most) = &*state;
    assert!(most.load(Ordering::SeqCst) <= CAP);
    assert_eq!(Slots::shared(counts, holders, mine).in_flight(), 0, "every slot given back");
}

#[test]
fn the_slots_of_a_killed_process_come_back_at_the_next_sweep() {
    let (counts, holders, mine) = shared();
    // A shared mapping, as a file's: the child's slots land in the parent's view.
    let len = std::mem::size_of::<InFlight>() + std::mem::size_of::<Holders>();
    // SAFETY: an anonymous shared mapping of `len` bytes, zeroed (a valid
    // InFlight then Holders: atomics and zeros), unmapped at the end.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED);
    drop((counts, holders));
    // SAFETY: both lie within the mapping, aligned (InFlight's size is a
    // multiple of 8), zeroed.
    let (counts, holders) = unsafe {
        (&*(base as *const InFlight), &*((base as *const u8).add(std::mem::size_of::<InFlight>()) as *const Holders))
    };
    let slots = Slots::shared(counts, holders, &mine);
    slots.set_cap(3);
    let (ready_r, ready_w) = pipe();
    // SAFETY: the child takes slots (atomics), says so, then sleeps until killed.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let child_mine = AtomicU64::new(0);
        let slots = Slots::shared(counts, holders, &child_mine);
        let ok = slots.try_take().is_some() && slots.try_take().is_some();
        // SAFETY: writes one byte to the pipe, then waits to be killed.
        unsafe {
            libc::write(ready_w, [u8::from(ok)].as_ptr() as *const libc::c_void, 1);
            libc::pause();
            libc::_exit(0);
        }
    }
    let mut byte = [0u8];
    // SAFETY: reads the child's one byte.
    assert_eq!(unsafe { libc::read(ready_r, byte.as_mut_ptr() as *mut libc::c_void, 1) }, 1);
    assert_eq!(byte[0], 1, "the child took two slots");
    let _mine = slots.try_take().expect("one left");
    assert_eq!((slots.in_flight(), slots.try_take()), (3, None));
    assert!(!slots.sweep(true), "a live child keeps its slots");
    // SAFETY: kills and reaps the child forked above.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    assert!(slots.sweep(true), "the dead child's slots are swept");
    assert_eq!(slots.in_flight(), 1);
    assert!(slots.try_take().is_some());
    // SAFETY: unmaps the mapping made above; nothing uses it afterwards.
    unsafe {
        libc::close(ready_r);
        libc::close(ready_w);
        libc::munmap(base, len);
    }
}

fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into `fds`.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

#[test]
fn a_zombie_or_a_reused_pid_is_not_alive() {
    let me = Process::me().unwrap();
    assert!(Process::alive(me.owner()));
    assert!(!Process::alive(me.owner() ^ 1), "another start time: a reused pid");
    // SAFETY: the child exits at once and stays a zombie until reaped below.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(0) };
    }
    let owner = (pid as u64) << 32;
    let mut zombie = false;
    for _ in 0..1000 {
        if !Process::alive(owner | (sys::started(pid as u32).map_or(0, |s| s.1) & 0xFFFF_FFFF)) {
            zombie = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(zombie, "an exited, unreaped child counts as gone");
    // SAFETY: reaps the child forked above.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    assert!(!Process::alive(owner));
}

#[test]
fn a_forked_child_starts_with_none_of_its_parents_slots_and_gives_none_back() {
    let counts = InFlight::default();
    let slots = Slots::heap(&counts);
    slots.set_cap(1);
    let held = slots.try_take().expect("free");
    // SAFETY: the child only touches atomics, then exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        slots.release(held); // its parent's: not the child's to give back
        let first = slots.try_take().is_some();
        let second = slots.try_take().is_none();
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(if first && second { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status}");
    assert_eq!(slots.in_flight(), 1, "the parent's slot is still held");
}

#[test]
fn a_waiter_sees_the_slot_given_back_or_gives_up_at_its_deadline() {
    let state = Arc::new(InFlight::default());
    let slots = Slots::heap(&state);
    slots.set_cap(1);
    let held = slots.try_take().expect("free");
    let never = AtomicBool::new(false);
    let clock = HostClock::default();
    assert!(!slots.wait_for_free(clock.now() + 5_000_000, &never), "nobody gives it back");
    let waiter = {
        let state = Arc::clone(&state);
        std::thread::spawn(move || {
            let never = AtomicBool::new(false);
            let woke = Slots::heap(&state).wait_for_free(HostClock::default().now() + 60_000_000_000, &never);
            (woke, HostClock::default().now())
        })
    };
    while state.sleepers.load(Ordering::Acquire) == 0 {
        std::thread::yield_now();
    }
    slots.release(held);
    let released_at = clock.now();
    let (woke, at) = waiter.join().unwrap();
    assert!(woke, "woken by the release");
    assert!(at - released_at < 30_000_000_000, "well before its deadline");
    assert!(slots.try_take().is_some(), "the slot is there to take");
    let stop = AtomicBool::new(true);
    assert!(!slots.wait_for_free(Nanos::MAX, &stop), "stop ends the wait");
}
