//! When a host sends for a breaker: every slot, but for an idle breaker's
//! heartbeat (docs/fleet.md, "Cost at scale").

use super::wire::REPORT_LEN;
use super::MS;
use crate::time::Nanos;

/// One breaker's send (`Breaker::fleet_send`, host.rs): its words, and whether the
/// breaker is idle (connected, following no fleet opening or stage, no
/// command or proposal waiting).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Send {
    pub words: [i64; 3 + REPORT_LEN],
    pub idle: bool,
}

/// How many times longer than `host_ttl` a heartbeat's report lives.
pub const IDLE_TTL: i64 = 5;

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
