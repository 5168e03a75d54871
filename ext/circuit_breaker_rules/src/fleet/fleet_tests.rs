//! Tests of the fleet's rules (docs/fleet.md): the fleet's verdicts on
//! summed reports, what a host follows, what it reports, and the probe
//! quota across hosts. Replies are built by hand as the script returns
//! them; the script itself is exercised against a real redis-server by
//! spec/fleet/.

use super::*;
use crate::breaker::{Breaker, Decision, Outcome};
use crate::config::{Config, Options};
use crate::state::{Reason, State};
use crate::window::{CountWindow, Window};

const SEC: Nanos = 1_000_000_000;

/// How long a host keeps probe slots granted and unused: 2 × host_ttl at
/// the default fleet_interval.
const HOLD: Nanos = 2 * SEC;

/// The defaults with the streak rule off: these tests are about the
/// windows' counts (docs/fleet.md); `f` may turn it on.
fn config(f: impl FnOnce(&mut Options)) -> Config {
    let mut o = Options { consecutive_failures: None, ..Options::default() };
    f(&mut o);
    Config::new(&o).expect("valid options")
}

fn window() -> Window {
    Window::Count(CountWindow::new(100, 800.0).unwrap())
}

/// A reply of the script, for a fleet in `state` at `version`.
fn reply(version: u64, state: State, generation: u64, reason: i64) -> [i64; REPLY_LEN] {
    let mut v = [0i64; REPLY_LEN];
    v[0] = 1;
    v[1] = 7; // epoch
    v[2] = version as i64;
    v[3] = state as i64;
    v[4] = generation as i64;
    v[5] = reason;
    v[13] = 1; // live hosts
    v
}

fn with_counts(mut v: [i64; REPLY_LEN], total: i64, failures: i64, hosts: i64) -> [i64; REPLY_LEN] {
    v[10] = total;
    v[11] = failures;
    v[13] = hosts;
    v
}

struct Host {
    b: Breaker,
    w: Window,
    cfg: Config,
}

impl Host {
    fn new(cfg: Config) -> Self {
        let mut b = Breaker::new(1);
        b.attach_fleet();
        Self { b, w: window(), cfg }
    }

    fn receive(&mut self, v: &[i64], now: Nanos) -> Vec<(State, State, Reason)> {
        let t = self.b.fleet_receive(&mut self.w, &self.cfg, Some(v), now);
        t.iter().map(|t| (t.from, t.to, t.reason)).collect()
    }

    fn report(&mut self, now: Nanos) -> [i64; REPORT_LEN] {
        self.b.fleet_report(&mut self.w, &self.cfg, now, HOLD)
    }

    fn state(&mut self, now: Nanos) -> State {
        self.b.metrics(&mut self.w, &self.cfg, now).0.state
    }

    fn admit(&mut self, now: Nanos) -> Option<crate::breaker::Permit> {
        match self.b.acquire(&mut self.w, &self.cfg, now).0 {
            Decision::Allowed(p) => Some(p),
            Decision::Rejected(_) => None,
        }
    }
}

#[test]
fn a_reply_that_is_not_the_scripts_is_malformed() {
    assert_eq!(Reply::parse(&[-1]), Err(Malformed));
    let mut v = reply(1, State::Open, 1, 1);
    v[3] = 9;
    assert_eq!(Reply::parse(&v), Err(Malformed));
    let mut v = reply(1, State::Open, 1, 1);
    v[6] = -5;
    assert_eq!(Reply::parse(&v), Err(Malformed));
    assert!(Reply::parse(&reply(1, State::Open, 1, 1)).is_ok());
}

#[test]
fn the_fleet_opens_on_sums_no_single_host_would_open_on() {
    let cfg = config(|o| o.min_calls = 20);
    // Four hosts with 8 calls each, half failing: no host reaches min_calls.
    let r = Reply::parse(&with_counts(reply(3, State::Closed, 3, 0), 32, 16, 4)).unwrap();
    let p = decide(&cfg, &r, Some(100)).expect("the fleet opens");
    assert_eq!(
        (p.expected.get(), p.state, p.reason, p.open_for),
        (Some(3), State::Open, Reason::ErrorRate, cfg.open_duration)
    );
    // The same counts under min_calls or threshold: nothing.
    let r = Reply::parse(&with_counts(reply(3, State::Closed, 3, 0), 19, 19, 4)).unwrap();
    assert_eq!(decide(&cfg, &r, Some(100)), None);
    let r = Reply::parse(&with_counts(reply(3, State::Closed, 3, 0), 40, 19, 4)).unwrap();
    assert_eq!(decide(&cfg, &r, Some(100)), None);
}

#[test]
fn min_calls_is_clamped_to_what_the_live_hosts_windows_hold() {
    let cfg = config(|o| o.min_calls = 50);
    let r = Reply::parse(&with_counts(reply(0, State::Closed, 0, 0), 20, 20, 2)).unwrap();
    assert!(decide(&cfg, &r, Some(10)).is_some(), "2 hosts × 10 slots");
    assert_eq!(decide(&cfg, &r, None), None, "a time window holds any number");
}

#[test]
fn an_open_fleet_turns_half_open_when_redis_says_no_time_remains() {
    let cfg = config(|_| {});
    let mut v = reply(4, State::Open, 4, 1);
    v[6] = 1;
    assert_eq!(decide(&cfg, &Reply::parse(&v).unwrap(), None), None);
    v[6] = 0;
    let p = decide(&cfg, &Reply::parse(&v).unwrap(), None).unwrap();
    assert_eq!((p.state, p.reason, p.stage), (State::HalfOpen, Reason::CoolDownElapsed, 0));
}

#[test]
fn half_open_timeout_counts_from_the_rounds_start_and_min_stage_duration_from_the_stages() {
    // min_stage_duration may equal half_open_timeout (docs/semantics-permits.md):
    // a round that passes at or after it advances the stage.
    let cfg = config(|o| {
        o.half_open_calls = 2;
        o.ramp = vec![0.5, 1.0];
        o.half_open_timeout = Some(10.0);
        o.min_stage_duration = 10.0;
    });
    let judge = |stage_ms, round_ms, passed| {
        let mut v = reply(9, State::HalfOpen, 9, 5);
        v[9] = stage_ms;
        v[16] = passed;
        v[19] = round_ms;
        decide(&cfg, &Reply::parse(&v).unwrap(), None).map(|p| (p.state, p.reason, p.stage))
    };
    assert_eq!(judge(12_000, 3_000, 2), Some((State::HalfOpen, Reason::ProbesPassed, 1)), "a later round advances");
    assert_eq!(judge(12_000, 3_000, 1), None, "a stage older than the timeout waits for its round");
    assert_eq!(judge(4_000, 3_000, 2), Some((State::HalfOpen, Reason::CoolDownElapsed, 0)), "too early: a new round");
    assert_eq!(judge(12_000, 10_000, 1), Some((State::Open, Reason::HalfOpenTimeout, 0)), "a round times out");
}

#[test]
fn the_fleets_stage_is_judged_on_summed_probes_with_the_hosts_rule() {
    let cfg = config(|o| {
        o.half_open_calls = 4;
        o.ramp = vec![0.5, 1.0];
        o.backoff = 2.0;
    });
    let stage = |passed, failed, index| {
        let mut v = reply(9, State::HalfOpen, 9, 5);
        v[7] = 30_000; // backed-off open length (ms)
        v[8] = index;
        v[16] = passed;
        v[17] = failed;
        decide(&cfg, &Reply::parse(&v).unwrap(), None)
    };
    assert_eq!(stage(3, 0, 0), None, "pending");
    let p = stage(4, 0, 0).unwrap();
    assert_eq!((p.state, p.stage), (State::HalfOpen, 1));
    let p = stage(4, 0, 1).unwrap();
    assert_eq!((p.state, p.reason), (State::Closed, Reason::ProbesPassed));
    let p = stage(0, 1, 0).unwrap();
    assert_eq!((p.state, p.reason, p.open_for), (State::Open, Reason::ProbeFailed, 60 * SEC), "backed off");
}

#[test]
fn a_fleet_stage_between_the_rates_starts_over_once_and_reopens_at_a_second_round_in_a_row() {
    // 4 probes, advance at 100 %, reopen below 50 %: 3 of 4 is between.
    let cfg = config(|o| {
        o.half_open_calls = 4;
        o.advance_rate = 1.0;
        o.reopen_rate = Some(0.5);
    });
    let round = |passed, failed, rounds_between| {
        let mut v = reply(9, State::HalfOpen, 9, 5);
        v[7] = 30_000;
        v[16] = passed;
        v[17] = failed;
        v[23] = rounds_between;
        decide(&cfg, &Reply::parse(&v).unwrap(), None).unwrap()
    };
    let first = round(3, 1, 0);
    assert_eq!((first.state, first.stage, first.rounds_between), (State::HalfOpen, 0, 1), "starts over once");
    let second = round(3, 1, i64::from(first.rounds_between));
    assert_eq!((second.state, second.reason), (State::Open, Reason::ProbeFailed), "a second round in a row reopens");
    // A round that passes before min_stage_duration ends the streak, as on a host.
    let cfg = config(|o| {
        o.half_open_calls = 4;
        o.min_stage_duration = 60.0;
        o.half_open_timeout = Some(60.0);
    });
    let mut v = reply(9, State::HalfOpen, 9, 5);
    v[16] = 4;
    v[23] = 1;
    let p = decide(&cfg, &Reply::parse(&v).unwrap(), None).unwrap();
    assert_eq!((p.state, p.rounds_between), (State::HalfOpen, 0));
}

#[test]
fn a_fleet_round_after_one_between_the_rates_reopens_as_soon_as_it_can_no_longer_pass() {
    // Issue #34 item 4, on the fleet's sums: 4 probes, advance at 100 %,
    // reopen below 50 %; one failure leaves at best 3 of 4.
    let cfg = config(|o| {
        o.half_open_calls = 4;
        o.advance_rate = 1.0;
        o.reopen_rate = Some(0.5);
    });
    let tally = |passed, failed, rounds_between| {
        let mut v = reply(9, State::HalfOpen, 9, 5);
        v[7] = 30_000;
        v[16] = passed;
        v[17] = failed;
        v[23] = rounds_between;
        decide(&cfg, &Reply::parse(&v).unwrap(), None)
    };
    assert_eq!(tally(0, 1, 0), None, "a first round may still land between the rates: it goes on");
    let p = tally(0, 1, 1).unwrap();
    assert_eq!((p.state, p.reason), (State::Open, Reason::ProbeFailed), "the next round reopens at once");
    assert_eq!(tally(3, 0, 1), None, "while it can still pass, it goes on");
}

#[test]
fn a_host_follows_a_fleet_opening_for_the_time_remaining() {
    let mut h = Host::new(config(|o| o.open_duration = 30.0));
    let mut v = reply(2, State::Open, 2, 1);
    v[6] = 12_000;
    assert_eq!(h.receive(&v, 0), vec![(State::Closed, State::Open, Reason::ErrorRate)]);
    assert_eq!(h.b.remaining(0), 12 * SEC);
    // The same version again changes nothing.
    assert!(h.receive(&v, SEC).is_empty());
    assert_eq!(h.b.remaining(SEC), 11 * SEC);
}

#[test]
fn a_host_open_for_longer_on_its_own_stays_open_for_longer() {
    let mut h = Host::new(config(|o| o.open_duration = 30.0));
    h.b.trip(&mut h.w, &h.cfg, 0);
    let mut v = reply(2, State::Open, 2, 1);
    v[6] = 5_000;
    assert!(h.receive(&v, 0).is_empty());
    assert_eq!(h.b.remaining(0), 30 * SEC);
}

#[test]
fn manual_actions_become_fleet_commands_and_commands_are_followed() {
    let mut h = Host::new(config(|_| {}));
    h.b.force_open(&mut h.w, &h.cfg, 0);
    let r = h.report(0);
    assert_eq!((r[7], r[9], r[10]), (2, State::ForcedOpen as i64, 7), "a command");
    // Sent: the reply shows it applied, and the next report carries nothing.
    h.receive(&reply(1, State::ForcedOpen, 1, 7), 0);
    assert_eq!(h.report(0)[7], 0);
    // Another host disables the fleet, then resets it.
    assert_eq!(
        h.receive(&reply(2, State::Disabled, 2, 7), 0),
        vec![(State::ForcedOpen, State::Disabled, Reason::Manual)]
    );
    assert_eq!(h.receive(&reply(3, State::Closed, 3, 7), 0), vec![(State::Disabled, State::Closed, Reason::Manual)]);
    assert_eq!(h.report(0)[7], 0, "following is not commanding");
}

#[test]
fn a_breaker_without_a_fleet_queues_no_command() {
    let cfg = config(|_| {});
    let mut w = window();
    let mut b = Breaker::new(1);
    b.trip(&mut w, &cfg, 0);
    assert_eq!(b.fleet_report(&mut w, &cfg, 0, HOLD)[7], 0);
}

#[test]
fn a_fleet_that_never_opened_leaves_the_host_as_it_is() {
    let mut h = Host::new(config(|o| o.open_duration = 30.0));
    h.b.trip(&mut h.w, &h.cfg, 0);
    h.receive(&reply(1, State::Open, 1, 7), 0); // its own command, applied
                                                // Redis restarted: a new epoch, version 0, closed.
    let mut v = reply(0, State::Closed, 0, 0);
    v[1] = 8;
    assert!(h.receive(&v, SEC).is_empty());
    assert_eq!(h.state(SEC), State::Open);
}

#[test]
fn a_host_reports_absolute_counts_so_a_resend_counts_nothing_twice() {
    let mut h = Host::new(config(|_| {}));
    for ok in [true, false, true] {
        let p = h.admit(0).unwrap();
        let o = if ok { Outcome::Success { duration_ns: 1.0e6 } } else { Outcome::Failure { duration_ns: 1.0e6 } };
        h.b.complete(&mut h.w, &h.cfg, p, o, 0, 0);
    }
    let first = h.report(0);
    assert_eq!(&first[..3], &[3, 1, 0]);
    assert_eq!(h.report(0), first);
}

#[test]
fn a_host_in_a_fleet_stage_probes_only_within_its_grant_and_never_advances_alone() {
    let cfg = config(|o| o.half_open_calls = 3);
    let mut h = Host::new(cfg);
    h.receive(&reply(5, State::HalfOpen, 5, 5), 0);
    assert_eq!(h.state(0), State::HalfOpen);
    assert!(h.admit(0).is_none(), "no slot granted yet");
    assert!(h.admit(0).is_none());
    let r = h.report(0);
    assert_eq!((r[3], r[4]), (5, 2), "wants the two slots its callers asked for");
    let mut v = reply(5, State::HalfOpen, 5, 5);
    v[14] = 1; // granted to this host
    h.receive(&v, 0);
    let p = h.admit(0).expect("one probe");
    assert!(h.admit(0).is_none(), "its grant is used");
    // Its probe passes: the host would close alone (one probe of one), but
    // only the fleet judges a stage it runs.
    h.b.complete(&mut h.w, &h.cfg, p, Outcome::Success { duration_ns: 1.0e6 }, 0, 0);
    assert_eq!(h.state(0), State::HalfOpen);
    let r = h.report(0);
    assert_eq!((r[5], r[6]), (1, 0), "its outcome goes to the fleet");
}

#[test]
fn a_host_back_from_failed_sends_keeps_the_probes_it_ran_in_the_stage_it_followed() {
    let mut h = Host::new(config(|o| o.half_open_calls = 3));
    let mut v = reply(5, State::HalfOpen, 5, 5);
    v[14] = 1;
    h.receive(&v, 0);
    let p = h.admit(0).expect("its slot");
    h.b.complete(&mut h.w, &h.cfg, p, Outcome::Success { duration_ns: 1.0e6 }, 0, 0);
    assert_eq!((h.report(0)[4], h.report(0)[5]), (1, 1));
    // A send times out (a loaded machine), the next one works: the fleet
    // has not moved.
    h.b.fleet_receive(&mut h.w, &h.cfg, None, SEC / 10);
    h.receive(&v, SEC / 5);
    assert_eq!(h.state(SEC / 5), State::HalfOpen);
    assert_eq!((h.report(SEC / 5)[4], h.report(SEC / 5)[5]), (1, 1), "its passed probe still counts");
    assert!(h.admit(SEC / 5).is_none(), "its grant is used");
    // Detached again, it probes on its own quota: back, its stage is
    // entered afresh (its own probe is in no tally; keeping the stage, it
    // could issue no probe within its grant).
    h.b.fleet_receive(&mut h.w, &h.cfg, None, SEC / 4);
    let own = h.admit(SEC / 4).expect("its own quota");
    h.b.complete(&mut h.w, &h.cfg, own, Outcome::Success { duration_ns: 1.0e6 }, SEC / 4, 0);
    assert_eq!(h.state(SEC / 4), State::HalfOpen);
    h.receive(&v, SEC / 3);
    assert_eq!(h.report(SEC / 3)[5], 0, "entered afresh");
    // A new fleet stage is entered afresh.
    let mut next = reply(6, State::HalfOpen, 6, 4);
    next[8] = 0;
    h.receive(&next, SEC);
    assert_eq!(h.report(SEC)[5], 0);
}

#[test]
fn a_failed_probe_reopens_the_host_at_once() {
    let mut h = Host::new(config(|o| o.half_open_calls = 3));
    let mut v = reply(5, State::HalfOpen, 5, 5);
    v[14] = 1;
    h.receive(&v, 0);
    h.receive(&v, 0);
    let p = h.admit(0).unwrap();
    h.b.complete(&mut h.w, &h.cfg, p, Outcome::Failure { duration_ns: 1.0e6 }, 0, 0);
    assert_eq!(h.state(0), State::Open);
    assert_eq!(h.report(0)[6], 1);
}

#[test]
fn a_failed_send_detaches_the_host_to_its_own_probe_quota() {
    let cfg = config(|o| o.half_open_calls = 2);
    let mut h = Host::new(cfg);
    h.receive(&reply(5, State::HalfOpen, 5, 5), 0);
    assert!(h.admit(0).is_none());
    assert!(h.b.fleet_receive(&mut h.w, &h.cfg, None, 0).is_empty());
    assert!(!h.b.fleet_connected());
    assert!(h.admit(0).is_some(), "its own breaker: its own quota");
    assert!(h.b.fleet_receive(&mut h.w, &h.cfg, Some(&[-1]), 0).is_empty(), "malformed is degraded too");
}

#[test]
fn a_host_back_from_a_failed_send_follows_the_fleet_it_had_followed() {
    let mut h = Host::new(config(|_| {}));
    let mut v = reply(2, State::Open, 2, 1);
    v[6] = 5_000;
    h.receive(&v, 0);
    // Redis paused: on its own, the host's opening ends after the 5 s it
    // followed (its clock ahead of Redis's), and it probes.
    assert!(h.b.fleet_receive(&mut h.w, &h.cfg, None, SEC).is_empty());
    assert_eq!(h.state(6 * SEC), State::HalfOpen);
    assert!(h.admit(6 * SEC).is_some(), "its own breaker: its own probe");
    // Back, the fleet unchanged (same version), open for 3 s more by Redis.
    v[6] = 3_000;
    assert_eq!(h.receive(&v, 7 * SEC), vec![(State::HalfOpen, State::Open, Reason::ErrorRate)]);
    assert!(h.admit(7 * SEC).is_none(), "the fleet's opening is enforced again");
    assert_eq!(h.b.remaining(7 * SEC), 3 * SEC);
    // Connected again, the same version changes nothing.
    assert!(h.receive(&v, 8 * SEC).is_empty());
}

/// The script's grant arithmetic (lib/circuit_breaker/fleet.lua), modelled
/// here only to drive several hosts through one stage.
#[test]
fn probes_across_hosts_never_exceed_the_quota() {
    let quota = 4u32;
    let mut hosts: Vec<Host> = (0..6).map(|_| Host::new(config(|o| o.half_open_calls = 4))).collect();
    let mut grants = vec![0u32; hosts.len()];
    let mut issued = 0;
    for round in 0..5 {
        for (i, h) in hosts.iter_mut().enumerate() {
            let mut v = reply(5, State::HalfOpen, 5, 5);
            let want = if round == 0 { 0 } else { h.report(0)[4] as u32 };
            let others: u32 = grants.iter().sum::<u32>() - grants[i];
            if want < grants[i] {
                grants[i] = want;
            } else if want > grants[i] {
                grants[i] += (want - grants[i]).min(quota - others - grants[i]);
            }
            v[14] = i64::from(grants[i]);
            h.receive(&v, 0);
            for _ in 0..3 {
                if h.admit(0).is_some() {
                    issued += 1;
                }
            }
        }
    }
    assert_eq!(issued, quota, "every slot used, none more");
}

#[test]
fn a_pushed_state_is_followed_only_when_newer_and_sends_nothing_back() {
    let mut h = Host::new(config(|o| o.open_duration = 30.0));
    h.receive(&reply(2, State::Closed, 2, 7), 0);
    h.b.force_open(&mut h.w, &h.cfg, 0); // a command waiting for the next send
    let mut pushed = reply(3, State::Open, 3, 1);
    pushed[0] = 2;
    pushed[6] = 10_000;
    assert_eq!(h.receive(&pushed, 0), vec![]);
    assert_eq!(h.report(0)[7], 2, "the command still goes out");
    h.receive(&reply(4, State::ForcedOpen, 4, 7), 0);
    let mut old = reply(3, State::Closed, 3, 7);
    old[0] = 2;
    assert!(h.receive(&old, 0).is_empty(), "an older push changes nothing");
    assert_eq!(h.state(0), State::ForcedOpen);
    let mut newer = reply(5, State::Disabled, 5, 7);
    newer[0] = 2;
    assert_eq!(h.receive(&newer, 0), vec![(State::ForcedOpen, State::Disabled, Reason::Manual)]);
}

#[test]
fn a_push_of_a_rebuilt_fleet_state_is_followed_at_once_and_the_idle_host_sends_again() {
    // Wiped keys (FLUSHALL): another host's trip! rebuilds the state with a
    // new epoch (Redis's time, later) and pushes it. An idle host followed
    // only its next heartbeat's reply, seconds later.
    let mut h = Host::new(config(|o| o.open_duration = 30.0));
    let mut closed = reply(3, State::Closed, 3, 7);
    closed[1] = 100;
    h.receive(&closed, 0);
    assert!(h.b.fleet_send(&mut h.w, &h.cfg, 0, 1_000).idle);
    let mut older = reply(9, State::Open, 9, 7);
    (older[0], older[1], older[6]) = (2, 50, 10_000);
    assert!(h.receive(&older, 0).is_empty(), "a late push of an older epoch changes nothing");
    let mut rebuilt = reply(1, State::Open, 1, 7);
    (rebuilt[0], rebuilt[1], rebuilt[6]) = (2, 200, 10_000);
    assert_eq!(h.receive(&rebuilt, 0), vec![(State::Closed, State::Open, Reason::Manual)]);
    assert_eq!(h.b.remaining(0), 10 * SEC);
    let mut next = reply(2, State::Closed, 2, 7);
    (next[0], next[1]) = (2, 200);
    assert_eq!(h.receive(&next, SEC), vec![(State::Open, State::Closed, Reason::Manual)], "then its later pushes");
    assert!(!h.b.fleet_send(&mut h.w, &h.cfg, SEC, 1_000).idle, "its report went with the old keys: sent");
    (next[0], next[2]) = (1, 2);
    h.receive(&next, SEC);
    assert!(h.b.fleet_send(&mut h.w, &h.cfg, SEC, 1_000).idle, "idle again once a reply came");
    // A host that never had a reply follows no push of any epoch.
    let mut new = Host::new(config(|_| {}));
    assert!(new.receive(&rebuilt, 0).is_empty());
}

#[test]
fn one_process_sends_for_a_shared_record_until_it_goes_silent() {
    let mut h = Host::new(config(|_| {}));
    assert!(h.b.fleet_claim(10, 0, SEC));
    assert!(!h.b.fleet_claim(11, SEC / 2, SEC), "10 holds it");
    assert!(h.b.fleet_claim(10, SEC, SEC), "and renews it");
    assert!(!h.b.fleet_claim(11, 2 * SEC, SEC), "not stale yet (>, not >=)");
    assert!(h.b.fleet_claim(11, 2 * SEC + 1, SEC), "10 went silent: 11 takes over");
    assert_eq!(h.b.fleet_syncer(), 11);
    assert!(!h.b.fleet_claim(10, 2 * SEC + 2, SEC));
}

#[test]
fn the_reply_to_a_hosts_own_reset_keeps_the_calls_recorded_since() {
    let mut h = Host::new(config(|_| {}));
    h.receive(&reply(1, State::Closed, 1, 0), 0);
    h.b.trip(&mut h.w, &h.cfg, 0);
    h.receive(&reply(2, State::Open, 2, 7), 0);
    h.b.reset(&mut h.w, &h.cfg, SEC);
    assert_eq!(h.report(SEC)[7], 2, "the reset goes out");
    let p = h.admit(SEC).expect("closed");
    h.b.complete(&mut h.w, &h.cfg, p, Outcome::Failure { duration_ns: 1.0e6 }, SEC, 0);
    assert!(h.receive(&reply(3, State::Closed, 3, 7), SEC).is_empty());
    assert_eq!(h.w.counts(SEC).failures, 1, "not emptied a second time");
    // Another host's reset! still resets this one.
    assert!(h.receive(&reply(4, State::Closed, 4, 7), SEC).is_empty());
    assert_eq!(h.w.counts(SEC).total, 0);
}

#[test]
fn a_hosts_own_trip_is_followed_whether_its_push_or_its_reply_comes_first() {
    let cfg = config(|o| o.open_duration = 10.0);
    let mut applied = reply(2, State::Open, 2, 7);
    applied[6] = 10_000;
    let mut pushed = applied;
    pushed[0] = 2;
    for push_first in [false, true] {
        let mut h = Host::new(cfg.clone());
        h.receive(&reply(1, State::Closed, 1, 0), 0);
        h.b.trip(&mut h.w, &h.cfg, 0);
        h.report(0);
        if push_first {
            h.receive(&pushed, 0);
        }
        h.receive(&applied, 0);
        // Its own timer ends the opening; the fleet's stage and grants
        // decide its probes (docs/fleet.md, "How a host enforces the fleet").
        assert_eq!(h.state(10 * SEC), State::HalfOpen);
        assert!(h.admit(10 * SEC).is_none(), "push first: {push_first}");
    }
}

#[test]
fn an_action_taken_while_a_send_is_in_flight_goes_out_with_the_next_send() {
    let mut h = Host::new(config(|_| {}));
    h.receive(&reply(1, State::Closed, 1, 0), 0);
    let sent = h.report(0); // in flight...
    assert_eq!(sent[7], 0);
    h.b.trip(&mut h.w, &h.cfg, 0); // ...when the operator trips
    h.receive(&reply(1, State::Closed, 1, 0), 0); // the reply to the earlier send
    let next = h.report(0);
    assert_eq!((next[7], next[9]), (2, State::Open as i64), "the trip is still to be sent");
    let mut applied = reply(2, State::Open, 2, 7);
    applied[6] = 30_000;
    h.receive(&applied, 0);
    assert_eq!(h.report(0)[7], 0, "sent and answered");
}

impl Host {
    fn call(&mut self, ok: bool, now: Nanos) {
        if let Some(p) = self.admit(now) {
            let o = if ok { Outcome::Success { duration_ns: 1.0e6 } } else { Outcome::Failure { duration_ns: 1.0e6 } };
            self.b.complete(&mut self.w, &self.cfg, p, o, now, 0);
        }
    }

    /// A window of 100 successes, then failures until the host opens.
    fn warm_then_trip(&mut self, now: Nanos) {
        for _ in 0..100 {
            self.call(true, now);
        }
        while self.state(now) == State::Closed {
            self.call(false, now);
        }
    }
}

fn with_alone(mut v: [i64; REPLY_LEN], hosts: i64, calls: i64) -> [i64; REPLY_LEN] {
    v[20] = hosts;
    v[21] = calls;
    v
}

#[test]
fn a_host_that_opened_alone_reports_the_counts_it_opened_with_not_its_emptied_window() {
    let mut h = Host::new(config(|o| o.open_duration = 10.0));
    h.receive(&reply(1, State::Closed, 1, 0), 0);
    h.warm_then_trip(0);
    assert_eq!(h.state(0), State::Open);
    let r = h.report(0);
    assert_eq!((&r[..3], r[14]), (&[100, 50, 0][..], 1), "the window it opened with, error rate");
    // Resent as it is while the opening lasts, never added to later calls.
    h.b.record_unpermitted(&mut h.w, &h.cfg, Outcome::Failure { duration_ns: 1.0e6 }, SEC);
    assert_eq!(h.report(9 * SEC), r);
    // open_duration passed: its own (empty) window again.
    let r = h.report(10 * SEC);
    assert_eq!((&r[..3], r[14]), (&[0, 0, 0][..], 0));
}

#[test]
fn a_host_stops_reporting_its_opening_once_the_fleet_opened_after_it() {
    let mut h = Host::new(config(|_| {}));
    h.receive(&reply(1, State::Closed, 1, 0), 0);
    h.warm_then_trip(0);
    assert_eq!(h.report(0)[14], 1);
    // The fleet's state it followed when it opened, resent: still its counts.
    h.receive(&reply(1, State::Closed, 1, 0), SEC / 10);
    assert_eq!(h.report(SEC / 10)[14], 1);
    let mut open = reply(2, State::Open, 2, 1);
    open[6] = 30_000;
    h.receive(&open, SEC / 5);
    let r = h.report(SEC / 5);
    assert_eq!((&r[..3], r[14]), (&[0, 0, 0][..], 0));
}

#[test]
fn a_host_that_leaves_its_opening_stops_reporting_it() {
    let mut h = Host::new(config(|_| {}));
    h.warm_then_trip(0);
    h.b.reset(&mut h.w, &h.cfg, SEC);
    h.call(true, SEC);
    let r = h.report(SEC);
    assert_eq!((&r[..3], r[14]), (&[1, 0, 0][..], 0));
}

#[test]
fn no_forked_child_or_new_shared_sender_inherits_an_opening_alone() {
    let mut h = Host::new(config(|_| {}));
    h.warm_then_trip(0);
    let mut child = Host { b: h.b, w: window(), cfg: h.cfg.clone() };
    child.b.after_fork();
    assert_eq!(child.report(0)[14], 0, "the parent's to report");

    assert!(h.b.fleet_claim(10, 0, SEC));
    assert_eq!(h.report(0)[14], 1, "its sender keeps reporting it");
    assert!(h.b.fleet_claim(11, 2 * SEC, SEC), "10 went silent");
    assert_eq!(h.report(2 * SEC)[14], 0, "11 reports its own calls only");
}

#[test]
fn a_host_without_a_fleet_or_tripped_by_hand_reports_no_opening_alone() {
    let mut h = Host::new(config(|_| {}));
    h.b.trip(&mut h.w, &h.cfg, 0);
    assert_eq!(h.report(0)[14], 0, "trip! is a command, not an opening on its window");
    let mut b = Breaker::new(1);
    let mut w = window();
    let cfg = config(|_| {});
    for _ in 0..20 {
        if let Decision::Allowed(p) = b.acquire(&mut w, &cfg, 0).0 {
            b.complete(&mut w, &cfg, p, Outcome::Failure { duration_ns: 1.0e6 }, 0, 0);
        }
    }
    assert_eq!(b.state(), State::Open);
    assert!(b.fleet.alone.get().is_none());
}

#[test]
fn the_fleet_opens_when_hosts_opened_alone_carry_the_quorum_of_its_calls() {
    let cfg = config(|_| {});
    // Two warm hosts: one opened alone (its 100 calls, 50 failed), the other
    // still closed with 100 calls, 45 failed: the sum (95/200) is under the
    // threshold, but half the calls are on a host that opened.
    let closed = with_counts(reply(3, State::Closed, 3, 0), 200, 95, 2);
    assert_eq!(decide(&cfg, &Reply::parse(&closed).unwrap(), Some(100)), None);
    let p = decide(&cfg, &Reply::parse(&with_alone(closed, 1, 100)).unwrap(), Some(100)).expect("opens");
    assert_eq!((p.state, p.reason, p.expected.get()), (State::Open, Reason::ErrorRate, Some(3)));
    // Under the quorum: nothing.
    let strict = config(|o| o.fleet_quorum = 0.6);
    assert_eq!(decide(&strict, &Reply::parse(&with_alone(closed, 1, 100)).unwrap(), Some(100)), None);
}

#[test]
fn one_host_cut_off_alone_among_three_or_more_opens_nothing() {
    let cfg = config(|o| o.fleet_quorum = 0.3);
    // Three live hosts; the one that opened carries 40 % of the calls.
    let v = with_counts(reply(3, State::Closed, 3, 0), 250, 60, 3);
    assert_eq!(decide(&cfg, &Reply::parse(&with_alone(v, 1, 100)).unwrap(), Some(100)), None);
    // A second host that opened alone: the dependency is dead for more than one.
    let p = decide(&cfg, &Reply::parse(&with_alone(v, 2, 200)).unwrap(), Some(100));
    assert_eq!(p.map(|p| p.state), Some(State::Open));
}

#[test]
fn a_slow_dependency_opens_the_fleet_for_slow_calls() {
    let cfg = config(|_| {});
    let mut v = with_counts(reply(3, State::Closed, 3, 0), 200, 0, 2);
    v[12] = 120; // slow calls: 60 %, under 0.8, no failures
    let p = decide(&cfg, &Reply::parse(&with_alone(v, 1, 100)).unwrap(), Some(100)).expect("opens");
    assert_eq!(p.reason, Reason::SlowCallRate);
}

#[test]
fn a_host_open_alone_keeps_its_own_opening_when_the_fleet_opens_after_it() {
    let mut h = Host::new(config(|o| o.open_duration = 10.0));
    h.receive(&reply(1, State::Closed, 1, 0), 0);
    h.warm_then_trip(0);
    // The fleet opened on its counts 4 s later (in this host's time).
    let mut open = reply(2, State::Open, 2, 1);
    open[6] = 10_000;
    assert!(h.receive(&open, 4 * SEC).is_empty());
    assert_eq!(h.b.remaining(4 * SEC), 6 * SEC);
    assert_eq!(h.report(4 * SEC)[14], 0, "and stops reporting its opening");
}

#[test]
fn probe_slots_a_host_holds_unused_go_back_to_the_hosts_that_ask() {
    let cfg = config(|o| o.half_open_calls = 2);
    let (mut a, mut b) = (Host::new(cfg.clone()), Host::new(cfg));
    let stage = |granted_here: i64, granted: i64, passed: i64| {
        let mut v = reply(5, State::HalfOpen, 5, 5);
        v[13] = 2;
        (v[14], v[15], v[16]) = (granted_here, granted, passed);
        v
    };
    a.receive(&stage(0, 0, 0), 0);
    b.receive(&stage(0, 0, 0), 0);
    // A's callers asked three times: it asks for both slots and gets them.
    for _ in 0..3 {
        assert!(a.admit(0).is_none());
    }
    assert_eq!(a.report(0)[4], 2);
    a.receive(&stage(2, 2, 0), 0);
    // One of its calls probes and passes; no other call comes.
    let p = a.admit(0).unwrap();
    a.b.complete(&mut a.w, &a.cfg, p, Outcome::Success { duration_ns: 1.0e6 }, 0, 0);
    // B asks for one: none is free yet.
    assert!(b.admit(0).is_none());
    assert_eq!(b.report(0)[4], 1);
    b.receive(&stage(0, 2, 1), 0);
    // A keeps the other for a while (its next call may be intervals away),
    // the grant resent unchanged not lengthening that...
    assert_eq!(a.report(SEC)[4], 2);
    a.receive(&stage(2, 2, 1), SEC);
    // ...and once HOLD has passed since it was granted, A's next send
    // keeps the slot it used and gives the other back, at once.
    assert_eq!(a.report(HOLD)[4], 1);
    assert!(a.admit(HOLD).is_none(), "a slot given back is not used");
    // B's next send gets it, and its probe passes: the fleet's stage has
    // two passed probes of two, and closes.
    assert!(b.admit(HOLD).is_none());
    assert_eq!(b.report(HOLD)[4], 1);
    b.receive(&stage(1, 2, 1), HOLD);
    let p = b.admit(HOLD).expect("the slot A gave back");
    b.b.complete(&mut b.w, &b.cfg, p, Outcome::Success { duration_ns: 1.0e6 }, HOLD, 0);
    let r = Reply::parse(&stage(1, 2, 2)).unwrap();
    assert_eq!(decide(&b.cfg, &r, Some(100)).map(|p| p.state), Some(State::Closed));
}

#[test]
fn a_quiet_host_keeps_the_slot_a_rejected_call_asked_for_until_its_next_call() {
    // One call every 0.5 s, sends every 0.1 s (issue: each send after the
    // grant asked for nothing and gave the slot back before the next call,
    // which was rejected again, forever).
    let cfg = config(|o| o.half_open_calls = 2);
    let mut h = Host::new(cfg);
    let stage = |granted_here: i64| {
        let mut v = reply(5, State::HalfOpen, 5, 5);
        (v[14], v[15]) = (granted_here, granted_here);
        v
    };
    let ms = |n: Nanos| n * 1_000_000;
    h.receive(&stage(0), 0);
    assert!(h.admit(0).is_none(), "no slot yet: it asks for one");
    assert_eq!(h.report(ms(100))[4], 1);
    h.receive(&stage(1), ms(100));
    for t in [200, 300, 400] {
        assert_eq!(h.report(ms(t))[4], 1, "kept at {t} ms, unused");
        h.receive(&stage(1), ms(t));
    }
    let p = h.admit(ms(500)).expect("the next call probes");
    h.b.complete(&mut h.w, &h.cfg, p, Outcome::Success { duration_ns: 1.0e6 }, ms(500), 0);
    assert_eq!((h.report(ms(600))[4], h.report(ms(600))[5]), (1, 1), "the used slot stays counted");
}

#[test]
fn a_host_that_stopped_calling_hands_its_unused_slot_on_after_the_hold() {
    let cfg = config(|o| o.half_open_calls = 1);
    let mut h = Host::new(cfg);
    let mut v = reply(5, State::HalfOpen, 5, 5);
    h.receive(&v, 0);
    assert!(h.admit(0).is_none());
    assert_eq!(h.report(0)[4], 1);
    (v[14], v[15]) = (1, 1);
    h.receive(&v, SEC / 10);
    assert_eq!(h.report(SEC / 10 + HOLD - 1)[4], 1, "held");
    h.receive(&v, SEC / 10 + HOLD - 1);
    assert_eq!(h.report(SEC / 10 + HOLD)[4], 0, "given back: the quota goes to the hosts that ask");
    assert!(h.admit(SEC / 10 + HOLD).is_none());
}

#[test]
fn a_host_that_kept_its_opening_alone_probes_on_its_own_when_it_ends() {
    let mut h = Host::new(config(|o| {
        o.open_duration = 10.0;
        o.half_open_calls = 3;
    }));
    h.receive(&reply(1, State::Closed, 1, 0), 0);
    h.warm_then_trip(0);
    let mut open = reply(2, State::Open, 2, 1);
    open[6] = 10_000;
    h.receive(&open, SEC);
    // Its own timer ends before the fleet's (Redis's clock, a round trip
    // later): it probes with its own quota until the fleet moves.
    assert_eq!(h.state(10 * SEC), State::HalfOpen);
    assert_eq!((0..5).filter(|_| h.admit(10 * SEC).is_some()).count(), 3);
}

fn with_reset(mut v: [i64; REPLY_LEN], generation: i64) -> [i64; REPLY_LEN] {
    v[22] = generation;
    v
}

#[test]
fn counts_follow_the_fleets_last_reset_and_a_host_that_missed_one_empties_its_window() {
    let mut h = Host::new(config(|o| o.min_calls = 1_000));
    // A fleet it joins afresh: its calls so far count.
    h.call(false, 0);
    h.receive(&with_reset(reply(4, State::Closed, 4, 4), 4), 0);
    let r = h.report(0);
    assert_eq!((r[0], r[15]), (1, 4));
    // Disabled, failing calls recorded; then another host's reset! (pushed).
    h.receive(&with_reset(reply(5, State::Disabled, 5, 7), 4), 0);
    h.call(false, 0);
    assert_eq!(h.report(0)[0], 2);
    let mut push = with_reset(reply(6, State::Closed, 6, 7), 6);
    push[0] = 2;
    h.receive(&push, 0);
    assert_eq!(h.state(0), State::Closed);
    let r = h.report(0);
    assert_eq!((r[0], r[15]), (0, 6), "emptied, and counted from that reset on");
    // Away meanwhile (a failed send), it missed a reset and the fleet moved on.
    h.call(false, 0);
    h.b.fleet_receive(&mut h.w, &h.cfg, None, 0);
    h.call(false, 0);
    h.receive(&with_reset(reply(9, State::Closed, 9, 1), 8), 0);
    let r = h.report(0);
    assert_eq!((r[0], r[15]), (0, 8), "counts sent before it never count after it");
}

#[test]
fn the_echo_of_a_hosts_own_reset_keeps_the_calls_recorded_since_in_the_new_generation() {
    let mut h = Host::new(config(|o| o.min_calls = 1_000));
    h.receive(&with_reset(reply(1, State::Closed, 1, 0), 0), 0);
    h.b.reset(&mut h.w, &h.cfg, 0);
    h.report(0);
    h.call(false, 0);
    h.receive(&with_reset(reply(2, State::Closed, 2, 7), 2), 0);
    let r = h.report(0);
    assert_eq!((r[0], r[15]), (1, 2));
}

#[test]
fn a_send_is_the_words_the_script_names_and_a_reply_its_words() {
    let cfg = config(|o| {
        o.half_open_calls = 3;
        o.open_duration = 40.0;
    });
    let mut h = Host::new(cfg);
    for _ in 0..2 {
        let p = h.admit(0).expect("closed");
        h.b.complete(&mut h.w, &h.cfg, p, Outcome::Failure { duration_ns: 1.0e6 }, 0, 0);
    }
    let send = encode(&h.b.fleet_send(&mut h.w, &h.cfg, 0, 1_000).words);
    let got = words(send.as_bytes()).expect("integers separated by spaces");
    assert_eq!(got.len(), REPORT_FIELDS.len());
    let field = |name: &str| got[REPORT_FIELDS.iter().position(|f| *f == name).unwrap()];
    assert_eq!((field("host_ttl"), field("key_ttl"), field("quota")), (1_000, 120_000, 3));
    assert_eq!((field("total"), field("failures"), field("kind")), (2, 2, 0));
    // The script's reply as text, and what is not one.
    let text = encode(&reply(1, State::Open, 1, 1));
    assert!(Reply::parse(&words(text.as_bytes()).unwrap()).is_ok());
    assert_eq!(words(b"1 2 x"), None);
    assert_eq!(words(b"1  2"), None);
    assert_eq!(words(b""), None);
}

#[test]
fn an_idle_breaker_sends_a_heartbeat_only_and_anything_new_at_once() {
    let mut h = Host::new(config(|_| {}));
    let mut pace = Pace::new(7);
    let send = |h: &mut Host, now| h.b.fleet_send(&mut h.w, &h.cfg, now, 1_000);
    let mut first = send(&mut h, 0);
    assert!(!first.idle, "not connected yet");
    assert!(pace.due(&mut first, true, 0));
    h.receive(&reply(0, State::Closed, 0, 0), 0);
    let idle = send(&mut h, 0);
    assert!(idle.idle);
    assert!(!pace.due(&mut idle.clone(), true, SEC / 10), "the same words again: skipped");
    assert!(!pace.due(&mut idle.clone(), true, SEC / 5));
    // Within 0.7 s of the last send (its report lives 1 s): a heartbeat,
    // whose report lives 5 s.
    let mut beat = idle;
    let t = (1..=70).map(|k| k * SEC / 100).find(|&t| pace.due(&mut beat.clone(), true, t)).expect("a heartbeat");
    assert!(t <= 7 * SEC / 10);
    pace = Pace::new(7);
    assert!(pace.due(&mut idle.clone(), true, 0));
    assert!(pace.due(&mut beat, true, t));
    assert_eq!(beat.words[0], 1_000 * IDLE_TTL);
    assert!(!pace.due(&mut idle.clone(), true, t + SEC), "the next within 3.5 s");
    assert!(pace.due(&mut idle.clone(), false, t + SEC), "without pushes every slot sends");
    // A call changes the report: sent at once.
    let p = h.admit(SEC).expect("closed");
    h.b.complete(&mut h.w, &h.cfg, p, Outcome::Success { duration_ns: 1.0e6 }, SEC, 0);
    let mut changed = send(&mut h, 2 * SEC);
    assert!(pace.due(&mut changed, true, 2 * SEC));
    assert_eq!(changed.words[0], 1_000, "a change lives host_ttl");
    // A fleet opening followed: every slot sends (its timer, its probes).
    h.receive(&reply(1, State::Open, 1, 7), SEC);
    let following = send(&mut h, SEC);
    assert!(!following.idle);
    assert!(pace.due(&mut following.clone(), true, 2 * SEC));
    assert!(pace.due(&mut following.clone(), true, 2 * SEC));
}

#[test]
fn heartbeats_of_many_breakers_spread_evenly_over_the_slots() {
    let h = &mut Host::new(config(|_| {}));
    h.receive(&reply(0, State::Closed, 0, 0), 0);
    let send = h.b.fleet_send(&mut h.w, &h.cfg, 0, 1_000);
    let slot = 100 * MS;
    let mut per_slot = std::collections::BTreeMap::new();
    for seed in 0..1_000u64 {
        let mut pace = Pace::new(seed);
        let (mut last, mut ttl) = (0, 1_000 * MS);
        assert!(pace.due(&mut send.clone(), true, 0), "the first send goes");
        for t in (1..=300).map(|k| k * slot) {
            let mut s = send;
            if pace.due(&mut s, true, t) {
                assert!(t - last <= ttl * 7 / 10 && t - last >= ttl * 7 / 20, "{} ms apart", (t - last) / MS);
                if t > 10 * SEC {
                    *per_slot.entry(t).or_insert(0) += 1;
                }
                (last, ttl) = (t, s.words[0] * MS);
            }
        }
    }
    // 1000 breakers, one heartbeat per 35 slots each: about 29 a slot.
    assert!(per_slot.values().all(|&n| (10..=60).contains(&n)), "{per_slot:?}");
}
