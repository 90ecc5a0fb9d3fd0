-- forget.lua takes one message out of its windows and gives back the slot its admission
-- took from its rate limits: the undo of an admission, for a message with a rate limit
-- (Forget takes others out with two ZREMs, without a script).
--
-- KEYS  scene window, cap window, then the scene's TAT key and the caps' TAT key, each
--       only when its interval is sent
-- ARGV  member, the emission interval (ms) of the scene's rate limit, or 0, then the caps'
--
-- The TATs move back one interval only when the scene window still held the member: an
-- id that was never admitted, or was forgotten before, gives back nothing. A TAT that
-- falls to the server's now or before is deleted, as if it had expired.
--
-- Returns 1 when the member was taken out of the scene window, else 0.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local counted = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if counted == 0 then
  return 0
end
local k = 3
for i = 2, 3 do
  local every = tonumber(ARGV[i])
  if every > 0 then
    local v = redis.call('GET', KEYS[k])
    if v then
      local tat = tonumber(v) - every
      if tat <= now then
        redis.call('DEL', KEYS[k])
      else
        redis.call('SET', KEYS[k], tat, 'PX', tat - now + 1000)
      end
    end
    k = k + 1
  end
end
return 1
