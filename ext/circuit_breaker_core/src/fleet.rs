//! A breaker shared by hosts through Redis: the host's side of the fleet
//! (docs/fleet.md).
//!
//! Redis keeps the hosts' reports and a versioned fleet state; its script
//! only sums and compares-and-sets. Every rule is here and in `state.rs`:
//! - [`decide`]: the fleet's next state from a reply, by the rules a host
//!   applies to its own window (`trip_reason`, `ramp::verdict`,
//!   `Config::backed_off`), proposed for compare-and-set;
//! - [`HostSide`](crate::mirror::HostSide) (inside the [`Breaker`] record, under its lock): what the
//!   host follows, the probe slots it was granted, what it reports, and the
//!   command or proposal waiting for the next send.
//!
//! Invariants:
//! - a host reports absolute counts, so a resent report counts nothing twice;
//! - a host enforces the more restrictive of its own state and the fleet's;
//! - while a host follows a fleet stage it admits at most the probe slots
//!   the fleet granted it, and only the fleet advances or restarts the stage;
//! - only remaining times cross hosts (the reply's times are Redis's,
//!   already turned into durations).

use crate::clock::Nanos;
use crate::config::Config;
use crate::mirror::{Command, Maybe, Proposal};
use crate::ramp::{reopen_floor, step, verdict, Step};
use crate::state::{trip_reason, Breaker, Reason, State, Transitions};
use crate::window::{Buckets, Counts, Slots, Window};

const MS: Nanos = 1_000_000;

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
    /// (`ramp::step`).
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
/// script's ARGV[2]), in order, as lib/circuit_breaker/fleet.lua's
/// `REPORT` names them: the key's lifetimes and the probe quota, then the
/// report of [`Breaker::fleet_report`].
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

fn reason_code(r: Reason) -> i64 {
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
            // The host's rule on the fleet's tallies (`ramp::step`): a
            // round after one between the rates reopens as soon as it can
            // no longer pass (`ramp::reopen_floor`), and a stage
            // advances only once it lasted min_stage_duration (an earlier
            // pass starts a new round).
            let floor = reopen_floor(r.rounds_between, cfg.advance_rate, cfg.reopen_rate);
            let verdict = verdict(r.passed, r.failed, cfg.half_open_calls, cfg.advance_rate, floor);
            match step(verdict, r.rounds_between, r.stage_elapsed >= cfg.min_stage_duration) {
                Step::Stay => None,
                Step::Reopen => reopen(Reason::ProbeFailed),
                Step::NewRound(rounds) => at(State::HalfOpen, Reason::CoolDownElapsed, 0, r.open_base, r.stage, rounds),
                Step::Advance if (r.stage as usize) + 1 < cfg.ramp.len() => {
                    at(State::HalfOpen, Reason::ProbesPassed, 0, r.open_base, r.stage + 1, 0)
                }
                Step::Advance => at(State::Closed, Reason::ProbesPassed, 0, 0, 0, 0),
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

/// What a host reports for one breaker (the last words of
/// [`REPORT_FIELDS`]).
pub const REPORT_LEN: usize = 17;

/// One breaker's send ([`Breaker::fleet_send`]): its words, and whether the
/// breaker is idle (connected, following no fleet opening or stage, no
/// command or proposal waiting).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Send {
    pub words: [i64; 3 + REPORT_LEN],
    pub idle: bool,
}

/// How many times longer than `host_ttl` a heartbeat's report lives.
pub const IDLE_TTL: i64 = 5;

/// How many times `host_ttl` a host keeps probe slots it was granted and
/// has not used (docs/fleet.md, "Probes across hosts"): long enough for
/// the next call of a host that calls once every few intervals, short
/// enough that a host that stopped calling hands them on.
pub const HOLD_TTLS: i64 = 2;

/// When a host sends for a breaker (docs/fleet.md, "Cost at scale"): at
/// every slot, except for an idle breaker whose send would repeat the last
/// one (its `host_ttl` aside) while the fleet's changes reach the host by
/// push; that one sends a heartbeat only, so its report stays live in
/// Redis, and a heartbeat's report lives [`IDLE_TTL`] times `host_ttl`. A
/// heartbeat goes once per 0.7 × the last send's time to live, at the
/// breaker's own phase of a grid of that period, so a thousand idle
/// breakers spread their heartbeats evenly over the slots; two sends are
/// half that period to that period apart.
#[derive(Debug, Clone, Default)]
pub struct Pace {
    last: Option<[i64; 3 + REPORT_LEN]>,
    sent_at: Nanos,
    /// The last send's time to live (ms): the next must come well before it ends.
    ttl_ms: i64,
    /// This breaker's phase: a share of the period, in 2^-53.
    phase: u64,
}

impl Pace {
    /// `seed` picks the breaker's phase.
    pub fn new(seed: u64) -> Self {
        // splitmix64
        let mut z = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Self { phase: (z ^ (z >> 31)) >> 11, ..Self::default() }
    }

    /// Whether `send` goes now (a heartbeat's `host_ttl` word is made
    /// [`IDLE_TTL`] times longer). `pushed`: the host receives the fleet's
    /// changes by push, and its last round trip worked.
    pub fn due(&mut self, send: &mut Send, pushed: bool, now: Nanos) -> bool {
        let repeat = self.last.is_some_and(|last| last[1..] == send.words[1..]);
        if repeat && send.idle && pushed {
            let period = self.ttl_ms.saturating_mul(MS) / 10 * 7;
            if period > 0 {
                let offset = ((i128::from(period) * i128::from(self.phase)) >> 53) as Nanos;
                let cell = |t: Nanos| t.saturating_sub(offset).div_euclid(period);
                if now.saturating_sub(self.sent_at) < period / 2 || cell(now) == cell(self.sent_at) {
                    return false;
                }
            }
            send.words[0] = send.words[0].saturating_mul(IDLE_TTL);
        }
        self.last = Some(send.words);
        self.sent_at = now;
        self.ttl_ms = send.words[0];
        true
    }
}

impl Breaker {
    /// Marks this breaker as a fleet breaker (manual actions go to the fleet).
    pub fn attach_fleet(&mut self) {
        self.fleet.attached = true;
    }

    /// Whether this is a fleet breaker.
    pub fn fleet_attached(&self) -> bool {
        self.fleet.attached
    }

    /// Whether the last send to the fleet succeeded.
    pub fn fleet_connected(&self) -> bool {
        self.fleet.connected
    }

    /// Whether a proposal waits for the next send (docs/fleet.md, "When a
    /// host sends": it pulls that send to the start of its slot).
    pub fn fleet_proposing(&self) -> bool {
        self.fleet.proposal.is_some()
    }

    /// Whether process `pid` is the one that sends for this record: it is
    /// already, or nobody is, or the one that was has not claimed it for
    /// longer than `stale` (it died or hangs), and then it takes over. A
    /// record in one process's memory is always its own.
    pub fn fleet_claim(&mut self, pid: u32, now: Nanos, stale: Nanos) -> bool {
        let f = &mut self.fleet;
        let free = f.syncer_pid == 0 || now.saturating_sub(f.syncer_beat) > stale;
        if f.syncer_pid == pid || free {
            if f.syncer_pid != pid && f.syncer_pid != 0 {
                // A new sender reports its own calls only (docs/fleet.md,
                // "When hosts open alone").
                f.alone = Maybe::none();
            }
            f.syncer_pid = pid;
            f.syncer_beat = now;
            true
        } else {
            false
        }
    }

    /// The process that sends for this record (0: none yet).
    pub fn fleet_syncer(&self) -> u32 {
        self.fleet.syncer_pid
    }

    /// One send for this breaker, as the script reads it ([`REPORT_FIELDS`],
    /// [`encode`]): hosts silent for `host_ttl_ms` no longer count; the
    /// keys live max(60 s, 3 × the longest opening) after the last send.
    pub fn fleet_send<S: Slots, B: Buckets>(
        &mut self,
        w: &mut Window<S, B>,
        cfg: &Config,
        now: Nanos,
        host_ttl_ms: i64,
    ) -> Send {
        let longest_open_ms = cfg.max_open_duration.unwrap_or(cfg.open_duration) / MS;
        let key_ttl_ms = longest_open_ms.saturating_mul(3).max(60_000);
        let mut words = [0i64; 3 + REPORT_LEN];
        words[..3].copy_from_slice(&[host_ttl_ms, key_ttl_ms, i64::from(cfg.half_open_calls)]);
        let hold = host_ttl_ms.saturating_mul(HOLD_TTLS).saturating_mul(MS);
        words[3..].copy_from_slice(&self.fleet_report(w, cfg, now, hold));
        // Idle: nothing the fleet must hear of or act on in time (its
        // changes are pushed); see [`Pace`].
        let f = &self.fleet;
        let idle = f.connected && !f.following && !f.resync && !f.command.is_some() && !f.proposal.is_some();
        Send { words, idle }
    }

    /// What this host sends next (see [`REPORT_LEN`]): its window's counts
    /// (or, after it opened on its own window, the counts it opened with),
    /// its probes in the followed stage, a command or proposal, why it
    /// opened alone (0: it did not), and the `reset!` its counts follow.
    /// Probe slots granted and unused are kept for `hold` after the grant.
    pub fn fleet_report<S: Slots, B: Buckets>(
        &mut self,
        w: &mut Window<S, B>,
        cfg: &Config,
        now: Nanos,
        hold: Nanos,
    ) -> [i64; REPORT_LEN] {
        // Until the host leaves that opening or open_duration passes; never
        // added to calls recorded since.
        let generation = self.generation();
        let alone = self
            .fleet
            .alone
            .get()
            .filter(|a| a.generation == generation && now.saturating_sub(a.at) < cfg.open_duration);
        self.fleet.alone = alone.into();
        let (c, alone) = match alone {
            Some(a) => (a.counts, reason_code(a.reason)),
            None => (w.counts(now), 0),
        };
        self.fleet.command_sent = self.fleet.command_seq;
        // In a fleet stage: the slots this host used, plus those it holds
        // unused for up to `hold` after they were granted, or one for each
        // call that found none since the last send if that is more. Slots
        // unused past `hold` are given back (here at once, in Redis with
        // this send), so they go to whichever hosts ask; a host whose
        // calls come several intervals apart still finds, at its next
        // call, the slot a rejected call asked for (docs/fleet.md,
        // "Probes across hosts").
        let f = &self.fleet;
        let want = if f.following && self.state() == State::HalfOpen {
            let used = f.passed.saturating_add(f.failed).saturating_add(self.probes_in_flight());
            let held = now.saturating_sub(f.granted_at) < hold;
            let kept = if held { f.granted.saturating_sub(used) } else { 0 };
            used.saturating_add(f.starved.max(kept)).min(cfg.half_open_calls)
        } else {
            0
        };
        self.fleet.starved = 0;
        self.fleet.granted = self.fleet.granted.min(want);
        let f = &self.fleet;
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let ms = |n: Nanos| n / MS;
        let (kind, p) = match (f.command.get(), f.proposal.get()) {
            (Some(Command { to: state, open_for }), _) => (
                2,
                Some(Proposal {
                    expected: Maybe::none(),
                    state,
                    reason: Reason::Manual,
                    open_for,
                    open_base: open_for,
                    stage: 0,
                    rounds_between: 0,
                }),
            ),
            (None, Some(p)) => (1, Some(p)),
            (None, None) => (0, None),
        };
        let p = p.unwrap_or(Proposal {
            expected: Maybe::none(),
            state: State::Closed,
            reason: Reason::Manual,
            open_for: 0,
            open_base: 0,
            stage: 0,
            rounds_between: 0,
        });
        [
            int(c.total),
            int(c.failures),
            int(c.slow_calls),
            int(f.stage_generation),
            i64::from(want),
            i64::from(f.passed),
            i64::from(f.failed),
            kind,
            p.expected.get().map_or(-1, int),
            p.state as i64,
            reason_code(p.reason),
            ms(p.open_for),
            ms(p.open_base),
            i64::from(p.stage),
            alone,
            int(f.reset_generation),
            i64::from(p.rounds_between),
        ]
    }

    /// Takes one reply (None: the send failed). Follows the fleet's state
    /// when it changed, keeps the probe slots granted, and decides the
    /// proposal for the next send. A failed or malformed send detaches the
    /// host: it runs on its own breaker, with its own probe quota.
    pub fn fleet_receive<S: Slots, B: Buckets>(
        &mut self,
        w: &mut Window<S, B>,
        cfg: &Config,
        reply: Option<&[i64]>,
        now: Nanos,
    ) -> Transitions {
        let mut out = self.tick(w, cfg, now);
        let Some(r) = reply.and_then(|v| Reply::parse(v).ok()) else {
            self.fleet.connected = false;
            self.fleet.following = false;
            self.fleet.proposal = Maybe::none();
            return out;
        };
        // The counts this host opened with have done their part once the
        // fleet shows an opening it had not seen when it opened (cleared
        // once `follow` has seen them).
        let alone_done = self
            .fleet
            .alone
            .get()
            .is_some_and(|a| r.state == State::Open && (r.epoch != a.epoch || r.version > a.version));
        if r.pushed {
            // Only a newer state: a push may arrive after this host's own
            // reply showed a later one. A newer epoch is the fleet state
            // rebuilt (wiped keys, a restarted Redis: epochs are Redis's
            // times), followed at once too, and this host's report, gone
            // with the old keys, goes at the next slot (docs/fleet.md,
            // "Outages"): an idle host would otherwise hear of it only at
            // its next heartbeat, seconds later.
            let known = self.fleet.epoch != 0;
            let same = r.epoch == self.fleet.epoch;
            if known && !same {
                self.fleet.resync = true;
            }
            if (same && r.version > self.fleet.version) || (known && r.epoch > self.fleet.epoch) {
                self.fleet.epoch = r.epoch;
                self.fleet.version = r.version;
                self.follow(w, cfg, &r, now, &mut out);
                // Its own reset!'s push, ahead of the reply: the window
                // was emptied when the action was taken; a rebuilt fleet
                // never counted this host before its resets.
                let own = self.fleet.command.is_some();
                self.count_from_reset(w, &r, own || !same);
            }
            if alone_done {
                self.fleet.alone = Maybe::none();
            }
            return out;
        }
        // What was sent has been applied (or lost a compare-and-set).
        // A host back from a failed send (it ran on its own breaker
        // meanwhile) follows the fleet's opening or stage again even if the
        // fleet has not moved since: the version it saw before is no reason
        // to keep ignoring it (docs/fleet.md, "Degraded mode").
        let rejoined = !self.fleet.connected && matches!(r.state, State::Open | State::HalfOpen);
        let new_epoch = r.epoch != self.fleet.epoch;
        self.fleet.connected = true;
        self.fleet.resync = false;
        // The reply to this host's own manual action: the script applied
        // it and answered with the state it made, which this host entered
        // when the action was taken (calls recorded since must stay).
        // Its push may have come first (its version taken, `follow`
        // skipped while the command was on its way): followed here alike.
        let own = self.fleet.command.is_some() && self.fleet.command_sent == self.fleet.command_seq;
        if own {
            self.fleet.command = Maybe::none();
        }
        self.fleet.proposal = Maybe::none();
        if own || rejoined || (r.epoch, r.version) != (self.fleet.epoch, self.fleet.version) {
            self.fleet.epoch = r.epoch;
            self.fleet.version = r.version;
            if own && r.state == State::Closed {
                self.fleet.following = false;
            } else {
                self.follow(w, cfg, &r, now, &mut out);
            }
        }
        // A host new to this fleet state (first reply, rebuilt key) was
        // never counted before its resets.
        self.count_from_reset(w, &r, own || new_epoch);
        if self.fleet.following && r.state == State::HalfOpen && r.generation == self.fleet.stage_generation {
            if r.granted_here > self.fleet.granted {
                self.fleet.granted_at = now;
            }
            self.fleet.granted = r.granted_here;
        }
        self.fleet.proposal = decide(cfg, &r, w.capacity()).into();
        if alone_done {
            self.fleet.alone = Maybe::none();
        }
        out
    }

    /// Counts from the fleet's last `reset!` on: a host that has not
    /// emptied its window for it (it was away, or the reset came between
    /// its report and its reply) empties it now, unless `emptied` (its own
    /// reset!, or a fleet it joins afresh), and its reports count again.
    fn count_from_reset<S: Slots, B: Buckets>(&mut self, w: &mut Window<S, B>, r: &Reply, emptied: bool) {
        if r.reset_generation != self.fleet.reset_generation {
            if !emptied {
                w.reset();
            }
            self.fleet.reset_generation = r.reset_generation;
        }
    }

    /// The host's answer to a new fleet state (docs/fleet.md, "How a host
    /// enforces the fleet").
    fn follow<S: Slots, B: Buckets>(
        &mut self,
        w: &mut Window<S, B>,
        cfg: &Config,
        r: &Reply,
        now: Nanos,
        out: &mut Transitions,
    ) {
        if self.fleet.command.is_some() {
            // This host's own manual action is on its way and will be the
            // fleet's next state: the last operator wins.
            return;
        }
        let mine = self.state();
        match (r.state, r.reason) {
            (State::Closed, None) => self.fleet.following = false,
            (State::Closed, Some(reason)) => {
                self.fleet.following = false;
                let close = reason == Reason::Manual || matches!(mine, State::Open | State::HalfOpen);
                if close && mine != State::Closed {
                    self.enter_for(State::Closed, reason, None, w, cfg, now, out);
                } else if reason == Reason::Manual {
                    w.reset();
                }
            }
            (State::Open, reason) => {
                // A host's own opening alone stands for the fleet's it led
                // to, decided a round trip or more later: following that
                // would only lengthen it by the delay. The host keeps its
                // own timer and its own probes, as an opening longer than
                // the fleet's does (the `HalfOpen` arm below).
                let generation = self.generation();
                if mine == State::Open && self.fleet.alone.get().is_some_and(|a| a.generation == generation) {
                    return;
                }
                // No fleet stage yet: a half-open reached by this host's own
                // timer waits for the fleet's stage and its grants.
                self.fleet.enter_stage(0);
                let longer = mine == State::Open && self.remaining(now) >= r.remaining;
                // Only an operator's trip! ends a forced open.
                let forced = mine == State::ForcedOpen && reason != Some(Reason::Manual);
                if !longer && !forced && r.remaining > 0 {
                    let reason = reason.unwrap_or(Reason::Manual);
                    self.enter_for(State::Open, reason, Some(r.remaining), w, cfg, now, out);
                }
            }
            (State::HalfOpen, reason) => {
                let own_opening = mine == State::Open && !self.fleet.following && self.remaining(now) > 0;
                if !own_opening && mine != State::ForcedOpen {
                    let reason = reason.unwrap_or(Reason::CoolDownElapsed);
                    self.enter_stage(r.stage, reason, w, cfg, now, out);
                    self.fleet.enter_stage(r.generation);
                }
            }
            (to @ (State::ForcedOpen | State::Disabled), _) => {
                self.fleet.following = false;
                if mine != to {
                    self.enter_for(to, Reason::Manual, None, w, cfg, now, out);
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "fleet_tests.rs"]
mod tests;
