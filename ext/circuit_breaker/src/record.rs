//! The record behind a window's lock.

use circuit_breaker_core::{Breaker, Window};

/// The window and the state of the breaker built on it (if any): one lock
/// covers both, so a breaker's step is one critical section.
pub struct Record {
    pub window: Window,
    pub breaker: Breaker,
    /// Whether a breaker uses this window already.
    pub attached: bool,
}

impl Record {
    pub fn new(window: Window) -> Self {
        Self { window, breaker: Breaker::new(0), attached: false }
    }
}
