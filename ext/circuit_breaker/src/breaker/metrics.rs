//! States, reasons and `metrics` as Ruby values, and the methods that read
//! them (`state`, `metrics`, `retry_after`).

use circuit_breaker_core::clock::secs_from_nanos;
use circuit_breaker_core::{Metrics, Reason, State};
use magnus::{
    typed_data::Obj,
    value::{LazyId, OpaqueId, ReprValue},
    Error, IntoValue, RHash, Ruby, Symbol, Value,
};

use magnus::symbol::IntoSymbol;

use crate::window::Blocked;

use super::{Breaker, Inner};

static ID_CLOSED: LazyId = LazyId::new("closed");
static ID_OPEN: LazyId = LazyId::new("open");
static ID_HALF_OPEN: LazyId = LazyId::new("half_open");
static ID_FORCED_OPEN: LazyId = LazyId::new("forced_open");
static ID_DISABLED: LazyId = LazyId::new("disabled");

pub(super) fn state_sym(ruby: &Ruby, s: State) -> Symbol {
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

static REASONS: [LazyId; 9] = [
    LazyId::new("error_rate"),
    LazyId::new("slow_call_rate"),
    LazyId::new("probe_failed"),
    LazyId::new("probes_passed"),
    LazyId::new("cool_down_elapsed"),
    LazyId::new("half_open_timeout"),
    LazyId::new("probe_timeout"),
    LazyId::new("manual"),
    LazyId::new("consecutive_failures"),
];
static ID_FLEET: LazyId = LazyId::new("fleet");
static ID_FLEET_REASON: LazyId = LazyId::new("fleet_reason");
static ID_HOST: LazyId = LazyId::new("host");
static ID_PROCESS: LazyId = LazyId::new("process");

/// The symbol of an interned id: magnus's `to_symbol(&str)` builds a String
/// each time, an allocation per `metrics` or event.
pub(super) fn sym(ruby: &Ruby, id: &LazyId) -> Symbol {
    let id: OpaqueId = **id;
    id.into_symbol_with(ruby)
}

pub(super) fn reason_sym(ruby: &Ruby, r: Reason) -> Symbol {
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
            Reason::ConsecutiveFailures => 8,
        }],
    )
}

pub(super) fn secs_value(ruby: &Ruby, t: Option<i64>) -> Value {
    t.map_or_else(|| ruby.qnil().as_value(), |n| secs_from_nanos(n).into_value_with(ruby))
}

static KEYS: [LazyId; 23] = [
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
    LazyId::new("scope"),
    LazyId::new("in_flight"),
    LazyId::new("concurrency_limit"),
    LazyId::new("limited"),
];

/// A breaker's cap as `metrics` shows it (docs/concurrency.md).
pub(super) struct CapMetrics {
    /// Calls in flight; None without a cap.
    pub in_flight: Option<u32>,
    /// The cap; None without one.
    pub limit: Option<u32>,
    /// Calls refused at the cap since creation.
    pub limited: u64,
}

/// The frozen Hash of docs/operating.md, for the breaker `this`. The
/// counters are those of every process mapping a `shared:` record when it
/// is one (`scope: :host`); `dropped_records`: records a shared breaker
/// dropped because its lock stayed busy (docs/shared.md); `fleet`: a fleet
/// breaker's link status, and why it is degraded (docs/fleet.md); the cap's
/// calls in flight, limit and refusals (docs/concurrency.md), whose
/// refusals count in `rejected` too.
pub(super) fn metrics_hash(ruby: &Ruby, this: &Inner, m: &Metrics) -> Result<RHash, Error> {
    let host_wide = this.record.is_mapped();
    let dropped = this.record.published().dropped();
    let fleet = this.fleet_status(ruby);
    let cap = this.cap_metrics();
    let h = ruby.hash_new();
    let c = &m.counters;
    // Each value goes into the hash as soon as it exists: a Float (or a
    // Bignum) is an object the GC could collect if it waited on the stack.
    let values: [&dyn Fn() -> Value; 23] = [
        &|| state_sym(ruby, m.state).as_value(),
        &|| m.counts.total.into_value_with(ruby),
        &|| m.counts.failures.into_value_with(ruby),
        &|| m.counts.slow_calls.into_value_with(ruby),
        &|| m.counts.error_rate().into_value_with(ruby),
        &|| m.counts.slow_call_rate().into_value_with(ruby),
        &|| c.rejected.saturating_add(cap.limited).into_value_with(ruby),
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
        // Where the breaker's state lives, for operator surfaces; the same
        // as `counters` (docs/shared.md, "Host scope").
        &|| sym(ruby, if host_wide { &ID_HOST } else { &ID_PROCESS }).as_value(),
        &|| cap.in_flight.into_value_with(ruby),
        &|| cap.limit.into_value_with(ruby),
        &|| cap.limited.into_value_with(ruby),
    ];
    for (key, value) in KEYS.iter().zip(values) {
        let key: OpaqueId = **key;
        h.aset(key.into_symbol_with(ruby), value())?;
    }
    if let Some((status, why)) = fleet {
        h.aset(sym(ruby, &ID_FLEET), status)?;
        h.aset(sym(ruby, &ID_FLEET_REASON), why)?;
    }
    h.freeze();
    Ok(h)
}

impl Breaker {
    pub(super) fn snapshot(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Metrics, Error> {
        Self::use_fleet(ruby, rb_self)?;
        let this = rb_self.get(ruby)?;
        let now = this.clock.now();
        let (m, tr) = this.locked_or_raise(ruby, |b, w, c| b.metrics(w, c, now))?;
        Self::notify(ruby, rb_self, &tr)?;
        Ok(m)
    }

    /// `__peek` (private; `inspect`, lib/circuit_breaker.rb): the metrics
    /// Hash without applying the timers that are due, so inspecting changes
    /// nothing (no transition, no event, no fleet started); nil when
    /// `initialize` never ran; only `state:` (the published one) while a
    /// shared lock stays busy.
    pub(super) fn peek(ruby: &Ruby, rb_self: &Self) -> Result<Option<RHash>, Error> {
        let Some(this) = rb_self.0.get() else { return Ok(None) };
        let now = this.clock.now();
        match this.locked(|b, w, c| b.peek(w, c, now)) {
            Ok(m) => metrics_hash(ruby, this, &m).map(Some),
            Err(Blocked::Busy) => {
                let h = ruby.hash_new();
                h.aset(sym(ruby, &KEYS[0]), state_sym(ruby, this.record.published().state()))?;
                h.freeze();
                Ok(Some(h))
            }
            Err(b) => Err(b.into_error(ruby, &this.record)),
        }
    }

    pub(super) fn state(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Symbol, Error> {
        Self::use_fleet(ruby, rb_self)?;
        let this = rb_self.get(ruby)?;
        let now = this.clock.now();
        match this.locked(|b, w, c| b.metrics(w, c, now)) {
            Ok((m, tr)) => {
                Self::notify(ruby, rb_self, &tr)?;
                Ok(state_sym(ruby, m.state))
            }
            // A stuck holder: the published state (timers not applied).
            Err(Blocked::Busy) => Ok(state_sym(ruby, this.record.published().state())),
            Err(b) => Err(b.into_error(ruby, &this.record)),
        }
    }

    pub(super) fn metrics(ruby: &Ruby, rb_self: Obj<Self>) -> Result<RHash, Error> {
        let this = rb_self.get(ruby)?;
        let m = Self::snapshot(ruby, rb_self)?;
        metrics_hash(ruby, this, &m)
    }

    pub(super) fn retry_after(ruby: &Ruby, rb_self: Obj<Self>) -> Result<Value, Error> {
        Ok(secs_value(ruby, Self::snapshot(ruby, rb_self)?.retry_after))
    }
}
