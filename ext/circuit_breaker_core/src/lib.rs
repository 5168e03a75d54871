//! Where a breaker's state is kept, and the platform it runs on.
//!
//! The rules (windows, the state machine and its ramp, configuration, the
//! fleet's rules, time arithmetic) are the `circuit_breaker_rules` crate,
//! re-exported here under the same paths ([`breaker`], [`window`], …).
//! This crate adds what they may not import: the clocks `now` is read from
//! ([`clock`]), the plain-data record of a breaker and its window
//! ([`record`]) that a [`store`] keeps behind one lock ([`heap_lock`] in
//! process memory, or a file every process of the host maps, [`shm`]), the
//! choice between the two ([`place`]), and the fleet syncer's wake
//! ([`wake`]). Nothing here knows about Ruby.

pub use circuit_breaker_rules::{breaker, check, concurrency, config, counters, fleet, ramp, state, time, window};

pub mod clock;
pub mod hashing;
pub mod heap_lock;
pub mod place;
pub mod record;
pub mod shm;
pub mod slots;
pub mod store;
pub mod wake;

pub use circuit_breaker_rules::{
    AdaptiveLimit, AdaptiveSettings, Breaker, Bucket, Buckets, Config, ConfigError, CountWindow, Counters, Counts,
    Decision, Metrics, Options, Outcome, Permit, PlacedWindow, ProbeTimeout, Reason, Rejection, RelSlice, Slots, State,
    TimeWindow, Transition, Transitions, Window, WindowSpec,
};
pub use clock::{Clock, CoarseClock, HostClock, ManualClock, MonotonicClock, Nanos};
pub use place::Place;
pub use record::{HeapRecord, Layout, Record};
pub use slots::Slot;
pub use store::{HeapStore, Published, Store};
