//! The record behind a window's lock.

use circuit_breaker_core::Window;

/// The window and, once a breaker is built on it, the breaker's state.
pub struct Record {
    pub window: Window,
}

impl Record {
    pub fn new(window: Window) -> Self {
        Self { window }
    }
}
