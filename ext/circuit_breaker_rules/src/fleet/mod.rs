//! A breaker shared by hosts through Redis: the fleet's rules and the
//! host's side of them (docs/fleet.md).
//!
//! Redis keeps the hosts' reports and a versioned fleet state; its script
//! only sums and compares-and-sets. Every rule is here and in the state
//! machine (`breaker/`), by concept:
//! - [`wire`]: the words a host sends and the script replies, and the hash
//!   in a fleet breaker's keys;
//! - [`decide`]: the fleet's next state from a reply, by the rules a host
//!   applies to its own window (`trip_reason`, `ramp::verdict`,
//!   `Config::backed_off`), proposed for compare-and-set;
//! - [`pace`]: when a host sends for a breaker;
//! - [`host`]: the host's side, on its [`Breaker`](crate::breaker::Breaker)
//!   record under its lock, with [`HostSide`](crate::mirror::HostSide): what
//!   the host follows, the probe slots it was granted, what it reports, and
//!   the command or proposal waiting for the next send.
//!
//! Invariants:
//! - a host reports absolute counts, so a resent report counts nothing twice;
//! - a host enforces the more restrictive of its own state and the fleet's;
//! - while a host follows a fleet stage it admits at most the probe slots
//!   the fleet granted it, and only the fleet advances or restarts the stage;
//! - only remaining times cross hosts (the reply's times are Redis's,
//!   already turned into durations).

pub mod decide;
pub mod host;
pub mod pace;
pub mod wire;

pub use decide::decide;
pub use host::HOLD_TTLS;
pub use pace::{Pace, Send, IDLE_TTL};
pub use wire::{encode, key_hash, words, Malformed, Reply, REPLY_FIELDS, REPLY_LEN, REPORT_FIELDS, REPORT_LEN};

use crate::time::Nanos;

/// Nanoseconds in a millisecond: Redis counts time in milliseconds.
const MS: Nanos = 1_000_000;

// Named *_tests.rs like the core's other test files, so a search of the
// library's own code for panics (unwrap, expect) can leave tests out.
#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
