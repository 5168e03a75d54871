//! `CircuitBreaker::Fleet::Link` (@api private): one fleet breaker's link
//! to its syncer (lib/circuit_breaker/fleet.rb, docs/fleet.md). The syncer
//! makes two native calls per breaker and send: `prepare` (the report, as
//! the script reads it) and `receive` (the script's reply, or a pushed
//! change), each one step under the breaker's lock. They run no Ruby code:
//! what changed comes back as `Events`, which the syncer's events thread
//! delivers (`deliver`: listeners, notifications), so a slow listener never
//! holds up a send. The wire format is the core's
//! (`circuit_breaker_core::fleet`, `REPORT_FIELDS`, `REPLY_FIELDS`) and the
//! script's (lib/circuit_breaker/fleet.lua).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use circuit_breaker_core::shm::Doorbell;
use circuit_breaker_core::wake::Wake;
use circuit_breaker_core::{fleet, Nanos, Transitions};
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
static ID_FLEET_START: LazyId = LazyId::new("__fleet_start");
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
    /// With `shared:`: the host's doorbell, rung by a failure in any
    /// process so that the one sending for the host sends at once.
    pub(super) doorbell: Option<&'static Doorbell>,
    /// The status as the breaker's listeners were told it (set just
    /// before they run, on the events thread), and as the link last queued
    /// it for them.
    status: AtomicU8,
    queued: AtomicU8,
    why: Mutex<Option<String>>,
    /// The syncer was asked to run for this breaker (its first use in this
    /// process: a process that never uses it starts no thread).
    started: AtomicBool,
    /// When the syncer last took this breaker's send or reply (the
    /// monotonic clock): silent for longer than `stale`, no syncer runs.
    seen: AtomicI64,
    stale: Nanos,
}

impl FleetSide {
    /// `metrics[:fleet]`: :connecting until the first reply, then
    /// :connected or :degraded; :degraded too when no syncer has taken its
    /// sends for a while (stopped, or gone with a fork).
    pub(super) fn status(&self, ruby: &Ruby) -> Symbol {
        let mut status = self.status.load(Ordering::Relaxed);
        let silent = ClockSource::Monotonic.now().saturating_sub(self.seen.load(Ordering::Relaxed));
        if status == CONNECTED && silent > self.stale {
            status = DEGRADED;
        }
        status_sym(ruby, status)
    }

    /// `metrics[:fleet_reason]`: why the link is degraded (None otherwise).
    pub(super) fn why(&self) -> Option<String> {
        self.why.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn seen(&self) {
        self.seen.store(ClockSource::Monotonic.now(), Ordering::Relaxed);
    }
}

impl Breaker {
    /// A fleet breaker's first use in this process (a call, `metrics`, a
    /// manual action) starts its syncer (lib/circuit_breaker/fleet.rb).
    #[inline]
    pub(super) fn use_fleet(ruby: &Ruby, rb_self: Obj<Self>) -> Result<(), Error> {
        match rb_self.get(ruby)?.fleet.get() {
            Some(f) if !f.started.load(Ordering::Relaxed) => Self::start_fleet(rb_self, f),
            _ => Ok(()),
        }
    }

    #[cold]
    fn start_fleet(rb_self: Obj<Self>, f: &FleetSide) -> Result<(), Error> {
        if f.started.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        rb_self.funcall::<_, _, Value>(*ID_FLEET_START, ()).map(|_| ())
    }
}

/// What a link's step changed, for the events thread to deliver: the
/// breaker's transitions and its new status, with why it is degraded.
#[magnus::wrap(class = "CircuitBreaker::Fleet::Events", free_immediately, size)]
pub struct Events {
    transitions: Transitions,
    status: Option<(u8, Option<String>)>,
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
    /// Held while the link lives: its syncer refuses a second link of the
    /// same keys (crate::fleet::Waker::claim).
    _claim: Arc<()>,
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
        let hash = fleet::key_hash(&this.cfg, &this.record.spec());
        let tag = format!("{}:{{{}:{hash:016x}}}", prefix.to_string()?, name.to_string()?);
        // One report per process and fleet breaker: a second breaker of the
        // same keys on this syncer would write the same host field.
        let claim = waker.claim(&tag).ok_or_else(|| {
            arg_error(
                ruby,
                format!(
                    "fleet: this process already has a fleet breaker named {:?} with these options; use that \
                     breaker (CircuitBreaker.for finds it) instead of a second one, whose reports would overwrite \
                     the first's",
                    name.to_string().unwrap_or_default()
                ),
            )
        })?;
        // shared:: this syncer may send for the host; a failure in any
        // process of the host rings the doorbell it then waits on. Opening
        // it may wait (up to 100 ms) for a stopped process: without the GVL,
        // through the binding's one wrapper (docs/fibers.md); not cut short,
        // since a failed open would leave the process without a doorbell.
        let doorbell = match host {
            Some(_) => crate::cruby::without_gvl(|_: &AtomicBool| Doorbell::host(), AtomicBool::new(false))?.flatten(),
            None => None,
        };
        if let Some(d) = doorbell {
            waker.0.use_doorbell(d);
        }
        let side = FleetSide {
            wake: Arc::clone(&waker.0),
            doorbell,
            status: AtomicU8::new(CONNECTING),
            queued: AtomicU8::new(CONNECTING),
            why: Mutex::new(None),
            started: AtomicBool::new(false),
            seen: AtomicI64::new(0),
            stale: stale_ms.max(1).saturating_mul(1_000_000),
        };
        if this.fleet.set(side).is_err() {
            return Err(arg_error(ruby, "the breaker already has a fleet link".into()));
        }
        this.locked_or_raise(ruby, |b, _, _| b.attach_fleet())?;
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
            _claim: claim,
        })
    }

    /// This breaker's send: `[keys, argv]` for the script's EVALSHA; else
    /// nil, or the `Events` of a new status. No send when this process does
    /// not send for it (`shared:`: another one does, and its state comes
    /// through the shared record), its lock stayed busy (a stuck `shared:`
    /// holder: the other breakers' sends go on), or it is idle and its
    /// heartbeat not due (`pushed`: the fleet's changes reach this process
    /// by push; `fleet::Pace`).
    fn prepare(ruby: &Ruby, rb_self: &Self, process_id: RString, pushed: bool) -> Result<Value, Error> {
        let breaker = ruby.get_inner(rb_self.breaker);
        let this = breaker.get(ruby)?;
        let Some(side) = this.fleet.get() else { return Ok(ruby.qnil().as_value()) };
        side.seen();
        let now = this.clock.now();
        let pid = std::process::id();
        let (stale, host_ttl) = (rb_self.stale, rb_self.host_ttl_ms);
        let step = this.locked(|b, w, c| {
            let leader = b.fleet_claim(pid, now, stale);
            (leader.then(|| b.fleet_send(w, c, now, host_ttl)), b.fleet_connected())
        });
        let (send, connected) = match step {
            Ok(x) => x,
            Err(Blocked::Busy) => return Ok(ruby.qnil().as_value()),
            Err(b) => return Err(b.into_error(ruby, &this.record)),
        };
        let Some(send) = send else {
            // Why is the sending process's to know.
            let status = if connected { CONNECTED } else { DEGRADED };
            let events = Self::events(side, Transitions::default(), status, None);
            return Ok(events.map_or_else(|| ruby.qnil().as_value(), |e| ruby.obj_wrap(e).as_value()));
        };
        let mut send = send;
        let mut pace = rb_self.pace.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !pace.due(&mut send, pushed, ClockSource::Monotonic.now()) {
            return Ok(ruby.qnil().as_value());
        }
        drop(pace);
        let host = rb_self.host.map_or(process_id, |h| ruby.get_inner(h));
        let text = ruby.str_new(&fleet::encode(&send.words));
        let argv = ruby.ary_new_from_values(&[host, text, ruby.get_inner(rb_self.channel)]);
        Ok(ruby.ary_new_from_values(&[ruby.get_inner(rb_self.keys), argv]).as_value())
    }

    /// Takes the script's reply to this breaker's send (nil, or anything
    /// but the script's String: the send failed, for the reason `why`, when
    /// the syncer knows it) or a change pushed on its channel; a proposal
    /// waiting for the next send pulls that send forward. Returns the
    /// `Events` of what changed, or nil. A push that is not of the script's
    /// making changes nothing.
    fn receive(ruby: &Ruby, rb_self: &Self, reply: Value, why: Option<RString>) -> Result<Option<Events>, Error> {
        let words = RString::from_value(reply).and_then(|s| {
            // SAFETY: the bytes are copied before any Ruby code runs.
            fleet::words(unsafe { s.as_slice() })
        });
        let pushed = words.as_ref().is_some_and(|w| w.first() == Some(&2));
        if pushed && words.as_deref().map(fleet::Reply::parse).is_some_and(|r| r.is_err()) {
            return Ok(None);
        }
        let breaker = ruby.get_inner(rb_self.breaker);
        let this = breaker.get(ruby)?;
        let Some(side) = this.fleet.get() else { return Ok(None) };
        let now = this.clock.now();
        let step = this.locked(|b, w, c| {
            let tr = b.fleet_receive(w, c, words.as_deref(), now);
            (tr, b.fleet_connected(), b.fleet_proposing())
        });
        let (tr, connected, proposing) = match step {
            Ok(x) => x,
            Err(Blocked::Busy) => return Ok(None),
            Err(b) => return Err(b.into_error(ruby, &this.record)),
        };
        if proposing {
            // A change of the fleet's state goes at the next slot's start.
            side.wake.signal();
        }
        if pushed {
            return Ok((!tr.is_empty()).then_some(Events { transitions: tr, status: None }));
        }
        side.seen();
        let why =
            || why.and_then(|w| w.to_string().ok()).unwrap_or_else(|| "a malformed reply from the fleet script".into());
        Ok(Self::events(side, tr, if connected { CONNECTED } else { DEGRADED }, (!connected).then(why)))
    }

    /// The events of `tr` and of the link's new `status` (with why it is
    /// degraded; None: the process that sends for the host knows), if any.
    fn events(side: &FleetSide, transitions: Transitions, status: u8, why: Option<String>) -> Option<Events> {
        let why = (status == DEGRADED).then_some(why).flatten();
        *side.why.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = why.clone();
        let changed = side.queued.swap(status, Ordering::AcqRel) != status;
        let status = changed.then_some((status, why));
        (status.is_some() || !transitions.is_empty()).then_some(Events { transitions, status })
    }

    /// Runs the listeners of `events` (the syncer's events thread): the
    /// status change (`__fleet_status`, lib/circuit_breaker/events.rb),
    /// then the transitions.
    fn deliver(ruby: &Ruby, rb_self: &Self, events: &Events) -> Result<(), Error> {
        let breaker = ruby.get_inner(rb_self.breaker);
        if let Some((status, why)) = &events.status {
            let told = breaker.funcall::<_, _, Value>(*ID_FLEET_STATUS, (status_sym(ruby, *status), why.clone()));
            // `metrics[:fleet]` changes once its listeners were told: a
            // caller that reads a status has had its events, and one that
            // adds a listener after never hears of that change.
            if let Some(side) = breaker.get(ruby)?.fleet.get() {
                side.status.store(*status, Ordering::Release);
            }
            told?;
        }
        Breaker::notify(ruby, breaker, &events.transitions)
    }

    /// In a forked child (or after `Process.daemon`): the parent's syncer
    /// does not run here; the child's starts on the breaker's first use.
    fn after_fork(ruby: &Ruby, rb_self: &Self) -> Result<(), Error> {
        if let Some(side) = ruby.get_inner(rb_self.breaker).get(ruby)?.fleet.get() {
            side.status.store(CONNECTING, Ordering::Relaxed);
            side.queued.store(CONNECTING, Ordering::Relaxed);
            side.started.store(false, Ordering::Relaxed);
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
        breaker.get(ruby)?.locked_or_raise(ruby, |b, _, _| b.fleet_syncer())
    }
}

pub fn init(ruby: &Ruby, class: RClass) -> Result<(), Error> {
    let module: RModule = class.define_module("Fleet")?;
    let link = module.define_class("Link", ruby.class_object())?;
    link.define_singleton_method("new", function!(Link::new, 6))?;
    link.define_method("prepare", method!(Link::prepare, 2))?;
    link.define_method("receive", method!(Link::receive, 2))?;
    link.define_method("deliver", method!(Link::deliver, 1))?;
    link.define_method("after_fork", method!(Link::after_fork, 0))?;
    module.define_class("Events", ruby.class_object())?;
    link.define_method("channel", method!(Link::channel, 0))?;
    link.define_method("tag", method!(Link::tag, 0))?;
    link.define_method("breaker", method!(Link::breaker, 0))?;
    link.define_method("sender", method!(Link::sender, 0))?;
    // The wire format's names, in order: private constants (fleet.rb), read
    // by spec/fleet/seam_spec.rb and script_spec.rb only.
    module.const_set("REPORT_FIELDS", fleet::REPORT_FIELDS.to_vec())?;
    module.const_set("REPLY_FIELDS", fleet::REPLY_FIELDS.to_vec())?;
    Ok(())
}
