//! The low-level API's native halves (`allow?`, `record_*`): a thread's
//! permits, kept in a Ruby Array (lib/circuit_breaker/permits.rb).

use circuit_breaker_core::{Decision, Outcome, Permit};
use magnus::{typed_data::Obj, value::ReprValue, Error, RArray, Ruby, Value};

use crate::args;

use super::Breaker;

/// Keeps permit `p` at the end of a thread's `queue` of permits: a flat
/// Array of permit bits and counts, oldest first. Equal permits count
/// together (every permit of a closed breaker's generation is the same), so
/// a thread's permits take no memory per call; permits of an earlier
/// generation can decide nothing, so a newer one drops them and an
/// abandoned permit never settles a later call in its place.
pub(super) fn keep(queue: RArray, p: Permit) -> Result<(), Error> {
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
pub(super) fn take_oldest(queue: RArray) -> Result<Option<Permit>, Error> {
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
            Decision::Allowed(p) => {
                keep(queue, p)?;
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
        let permit = queue.map(take_oldest).transpose()?.flatten();
        let now = this.clock.now();
        let tr = this.finish(ruby, |b, w, c| match permit {
            Some(p) => b.complete(w, c, p, outcome, now, 0),
            None => b.record_unpermitted(w, c, outcome, now),
        })?;
        if let Outcome::Failure { .. } = outcome {
            this.failed();
        }
        Self::notify(ruby, rb_self, &tr)
    }
}
