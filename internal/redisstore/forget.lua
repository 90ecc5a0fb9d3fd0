-- forget.lua takes one message out of its windows and gives back the slot its admission
-- took from its rate limits: the undo of an admission. The recipient's key is laid out
-- as admit.lua says.
--
-- KEYS  the recipient's key; with legacy then the old layout's scene window, cap window,
--       and the scene's and the caps' TAT keys, each only when its interval is sent
-- ARGV  member (hash(id)), '#' .. scene, the emission interval (ms) of the scene's rate
--       limit, or 0, then the caps', then legacy (1) or not (0)
--
-- The TATs move back one interval only when the scene window still held the member: an
-- id that was never admitted, or was forgotten before, gives back nothing. A TAT that
-- falls to the server's now or before is removed, as if it had expired.
--
-- Returns 1 when the member was taken out of the scene window, else 0.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local key, id, legacy = KEYS[1], ARGV[1], ARGV[5] == '1'
local CAP = string.char(128)
local stag
local t = redis.call('ZSCORE', key, ARGV[2])
if t then
  t = tonumber(t)
  if t < 127 then stag = string.char(128 + t) else stag = string.char(255, math.floor(t / 256), t % 256) end
end
local counted = 0
if stag then counted = redis.call('ZREM', key, stag .. id) end
redis.call('ZREM', key, CAP .. id)
if legacy then
  counted = math.max(counted, redis.call('ZREM', KEYS[2], id))
  redis.call('ZREM', KEYS[3], id)
end
if counted == 0 then
  return 0
end
local k = 4
for i = 3, 4 do
  local every = tonumber(ARGV[i])
  if every > 0 then
    local m = 'g' .. CAP
    if i == 3 then m = stag and 'g' .. stag end
    local v = m and redis.call('ZSCORE', key, m)
    if v then
      local tat = tonumber(v) - every
      if tat <= now then
        redis.call('ZREM', key, m)
      else
        redis.call('ZADD', key, string.format('%d', tat), m)
      end
    end
    if legacy then
      v = redis.call('GET', KEYS[k])
      if v then
        local tat = tonumber(v) - every
        if tat <= now then
          redis.call('DEL', KEYS[k])
        else
          redis.call('SET', KEYS[k], string.format('%d', tat), 'PX', string.format('%d', tat - now + 1000))
        end
      end
      k = k + 1
    end
  end
end
return 1
