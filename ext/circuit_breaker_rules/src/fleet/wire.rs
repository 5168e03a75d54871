//! The wire format: the words of a host's send ([`REPORT_FIELDS`]) and of
//! the script's reply ([`REPLY_FIELDS`], parsed into a [`Reply`]), as
//! lib/circuit_breaker/fleet.lua names them, and the hash in a fleet
//! breaker's keys.

use super::MS;
use crate::config::Config;
use crate::state::{Reason, State};
use crate::time::Nanos;
use crate::window::Counts;

/// The hash in a fleet breaker's keys: its options and its window's
/// settings, so hosts configured differently keep separate fleet states.
pub fn key_hash(cfg: &Config, spec: &crate::window::WindowSpec) -> u64 {
    spec.hash(crate::hashing::Fnv::default().i64(cfg.fingerprint() as i64)).finish()
}

/// A reply that is not what the script returns (a malformed key, a foreign
/// script): the breaker is degraded for this send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("malformed fleet reply")]
pub struct Malformed;

/// The fleet as one reply of the script shows it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reply {
    /// Published by the host that changed the fleet state, not a reply to
    /// this host's send: it carries no grant of this host's.
    pub pushed: bool,
    /// Changes when the fleet state was rebuilt (new key, restarted Redis).
    pub epoch: u64,
    pub version: u64,
    pub state: State,
    pub generation: u64,
    /// Why the fleet entered its state; None for a fleet that never moved.
    pub reason: Option<Reason>,
    /// Time left in an open fleet.
    pub remaining: Nanos,
    /// The backed-off length of the fleet's last opening.
    pub open_base: Nanos,
    pub stage: u32,
    /// Time since the fleet's current stage (or state) began
    /// (`min_stage_duration` counts from it).
    pub stage_elapsed: Nanos,
    /// Time since the current round of the stage began: every change of
    /// the fleet state starts one (`half_open_timeout` counts from it, as
    /// on a host, docs/semantics-permits.md).
    pub round_elapsed: Nanos,
    /// The live hosts' windows, summed.
    pub counts: Counts,
    pub hosts: u32,
    /// Probe slots of the current stage granted to this host, and to all.
    pub granted_here: u32,
    pub granted: u32,
    pub passed: u32,
    pub failed: u32,
    /// Of the live hosts, those that opened on their own windows and still
    /// report the counts they opened with, and the calls they report.
    pub alone_hosts: u32,
    pub alone_calls: u64,
    /// The fleet's generation of the last `reset!`: the script counts only
    /// reports made in it (docs/fleet.md, "What each host sends").
    pub reset_generation: u64,
    /// Rounds in a row of the fleet's stage that ended between the rates
    /// (`ramp::Next`).
    pub rounds_between: u32,
}

/// The wire format: the words of the script's reply (and of the change it
/// publishes), in order, as lib/circuit_breaker/fleet.lua's `REPLY` names
/// them (spec/fleet/wire_spec.rb checks the two against each other).
pub const REPLY_FIELDS: [&str; REPLY_LEN] = [
    "kind",
    "epoch",
    "version",
    "state",
    "generation",
    "reason",
    "remaining",
    "open_base",
    "stage",
    "stage_elapsed",
    "total",
    "failures",
    "slow",
    "hosts",
    "granted_here",
    "granted",
    "passed",
    "failed",
    "applied",
    "round_elapsed",
    "alone_hosts",
    "alone_calls",
    "reset_generation",
    "rounds_between",
];

/// Length of the script's reply.
pub const REPLY_LEN: usize = 24;

/// The wire format: the words of a host's send for one breaker (the
/// script's `ARGV[2]`), in order, as lib/circuit_breaker/fleet.lua's
/// `REPORT` names them: the key's lifetimes and the probe quota, then the
/// report of `Breaker::fleet_report` (host.rs).
pub const REPORT_FIELDS: [&str; 3 + REPORT_LEN] = [
    "host_ttl",
    "key_ttl",
    "quota",
    "total",
    "failures",
    "slow",
    "probe_generation",
    "want",
    "passed",
    "failed",
    "kind",
    "expected",
    "state",
    "reason",
    "open_for",
    "open_base",
    "stage",
    "alone",
    "reset_generation",
    "rounds_between",
];

/// Integers separated by single spaces (what the script sends and
/// publishes), or None.
pub fn words(text: &[u8]) -> Option<Vec<i64>> {
    std::str::from_utf8(text).ok()?.split(' ').map(|w| w.parse::<i64>().ok()).collect()
}

/// The words of [`REPORT_FIELDS`] as the script reads them.
pub fn encode(words: &[i64]) -> String {
    let mut out = String::with_capacity(words.len() * 4);
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&w.to_string());
    }
    out
}

/// What a host reports for one breaker (the last words of
/// [`REPORT_FIELDS`]).
pub const REPORT_LEN: usize = 17;

fn state_of(code: i64) -> Option<State> {
    Some(match code {
        0 => State::Closed,
        1 => State::Open,
        2 => State::HalfOpen,
        3 => State::ForcedOpen,
        4 => State::Disabled,
        _ => return None,
    })
}

fn reason_of(code: i64) -> Option<Option<Reason>> {
    Some(Some(match code {
        0 => return Some(None),
        1 => Reason::ErrorRate,
        2 => Reason::SlowCallRate,
        3 => Reason::ProbeFailed,
        4 => Reason::ProbesPassed,
        5 => Reason::CoolDownElapsed,
        6 => Reason::HalfOpenTimeout,
        7 => Reason::Manual,
        8 => Reason::ProbeTimeout,
        9 => Reason::ConsecutiveFailures,
        _ => return None,
    }))
}

pub(super) fn reason_code(r: Reason) -> i64 {
    match r {
        Reason::ErrorRate => 1,
        Reason::SlowCallRate => 2,
        Reason::ProbeFailed => 3,
        Reason::ProbesPassed => 4,
        Reason::CoolDownElapsed => 5,
        Reason::HalfOpenTimeout => 6,
        Reason::Manual => 7,
        Reason::ProbeTimeout => 8,
        Reason::ConsecutiveFailures => 9,
    }
}

impl Reply {
    /// Parses the script's reply; anything out of range is [`Malformed`].
    pub fn parse(v: &[i64]) -> Result<Self, Malformed> {
        if v.len() != REPLY_LEN || !(v[0] == 1 || v[0] == 2) {
            return Err(Malformed);
        }
        let u64_at = |i: usize| u64::try_from(v[i]).map_err(|_| Malformed);
        let u32_at = |i: usize| u32::try_from(v[i]).map_err(|_| Malformed);
        let ms_at = |i: usize| v[i].checked_mul(MS).filter(|n| *n >= 0).ok_or(Malformed);
        Ok(Self {
            pushed: v[0] == 2,
            epoch: u64_at(1)?,
            version: u64_at(2)?,
            state: state_of(v[3]).ok_or(Malformed)?,
            generation: u64_at(4)?,
            reason: reason_of(v[5]).ok_or(Malformed)?,
            remaining: ms_at(6)?,
            open_base: ms_at(7)?,
            stage: u32_at(8)?,
            stage_elapsed: ms_at(9)?,
            round_elapsed: ms_at(19)?,
            counts: Counts { total: u64_at(10)?, failures: u64_at(11)?, slow_calls: u64_at(12)? },
            hosts: u32_at(13)?,
            granted_here: u32_at(14)?,
            granted: u32_at(15)?,
            passed: u32_at(16)?,
            failed: u32_at(17)?,
            alone_hosts: u32_at(20)?,
            alone_calls: u64_at(21)?,
            reset_generation: u64_at(22)?,
            rounds_between: u32_at(23)?,
        })
    }
}
