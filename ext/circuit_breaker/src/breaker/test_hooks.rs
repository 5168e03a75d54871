//! The test-only native methods, registered only when the `test-hooks`
//! feature is on: `rake compile`, the test suite's build, turns it on; the
//! gems users install are built without it (docs/development.md, "Test
//! hooks"). Specs that call them skip when the library lacks them
//! (spec/support/test_hooks.rb).

use magnus::{function, method, prelude::*, Error, RClass, Ruby, Value};

use super::Breaker;
use crate::args;

/// Registers the hooks on `CircuitBreaker` (private, so `send` reaches
/// them).
pub fn init(class: RClass) -> Result<(), Error> {
    class.define_private_method("__hold_shared_lock", method!(hold_shared_lock, 1))?;
    class.define_private_method("__lock_wait=", method!(set_lock_wait, 1))?;
    let singleton = class.singleton_class()?;
    // bin/shm-left-behind: every unused shared file of this user, removed now.
    singleton.define_private_method("__sweep_shared_files", function!(circuit_breaker_core::shm::sweep, 0))?;
    // Where a shared file's mutex is (spec/integration/shared_spec.rb).
    singleton.define_private_method("__shared_mutex_offset", function!(circuit_breaker_core::shm::mutex_offset, 0))?;
    // Checked builds only (cruby::Live): spec/circuit_breaker/exits_spec.rb.
    #[cfg(debug_assertions)]
    singleton.define_private_method("__live_native_values", function!(crate::cruby::Live::count, 0))?;
    Ok(())
}

/// Holds the shared lock for `ms` (at most a minute), doing nothing.
fn hold_shared_lock(ruby: &Ruby, rb_self: &Breaker, ms: u64) -> Result<(), Error> {
    let this = rb_self.get(ruby)?;
    this.record.hold_lock_for_test(ms.min(60_000)).map_err(|e| crate::errors::system_error(ruby, "shared lock", e))
}

/// How long this breaker's steps wait for a busy shared lock.
fn set_lock_wait(ruby: &Ruby, rb_self: &Breaker, seconds: Value) -> Result<(), Error> {
    let secs = args::float(ruby, "lock wait", seconds)?;
    rb_self.get(ruby)?.record.set_lock_wait(circuit_breaker_core::clock::nanos_from_secs(secs));
    Ok(())
}
