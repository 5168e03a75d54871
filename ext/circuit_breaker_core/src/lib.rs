//! The logic of the `circuit_breaker` gem, in plain Rust.
//!
//! Windows of recent calls ([`window`]), the breaker's state machine with
//! its half-open ramp ([`state`], [`ramp`]), cumulative [`counters`] and validated configuration
//! ([`config`]). Nothing here knows about Ruby: inputs and outputs are plain
//! values, time is passed in as `now` ([`clock`]), and the breaker's whole
//! mutable state is a plain-data record that a [`store`] keeps behind one
//! lock (in process memory, or in a file every process of the host maps).

pub mod check;
pub mod clock;
pub mod config;
pub mod counters;
pub mod fleet;
pub mod hashing;
pub mod heap_lock;
pub mod mirror;
pub mod place;
pub mod ramp;
pub mod record;
pub mod shm;
pub mod state;
pub mod states;
pub mod store;
pub mod wake;
pub mod window;

pub use clock::{Clock, CoarseClock, HostClock, ManualClock, MonotonicClock, Nanos};
pub use config::{Config, ConfigError, Options, ProbeTimeout};
pub use counters::Counters;
pub use place::Place;
pub use record::{HeapRecord, Layout, Record};
pub use state::{Breaker, Decision, Metrics, Outcome, Permit, Reason, Rejection, State, Transition, Transitions};
pub use store::{HeapStore, Published, Store};
pub use window::{Bucket, Buckets, CountWindow, Counts, PlacedWindow, RelSlice, Slots, TimeWindow, Window, WindowSpec};
