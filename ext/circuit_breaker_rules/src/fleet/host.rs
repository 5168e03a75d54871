//! The host's side of the fleet, on its breaker's record under its lock:
//! whether it sends, what it sends, and how it follows what the fleet
//! replies (docs/fleet.md, "How a host enforces the fleet").

use super::decide::decide;
use super::pace::Send;
use super::wire::{reason_code, Reply, REPORT_LEN};
use super::MS;

/// How many times `host_ttl` a host keeps probe slots it was granted and
/// has not used (docs/fleet.md, "Probes across hosts"): long enough for
/// the next call of a host that calls once every few intervals, short
/// enough that a host that stopped calling hands them on.
pub const HOLD_TTLS: i64 = 2;
use crate::breaker::{Breaker, Transitions};
use crate::config::Config;
use crate::mirror::{Command, Maybe, Proposal};
use crate::state::{Reason, State};
use crate::time::Nanos;
use crate::window::{Buckets, Slots, Window};

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

    /// One send for this breaker, as the script reads it ([`REPORT_FIELDS`](super::REPORT_FIELDS),
    /// [`encode`](super::encode)): hosts silent for `host_ttl_ms` no longer count; the
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
                // Back from failed sends to the fleet stage it followed, and
                // still in it, having probed nothing on its own meanwhile
                // (every probe it issued is in its tallies): it keeps its
                // tallies and its grant. Entering it afresh reported its
                // passed probes as none, and the fleet's stage, short of
                // them, never ended (a host that had probed stops asking).
                let f = &self.fleet;
                let tallied = f.passed.saturating_add(f.failed);
                let same = self
                    .stage()
                    .is_some_and(|s| s.index == r.stage && s.issued() == tallied.saturating_add(s.in_flight()));
                if f.stage_generation == r.generation && r.generation != 0 && same {
                    self.fleet.following = true;
                    return;
                }
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
