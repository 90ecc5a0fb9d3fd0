-- admit.lua decides a run of messages in order, each one atomic check-and-record on the
-- server's clock (one TIME per call: the run shares its millisecond).
--
-- ARGV starts with the call's limit sets: their number, then per set #limits, #caps and
-- its (window, max) pairs: limits, then caps. Then, per message in order, two to four
-- KEYS and its ARGV.
-- KEYS  scene window  <prefix>:{<recipient>}:s:<scene>  ZSET member=hash(id) score=ms
--       cap window    <prefix>:{<recipient>}:c          ZSET member=hash(id) score=ms
--       scene rate    <prefix>:{<recipient>}:g:<scene>  string: the GCRA's TAT (ms), only
--                     when the scene has a rate limit
--       cap rate      <prefix>:{<recipient>}:gc         the same, only when the caps have one
-- ARGV  member, flags, its limit set (1-based), then #periods triples (start_ms, end_ms,
--       end2_ms), then the emission interval (ms) of the scene's rate limit and of the
--       caps', each only when there is one
-- The messages of a call share a few limit sets (one per scene, say), sent and parsed
-- once: each argument costs Redis and Lua about 0.1 µs.
-- flags is force (0|1) + 2 * #periods + 8 * (scene rate) + 16 * (cap rate) + 32 * (dry run)
-- + 64 * (want tightest):
-- a message with rolling limits only sends 0 or 1 and no triples, and costs what it did
-- before calendar and rate limits. A rolling limit's window is in ms; a calendar limit's
-- is -k, naming triple k: two consecutive calendar periods [start, end) and [end, end2)
-- that the gate computed from its own clock, since Lua knows no time zones. The script
-- counts in whichever holds its own now. A rate limit's window is 0 and its max the burst.
--
-- A rate limit is a GCRA: with interval T, burst B and TAT = max(stored TAT, now), a
-- message is admitted when TAT - now <= (B - 1) * T, and its admission sets the TAT to
-- TAT + T (never past now + B * T: a forced admission holds the limit shut for one
-- interval at most). A rejected message reopens at TAT - (B - 1) * T; its count is the
-- slots in use, ceil((TAT - now) / T). The TAT key expires one second after the TAT.
--
-- Returns one reply per message: {now_ms, 1} admitted, or with want tightest {now_ms, 1,
-- scope, limit index, count}, naming the limit with the fewest slots left after it and its
-- count with this message ({now_ms, 1} still when nothing limits the message), {now_ms, 2} duplicate, {now_ms, 0, scope (1 scene,
-- 2 recipient), limit index (0-based), count, next_allowed_ms}, or {now_ms, 3} when now
-- lies in neither period of a triple: the clocks of Redis and the gate disagree by about a
-- period, and nothing of the message was counted. A dry run decides alike and writes
-- nothing.
--
-- On Redis Cluster a call holds one message (its keys share a slot); on one Redis it
-- holds a run of them, which saves the per-call cost of EVALSHA and TIME.
--
-- Cost: each redis.call is most of what a decision costs, so the script makes
-- few. It reads the newest READ members of each window in one call; a window
-- that small is seen whole, and every count, the duplicate check and the
-- time a window reopens come from that one read. Only a larger window falls
-- back to ZSCORE, ZCOUNT and ZREVRANGE, each O(log n). Members that have left
-- every window are not removed one call at a time: the trim to the newest K
-- (the largest max) pushes them out, or the key expires with them. They never
-- count, since counts and the duplicate check look only at scores inside the
-- windows and periods. A key lives one second past its longest window or the
-- end of its latest calendar period (a rate limit keeps its scene's ids for burst
-- intervals, to know them again). A rejected message writes nothing. A rate limit
-- costs one GET and, when admitted, one SET.

local READ = 16
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- Numbers go to redis.call as integer strings, formatted once: Lua would
-- format each with %.14g, the costly floating-point path of printf.
local nowstr = string.format('%d', now)
local ttls = {}
local function ttl(ms)
  local s = ttls[ms]
  if s == nil then s = string.format('%d', ms) ttls[ms] = s end
  return s
end
-- num parses a number of ARGV. Requests of one scene repeat the same few
-- (flags, limit set, periods), and Lua's tonumber calls strtod each time.
local nums = {}
local function num(arg)
  local v = nums[arg]
  if v == nil then v = tonumber(arg) nums[arg] = v end
  return v
end

-- The limit sets: set k is {#limits, #caps, index in P of its first pair}, P every
-- set's pairs as numbers.
local P, sets, a = {}, {}, 2
for k = 1, tonumber(ARGV[1]) do
  local ns, nc = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  sets[k] = {ns, nc, #P + 1}
  for i = a + 2, a + 1 + 2 * (ns + nc) do P[#P + 1] = tonumber(ARGV[i]) end
  a = a + 2 + 2 * (ns + nc)
end

-- span returns, over the n pairs from P[at], the earliest score any of them counts, how
-- long past now one of them still needs its members (ms), and the largest max. per holds
-- the message's calendar periods, rt the set's rate limit.
local function span(at, n, per, rt)
  local from, keep, k = now + 1, 0, 0
  for i = at, at + 2 * (n - 1), 2 do
    local w, m = P[i], P[i + 1]
    if w == 0 then
      local b = m * rt.every
      from, keep = math.min(from, now - b + 1), math.max(keep, b)
    elseif w < 0 then
      local p = per[-w]
      from, keep = math.min(from, p[1]), math.max(keep, p[2] - now)
    else
      from, keep = math.min(from, now - w + 1), math.max(keep, w)
    end
    k = math.max(k, m)
  end
  return from, keep, k
end

-- periods returns the {start, end} of the nb triples from ARGV[at] that hold now, or nil
-- when one does not.
local function periods(at, nb)
  local per = {}
  for b = 1, nb do
    local i = at + 3 * (b - 1)
    local s, e = num(ARGV[i]), num(ARGV[i + 1])
    if now >= e then s, e = e, num(ARGV[i + 2]) end
    if now < s or now >= e then return nil end
    per[b] = {s, e}
  end
  return per
end

-- window reads the newest members of key: {member, score, ...} newest first,
-- and whether that is all of them.
local function window(key)
  local got = redis.call('ZREVRANGE', key, 0, READ - 1, 'WITHSCORES')
  -- Each score is read by every limit: parse it once.
  for i = 2, #got, 2 do got[i] = tonumber(got[i]) end
  return got, #got < 2 * READ
end

-- decide decides the message whose KEYS start at ki and whose ARGV starts at a.
local function decide(ki, a, flags)
  local force = flags % 2 == 1
  local nb = math.floor(flags / 2) % 4
  local srate, crate = math.floor(flags / 8) % 2 == 1, math.floor(flags / 16) % 2 == 1
  local dry = math.floor(flags / 32) % 2 == 1
  local want = flags >= 64
  local id = ARGV[a]
  local set = sets[num(ARGV[a + 2])]
  local ns, nc = set[1], set[2]
  if ns + nc == 0 then
    return {now, 1} -- nothing limits the message, so nothing is kept
  end
  local skey, ckey = KEYS[ki], KEYS[ki + 1]
  local first, capfirst = set[3], set[3] + 2 * ns
  local per
  if nb > 0 then
    per = periods(a + 3, nb)
    if per == nil then return {now, 3} end
  end
  -- The rate limits' keys and intervals; their TATs are read once the id is known new.
  local srt, crt
  local rk, ri = ki + 2, a + 3 + 3 * nb
  if srate then srt, rk, ri = {key = KEYS[rk], every = num(ARGV[ri])}, rk + 1, ri + 1 end
  if crate then crt = {key = KEYS[rk], every = num(ARGV[ri])} end

  -- A scene without limits still keeps its ids (for duplicates) as long as the caps need them.
  local sfrom, skeep, sk
  if ns > 0 then sfrom, skeep, sk = span(first, ns, per, srt) else sfrom, skeep, sk = span(capfirst, nc, per, crt) end
  local sgot, swhole = window(skey)
  local dup = nil
  for i = 1, #sgot, 2 do
    if sgot[i] == id then dup = sgot[i + 1] break end
  end
  if dup == nil and not swhole then dup = redis.call('ZSCORE', skey, id) end
  if dup and tonumber(dup) >= sfrom then
    return {now, 2}
  end

  if srt or crt then
    for _, rt in ipairs({srt or false, crt or false}) do
      if rt then
        local v = redis.call('GET', rt.key)
        rt.tat = now
        if v then rt.tat = math.max(tonumber(v), now) end
      end
    end
  end
  -- The cap window is kept only for caps that count members (not a rate alone).
  local cwin = nc - (crate and 1 or 0) > 0
  local ckeep, ck, cgot, cwhole = 0, 0, {}, true
  if cwin then
    local _
    _, ckeep, ck = span(capfirst, nc, per, crt)
    cgot, cwhole = window(ckey)
  end

  -- Check every limit; keep the one that reopens last, and the one with the fewest
  -- slots left after this message (tight: left, scope, index, count with it).
  local worst, tight
  local function check(key, got, whole, at, n, scope, rt)
    for j = 0, n - 1 do
      local w, m = P[at + 2 * j], P[at + 2 * j + 1]
      local c, reopen
      if w == 0 then
        -- A rate limit: the slots in use are the intervals up to the TAT; it admits
        -- while fewer than the burst are, and reopens with TAT (burst - 1) intervals away.
        rt.burst = m
        c = math.ceil((rt.tat - now) / rt.every)
        reopen = rt.tat - (m - 1) * rt.every
      else
        -- A rolling limit counts the scores after now - w; a calendar limit those of
        -- its period, and reopens when the period ends.
        local from
        from = now - w + 1
        if w < 0 then from, reopen = per[-w][1], per[-w][2] end
        c = 0
        while 2 * c < #got and got[2 * c + 2] >= from do c = c + 1 end
        if 2 * c == #got and not whole then
          c = redis.call('ZCOUNT', key, from, '+inf')
        end
        if c >= m and reopen == nil then
          -- The window reopens when the m-th newest member leaves it.
          local at_m
          if 2 * m <= #got then
            at_m = got[2 * m]
          else
            at_m = redis.call('ZREVRANGE', key, m - 1, m - 1, 'WITHSCORES')[2]
          end
          reopen = tonumber(at_m) + w
        end
      end
      if want and (tight == nil or m - c - 1 < tight[1]) then
        tight = {m - c - 1, scope, j, c + 1}
      end
      if c >= m and (worst == nil or reopen > worst[6]) then
        worst = {now, 0, scope, j, c, reopen}
      end
    end
  end
  check(skey, sgot, swhole, first, ns, 1, srt)
  check(ckey, cgot, cwhole, capfirst, nc, 2, crt)
  if worst and not force then
    return worst
  end
  local reply = {now, 1}
  if want then reply = {now, 1, tight[2], tight[3], tight[4]} end
  if dry then
    return reply
  end

  -- Record; the trim to the newest K bounds memory even under forced admissions.
  -- The scene window evicts its oldest members, never the one just added: when
  -- several share its millisecond, equal scores sort by member, a hash, and the
  -- newest admission must stay a duplicate. (The cap window's members are only
  -- counted, so any of equal score may go.)
  local margin = 1000
  local scard = #sgot / 2 + redis.call('ZADD', skey, nowstr, id)
  if not swhole then
    redis.call('ZREMRANGEBYRANK', skey, 0, -(sk + 1))
  elseif scard > sk then
    local victims = {}
    for i = 2 * (sk - 1) + 1, #sgot, 2 do
      if sgot[i] ~= id then victims[#victims + 1] = sgot[i] end
    end
    if #victims > 0 then redis.call('ZREM', skey, unpack(victims)) end
  end
  redis.call('PEXPIRE', skey, ttl(skeep + margin))
  if cwin then
    local ccard = #cgot / 2 + redis.call('ZADD', ckey, nowstr, id)
    if ccard > ck or not cwhole then redis.call('ZREMRANGEBYRANK', ckey, 0, -(ck + 1)) end
    redis.call('PEXPIRE', ckey, ttl(ckeep + margin))
  end
  if srt or crt then
    for _, rt in ipairs({srt or false, crt or false}) do
      if rt then
        local tat = math.min(rt.tat + rt.every, now + rt.burst * rt.every)
        redis.call('SET', rt.key, tat, 'PX', tat - now + margin)
      end
    end
  end
  return reply
end

local out, ki = {}, 1
while ki <= #KEYS do
  local flags = num(ARGV[a + 1])
  local nb = math.floor(flags / 2) % 4
  local nr = math.floor(flags / 8) % 2 + math.floor(flags / 16) % 2
  out[#out + 1] = decide(ki, a, flags)
  a = a + 3 + 3 * nb + nr
  ki = ki + 2 + nr
end
return out
