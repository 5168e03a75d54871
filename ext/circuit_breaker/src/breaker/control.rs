//! `trip!`, `reset!`, `force_open!`, `disable!`.

use circuit_breaker_core::{Breaker as CoreBreaker, Config, PlacedWindow, Transitions};
use magnus::{typed_data::Obj, Error, Ruby};

use super::Breaker;

impl Breaker {
    pub(super) fn control(
        ruby: &Ruby,
        rb_self: Obj<Self>,
        op: fn(&mut CoreBreaker, &mut PlacedWindow, &Config, i64) -> Transitions,
    ) -> Result<Obj<Self>, Error> {
        Self::use_fleet(ruby, rb_self)?;
        let this = rb_self.get(ruby)?;
        let now = this.clock.now();
        let tr = this.locked_or_raise(ruby, |b, w, c| {
            let tr = op(b, w, c, now);
            // reset! starts an adaptive cap afresh.
            this.publish_cap(b, c);
            tr
        })?;
        Self::notify(ruby, rb_self, &tr)?;
        Ok(rb_self)
    }

    pub(super) fn trip(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Obj<Self>, Error> {
        Self::control(ruby, rb_self, |b, w, c, now| b.trip(w, c, now))
    }

    pub(super) fn reset(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Obj<Self>, Error> {
        Self::control(ruby, rb_self, |b, w, c, now| b.reset(w, c, now))
    }

    pub(super) fn force_open(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Obj<Self>, Error> {
        Self::control(ruby, rb_self, |b, w, c, now| b.force_open(w, c, now))
    }

    pub(super) fn disable(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Obj<Self>, Error> {
        Self::control(ruby, rb_self, |b, w, c, now| b.disable(w, c, now))
    }
}
