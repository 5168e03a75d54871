//! The fleet syncer's native calls (lib/circuit_breaker/fleet.rb,
//! docs/fleet.md).

use std::sync::Arc;

use circuit_breaker_core::fleet;
use magnus::{typed_data::Obj, Error, RArray, Ruby, Value};

use super::Breaker;

impl Breaker {
    /// The fleet's key for this breaker: its configuration and window
    /// settings, hashed (docs/fleet.md, "Keys").
    pub(super) fn fleet_hash(ruby: &Ruby, rb_self: &Self) -> Result<String, Error> {
        let this = rb_self.get(ruby)?;
        Ok(format!("{:016x}", fleet::key_hash(&this.cfg, &this.shared.spec())))
    }

    /// The fleet's probe quota per stage (the script grants up to it).
    pub(super) fn fleet_quota(ruby: &Ruby, rb_self: &Self) -> Result<u32, Error> {
        Ok(rb_self.get(ruby)?.cfg.half_open_calls)
    }

    /// The longest an opening can last, in ms (the keys' TTL follows it).
    pub(super) fn fleet_longest_open_ms(ruby: &Ruby, rb_self: &Self) -> Result<i64, Error> {
        let cfg = &rb_self.get(ruby)?.cfg;
        Ok(cfg.max_open_duration.unwrap_or(cfg.open_duration) / 1_000_000)
    }

    /// Makes this a fleet breaker of the syncer `waker` belongs to: its
    /// manual actions go to the fleet, its failures wake the syncer.
    pub(super) fn fleet_attach(ruby: &Ruby, rb_self: &Self, waker: &crate::fleet::Waker) -> Result<(), Error> {
        let this = rb_self.get(ruby)?;
        this.step_or_raise(ruby, |b, _, _| b.attach_fleet())?;
        let _ = this.fleet_wake.set(Arc::clone(&waker.0));
        Ok(())
    }

    /// Whether this process sends for the breaker (`shared:`: one per
    /// host; the others stand by and take over when it goes silent for
    /// `stale_ms`), and whether the last send succeeded.
    pub(super) fn fleet_claim(ruby: &Ruby, rb_self: &Self, stale_ms: u64) -> Result<(bool, bool), Error> {
        let this = rb_self.get(ruby)?;
        let now = this.clock.now();
        let pid = std::process::id();
        let stale = i64::try_from(stale_ms.saturating_mul(1_000_000)).unwrap_or(i64::MAX);
        this.step_or_raise(ruby, |b, _, _| (b.fleet_claim(pid, now, stale), b.fleet_connected()))
    }

    /// The pid of the process that sends for this breaker (0: none yet).
    pub(super) fn fleet_syncer(ruby: &Ruby, rb_self: &Self) -> Result<u32, Error> {
        rb_self.get(ruby)?.step_or_raise(ruby, |b, _, _| b.fleet_syncer())
    }

    /// What the syncer sends next for this breaker (Integers).
    pub(super) fn fleet_report(ruby: &Ruby, rb_self: &Self) -> Result<RArray, Error> {
        let this = rb_self.get(ruby)?;
        let now = this.clock.now();
        let report = this.step_or_raise(ruby, |b, w, c| b.fleet_report(w, c, now))?;
        Ok(ruby.ary_from_iter(report))
    }

    /// Takes the script's reply (nil: the send failed), notifies what
    /// changed, and answers whether the host is connected and whether a
    /// proposal waits for the next send. Anything but an Array of Integers
    /// is a malformed reply.
    pub(super) fn fleet_receive(ruby: &Ruby, rb_self: Obj<Self>, reply: Value) -> Result<(bool, bool), Error> {
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
