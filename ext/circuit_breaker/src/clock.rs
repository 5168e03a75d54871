//! `CircuitBreaker::ManualClock` and the clock a breaker or window reads.

use std::sync::{Arc, OnceLock};

use circuit_breaker_core::clock::secs_from_nanos;
use circuit_breaker_core::{Clock, CoarseClock, HostClock, ManualClock as CoreManualClock, MonotonicClock, Nanos};
use magnus::{function, method, prelude::*, typed_data::Obj, Error, RClass, Ruby, Value};

use crate::args;
use crate::errors::{config_error_given, not_initialized, not_initialized_inspect, refuse_copy};

/// Where `now` comes from. Reading it never calls Ruby.
#[derive(Clone, Debug)]
pub enum ClockSource {
    Monotonic,
    /// The monotonic clock at tick resolution: a breaker uses it when the
    /// tick is under 1% of its slow-call threshold (4 ms against 800 ms),
    /// since reading it costs a fraction of a precise read.
    Coarse,
    /// Either, without the test helpers' offset: a `shared:` breaker's
    /// (docs/testing.md).
    Host(HostClock),
    Manual(Arc<CoreManualClock>),
}

impl ClockSource {
    #[inline]
    pub fn now(&self) -> Nanos {
        match self {
            ClockSource::Monotonic => MonotonicClock.now(),
            ClockSource::Coarse => CoarseClock.now(),
            ClockSource::Host(c) => c.now(),
            ClockSource::Manual(c) => c.now(),
        }
    }

    /// The same clock, unmoved by the test helpers' offset: for a record
    /// other processes read, which a test's time travel never reaches.
    pub fn untravelled(self) -> Self {
        match self {
            ClockSource::Monotonic => ClockSource::Host(HostClock { coarse: false }),
            ClockSource::Coarse => ClockSource::Host(HostClock { coarse: true }),
            other => other,
        }
    }

    /// Whether two sources tell the same time (the coarse clock is the
    /// monotonic one, read at tick resolution).
    pub fn same_time(&self, other: &ClockSource) -> bool {
        match (self, other) {
            (ClockSource::Manual(a), ClockSource::Manual(b)) => Arc::ptr_eq(a, b),
            (ClockSource::Manual(_), _) | (_, ClockSource::Manual(_)) => false,
            // The host clock is the others without the test helpers' offset.
            (ClockSource::Host(_), ClockSource::Host(_)) => true,
            (ClockSource::Host(_), _) | (_, ClockSource::Host(_)) => false,
            _ => true,
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
            Ok(c) => Ok(Some(ClockSource::Manual(c.get(ruby)?.clone()))),
            Err(_) => Err(crate::errors::type_error(ruby, "clock", "nil or a CircuitBreaker::ManualClock", v)),
        }
    }
}

/// A clock that moves only when told: tests use it instead of `sleep`.
/// Allocated empty; `initialize` (lib/circuit_breaker/manual_clock.rb)
/// sets its start.
#[derive(Default)]
#[magnus::wrap(class = "CircuitBreaker::ManualClock", free_immediately, size)]
pub struct ManualClock(OnceLock<Arc<CoreManualClock>>);

impl ManualClock {
    fn get(&self, ruby: &Ruby) -> Result<&Arc<CoreManualClock>, Error> {
        self.0.get().ok_or_else(|| not_initialized(ruby, "CircuitBreaker::ManualClock"))
    }

    /// `initialize`'s native half.
    fn setup(ruby: &Ruby, rb_self: &Self, start: Value) -> Result<(), Error> {
        let clock = CoreManualClock::starting_at(args::float(ruby, "start", start)?)
            .map_err(|e| config_error_given(ruby, e, |_| Some(start)))?;
        rb_self.0.set(Arc::new(clock)).map_err(|_| {
            Error::new(ruby.exception_runtime_error(), "CircuitBreaker::ManualClock is already initialized")
        })
    }

    fn now(ruby: &Ruby, rb_self: &Self) -> Result<f64, Error> {
        Ok(secs_from_nanos(rb_self.get(ruby)?.now()))
    }

    fn advance(ruby: &Ruby, rb_self: Obj<Self>, seconds: Value) -> Result<Obj<Self>, Error> {
        let clock = rb_self.get(ruby)?;
        let secs = args::float(ruby, "seconds", seconds)?;
        clock.advance_secs(secs).map_err(|e| config_error_given(ruby, e, |_| Some(seconds)))?;
        Ok(rb_self)
    }

    fn inspect(ruby: &Ruby, rb_self: Obj<Self>) -> Result<String, Error> {
        // SAFETY: the name is copied out at once.
        let class = unsafe { rb_self.class().name() }.into_owned();
        if rb_self.0.get().is_none() {
            return Ok(not_initialized_inspect(&class));
        }
        Ok(format!("#<{class} now={}>", Self::now(ruby, &rb_self)?))
    }
}

/// `CircuitBreaker::TimeTravel.advance(seconds)` (the test helpers'
/// `advance_circuit_breakers`, lib/circuit_breaker/test_helpers.rb): moves
/// the process's system clocks `seconds` further forward. Returns the
/// offset.
fn travel(ruby: &Ruby, seconds: Value) -> Result<f64, Error> {
    let secs = args::float(ruby, "seconds", seconds)?;
    let total =
        circuit_breaker_core::clock::advance_secs(secs).map_err(|e| config_error_given(ruby, e, |_| Some(seconds)))?;
    Ok(secs_from_nanos(total))
}

/// `CircuitBreaker::TimeTravel.follow(ahead, new_test)` (the test
/// helpers, after each move of `Time.now`): the process's system clocks
/// are `ahead` seconds ahead of the real time, plus what `advance` added
/// unless a test starts. Returns the offset.
fn follow_time(ruby: &Ruby, ahead: Value, new_test: bool) -> Result<f64, Error> {
    let ahead = args::float(ruby, "ahead", ahead)?;
    Ok(secs_from_nanos(circuit_breaker_core::clock::follow_secs(ahead, new_test)))
}

pub fn init(ruby: &Ruby, namespace: RClass) -> Result<(), Error> {
    // The first reading finds the system clock's function (the vDSO's, or
    // an interposed one): done here, as the extension loads, rather than in
    // whichever call or thread reads the clock first.
    MonotonicClock.now();
    // The test helpers' seam (@api private): the process's system clocks
    // moved, never a breaker's own.
    let travel_module = namespace.define_module("TimeTravel")?;
    travel_module.define_singleton_method("advance", function!(travel, 1))?;
    travel_module.define_singleton_method("follow", function!(follow_time, 2))?;
    let class = namespace.define_class("ManualClock", ruby.class_object())?;
    class.define_alloc_func::<ManualClock>();
    class.define_private_method("__setup", method!(ManualClock::setup, 1))?;
    class.define_private_method("initialize_copy", method!(refuse_copy, 1))?;
    class.define_method("now", method!(ManualClock::now, 0))?;
    class.define_method("advance", method!(ManualClock::advance, 1))?;
    class.define_method("inspect", method!(ManualClock::inspect, 0))?;
    Ok(())
}
