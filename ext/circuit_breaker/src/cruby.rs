//! Raw CRuby calls the binding makes beyond magnus, each behind a small
//! safe wrapper, so the rest of the binding reads as plain Rust.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, Ordering};

/// Runs `f` without the GVL, so the process's other threads, `Timeout` and
/// signal handlers keep running while it waits. When Ruby wants this thread
/// back (`Thread#raise`, `Thread#kill`, `Timeout`, a signal) it sets `stop`,
/// which `f` must poll, and returns soon after. Interrupts are not handled
/// here (`rb_thread_call_without_gvl2`): whatever `f` returns (a lock guard)
/// reaches the caller, which checks interrupts when it is safe to raise.
/// None: Ruby had an interrupt pending and did not call `f`.
pub fn without_gvl<F: FnOnce() -> R, R>(f: F, stop: &AtomicBool) -> Option<R> {
    struct Call<F, R> {
        f: Option<F>,
        out: Option<R>,
    }
    unsafe extern "C" fn run<F: FnOnce() -> R, R>(data: *mut c_void) -> *mut c_void {
        // SAFETY: `data` is the `Call` on the stack of `without_gvl`, which
        // waits for this function to return.
        let call = unsafe { &mut *(data as *mut Call<F, R>) };
        if let Some(f) = call.f.take() {
            call.out = Some(f());
        }
        std::ptr::null_mut()
    }
    unsafe extern "C" fn unblock(data: *mut c_void) {
        // SAFETY: `data` is the `stop` flag, alive until `without_gvl` returns.
        let stop = unsafe { &*(data as *const AtomicBool) };
        stop.store(true, Ordering::Release);
    }
    let mut call = Call { f: Some(f), out: None };
    // SAFETY: both functions follow the contract of rb_thread_call_without_gvl2:
    // `run` touches no Ruby object, `unblock` only sets an atomic flag; both
    // pointers outlive the call.
    unsafe {
        rb_sys::rb_thread_call_without_gvl2(
            Some(run::<F, R>),
            &mut call as *mut Call<F, R> as *mut c_void,
            Some(unblock),
            stop as *const AtomicBool as *mut c_void,
        );
    }
    call.out
}
