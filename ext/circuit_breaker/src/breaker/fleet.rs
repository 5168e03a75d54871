//! `CircuitBreaker::Fleet::Link` (@api private): one fleet breaker's link
//! to its syncer (lib/circuit_breaker/fleet.rb, docs/fleet.md). The syncer
//! makes two native calls per breaker and send: `prepare` (the report, as
//! the script reads it) and `receive` (the script's reply, or a pushed
//! change), each one step under the breaker's lock. The wire format is the
//! core's (`circuit_breaker_core::fleet`, `REPORT_FIELDS`, `REPLY_FIELDS`)
//! and the script's (lib/circuit_breaker/fleet.lua).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use circuit_breaker_core::wake::Wake;
use circuit_breaker_core::{fleet, Nanos};
use magnus::{
    function, method,
    prelude::*,
    typed_data::Obj,
    value::{LazyId, Opaque},
    DataTypeFunctions, Error, RArray, RClass, RModule, RString, Ruby, Symbol, TypedData, Value,
};

use crate::clock::ClockSource;
use crate::errors::arg_error;
use crate::window::Blocked;

use super::metrics::sym;
use super::Breaker;

/// Seeds of the links' heartbeat jitter.
static SEEDS: AtomicU64 = AtomicU64::new(1);

static ID_FLEET_STATUS: LazyId = LazyId::new("__fleet_status");
static ID_CONNECTING: LazyId = LazyId::new("connecting");
static ID_CONNECTED: LazyId = LazyId::new("connected");
static ID_DEGRADED: LazyId = LazyId::new("degraded");

const CONNECTING: u8 = 0;
const CONNECTED: u8 = 1;
const DEGRADED: u8 = 2;

/// What a fleet breaker keeps of its link (in its `Inner`): the syncer's
/// wake, told of failures, and the status `metrics[:fleet]` reports, with
/// why it is degraded (`metrics[:fleet_reason]`).
pub(super) struct FleetSide {
    pub(super) wake: Arc<Wake>,
    status: AtomicU8,
    why: Mutex<Option<String>>,
}

impl FleetSide {
    /// `metrics[:fleet]`: :connecting until the first reply, then
    /// :connected or :degraded.
    pub(super) fn status(&self, ruby: &Ruby) -> Symbol {
        status_sym(ruby, self.status.load(Ordering::Relaxed))
    }

    /// `metrics[:fleet_reason]`: why the link is degraded (None otherwise).
    pub(super) fn why(&self) -> Option<String> {
        self.why.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

fn status_sym(ruby: &Ruby, status: u8) -> Symbol {
    sym(
        ruby,
        match status {
            CONNECTING => &ID_CONNECTING,
            CONNECTED => &ID_CONNECTED,
            _ => &ID_DEGRADED,
        },
    )
}

#[derive(TypedData)]
#[magnus(class = "CircuitBreaker::Fleet::Link", free_immediately, size, mark)]
pub struct Link {
    breaker: Opaque<Obj<Breaker>>,
    /// The breaker's keys ([hosts, state], frozen), its channel and the
    /// tag they share (docs/fleet.md, "Keys").
    keys: Opaque<RArray>,
    channel: Opaque<RString>,
    tag: Opaque<RString>,
    /// With `shared:`, the host's id (every process of the host writes the
    /// same field); else the process's, given to `prepare`.
    host: Option<Opaque<RString>>,
    host_ttl_ms: i64,
    /// A sender silent for this long is replaced (`shared:`).
    stale: Nanos,
    /// When an idle breaker sends (only the syncer's thread, with the GVL,
    /// takes this lock).
    pace: Mutex<fleet::Pace>,
}

impl DataTypeFunctions for Link {
    fn mark(&self, marker: &magnus::gc::Marker) {
        marker.mark(self.breaker);
        marker.mark(self.keys);
        marker.mark(self.channel);
        marker.mark(self.tag);
        if let Some(h) = self.host {
            marker.mark(h);
        }
    }
}

impl Link {
    /// Makes `breaker` a fleet breaker of the syncer `waker` belongs to:
    /// its manual actions go to the fleet, its failures wake the syncer.
    /// Keys are `<prefix>:{<name>:<hash of its configuration>}:…`.
    fn new(
        ruby: &Ruby,
        breaker: Obj<Breaker>,
        waker: &crate::fleet::Waker,
        host: Option<RString>,
        prefix: RString,
        host_ttl_ms: i64,
        stale_ms: i64,
    ) -> Result<Self, Error> {
        let this = breaker.get(ruby)?;
        let name = this.name.map(|n| ruby.get_inner(n)).ok_or_else(|| arg_error(ruby, "fleet: needs name:".into()))?;
        let side = FleetSide { wake: Arc::clone(&waker.0), status: AtomicU8::new(CONNECTING), why: Mutex::new(None) };
        if this.fleet.set(side).is_err() {
            return Err(arg_error(ruby, "the breaker already has a fleet link".into()));
        }
        this.step_or_raise(ruby, |b, _, _| b.attach_fleet())?;
        let hash = fleet::key_hash(&this.cfg, &this.shared.spec());
        let tag = format!("{}:{{{}:{hash:016x}}}", prefix.to_string()?, name.to_string()?);
        let frozen = |s: String| {
            let s = ruby.str_new(&s);
            s.freeze();
            s
        };
        let keys = ruby.ary_new_from_values(&[frozen(format!("{tag}:hosts")), frozen(format!("{tag}:state"))]);
        keys.freeze();
        Ok(Self {
            breaker: breaker.into(),
            keys: keys.into(),
            channel: frozen(format!("{tag}:changed")).into(),
            tag: frozen(tag).into(),
            host: host.map(|h| RString::new_frozen(h).into()),
            host_ttl_ms: host_ttl_ms.max(1),
            stale: stale_ms.max(1).saturating_mul(1_000_000),
            pace: Mutex::new(fleet::Pace::new(SEEDS.fetch_add(1, Ordering::Relaxed))),
        })
    }

    /// This breaker's send: `[keys, argv]` for the script's EVALSHA, or nil
    /// when this process does not send for it (`shared:`: another one
    /// does, and its state comes through the shared record), its lock
    /// stayed busy (a stuck `shared:` holder: the other breakers' sends go
    /// on), or it is idle and its heartbeat not due (`pushed`: the fleet's
    /// changes reach this process by push; `fleet::Pace`).
    fn prepare(ruby: &Ruby, rb_self: &Self, process_id: RString, pushed: bool) -> Result<Option<RArray>, Error> {
        let breaker = ruby.get_inner(rb_self.breaker);
        let this = breaker.get(ruby)?;
        let now = this.clock.now();
        let pid = std::process::id();
        let (stale, host_ttl) = (rb_self.stale, rb_self.host_ttl_ms);
        let step = this.step(|b, w, c| {
            let leader = b.fleet_claim(pid, now, stale);
            (leader.then(|| b.fleet_send(w, c, now, host_ttl)), b.fleet_connected())
        });
        let (send, connected) = match step {
            Ok(x) => x,
            Err(Blocked::Busy | Blocked::Interrupted) => return Ok(None),
            Err(b) => return Err(b.into_error(ruby, &this.shared)),
        };
        let Some(send) = send else {
            Self::status(ruby, breaker, if connected { CONNECTED } else { DEGRADED }, None)?;
            return Ok(None);
        };
        // At most 0.7 of host_ttl apart (`fleet::Pace`): a late heartbeat
        // has the rest to spare before the host's report stops counting.
        let heartbeat = rb_self.host_ttl_ms.saturating_mul(700_000);
        let mut pace = rb_self.pace.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !pace.due(&send, pushed, ClockSource::Monotonic.now(), heartbeat) {
            return Ok(None);
        }
        drop(pace);
        let host = rb_self.host.map_or(process_id, |h| ruby.get_inner(h));
        let text = ruby.str_new(&fleet::encode(&send.words));
        let argv = ruby.ary_new_from_values(&[host, text, ruby.get_inner(rb_self.channel)]);
        Ok(Some(ruby.ary_new_from_values(&[ruby.get_inner(rb_self.keys), argv])))
    }

    /// Takes the script's reply to this breaker's send (nil, or anything
    /// but the script's String: the send failed, for the reason `why`, when
    /// the syncer knows it) or a change pushed on its channel, notifies
    /// what changed, and answers whether a proposal waits for the next
    /// send. A push that is not of the script's making changes nothing.
    fn receive(ruby: &Ruby, rb_self: &Self, reply: Value, why: Option<RString>) -> Result<bool, Error> {
        let words = RString::from_value(reply).and_then(|s| {
            // SAFETY: the bytes are copied before any Ruby code runs.
            fleet::words(unsafe { s.as_slice() })
        });
        let pushed = words.as_ref().is_some_and(|w| w.first() == Some(&2));
        if pushed && words.as_deref().map(fleet::Reply::parse).is_some_and(|r| r.is_err()) {
            return Ok(false);
        }
        let breaker = ruby.get_inner(rb_self.breaker);
        let this = breaker.get(ruby)?;
        let now = this.clock.now();
        let step = this.step(|b, w, c| {
            let tr = b.fleet_receive(w, c, words.as_deref(), now);
            (tr, b.fleet_connected(), b.fleet_proposing())
        });
        let (tr, connected, proposing) = match step {
            Ok(x) => x,
            Err(Blocked::Busy | Blocked::Interrupted) => return Ok(false),
            Err(b) => return Err(b.into_error(ruby, &this.shared)),
        };
        if !pushed {
            let why = || {
                why.and_then(|w| w.to_string().ok()).unwrap_or_else(|| "a malformed reply from the fleet script".into())
            };
            Self::status(ruby, breaker, if connected { CONNECTED } else { DEGRADED }, (!connected).then(why))?;
        }
        Breaker::notify(ruby, breaker, &tr)?;
        Ok(proposing)
    }

    /// Records the link's status and why it is degraded (None: the
    /// process that sends for the host knows); a change of status is an
    /// event (`__fleet_status`, lib/circuit_breaker/events.rb).
    fn status(ruby: &Ruby, breaker: Obj<Breaker>, status: u8, why: Option<String>) -> Result<(), Error> {
        let this = breaker.get(ruby)?;
        let Some(side) = this.fleet.get() else { return Ok(()) };
        let why = (status == DEGRADED).then_some(why).flatten();
        let text = why.clone();
        *side.why.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = why;
        if side.status.swap(status, Ordering::AcqRel) != status {
            breaker.funcall::<_, _, Value>(*ID_FLEET_STATUS, (status_sym(ruby, status), text))?;
        }
        Ok(())
    }

    /// The channel its changes are pushed on.
    fn channel(ruby: &Ruby, rb_self: &Self) -> RString {
        ruby.get_inner(rb_self.channel)
    }

    /// Its breaker (the syncer reports a problem of the whole link to the
    /// breakers' loggers).
    fn breaker(ruby: &Ruby, rb_self: &Self) -> Obj<Breaker> {
        ruby.get_inner(rb_self.breaker)
    }

    /// The tag of its keys (specs).
    fn tag(ruby: &Ruby, rb_self: &Self) -> RString {
        ruby.get_inner(rb_self.tag)
    }

    /// The pid of the process that sends for the breaker (0: none yet).
    fn sender(ruby: &Ruby, rb_self: &Self) -> Result<u32, Error> {
        let breaker = ruby.get_inner(rb_self.breaker);
        breaker.get(ruby)?.step_or_raise(ruby, |b, _, _| b.fleet_syncer())
    }
}

pub fn init(ruby: &Ruby, class: RClass) -> Result<(), Error> {
    let module: RModule = class.define_module("Fleet")?;
    let link = module.define_class("Link", ruby.class_object())?;
    link.define_singleton_method("new", function!(Link::new, 6))?;
    link.define_method("prepare", method!(Link::prepare, 2))?;
    link.define_method("receive", method!(Link::receive, 2))?;
    link.define_method("channel", method!(Link::channel, 0))?;
    link.define_method("tag", method!(Link::tag, 0))?;
    link.define_method("breaker", method!(Link::breaker, 0))?;
    link.define_method("sender", method!(Link::sender, 0))?;
    // The wire format's names, in order (spec/fleet/wire_spec.rb).
    module.const_set("REPORT_FIELDS", fleet::REPORT_FIELDS.to_vec())?;
    module.const_set("REPLY_FIELDS", fleet::REPLY_FIELDS.to_vec())?;
    Ok(())
}
