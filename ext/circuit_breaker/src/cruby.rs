//! Raw CRuby calls the binding makes beyond magnus, each behind a small
//! safe wrapper, so the rest of the binding reads as plain Rust.

use std::ffi::{c_void, CStr};

use magnus::error::ErrorType;
use magnus::rb_sys::{AsRawValue, FromRawValue};
use magnus::typed_data::Obj;
use magnus::Class;
use magnus::{Error, Exception, RClass, Ruby, TypedData, Value};
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

/// Raises `ex` the way a pending raise resumes (`rb_jump_tag`), not with
/// `rb_exc_raise`: on Ruby 3.1 the latter turns a lazily captured backtrace
/// into strings, which costs microseconds per frame. The exception object
/// goes on untouched: same object, same backtrace. Never returns: only
/// plain data may be alive in the callers' frames.
pub fn resume_raise(ex: Exception) -> ! {
    const TAG_RAISE: i32 = 6;
    // SAFETY: `ex` is a live exception object; with it as the error info,
    // TAG_RAISE unwinds to the nearest rescue exactly as a raise does.
    unsafe {
        rb_sys::rb_set_errinfo(ex.as_raw());
        rb_sys::rb_jump_tag(TAG_RAISE)
    }
}

/// Raises `e` from a function that must not return (an ensure function).
pub fn resume_error(e: Error) -> ! {
    match e.error_type() {
        ErrorType::Exception(ex) => resume_raise(*ex),
        // SAFETY: the jump's state is still in the VM, as rb_protect left it.
        ErrorType::Jump(tag) => unsafe { rb_sys::rb_jump_tag(*tag as i32) },
        ErrorType::Error(class, message) => {
            let ex = class.new_instance((message.as_ref(),)).unwrap_or_else(|e| match e.error_type() {
                ErrorType::Exception(ex) => *ex,
                _ => unreachable!("creating an exception raises an exception"),
            });
            resume_raise(ex)
        }
    }
}

/// A method of no arguments on instances of `Receiver`'s class.
pub trait Method0 {
    type Receiver: TypedData;
    fn call(ruby: &Ruby, rb_self: Obj<Self::Receiver>) -> Result<Value, Error>;
}

/// Defines `M` as `name` on `class`, entered straight from the VM: magnus's
/// own wrapper converts the receiver under an `rb_protect` of its own, about
/// 13 ns on every call (docs/performance.md); this entry checks the
/// receiver's data type with one plain call instead. Errors are raised and
/// panics become `fatal`, as magnus's wrapper does.
pub fn define_method_0<M: Method0>(class: RClass, name: &CStr) {
    unsafe extern "C" fn entry<M: Method0>(rb_self: rb_sys::VALUE) -> rb_sys::VALUE {
        // SAFETY: the VM calls methods on its own thread, with the GVL.
        let ruby = unsafe { Ruby::get_unchecked() };
        let data_type = <M::Receiver as TypedData>::data_type() as *const magnus::DataType;
        // SAFETY: DataType is a transparent wrapper of rb_data_type_t.
        let wrapped = unsafe { rb_sys::rb_typeddata_is_kind_of(rb_self, data_type as *const rb_sys::rb_data_type_t) } != 0;
        let result = if wrapped {
            // SAFETY: `rb_self` wraps an M::Receiver (checked just above);
            // Obj is a transparent wrapper of the object's VALUE.
            let obj = unsafe { std::mem::transmute::<Value, Obj<M::Receiver>>(Value::from_raw(rb_self)) };
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| M::call(&ruby, obj)))
                .unwrap_or_else(|panic| Err(panic_error(&ruby, panic)))
        } else {
            // Only reachable by binding the method to another object.
            Err(Error::new(ruby.exception_type_error(), "receiver is not a CircuitBreaker"))
        };
        match result {
            Ok(v) => v.as_raw(),
            Err(e) => resume_error(e),
        }
    }
    let f: unsafe extern "C" fn(rb_sys::VALUE) -> rb_sys::VALUE = entry::<M>;
    // SAFETY: a method of arity 0 is called as f(self); the VM casts the
    // pointer back to that signature.
    unsafe {
        rb_sys::rb_define_method(
            class.as_raw(),
            name.as_ptr(),
            Some(std::mem::transmute::<unsafe extern "C" fn(rb_sys::VALUE) -> rb_sys::VALUE, unsafe extern "C" fn() -> rb_sys::VALUE>(f)),
            0,
        )
    };
}

/// A panic as the `fatal` error magnus makes of one.
fn panic_error(ruby: &Ruby, panic: Box<dyn std::any::Any + Send>) -> Error {
    let msg = match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(m), _) => (*m).to_owned(),
        (None, Some(m)) => m.clone(),
        _ => "panic".to_owned(),
    };
    Error::new(ruby.exception_fatal(), msg)
}
