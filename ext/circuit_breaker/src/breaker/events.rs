//! Listeners and rejections: the transitions a step returned, run in Ruby
//! once no lock is held, and the `OpenError` of a rejected call.

use std::sync::atomic::Ordering;

use circuit_breaker_core::{Decision, Rejection, State, Transitions};
use magnus::{
    prelude::*,
    typed_data::Obj,
    value::{Lazy, LazyId, OpaqueId, ReprValue},
    Error, Exception, ExceptionClass, IntoValue, RArray, RClass, RHash, RModule, RString, Ruby, Value,
};

use crate::cruby;
use crate::errors::{arg_error, CONCURRENCY_LIMIT_ERROR, OPEN_ERROR};

use super::metrics::{metrics_hash, reason_sym, secs_value, state_sym};
use super::{Breaker, Inner};

static ID_BREAKER_NAME: LazyId = LazyId::new("@breaker_name");
static ID_STATE: LazyId = LazyId::new("@state");
static ID_RETRY_AFTER: LazyId = LazyId::new("@retry_after");
static ID_LIMIT: LazyId = LazyId::new("@limit");
static ID_SET_BACKTRACE: LazyId = LazyId::new("set_backtrace");
static ID_TRANSITION: LazyId = LazyId::new("__transition");
static ID_REJECTED: LazyId = LazyId::new("__rejected");
static ID_NOTIFIER: LazyId = LazyId::new("notifier");

/// Where the gem's Ruby files are (`OpenError::GEM_FILES`, set by
/// lib/circuit_breaker/errors.rb): their frames are left out of a
/// rejection's backtrace.
fn gem_files(class: ExceptionClass) -> Result<&'static str, Error> {
    static FILES: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    if let Some(files) = FILES.get() {
        return Ok(files);
    }
    let files: String = magnus::Module::const_get(class, "GEM_FILES")?;
    Ok(FILES.get_or_init(|| files))
}

/// Lines already made, by call site (`OpenError::BACKTRACE_LINES`, a Hash
/// the constant keeps alive): a rejection at a site seen before allocates
/// no new text (rejection is a hot path during an outage,
/// docs/performance.md).
static BACKTRACE_LINES: Lazy<RHash> = Lazy::new(|ruby| {
    let class: ExceptionClass = ruby.get_inner(&OPEN_ERROR);
    magnus::Module::const_get(class, "BACKTRACE_LINES").unwrap_or_else(|_| ruby.hash_new())
});

/// The rejection's one backtrace line: the caller's frame outside the gem
/// (None when none is found), the cached frozen String of that call site.
fn backtrace_line(ruby: &Ruby, class: ExceptionClass) -> Result<Option<RString>, Error> {
    let Some((frame, line)) = cruby::frame_outside(gem_files(class)?.as_bytes()) else { return Ok(None) };
    // A Fixnum key: the frame's address (below 2^47, 8-aligned) and the
    // line (below 2^17) never overlap. A frame moved by compaction gets a
    // new key; the cache is bounded.
    let key = ((frame >> 3) & ((1 << 44) - 1)) | ((line.max(0) as u64 & ((1 << 17) - 1)) << 44);
    let cache = ruby.get_inner(&BACKTRACE_LINES);
    let text = match cruby::hash_fixnum_get(cache, key as i64) {
        Some(v) => {
            RString::from_value(v).ok_or_else(|| arg_error(ruby, "OpenError's line cache holds a non-String".into()))?
        }
        None => {
            let text = ruby.str_new(&cruby::frame_line(frame, line));
            text.freeze();
            if cache.len() >= 1024 {
                cache.clear()?;
            }
            cache.aset(key as i64, text)?;
            text
        }
    };
    Ok(Some(text))
}

/// `CircuitBreaker::Events::REJECTED_SUBSCRIBED` (lib/circuit_breaker/events.rb):
/// `[nil]`, or `[[ActiveSupport::Notifications, notifier, subscribed?]]`, the
/// answer Ruby got from that notifier, kept until its subscriptions change.
static REJECTED_SUBSCRIBED: Lazy<RArray> = Lazy::new(|ruby| {
    let kept = || -> Result<RArray, Error> {
        let breaker: RClass = ruby.class_object().const_get("CircuitBreaker")?;
        let events: RModule = breaker.const_get("Events")?;
        events.const_get("REJECTED_SUBSCRIBED")
    };
    // Never written to when missing: Ruby then asks the notifier each time.
    kept().unwrap_or_else(|_| ruby.ary_new())
});

/// Whether someone subscribed to `rejected.circuit_breaker`: false without
/// ActiveSupport, else the answer Ruby kept while its notifier is still the
/// one in place, else nil (Ruby asks the notifier). Read here, with no Ruby
/// method of the gem called, since a rejection is an outage's hot path and
/// may cost no more than a bare raise (docs/performance.md). Never inlined:
/// it stays out of `call`'s admitted path.
#[inline(never)]
fn rejected_subscribed(ruby: &Ruby) -> Value {
    if !active_support_loaded(ruby) {
        return ruby.qfalse().as_value();
    }
    let ask = ruby.qnil().as_value();
    let kept = ruby.get_inner(&REJECTED_SUBSCRIBED).entry::<Value>(0).ok().and_then(RArray::from_value);
    let Some(kept) = kept else { return ask };
    let (Ok(notifications), Ok(notifier), Ok(answer)) =
        (kept.entry::<Value>(0), kept.entry::<Value>(1), kept.entry::<Value>(2))
    else {
        return ask;
    };
    match notifications.funcall::<_, _, Value>(*ID_NOTIFIER, ()) {
        Ok(now) if cruby::raw(now) == cruby::raw(notifier) => answer,
        _ => ask, // another notifier, or one Ruby reports on
    }
}

impl Inner {
    /// Who hears of a rejection: None when no one (no `on_reject` listener,
    /// no ActiveSupport subscriber), else `__rejected`'s `subscribed`
    /// argument ([`rejected_subscribed`]).
    pub(super) fn rejection_audience(&self, ruby: &Ruby) -> Option<Value> {
        let subscribed = rejected_subscribed(ruby);
        let none = cruby::raw(subscribed) == cruby::raw(ruby.qfalse());
        (self.notify_rejects.load(Ordering::Relaxed) || !none).then_some(subscribed)
    }
}

impl Breaker {
    /// Runs the Ruby listeners of `tr` (no lock held, no jump pending).
    /// `__transition` reports a listener's StandardError itself; what gets
    /// through (Interrupt, Thread#kill, a throw) must go on to the caller.
    pub(super) fn notify(ruby: &Ruby, rb_self: Obj<Self>, tr: &Transitions) -> Result<(), Error> {
        if tr.is_empty() {
            return Ok(());
        }
        let this = rb_self.get(ruby)?;
        for t in tr.iter() {
            let metrics = metrics_hash(ruby, this, &t.metrics)?;
            let before = &t.window_before;
            let last_error = match this.last_error.load(Ordering::Relaxed) {
                0 => ruby.qnil().as_value(),
                // SAFETY: a class kept alive by the breaker's mark.
                raw => unsafe { cruby::object(raw as cruby::Raw) },
            };
            let args = (
                state_sym(ruby, t.from),
                state_sym(ruby, t.to),
                reason_sym(ruby, t.reason),
                metrics,
                before.error_rate(),
                before.slow_call_rate(),
                last_error,
            );
            rb_self.funcall::<_, _, Value>(*ID_TRANSITION, args)?;
            std::hint::black_box(&args);
        }
        Ok(())
    }

    pub(super) fn open_error(ruby: &Ruby, rb_self: Obj<Self>, r: Rejection) -> Result<Exception, Error> {
        let ivars =
            [(&ID_STATE, state_sym(ruby, r.state).as_value()), (&ID_RETRY_AFTER, secs_value(ruby, r.retry_after))];
        Self::rejection_error(ruby, rb_self, ruby.get_inner(&OPEN_ERROR), ivars)
    }

    /// The `ConcurrencyLimitError` of a call refused at the cap `limit`,
    /// in `state` (docs/concurrency.md).
    pub(super) fn limit_error(ruby: &Ruby, rb_self: Obj<Self>, state: State, limit: u32) -> Result<Exception, Error> {
        let class: ExceptionClass = ruby.get_inner(&CONCURRENCY_LIMIT_ERROR);
        let retry_after: Value = magnus::Module::const_get(class, "RETRY_AFTER")?;
        let ivars = [
            (&ID_STATE, state_sym(ruby, state).as_value()),
            (&ID_RETRY_AFTER, retry_after),
            (&ID_LIMIT, limit.into_value_with(ruby)),
        ];
        Self::rejection_error(ruby, rb_self, class, ivars)
    }

    /// A rejection of `class`, its instance variables set without calling
    /// `initialize`, with a one-line backtrace.
    fn rejection_error<const N: usize>(
        ruby: &Ruby,
        rb_self: Obj<Self>,
        class: ExceptionClass,
        ivars: [(&LazyId, Value); N],
    ) -> Result<Exception, Error> {
        // Uninitialised: its ivars are set just below.
        let ex = cruby::alloc(class);
        let ex =
            Exception::from_value(ex).ok_or_else(|| arg_error(ruby, "OpenError is not an Exception".to_owned()))?;
        let name = rb_self.get(ruby)?.name.map_or_else(|| ruby.qnil().as_value(), |n| ruby.get_inner(n).as_value());
        let id: OpaqueId = *ID_BREAKER_NAME;
        cruby::ivar_set(ex, magnus::value::IntoId::into_id_with(id, ruby), name);
        for (id, v) in ivars {
            let id: OpaqueId = **id;
            cruby::ivar_set(ex, magnus::value::IntoId::into_id_with(id, ruby), v);
        }
        // A backtrace set beforehand spares Ruby capturing one at raise:
        // one line, the caller's frame outside the gem, so error trackers
        // locate and group the rejection at no cost that grows with the
        // stack (docs/operating.md). Its own Array: callers change
        // backtraces in place (RSpec's failure report filters it with
        // reject!), so one shared frozen Array made them raise FrozenError.
        let backtrace = match backtrace_line(ruby, ruby.get_inner(&OPEN_ERROR))? {
            Some(line) => cruby::array_of_one(line),
            None => ruby.ary_new().as_value(),
        };
        ex.funcall::<_, _, Value>(*ID_SET_BACKTRACE, (backtrace,))?;
        Ok(ex)
    }

    /// Tells the listeners of a rejection (`on_reject`, ActiveSupport)
    /// of `ex`, if there are any.
    pub(super) fn tell_rejected(ruby: &Ruby, rb_self: Obj<Self>, ex: Exception) -> Result<(), Error> {
        if let Some(subscribed) = rb_self.get(ruby)?.rejection_audience(ruby) {
            // As in `notify`: only what the listeners' guard let through.
            rb_self.funcall::<_, _, Value>(*ID_REJECTED, (ex, subscribed))?;
        }
        Ok(())
    }

    /// The error for a rejected call, after its listeners ran.
    pub(super) fn rejected(ruby: &Ruby, rb_self: Obj<Self>, r: Rejection) -> Result<Exception, Error> {
        let ex = Self::open_error(ruby, rb_self, r)?;
        Self::tell_rejected(ruby, rb_self, ex)?;
        Ok(ex)
    }

    /// Notifies `tr`; when that raises, a permit `decision` handed out is
    /// given back before the error goes on (its call will never run).
    pub(super) fn notify_or_release(
        ruby: &Ruby,
        rb_self: Obj<Self>,
        tr: &Transitions,
        decision: Decision,
    ) -> Result<(), Error> {
        let result = Self::notify(ruby, rb_self, tr);
        if let (Err(_), Decision::Allowed(p)) = (&result, decision) {
            let this = rb_self.get(ruby)?;
            let now = this.clock.now();
            // Given back, not completed: the call never ran, so it is not
            // counted in `calls`. That decides nothing, so it has no
            // transitions to report; an interrupt that cut its wait for the
            // lock (`Thread#kill`, `Timeout`) goes on instead of the error.
            this.finish(ruby, |b, w, c| b.give_back(w, c, p, now))?;
        }
        result
    }
}

pub(super) fn active_support_loaded(ruby: &Ruby) -> bool {
    static ID_AS: LazyId = LazyId::new("ActiveSupport");
    let id: OpaqueId = *ID_AS;
    cruby::const_defined(ruby.class_object(), magnus::value::IntoId::into_id_with(id, ruby))
}
