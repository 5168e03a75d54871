//! The rules of the `circuit_breaker` gem, in plain Rust: what a breaker
//! decides, and nothing about where its state is kept.
//!
//! Windows of recent calls ([`window`]), the breaker's state machine
//! ([`breaker`]) with its half-open ramp ([`ramp`]) and its states
//! ([`state`]), cumulative [`counters`], validated configuration
//! ([`config`]), the fleet's rules and wire format ([`fleet`], with the
//! fleet's view kept in a breaker's record, [`mirror`]), and time as plain
//! integers ([`time`]), and the adaptive concurrency cap
//! ([`concurrency`]). Time is an argument (`now`); every value is plain
//! data of a fixed layout, so a record may live in memory that several
//! processes map.
//!
//! This crate cannot reach storage or platform code: mapped files, the
//! heap lock, the doorbell, the fleet syncer's wake and the clocks live in
//! `circuit_breaker_core`, which builds on it (docs/development.md, "How
//! the code is laid out"). Its modules import each other in floors, never
//! in a loop (`bin/import-cycles`).

pub mod breaker;
pub mod check;
pub mod concurrency;
pub mod config;
pub mod counters;
pub mod fleet;
pub mod hashing;
pub mod mirror;
pub mod ramp;
pub mod state;
pub mod time;
pub mod window;

pub use breaker::{Breaker, Decision, Metrics, Outcome, Permit, Rejection, Transition, Transitions};
pub use concurrency::{AdaptiveLimit, AdaptiveSettings};
pub use config::{Config, ConfigError, Options, ProbeTimeout};
pub use counters::Counters;
pub use state::{Reason, State};
pub use time::Nanos;
pub use window::{Bucket, Buckets, CountWindow, Counts, PlacedWindow, RelSlice, Slots, TimeWindow, Window, WindowSpec};
