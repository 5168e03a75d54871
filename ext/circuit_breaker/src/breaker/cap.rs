//! The concurrency cap (`max_concurrent:`, docs/concurrency.md): a slot
//! for each admitted call, taken after the breaker's permit and given back
//! when the call ends; at the cap, `max_wait:` without the GVL, then the
//! refusal, a `ConcurrencyLimitError`.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};

use circuit_breaker_core::clock::{Clock, HostClock};
use circuit_breaker_core::{Nanos, Permit, Slot};
use magnus::{typed_data::Obj, value::ReprValue, Error, Exception, Ruby, Value};

use crate::cruby::{self, Exit};

use super::call::Fallback;
use super::Breaker;

impl Breaker {
    /// The slot of a call the breaker admitted with `permit`, with the
    /// time the call starts once it has it (`start`, unless it waited at
    /// the cap: the time waited for a slot is not the dependency's, so it
    /// is kept out of the call's duration, which the window's slow-call
    /// rate and the adaptive cap read); or (at the cap, once `max_wait:`
    /// ran out) the refusal as an exit, or with a fallback its answer; a
    /// probe permit is then given back.
    #[inline]
    pub(super) fn take_slot(
        ruby: &Ruby,
        rb_self: Obj<Self>,
        permit: Permit,
        start: Nanos,
        fallback: Option<&Fallback>,
    ) -> Result<ControlFlow<Value, (Slot, Nanos)>, Exit> {
        let this = rb_self.get(ruby)?;
        if let Some(slot) = this.record.slots().try_take() {
            return Ok(ControlFlow::Continue((slot, start)));
        }
        match Self::slot_at_cap(ruby, rb_self, permit)? {
            Some(slot) => Ok(ControlFlow::Continue((slot, this.clock.now()))),
            None => {
                let ex = Self::limited(ruby, rb_self)?;
                match fallback {
                    Some(f) => f.answer(ex.as_value()).map(ControlFlow::Break),
                    None => Err(Exit::Raise(ex)),
                }
            }
        }
    }

    /// At the cap: gives back dead processes' slots and `allow?` slots past
    /// their bound, and tries again, then
    /// waits up to `max_wait:`. None: refused (counted in `limited`), and
    /// a probe `permit` given back. An interrupt that cut the wait is
    /// raised, the permit given back first.
    #[cold]
    #[inline(never)]
    pub(super) fn slot_at_cap(ruby: &Ruby, rb_self: Obj<Self>, permit: Permit) -> Result<Option<Slot>, Error> {
        let this = rb_self.get(ruby)?;
        let slots = this.record.slots();
        let freed = this.expire_loose(this.clock.now()) > 0;
        let mut got = if slots.sweep(false) || freed { slots.try_take() } else { None };
        let mut interrupted = None;
        if got.is_none() && this.cfg.max_wait > 0 {
            match Self::wait_for_slot(ruby, rb_self) {
                Ok(slot) => got = slot,
                Err(e) => interrupted = Some(e),
            }
        }
        if got.is_some() {
            return Ok(got);
        }
        if permit.probe {
            // Its call never runs: the probe slot goes back, and the call
            // counts as rejected only (not in `calls`).
            let now = this.clock.now();
            this.finish(ruby, |b, w, c| b.give_back(w, c, permit, now))?;
        }
        if let Some(e) = interrupted {
            return Err(e);
        }
        slots.count_limited();
        Ok(None)
    }

    /// Waits for a slot up to `max_wait:`: the wait runs without the GVL
    /// (offload-safe on Ruby 3.4, docs/fibers.md) and only watches for a
    /// free slot, which is then taken with the GVL held (slots are taken
    /// one at a time per process, ext/circuit_breaker_core/src/slots.rs),
    /// again until the deadline if another caller took it first. None when
    /// none came free in time. An interrupt that raises nothing (a time
    /// slice's tick) goes back to waiting, up to the same deadline.
    fn wait_for_slot(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Option<Slot>, Error> {
        let this = rb_self.get(ruby)?;
        let slots = this.record.slots();
        let clock = HostClock::default();
        let deadline = clock.now().saturating_add(this.cfg.max_wait);
        loop {
            if let Some(slot) = slots.try_take() {
                return Ok(Some(slot));
            }
            if clock.now() >= deadline {
                return Ok(None);
            }
            let waited = cruby::without_gvl(
                |stop: &AtomicBool| (slots.wait_for_free(deadline, stop), stop.load(Ordering::Acquire)),
                AtomicBool::new(false),
            )?;
            match waited {
                Some((true, _)) | Some((false, false)) => {}
                // Ruby wanted the thread back, or had an interrupt pending.
                Some((false, true)) | None => ruby.thread_check_ints()?,
            }
        }
    }

    /// The refusal of a call at the cap, after its listeners ran.
    #[cold]
    pub(super) fn limited(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Exception, Error> {
        let this = rb_self.get(ruby)?;
        let limit = this.record.slots().cap().unwrap_or(0);
        let ex = Self::limit_error(ruby, rb_self, this.record.published().state(), limit)?;
        Self::tell_rejected(ruby, rb_self, ex)?;
        Ok(ex)
    }
}
