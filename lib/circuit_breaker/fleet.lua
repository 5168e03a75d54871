-- One host's send for one fleet breaker (docs/fleet.md). Atomic, and rule-free:
-- it applies the compare-and-set (or the command) the host decided, stores
-- the host's absolute report, sums the live hosts' reports and grants probe
-- slots up to the quota. Every decision is the Rust core's (fleet.rs).
--
-- KEYS[1] hosts hash, KEYS[2] state hash.
-- ARGV: 1 host id, 2 host_ttl_ms, 3 key_ttl_ms, 4 probe quota,
--       5 total, 6 failures, 7 slow calls,
--       8 fleet generation the host's probes belong to, 9 probe slots wanted
--       in all, 10 probes passed, 11 probes failed,
--       12 kind (0 nothing, 1 proposal, 2 command), 13 expected version,
--       14 state, 15 reason, 16 open for (ms), 17 backed-off open length (ms), 18 stage,
--       19 why the host opened on its own window (0: it did not; then 5..7 are
--          the counts it opened with),
--       20 the reset generation its counts follow (counted only if it is the
--          fleet's: counts sent before a reset! never count after it),
--       21 the channel a change is published on (pushed to every host).
-- Reply: {1, epoch, version, state, generation, reason, open remaining (ms),
--         backed-off open length (ms), stage, stage elapsed (ms),
--         total, failures, slow calls, live hosts, slots granted to this host,
--         slots granted in all, probes passed, probes failed, applied,
--         round elapsed (ms), live hosts that opened alone, their calls,
--         reset generation}
-- A change that was applied is also published: the same reply with 2 in
-- front (pushed, not an answer to the receiver's send) and no grant.
-- Or {-1} when a key held something malformed (it is deleted; the next
-- send rebuilds it).
local CLOSED, OPEN, HALF_OPEN = 0, 1, 2
local hosts, state = KEYS[1], KEYS[2]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

local function int(x)
  local n = tonumber(x)
  if n == nil or n ~= n or n ~= math.floor(n) then return nil end
  return n
end

local args = {}
for k = 2, 20 do
  args[k] = int(ARGV[k])
  if args[k] == nil then return redis.error_reply('circuit_breaker: bad argument ' .. k) end
end
local me = ARGV[1]
local host_ttl, key_ttl, quota = args[2], args[3], args[4]

-- The fleet state: absent means a fleet that never opened (epoch = now).
-- rt, the round's start, may be missing (a state an older gem wrote): the
-- stage's start then.
local f = {'e', 'v', 's', 'g', 'r', 'u', 'b', 'i', 't'}
local raw = redis.call('HMGET', state, unpack(f))
local st = {}
if raw[1] == false then
  st = {e = now, v = 0, s = 0, g = 0, r = 0, u = 0, b = 0, i = 0, t = now, rt = now, rg = 0}
else
  for n, name in ipairs(f) do
    st[name] = int(raw[n])
    if st[name] == nil then
      redis.call('DEL', state)
      return {-1}
    end
  end
  local rt, rg = unpack(redis.call('HMGET', state, 'rt', 'rg'))
  st.rt = rt and int(rt) or st.t
  st.rg = rg and int(rg) or 0 -- missing before resets had generations
  if st.rt == nil or st.rg == nil then
    redis.call('DEL', state)
    return {-1}
  end
end

local applied = 0
local kind = args[12]
if kind == 2 or (kind == 1 and args[13] == st.v) then
  st.v = st.v + 1
  st.g = st.g + 1
  -- A new round of the same stage keeps the stage's start (t): what
  -- min_stage_duration counts from. Every change starts a round (rt):
  -- what half_open_timeout counts from.
  local same_stage = st.s == HALF_OPEN and args[14] == HALF_OPEN and args[18] == st.i and kind == 1
  st.s, st.r, st.b, st.i = args[14], args[15], args[17], args[18]
  if not same_stage then st.t = now end
  st.rt = now
  st.u = (st.s == OPEN) and (now + args[16]) or 0
  -- reset!: a new count generation.
  if kind == 2 and st.s == CLOSED then st.rg = st.g end
  applied = 1
end
redis.call('HSET', state, 'e', st.e, 'v', st.v, 's', st.s, 'g', st.g, 'r', st.r,
  'u', st.u, 'b', st.b, 'i', st.i, 't', st.t, 'rt', st.rt, 'rg', st.rg)
redis.call('PEXPIRE', state, key_ttl)

-- The other live hosts' reports; stale ones are dropped.
local total, failures, slow, live = 0, 0, 0, 1
local granted, passed, failed = 0, 0, 0
local alone_hosts, alone_calls = 0, 0
local mine = 0
local all = redis.call('HGETALL', hosts)
for n = 1, #all, 2 do
  local field, v = all[n], {}
  for word in string.gmatch(all[n + 1], '%S+') do v[#v + 1] = int(word) end
  for k = 1, 9 do
    if v[k] == nil then
      redis.call('DEL', hosts)
      return {-1}
    end
  end
  local in_stage = st.s == HALF_OPEN and v[5] == st.g
  if field == me then
    if in_stage then mine = v[7] end
  elseif now - v[1] <= host_ttl then
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
local in_stage = st.s == HALF_OPEN and args[8] == st.g
if in_stage then
  local room = quota - granted - mine
  if args[9] < mine then
    mine = args[9]
  elseif args[9] > mine and room > 0 then
    mine = mine + math.min(args[9] - mine, room)
  end
else
  mine = 0
end
redis.call('HSET', hosts, me, table.concat({now, args[5], args[6], args[7], args[8], args[9], mine,
  args[10], args[11], args[19], args[20]}, ' '))
redis.call('PEXPIRE', hosts, key_ttl)
if args[20] == st.rg then
  total, failures, slow = total + args[5], failures + args[6], slow + args[7]
  if args[19] > 0 then alone_hosts, alone_calls = alone_hosts + 1, alone_calls + args[5] end
end
if in_stage then
  granted, passed, failed = granted + mine, passed + args[10], failed + args[11]
end

local remaining = 0
if st.s == OPEN then remaining = math.max(st.u - now, 0) end
local reply = {1, st.e, st.v, st.s, st.g, st.r, remaining, st.b, st.i, now - st.t,
  total, failures, slow, live, mine, granted, passed, failed, applied, now - st.rt,
  alone_hosts, alone_calls, st.rg}
if applied == 1 then
  local pushed = {unpack(reply)}
  pushed[1], pushed[15] = 2, 0
  redis.call('PUBLISH', ARGV[21], table.concat(pushed, ' '))
end
return reply
