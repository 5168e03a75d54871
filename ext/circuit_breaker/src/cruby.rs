//! Every raw CRuby call the binding makes beyond magnus, each behind a small
//! wrapper (safe where it can be), so the rest of the binding reads as plain
//! Rust and the unsafe surface is in one place.

use std::ffi::{c_void, CStr};

use magnus::error::{ErrorType, Tag};
use magnus::rb_sys::{AsRawId, AsRawValue, FromRawValue};
use magnus::typed_data::Obj;
use magnus::value::{Id, ReprValue};
use magnus::Class;
use magnus::{Error, Exception, ExceptionClass, RClass, Ruby, TypedData, Value};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// How Ruby tells a thread waiting without the GVL that it wants it back.
/// `unblock` may run on any thread, without the GVL: it must only touch
/// atomics (and unpark).
pub trait Unblock: Sync {
    fn unblock(&self);
}

/// A flag the waiting code polls.
impl Unblock for AtomicBool {
    fn unblock(&self) {
        self.store(true, Ordering::Release);
    }
}

/// `rb_nogvl`'s flags for every wait: `RB_NOGVL_INTR_FAIL` (as
/// `rb_thread_call_without_gvl2`: an interrupt pending when the wait would
/// start skips it, and none is raised here) and, where the Ruby built
/// against has it (3.4), `RB_NOGVL_OFFLOAD_SAFE`: under a fiber scheduler
/// that implements `blocking_operation_wait`, the wait may run on another
/// thread while the reactor's other fibers run (docs/fibers.md).
#[cfg(ruby_gte_3_4)]
const NOGVL_FLAGS: std::ffi::c_int = (rb_sys::RB_NOGVL_INTR_FAIL | rb_sys::RB_NOGVL_OFFLOAD_SAFE) as std::ffi::c_int;
#[cfg(not(ruby_gte_3_4))]
const NOGVL_FLAGS: std::ffi::c_int = rb_sys::RB_NOGVL_INTR_FAIL as std::ffi::c_int;

// The states of a [`Wait`]: not started, running, finished, or given up
// by its caller before it started (then it never runs).
const PENDING: u8 = 0;
const RUNNING: u8 = 1;
const DONE: u8 = 2;
const CANCELLED: u8 = 3;

/// What a wait shares with whichever thread runs it (this one, or one a
/// fiber scheduler offloaded it to) and with Ruby's unblocking function:
/// on the heap, never on the caller's stack, which an interrupted fiber
/// leaves while the other thread may still read its state or be asked to
/// stop.
struct Wait<S> {
    state: AtomicU8,
    stop: S,
    /// The caller's [`Slot`]: touched only while the state is RUNNING,
    /// and the caller does not return while it is (see [`without_gvl`]).
    slot: *mut c_void,
    run: unsafe fn(*mut c_void, &S),
}

/// The closure and its result, on the caller's stack.
struct Slot<F, R> {
    f: Option<F>,
    out: Option<R>,
}

/// # Safety
/// `slot` is the `Slot<F, R>` of a live [`without_gvl`] call whose state
/// this thread moved to RUNNING.
unsafe fn run_slot<F: FnOnce(&S) -> R, R, S>(slot: *mut c_void, stop: &S) {
    // SAFETY: see the function's contract: nothing else touches the slot
    // while the wait is RUNNING.
    let slot = unsafe { &mut *(slot as *mut Slot<F, R>) };
    if let Some(f) = slot.f.take() {
        slot.out = Some(f(stop));
    }
}

/// Runs `f` without the GVL, so the process's other threads, `Timeout` and
/// signal handlers keep running while it waits; under a fiber scheduler
/// with `blocking_operation_wait`, when built for Ruby 3.4 or later
/// ([`NOGVL_FLAGS`]), on a thread the scheduler picks, while the reactor's
/// other fibers run. When Ruby
/// wants the waiting thread back (`Thread#raise`, `Thread#kill`, `Timeout`,
/// a signal) it calls `stop.unblock()`, which `f` must notice (it gets
/// `stop`), and returns soon after. Interrupts are not raised here:
/// whatever `f` returns (a lock guard's outcome) reaches the caller, which
/// checks interrupts when it is safe to raise.
///
/// Ok(None): `f` did not run (Ruby had an interrupt pending).
/// Err: the scheduler raised into the waiting fiber (an async timeout, a
/// `Fiber#raise`) while the wait ran elsewhere: `f` was told to stop and
/// has returned, and the caller raises the error once its Rust frames are
/// gone. `f` has always finished, or will never start, when this returns,
/// so it may borrow from the caller's stack.
pub fn without_gvl<F, R, S>(f: F, stop: S) -> Result<Option<R>, Error>
where
    F: FnOnce(&S) -> R + Send,
    R: Send,
    S: Unblock + Send + 'static,
{
    unsafe extern "C" fn run<S>(data: *mut c_void) -> *mut c_void {
        // SAFETY: `data` is a `Wait<S>` that stays allocated while any
        // thread may run this (freed only once the wait is over, or never).
        let wait = unsafe { &*(data as *const Wait<S>) };
        if wait.state.compare_exchange(PENDING, RUNNING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            // SAFETY: RUNNING: the caller keeps the slot alive and away.
            unsafe { (wait.run)(wait.slot, &wait.stop) };
            wait.state.store(DONE, Ordering::Release);
        }
        std::ptr::null_mut()
    }
    unsafe extern "C" fn unblock<S: Unblock>(data: *mut c_void) {
        // SAFETY: as in `run`: the `Wait<S>` outlives every call.
        let wait = unsafe { &*(data as *const Wait<S>) };
        wait.stop.unblock();
    }
    let mut slot = Slot { f: Some(f), out: None };
    let wait = Box::into_raw(Box::new(Wait {
        state: AtomicU8::new(PENDING),
        stop,
        slot: &mut slot as *mut Slot<F, R> as *mut c_void,
        run: run_slot::<F, R, S>,
    }));
    let data = wait as *mut c_void;
    // Under a scheduler, rb_nogvl calls its `blocking_operation_wait`, Ruby
    // code that may raise: caught here, raised by the caller once Rust is
    // done. Nothing with a destructor lives in this closure's frame.
    let outcome = magnus::rb_sys::protect(|| {
        // SAFETY: `run` touches no Ruby object and `unblock` only the
        // stop (`Unblock`: atomics, an unpark); `data` outlives both.
        unsafe { rb_sys::rb_nogvl(Some(run::<S>), data, Some(unblock::<S>), data, NOGVL_FLAGS) };
        rb_sys::Qnil as Raw
    });
    // SAFETY: `wait` is freed below only.
    let shared = unsafe { &*wait };
    let mut left_running = false;
    if shared.state.compare_exchange(PENDING, CANCELLED, Ordering::AcqRel, Ordering::Acquire) == Err(RUNNING) {
        // Offloaded and still running (the fiber was interrupted): stop it
        // and let it finish, so the slot it writes stays this frame's. It
        // notices within a slice of its wait (a millisecond or so).
        left_running = true;
        shared.stop.unblock();
        while shared.state.load(Ordering::Acquire) == RUNNING {
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
    match outcome {
        Ok(_) if !left_running => {
            // The wait is over wherever it ran (rb_nogvl returned, or the
            // scheduler's thread did): nobody reads `wait` any more.
            // SAFETY: allocated above by Box::into_raw, freed once.
            drop(unsafe { Box::from_raw(wait) });
            Ok(slot.out)
        }
        // Left early (the scheduler raised, or returned while the wait ran):
        // the thread it was offloaded to may still call `run` or `unblock`
        // with `wait` until its own rb_nogvl returns, which nothing
        // reports, so the few words of `wait` stay allocated (one per
        // interrupted offloaded wait); `f` has ended or will never start.
        Ok(_) => Ok(slot.out),
        Err(e) => Err(e),
    }
}

/// How a block left [`yield_block`] other than by returning.
pub enum Unwound {
    /// It raised this exception.
    Raised(Exception),
    /// It jumped (`break`, `next`, `return`, `throw`, `Thread#kill`): the
    /// jump's tag, pending in the VM until resumed ([`Exit::Jump`]).
    Jumped(i32),
}

/// `$!` of the running thread, as [`set_errinfo`] puts it back.
pub fn errinfo() -> Value {
    // SAFETY: reads the thread's error info, with the GVL.
    unsafe { Value::from_raw(rb_sys::rb_errinfo()) }
}

/// Sets `$!` of the running thread (a value [`errinfo`] read).
pub fn set_errinfo(v: Value) {
    // SAFETY: `v` is nil or an exception object alive on the VM's stack.
    unsafe { rb_sys::rb_set_errinfo(v.as_raw()) }
}

/// The tag of a jump that kills the thread (`Thread#kill`, `exit!`).
pub const TAG_FATAL: i32 = Tag::Fatal as i32;
const TAG_RAISE: i32 = Tag::Raise as i32;

/// Yields to the current method's block with no argument, catching what
/// unwinds out of it. Unlike magnus's `yield_values`, this does not save
/// and restore `$!` around the block (a call into the VM on every call,
/// docs/performance.md): a caller that catches an exception must raise
/// again (an exception or the caught one), since `$!` now holds the caught
/// exception, as it does in a `rescue` clause; one that returns normally
/// instead (a fallback's answer) puts back the `$!` it read with
/// [`errinfo`] before yielding, as the end of a `rescue` clause does. A
/// `$!` left set would also make the process exit with status 1.
#[inline]
pub fn yield_block() -> Result<Value, Unwound> {
    unsafe extern "C" fn body(_: Raw) -> Raw {
        // SAFETY: called by rb_protect on this method's frame, whose block
        // the caller checked exists; Qundef yields no argument.
        unsafe { rb_sys::rb_yield(rb_sys::Qundef as Raw) }
    }
    let mut state = 0;
    // SAFETY: `body` follows rb_protect's contract; `state` outlives it.
    let v = unsafe { rb_sys::rb_protect(Some(body), 0, &mut state) };
    match state {
        // SAFETY: a value the block returned.
        0 => Ok(unsafe { Value::from_raw(v) }),
        TAG_RAISE => {
            // SAFETY: after a caught raise, the error info is the exception.
            let ex = unsafe { Value::from_raw(rb_sys::rb_errinfo()) };
            Err(Exception::from_value(ex).map_or(Unwound::Jumped(TAG_RAISE), Unwound::Raised))
        }
        tag => Err(Unwound::Jumped(tag)),
    }
}

/// How a native method leaves other than by returning a value: the exit is
/// a plain value inside Rust, and is resumed by the method's entry only once
/// every Rust frame of the method has returned and dropped what it owned
/// (magnus does the same with its `Error`). A long jump skips destructors
/// and landing pads; taken from the entry, it skips nothing.
pub enum Exit {
    /// A magnus error: raised as magnus raises it.
    Error(Error),
    /// An exception to raise as a pending raise resumes (see
    /// [`Exit::resume`]): the same object, the same backtrace.
    Raise(Exception),
    /// A jump (`break`, `next`, `throw`, `Thread#kill`…) still pending in
    /// the VM, as `rb_protect` left it, with its tag.
    Jump(i32),
    /// A pending jump whose listeners run in an ensure function on the way
    /// out, as a Ruby `ensure` clause runs during a jump (`rb_ensure`). If
    /// the function returns an error, that replaces the jump.
    JumpEnsuring(i32, Box<dyn FnOnce() -> Result<(), Error>>),
}

impl From<Error> for Exit {
    fn from(e: Error) -> Self {
        match e.error_type() {
            // A jump out of Ruby code the method called (a listener's
            // `throw`): still pending in the VM.
            ErrorType::Jump(tag) => Exit::Jump(*tag as i32),
            _ => Exit::Error(e),
        }
    }
}

impl Exit {
    /// Leaves the native method by this exit. Raises `Raise` the way a
    /// pending raise resumes (`rb_jump_tag`), not with `rb_exc_raise`: on
    /// Ruby 3.1 the latter turns a lazily captured backtrace into strings,
    /// which costs microseconds per frame.
    ///
    /// # Safety
    /// Called from a method's entry function (the frame the VM called),
    /// after every other Rust frame of the method has returned: a long jump
    /// leaves this frame and runs no destructor, so only plain data may be
    /// alive in it. For `Jump` and `JumpEnsuring`, the jump is still pending
    /// in the VM, as `rb_protect` left it.
    pub unsafe fn resume(self) -> ! {
        match self {
            Exit::Error(e) => {
                let raised = Raised::from(e);
                // SAFETY: as the caller guarantees; `e` was consumed above.
                unsafe { raised.resume() }
            }
            // SAFETY: as the caller guarantees.
            Exit::Raise(ex) => unsafe { raise_pending(ex) },
            // SAFETY: as the caller guarantees.
            Exit::Jump(tag) => unsafe { rb_sys::rb_jump_tag(tag) },
            // SAFETY: as the caller guarantees.
            Exit::JumpEnsuring(tag, ensure) => unsafe { resume_jump_ensuring(tag, ensure) },
        }
    }
}

/// What raising a magnus `Error` amounts to, as plain data (no destructor
/// to skip).
enum Raised {
    Exception(Exception),
    Jump(i32),
}

impl From<Error> for Raised {
    fn from(e: Error) -> Self {
        match e.error_type() {
            ErrorType::Exception(ex) => Raised::Exception(*ex),
            ErrorType::Jump(tag) => Raised::Jump(*tag as i32),
            ErrorType::Error(class, message) => {
                Raised::Exception(class.new_instance((message.as_ref(),)).unwrap_or_else(|e| match e.error_type() {
                    ErrorType::Exception(ex) => *ex,
                    _ => unreachable!("creating an exception raises an exception"),
                }))
            }
        }
    }
}

impl Raised {
    /// # Safety
    /// As for [`Exit::resume`].
    unsafe fn resume(self) -> ! {
        match self {
            // SAFETY: as the caller guarantees.
            Raised::Exception(ex) => unsafe { raise_pending(ex) },
            // SAFETY: as the caller guarantees.
            Raised::Jump(tag) => unsafe { rb_sys::rb_jump_tag(tag) },
        }
    }
}

/// Raises `ex` as a pending raise resumes.
///
/// # Safety
/// As for [`Exit::resume`]: only plain data alive in the callers' frames.
unsafe fn raise_pending(ex: Exception) -> ! {
    // SAFETY: `ex` is a live exception object; with it as the error info,
    // TAG_RAISE unwinds to the nearest rescue exactly as a raise does.
    unsafe {
        rb_sys::rb_set_errinfo(ex.as_raw());
        rb_sys::rb_jump_tag(TAG_RAISE)
    }
}

/// A method on instances of `Receiver`'s class that takes optional
/// arguments (arity -1): `args` is empty for a call without any, and holds
/// one Hash when the caller gave keywords.
pub trait MethodArgs {
    type Receiver: TypedData;
    fn call(ruby: &Ruby, rb_self: Obj<Self::Receiver>, args: &[Value]) -> Result<Value, Exit>;
}

/// Whether the method running now was given keywords (they are its last
/// argument, a Hash).
pub fn keywords_given() -> bool {
    // SAFETY: reads the running method's frame; called from a method's
    // body, with the GVL.
    unsafe { rb_sys::rb_keyword_given_p() != 0 }
}

/// Whether `v` wraps data of exactly `data_type` (which has no parent), read
/// inline from the object as the running Ruby lays it out (rb-sys's stable
/// API), where `rb_typeddata_is_kind_of` is a call into the VM.
#[inline]
fn wraps(v: Raw, data_type: *const rb_sys::rb_data_type_t) -> bool {
    use rb_sys::StableApiDefinition;
    let api = rb_sys::stable_api::get_default();
    // SAFETY: `v` is a live object (the receiver of a running method); each
    // read is made only once the one before has shown it is valid.
    !api.special_const_p(v)
        && unsafe {
            api.type_p(v, rb_sys::ruby_value_type::RUBY_T_DATA)
                && api.rtypeddata_p(v)
                && std::ptr::eq(api.rtypeddata_type(v), data_type)
        }
}

/// Defines `M` as `name` on `class` (arity -1), entered straight from the
/// VM: magnus's own wrapper converts the receiver under an `rb_protect` of
/// its own, about 13 ns on every call (docs/performance.md); this entry
/// checks the receiver's data type inline instead, and hands the arguments
/// over as the VM passed them (a call without any reads none). Panics
/// become `fatal`, as magnus's wrapper does; every [`Exit`] is resumed here,
/// once `M::call` and the `catch_unwind` around it have returned.
pub fn define_method_args<M: MethodArgs>(class: RClass, name: &CStr) {
    unsafe extern "C" fn entry<M: MethodArgs>(
        argc: std::ffi::c_int,
        argv: *const rb_sys::VALUE,
        rb_self: rb_sys::VALUE,
    ) -> rb_sys::VALUE {
        // SAFETY: the VM calls methods on its own thread, with the GVL.
        let ruby = unsafe { Ruby::get_unchecked() };
        let args: &[Value] = match usize::try_from(argc) {
            // SAFETY: the VM passes `argc` live values at `argv`, on its
            // stack for the whole call; Value is a transparent VALUE.
            Ok(n) if n > 0 && !argv.is_null() => unsafe { std::slice::from_raw_parts(argv as *const Value, n) },
            _ => &[],
        };
        let data_type = <M::Receiver as TypedData>::data_type() as *const magnus::DataType;
        // DataType is a transparent wrapper of rb_data_type_t.
        let result = if wraps(rb_self, data_type as *const rb_sys::rb_data_type_t) {
            // SAFETY: `rb_self` wraps an M::Receiver (checked just above);
            // Obj is a transparent wrapper of the object's VALUE.
            let obj = unsafe { std::mem::transmute::<Value, Obj<M::Receiver>>(Value::from_raw(rb_self)) };
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| M::call(&ruby, obj, args)))
                .unwrap_or_else(|panic| Err(Exit::Error(panic_error(&ruby, panic))))
        } else {
            // Only reachable by binding the method to another object.
            Err(Exit::Error(Error::new(ruby.exception_type_error(), "receiver is not a CircuitBreaker")))
        };
        match result {
            Ok(v) => v.as_raw(),
            // SAFETY: this is the entry; `M::call` has returned, and what
            // is left in this frame is plain data.
            Err(exit) => unsafe { exit.resume() },
        }
    }
    let f: unsafe extern "C" fn(std::ffi::c_int, *const rb_sys::VALUE, rb_sys::VALUE) -> rb_sys::VALUE = entry::<M>;
    // SAFETY: a method of arity -1 is called as f(argc, argv, self); the VM
    // casts the pointer back to that signature.
    unsafe {
        rb_sys::rb_define_method(
            class.as_raw(),
            name.as_ptr(),
            Some(std::mem::transmute::<
                unsafe extern "C" fn(std::ffi::c_int, *const rb_sys::VALUE, rb_sys::VALUE) -> rb_sys::VALUE,
                unsafe extern "C" fn() -> rb_sys::VALUE,
            >(f)),
            -1,
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

/// A raw handle of a Ruby object, for objects their holder keeps alive and
/// pinned (a mark function, `gc_register_mark_object`), so the handle never
/// dangles or moves.
pub type Raw = rb_sys::VALUE;

/// The handle of `v` (also an identity: equal handles, same object).
#[inline]
pub fn raw<T: ReprValue>(v: T) -> Raw {
    v.as_value().as_raw()
}

/// The object behind a handle.
///
/// # Safety
/// `raw` is the handle of an object that is still alive.
#[inline]
pub unsafe fn object(raw: Raw) -> Value {
    // SAFETY: the caller guarantees a live object.
    unsafe { Value::from_raw(raw) }
}

/// Whether `obj.kind_of?(module)`, without a method call. `module` must be
/// the handle of a live Module (Ruby raises otherwise).
#[inline]
pub fn kind_of<T: ReprValue>(obj: T, module: Raw) -> bool {
    // SAFETY: both are live objects and `module` a Module, as required.
    unsafe { rb_sys::rb_obj_is_kind_of(raw(obj), module) != rb_sys::Qfalse as Raw }
}

/// The bytes of `v` when it is a String (without copying them), for as long
/// as `v` lives.
///
/// # Safety
/// `v` must be a live object kept alive (by the running stack) while the
/// slice is used, and not be changed meanwhile.
unsafe fn bytes<'a>(v: Raw) -> Option<&'a [u8]> {
    // SAFETY: the caller's contract: a live object.
    let s = magnus::RString::from_value(unsafe { Value::from_raw(v) })?;
    // SAFETY: a live String's pointer and length; the caller keeps it
    // alive and unchanged while the slice is used.
    unsafe {
        let (ptr, len) = (rb_sys::RSTRING_PTR(raw(s)), rb_sys::RSTRING_LEN(raw(s)));
        Some(std::slice::from_raw_parts(ptr as *const u8, usize::try_from(len).unwrap_or(0)))
    }
}

/// The innermost Ruby frame of this thread's stack whose file does not
/// start with `skip`, and the line it is at; None when the innermost 14
/// Ruby frames are all under `skip`. Reads frames without capturing a backtrace
/// (`rb_profile_frames`, 2 frames then 12 more): its cost does not grow
/// with the stack's depth.
pub fn frame_outside(skip: &[u8]) -> Option<(Raw, i32)> {
    for (start, limit) in [(0, 2), (2, 12)] {
        let mut frames: [Raw; 12] = [0; 12];
        let mut lines = [0 as std::os::raw::c_int; 12];
        // SAFETY: the buffers hold `limit` entries or more; the frames are
        // live objects of the running stack, read under the GVL.
        let n = unsafe { rb_sys::rb_profile_frames(start, limit, frames.as_mut_ptr(), lines.as_mut_ptr()) };
        for (&frame, &line) in frames.iter().zip(&lines).take(n.max(0) as usize) {
            // SAFETY: `frame` is a frame rb_profile_frames returned just
            // now; its path Strings live as long as its code, on the stack.
            let path = unsafe { bytes(rb_sys::rb_profile_frame_path(frame)) };
            // The gem's own frames are under `skip` (a required file's path
            // is absolute: Ruby expands the load path).
            match path {
                Some(file) if line > 0 && !file.starts_with(skip) => return Some((frame, line)),
                _ => {}
            }
        }
        if n < limit {
            return None;
        }
    }
    None
}

/// A backtrace line for `frame` (from [`frame_outside`]) at `line`, in
/// Ruby's own form: `path:line:in `label'`.
pub fn frame_line(frame: Raw, line: i32) -> String {
    // SAFETY: `frame` is a live frame of the running stack; its Strings are
    // copied at once.
    let (path, label) =
        unsafe { (bytes(rb_sys::rb_profile_frame_path(frame)), bytes(rb_sys::rb_profile_frame_label(frame))) };
    let text = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or_default()).into_owned();
    format!("{}:{line}:in `{}'", text(path), text(label))
}

/// `hash[key]` for an Integer key that fits a Fixnum, without calling Ruby
/// code (a Hash of Integer keys runs none) and without `rb_protect`.
pub fn hash_fixnum_get(hash: magnus::RHash, key: i64) -> Option<Value> {
    // SAFETY: a live Hash; the key is a Fixnum (the caller keeps it below
    // 2^62), whose hash and eql? are the VM's own; Qundef marks a miss.
    let v = unsafe { rb_sys::rb_hash_lookup2(raw(hash), rb_sys::rb_int2inum(key as isize), rb_sys::Qundef as Raw) };
    (v != rb_sys::Qundef as Raw).then(|| {
        // SAFETY: a value the Hash holds.
        unsafe { Value::from_raw(v) }
    })
}

/// A new Array holding `v` alone (one call, no `rb_protect`).
pub fn array_of_one<T: ReprValue>(v: T) -> Value {
    let item = raw(v);
    // SAFETY: one live value; rb_ary_new_from_values copies it.
    unsafe { Value::from_raw(rb_sys::rb_ary_new_from_values(1, &item)) }
}

/// A new instance of `class`, without running `initialize`.
pub fn alloc(class: ExceptionClass) -> Value {
    // SAFETY: rb_obj_alloc on a live class returns a valid object.
    unsafe { Value::from_raw(rb_sys::rb_obj_alloc(raw(class))) }
}

/// Sets the instance variable `name` of `obj` without calling Ruby code.
pub fn ivar_set<T: ReprValue, V: ReprValue>(obj: T, name: Id, v: V) {
    // SAFETY: live objects and an interned name.
    unsafe { rb_sys::rb_ivar_set(raw(obj), name.as_raw(), raw(v)) };
}

/// Whether `module` has the constant `name` (no `const_missing` call).
pub fn const_defined<T: ReprValue>(module: T, name: Id) -> bool {
    // SAFETY: rb_const_defined only reads the constant table.
    unsafe { rb_sys::rb_const_defined(raw(module), name.as_raw()) != 0 }
}

/// Resumes the jump `tag` with `ensure` running on the way out (see
/// [`Exit::JumpEnsuring`]). An error `ensure` returns replaces the jump; it
/// is raised from the ensure function once `ensure` has returned and been
/// dropped (the C frames of `rb_ensure` own nothing Rust must drop).
///
/// # Safety
/// As for [`Exit::resume`].
unsafe fn resume_jump_ensuring(tag: i32, ensure: Box<dyn FnOnce() -> Result<(), Error>>) -> ! {
    type Ensure = Option<Box<dyn FnOnce() -> Result<(), Error>>>;
    unsafe extern "C" fn body(tag: Raw) -> Raw {
        // SAFETY: the caller of `resume_jump_ensuring` guarantees the jump.
        unsafe { rb_sys::rb_jump_tag(tag as i32) }
    }
    unsafe extern "C" fn run(data: Raw) -> Raw {
        // SAFETY: `data` points at the `Ensure` on the stack of
        // `resume_jump_ensuring`, which rb_ensure has not unwound yet.
        let ensure = unsafe { &mut *(data as *mut Ensure) };
        let failed = ensure.take().map(|f| f()).and_then(Result::err).map(Raised::from);
        if let Some(raised) = failed {
            // SAFETY: the closure and its error were consumed above; only
            // plain data is alive. Like an exception raised in a Ruby
            // `ensure`, it replaces the pending jump.
            unsafe { raised.resume() }
        }
        rb_sys::Qnil as Raw
    }
    let mut ensure: Ensure = Some(ensure);
    // SAFETY: both functions follow rb_ensure's contract; `ensure` is taken
    // (and so consumed) before the jump leaves this frame.
    unsafe {
        rb_sys::rb_ensure(Some(body), tag as Raw, Some(run), &mut ensure as *mut Ensure as Raw);
    }
    unreachable!("rb_ensure resumes the jump")
}

/// A marker a native method holds for as long as its Rust values live. In
/// checked builds (`CIRCUIT_BREAKER_PROFILE=checked`, debug assertions on)
/// each one alive is counted, so a spec proves that every way out of `call`
/// dropped what it owned before Ruby left (spec/circuit_breaker/exits_spec.rb);
/// in release builds it is nothing.
pub struct Live(());

#[cfg(debug_assertions)]
static LIVE: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

impl Live {
    #[inline]
    pub fn new() -> Self {
        #[cfg(debug_assertions)]
        LIVE.fetch_add(1, Ordering::Relaxed);
        Live(())
    }

    /// How many are alive now (checked builds with test hooks only).
    #[cfg(all(debug_assertions, feature = "test-hooks"))]
    pub fn count() -> isize {
        LIVE.load(Ordering::Relaxed)
    }
}

#[cfg(debug_assertions)]
impl Drop for Live {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}
