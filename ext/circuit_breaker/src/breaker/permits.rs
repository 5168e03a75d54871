//! The low-level API's native halves (`allow?`, `record_*`): a thread's
//! permits, kept in a Ruby Array (lib/circuit_breaker/permits.rb), and
//! with a concurrency cap the slot each permit holds (docs/concurrency.md).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use circuit_breaker_core::{Decision, Nanos, Outcome, Permit, Slot};
use magnus::{prelude::*, typed_data::Obj, value::ReprValue, Error, Integer, RArray, RClass, Ruby, TryConvert, Value};

use crate::args;
use crate::window::LockedRecord;

use super::Breaker;

/// The slot of an `allow?` permit not yet recorded: given back once, by
/// the permit's `record_*`, by the breaker once it is older than its bound
/// ([`Breaker::expire_loose`]), or when its [`Claim`] is collected (its
/// fiber or thread is gone, and its permits with it).
pub(super) struct Loose {
    record: Arc<LockedRecord>,
    slot: Slot,
    /// When it was taken, on the breaker's clock.
    pub(super) taken_at: Nanos,
    released: AtomicBool,
}

impl Loose {
    /// Gives the slot back, unless that was done already.
    pub(super) fn release(&self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            self.record.slots().release(self.slot);
        }
    }

    pub(super) fn released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }
}

/// A permit's slot as the fiber's permit list holds it: a Ruby object
/// (`CircuitBreaker::ConcurrencySlot`, `@api private`) whose collection
/// gives the slot back. Dropping it touches only atomics (and a futex
/// wake), as the GC's free function may.
#[magnus::wrap(class = "CircuitBreaker::ConcurrencySlot", free_immediately, size)]
pub(super) struct Claim(Arc<Loose>);

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// Gives back the slots of the permits in `queue` (a list of [`keep`]).
fn release_claims(queue: RArray) -> Result<(), Error> {
    for i in (1..queue.len() as isize).step_by(2) {
        let v: Value = queue.entry(i)?;
        if let Ok(claim) = <&Claim>::try_convert(v) {
            claim.0.release();
        }
    }
    Ok(())
}

/// Keeps permit `p` at the end of a thread's `queue` of permits: a flat
/// Array of permit bits and counts, oldest first. Equal permits count
/// together (every permit of a closed breaker's generation is the same), so
/// a thread's permits take no memory per call; permits of an earlier
/// generation can decide nothing, so a newer one drops them (their slots
/// given back) and an abandoned permit never settles a later call in its
/// place. A permit holding a slot of the cap is kept alone, with its
/// [`Claim`] in place of the count.
pub(super) fn keep(queue: RArray, p: Permit, claim: Option<Claim>) -> Result<(), Error> {
    let bits = p.to_bits();
    let len = queue.len() as isize;
    if len >= 2 {
        let last: u64 = queue.entry(len - 2)?;
        if last == bits && claim.is_none() {
            if let Some(count) = Integer::from_value(queue.entry(len - 1)?) {
                return queue.store(len - 1, count.to_u64()?.saturating_add(1));
            }
        }
        if !Permit::from_bits(last).same_generation(p) {
            release_claims(queue)?;
            queue.clear()?;
        }
    }
    queue.push(bits)?;
    match claim {
        Some(c) => queue.push(c),
        None => queue.push(1u64),
    }
}

/// A permit taken out of a queue, with the slot it holds (None: none).
pub(super) type Taken = (Permit, Option<Arc<Loose>>);

/// Takes the oldest permit out of a thread's `queue` (see [`keep`]), with
/// the slot it holds.
pub(super) fn take_oldest(queue: RArray) -> Result<Option<Taken>, Error> {
    if queue.len() < 2 {
        return Ok(None);
    }
    let bits: u64 = queue.entry(0)?;
    let tail: Value = queue.entry(1)?;
    let mut loose = None;
    match Integer::from_value(tail).map(|c| c.to_u64()).transpose()? {
        Some(count) if count > 1 => queue.store(1, count - 1)?,
        count => {
            if count.is_none() {
                loose = <&Claim>::try_convert(tail).ok().map(|c| c.0.clone());
            }
            queue.shift::<Value>()?;
            queue.shift::<Value>()?;
        }
    }
    Ok(Some((Permit::from_bits(bits), loose)))
}

impl Breaker {
    /// `allow?`'s native half: takes a permit and keeps it at the end of
    /// `queue`, the calling thread's permits of this breaker, with no Ruby
    /// code in between, so no interrupt can lose it
    /// (lib/circuit_breaker/permits.rb, docs/semantics-permits.md).
    pub(super) fn acquire(ruby: &Ruby, rb_self: Obj<Self>, queue: RArray) -> Result<bool, Error> {
        Self::use_fleet(ruby, rb_self)?;
        let this = rb_self.get(ruby)?;
        let now = this.clock.now();
        let (decision, tr) = this.admit(ruby, now)?;
        Self::notify_or_release(ruby, rb_self, &tr, decision)?;
        match decision {
            Decision::Allowed(p) if this.capped => {
                let slots = this.record.slots();
                let Some(slot) =
                    slots.try_take().map_or_else(|| Self::slot_at_cap(ruby, rb_self, p), |s| Ok(Some(s)))?
                else {
                    if this.rejection_audience(ruby).is_some() {
                        Self::limited(ruby, rb_self)?;
                    }
                    return Ok(false);
                };
                let loose = Arc::new(Loose {
                    record: this.record.clone(),
                    slot,
                    taken_at: now,
                    released: AtomicBool::new(false),
                });
                this.hold_loose(loose.clone());
                // Kept with no Ruby code in between, as the permit is.
                keep(queue, p, Some(Claim(loose)))?;
                Ok(true)
            }
            Decision::Allowed(p) => {
                keep(queue, p, None)?;
                Ok(true)
            }
            Decision::Rejected(r) => {
                // `allow?` raises nothing: the error exists for listeners only.
                if this.rejection_audience(ruby).is_some() {
                    Self::rejected(ruby, rb_self, r)?;
                }
                Ok(false)
            }
        }
    }

    /// `record_*`'s native half: settles the oldest permit of `queue` (the
    /// calling thread's, or nil), or records without one.
    pub(super) fn settle(
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
        let (permit, loose) = queue.map(take_oldest).transpose()?.flatten().unzip();
        // The calls in flight when its allow? took the slot, its own
        // included (0: no slot).
        let loose = loose.flatten();
        let in_flight = loose.as_ref().map_or(0, |l| l.slot.began_with());
        if let Some(loose) = loose {
            loose.release();
        }
        let now = this.clock.now();
        let tr = this.finish(ruby, |b, w, c| match permit {
            Some(p) => {
                let tr = b.complete(w, c, p, outcome, now, in_flight);
                this.publish_cap(b, c);
                tr
            }
            None => b.record_unpermitted(w, c, outcome, now),
        })?;
        if let Outcome::Failure { .. } = outcome {
            this.failed();
        }
        Self::notify(ruby, rb_self, &tr)
    }
}

pub(super) fn init(class: RClass) -> Result<(), Error> {
    let ruby = Ruby::get_with(class);
    let slot = class.define_class("ConcurrencySlot", ruby.class_object())?;
    slot.undef_default_alloc_func();
    Ok(())
}
