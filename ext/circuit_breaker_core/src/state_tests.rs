// Tests of state.rs
