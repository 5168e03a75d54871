//! `CircuitBreaker::SlidingWindow` and `CircuitBreaker::TimeWindow`.
//!
//! A window object owns the record its breaker also uses: one lock around
//! the window and, once a breaker is built on it, the breaker's state. So the
//! window a user holds is live, and a breaker takes one lock per step. The
//! record is on the heap, or in a file mapped by every process that shares
//! the breaker (`shared:`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use circuit_breaker_core::clock::{nanos_from_secs, secs_from_nanos};
use circuit_breaker_core::shm::{MappedRecord, ShmError};
use circuit_breaker_core::{Counts, HeapRecord, Nanos, Permit, Record, WindowSpec};
use magnus::{
    function, method,
    prelude::*,
    scan_args::{get_kwargs, scan_args},
    typed_data::Obj,
    Error, RClass, RHash, Ruby, TryConvert, Value,
};
use parking_lot::Mutex;

use crate::args;
use crate::clock::ClockSource;
use crate::errors::{arg_error, config_error};

enum Store {
    Heap(Mutex<HeapRecord>),
    Mapped(MappedRecord),
}

/// What window objects and their breaker share: the record (window and
/// breaker state) behind one lock.
pub struct Shared {
    store: Store,
    /// A heap record's published word (a mapped one keeps it in its file).
    published: AtomicU64,
    spec: WindowSpec,
    /// Whether a breaker uses this window already.
    attached: AtomicBool,
    /// The clock a TimeWindow reads: its own `clock:`, else its breaker's,
    /// else (unset) the monotonic clock.
    pub clock: OnceLock<ClockSource>,
}

impl Shared {
    fn new(ruby: &Ruby, spec: WindowSpec, clock: Option<ClockSource>) -> Result<Arc<Self>, Error> {
        let record = HeapRecord::new(&spec, seed()).map_err(|e| config_error(ruby, e))?;
        Ok(Self::with_store(Store::Heap(Mutex::new(record)), spec, clock))
    }

    fn with_store(store: Store, spec: WindowSpec, clock: Option<ClockSource>) -> Arc<Self> {
        let shared = Self { store, published: AtomicU64::new(0), spec, attached: AtomicBool::new(false), clock: OnceLock::new() };
        if let Some(c) = clock {
            let _ = shared.clock.set(c);
        }
        Arc::new(shared)
    }

    /// The record of a window like this one, in the file at `path`, shared
    /// with every process that opens it with the same `config_hash`.
    pub fn mapped(&self, ruby: &Ruby, path: &Path, config_hash: u64) -> Result<Arc<Self>, Error> {
        let record = MappedRecord::open(path, &self.spec, config_hash, seed()).map_err(|e| match e {
            ShmError::Mismatch(m) => arg_error(ruby, format!("shared: {m}")),
            ShmError::Io { context, source } => crate::errors::system_error(ruby, &context, source),
        })?;
        Ok(Self::with_store(Store::Mapped(record), self.spec, self.clock.get().cloned()))
    }

    /// Runs `f` on the record under the lock. `f` must not call Ruby.
    #[inline]
    pub fn with<T>(&self, f: impl FnOnce(&mut Record) -> T) -> T {
        let published = self.published();
        let step = |r: &mut Record| {
            let out = f(r);
            published.store(r.breaker.published(), Ordering::Release);
            out
        };
        match &self.store {
            Store::Heap(h) => step(h.lock().get()),
            Store::Mapped(m) => m.with(step),
        }
    }

    /// Whether the record is in a file every process of the host maps
    /// (its counters are host-wide).
    pub fn is_mapped(&self) -> bool {
        matches!(self.store, Store::Mapped(_))
    }

    fn published(&self) -> &AtomicU64 {
        match &self.store {
            Store::Heap(_) => &self.published,
            Store::Mapped(m) => m.published(),
        }
    }

    /// A permit taken without the lock, when the breaker admits every call.
    #[inline]
    pub fn admitting(&self) -> Option<Permit> {
        Permit::admitting(self.published().load(Ordering::Acquire))
    }

    /// Claims the window for a breaker; false when one has it already.
    pub fn attach(&self) -> bool {
        !self.attached.swap(true, Ordering::AcqRel)
    }

    /// Holds the lock of a shared record for `ms`, doing nothing (tests).
    pub fn hold_lock_for_test(&self, ms: u64) {
        if let Store::Mapped(m) = &self.store {
            m.hold_lock_for_test(ms);
        }
    }

    /// The window's slow-call threshold.
    pub fn slow_threshold_ms(&self) -> f64 {
        match self.spec {
            WindowSpec::Count { slow_threshold_ms, .. } | WindowSpec::Time { slow_threshold_ms, .. } => slow_threshold_ms,
        }
    }

    pub fn now(&self) -> Nanos {
        self.clock.get().map_or_else(|| ClockSource::Monotonic.now(), ClockSource::now)
    }

    fn counts(&self) -> Counts {
        let now = self.now();
        self.with(|r| r.window.counts(now))
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
    fn shared(&self) -> &Arc<Shared>;
}

#[magnus::wrap(class = "CircuitBreaker::SlidingWindow", free_immediately, size)]
pub struct SlidingWindow {
    shared: Arc<Shared>,
}

#[magnus::wrap(class = "CircuitBreaker::TimeWindow", free_immediately, size)]
pub struct TimeWindow {
    shared: Arc<Shared>,
}

impl WindowObject for SlidingWindow {
    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl WindowObject for TimeWindow {
    fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

/// The window of a `window:` argument, or None for nil.
pub fn shared_of(ruby: &Ruby, v: Value) -> Result<Option<Arc<Shared>>, Error> {
    if v.is_nil() {
        return Ok(None);
    }
    if let Ok(w) = <&SlidingWindow>::try_convert(v) {
        return Ok(Some(w.shared.clone()));
    }
    if let Ok(w) = <&TimeWindow>::try_convert(v) {
        return Ok(Some(w.shared.clone()));
    }
    Err(crate::errors::type_error(ruby, "window", "nil, a CircuitBreaker::SlidingWindow or a CircuitBreaker::TimeWindow", v))
}

const DEFAULT_SIZE: i64 = 100;
const DEFAULT_SLOW_MS: f64 = 800.0;

/// The record of a default `SlidingWindow.new` for a breaker given none.
pub fn default_shared(ruby: &Ruby) -> Result<Arc<Shared>, Error> {
    Shared::new(ruby, WindowSpec::Count { size: DEFAULT_SIZE, slow_threshold_ms: DEFAULT_SLOW_MS }, None)
}

/// The Ruby window object of a record.
pub fn wrap(ruby: &Ruby, shared: Arc<Shared>) -> Value {
    match shared.spec {
        WindowSpec::Count { .. } => ruby.obj_wrap(SlidingWindow { shared }).as_value(),
        WindowSpec::Time { .. } => ruby.obj_wrap(TimeWindow { shared }).as_value(),
    }
}

fn kwargs(args: &[Value]) -> Result<RHash, Error> {
    Ok(scan_args::<(), (), (), (), RHash, ()>(args)?.keywords)
}

impl SlidingWindow {
    fn new(ruby: &Ruby, args: &[Value]) -> Result<Self, Error> {
        let kw = get_kwargs::<_, (), (Option<Value>, Option<Value>), ()>(kwargs(args)?, &[], &["size", "slow_threshold_ms"])?;
        let (size, slow) = kw.optional;
        let size = size.map_or(Ok(DEFAULT_SIZE), |v| args::integer(ruby, "size", v))?;
        let slow = slow.map_or(Ok(DEFAULT_SLOW_MS), |v| args::float(ruby, "slow_threshold_ms", v))?;
        Ok(Self { shared: Shared::new(ruby, WindowSpec::Count { size, slow_threshold_ms: slow }, None)? })
    }

    fn size(&self) -> i64 {
        match self.shared.spec {
            WindowSpec::Count { size, .. } => size,
            WindowSpec::Time { .. } => 0,
        }
    }

    fn inspect(&self) -> String {
        let c = self.shared.counts();
        format!(
            "#<CircuitBreaker::SlidingWindow size={} total={} failures={} slow_calls={}>",
            self.size(),
            c.total,
            c.failures,
            c.slow_calls
        )
    }
}

impl TimeWindow {
    fn new(ruby: &Ruby, args: &[Value]) -> Result<Self, Error> {
        let kw = get_kwargs::<_, (), (Option<Value>, Option<Value>, Option<Value>, Option<Value>), ()>(
            kwargs(args)?,
            &[],
            &["seconds", "buckets", "slow_threshold_ms", "clock"],
        )?;
        let (seconds, buckets, slow, clock) = kw.optional;
        let seconds = seconds.map_or(Ok(10.0), |v| args::float(ruby, "seconds", v))?;
        let buckets = buckets.map_or(Ok(10), |v| args::integer(ruby, "buckets", v))?;
        let slow = slow.map_or(Ok(DEFAULT_SLOW_MS), |v| args::float(ruby, "slow_threshold_ms", v))?;
        let clock = clock.map_or(Ok(None), |v| ClockSource::from_arg(ruby, v))?;
        let spec = WindowSpec::Time { seconds, buckets, slow_threshold_ms: slow };
        Ok(Self { shared: Shared::new(ruby, spec, clock)? })
    }

    fn seconds(&self) -> f64 {
        match self.shared.spec {
            // As the window keeps it: whole nanoseconds.
            WindowSpec::Time { seconds, .. } => secs_from_nanos(nanos_from_secs(seconds)),
            WindowSpec::Count { .. } => 0.0,
        }
    }

    fn buckets(&self) -> i64 {
        match self.shared.spec {
            WindowSpec::Time { buckets, .. } => buckets,
            WindowSpec::Count { .. } => 0,
        }
    }

    fn inspect(&self) -> String {
        let c = self.shared.counts();
        format!(
            "#<CircuitBreaker::TimeWindow seconds={} buckets={} total={} failures={} slow_calls={}>",
            self.seconds(),
            self.buckets(),
            c.total,
            c.failures,
            c.slow_calls
        )
    }
}

fn slow_threshold_ms<T: WindowObject>(rb_self: &T) -> f64 {
    rb_self.shared().slow_threshold_ms()
}

fn record<T: WindowObject>(ruby: &Ruby, rb_self: Obj<T>, args: &[Value]) -> Result<Obj<T>, Error> {
    let kw = get_kwargs::<_, (Value, Value), (), ()>(kwargs(args)?, &["duration_ms", "success"], &[])?;
    let (duration, success) = kw.required;
    let duration_ms = args::duration_ms(ruby, duration)?;
    let shared = rb_self.shared();
    let now = shared.now();
    shared.with(|r| r.window.record(duration_ms, success.to_bool(), now));
    Ok(rb_self)
}

fn total<T: WindowObject>(rb_self: &T) -> u64 {
    rb_self.shared().counts().total
}

fn failures<T: WindowObject>(rb_self: &T) -> u64 {
    rb_self.shared().counts().failures
}

fn slow_calls<T: WindowObject>(rb_self: &T) -> u64 {
    rb_self.shared().counts().slow_calls
}

fn error_rate<T: WindowObject>(rb_self: &T) -> f64 {
    rb_self.shared().counts().error_rate()
}

fn slow_call_rate<T: WindowObject>(rb_self: &T) -> f64 {
    rb_self.shared().counts().slow_call_rate()
}

fn reset<T: WindowObject>(rb_self: Obj<T>) -> Obj<T> {
    rb_self.shared().with(|r| r.window.reset());
    rb_self
}

macro_rules! define_common {
    ($class:expr, $t:ty) => {{
        let class: RClass = $class;
        class.undef_default_alloc_func();
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
    sliding.define_singleton_method("new", function!(SlidingWindow::new, -1))?;
    sliding.define_method("size", method!(SlidingWindow::size, 0))?;
    sliding.define_method("inspect", method!(SlidingWindow::inspect, 0))?;

    let timed = namespace.define_class("TimeWindow", ruby.class_object())?;
    define_common!(timed, TimeWindow);
    timed.define_singleton_method("new", function!(TimeWindow::new, -1))?;
    timed.define_method("seconds", method!(TimeWindow::seconds, 0))?;
    timed.define_method("buckets", method!(TimeWindow::buckets, 0))?;
    timed.define_method("inspect", method!(TimeWindow::inspect, 0))?;
    Ok(())
}
