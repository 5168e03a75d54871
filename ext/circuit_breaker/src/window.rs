//! `CircuitBreaker::SlidingWindow` and `CircuitBreaker::TimeWindow`.
//!
//! A window object owns the record its breaker also uses: one lock around
//! the window and, once a breaker is built on it, the breaker's state. So the
//! window a user holds is live, and a breaker takes one lock per step. The
//! record is in one of the core's stores (`circuit_breaker_core::store`): on
//! the heap, or in a file mapped by every process that shares the breaker
//! (`shared:`); this module adds only how long a step waits for its lock.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};

use circuit_breaker_core::clock::{nanos_from_secs, secs_from_nanos};
use circuit_breaker_core::shm::{Key, MappedRecord, ShmError};
use circuit_breaker_core::{Counts, HeapStore, Nanos, Place, Published, Record, Store as CoreStore, WindowSpec};
use magnus::{
    method,
    prelude::*,
    scan_args::{get_kwargs, scan_args},
    typed_data::Obj,
    Error, RClass, RHash, Ruby, TryConvert, Value,
};

use crate::args;
use crate::clock::ClockSource;
use crate::errors::{arg_error, config_error_given, not_initialized, not_initialized_inspect, refuse_copy};

/// How long a step waits for a busy shared lock by default: the lock is
/// held for microseconds, so this long means a stuck holder.
pub const LOCK_WAIT: Nanos = 100_000_000;
/// How long a step waits once a wait has run out, until the lock is taken
/// again: a stopped holder costs each call at most this.
const STUCK_WAIT: Nanos = 1_000_000;

/// Why a step did not run under the lock.
pub enum Blocked {
    /// The lock stayed busy for the whole wait (a stuck holder).
    Busy,
    /// Ruby wanted the waiting thread back with this exception
    /// (`Thread#raise`, `Timeout`, a signal handler's, or a fiber
    /// scheduler's raised into the waiting fiber while the wait ran on
    /// another thread, docs/fibers.md): raised once Rust returns.
    Interrupted(Error),
    /// The lock is broken (not a dead owner, which is recovered).
    Failed(std::io::Error),
}

impl Blocked {
    /// As a Ruby exception, for steps that cannot be skipped.
    pub fn into_error(self, ruby: &Ruby, record: &LockedRecord) -> Error {
        let path = record.path().map(|p| p.display().to_string()).unwrap_or_default();
        match self {
            Blocked::Busy => Error::new(
                ruby.get_inner(&crate::errors::LOCK_TIMEOUT_ERROR),
                format!("the shared lock of {path} stayed busy (a process holding it is stopped or frozen); try again later"),
            ),
            Blocked::Failed(e) => crate::errors::system_error(ruby, &format!("shared lock of {path}"), e),
            Blocked::Interrupted(e) => e,
        }
    }
}

/// A record (a window and its breaker's state) behind one lock, with how
/// long a step waits for that lock and the clock the window is bound to:
/// what a window object and the breaker built on it hold together (in this
/// process's memory or, with `shared:`, in a file every process maps).
pub struct LockedRecord {
    store: Place,
    /// Nanoseconds a step waits for a busy lock (see docs/shared.md).
    wait: AtomicI64,
    /// Set when a wait ran out, cleared when the lock is next taken: while
    /// the holder stays stuck, later steps wait only [`STUCK_WAIT`].
    stuck: AtomicBool,
    spec: WindowSpec,
    /// Whether a breaker uses this window already.
    attached: AtomicBool,
    /// A TimeWindow's own `clock:`, if given.
    own_clock: Option<ClockSource>,
    /// The clock the window is bound to: its breaker's, else the one its
    /// first recorded call used. Unset, readers use `own_clock` (else the
    /// monotonic clock) without binding: reading decides nothing.
    pub clock: OnceLock<ClockSource>,
}

impl LockedRecord {
    /// A window of `spec`; `given` looks up the value the caller passed for
    /// an option, for the error message.
    fn new(
        ruby: &Ruby,
        spec: WindowSpec,
        clock: Option<ClockSource>,
        given: impl Fn(&str) -> Option<Value>,
    ) -> Result<Arc<Self>, Error> {
        let store = HeapStore::new(&spec, seed()).map_err(|e| config_error_given(ruby, e, given))?;
        Ok(Self::with_store(Place::Heap(store), spec, clock))
    }

    fn with_store(store: Place, spec: WindowSpec, own_clock: Option<ClockSource>) -> Arc<Self> {
        Arc::new(Self {
            store,
            wait: AtomicI64::new(LOCK_WAIT),
            stuck: AtomicBool::new(false),
            spec,
            attached: AtomicBool::new(false),
            own_clock,
            clock: OnceLock::new(),
        })
    }

    /// The TimeWindow's own `clock:`, if given.
    pub fn own_clock(&self) -> Option<&ClockSource> {
        self.own_clock.as_ref()
    }

    /// Binds a window given to a breaker to the breaker's `clock`, so the
    /// two never disagree about time (docs/semantics-permits.md): a window
    /// that has recorded nothing takes it, and forgets what reading it
    /// anchored; a time window that recorded on another clock is refused.
    pub fn follow(&self, ruby: &Ruby, clock: &ClockSource) -> Result<(), Error> {
        match self.clock.get() {
            Some(bound) if matches!(self.spec, WindowSpec::Time { .. }) && !bound.same_time(clock) => Err(arg_error(
                ruby,
                "window: has recorded calls on another clock than the breaker's; give the breaker the clock the window \
                 recorded on, or a window that has recorded nothing"
                    .to_owned(),
            )),
            Some(_) => Ok(()),
            None => {
                let _ = self.clock.set(clock.clone());
                self.with(|r| r.window.reset()).map_err(|b| b.into_error(ruby, self))
            }
        }
    }

    /// The record of a window like this one in the shared file of
    /// `namespace` and `name` for a configuration of `config_hash`.
    pub fn mapped(&self, ruby: &Ruby, namespace: &[u8], name: &[u8], config_hash: u64) -> Result<Arc<Self>, Error> {
        let key = Key { namespace, name, config_hash, spec: &self.spec };
        let shm_error = |e| match e {
            ShmError::Io { context, source } => crate::errors::system_error(ruby, &context, source),
            // Ruby's error for what the platform lacks (docs/install.md).
            e @ ShmError::Unsupported { .. } => Error::new(ruby.exception_not_imp_error(), e.to_string()),
            e => arg_error(ruby, e.to_string()),
        };
        let path = key.path().map_err(shm_error)?;
        let seed = seed();
        loop {
            // Opening may wait for another process (docs/shared.md): never
            // with the GVL, so this process's other threads, `Timeout` and
            // signals run meanwhile.
            let opened = crate::cruby::without_gvl(
                |stop: &AtomicBool| MappedRecord::open(&key, &path, seed, stop),
                AtomicBool::new(false),
            )?;
            match opened {
                Some(Ok(record)) => {
                    return Ok(Self::with_store(Place::Mapped { record, path }, self.spec, self.own_clock.clone()))
                }
                Some(Err(ShmError::Io { source, .. })) if source.kind() == std::io::ErrorKind::Interrupted => {}
                Some(Err(e)) => return Err(shm_error(e)),
                None => {}
            }
            // Ruby wanted the thread back: raise what it has pending, else
            // open again.
            ruby.thread_check_ints()?;
        }
    }

    /// The window's settings.
    pub fn spec(&self) -> WindowSpec {
        self.spec
    }

    /// The shared file, if the record is in one.
    pub fn path(&self) -> Option<&Path> {
        self.store.path()
    }

    /// Runs `f` on the record under the lock. `f` must not call Ruby. A
    /// lock that stays busy (a stuck process holding a shared one) is
    /// waited for without the GVL, up to the bound; then the step is not run.
    #[inline]
    pub fn with<T>(&self, f: impl FnOnce(&mut Record) -> T) -> Result<T, Blocked> {
        let mut guard = match self.store.try_lock() {
            Ok(Some(g)) => g,
            Ok(None) => self.wait()?,
            Err(e) => return Err(Blocked::Failed(e)),
        };
        Ok(self.store.update(&mut guard, f))
    }

    /// What the store publishes for callers that take no lock.
    #[inline]
    pub fn published(&self) -> &Published {
        self.store.published()
    }

    /// The slots of the breaker's concurrency cap (docs/concurrency.md):
    /// this process's, or the host's for a shared record.
    #[inline]
    pub fn slots(&self) -> circuit_breaker_core::slots::Slots<'_> {
        self.store.slots()
    }

    /// Sets how long this process's steps wait for a busy lock.
    #[cfg(feature = "test-hooks")]
    pub fn set_lock_wait(&self, wait: Nanos) {
        self.wait.store(wait, Ordering::Relaxed);
    }

    /// Whether the record is in a file every process of the host maps
    /// (its counters are host-wide).
    pub fn is_mapped(&self) -> bool {
        self.store.is_mapped()
    }

    /// Gives up a claim whose breaker could not be built.
    pub fn detach(&self) {
        self.attached.store(false, Ordering::Release);
    }

    /// Claims the window for a breaker; false when one has it already.
    pub fn attach(&self) -> bool {
        !self.attached.swap(true, Ordering::AcqRel)
    }

    /// Holds the lock of a shared record for `ms`, doing nothing (tests).
    #[cfg(feature = "test-hooks")]
    pub fn hold_lock_for_test(&self, ms: u64) -> std::io::Result<()> {
        self.store.hold_lock_for_test(ms)
    }

    /// The window's slow-call threshold.
    pub fn slow_threshold_ms(&self) -> f64 {
        match self.spec {
            WindowSpec::Count { slow_threshold_ms, .. } | WindowSpec::Time { slow_threshold_ms, .. } => {
                slow_threshold_ms
            }
        }
    }

    /// The time for a reader: the bound clock, else the window's own.
    pub fn now(&self) -> Nanos {
        self.clock.get().or(self.own_clock.as_ref()).map_or_else(|| ClockSource::Monotonic.now(), ClockSource::now)
    }

    /// The time for a record: the first one binds the window to its clock.
    fn recording_now(&self) -> Nanos {
        self.clock.get_or_init(|| self.own_clock.clone().unwrap_or(ClockSource::Monotonic)).now()
    }

    fn counts(&self, ruby: &Ruby) -> Result<Counts, Error> {
        let now = self.now();
        self.with(|r| r.window.counts(now)).map_err(|b| b.into_error(ruby, self))
    }
}

impl LockedRecord {
    /// Waits for the busy lock without the GVL, up to the bound. The lock
    /// is taken back with the GVL held: the wait only watches for it to
    /// come free (and recovers a dead owner), so this process never holds
    /// a shared lock while it waits for its GVL (which other threads may
    /// keep for a time slice).
    #[cold]
    fn wait(&self) -> Result<<Place as CoreStore>::Guard<'_>, Blocked> {
        let store = &self.store;
        let wait = if self.stuck.load(Ordering::Relaxed) { STUCK_WAIT } else { self.wait.load(Ordering::Relaxed) };
        // The host's clock: a test's time travel never lengthens a wait.
        let clock = ClockSource::Monotonic.untravelled();
        let deadline = clock.now().saturating_add(wait);
        loop {
            let left = deadline.saturating_sub(clock.now());
            // (freed, stopped): whether the lock came free, and whether Ruby
            // asked for the thread back meanwhile.
            let freed = crate::cruby::without_gvl(
                |stop: &AtomicBool| (store.lock_within(left, stop).map(|g| g.is_some()), stop.load(Ordering::Acquire)),
                AtomicBool::new(false),
            );
            match freed {
                Ok(Some((Ok(true), _))) => {}
                Ok(Some((Ok(false), false))) => {
                    self.stuck.store(true, Ordering::Relaxed);
                    return Err(Blocked::Busy);
                }
                // Ruby asked for the thread back, or had an interrupt
                // pending and did not wait: its exception is taken here
                // (left pending, it would fire while a lock error is
                // built, which aborted the process), and an interrupt that
                // raises nothing (a time slice's tick, frequent on Ruby
                // 3.4) goes back to waiting, up to the same deadline.
                Ok(Some((Ok(false), true)) | None) => {
                    if let Err(e) = Ruby::get().map_or(Ok(()), |ruby| ruby.thread_check_ints()) {
                        return Err(Blocked::Interrupted(e));
                    }
                    continue;
                }
                Ok(Some((Err(e), _))) => return Err(Blocked::Failed(e)),
                Err(e) => return Err(Blocked::Interrupted(e)),
            }
            match store.try_lock() {
                Ok(Some(guard)) => {
                    self.stuck.store(false, Ordering::Relaxed);
                    return Ok(guard);
                }
                // Taken again meanwhile by another process: wait on.
                Ok(None) if left > 0 => {}
                Ok(None) => return Err(Blocked::Busy),
                Err(e) => return Err(Blocked::Failed(e)),
            }
        }
    }
}

/// A seed for the jitter of open durations: differs per record and per run.
fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_i64(ClockSource::Monotonic.now());
    h.finish()
}

/// Behaviour common to both window classes.
pub trait WindowObject: Sized + magnus::TypedData {
    const CLASS: &'static str;

    fn cell(&self) -> &OnceLock<Arc<LockedRecord>>;

    /// The record, or a clear error when `initialize` never ran.
    fn record(&self, ruby: &Ruby) -> Result<&Arc<LockedRecord>, Error> {
        self.cell().get().ok_or_else(|| not_initialized(ruby, Self::CLASS))
    }

    /// Sets the record up, once (`initialize`'s native half).
    fn set(&self, ruby: &Ruby, record: Arc<LockedRecord>) -> Result<(), Error> {
        self.cell()
            .set(record)
            .map_err(|_| Error::new(ruby.exception_runtime_error(), format!("{} is already initialized", Self::CLASS)))
    }
}

/// Allocated empty; `initialize` (lib/circuit_breaker/windows.rb) sets it up.
#[derive(Default)]
#[magnus::wrap(class = "CircuitBreaker::SlidingWindow", free_immediately, size)]
pub struct SlidingWindow(OnceLock<Arc<LockedRecord>>);

/// Allocated empty; `initialize` (lib/circuit_breaker/windows.rb) sets it up.
#[derive(Default)]
#[magnus::wrap(class = "CircuitBreaker::TimeWindow", free_immediately, size)]
pub struct TimeWindow(OnceLock<Arc<LockedRecord>>);

impl WindowObject for SlidingWindow {
    const CLASS: &'static str = "CircuitBreaker::SlidingWindow";

    fn cell(&self) -> &OnceLock<Arc<LockedRecord>> {
        &self.0
    }
}

impl WindowObject for TimeWindow {
    const CLASS: &'static str = "CircuitBreaker::TimeWindow";

    fn cell(&self) -> &OnceLock<Arc<LockedRecord>> {
        &self.0
    }
}

/// The window of a `window:` argument.
pub fn record_of(ruby: &Ruby, v: Value) -> Result<Arc<LockedRecord>, Error> {
    if let Ok(w) = <&SlidingWindow>::try_convert(v) {
        return Ok(w.record(ruby)?.clone());
    }
    if let Ok(w) = <&TimeWindow>::try_convert(v) {
        return Ok(w.record(ruby)?.clone());
    }
    Err(crate::errors::type_error(
        ruby,
        "window",
        "nil, a CircuitBreaker::SlidingWindow or a CircuitBreaker::TimeWindow",
        v,
    ))
}

/// The window of a breaker built with `window: nil`: a new
/// `SlidingWindow.new` with its defaults (lib/circuit_breaker/windows.rb),
/// made here so that building a breaker crosses into Rust once.
pub fn default_window(ruby: &Ruby) -> Result<Arc<LockedRecord>, Error> {
    LockedRecord::new(ruby, WindowSpec::Count { size: 100, slow_threshold_ms: 800.0 }, None, |_| None)
}

/// The Ruby window object of a record.
pub fn wrap(ruby: &Ruby, record: Arc<LockedRecord>) -> Value {
    match record.spec {
        WindowSpec::Count { .. } => ruby.obj_wrap(SlidingWindow(OnceLock::from(record))).as_value(),
        WindowSpec::Time { .. } => ruby.obj_wrap(TimeWindow(OnceLock::from(record))).as_value(),
    }
}

impl SlidingWindow {
    /// `initialize`'s native half: the keywords converted (ranges are the
    /// core's to check).
    fn setup(ruby: &Ruby, rb_self: &Self, size: Value, slow: Value) -> Result<(), Error> {
        let given = |name: &str| Some(if name == "size" { size } else { slow });
        let size = args::integer(ruby, "size", size)?;
        let slow_threshold_ms = args::float(ruby, "slow_threshold_ms", slow)?;
        rb_self.set(ruby, LockedRecord::new(ruby, WindowSpec::Count { size, slow_threshold_ms }, None, given)?)
    }

    fn size(ruby: &Ruby, rb_self: &Self) -> Result<i64, Error> {
        Ok(match rb_self.record(ruby)?.spec {
            WindowSpec::Count { size, .. } => size,
            WindowSpec::Time { .. } => 0,
        })
    }

    fn inspect(ruby: &Ruby, rb_self: Obj<Self>) -> Result<String, Error> {
        if rb_self.cell().get().is_none() {
            return Ok(not_initialized_inspect(&class_name(rb_self)));
        }
        let c = rb_self.record(ruby)?.counts(ruby)?;
        Ok(format!(
            "#<{} size={} total={} failures={} slow_calls={}>",
            class_name(rb_self),
            Self::size(ruby, &rb_self)?,
            c.total,
            c.failures,
            c.slow_calls
        ))
    }
}

impl TimeWindow {
    /// `initialize`'s native half: the keywords converted (ranges are the
    /// core's to check).
    fn setup(
        ruby: &Ruby,
        rb_self: &Self,
        seconds: Value,
        buckets: Value,
        slow: Value,
        clock: Value,
    ) -> Result<(), Error> {
        let given = |name: &str| match name {
            "seconds" => Some(seconds),
            "buckets" => Some(buckets),
            "slow_threshold_ms" => Some(slow),
            _ => None,
        };
        let spec = WindowSpec::Time {
            seconds: args::float(ruby, "seconds", seconds)?,
            buckets: args::integer(ruby, "buckets", buckets)?,
            slow_threshold_ms: args::float(ruby, "slow_threshold_ms", slow)?,
        };
        let clock = ClockSource::from_arg(ruby, clock)?;
        rb_self.set(ruby, LockedRecord::new(ruby, spec, clock, given)?)
    }

    fn seconds(ruby: &Ruby, rb_self: &Self) -> Result<f64, Error> {
        Ok(match rb_self.record(ruby)?.spec {
            // As the window keeps it: whole nanoseconds.
            WindowSpec::Time { seconds, .. } => secs_from_nanos(nanos_from_secs(seconds)),
            WindowSpec::Count { .. } => 0.0,
        })
    }

    fn buckets(ruby: &Ruby, rb_self: &Self) -> Result<i64, Error> {
        Ok(match rb_self.record(ruby)?.spec {
            WindowSpec::Time { buckets, .. } => buckets,
            WindowSpec::Count { .. } => 0,
        })
    }

    fn inspect(ruby: &Ruby, rb_self: Obj<Self>) -> Result<String, Error> {
        if rb_self.cell().get().is_none() {
            return Ok(not_initialized_inspect(&class_name(rb_self)));
        }
        let c = rb_self.record(ruby)?.counts(ruby)?;
        Ok(format!(
            "#<{} seconds={} buckets={} total={} failures={} slow_calls={}>",
            class_name(rb_self),
            Self::seconds(ruby, &rb_self)?,
            Self::buckets(ruby, &rb_self)?,
            c.total,
            c.failures,
            c.slow_calls
        ))
    }
}

/// The name of `obj`'s class (a subclass's own name).
fn class_name<T: magnus::TypedData>(obj: Obj<T>) -> String {
    // SAFETY: the name is copied out at once.
    unsafe { obj.class().name() }.into_owned()
}

fn slow_threshold_ms<T: WindowObject>(ruby: &Ruby, rb_self: &T) -> Result<f64, Error> {
    Ok(rb_self.record(ruby)?.slow_threshold_ms())
}

fn record<T: WindowObject>(ruby: &Ruby, rb_self: Obj<T>, args: &[Value]) -> Result<Obj<T>, Error> {
    let kw = scan_args::<(), (), (), (), RHash, ()>(args)?.keywords;
    let kw = get_kwargs::<_, (Value, Value), (), ()>(kw, &["duration_ms", "success"], &[])?;
    let (duration, success) = kw.required;
    let duration_ns = args::duration_ms(ruby, duration)? * 1e6;
    let record = rb_self.record(ruby)?;
    let now = record.recording_now();
    match record.with(|r| r.window.record(duration_ns, success.to_bool(), now)) {
        // As a breaker's record: dropped and counted; an interrupt that cut
        // the wait is raised.
        Err(Blocked::Busy) => record.published().count_dropped(),
        Err(Blocked::Interrupted(e)) => {
            record.published().count_dropped();
            return Err(e);
        }
        Err(b @ Blocked::Failed(_)) => return Err(b.into_error(ruby, record)),
        Ok(()) => {}
    }
    Ok(rb_self)
}

fn total<T: WindowObject>(ruby: &Ruby, rb_self: &T) -> Result<u64, Error> {
    Ok(rb_self.record(ruby)?.counts(ruby)?.total)
}

fn failures<T: WindowObject>(ruby: &Ruby, rb_self: &T) -> Result<u64, Error> {
    Ok(rb_self.record(ruby)?.counts(ruby)?.failures)
}

fn slow_calls<T: WindowObject>(ruby: &Ruby, rb_self: &T) -> Result<u64, Error> {
    Ok(rb_self.record(ruby)?.counts(ruby)?.slow_calls)
}

fn error_rate<T: WindowObject>(ruby: &Ruby, rb_self: &T) -> Result<f64, Error> {
    Ok(rb_self.record(ruby)?.counts(ruby)?.error_rate())
}

fn slow_call_rate<T: WindowObject>(ruby: &Ruby, rb_self: &T) -> Result<f64, Error> {
    Ok(rb_self.record(ruby)?.counts(ruby)?.slow_call_rate())
}

fn reset<T: WindowObject>(ruby: &Ruby, rb_self: Obj<T>) -> Result<Obj<T>, Error> {
    let record = rb_self.record(ruby)?;
    record.with(|r| r.window.reset()).map_err(|b| b.into_error(ruby, record))?;
    Ok(rb_self)
}

macro_rules! define_common {
    ($class:expr, $t:ty) => {{
        let class: RClass = $class;
        class.define_alloc_func::<$t>();
        class.define_private_method("initialize_copy", method!(refuse_copy, 1))?;
        class.define_method("record", method!(record::<$t>, -1))?;
        class.define_method("total", method!(total::<$t>, 0))?;
        class.define_method("failures", method!(failures::<$t>, 0))?;
        class.define_method("slow_calls", method!(slow_calls::<$t>, 0))?;
        class.define_method("error_rate", method!(error_rate::<$t>, 0))?;
        class.define_method("slow_call_rate", method!(slow_call_rate::<$t>, 0))?;
        class.define_method("reset", method!(reset::<$t>, 0))?;
        class.define_method("slow_threshold_ms", method!(slow_threshold_ms::<$t>, 0))?;
    }};
}

pub fn init(ruby: &Ruby, namespace: RClass) -> Result<(), Error> {
    let sliding = namespace.define_class("SlidingWindow", ruby.class_object())?;
    define_common!(sliding, SlidingWindow);
    sliding.define_private_method("__setup", method!(SlidingWindow::setup, 2))?;
    sliding.define_method("size", method!(SlidingWindow::size, 0))?;
    sliding.define_method("inspect", method!(SlidingWindow::inspect, 0))?;

    let timed = namespace.define_class("TimeWindow", ruby.class_object())?;
    define_common!(timed, TimeWindow);
    timed.define_private_method("__setup", method!(TimeWindow::setup, 4))?;
    timed.define_method("seconds", method!(TimeWindow::seconds, 0))?;
    timed.define_method("buckets", method!(TimeWindow::buckets, 0))?;
    timed.define_method("inspect", method!(TimeWindow::inspect, 0))?;
    Ok(())
}
