//! `CircuitBreaker::Fleet::Waker` (@api private): the core's `Wake` for one
//! fleet syncer (lib/circuit_breaker/fleet.rb). Its breakers call
//! `Wake::failure` from their failure branches; the syncer waits here with
//! the GVL released, until a failure, its slot's end or an interrupt.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread::Thread;

use circuit_breaker_core::wake::{wait_timeout, Wake};
use magnus::{function, method, prelude::*, Error, RModule, Ruby, Value};

use crate::cruby::{self, Unblock};
use crate::{args, errors};

#[magnus::wrap(class = "CircuitBreaker::Fleet::Waker", free_immediately, size)]
pub struct Waker(pub Arc<Wake>, Mutex<HashMap<String, Weak<()>>>);

/// Ruby wants the waiting syncer back (`Thread#kill`, a signal): the flag,
/// and an unpark of the thread that waits (the syncer's own; a scheduler's
/// were the wait offloaded, docs/fibers.md) so the wait notices at once.
struct Stop {
    flag: AtomicBool,
    waiter: OnceLock<Thread>,
    wake: Arc<Wake>,
}

impl Unblock for Stop {
    fn unblock(&self) {
        self.flag.unblock();
        // Against the wait's own fence: either it sees the flag, or this
        // sees its thread.
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        if let Some(thread) = self.waiter.get() {
            self.wake.interrupt(thread);
        }
    }
}

impl Waker {
    fn new() -> Self {
        Self(Arc::new(Wake::default()), Mutex::default())
    }

    /// Claims `tag` (a fleet breaker's keys) for a link of this syncer:
    /// None while another live link holds it. The link keeps the claim;
    /// dropping it frees the tag. Taken with the GVL only.
    pub fn claim(&self, tag: &str) -> Option<Arc<()>> {
        let mut tags = self.1.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if tags.get(tag).is_some_and(|held| held.strong_count() > 0) {
            return None;
        }
        tags.retain(|_, held| held.strong_count() > 0);
        let claim = Arc::new(());
        tags.insert(tag.to_owned(), Arc::downgrade(&claim));
        Some(claim)
    }

    /// Waits up to `timeout` seconds (a finite Numeric >= 0, else
    /// ArgumentError) without the GVL; true when a failure pulled the send
    /// forward. Interrupts are raised here.
    fn wait(ruby: &Ruby, rb_self: &Self, timeout: Value) -> Result<bool, Error> {
        let secs = args::float(ruby, "timeout", timeout)?;
        let timeout = wait_timeout(secs).map_err(|e| errors::config_error_given(ruby, e, |_| Some(timeout)))?;
        let wake = &rb_self.0;
        let stop = Stop { flag: AtomicBool::new(false), waiter: OnceLock::new(), wake: wake.clone() };
        // Registered on the thread that waits, which the flag is read after.
        let woken = cruby::without_gvl(
            |stop: &Stop| {
                let _ = stop.waiter.set(std::thread::current());
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                wake.register();
                wake.wait(timeout, &stop.flag)
            },
            stop,
        )?;
        ruby.thread_check_ints()?;
        Ok(woken.unwrap_or(false))
    }

    fn arm(&self, quiet: bool) {
        self.0.arm(quiet);
    }

    fn unquiet(&self) {
        self.0.unquiet();
    }

    fn signal(&self) {
        self.0.signal();
    }

    fn close(&self) {
        self.0.close();
    }

    fn after_fork(&self) {
        self.0.after_fork();
    }
}

pub fn init(ruby: &Ruby, namespace: magnus::RClass) -> Result<(), Error> {
    let fleet: RModule = namespace.define_module("Fleet")?;
    let class = fleet.define_class("Waker", ruby.class_object())?;
    class.define_singleton_method("new", function!(Waker::new, 0))?;
    class.define_method("wait", method!(Waker::wait, 1))?;
    class.define_method("arm", method!(Waker::arm, 1))?;
    class.define_method("unquiet", method!(Waker::unquiet, 0))?;
    class.define_method("signal", method!(Waker::signal, 0))?;
    class.define_method("close", method!(Waker::close, 0))?;
    class.define_method("after_fork", method!(Waker::after_fork, 0))?;
    Ok(())
}
