//! `CircuitBreaker#call`: admission, the yield, the classification of how
//! the block ended, and the exit returned as a value (cruby::Exit).

use std::sync::atomic::Ordering;

use circuit_breaker_core::{Decision, Nanos, Outcome, Permit};
use magnus::{typed_data::Obj, value::ReprValue, Ruby, Value};

use crate::cruby::{self, Exit, Unwound};
use crate::errors::arg_error;

use super::{Breaker, ID_CALL};

impl Breaker {
    /// `CircuitBreaker#call`. Every way out other than a value (the
    /// rejection, the block's exception or jump, a listener's error) is
    /// returned as an [`Exit`] and resumed by the method's entry once this
    /// frame is gone (cruby::define_method_0), so nothing here is skipped.
    pub(super) fn call(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Value, Exit> {
        let live = cruby::Live::new();
        let no_block = || Exit::Error(arg_error(ruby, "CircuitBreaker#call needs a block".to_owned()));
        let this = rb_self.get(ruby)?;
        let start = this.clock.now();
        // Closed (the common case): no lock, nothing to change, and a
        // missing block is noticed when yielding fails (below), which spares
        // every call a VM call (docs/performance.md).
        let permit = match this.shared.published().admitting() {
            Some(p) => p,
            None if !ruby.block_given() => return Err(no_block()),
            None => Self::admit_call(ruby, rb_self, start)?,
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
        Self::settle_call(ruby, rb_self, permit, result, duration_ns, end, live)
    }

    /// Asks the locked step to admit a call the published state did not
    /// (open, half-open, a stuck shared lock): a permit, or the rejection
    /// as an exit, once its listeners ran.
    #[inline]
    fn admit_call(ruby: &Ruby, rb_self: Obj<Self>, now: Nanos) -> Result<Permit, Exit> {
        let this = rb_self.get(ruby)?;
        let (decision, tr) = this.admit(ruby, now)?;
        if !tr.is_empty() {
            Self::notify_or_release(ruby, rb_self, &tr, decision)?;
        }
        match decision {
            Decision::Allowed(p) => Ok(p),
            Decision::Rejected(r) => Err(Exit::Raise(Self::rejected(ruby, rb_self, r)?)),
        }
    }

    /// Settles a call that did not simply return a value with no
    /// `failure_if` (the common case, settled in `call`): classifies how
    /// the block ended (docs/semantics.md), records it, runs the listeners
    /// (in an ensure function while a jump is pending), and returns the
    /// block's value or its way out.
    #[allow(clippy::too_many_arguments)]
    fn settle_call(
        ruby: &Ruby,
        rb_self: Obj<Self>,
        permit: Permit,
        result: Result<Value, Unwound>,
        duration_ns: f64,
        end: Nanos,
        live: cruby::Live,
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
}

/// `CircuitBreaker#call`.
pub(super) struct CallMethod;

impl crate::cruby::Method0 for CallMethod {
    type Receiver = Breaker;
    fn call(ruby: &Ruby, rb_self: Obj<Breaker>) -> Result<Value, Exit> {
        Breaker::call(ruby, rb_self)
    }
}
