//! Which exceptions count: `record_errors:` / `ignore_errors:` matchers,
//! `Timeout`'s classes, and the classification of a raised exception.

use magnus::{
    prelude::*,
    value::{LazyId, Opaque, ReprValue},
    Error, Exception, RArray, RClass, Ruby, Value,
};

use crate::cruby;
use crate::errors::{type_error, ERROR, FAILURE};

/// `call`: what a callable matcher answers, as do `fallback:` and
/// `failure_if:` (call.rs) and the options that take a Proc (mod.rs).
pub(super) static ID_CALL: LazyId = LazyId::new("call");

/// Timeout::Error, and Timeout::ExitException where the timeout gem has it
/// (lib/circuit_breaker.rb requires "timeout" before loading this library).
static TIMEOUT_CLASSES: std::sync::OnceLock<Vec<cruby::Raw>> = std::sync::OnceLock::new();

pub(super) fn timeout_classes(ruby: &Ruby) -> &'static [cruby::Raw] {
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

/// `record_errors:` / `ignore_errors:` sorted for matching: classes and
/// modules as raw handles (pinned by the breaker's mark function, so they
/// never move), those that define their own `===` apart (matched by
/// calling it, as `rescue` does), callables apart. `CircuitBreaker::Error`
/// and its subclasses are always asked with `===`, at call time: requiring
/// an adapter gives `CircuitBreaker::OpenError` and `CircuitBreaker::Error`
/// a `===` that also accepts its rejections (lib/circuit_breaker/rejection.rb,
/// the rule's one place), whenever the breaker was built.
#[derive(Default)]
pub(super) struct Matchers {
    modules: Vec<cruby::Raw>,
    own_eqq: Vec<Opaque<Value>>,
    callables: Vec<Opaque<Value>>,
}

static ID_EQQ: LazyId = LazyId::new("===");

/// Whether `module === x` is Module#=== (a kind_of? test) rather than a
/// `===` of its own.
pub(super) fn plain_eqq(ruby: &Ruby, module: Value) -> Result<bool, Error> {
    let method: Value = module.funcall("method", (*ID_EQQ,))?;
    let owner: Value = method.funcall("owner", ())?;
    Ok(cruby::raw(owner) == cruby::raw(ruby.class_module()))
}

/// Whether `module` is `CircuitBreaker::Error` or one of its subclasses.
fn gem_error(ruby: &Ruby, module: Value) -> bool {
    RClass::from_value(module).is_some_and(|class| class.is_inherited(ruby.get_inner(&ERROR)))
}

impl Matchers {
    /// An Array of Exception classes (or modules) and callables.
    pub(super) fn parse(ruby: &Ruby, name: &str, v: Value) -> Result<Self, Error> {
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
            if module && plain_eqq(ruby, item)? && !gem_error(ruby, item) {
                m.modules.push(cruby::raw(item));
            } else if module {
                m.own_eqq.push(Opaque::from(item));
            }
        }
        Ok(m)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.modules.is_empty() && self.own_eqq.is_empty() && self.callables.is_empty()
    }

    /// Whether `ex` matches one of the modules as `rescue` matches it
    /// (`===`), or a callable returns truthy for it. A `===` or a callable
    /// that raises makes the error.
    pub(super) fn hit(&self, ruby: &Ruby, ex: Exception) -> Result<bool, Error> {
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

    pub(super) fn mark(&self, marker: &magnus::gc::Marker) {
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

/// Whether a raised exception is recorded as a failure (true) or passes
/// through unrecorded (false), by a breaker's `record_errors:` and
/// `ignore_errors:`.
pub(super) fn classify(
    ruby: &Ruby,
    record_errors: &Matchers,
    ignore_errors: &Matchers,
    ex: Exception,
) -> Result<bool, Error> {
    // Checked first: a caller that raises it has decided (docs/semantics.md).
    if ex.is_kind_of(ruby.get_inner(&FAILURE)) {
        return Ok(true);
    }
    if !ignore_errors.is_empty() && ignore_errors.hit(ruby, ex)? {
        return Ok(false);
    }
    if timeout_classes(ruby).iter().any(|&t| cruby::kind_of(ex, t)) {
        return Ok(true);
    }
    record_errors.hit(ruby, ex)
}
