-- admit.lua decides a run of messages in order, each one atomic check-and-record on the
-- server's clock (one TIME per call: the run shares its millisecond).
--
-- Per message, in order: two KEYS and its ARGV.
-- KEYS  scene window  <prefix>:{<recipient>}:s:<scene>  ZSET member=hash(id) score=ms
--       cap window    <prefix>:{<recipient>}:c          ZSET member=hash(id) score=ms
-- ARGV  member, force (0|1), #limits, #caps, then (window_ms, max) pairs: limits, then caps
--
-- Returns one reply per message: {now_ms, 1} admitted, {now_ms, 2} duplicate, or
-- {now_ms, 0, scope (1 scene, 2 recipient), limit index (0-based), count, next_allowed_ms}.
-- On Redis Cluster a call holds one message (its two keys share a slot); on one Redis it
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
-- windows. A rejected message writes nothing.

local READ = 16
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

-- span returns the longest window and the largest max of n pairs from ARGV[at].
local function span(at, n)
  local w, k = 0, 0
  for i = at, at + 2 * (n - 1), 2 do
    w = math.max(w, tonumber(ARGV[i]))
    k = math.max(k, tonumber(ARGV[i + 1]))
  end
  return w, k
end

-- window reads the newest members of key: {member, score, ...} newest first,
-- and whether that is all of them.
local function window(key)
  local got = redis.call('ZREVRANGE', key, 0, READ - 1, 'WITHSCORES')
  return got, #got < 2 * READ
end

-- decide decides the message whose keys are skey and ckey and whose ARGV starts at a.
local function decide(skey, ckey, a)
  local id, force = ARGV[a], ARGV[a + 1] == '1'
  local ns, nc = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  if ns + nc == 0 then
    return {now, 1} -- nothing limits the message, so nothing is kept
  end
  local first, capfirst = a + 4, a + 4 + 2 * ns

  -- A scene without limits still keeps its ids (for duplicates) as long as the caps need them.
  local sw, sk
  if ns > 0 then sw, sk = span(first, ns) else sw, sk = span(capfirst, nc) end
  local sgot, swhole = window(skey)
  local dup = nil
  for i = 1, #sgot, 2 do
    if sgot[i] == id then dup = sgot[i + 1] break end
  end
  if dup == nil and not swhole then dup = redis.call('ZSCORE', skey, id) end
  if dup and tonumber(dup) > now - sw then
    return {now, 2}
  end

  local cw, ck, cgot, cwhole = 0, 0, {}, true
  if nc > 0 then
    cw, ck = span(capfirst, nc)
    if not force then cgot, cwhole = window(ckey) end
  end

  if not force then
    -- Check every limit; keep the one that reopens last.
    local worst
    local function check(key, got, whole, at, n, scope)
      for j = 0, n - 1 do
        local w, m = tonumber(ARGV[at + 2 * j]), tonumber(ARGV[at + 2 * j + 1])
        local c = 0
        while 2 * c < #got and tonumber(got[2 * c + 2]) > now - w do c = c + 1 end
        if 2 * c == #got and not whole then
          c = redis.call('ZCOUNT', key, '(' .. (now - w), '+inf')
        end
        if c >= m then
          -- The window reopens when the m-th newest member leaves it.
          local at_m
          if 2 * m <= #got then
            at_m = got[2 * m]
          else
            at_m = redis.call('ZREVRANGE', key, m - 1, m - 1, 'WITHSCORES')[2]
          end
          local reopen = tonumber(at_m) + w
          if worst == nil or reopen > worst[6] then
            worst = {now, 0, scope, j, c, reopen}
          end
        end
      end
    end
    check(skey, sgot, swhole, first, ns, 1)
    check(ckey, cgot, cwhole, capfirst, nc, 2)
    if worst then
      return worst
    end
  end

  -- Record; the trim to the newest K bounds memory even under forced admissions.
  -- The scene window evicts its oldest members, never the one just added: when
  -- several share its millisecond, equal scores sort by member, a hash, and the
  -- newest admission must stay a duplicate. (The cap window's members are only
  -- counted, so any of equal score may go.)
  local margin = 1000
  local scard = #sgot / 2 + redis.call('ZADD', skey, now, id)
  if not swhole then
    redis.call('ZREMRANGEBYRANK', skey, 0, -(sk + 1))
  elseif scard > sk then
    local victims = {}
    for i = 2 * (sk - 1) + 1, #sgot, 2 do
      if sgot[i] ~= id then victims[#victims + 1] = sgot[i] end
    end
    if #victims > 0 then redis.call('ZREM', skey, unpack(victims)) end
  end
  redis.call('PEXPIRE', skey, sw + margin)
  if nc > 0 then
    local ccard = #cgot / 2 + redis.call('ZADD', ckey, now, id)
    if ccard > ck or not cwhole or force then redis.call('ZREMRANGEBYRANK', ckey, 0, -(ck + 1)) end
    redis.call('PEXPIRE', ckey, cw + margin)
  end
  return {now, 1}
end

local out, a = {}, 1
for m = 1, #KEYS / 2 do
  out[m] = decide(KEYS[2 * m - 1], KEYS[2 * m], a)
  a = a + 4 + 2 * (tonumber(ARGV[a + 2]) + tonumber(ARGV[a + 3]))
end
return out
