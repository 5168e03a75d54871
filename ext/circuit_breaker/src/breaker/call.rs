//! `CircuitBreaker#call`: admission, the yield, the classification of how
//! the block ended, the fallback, and the exit returned as a value
//! (cruby::Exit).

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;

use circuit_breaker_core::{Decision, Nanos, Outcome, Permit};
use magnus::error::ErrorType;
use magnus::scan_args::get_kwargs;
use magnus::{typed_data::Obj, value::ReprValue, Error, RClass, RHash, Ruby, Symbol, TryConvert, Value};

use crate::cruby::{self, Exit, Unwound};
use crate::errors::{arg_error, shown, type_error};

use super::matchers::{classify, ID_CALL};
use super::Breaker;

/// `call(fallback: ->(error) { ... }, fallback_on: :rejection | :failure)`:
/// what answers instead of an exception (docs/semantics.md, "Fallback").
pub(super) struct Fallback {
    /// Called with the error; its value is `call`'s. Alive on the VM's
    /// stack, as an argument of the running `call`.
    callable: Value,
    /// `fallback_on: :failure`: a failure of the block too, not only a
    /// rejection.
    on_failure: bool,
    /// `$!` as the call began, put back when the fallback answers for a
    /// failure (cruby::yield_block). Read here, so that a call without
    /// keywords never reads it.
    errinfo_before: Value,
}

impl Fallback {
    /// `call`'s arguments: none, or the keywords `fallback:` (required once
    /// any is given) and `fallback_on:`.
    #[inline(never)]
    fn from_args(ruby: &Ruby, args: &[Value]) -> Result<Option<Self>, Error> {
        let kw = match args {
            [] => return Ok(None),
            [kw] if cruby::keywords_given() => RHash::try_convert(*kw)?,
            _ => {
                return Err(arg_error(
                    ruby,
                    format!(
                        "wrong number of arguments (given {}, expected 0; call takes only the keywords fallback: and fallback_on:)",
                        args.len()
                    ),
                ))
            }
        };
        let kw = get_kwargs::<_, (Value,), (Option<Value>,), ()>(kw, &["fallback"], &["fallback_on"])?;
        let (callable,) = kw.required;
        let (on,) = kw.optional;
        if !callable.respond_to("call", false)? {
            return Err(type_error(
                ruby,
                "fallback",
                "an object that responds to call (a lambda taking the error)",
                callable,
            ));
        }
        let on_failure = match on.filter(|v| !v.is_nil()).map(Symbol::try_convert) {
            None => false,
            Some(Ok(s)) if s.name()? == "rejection" => false,
            Some(Ok(s)) if s.name()? == "failure" => true,
            Some(_) => {
                let got = on.map_or_else(String::new, shown);
                return Err(arg_error(ruby, format!("fallback_on must be :rejection or :failure (got {got})")));
            }
        };
        Ok(Some(Fallback { callable, on_failure, errinfo_before: cruby::errinfo() }))
    }

    /// The fallback's answer to `error`; what it raises or throws goes on.
    pub(super) fn answer(&self, error: Value) -> Result<Value, Exit> {
        self.callable.funcall::<_, _, Value>(*ID_CALL, (error,)).map_err(Exit::from)
    }

    /// The answer to a failure: `$!` is put back as the call began (the
    /// caught exception is handled, as at the end of a `rescue` clause).
    fn answer_failure(&self, error: Value) -> Result<Value, Exit> {
        cruby::set_errinfo(self.errinfo_before);
        self.answer(error)
    }
}

impl Breaker {
    /// `CircuitBreaker#call`. Every way out other than a value (the
    /// rejection, the block's exception or jump, a listener's error) is
    /// returned as an [`Exit`] and resumed by the method's entry once this
    /// frame is gone (cruby::define_method_args), so nothing here is
    /// skipped.
    ///
    /// With a `fallback`, a rejection (and, `on_failure`, an exception the
    /// breaker recorded as a failure) returns the fallback's value instead.
    #[inline(always)]
    pub(super) fn call(ruby: &Ruby, rb_self: Obj<Self>, fallback: Option<&Fallback>) -> Result<Value, Exit> {
        let live = cruby::Live::new();
        let no_block = || Exit::Error(arg_error(ruby, "CircuitBreaker#call needs a block".to_owned()));
        let this = rb_self.get(ruby)?;
        Self::use_fleet(ruby, rb_self)?;
        let start = this.clock.now();
        // Closed (the common case): no lock, nothing to change, and a
        // missing block is noticed when yielding fails (below), which spares
        // every call a VM call (docs/performance.md).
        let permit = match this.record.published().admitting() {
            Some(p) => p,
            None if !ruby.block_given() => return Err(no_block()),
            None => match Self::admit_call(ruby, rb_self, start, fallback)? {
                ControlFlow::Continue(p) => p,
                ControlFlow::Break(answer) => return Ok(answer),
            },
        };

        // With a cap, a slot too (docs/concurrency.md), given back as soon
        // as the block ended, whichever way.
        let (slot, in_flight, start) = if this.capped {
            match Self::take_slot(ruby, rb_self, permit, start, fallback)? {
                ControlFlow::Continue((slot, start)) => (Some(slot), slot.began_with(), start),
                ControlFlow::Break(answer) => return Ok(answer),
            }
        } else {
            (None, 0, start)
        };
        let result = cruby::yield_block();
        if let Some(slot) = slot {
            this.record.slots().release(slot);
        }
        if matches!(result, Err(Unwound::Raised(_))) && !permit.probe && !ruby.block_given() {
            // Nothing to settle: a permit that is not a probe holds nothing.
            return Err(no_block());
        }

        let end = this.clock.now();
        let duration_ns = end.saturating_sub(start).max(0) as f64;
        if let (Ok(value), None) = (&result, this.failure_if) {
            // The common case, settled without the general matching below.
            let tr = this.finish(ruby, |b, w, c| {
                let tr = b.complete(w, c, permit, Outcome::Success { duration_ns }, end, in_flight);
                this.publish_cap(b, c);
                tr
            })?;
            if !tr.is_empty() {
                Self::notify(ruby, rb_self, &tr)?;
            }
            // Keeps the value where the GC's stack scan sees it while
            // listeners ran.
            return Ok(*std::hint::black_box(value));
        }
        let on_failure = fallback.filter(|f| f.on_failure);
        Self::settle_call(ruby, rb_self, permit, result, duration_ns, end, in_flight, live, on_failure)
    }

    /// Asks the locked step to admit a call the published state did not
    /// (open, half-open, a stuck shared lock): a permit, or the rejection
    /// as an exit (or, with a fallback, its answer), once its listeners ran.
    #[inline]
    fn admit_call(
        ruby: &Ruby,
        rb_self: Obj<Self>,
        now: Nanos,
        fallback: Option<&Fallback>,
    ) -> Result<ControlFlow<Value, Permit>, Exit> {
        let this = rb_self.get(ruby)?;
        let (decision, tr) = this.admit(ruby, now)?;
        if !tr.is_empty() {
            Self::notify_or_release(ruby, rb_self, &tr, decision)?;
        }
        match decision {
            Decision::Allowed(p) => Ok(ControlFlow::Continue(p)),
            Decision::Rejected(r) => {
                let ex = Self::rejected(ruby, rb_self, r)?;
                match fallback {
                    Some(f) => f.answer(ex.as_value()).map(ControlFlow::Break),
                    None => Err(Exit::Raise(ex)),
                }
            }
        }
    }

    /// Settles a call that did not simply return a value with no
    /// `failure_if` (the common case, settled in `call`): classifies how
    /// the block ended (docs/semantics.md), records it, runs the listeners
    /// (in an ensure function while a jump is pending), and returns the
    /// block's value or its way out, or the answer of a fallback given
    /// `fallback_on: :failure` to a raise recorded as a failure.
    #[allow(clippy::too_many_arguments)]
    fn settle_call(
        ruby: &Ruby,
        rb_self: Obj<Self>,
        permit: Permit,
        result: Result<Value, Unwound>,
        duration_ns: f64,
        end: Nanos,
        in_flight: u32,
        live: cruby::Live,
        on_failure: Option<&Fallback>,
    ) -> Result<Value, Exit> {
        let this = rb_self.get(ruby)?;
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
            Err(Unwound::Raised(ex)) => match classify(ruby, &this.record_errors, &this.ignore_errors, *ex) {
                Ok(true) => {
                    this.last_error.store(cruby::raw(ex.class()) as usize, Ordering::Relaxed);
                    (Outcome::Failure { duration_ns }, None)
                }
                Ok(false) => (Outcome::Released, None),
                Err(e) => (Outcome::Failure { duration_ns }, Some(e)),
            },
        };
        let tr = this.finish(ruby, |b, w, c| {
            let tr = b.complete(w, c, permit, outcome, end, in_flight);
            this.publish_cap(b, c);
            tr
        })?;
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
        let on_failure = on_failure.filter(|_| matches!(outcome, Outcome::Failure { .. }));
        match (raise_instead, result) {
            (Some(e), _) => match (on_failure, e.error_type()) {
                (Some(f), ErrorType::Exception(ex)) => f.answer_failure(ex.as_value()),
                _ => Err(e.into()),
            },
            (None, Err(Unwound::Raised(ex))) => match on_failure {
                Some(f) => f.answer_failure(ex.as_value()),
                None => Err(Exit::Raise(ex)),
            },
            (None, Err(Unwound::Jumped(tag))) => Err(Exit::Jump(tag)),
            (None, Ok(v)) => Ok(v),
        }
    }
}

impl Breaker {
    /// Defines `call`, the hot path: entered without magnus's receiver
    /// conversion (see cruby::define_method_args).
    pub(super) fn define_call(class: RClass) {
        crate::cruby::define_method_args::<CallMethod>(class, c"call");
    }
}

/// `CircuitBreaker#call`.
struct CallMethod;

impl crate::cruby::MethodArgs for CallMethod {
    type Receiver = Breaker;
    #[inline]
    fn call(ruby: &Ruby, rb_self: Obj<Breaker>, args: &[Value]) -> Result<Value, Exit> {
        // One call site, inlined into the method's entry: a call without
        // keywords pays a length check (docs/performance.md).
        let fallback = if args.is_empty() { None } else { Fallback::from_args(ruby, args)? };
        Breaker::call(ruby, rb_self, fallback.as_ref())
    }
}
