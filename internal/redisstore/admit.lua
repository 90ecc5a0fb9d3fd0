-- admit.lua decides one message: one atomic check-and-record on the server's clock.
--
-- KEYS[1]  scene window  <prefix>:{<recipient>}:s:<scene>  ZSET member=id score=ms
-- KEYS[2]  cap window    <prefix>:{<recipient>}:c          ZSET member=id score=ms
-- ARGV     id, force (0|1), #limits, #caps, then (window_ms, max) pairs: limits, then caps
--
-- Returns {now_ms, 1} admitted, {now_ms, 2} duplicate, or
-- {now_ms, 0, scope (1 scene, 2 recipient), limit index (0-based), count, next_allowed_ms}.
--
-- Cost: a fixed number of O(log n) commands per limit; n is bounded by the
-- largest max, because every ZADD is followed by a trim to the newest K.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local skey, ckey, id = KEYS[1], KEYS[2], ARGV[1]
local force = ARGV[2] == '1'
local ns, nc = tonumber(ARGV[3]), tonumber(ARGV[4])
if ns + nc == 0 then
  return {now, 1} -- nothing limits the message, so nothing is kept
end
local first, capfirst = 5, 5 + 2 * ns

-- span returns the longest window and the largest max of n pairs from ARGV[at].
local function span(at, n)
  local w, k = 0, 0
  for i = at, at + 2 * (n - 1), 2 do
    w = math.max(w, tonumber(ARGV[i]))
    k = math.max(k, tonumber(ARGV[i + 1]))
  end
  return w, k
end

-- A scene without limits still keeps its ids (for duplicates) as long as the caps need them.
local sw, sk
if ns > 0 then sw, sk = span(first, ns) else sw, sk = span(capfirst, nc) end
local cw, ck = 0, 0
redis.call('ZREMRANGEBYSCORE', skey, '-inf', now - sw)
if nc > 0 then
  cw, ck = span(capfirst, nc)
  redis.call('ZREMRANGEBYSCORE', ckey, '-inf', now - cw)
end

if redis.call('ZSCORE', skey, id) then
  return {now, 2}
end

if not force then
  -- Check every limit; keep the one that reopens last.
  local worst
  local function check(key, at, n, scope)
    for j = 0, n - 1 do
      local w, m = tonumber(ARGV[at + 2 * j]), tonumber(ARGV[at + 2 * j + 1])
      local c = redis.call('ZCOUNT', key, '(' .. (now - w), '+inf')
      if c >= m then
        -- The window reopens when the m-th newest member leaves it.
        local r = redis.call('ZREVRANGE', key, m - 1, m - 1, 'WITHSCORES')
        local reopen = tonumber(r[2]) + w
        if worst == nil or reopen > worst[6] then
          worst = {now, 0, scope, j, c, reopen}
        end
      end
    end
  end
  check(skey, first, ns, 1)
  check(ckey, capfirst, nc, 2)
  if worst then
    return worst
  end
end

-- Record; the trim to the newest K bounds memory even under forced admissions.
local margin = 1000
redis.call('ZADD', skey, now, id)
redis.call('ZREMRANGEBYRANK', skey, 0, -(sk + 1))
redis.call('PEXPIRE', skey, sw + margin)
if nc > 0 then
  redis.call('ZADD', ckey, now, id)
  redis.call('ZREMRANGEBYRANK', ckey, 0, -(ck + 1))
  redis.call('PEXPIRE', ckey, cw + margin)
end
return {now, 1}
