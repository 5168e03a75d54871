//! `CircuitBreaker`: argument conversion, `call`'s yield and the
//! classification of how the block ended. Every decision is the core's.
//!
//! The lock is held only inside `locked`, around one core call; the block,
//! `failure_if`, error matchers and listeners run with no lock held.
//! Listeners (`__transition`, `__rejected`, defined in Ruby) never run while
//! a jump (`break`, `throw`, `Thread#kill`…) is pending: for that case they
//! run inside `rb_ensure`'s ensure function while the jump resumes.
//!
//! One concept per file: `call.rs` (the hot path), `cap.rs` (the
//! concurrency cap's slots and refusals), `matchers.rs` (which
//! exceptions count), `events.rs` (listeners, rejections), `control.rs`
//! (manual actions), `metrics.rs`, `permits.rs` (the low-level API),
//! `fleet.rs` (the syncer's calls); this file holds the object, its setup
//! and the locked step.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use circuit_breaker_core::config::{probe_quota, probe_ratio, Concurrency, MaxConcurrent};
use circuit_breaker_core::{
    Breaker as CoreBreaker, Config, Decision, Options, PlacedWindow, ProbeTimeout, Transitions,
};
use magnus::{
    function, method,
    prelude::*,
    value::{Opaque, ReprValue},
    DataTypeFunctions, Error, RClass, RHash, RString, RStruct, Ruby, Symbol, TypedData, Value,
};

use crate::args;
use crate::clock::ClockSource;
use crate::cruby;
use crate::errors::{arg_error, config_error_given, not_initialized, refuse_copy, type_error};
use crate::window::{record_of, Blocked, LockedRecord};

mod call;
mod cap;
mod control;
mod events;
pub mod fleet;
mod matchers;
mod metrics;
mod permits;
#[cfg(feature = "test-hooks")]
mod test_hooks;

use matchers::{Matchers, ID_CALL};

/// A `CircuitBreaker` object: allocated empty, set up once by
/// `initialize` (lib/circuit_breaker/options.rb) through `__setup`, from
/// its `CircuitBreaker::Options`.
#[derive(TypedData, Default)]
#[magnus(class = "CircuitBreaker", free_immediately, size, mark)]
pub struct Breaker(OnceLock<Inner>);

/// What `__setup` built.
struct Inner {
    /// Whether `max_concurrent:` caps the calls in flight (docs/concurrency.md).
    capped: bool,
    /// Whether the cap is `:adaptive`: every settled call then feeds the
    /// rule and publishes the cap it leaves (`publish_cap`).
    adaptive: bool,
    record: Arc<LockedRecord>,
    cfg: Config,
    clock: ClockSource,
    name: Option<Opaque<RString>>,
    window: Opaque<Value>,
    record_errors: Matchers,
    ignore_errors: Matchers,
    failure_if: Option<Opaque<Value>>,
    /// Set once an `on_reject` listener exists: only then does a rejection
    /// call into Ruby (besides ActiveSupport::Notifications, checked apart).
    notify_rejects: AtomicBool,
    /// The class of the last exception recorded as a failure (a raw handle,
    /// 0 for none), for the opening event; kept alive by `mark`.
    last_error: AtomicUsize,
    /// The slots of `allow?` permits not yet recorded (docs/concurrency.md),
    /// given back by their `record_*`, their collection, or
    /// [`Inner::expire_loose`]. The lock is held for list operations only.
    loose: std::sync::Mutex<Vec<Arc<permits::Loose>>>,
    /// A fleet breaker's link: its syncer, told of failures (docs/fleet.md,
    /// "When a host sends"), and its status.
    fleet: OnceLock<fleet::FleetSide>,
}

impl DataTypeFunctions for Breaker {
    fn mark(&self, marker: &magnus::gc::Marker) {
        let Some(this) = self.0.get() else { return };
        // Pinned (not movable): these are read through raw handles.
        marker.mark(this.window);
        if let Some(n) = this.name {
            marker.mark(n);
        }
        this.record_errors.mark(marker);
        this.ignore_errors.mark(marker);
        if let Some(f) = this.failure_if {
            marker.mark(f);
        }
        let last_error = this.last_error.load(Ordering::Relaxed);
        if last_error != 0 {
            // SAFETY: a handle stored from a live class in `call`, kept
            // alive (and pinned) by this very mark.
            marker.mark(unsafe { cruby::object(last_error as cruby::Raw) });
        }
    }
}

fn callable(ruby: &Ruby, name: &str, v: Value) -> Result<Option<Opaque<Value>>, Error> {
    if v.is_nil() {
        Ok(None)
    } else if v.respond_to(*ID_CALL, false)? {
        Ok(Some(Opaque::from(v)))
    } else {
        Err(type_error(ruby, name, "nil or a Proc", v))
    }
}

/// `probe_timeout:`: nil (open_duration), false (never) or seconds.
fn probe_timeout(ruby: &Ruby, v: Value) -> Result<ProbeTimeout, Error> {
    if v.is_nil() {
        Ok(ProbeTimeout::OpenDuration)
    } else if cruby::raw(v) == cruby::raw(ruby.qfalse()) {
        Ok(ProbeTimeout::Never)
    } else if v.is_kind_of(ruby.class_numeric()) {
        Ok(ProbeTimeout::Seconds(args::float(ruby, "probe_timeout", v)?))
    } else {
        Err(type_error(ruby, "probe_timeout", "nil, false or a Numeric", v))
    }
}

/// `max_concurrent:`: nil, an Integer (its range is the core's) or
/// `:adaptive`; anything else is refused here, naming the accepted values.
fn max_concurrent(ruby: &Ruby, v: Value) -> Result<MaxConcurrent, Error> {
    const ACCEPTED: &str = "nil, an Integer in 1..100_000 or :adaptive";
    if v.is_nil() {
        return Ok(MaxConcurrent::Unlimited);
    }
    if let Some(s) = Symbol::from_value(v) {
        return match s.name()?.as_ref() {
            "adaptive" => Ok(MaxConcurrent::Adaptive),
            _ => Err(arg_error(ruby, format!("max_concurrent must be {ACCEPTED} (got {})", crate::errors::shown(v)))),
        };
    }
    if magnus::Integer::from_value(v).is_none() {
        return Err(type_error(ruby, "max_concurrent", ACCEPTED, v));
    }
    Ok(MaxConcurrent::Fixed(args::integer(ruby, "max_concurrent", v)?))
}

/// nil, or a String or Symbol as a String.
fn opt_string(ruby: &Ruby, name: &str, v: Value) -> Result<Option<RString>, Error> {
    if v.is_nil() {
        return Ok(None);
    }
    match (RString::from_value(v), Symbol::from_value(v)) {
        (Some(s), _) => Ok(Some(s)),
        (None, Some(sym)) => Ok(Some(ruby.str_new(&sym.name()?))),
        _ => Err(type_error(ruby, name, "nil, a String or a Symbol", v)),
    }
}

/// The seeds' one-for-one aliases (lib/circuit_breaker/options.rb): an
/// error about the option one stood for names the alias the caller wrote.
const ALIASES: [&str; 2] = ["threshold", "retry_time"];

/// The `CircuitBreaker::Options` a breaker is built from
/// (lib/circuit_breaker/options.rb: defaults filled in, aliases resolved,
/// keys and seconds normalized), read member by member.
struct Given<'a> {
    ruby: &'a Ruby,
    options: RStruct,
    /// option => the alias the caller wrote for it; None when none was.
    aliases: Option<RHash>,
}

impl<'a> Given<'a> {
    fn new(ruby: &'a Ruby, options: RStruct) -> Result<Self, Error> {
        let aliases = RHash::from_value(options.getmember::<_, Value>("aliases")?).filter(|h| !h.is_empty());
        Ok(Self { ruby, options, aliases })
    }

    /// A member's value.
    fn get(&self, member: &str) -> Result<Value, Error> {
        self.options.getmember(member)
    }

    /// The name errors give `option`: the alias the caller wrote for it
    /// (`threshold`), else its own.
    fn name(&self, option: &'static str) -> &'static str {
        let Some(aliases) = self.aliases else { return option };
        let spelling = aliases.get(self.ruby.to_symbol(option)).and_then(Symbol::from_value);
        let spelling = spelling.and_then(|s| s.name().ok());
        spelling.and_then(|s| ALIASES.into_iter().find(|a| *a == s)).unwrap_or(option)
    }

    /// A core range error, naming the option as the caller wrote it and
    /// showing the value given.
    fn config_error(&self, mut e: circuit_breaker_core::ConfigError) -> Error {
        let value = self.get(e.name).ok();
        e.name = self.name(e.name);
        config_error_given(self.ruby, e, |_| value)
    }
}

impl Inner {
    /// One core step under the lock, with the time read by the caller.
    /// A shared lock that stays busy past its bound skips the step.
    #[inline]
    fn locked<T>(&self, f: impl FnOnce(&mut CoreBreaker, &mut PlacedWindow, &Config) -> T) -> Result<T, Blocked> {
        self.record.with(|r| f(&mut r.breaker, &mut r.window, &self.cfg))
    }

    /// A step that cannot be skipped (control, metrics): a busy or broken
    /// lock is an error.
    fn locked_or_raise<T>(
        &self,
        ruby: &Ruby,
        f: impl FnOnce(&mut CoreBreaker, &mut PlacedWindow, &Config) -> T,
    ) -> Result<T, Error> {
        self.locked(f).map_err(|b| b.into_error(ruby, &self.record))
    }

    /// Asks to run a call. When the shared lock stays busy past its bound
    /// (a stuck holder), the call is decided from the published state
    /// instead (docs/shared.md); an interrupt that came meanwhile is raised
    /// here, before anything was taken.
    fn admit(&self, ruby: &Ruby, now: i64) -> Result<(Decision, Transitions), Error> {
        match self.locked(|b, w, c| b.acquire(w, c, now)) {
            Ok(x) => Ok(x),
            Err(Blocked::Busy) => Ok((self.record.published().decide(now), Transitions::default())),
            Err(b) => Err(b.into_error(ruby, &self.record)),
        }
    }

    /// With `max_concurrent: :adaptive`, inside a locked step that settled
    /// a call: publishes the cap the rule left where admission reads it
    /// (docs/concurrency.md). Under the lock, so the last value published
    /// is the record's.
    #[inline]
    fn publish_cap(&self, b: &CoreBreaker, c: &Config) {
        if self.adaptive {
            let slots = self.record.slots();
            // Stored only when it moved: most calls leave it where it is,
            // and a store would dirty the line every process reads.
            if let Some(cap) = b.concurrency_limit(c).filter(|&cap| slots.cap() != Some(cap)) {
                slots.publish_cap(cap);
            }
        }
    }

    /// Settles a call's outcome. When the shared lock stays busy (or the
    /// wait is interrupted), the outcome is dropped and counted
    /// (`dropped_records`): the call's own result matters more than its
    /// record; the interrupt's exception is raised.
    fn finish(
        &self,
        ruby: &Ruby,
        f: impl FnOnce(&mut CoreBreaker, &mut PlacedWindow, &Config) -> Transitions,
    ) -> Result<Transitions, Error> {
        match self.locked(f) {
            Ok(tr) => Ok(tr),
            Err(Blocked::Busy) => {
                self.record.published().count_dropped();
                Ok(Transitions::default())
            }
            Err(Blocked::Interrupted(e)) => {
                self.record.published().count_dropped();
                Err(e)
            }
            Err(b) => Err(b.into_error(ruby, &self.record)),
        }
    }

    /// `metrics[:in_flight]`, `[:concurrency_limit]` and `[:limited]`
    /// (docs/concurrency.md).
    /// Dead holders are looked for first (at most every 100 ms), and
    /// `allow?` slots past their bound given back, so the count shown holds
    /// neither.
    fn cap_metrics(&self) -> metrics::CapMetrics {
        if !self.capped {
            return metrics::CapMetrics { in_flight: None, limit: None, limited: 0 };
        }
        self.expire_loose(self.clock.now());
        let slots = self.record.slots();
        slots.sweep(false);
        metrics::CapMetrics { in_flight: Some(slots.in_flight()), limit: slots.cap(), limited: slots.limited() }
    }

    /// Keeps an `allow?` permit's slot until it is given back.
    /// The list's lock is only ever taken holding the GVL, so it is never
    /// contended; `try_lock` all the same, so that nothing can wait on it
    /// (a slot left out is still given back by its record or collection).
    fn hold_loose(&self, loose: Arc<permits::Loose>) {
        let Ok(mut held) = self.loose.try_lock() else { return };
        if held.len() >= 64 && held.len().is_power_of_two() {
            held.retain(|l| !l.released());
        }
        held.push(loose);
    }

    /// Gives back the `allow?` slots taken at least the bound ago at `now`:
    /// `probe_timeout` (nil: `open_duration`; `false`: `open_duration`
    /// too, since a slot must not wait forever). How many.
    fn expire_loose(&self, now: i64) -> usize {
        let bound = self.cfg.probe_timeout.unwrap_or(self.cfg.open_duration);
        let Ok(mut held) = self.loose.try_lock() else { return 0 };
        let before = held.len();
        held.retain(|l| {
            if !l.released() && now.saturating_sub(l.taken_at) >= bound {
                l.release();
                return false;
            }
            !l.released()
        });
        before - held.len()
    }

    /// A fleet breaker's `metrics[:fleet]` and `metrics[:fleet_reason]`.
    fn fleet_status(&self, ruby: &Ruby) -> Option<(Symbol, Option<String>)> {
        self.fleet.get().map(|f| (f.status(ruby), f.why()))
    }

    /// A failure was recorded: a fleet breaker's syncer may send at once
    /// (an atomic load, and for the slot's first failure an unpark).
    #[inline]
    fn failed(&self) {
        if let Some(f) = self.fleet.get() {
            f.wake.failure();
            if let Some(d) = f.doorbell {
                d.ring();
            }
        }
    }
}

impl Breaker {
    /// The breaker's state, or a clear error for an object whose
    /// `initialize` never ran (`CircuitBreaker.allocate`, a subclass's
    /// `initialize` that does not call `super`).
    #[inline]
    fn get(&self, ruby: &Ruby) -> Result<&Inner, Error> {
        self.0.get().ok_or_else(|| not_initialized(ruby, "CircuitBreaker"))
    }

    /// `initialize`'s native half (lib/circuit_breaker/options.rb):
    /// converts each member of the breaker's `Options` and builds the
    /// breaker once. Ranges are the core's to check (`Config::new`). A new
    /// option is one line here (or in `config`), reading its member.
    fn setup(ruby: &Ruby, rb_self: &Self, options: RStruct) -> Result<(), Error> {
        if rb_self.0.get().is_some() {
            return Err(Error::new(ruby.exception_runtime_error(), "CircuitBreaker is already initialized"));
        }
        let given = Given::new(ruby, options)?;
        let g = |key: &str| given.get(key);
        let cfg = Self::config(&given)?;
        let record_errors = Matchers::parse(ruby, "record_errors", g("record_errors")?)?;
        let ignore_errors = Matchers::parse(ruby, "ignore_errors", g("ignore_errors")?)?;
        let failure_if = callable(ruby, "failure_if", g("failure_if")?)?;
        let name = opt_string(ruby, "name", g("name")?)?;
        let clock = ClockSource::from_arg(ruby, g("clock")?)?;
        // Checked and made UTF-8 in Ruby (lib/circuit_breaker/keys.rb).
        let shared_key = opt_string(ruby, "shared", g("shared")?)?;
        let namespace = opt_string(ruby, "namespace", g("namespace")?)?;
        let name = name.or(shared_key).map(|s| Opaque::from(RString::new_frozen(s)));

        // nil: a new SlidingWindow with its defaults.
        let window = Some(g("window")?).filter(|w| !w.is_nil());
        let template = match window {
            Some(w) => record_of(ruby, w)?,
            None => crate::window::default_window(ruby)?,
        };
        // The breaker's clock, else a TimeWindow's own, else the system's.
        let clock = clock
            .or_else(|| template.own_clock().cloned())
            .unwrap_or_else(|| ClockSource::monotonic_for(template.slow_threshold_ms()));
        // A record other processes read (shared:, or mirrored to a fleet:)
        // never holds a test's time travel (docs/testing.md).
        let fleet = g("fleet")?.to_bool();
        let clock = if shared_key.is_some() || fleet { clock.untravelled() } else { clock };
        let (record, window) = match shared_key {
            Some(key) => Self::mapped(ruby, &template, namespace, key, &clock, &cfg)?,
            None => Self::own(ruby, template, window, &clock)?,
        };
        let capped = cfg.max_concurrent.initial();
        let adaptive = matches!(cfg.max_concurrent, Concurrency::Adaptive(_));
        if let Some(initial) = capped {
            // An adaptive cap is the record's (host-wide in a shared file,
            // where another process may have moved it): read under the lock.
            let cap = if adaptive {
                record.with(|r| r.breaker.concurrency_limit(&cfg)).ok().flatten().unwrap_or(initial)
            } else {
                initial
            };
            record.slots().set_cap(cap);
        }
        let inner = Inner {
            capped: capped.is_some(),
            adaptive,
            record,
            cfg,
            clock,
            name,
            window: Opaque::from(window),
            record_errors,
            ignore_errors,
            failure_if,
            notify_rejects: AtomicBool::new(false),
            last_error: AtomicUsize::new(0),
            loose: std::sync::Mutex::new(Vec::new()),
            fleet: OnceLock::new(),
        };
        rb_self
            .0
            .set(inner)
            .map_err(|_| Error::new(ruby.exception_runtime_error(), "CircuitBreaker is already initialized"))
    }

    /// The validated configuration of the breaker's options. The seeds'
    /// `probe_ratio:` (with `half_open_window:`) stand for `ramp:` (and
    /// `half_open_calls:`), checked first, under their own names.
    fn config(given: &Given) -> Result<Config, Error> {
        let ruby = given.ruby;
        let g = |key: &str| given.get(key);
        let float = |key: &'static str| args::float(ruby, given.name(key), g(key)?);
        let opt_float = |key: &'static str| args::opt_float(ruby, key, g(key)?);
        let integer = |key: &'static str| args::integer(ruby, key, g(key)?);
        let ratio = g("probe_ratio")?;
        let (ramp, half_open_calls) = if ratio.is_nil() {
            (args::floats(ruby, "ramp", g("ramp")?)?, integer("half_open_calls")?)
        } else {
            let (share, quota) = Self::seed_probes(ruby, ratio, g("half_open_window")?)?;
            let quota = match quota {
                Some(quota) => quota,
                None => integer("half_open_calls")?,
            };
            (vec![share], quota)
        };
        let options = Options {
            error_rate_threshold: float("error_rate_threshold")?,
            slow_rate_threshold: float("slow_rate_threshold")?,
            min_calls: integer("min_calls")?,
            open_duration: float("open_duration")?,
            half_open_calls,
            ramp,
            advance_rate: float("advance_rate")?,
            reopen_rate: opt_float("reopen_rate")?,
            half_open_timeout: opt_float("half_open_timeout")?,
            probe_timeout: probe_timeout(ruby, g("probe_timeout")?)?,
            min_stage_duration: float("min_stage_duration")?,
            backoff: float("backoff")?,
            max_open_duration: opt_float("max_open_duration")?,
            jitter: float("jitter")?,
            // nil (no fleet_quorum:): the core's default.
            fleet_quorum: opt_float("fleet_quorum")?.unwrap_or(Options::default().fleet_quorum),
            consecutive_failures: args::opt_integer(ruby, "consecutive_failures", g("consecutive_failures")?)?,
            max_concurrent: max_concurrent(ruby, g("max_concurrent")?)?,
            max_wait: float("max_wait")?,
            adaptive_initial: args::opt_integer(ruby, "adaptive_initial", g("adaptive_initial")?)?,
            adaptive_min: args::opt_integer(ruby, "adaptive_min", g("adaptive_min")?)?,
            adaptive_max: args::opt_integer(ruby, "adaptive_max", g("adaptive_max")?)?,
            adaptive_smoothing: opt_float("adaptive_smoothing")?,
        };
        Config::new(&options).map_err(|e| given.config_error(e))
    }

    /// `shared:`: the given window is only a template; the live one is in
    /// the file of `namespace` and `key`.
    fn mapped(
        ruby: &Ruby,
        template: &LockedRecord,
        namespace: Option<RString>,
        key: RString,
        clock: &ClockSource,
        cfg: &Config,
    ) -> Result<(Arc<LockedRecord>, Value), Error> {
        // SAFETY: the bytes are copied before any Ruby code runs.
        let (namespace, name) =
            unsafe { (namespace.map_or(Vec::new(), |n| n.as_slice().to_vec()), key.as_slice().to_vec()) };
        let mapped = template.mapped(ruby, &namespace, &name, cfg.fingerprint())?;
        let _ = mapped.clock.set(clock.clone());
        mapped.attach();
        let window = crate::window::wrap(ruby, mapped.clone());
        Ok((mapped, window))
    }

    /// A breaker of this process: it records into the given window (None:
    /// the new default one), which no other breaker may use, bound to the
    /// breaker's clock.
    fn own(
        ruby: &Ruby,
        template: Arc<LockedRecord>,
        window: Option<Value>,
        clock: &ClockSource,
    ) -> Result<(Arc<LockedRecord>, Value), Error> {
        if !template.attach() {
            return Err(arg_error(
                ruby,
                "window: is already used by another breaker; give each breaker its own window".to_owned(),
            ));
        }
        if let Err(e) = template.follow(ruby, clock) {
            template.detach();
            return Err(e);
        }
        let window = window.unwrap_or_else(|| crate::window::wrap(ruby, template.clone()));
        Ok((template, window))
    }

    /// The seeds' `probe_ratio:` r, with `half_open_window:` w, as the
    /// share of `ramp: [r]` and `half_open_calls: max(1, floor(w * r))`,
    /// each checked by the core under the name the caller wrote
    /// (docs/configuration.md; lib/circuit_breaker/options.rb decides when
    /// they apply).
    fn seed_probes(ruby: &Ruby, ratio: Value, window: Value) -> Result<(f64, Option<i64>), Error> {
        let given = |name: &str| Some(if name == "probe_ratio" { ratio } else { window });
        let r =
            probe_ratio(args::float(ruby, "probe_ratio", ratio)?).map_err(|e| config_error_given(ruby, e, given))?;
        if window.is_nil() {
            return Ok((r, None));
        }
        let w = args::integer(ruby, "half_open_window", window)?;
        Ok((r, Some(probe_quota(w, r).map_err(|e| config_error_given(ruby, e, given))?)))
    }

    fn name(ruby: &Ruby, rb_self: &Self) -> Result<Option<RString>, Error> {
        Ok(rb_self.get(ruby)?.name.map(|n| ruby.get_inner(n)))
    }

    fn window(ruby: &Ruby, rb_self: &Self) -> Result<Value, Error> {
        Ok(ruby.get_inner(rb_self.get(ruby)?.window))
    }

    /// The file a `shared:` breaker lives in, nil for a breaker of this
    /// process.
    fn shared_path(ruby: &Ruby, rb_self: &Self) -> Result<Option<String>, Error> {
        Ok(rb_self.get(ruby)?.record.path().map(|p| p.display().to_string()))
    }

    fn set_notify_rejects(ruby: &Ruby, rb_self: &Self, on: bool) -> Result<(), Error> {
        rb_self.get(ruby)?.notify_rejects.store(on, Ordering::Relaxed);
        Ok(())
    }
}

pub fn init(class: RClass) -> Result<(), Error> {
    class.define_alloc_func::<Breaker>();
    class.define_private_method("__setup", method!(Breaker::setup, 1))?;
    class.define_private_method("initialize_copy", method!(refuse_copy, 1))?;
    Breaker::define_call(class);
    permits::init(class)?;
    class.define_method("state", method!(Breaker::state, 0))?;
    class.define_method("metrics", method!(Breaker::metrics, 0))?;
    class.define_private_method("__peek", method!(Breaker::peek, 0))?;
    class.define_method("retry_after", method!(Breaker::retry_after, 0))?;
    class.define_method("trip!", method!(Breaker::trip, 0))?;
    class.define_method("reset!", method!(Breaker::reset, 0))?;
    class.define_method("force_open!", method!(Breaker::force_open, 0))?;
    class.define_method("disable!", method!(Breaker::disable, 0))?;
    class.define_method("name", method!(Breaker::name, 0))?;
    class.define_method("window", method!(Breaker::window, 0))?;
    class.define_private_method("__acquire", method!(Breaker::acquire, 1))?;
    class.define_private_method("__settle", method!(Breaker::settle, 3))?;
    class.define_private_method("__notify_rejects=", method!(Breaker::set_notify_rejects, 1))?;
    class.define_method("shared_path", method!(Breaker::shared_path, 0))?;
    class.define_singleton_method("shared_supported?", function!(|| circuit_breaker_core::shm::SUPPORTED, 0))?;
    #[cfg(feature = "test-hooks")]
    test_hooks::init(class)?;
    Ok(())
}
