-- One host's send for one fleet breaker (docs/fleet.md). Atomic, and rule-free:
-- it applies the compare-and-set (or the command) the host decided, stores
-- the host's absolute report, sums the live hosts' reports and grants probe
-- slots up to the quota. Every decision is the Rust core's (fleet.rs).
--
-- The wire format is written twice: here (REPORT, REPLY) and in the Rust
-- rules (ext/circuit_breaker_rules/src/fleet/wire.rs, REPORT_FIELDS and
-- REPLY_FIELDS); spec/fleet/seam_spec.rb checks one against the other.
--
-- KEYS[1] hosts hash, KEYS[2] state hash.
-- ARGV[1] host id; ARGV[2] the host's report, integers separated by spaces,
-- named by REPORT:
--   host_ttl, key_ttl (ms), quota (probe slots per stage);
--   total, failures, slow: the host's window (or, while it opened alone,
--     the counts it opened with);
--   probe_generation: the fleet generation its probes belong to; want:
--     probe slots wanted in all; passed, failed: its probes;
--   kind (0 nothing, 1 proposal, 2 command), expected version, state,
--     reason, open_for (ms), open_base (backed-off open length, ms), stage;
--   alone: why the host opened on its own window (0: it did not);
--   reset_generation: the reset generation its counts follow (counted only
--     if it is the fleet's: counts sent before a reset! never count after it).
--   rounds_between: the proposal's rounds in a row of its stage that ended
--     between the rates (kept in the state as rb, answered back).
-- ARGV[3] the channel a change is published on (pushed to every host).
-- Reply: one string, the integers REPLY names separated by spaces, kind 1.
-- A change that was applied is also published: the same words with kind 2
-- (pushed, not an answer to the receiver's send) and no grant.
-- Or '-1' when a key held something malformed: another type (WRONGTYPE),
-- garbage, an integer out of range (it is deleted; the next send rebuilds
-- it).
--
-- Hosts' fields: seen_ms total failures slow pgen want granted passed
-- failed alone rg host_ttl (the last three may be missing, as an older gem
-- wrote them).
local REPORT = {'host_ttl', 'key_ttl', 'quota', 'total', 'failures', 'slow', 'probe_generation', 'want',
  'passed', 'failed', 'kind', 'expected', 'state', 'reason', 'open_for', 'open_base', 'stage', 'alone',
  'reset_generation', 'rounds_between'}
local REPLY = {'kind', 'epoch', 'version', 'state', 'generation', 'reason', 'remaining', 'open_base', 'stage',
  'stage_elapsed', 'total', 'failures', 'slow', 'hosts', 'granted_here', 'granted', 'passed', 'failed',
  'applied', 'round_elapsed', 'alone_hosts', 'alone_calls', 'reset_generation', 'rounds_between'}
local CLOSED, OPEN, HALF_OPEN = 0, 1, 2
local hosts, state = KEYS[1], KEYS[2]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local function int(x)
  local n = tonumber(x)
  if n == nil or n ~= n or n ~= math.floor(n) then return nil end
  return n
end

-- A value stored in Redis: an integer in 0..limit (default MAX), else nil.
local MAX = 2 ^ 48
local function stored(x, limit)
  local v = int(x)
  if v == nil or v < 0 or v > (limit or MAX) then return nil end
  return v
end
-- The codes of the state and reason fields, as fleet.rs reads them.
local LIMIT = {s = 4, r = 9}
-- A count in a host's field (the core reads their sums as 32-bit); its
-- times, generations and TTL are WIDE.
local COUNT = 2 ^ 31 - 1
local WIDE = {[1] = true, [5] = true, [11] = true, [12] = true}

-- A key of another type is malformed too.
for _, key in ipairs({hosts, state}) do
  local kind = redis.call('TYPE', key).ok
  if kind ~= 'hash' and kind ~= 'none' then
    redis.call('DEL', key)
    return '-1'
  end
end

local a, n = {}, 0
for word in string.gmatch(ARGV[2], '%S+') do
  n = n + 1
  if REPORT[n] == nil or int(word) == nil then break end
  a[REPORT[n]] = int(word)
end
if n ~= #REPORT or a[REPORT[n]] == nil then
  return redis.error_reply('circuit_breaker: a report has ' .. #REPORT .. ' integers')
end
local me = ARGV[1]
local host_ttl, key_ttl, quota = a.host_ttl, a.key_ttl, a.quota

-- The fleet state: absent means a fleet that never opened (epoch = now).
-- rt, the round's start, may be missing (a state an older gem wrote): the
-- stage's start then.
local f = {'e', 'v', 's', 'g', 'r', 'u', 'b', 'i', 't'}
local raw = redis.call('HMGET', state, unpack(f))
local st = {}
if raw[1] == false then
  st = {e = now, v = 0, s = 0, g = 0, r = 0, u = 0, b = 0, i = 0, t = now, rt = now, rg = 0, rb = 0}
else
  for n, name in ipairs(f) do
    st[name] = stored(raw[n], LIMIT[name])
    if st[name] == nil then
      redis.call('DEL', state)
      return '-1'
    end
  end
  local rt, rg, rb = unpack(redis.call('HMGET', state, 'rt', 'rg', 'rb'))
  st.rt = rt and stored(rt) or st.t
  st.rg = rg and stored(rg) or 0 -- missing before resets had generations
  st.rb = rb and stored(rb) or 0 -- missing before stages counted their rounds
  if st.rt == nil or st.rg == nil or st.rb == nil then
    redis.call('DEL', state)
    return '-1'
  end
  -- Redis's clock stepped back (a failover to a replica whose clock is
  -- behind): times stored in its future are brought back to now, and an
  -- opening lasts no longer than its length.
  st.t, st.rt = math.min(st.t, now), math.min(st.rt, now)
  if st.u > now + st.b then st.u = now + st.b end
end

local applied = 0
local kind = a.kind
if kind == 2 or (kind == 1 and a.expected == st.v) then
  st.v = st.v + 1
  st.g = st.g + 1
  -- A new round of the same stage keeps the stage's start (t): what
  -- min_stage_duration counts from. Every change starts a round (rt):
  -- what half_open_timeout counts from.
  local same_stage = st.s == HALF_OPEN and a.state == HALF_OPEN and a.stage == st.i and kind == 1
  st.s, st.r, st.b, st.i, st.rb = a.state, a.reason, a.open_base, a.stage, a.rounds_between
  if not same_stage then st.t = now end
  st.rt = now
  st.u = (st.s == OPEN) and (now + a.open_for) or 0
  -- reset!: a new count generation.
  if kind == 2 and st.s == CLOSED then st.rg = st.g end
  applied = 1
end
redis.call('HSET', state, 'e', st.e, 'v', st.v, 's', st.s, 'g', st.g, 'r', st.r,
  'u', st.u, 'b', st.b, 'i', st.i, 't', st.t, 'rt', st.rt, 'rg', st.rg, 'rb', st.rb)
redis.call('PEXPIRE', state, key_ttl)

-- The other live hosts' reports; stale ones are dropped.
local total, failures, slow, live = 0, 0, 0, 1
local granted, passed, failed = 0, 0, 0
local alone_hosts, alone_calls = 0, 0
local mine = 0
local all = redis.call('HGETALL', hosts)
for n = 1, #all, 2 do
  local field, v, words = all[n], {}, 0
  for word in string.gmatch(all[n + 1], '%S+') do
    words = words + 1
    v[words] = stored(word, not WIDE[words] and COUNT or nil)
    if v[words] == nil then
      redis.call('DEL', hosts)
      return '-1'
    end
  end
  if words < 9 then
    redis.call('DEL', hosts)
    return '-1'
  end
  -- Seen in Redis's future (its clock stepped back): seen now.
  if v[1] > now then
    v[1] = now
    redis.call('HSET', hosts, field, (string.gsub(all[n + 1], '^%S+', tostring(now))))
  end
  local in_stage = st.s == HALF_OPEN and v[5] == st.g
  if field == me then
    if in_stage then mine = v[7] end
  elseif now - v[1] <= (v[12] or host_ttl) then
    -- Each host is live for its own host_ttl: a host of a longer
    -- fleet_interval sends less often.
    live = live + 1
    -- A 10th word (why the host opened alone) and an 11th (its reset
    -- generation) are missing from an older gem's report.
    if (v[11] or 0) == st.rg then
      total, failures, slow = total + v[2], failures + v[3], slow + v[4]
      if (v[10] or 0) > 0 then alone_hosts, alone_calls = alone_hosts + 1, alone_calls + v[2] end
    end
    if in_stage then
      granted, passed, failed = granted + v[7], passed + v[8], failed + v[9]
    end
  else
    redis.call('HDEL', hosts, field)
  end
end

-- This host: it holds what it asks for (the slots it used, and one per call
-- that found none), up to the room the others leave, so the sum never exceeds
-- the quota and unused slots go back (a resent request asks for the same
-- total: idempotent).
local in_stage = st.s == HALF_OPEN and a.probe_generation == st.g
if in_stage then
  local room = quota - granted - mine
  if a.want < mine then
    mine = a.want
  elseif a.want > mine and room > 0 then
    mine = mine + math.min(a.want - mine, room)
  end
else
  mine = 0
end
redis.call('HSET', hosts, me, table.concat({now, a.total, a.failures, a.slow, a.probe_generation, a.want, mine,
  a.passed, a.failed, a.alone, a.reset_generation, host_ttl}, ' '))
redis.call('PEXPIRE', hosts, key_ttl)
if a.reset_generation == st.rg then
  total, failures, slow = total + a.total, failures + a.failures, slow + a.slow
  if a.alone > 0 then alone_hosts, alone_calls = alone_hosts + 1, alone_calls + a.total end
end
if in_stage then
  granted, passed, failed = granted + mine, passed + a.passed, failed + a.failed
end

local remaining = 0
if st.s == OPEN then remaining = math.max(st.u - now, 0) end
local r = {kind = 1, epoch = st.e, version = st.v, state = st.s, generation = st.g, reason = st.r,
  remaining = remaining, open_base = st.b, stage = st.i, stage_elapsed = now - st.t, total = total,
  failures = failures, slow = slow, hosts = live, granted_here = mine, granted = granted, passed = passed,
  failed = failed, applied = applied, round_elapsed = now - st.rt, alone_hosts = alone_hosts,
  alone_calls = alone_calls, reset_generation = st.rg, rounds_between = st.rb}
local function text(reply)
  local out = {}
  for k, name in ipairs(REPLY) do out[k] = string.format('%.0f', reply[name]) end
  return table.concat(out, ' ')
end
if applied == 1 then
  r.kind, r.granted_here = 2, 0
  -- pcall: a user without channel permission still syncs (the hosts pull
  -- the change at their next send; docs/fleet.md, "Hostile Redis").
  redis.pcall('PUBLISH', ARGV[3], text(r))
  r.kind, r.granted_here = 1, mine
end
return text(r)
