//! `CircuitBreaker`: argument conversion, `call`'s yield and the
//! classification of how the block ended. Every decision is the core's.
//!
//! The lock is held only inside `step`, around one core call; the block,
//! `failure_if`, error matchers and listeners run with no lock held.
//! Listeners (`__transition`, `__rejected`, defined in Ruby) never run while
//! a jump (`break`, `throw`, `Thread#kill`…) is pending: for that case they
//! run inside `rb_ensure`'s ensure function while the jump resumes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use circuit_breaker_core::clock::secs_from_nanos;
use circuit_breaker_core::config::{probe_quota, probe_ratio};
use circuit_breaker_core::fleet;
use circuit_breaker_core::wake::Wake;
use circuit_breaker_core::{
    Breaker as CoreBreaker, Config, Decision, Metrics, Options, Outcome, Permit, PlacedWindow, ProbeTimeout, Reason,
    Rejection, State, Transitions,
};
use magnus::{
    function, method,
    prelude::*,
    typed_data::Obj,
    value::{LazyId, Opaque, OpaqueId, ReprValue},
    DataTypeFunctions, Error, Exception, ExceptionClass, IntoValue, RArray, RClass, RHash, RString, Ruby, Symbol,
    TypedData, Value,
};

use magnus::symbol::IntoSymbol;

use crate::args;
use crate::clock::ClockSource;
use crate::cruby::{self, Exit, Unwound};
use crate::errors::{arg_error, config_error_given, not_initialized, refuse_copy, type_error, FAILURE, OPEN_ERROR};
use crate::window::{shared_of, Blocked, Shared};

/// A `CircuitBreaker` object: allocated empty, set up once by
/// `initialize` (lib/circuit_breaker/options.rb) through `__setup`.
#[derive(TypedData, Default)]
#[magnus(class = "CircuitBreaker", free_immediately, size, mark)]
pub struct Breaker(OnceLock<Inner>);

/// What `__setup` built.
struct Inner {
    shared: Arc<Shared>,
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
    /// A fleet breaker's syncer, told of failures (docs/fleet.md, "When a
    /// host sends").
    fleet_wake: OnceLock<Arc<Wake>>,
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

/// Timeout::Error, and Timeout::ExitException where the timeout gem has it
/// (lib/circuit_breaker.rb requires "timeout" before loading this library).
static TIMEOUT_CLASSES: std::sync::OnceLock<Vec<cruby::Raw>> = std::sync::OnceLock::new();

fn timeout_classes(ruby: &Ruby) -> &'static [cruby::Raw] {
    TIMEOUT_CLASSES.get_or_init(|| {
        let mut list = Vec::new();
        if let Ok(timeout) = ruby.class_object().const_get::<_, magnus::RModule>("Timeout") {
            for name in ["Error", "ExitException"] {
                if let Ok(class) = timeout.const_get::<_, RClass>(name) {
                    // Pinned for good: the raw handle must never move.
                    ruby.gc_register_mark_object(class);
                    list.push(cruby::raw(class));
                }
            }
        }
        list
    })
}

static ID_CLOSED: LazyId = LazyId::new("closed");
static ID_OPEN: LazyId = LazyId::new("open");
static ID_HALF_OPEN: LazyId = LazyId::new("half_open");
static ID_FORCED_OPEN: LazyId = LazyId::new("forced_open");
static ID_DISABLED: LazyId = LazyId::new("disabled");
static ID_BREAKER_NAME: LazyId = LazyId::new("@breaker_name");
static ID_STATE: LazyId = LazyId::new("@state");
static ID_RETRY_AFTER: LazyId = LazyId::new("@retry_after");
static ID_SET_BACKTRACE: LazyId = LazyId::new("set_backtrace");
static ID_TRANSITION: LazyId = LazyId::new("__transition");
static ID_REJECTED: LazyId = LazyId::new("__rejected");
static ID_CALL: LazyId = LazyId::new("call");

fn state_sym(ruby: &Ruby, s: State) -> Symbol {
    sym(
        ruby,
        match s {
            State::Closed => &ID_CLOSED,
            State::Open => &ID_OPEN,
            State::HalfOpen => &ID_HALF_OPEN,
            State::ForcedOpen => &ID_FORCED_OPEN,
            State::Disabled => &ID_DISABLED,
        },
    )
}

static REASONS: [LazyId; 8] = [
    LazyId::new("error_rate"),
    LazyId::new("slow_call_rate"),
    LazyId::new("probe_failed"),
    LazyId::new("probes_passed"),
    LazyId::new("cool_down_elapsed"),
    LazyId::new("half_open_timeout"),
    LazyId::new("probe_timeout"),
    LazyId::new("manual"),
];
static ID_HOST: LazyId = LazyId::new("host");
static ID_PROCESS: LazyId = LazyId::new("process");

/// The symbol of an interned id: magnus's `to_symbol(&str)` builds a String
/// each time, an allocation per `metrics` or event.
fn sym(ruby: &Ruby, id: &LazyId) -> Symbol {
    let id: OpaqueId = **id;
    id.into_symbol_with(ruby)
}

fn reason_sym(ruby: &Ruby, r: Reason) -> Symbol {
    sym(
        ruby,
        &REASONS[match r {
            Reason::ErrorRate => 0,
            Reason::SlowCallRate => 1,
            Reason::ProbeFailed => 2,
            Reason::ProbesPassed => 3,
            Reason::CoolDownElapsed => 4,
            Reason::HalfOpenTimeout => 5,
            Reason::ProbeTimeout => 6,
            Reason::Manual => 7,
        }],
    )
}

fn secs_value(ruby: &Ruby, t: Option<i64>) -> Value {
    t.map_or_else(|| ruby.qnil().as_value(), |n| secs_from_nanos(n).into_value_with(ruby))
}

static KEYS: [LazyId; 19] = [
    LazyId::new("state"),
    LazyId::new("total"),
    LazyId::new("failures"),
    LazyId::new("slow_calls"),
    LazyId::new("error_rate"),
    LazyId::new("slow_call_rate"),
    LazyId::new("rejected"),
    LazyId::new("stage"),
    LazyId::new("admit_share"),
    LazyId::new("retry_after"),
    LazyId::new("calls"),
    LazyId::new("successes"),
    LazyId::new("failures_total"),
    LazyId::new("slow_total"),
    LazyId::new("opened"),
    LazyId::new("tripped_error_rate"),
    LazyId::new("tripped_slow_call_rate"),
    LazyId::new("counters"),
    LazyId::new("dropped_records"),
];

/// The frozen Hash of docs/operating.md. `host_wide`:
/// the counters are those of every process mapping a `shared:` record.
/// `dropped`: records a shared breaker dropped because its lock stayed busy
/// (docs/shared.md).
fn metrics_hash(ruby: &Ruby, m: &Metrics, host_wide: bool, dropped: u64) -> Result<RHash, Error> {
    let h = ruby.hash_new();
    let c = &m.counters;
    // Each value goes into the hash as soon as it exists: a Float (or a
    // Bignum) is an object the GC could collect if it waited on the stack.
    let values: [&dyn Fn() -> Value; 19] = [
        &|| state_sym(ruby, m.state).as_value(),
        &|| m.counts.total.into_value_with(ruby),
        &|| m.counts.failures.into_value_with(ruby),
        &|| m.counts.slow_calls.into_value_with(ruby),
        &|| m.counts.error_rate().into_value_with(ruby),
        &|| m.counts.slow_call_rate().into_value_with(ruby),
        &|| c.rejected.into_value_with(ruby),
        &|| m.stage.into_value_with(ruby),
        &|| m.admit_share.into_value_with(ruby),
        &|| secs_value(ruby, m.retry_after),
        &|| c.calls.into_value_with(ruby),
        &|| c.successes.into_value_with(ruby),
        &|| c.failures.into_value_with(ruby),
        &|| c.slow.into_value_with(ruby),
        &|| c.opened.into_value_with(ruby),
        &|| m.tripped.map(|t| t.error_rate()).into_value_with(ruby),
        &|| m.tripped.map(|t| t.slow_call_rate()).into_value_with(ruby),
        &|| sym(ruby, if host_wide { &ID_HOST } else { &ID_PROCESS }).as_value(),
        &|| dropped.into_value_with(ruby),
    ];
    for (key, value) in KEYS.iter().zip(values) {
        let key: OpaqueId = **key;
        h.aset(key.into_symbol_with(ruby), value())?;
    }
    h.freeze();
    Ok(h)
}

/// `record_errors:` / `ignore_errors:` sorted for matching: classes and
/// modules as raw handles (pinned by the breaker's mark function, so they
/// never move), those that define their own `===` apart (matched by
/// calling it, as `rescue` does), callables apart.
#[derive(Default)]
struct Matchers {
    modules: Vec<cruby::Raw>,
    own_eqq: Vec<Opaque<Value>>,
    callables: Vec<Opaque<Value>>,
}

static ID_EQQ: LazyId = LazyId::new("===");

/// Whether `module === x` is Module#=== (a kind_of? test) rather than a
/// `===` of its own.
fn plain_eqq(ruby: &Ruby, module: Value) -> Result<bool, Error> {
    let method: Value = module.funcall("method", (*ID_EQQ,))?;
    let owner: Value = method.funcall("owner", ())?;
    Ok(cruby::raw(owner) == cruby::raw(ruby.class_module()))
}

impl Matchers {
    /// An Array of Exception classes (or modules) and callables.
    fn parse(ruby: &Ruby, name: &str, v: Value) -> Result<Self, Error> {
        const WHAT: &str = "an Array of Exception classes or Procs";
        let mut m = Matchers::default();
        let Some(ary) = RArray::from_value(v) else {
            return Err(type_error(ruby, name, WHAT, v));
        };
        let exception = ruby.exception_exception();
        for item in ary {
            let module = match RClass::from_value(item) {
                Some(class) if class.is_inherited(exception) => true,
                Some(_) => return Err(type_error(ruby, name, WHAT, item)),
                None if item.is_kind_of(ruby.class_module()) => true,
                None if item.respond_to(*ID_CALL, false)? => {
                    m.callables.push(Opaque::from(item));
                    false
                }
                None => return Err(type_error(ruby, name, WHAT, item)),
            };
            if module && plain_eqq(ruby, item)? {
                m.modules.push(cruby::raw(item));
            } else if module {
                m.own_eqq.push(Opaque::from(item));
            }
        }
        Ok(m)
    }

    fn is_empty(&self) -> bool {
        self.modules.is_empty() && self.own_eqq.is_empty() && self.callables.is_empty()
    }

    /// Whether `ex` matches one of the modules as `rescue` matches it
    /// (`===`), or a callable returns truthy for it. A `===` or a callable
    /// that raises makes the error.
    fn hit(&self, ruby: &Ruby, ex: Exception) -> Result<bool, Error> {
        if self.modules.iter().any(|&m| cruby::kind_of(ex, m)) {
            return Ok(true);
        }
        for &m in &self.own_eqq {
            if ruby.get_inner(m).funcall::<_, _, Value>(*ID_EQQ, (ex,))?.to_bool() {
                return Ok(true);
            }
        }
        for &c in &self.callables {
            if ruby.get_inner(c).funcall::<_, _, Value>(*ID_CALL, (ex,))?.to_bool() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn mark(&self, marker: &magnus::gc::Marker) {
        for &m in &self.modules {
            // SAFETY: a handle taken from a live module in `parse`, kept
            // alive (and pinned) by this very mark.
            marker.mark(unsafe { cruby::object(m) });
        }
        for &m in self.own_eqq.iter().chain(&self.callables) {
            marker.mark(m);
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

/// Keeps permit `p` at the end of a thread's `queue` of permits: a flat
/// Array of permit bits and counts, oldest first. Equal permits count
/// together (every permit of a closed breaker's generation is the same), so
/// a thread's permits take no memory per call; permits of an earlier
/// generation can decide nothing, so a newer one drops them and an
/// abandoned permit never settles a later call in its place.
fn keep(queue: RArray, p: Permit) -> Result<(), Error> {
    let bits = p.to_bits();
    let len = queue.len() as isize;
    if len >= 2 {
        let last: u64 = queue.entry(len - 2)?;
        if last == bits {
            let count: u64 = queue.entry(len - 1)?;
            return queue.store(len - 1, count.saturating_add(1));
        }
        if !Permit::from_bits(last).same_generation(p) {
            queue.clear()?;
        }
    }
    queue.push(bits)?;
    queue.push(1u64)
}

/// Takes the oldest permit out of a thread's `queue` (see [`keep`]).
fn take_oldest(queue: RArray) -> Result<Option<Permit>, Error> {
    if queue.len() < 2 {
        return Ok(None);
    }
    let bits: u64 = queue.entry(0)?;
    let count: u64 = queue.entry(1)?;
    if count > 1 {
        queue.store(1, count - 1)?;
    } else {
        queue.shift::<Value>()?;
        queue.shift::<Value>()?;
    }
    Ok(Some(Permit::from_bits(bits)))
}

impl Inner {
    /// One core step under the lock, with the time read by the caller.
    /// A shared lock that stays busy past its bound skips the step.
    #[inline]
    fn step<T>(&self, f: impl FnOnce(&mut CoreBreaker, &mut PlacedWindow, &Config) -> T) -> Result<T, Blocked> {
        self.shared.with(|r| f(&mut r.breaker, &mut r.window, &self.cfg))
    }

    /// A step that cannot be skipped (control, metrics): a busy or broken
    /// lock is an error.
    fn step_or_raise<T>(
        &self,
        ruby: &Ruby,
        f: impl FnOnce(&mut CoreBreaker, &mut PlacedWindow, &Config) -> T,
    ) -> Result<T, Error> {
        self.step(f).map_err(|b| b.into_error(ruby, &self.shared))
    }

    /// Asks to run a call. When the shared lock stays busy past its bound
    /// (a stuck holder), the call is decided from the published state
    /// instead (docs/shared.md); an interrupt that came meanwhile is raised
    /// here, before anything was taken.
    fn admit(&self, ruby: &Ruby, now: i64) -> Result<(Decision, Transitions), Error> {
        match self.step(|b, w, c| b.acquire(w, c, now)) {
            Ok(x) => Ok(x),
            Err(Blocked::Busy) => Ok((self.shared.published().decide(now), Transitions::default())),
            Err(Blocked::Interrupted) => {
                ruby.thread_check_ints()?;
                Ok((self.shared.published().decide(now), Transitions::default()))
            }
            Err(b) => Err(b.into_error(ruby, &self.shared)),
        }
    }

    /// Settles a call's outcome. When the shared lock stays busy (or the
    /// wait is interrupted), the outcome is dropped and counted
    /// (`dropped_records`): the call's own result matters more than its
    /// record, and an interrupt is delivered by Ruby once this returns.
    fn finish(
        &self,
        ruby: &Ruby,
        f: impl FnOnce(&mut CoreBreaker, &mut PlacedWindow, &Config) -> Transitions,
    ) -> Result<Transitions, Error> {
        match self.step(f) {
            Ok(tr) => Ok(tr),
            Err(Blocked::Busy | Blocked::Interrupted) => {
                self.shared.published().count_dropped();
                Ok(Transitions::default())
            }
            Err(b) => Err(b.into_error(ruby, &self.shared)),
        }
    }

    /// A failure was recorded: a fleet breaker's syncer may send at once
    /// (an atomic load, and for the slot's first failure an unpark).
    #[inline]
    fn failed(&self) {
        if let Some(w) = self.fleet_wake.get() {
            w.failure();
        }
    }

    /// Whether a rejection has listeners (`on_reject`, ActiveSupport).
    fn rejections_watched(&self, ruby: &Ruby) -> bool {
        self.notify_rejects.load(Ordering::Relaxed) || active_support_loaded(ruby)
    }

    /// Whether a raised exception is recorded as a failure (true) or passes
    /// through unrecorded (false).
    fn classify(&self, ruby: &Ruby, ex: Exception) -> Result<bool, Error> {
        // Checked first: a caller that raises it has decided (docs/semantics.md).
        if ex.is_kind_of(ruby.get_inner(&FAILURE)) {
            return Ok(true);
        }
        if !self.ignore_errors.is_empty() && self.ignore_errors.hit(ruby, ex)? {
            return Ok(false);
        }
        if timeout_classes(ruby).iter().any(|&t| cruby::kind_of(ex, t)) {
            return Ok(true);
        }
        self.record_errors.hit(ruby, ex)
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
    /// converts each option `initialize` passes, aliases resolved and
    /// defaults filled in, and builds the breaker once. Ranges are the core's
    /// to check (`Config::new`). A new option is one line here, after its
    /// keyword in `initialize`.
    fn setup(ruby: &Ruby, rb_self: &Self, given: RHash) -> Result<(), Error> {
        if rb_self.0.get().is_some() {
            return Err(Error::new(ruby.exception_runtime_error(), "CircuitBreaker is already initialized"));
        }
        let g = |key: &str| -> Result<Value, Error> { given.fetch(ruby.to_symbol(key)) };
        let float = |key: &'static str| args::float(ruby, key, g(key)?);
        let opt_float = |key: &'static str| args::opt_float(ruby, key, g(key)?);
        let integer = |key: &'static str| args::integer(ruby, key, g(key)?);
        let options = Options {
            error_rate_threshold: float("error_rate_threshold")?,
            slow_rate_threshold: float("slow_rate_threshold")?,
            min_calls: integer("min_calls")?,
            open_duration: float("open_duration")?,
            half_open_calls: integer("half_open_calls")?,
            ramp: args::floats(ruby, "ramp", g("ramp")?)?,
            advance_rate: float("advance_rate")?,
            reopen_rate: opt_float("reopen_rate")?,
            half_open_timeout: opt_float("half_open_timeout")?,
            probe_timeout: probe_timeout(ruby, g("probe_timeout")?)?,
            min_stage_duration: float("min_stage_duration")?,
            backoff: float("backoff")?,
            max_open_duration: opt_float("max_open_duration")?,
            jitter: float("jitter")?,
        };
        let cfg = Config::new(&options).map_err(|e| config_error_given(ruby, e, |name| g(name).ok()))?;
        let record_errors = Matchers::parse(ruby, "record_errors", g("record_errors")?)?;
        let ignore_errors = Matchers::parse(ruby, "ignore_errors", g("ignore_errors")?)?;
        let failure_if = callable(ruby, "failure_if", g("failure_if")?)?;
        let name = opt_string(ruby, "name", g("name")?)?;
        let clock = ClockSource::from_arg(ruby, g("clock")?)?;
        // Checked and made UTF-8 in Ruby (lib/circuit_breaker/namespace.rb).
        let shared_key = opt_string(ruby, "shared", g("shared")?)?;
        let namespace = opt_string(ruby, "namespace", g("namespace")?)?;
        let name = name.or(shared_key).map(|s| Opaque::from(RString::new_frozen(s)));

        let window = g("window")?;
        let template = shared_of(ruby, window)?;
        // The breaker's clock, else a TimeWindow's own, else the system's.
        let clock = clock
            .or_else(|| template.own_clock().cloned())
            .unwrap_or_else(|| ClockSource::monotonic_for(template.slow_threshold_ms()));
        let (shared, window) = match shared_key {
            // The given window is only a template: the live one is in the file.
            Some(key) => {
                // SAFETY: the bytes are copied before any Ruby code runs.
                let (namespace, name) =
                    unsafe { (namespace.map_or(Vec::new(), |n| n.as_slice().to_vec()), key.as_slice().to_vec()) };
                let mapped = template.mapped(ruby, &namespace, &name, cfg.fingerprint())?;
                let _ = mapped.clock.set(clock.clone());
                mapped.attach();
                let window = crate::window::wrap(ruby, mapped.clone());
                (mapped, window)
            }
            None => {
                if !template.attach() {
                    return Err(arg_error(
                        ruby,
                        "window: is already used by another breaker; give each breaker its own window".to_owned(),
                    ));
                }
                if let Err(e) = template.follow(ruby, &clock) {
                    template.detach();
                    return Err(e);
                }
                (template, window)
            }
        };
        let inner = Inner {
            shared,
            cfg,
            clock,
            name,
            window: Opaque::from(window),
            record_errors,
            ignore_errors,
            failure_if,
            notify_rejects: AtomicBool::new(false),
            last_error: AtomicUsize::new(0),
            fleet_wake: OnceLock::new(),
        };
        rb_self
            .0
            .set(inner)
            .map_err(|_| Error::new(ruby.exception_runtime_error(), "CircuitBreaker is already initialized"))
    }

    /// The seeds' `probe_ratio:` r, with `half_open_window:` w, as the
    /// share of `ramp: [r]` and `half_open_calls: max(1, floor(w * r))`,
    /// each checked by the core under the name the caller wrote (docs/configuration.md;
    /// lib/circuit_breaker/options.rb decides when they apply).
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

    /// Runs the Ruby listeners of `tr` (no lock held, no jump pending).
    /// `__transition` reports a listener's StandardError itself; what gets
    /// through (Interrupt, Thread#kill, a throw) must go on to the caller.
    fn notify(ruby: &Ruby, rb_self: Obj<Self>, tr: &Transitions) -> Result<(), Error> {
        if tr.is_empty() {
            return Ok(());
        }
        let this = rb_self.get(ruby)?;
        for t in tr.iter() {
            let metrics = metrics_hash(ruby, &t.metrics, this.shared.is_mapped(), this.shared.published().dropped())?;
            let before = &t.window_before;
            let last_error = match this.last_error.load(Ordering::Relaxed) {
                0 => ruby.qnil().as_value(),
                // SAFETY: a class kept alive by the breaker's mark.
                raw => unsafe { cruby::object(raw as cruby::Raw) },
            };
            let args = (
                state_sym(ruby, t.from),
                state_sym(ruby, t.to),
                reason_sym(ruby, t.reason),
                metrics,
                before.error_rate(),
                before.slow_call_rate(),
                last_error,
            );
            rb_self.funcall::<_, _, Value>(*ID_TRANSITION, args)?;
            std::hint::black_box(&args);
        }
        Ok(())
    }

    fn open_error(ruby: &Ruby, rb_self: Obj<Self>, r: Rejection) -> Result<Exception, Error> {
        let class: ExceptionClass = ruby.get_inner(&OPEN_ERROR);
        // Uninitialised: its ivars are set just below.
        let ex = cruby::alloc(class);
        let ex =
            Exception::from_value(ex).ok_or_else(|| arg_error(ruby, "OpenError is not an Exception".to_owned()))?;
        let name = rb_self.get(ruby)?.name.map_or_else(|| ruby.qnil().as_value(), |n| ruby.get_inner(n).as_value());
        let ivars = [
            (&ID_BREAKER_NAME, name),
            (&ID_STATE, state_sym(ruby, r.state).as_value()),
            (&ID_RETRY_AFTER, secs_value(ruby, r.retry_after)),
        ];
        for (id, v) in ivars {
            let id: OpaqueId = **id;
            cruby::ivar_set(ex, magnus::value::IntoId::into_id_with(id, ruby), v);
        }
        // A backtrace set beforehand spares Ruby capturing one at raise.
        // Its own empty Array: callers change backtraces in place (RSpec's
        // failure report filters it with reject!), so one shared frozen
        // Array made them raise FrozenError.
        ex.funcall::<_, _, Value>(*ID_SET_BACKTRACE, (ruby.ary_new(),))?;
        Ok(ex)
    }

    /// The error for a rejected call, after its listeners ran.
    fn rejected(ruby: &Ruby, rb_self: Obj<Self>, r: Rejection) -> Result<Exception, Error> {
        let ex = Self::open_error(ruby, rb_self, r)?;
        if rb_self.get(ruby)?.rejections_watched(ruby) {
            // As in `notify`: only what the listeners' guard let through.
            rb_self.funcall::<_, _, Value>(*ID_REJECTED, (ex,))?;
        }
        Ok(ex)
    }

    /// `CircuitBreaker#call`. Every way out other than a value (the
    /// rejection, the block's exception or jump, a listener's error) is
    /// returned as an [`Exit`] and resumed by the method's entry once this
    /// frame is gone (cruby::define_method_0), so nothing here is skipped.
    fn call(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Value, Exit> {
        let live = cruby::Live::new();
        let no_block = || Exit::Error(arg_error(ruby, "CircuitBreaker#call needs a block".to_owned()));
        let this = rb_self.get(ruby)?;
        let start = this.clock.now();
        // Closed (the common case): no lock, nothing to change, and a
        // missing block is noticed when yielding fails (below), which spares
        // every call a VM call (docs/performance.md).
        let permit = match this.shared.published().admitting() {
            Some(p) => p,
            None => {
                if !ruby.block_given() {
                    return Err(no_block());
                }
                let (decision, tr) = this.admit(ruby, start)?;
                if !tr.is_empty() {
                    Self::notify_or_release(ruby, rb_self, &tr, decision)?;
                }
                match decision {
                    Decision::Allowed(p) => p,
                    Decision::Rejected(r) => return Err(Exit::Raise(Self::rejected(ruby, rb_self, r)?)),
                }
            }
        };

        let result = cruby::yield_block();
        if matches!(result, Err(Unwound::Raised(_))) && !permit.probe && !ruby.block_given() {
            // Nothing to settle: a permit that is not a probe holds nothing.
            return Err(no_block());
        }

        let end = this.clock.now();
        let duration_ns = end.saturating_sub(start).max(0) as f64;
        if let (Ok(value), None) = (&result, this.failure_if) {
            // The common case, settled without the general matching below.
            let tr = this.finish(ruby, |b, w, c| b.complete(w, c, permit, Outcome::Success { duration_ns }, end))?;
            if !tr.is_empty() {
                Self::notify(ruby, rb_self, &tr)?;
            }
            // Keeps the value where the GC's stack scan sees it while
            // listeners ran.
            return Ok(*std::hint::black_box(value));
        }
        let (outcome, raise_instead) = match &result {
            Ok(value) => match this.failure_if {
                None => (Outcome::Success { duration_ns }, None),
                Some(f) => match ruby.get_inner(f).funcall::<_, _, Value>(*ID_CALL, (*value,)) {
                    Ok(v) if v.to_bool() => (Outcome::Failure { duration_ns }, None),
                    Ok(_) => (Outcome::Success { duration_ns }, None),
                    Err(e) => (Outcome::Failure { duration_ns }, Some(e)),
                },
            },
            // Thread#kill: no outcome; a probe slot goes back.
            Err(Unwound::Jumped(cruby::TAG_FATAL)) => (Outcome::Released, None),
            // break, next, throw, return: the block finished early.
            Err(Unwound::Jumped(_)) => (Outcome::Success { duration_ns }, None),
            Err(Unwound::Raised(ex)) => match this.classify(ruby, *ex) {
                Ok(true) => {
                    this.last_error.store(cruby::raw(ex.class()) as usize, Ordering::Relaxed);
                    (Outcome::Failure { duration_ns }, None)
                }
                Ok(false) => (Outcome::Released, None),
                Err(e) => (Outcome::Failure { duration_ns }, Some(e)),
            },
        };
        let tr = this.finish(ruby, |b, w, c| b.complete(w, c, permit, outcome, end))?;
        if let Outcome::Failure { .. } = outcome {
            this.failed();
        }
        if !tr.is_empty() {
            if let Err(Unwound::Jumped(tag)) = result {
                // Listeners never run while a jump is pending: they run in
                // an ensure function as the jump resumes.
                return Err(Exit::JumpEnsuring(
                    tag,
                    Box::new(move || {
                        let _live = live;
                        Ruby::get().map_or(Ok(()), |ruby| Self::notify(&ruby, rb_self, &tr))
                    }),
                ));
            }
            Self::notify(ruby, rb_self, &tr)?;
        }
        // Keeps the block's value where the GC's stack scan sees it while
        // Ruby code (listeners) ran above.
        std::hint::black_box((&result, &raise_instead));
        match (raise_instead, result) {
            (Some(e), _) => Err(e.into()),
            (None, Err(Unwound::Raised(ex))) => Err(Exit::Raise(ex)),
            (None, Err(Unwound::Jumped(tag))) => Err(Exit::Jump(tag)),
            (None, Ok(v)) => Ok(v),
        }
    }

    /// `allow?`'s native half: takes a permit and keeps it at the end of
    /// `queue`, the calling thread's permits of this breaker, with no Ruby
    /// code in between, so no interrupt can lose it
    /// (lib/circuit_breaker/permits.rb, docs/semantics-permits.md).
    fn acquire(ruby: &Ruby, rb_self: Obj<Self>, queue: RArray) -> Result<bool, Error> {
        let this = rb_self.get(ruby)?;
        let now = this.clock.now();
        let (decision, tr) = this.admit(ruby, now)?;
        Self::notify_or_release(ruby, rb_self, &tr, decision)?;
        match decision {
            Decision::Allowed(p) => {
                keep(queue, p)?;
                Ok(true)
            }
            Decision::Rejected(r) => {
                // `allow?` raises nothing: the error exists for listeners only.
                if this.rejections_watched(ruby) {
                    Self::rejected(ruby, rb_self, r)?;
                }
                Ok(false)
            }
        }
    }

    /// `record_*`'s native half: settles the oldest permit of `queue` (the
    /// calling thread's, or nil), or records without one.
    fn settle(
        ruby: &Ruby,
        rb_self: Obj<Self>,
        queue: Option<RArray>,
        success: Value,
        duration: Value,
    ) -> Result<(), Error> {
        // Converted first: a bad duration leaves the permit in place.
        let duration_ns = args::duration_ms(ruby, duration)? * 1e6;
        let outcome =
            if success.to_bool() { Outcome::Success { duration_ns } } else { Outcome::Failure { duration_ns } };
        let this = rb_self.get(ruby)?;
        let permit = queue.map(take_oldest).transpose()?.flatten();
        let now = this.clock.now();
        let tr = this.finish(ruby, |b, w, c| match permit {
            Some(p) => b.complete(w, c, p, outcome, now),
            None => b.record_unpermitted(w, c, outcome, now),
        })?;
        if let Outcome::Failure { .. } = outcome {
            this.failed();
        }
        Self::notify(ruby, rb_self, &tr)
    }

    /// Notifies `tr`; when that raises, a permit `decision` handed out is
    /// given back before the error goes on (its call will never run).
    fn notify_or_release(ruby: &Ruby, rb_self: Obj<Self>, tr: &Transitions, decision: Decision) -> Result<(), Error> {
        let result = Self::notify(ruby, rb_self, tr);
        if let (Err(_), Decision::Allowed(p)) = (&result, decision) {
            let this = rb_self.get(ruby)?;
            let now = this.clock.now();
            // A release decides nothing, so it has no transitions to report.
            let _ = this.finish(ruby, |b, w, c| b.complete(w, c, p, Outcome::Released, now));
        }
        result
    }

    fn control(
        ruby: &Ruby,
        rb_self: Obj<Self>,
        op: fn(&mut CoreBreaker, &mut PlacedWindow, &Config, i64) -> Transitions,
    ) -> Result<Obj<Self>, Error> {
        let this = rb_self.get(ruby)?;
        let now = this.clock.now();
        let tr = this.step_or_raise(ruby, |b, w, c| op(b, w, c, now))?;
        Self::notify(ruby, rb_self, &tr)?;
        Ok(rb_self)
    }

    fn trip(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Obj<Self>, Error> {
        Self::control(ruby, rb_self, |b, w, c, now| b.trip(w, c, now))
    }

    fn reset(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Obj<Self>, Error> {
        Self::control(ruby, rb_self, |b, w, c, now| b.reset(w, c, now))
    }

    fn force_open(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Obj<Self>, Error> {
        Self::control(ruby, rb_self, |b, w, c, now| b.force_open(w, c, now))
    }

    fn disable(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Obj<Self>, Error> {
        Self::control(ruby, rb_self, |b, w, c, now| b.disable(w, c, now))
    }

    fn snapshot(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Metrics, Error> {
        let this = rb_self.get(ruby)?;
        let now = this.clock.now();
        let (m, tr) = this.step_or_raise(ruby, |b, w, c| b.metrics(w, c, now))?;
        Self::notify(ruby, rb_self, &tr)?;
        Ok(m)
    }

    fn state(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Symbol, Error> {
        let this = rb_self.get(ruby)?;
        let now = this.clock.now();
        match this.step(|b, w, c| b.metrics(w, c, now)) {
            Ok((m, tr)) => {
                Self::notify(ruby, rb_self, &tr)?;
                Ok(state_sym(ruby, m.state))
            }
            // A stuck holder: the published state (timers not applied).
            Err(Blocked::Busy) => Ok(state_sym(ruby, this.shared.published().state())),
            Err(b) => Err(b.into_error(ruby, &this.shared)),
        }
    }

    fn metrics(ruby: &Ruby, rb_self: Obj<Self>) -> Result<RHash, Error> {
        let this = rb_self.get(ruby)?;
        metrics_hash(ruby, &Self::snapshot(ruby, rb_self)?, this.shared.is_mapped(), this.shared.published().dropped())
    }

    fn retry_after(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Value, Error> {
        Ok(secs_value(ruby, Self::snapshot(ruby, rb_self)?.retry_after))
    }

    fn name(ruby: &Ruby, rb_self: &Self) -> Result<Option<RString>, Error> {
        Ok(rb_self.get(ruby)?.name.map(|n| ruby.get_inner(n)))
    }

    fn window(ruby: &Ruby, rb_self: &Self) -> Result<Value, Error> {
        Ok(ruby.get_inner(rb_self.get(ruby)?.window))
    }

    /// Test hook: holds the shared lock for `ms` (at most a minute).
    fn hold_shared_lock(ruby: &Ruby, rb_self: &Self, ms: u64) -> Result<(), Error> {
        let this = rb_self.get(ruby)?;
        this.shared.hold_lock_for_test(ms.min(60_000)).map_err(|e| crate::errors::system_error(ruby, "shared lock", e))
    }

    /// Test hook: how long this breaker waits for a busy shared lock.
    fn set_lock_wait(ruby: &Ruby, rb_self: &Self, seconds: Value) -> Result<(), Error> {
        let secs = args::float(ruby, "lock wait", seconds)?;
        rb_self.get(ruby)?.shared.set_lock_wait(circuit_breaker_core::clock::nanos_from_secs(secs));
        Ok(())
    }

    /// The file a `shared:` breaker lives in, nil for a breaker of this
    /// process.
    fn shared_path(ruby: &Ruby, rb_self: &Self) -> Result<Option<String>, Error> {
        Ok(rb_self.get(ruby)?.shared.path().map(|p| p.display().to_string()))
    }

    fn set_notify_rejects(ruby: &Ruby, rb_self: &Self, on: bool) -> Result<(), Error> {
        rb_self.get(ruby)?.notify_rejects.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// The fleet's key for this breaker: its configuration and window
    /// settings, hashed (docs/fleet.md, "Keys").
    fn fleet_hash(ruby: &Ruby, rb_self: &Self) -> Result<String, Error> {
        let this = rb_self.get(ruby)?;
        Ok(format!("{:016x}", fleet::key_hash(&this.cfg, &this.shared.spec())))
    }

    /// The fleet's probe quota per stage (the script grants up to it).
    fn fleet_quota(ruby: &Ruby, rb_self: &Self) -> Result<u32, Error> {
        Ok(rb_self.get(ruby)?.cfg.half_open_calls)
    }

    /// The longest an opening can last, in ms (the keys' TTL follows it).
    fn fleet_longest_open_ms(ruby: &Ruby, rb_self: &Self) -> Result<i64, Error> {
        let cfg = &rb_self.get(ruby)?.cfg;
        Ok(cfg.max_open_duration.unwrap_or(cfg.open_duration) / 1_000_000)
    }

    /// Makes this a fleet breaker of the syncer `waker` belongs to: its
    /// manual actions go to the fleet, its failures wake the syncer.
    fn fleet_attach(ruby: &Ruby, rb_self: &Self, waker: &crate::fleet::Waker) -> Result<(), Error> {
        let this = rb_self.get(ruby)?;
        this.step_or_raise(ruby, |b, _, _| b.attach_fleet())?;
        let _ = this.fleet_wake.set(Arc::clone(&waker.0));
        Ok(())
    }

    /// Whether this process sends for the breaker (`shared:`: one per
    /// host; the others stand by and take over when it goes silent for
    /// `stale_ms`), and whether the last send succeeded.
    fn fleet_claim(ruby: &Ruby, rb_self: &Self, stale_ms: u64) -> Result<(bool, bool), Error> {
        let this = rb_self.get(ruby)?;
        let now = this.clock.now();
        let pid = std::process::id();
        let stale = i64::try_from(stale_ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX);
        this.step_or_raise(ruby, |b, _, _| (b.fleet_claim(pid, now, stale), b.fleet_connected()))
    }

    /// The pid of the process that sends for this breaker (0: none yet).
    fn fleet_syncer(ruby: &Ruby, rb_self: &Self) -> Result<u32, Error> {
        rb_self.get(ruby)?.step_or_raise(ruby, |b, _, _| b.fleet_syncer())
    }

    /// What the syncer sends next for this breaker (Integers).
    fn fleet_report(ruby: &Ruby, rb_self: &Self) -> Result<RArray, Error> {
        let this = rb_self.get(ruby)?;
        let now = this.clock.now();
        let report = this.step_or_raise(ruby, |b, w, c| b.fleet_report(w, c, now))?;
        Ok(ruby.ary_from_iter(report))
    }

    /// Takes the script's reply (nil: the send failed), notifies what
    /// changed, and answers whether the host is connected and whether a
    /// proposal waits for the next send. Anything but an Array of Integers
    /// is a malformed reply.
    fn fleet_receive(ruby: &Ruby, rb_self: Obj<Self>, reply: Value) -> Result<(bool, bool), Error> {
        let ints: Option<Vec<i64>> = RArray::from_value(reply).and_then(|a| {
            a.into_iter().map(|v| magnus::Integer::from_value(v).and_then(|i| i.to_i64().ok())).collect()
        });
        let this = rb_self.get(ruby)?;
        let now = this.clock.now();
        let (tr, status) = this.step_or_raise(ruby, |b, w, c| {
            let tr = b.fleet_receive(w, c, ints.as_deref(), now);
            (tr, (b.fleet_connected(), b.fleet_proposing()))
        })?;
        Self::notify(ruby, rb_self, &tr)?;
        Ok(status)
    }
}

fn active_support_loaded(ruby: &Ruby) -> bool {
    static ID_AS: LazyId = LazyId::new("ActiveSupport");
    let id: OpaqueId = *ID_AS;
    cruby::const_defined(ruby.class_object(), magnus::value::IntoId::into_id_with(id, ruby))
}

/// `CircuitBreaker#call`.
struct CallMethod;

impl crate::cruby::Method0 for CallMethod {
    type Receiver = Breaker;
    fn call(ruby: &Ruby, rb_self: Obj<Breaker>) -> Result<Value, Exit> {
        Breaker::call(ruby, rb_self)
    }
}

pub fn init(class: RClass) -> Result<(), Error> {
    class.define_alloc_func::<Breaker>();
    class.define_private_method("__setup", method!(Breaker::setup, 1))?;
    class.define_private_method("initialize_copy", method!(refuse_copy, 1))?;
    class.singleton_class()?.define_private_method("__seed_probes", function!(Breaker::seed_probes, 2))?;
    // The hot path: entered without magnus's receiver conversion (see
    // cruby::define_method_0).
    crate::cruby::define_method_0::<CallMethod>(class, c"call");
    class.define_method("state", method!(Breaker::state, 0))?;
    class.define_method("metrics", method!(Breaker::metrics, 0))?;
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
    class.define_private_method("__hold_shared_lock", method!(Breaker::hold_shared_lock, 1))?;
    class.define_private_method("__lock_wait=", method!(Breaker::set_lock_wait, 1))?;
    class.define_method("shared_path", method!(Breaker::shared_path, 0))?;
    class.define_singleton_method("shared_supported?", function!(|| circuit_breaker_core::shm::SUPPORTED, 0))?;
    // Checked builds only (cruby::Live): spec/circuit_breaker/exits_spec.rb.
    #[cfg(debug_assertions)]
    class.singleton_class()?.define_private_method("__live_native_values", function!(cruby::Live::count, 0))?;
    class.define_private_method("__fleet_hash", method!(Breaker::fleet_hash, 0))?;
    class.define_private_method("__fleet_attach", method!(Breaker::fleet_attach, 1))?;
    class.define_private_method("__fleet_quota", method!(Breaker::fleet_quota, 0))?;
    class.define_private_method("__fleet_longest_open_ms", method!(Breaker::fleet_longest_open_ms, 0))?;
    class.define_private_method("__fleet_report", method!(Breaker::fleet_report, 0))?;
    class.define_private_method("__fleet_claim", method!(Breaker::fleet_claim, 1))?;
    class.define_private_method("__fleet_syncer", method!(Breaker::fleet_syncer, 0))?;
    class.define_private_method("__fleet_receive", method!(Breaker::fleet_receive, 1))?;
    Ok(())
}
