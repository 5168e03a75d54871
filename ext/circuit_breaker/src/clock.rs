//! `CircuitBreaker::ManualClock` and the clock a breaker or window reads.

use std::sync::Arc;

use circuit_breaker_core::clock::{nanos_from_secs, secs_from_nanos};
use circuit_breaker_core::{Clock, CoarseClock, ManualClock as CoreManualClock, MonotonicClock, Nanos};
use magnus::{function, method, prelude::*, scan_args::scan_args, typed_data::Obj, Error, RClass, Ruby, Value};

use crate::args;
use crate::errors::arg_error;

/// Where `now` comes from. Reading it never calls Ruby.
#[derive(Clone, Debug)]
pub enum ClockSource {
    Monotonic,
    /// The monotonic clock at tick resolution: a breaker uses it when the
    /// tick is under 1% of its slow-call threshold (4 ms against 800 ms),
    /// since reading it costs a fraction of a precise read.
    Coarse,
    Manual(Arc<CoreManualClock>),
}

impl ClockSource {
    #[inline]
    pub fn now(&self) -> Nanos {
        match self {
            ClockSource::Monotonic => MonotonicClock.now(),
            ClockSource::Coarse => CoarseClock.now(),
            ClockSource::Manual(c) => c.now(),
        }
    }

    /// The system clock precise enough for calls that are slow from
    /// `slow_threshold_ms` on.
    pub fn monotonic_for(slow_threshold_ms: f64) -> Self {
        match CoarseClock::resolution() {
            Some(res) if (res as f64) * 100.0 <= slow_threshold_ms * 1e6 => ClockSource::Coarse,
            _ => ClockSource::Monotonic,
        }
    }

    /// `clock:` as given: nil (monotonic) or a ManualClock.
    pub fn from_arg(ruby: &Ruby, v: Value) -> Result<Option<Self>, Error> {
        if v.is_nil() {
            return Ok(None);
        }
        match <&ManualClock>::try_convert(v) {
            Ok(c) => Ok(Some(ClockSource::Manual(c.0.clone()))),
            Err(_) => Err(crate::errors::type_error(ruby, "clock", "nil or a CircuitBreaker::ManualClock", v)),
        }
    }
}

/// A clock that moves only when told: tests use it instead of `sleep`.
#[magnus::wrap(class = "CircuitBreaker::ManualClock", free_immediately, size)]
pub struct ManualClock(Arc<CoreManualClock>);

fn finite_secs(ruby: &Ruby, name: &str, v: Value, min: f64) -> Result<f64, Error> {
    let secs = args::float(ruby, name, v)?;
    if secs.is_finite() && secs >= min {
        Ok(secs)
    } else {
        let range = if min == 0.0 { "a finite Numeric >= 0" } else { "a finite Numeric" };
        Err(arg_error(ruby, format!("{name} must be {range} (got {secs})")))
    }
}

impl ManualClock {
    fn new(ruby: &Ruby, args: &[Value]) -> Result<Self, Error> {
        let args = scan_args::<(), (Option<Value>,), (), (), (), ()>(args)?;
        let start = match args.optional.0 {
            Some(v) => finite_secs(ruby, "start", v, f64::MIN)?,
            None => 0.0,
        };
        Ok(Self(Arc::new(CoreManualClock::new(nanos_from_secs(start)))))
    }

    fn now(&self) -> f64 {
        secs_from_nanos(self.0.now())
    }

    fn advance(ruby: &Ruby, rb_self: Obj<Self>, seconds: Value) -> Result<Obj<Self>, Error> {
        let secs = finite_secs(ruby, "seconds", seconds, 0.0)?;
        rb_self.0.advance(nanos_from_secs(secs));
        Ok(rb_self)
    }

    fn inspect(&self) -> String {
        format!("#<CircuitBreaker::ManualClock now={}>", self.now())
    }
}

pub fn init(ruby: &Ruby, namespace: RClass) -> Result<(), Error> {
    let class = namespace.define_class("ManualClock", ruby.class_object())?;
    class.undef_default_alloc_func();
    class.define_singleton_method("new", function!(ManualClock::new, -1))?;
    class.define_method("now", method!(ManualClock::now, 0))?;
    class.define_method("advance", method!(ManualClock::advance, 1))?;
    class.define_method("inspect", method!(ManualClock::inspect, 0))?;
    Ok(())
}
