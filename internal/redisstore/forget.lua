-- forget.lua gives back what one message's admission took, and nothing else: the undo of
-- an admission. The recipient's key is laid out as admit.lua says.
--
-- KEYS  the recipient's key; with legacy then the old layout's scene window, cap window,
--       and the scene's and the caps' TAT keys, each only when its interval is sent
-- ARGV  member (hash(id)), '#' .. scene, the emission interval (ms) of the scene's rate
--       limit, or 0, then the caps', then legacy (1) or not (0)
--
-- A plain admission took its entries and one interval of each rate limit: its entries
-- leave, and the TATs move back one interval. A forced one past a full limit took what
-- its entries' undo says (see admit.lua): the TATs move back as far as it moved them, and
-- an entry that stands where one it pushed out of a full window stood stays, since it
-- holds that one's place; its undo is rewritten to say it has nothing more to give back.
-- The TATs move only when the scene window still held the member: an id that was never
-- admitted, or was forgotten before, gives back nothing. A TAT that falls to the
-- server's now or before is removed, as if it had expired.
--
-- Returns 1 when the scene window held the member, else 0.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local key, id, legacy = KEYS[1], ARGV[1], ARGV[5] == '1'
local byte, char, sub, floor = string.byte, string.char, string.sub, math.floor
local CAP = char(128)
local function ms(x)
  local s = ''
  for _ = 1, 6 do
    s = char(x % 256) .. s
    x = floor(x / 256)
  end
  return s
end
local function msat(m, p)
  local a, b, c, d, e, f = byte(m, p, p + 5)
  return ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
end

-- Read the key whole: the scene's tag, then its entries and the caps' of the id, and the
-- TAT members.
local got = redis.call('ZRANGE', key, 0, -1)
local scene = sub(ARGV[2], 2)
local stag
for _, m in ipairs(got) do
  if byte(m, 1) ~= 35 then break end
  local v, p = byte(m, 2) - 128, 3
  if v == 127 then v, p = byte(m, 3) * 256 + byte(m, 4), 5 end
  if sub(m, p) == scene then
    if v < 127 then stag = char(128 + v) else stag = char(255, floor(v / 256), v % 256) end
  end
end
local HASH = #id
local gone, tats = {}, {}
local counted, skept, ckept = 0, false, false
-- back[i] is how far the TAT of ARGV[i]'s rate limit moves back, when not one interval.
local back = {}
for _, m in ipairs(got) do
  local b = byte(m, 1)
  if b == 128 and sub(m, 8, 7 + HASH) == id then
    -- A cap entry with an undo holds the place of one it pushed out.
    if #m == 7 + HASH then gone[#gone + 1] = m else ckept = true end
  elseif stag and b >= 129 and sub(m, 1, #stag) == stag and sub(m, #stag + 7, #stag + 6 + HASH) == id then
    counted = 1
    local base = #stag + 6 + HASH
    if #m == base then
      gone[#gone + 1] = m
    else
      local f, p = byte(m, base + 1), base + 2
      if f % 4 >= 2 then back[3], p = msat(m, p), p + 6 end
      if f % 8 >= 4 then back[4] = msat(m, p) end
      if f % 2 == 1 then
        skept = true
        local spent = sub(m, 1, base) .. char(7) .. ms(0) .. ms(0)
        if spent ~= m then
          gone[#gone + 1] = m
          redis.call('ZADD', key, '0', spent)
        end
      else
        gone[#gone + 1] = m
      end
    end
  elseif b == 103 then
    tats[sub(m, 1, #m - 6)] = m
  end
end
if #gone > 0 then redis.call('ZREM', key, unpack(gone)) end
if legacy then
  if not skept then counted = math.max(counted, redis.call('ZREM', KEYS[2], id)) end
  if not ckept then redis.call('ZREM', KEYS[3], id) end
end
if counted == 0 then
  return 0
end
local k = 4
for i = 3, 4 do
  local every = tonumber(ARGV[i])
  if every > 0 then
    -- Never more than one interval of the rules in force, as a plain admission gets back.
    local by = math.min(back[i] or every, every)
    local g = 'g' .. CAP
    if i == 3 then g = stag and 'g' .. stag end
    local m = g and tats[g]
    if m and by > 0 then
      local tat = msat(m, #g + 1) - by
      redis.call('ZREM', key, m)
      if tat > now then
        redis.call('ZADD', key, '0', g .. ms(tat))
      end
    end
    if legacy then
      local v = redis.call('GET', KEYS[k])
      if v and by > 0 then
        local tat = tonumber(v) - by
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
