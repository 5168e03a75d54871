//! The Ruby binding of `circuit_breaker_core`: one file per Ruby class, each
//! converting arguments, calling the core once and converting the result.

mod args;
mod breaker;
mod clock;
mod cruby;
mod errors;
mod fleet;
mod window;

use magnus::{Error, Ruby};

#[magnus::init]
fn init(ruby: &Ruby) -> Result<(), Error> {
    let namespace = ruby.define_class("CircuitBreaker", ruby.class_object())?;
    errors::check_declared(ruby)?;
    breaker::init(namespace)?;
    clock::init(ruby, namespace)?;
    fleet::init(ruby, namespace)?;
    breaker::fleet::init(ruby, namespace)?;
    window::init(ruby, namespace)?;
    Ok(())
}
