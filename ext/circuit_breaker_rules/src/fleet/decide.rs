//! The fleet's next state from one reply of the script: the host's rules
//! (docs/semantics.md) on the fleet's sums, proposed for compare-and-set.

use super::wire::Reply;
use crate::breaker::trip_reason;
use crate::config::Config;
use crate::mirror::Proposal;
use crate::ramp::{reopen_floor, verdict, Next};
use crate::state::{Reason, State};

/// The fleet's next state, by the rules of docs/semantics.md applied to the fleet's
/// sums; None when it stays. `capacity` is one host's window capacity
/// (a SlidingWindow's size), so `min_calls` is clamped to what the live
/// hosts' windows can hold together.
pub fn decide(cfg: &Config, r: &Reply, capacity: Option<u32>) -> Option<Proposal> {
    let at = |state, reason, open_for, open_base, stage, rounds_between| {
        Some(Proposal { expected: Some(r.version).into(), state, reason, open_for, open_base, stage, rounds_between })
    };
    let reopen = |reason| {
        let base = cfg.backed_off(r.open_base);
        at(State::Open, reason, base, base, 0, 0)
    };
    match r.state {
        State::Closed => {
            let capacity = capacity.map(|c| c.saturating_mul(r.hosts.max(1)));
            let reason = trip_reason(cfg, &r.counts, capacity).or_else(|| quorum(cfg, r))?;
            at(State::Open, reason, cfg.open_duration, cfg.open_duration, 0, 0)
        }
        State::Open if r.remaining == 0 => at(State::HalfOpen, Reason::CoolDownElapsed, 0, r.open_base, 0, 0),
        State::HalfOpen => {
            if cfg.half_open_timeout.is_some_and(|t| r.round_elapsed >= t) {
                return reopen(Reason::HalfOpenTimeout);
            }
            // The host's rule on the fleet's tallies (`ramp::Next`): a
            // round after one between the rates reopens as soon as it can
            // no longer pass (`ramp::reopen_floor`), and a stage
            // advances only once it lasted min_stage_duration (an earlier
            // pass starts a new round).
            let floor = reopen_floor(r.rounds_between, cfg.advance_rate, cfg.reopen_rate);
            let verdict = verdict(r.passed, r.failed, cfg.half_open_calls, cfg.advance_rate, floor);
            match Next::after(verdict, r.rounds_between, r.stage_elapsed >= cfg.min_stage_duration) {
                Next::Stay => None,
                Next::Reopen => reopen(Reason::ProbeFailed),
                Next::NewRound(rounds) => at(State::HalfOpen, Reason::CoolDownElapsed, 0, r.open_base, r.stage, rounds),
                Next::Advance if (r.stage as usize) + 1 < cfg.ramp.len() => {
                    at(State::HalfOpen, Reason::ProbesPassed, 0, r.open_base, r.stage + 1, 0)
                }
                Next::Advance => at(State::Closed, Reason::ProbesPassed, 0, 0, 0, 0),
            }
        }
        State::Open | State::ForcedOpen | State::Disabled => None,
    }
}

/// Why the hosts that opened on their own windows open the fleet, if they
/// do (docs/fleet.md, "When hosts open alone"): they carry at least
/// `fleet_quorum` of the live hosts' reported calls, and number at least
/// two once three or more hosts are live (one host cut off from the
/// dependency among many opens nothing). The reason is the rate nearer its
/// threshold in the fleet's sums.
fn quorum(cfg: &Config, r: &Reply) -> Option<Reason> {
    let hosts_needed = if r.hosts >= 3 { 2 } else { 1 };
    let carried = r.alone_calls as f64 >= cfg.fleet_quorum * r.counts.total as f64;
    if r.alone_hosts < hosts_needed || r.counts.total == 0 || !carried {
        return None;
    }
    let c = &r.counts;
    Some(if c.slow_call_rate() / cfg.slow_rate_threshold > c.error_rate() / cfg.error_rate_threshold {
        Reason::SlowCallRate
    } else {
        Reason::ErrorRate
    })
}
