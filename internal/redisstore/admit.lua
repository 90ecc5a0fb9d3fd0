-- admit.lua decides a run of messages in order, each one atomic check-and-record on the
-- server's clock (one TIME per call: the run shares its millisecond).
--
-- Every window, cap, rate-limit state and scene tag of a recipient lives in one sorted
-- set, <prefix>:{<recipient>}. Every score is 0: a member carries its own value, so the
-- key sorts by member and is read without WITHSCORES (Redis would format each score as a
-- double, and Lua parse it back). Its members, by their first byte:
--   '#' .. tag(t) .. scene   scene's tag t (1, 2, ...), given by the first admission of
--                            the scene to this key, never reused in it
--   'e' .. ms(x)             the key's expiry x
--   'g' .. tag(t) .. ms(x)   x the TAT of scene t's rate limit; 'g' \128 .. ms(x) the caps'
--   \128 .. ms(x) .. hash(id) an entry of the recipient cap window, admitted at x
--   tag(t) .. ms(x) .. hash(id) an entry of the scene window of tag t, admitted at x
--   either entry .. undo     a forced admission that took less than a plain one (below)
--   ('w' is kept for warning thresholds: see docs/architecture.md.)
-- tag(t) is one byte 128 + t for t < 127, else 255 and two bytes of t: no tag is the
-- prefix of another, so no two scenes' entries, or a scene's and the caps', can be
-- taken for each other, whatever their names. ms(x) is x (Unix ms) in 6 bytes, big-endian:
-- a window's entries sort by time, and two admissions of one millisecond differ by their
-- ids. The key is read whole, in one ZRANGE (the tags come first), and an admission writes
-- one ZADD, plus a ZREM only when entries leave or a TAT or the expiry moves (its old
-- member goes), and a PEXPIREAT only when the stored expiry does not already cover what
-- the message needs.
--
-- ARGV starts with the call's limit sets: their number, then per set #limits, #caps and
-- its (window, max) pairs: limits, then caps. Then, per message in order, its KEYS and
-- its ARGV:
-- KEYS  the recipient's key; with legacy (flag 128) then the keys of the layout before
--       it, which it decides on too and writes alike: scene window, cap window, and the
--       scene's and caps' TAT keys, each only when there is that rate limit
-- ARGV  member (hash(id)), flags, its limit set (1-based), '#' .. scene, then #periods
--       triples (start_ms, end_ms, end2_ms), then the emission interval (ms) of the
--       scene's rate limit and of the caps', each only when there is one
-- The messages of a call share a few limit sets (one per scene, say), sent and parsed
-- once: each argument costs Redis and Lua about 0.1 µs.
-- flags is force (0|1) + 2 * #periods + 8 * (scene rate) + 16 * (cap rate) + 32 * (dry run)
-- + 64 * (want tightest) + 128 * (legacy).
-- A rolling limit's window is in ms; a calendar limit's is -k, naming triple k: two
-- consecutive calendar periods [start, end) and [end, end2) that the gate computed from
-- its own clock, since Lua knows no time zones. The script counts in whichever holds its
-- own now. A rate limit's window is 0 and its max the burst.
--
-- A rate limit is a GCRA: with interval T, burst B and TAT = max(stored TAT, now), a
-- message is admitted when TAT - now <= (B - 1) * T, and its admission sets the TAT to
-- TAT + T (never past now + B * T: a forced admission holds the limit shut for one
-- interval at most). A rejected message reopens at TAT - (B - 1) * T; its count is the
-- slots in use, ceil((TAT - now) / T).
--
-- What an admission took, forget.lua gives back, and nothing else. A plain admission took
-- its entries and one interval of each rate limit. A forced one past a full limit may have
-- taken less, and says so in its entries' undo, written only then: after the scene entry,
-- one byte of flags, 1 (its entry stands where an entry it pushed out of a full window
-- stood: the window keeps its newest K, so the one pushed out still counted), 2 (the
-- scene's TAT moved by less than an interval: ms(that much) follows), 4 (the same of the
-- caps' TAT, after the scene's); after the cap entry, the byte 1 alone. An unforced
-- admission never pushes out an entry a window counts (it passed the limit that counts
-- the most) and always moves a TAT one interval, so it writes no undo.
--
-- Returns one reply per message: {now_ms, 1} admitted, or with want tightest {now_ms, 1,
-- scope, limit index, count}, naming the limit with the fewest slots left after it and
-- its count with this message ({now_ms, 1} still when nothing limits the message),
-- {now_ms, 2} duplicate, {now_ms, 0, scope (1 scene, 2 recipient), limit index
-- (0-based), count, next_allowed_ms}, or {now_ms, 3} when now lies in neither period of
-- a triple: the clocks of Redis and the gate disagree by about a period, and nothing of
-- the message was counted. A dry run decides alike and writes nothing.
--
-- On Redis Cluster a call holds one message (its keys share a slot); on one Redis it
-- holds a run of them, which saves the per-call cost of EVALSHA and TIME.
--
-- Memory: a window keeps its newest K entries (K its largest max), those older than
-- every window and period of the message leave when the scene is next admitted, and
-- the key expires when every window, period and TAT it holds has passed, plus a
-- margin: one second, or a sixteenth of the need up to an hour, which lets the
-- admissions in that margin skip the EXPIREAT. Only admissions write; a rejection
-- writes nothing.

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
-- Numbers go to redis.call as integer strings, formatted once: Lua would
-- format each with %.14g, the costly floating-point path of printf.
local nowstr = string.format('%d', now)
local byte, char, sub = string.byte, string.char, string.sub
local floor = math.floor
-- ms is x (ms) in 6 bytes, big-endian; msat reads them from byte p of m.
local function ms(x)
  local a = floor(x / 1099511627776)
  x = x - a * 1099511627776
  local b = floor(x / 4294967296)
  x = x - b * 4294967296
  local c = floor(x / 16777216)
  x = x - c * 16777216
  local d = floor(x / 65536)
  x = x - d * 65536
  local e = floor(x / 256)
  return char(a, b, c, d, e, x - e * 256)
end
local function msat(m, p)
  local a, b, c, d, e, f = byte(m, p, p + 5)
  return ((((a * 256 + b) * 256 + c) * 256 + d) * 256 + e) * 256 + f
end
local nowms = ms(now)
-- The replies that carry no more than now are the same table every time, and T (the
-- times of the entries of the message in hand, by their index in its read) is one table
-- for the call: each message writes the indices it reads.
local ADMITTED, DUPLICATE, SKEWED, T = {now, 1}, {now, 2}, {now, 3}, {}
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

local CAP = char(128)
-- HASH is the length of hash(id) (every member is one, the first message's as good as
-- any), which ends an entry unless an undo follows; PUSHED is the undo of a cap entry.
local HASH, PUSHED = #(ARGV[a] or ''), char(1)
-- tags[t] is tag(t), gtags[t] its TAT's member, each made once per call.
local tags, gtags = {}, {}
local function tag(t)
  local s = tags[t]
  if s == nil then
    if t < 127 then s = char(128 + t) else s = char(255, math.floor(t / 256), t % 256) end
    tags[t], gtags[t] = s, 'g' .. s
  end
  return s
end
-- Flags, split once per value: {force, #periods, scene rate, cap rate, dry, want, legacy}.
local fl = {}
local function flagsOf(f)
  local v = fl[f]
  if v == nil then
    local function bit(b) return math.floor(f / b) % 2 == 1 end
    v = {f % 2 == 1, math.floor(f / 2) % 4, bit(8), bit(16), bit(32), bit(64), bit(128)}
    fl[f] = v
  end
  return v
end

-- span returns, over the n pairs from P[at], the earliest score any of them counts, how
-- long past now one of them still needs its members (ms), the largest max, and the
-- earliest score a window (not a rate limit, which counts no members) counts. per holds
-- the message's calendar periods, rt the set's rate limit.
local function span(at, n, per, rt)
  local from, keep, k, wfrom = now + 1, 0, 0, now + 1
  for i = at, at + 2 * (n - 1), 2 do
    local w, m = P[i], P[i + 1]
    if w == 0 then
      local b = m * rt.every
      from, keep = math.min(from, now - b + 1), math.max(keep, b)
    elseif w < 0 then
      local p = per[-w]
      from, keep, wfrom = math.min(from, p[1]), math.max(keep, p[2] - now), math.min(wfrom, p[1])
    else
      from, keep, wfrom = math.min(from, now - w + 1), math.max(keep, w), math.min(wfrom, now - w + 1)
    end
    k = math.max(k, m)
  end
  return from, keep, k, wfrom
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

-- merge adds the members of an old-layout window (key) to the window w (indices of got,
-- their times in T), as the members they have in the recipient's key (pre .. ms(score) ..
-- hash), once per hash: appended to got, w kept in ascending order of time. It returns
-- the old window as read, ascending.
local function merge(got, T, w, key, pre)
  local old = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
  if #old == 0 then return old end
  local seen = {}
  -- The hash alone: an entry may carry an undo after it.
  for i = 1, #w do seen[sub(got[w[i]], #pre + 7, #pre + 6 + HASH)] = true end
  for i = 1, #old, 2 do
    local h = old[i]
    if not seen[h] then
      local x = tonumber(old[i + 1])
      got[#got + 1] = pre .. ms(x) .. h
      T[#got] = x
      w[#w + 1] = #got
    end
  end
  table.sort(w, function(x, y) return T[x] < T[y] end)
  return old
end

-- legacyTAT reads an old-layout TAT key into rt.tat, keeping the later of the two.
local function legacyTAT(rt)
  local v = redis.call('GET', rt.old)
  if v then rt.tat = math.max(rt.tat, tonumber(v)) end
end

-- The decision in hand: its limits' worst (the one that reopens last) and tight (fewest
-- slots left after the message: left, scope, index, count with it).
local worst, tight

-- check checks the cnt limits from P[at] against the window w (indices of T, the
-- entries' times, ascending), and rt, the rate limit among them.
local function check(T, w, at, cnt, scope, rt, per, want)
  local top = #w
  for j = 0, cnt - 1 do
    local win, m = P[at + 2 * j], P[at + 2 * j + 1]
    local c, reopen
    if win == 0 then
      -- A rate limit: the slots in use are the intervals up to the TAT; it admits
      -- while fewer than the burst are, and reopens with TAT (burst - 1) intervals away.
      rt.burst = m
      c = math.ceil((rt.tat - now) / rt.every)
      reopen = rt.tat - (m - 1) * rt.every
    else
      -- A rolling limit counts the scores after now - win; a calendar limit those of
      -- its period, and reopens when the period ends.
      local from = now - win + 1
      if win < 0 then from, reopen = per[-win][1], per[-win][2] end
      c = 0
      while c < top and T[w[top - c]] >= from do c = c + 1 end
      if c >= m and reopen == nil then
        -- The window reopens when the m-th newest entry leaves it.
        reopen = T[w[top - m + 1]] + win
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

-- trim adds to gone the entries of w (indices of got, their times in T) that leave it
-- when new joins: all but the newest k - 1 others, and those older than from, which no
-- limit counts. It returns whether one that leaves is still counted by a window (its time
-- at or after wfrom): only a forced admission pushes such an entry out.
local function trim(got, T, w, from, k, new, gone, wfrom)
  local kept, pushed = 1, false
  for j = #w, 1, -1 do
    local m = got[w[j]]
    if m ~= new then
      local x = T[w[j]]
      if kept < k and x >= from then
        kept = kept + 1
      else
        gone[#gone + 1] = m
        pushed = pushed or x >= wfrom
      end
    end
  end
  return pushed
end

-- advance records an admission in the rate limit rt: its TAT moves one interval, but
-- never more than a burst ahead of now, nor back (a TAT further ahead, from a longer
-- interval of rules since changed, stays). It returns how far the TAT moved.
local function advance(rt)
  local was = rt.tat
  rt.tat = math.max(was, math.min(was + rt.every, now + rt.burst * rt.every))
  return rt.tat - was
end

-- undo is what a forced admission appends to its scene entry when it took less than a
-- plain one (see the top), or '' when it took as much: pushed, whether its entry took the
-- place of one a window still counted, and how far it moved the TATs of srt and crt.
local function undo(pushed, srt, ds, crt, dc)
  local f, s = pushed and 1 or 0, ''
  if srt and ds < srt.every then f, s = f + 2, ms(ds) end
  if crt and dc < crt.every then f, s = f + 4, s .. ms(dc) end
  if f == 0 then return '' end
  return char(f) .. s
end

-- put adds to the ZADD add a value member (pre .. ms(x)), and to gone was, the member it
-- replaces.
local function put(add, gone, pre, x, was)
  local m = pre .. ms(x)
  if m ~= was then
    add[#add + 1], add[#add + 2] = '0', m
    if was then gone[#gone + 1] = was end
  end
end

-- old writes an admission into an old-layout window as its own script did
-- (testdata/admit_before.lua): was is the window as read, ascending.
local function old(okey, id, was, k, keepms)
  redis.call('ZADD', okey, nowstr, id)
  local victims, kept = {}, 1
  for j = #was - 1, 1, -2 do
    if was[j] ~= id then
      if kept < k then kept = kept + 1 else victims[#victims + 1] = was[j] end
    end
  end
  if #victims > 0 then redis.call('ZREM', okey, unpack(victims)) end
  redis.call('PEXPIRE', okey, string.format('%d', keepms + 1000))
end

-- decide decides the message whose KEYS start at ki and whose ARGV starts at a.
local function decide(ki, a, f)
  local force, nb, srate, crate, dry, want, legacy = f[1], f[2], f[3], f[4], f[5], f[6], f[7]
  local id, set, def = ARGV[a], sets[num(ARGV[a + 2])], ARGV[a + 3]
  local ns, nc = set[1], set[2]
  if ns + nc == 0 then
    return ADMITTED -- nothing limits the message, so nothing is kept
  end
  local key = KEYS[ki]
  local first, capfirst = set[3], set[3] + 2 * ns
  local per
  if nb > 0 then
    per = periods(a + 4, nb)
    if per == nil then return SKEWED end
  end
  local srt, crt
  if srate or crate then
    local ri = a + 4 + 3 * nb
    if srate then srt, ri = {every = num(ARGV[ri])}, ri + 1 end
    if crate then crt = {every = num(ARGV[ri])} end
  end

  -- Read the key whole. The tags come first: find this scene's, or the next free one.
  local got = redis.call('ZRANGE', key, 0, -1)
  local n, i, t, top = #got, 1, nil, 0
  local scene = sub(def, 2)
  local sl = #scene
  while i <= n and byte(got[i], 1) == 35 do
    local m = got[i]
    local v, p = byte(m, 2) - 128, 3
    if v == 127 then v, p = byte(m, 3) * 256 + byte(m, 4), 5 end
    if t == nil and #m == p - 1 + sl and sub(m, p) == scene then t = v end
    if v > top then top = v end
    i = i + 1
  end
  local newtag = t == nil
  if newtag then t = top + 1 end
  local stag = tag(t)
  local sb, long, sp = byte(stag, 1), t >= 127, #stag + 1
  local gt = gtags[t]
  local gl = #gt
  -- S and C list the entries of this scene and of the caps, by their member's index in
  -- got, T their times; then the TATs and the stored expiry, with their members.
  local S, C, stored, emember = {}, {}, 0, nil
  for j = i, n do
    local m = got[j]
    local b = byte(m, 1)
    if b == sb and (not long or sub(m, 1, 3) == stag) then
      S[#S + 1] = j
      T[j] = msat(m, sp)
    elseif b == 128 then
      C[#C + 1] = j
      T[j] = msat(m, 2)
    elseif b == 103 then
      if srt and sub(m, 1, gl) == gt then srt.stored, srt.member = msat(m, gl + 1), m end
      if crt and byte(m, 2) == 128 then crt.stored, crt.member = msat(m, 3), m end
    elseif b == 101 then
      stored, emember = msat(m, 2), m
    end
  end

  -- The old layout's keys, in legacy mode.
  local oldS, oldC
  if legacy then
    local ok = ki + 1
    oldS, oldC = KEYS[ok], KEYS[ok + 1]
    ok = ok + 2
    if srt then srt.old, ok = KEYS[ok], ok + 1 end
    if crt then crt.old = KEYS[ok] end
  end

  -- A scene without limits still keeps its ids (for duplicates) as long as the caps need
  -- them; its window then counts none of them.
  local sfrom, skeep, sk, swfrom
  if ns > 0 then
    sfrom, skeep, sk, swfrom = span(first, ns, per, srt)
  else
    sfrom, skeep, sk = span(capfirst, nc, per, crt)
    swfrom = now + 1
  end
  local smember = stag .. nowms .. id
  local sold
  if legacy then sold = merge(got, T, S, oldS, stag) end
  local hp = sp + 6
  local he = hp + HASH - 1
  for j = #S, 1, -1 do
    local x = S[j]
    if T[x] < sfrom then break end
    if sub(got[x], hp, he) == id then return DUPLICATE end
  end

  if srt then
    srt.tat = math.max(srt.stored or now, now)
    if legacy then legacyTAT(srt) end
  end
  if crt then
    crt.tat = math.max(crt.stored or now, now)
    if legacy then legacyTAT(crt) end
  end
  -- The cap window is kept only for caps that count members (not a rate alone).
  local cwin = nc - (crate and 1 or 0) > 0
  local cfrom, ckeep, ck, cwfrom, cold
  if cwin then
    cfrom, ckeep, ck, cwfrom = span(capfirst, nc, per, crt)
    if legacy then cold = merge(got, T, C, oldC, CAP) end
  end

  worst, tight = nil, nil
  check(T, S, first, ns, 1, srt, per, want)
  check(T, C, capfirst, nc, 2, crt, per, want)
  if worst and not force then
    return worst
  end
  local reply = ADMITTED
  if want then reply = {now, 1, tight[2], tight[3], tight[4]} end
  if dry then
    return reply
  end

  -- Record, in one ZADD; entries that leave a window go in one ZREM.
  local add, gone = {'ZADD', key, '0', smember}, {}
  local spushed = trim(got, T, S, sfrom, sk, smember, gone, swfrom)
  local keep = skeep
  if cwin then
    local cmember = CAP .. nowms .. id
    if trim(got, T, C, cfrom, ck, cmember, gone, cwfrom) and force then cmember = cmember .. PUSHED end
    add[5], add[6] = '0', cmember
    if ckeep > keep then keep = ckeep end
  end
  if newtag then add[#add + 1], add[#add + 2] = '0', '#' .. stag .. scene end
  local ds, dc
  if srt then
    ds = advance(srt)
    put(add, gone, gt, srt.tat, srt.member)
    keep = math.max(keep, srt.tat - now)
  end
  if crt then
    dc = advance(crt)
    put(add, gone, 'g' .. CAP, crt.tat, crt.member)
    keep = math.max(keep, crt.tat - now)
  end
  if force then add[4] = smember .. undo(spushed, srt, ds, crt, dc) end
  -- The expiry grows only when the stored one falls short of what this message needs.
  local exp
  if stored < now + keep then
    exp = now + keep + math.max(1000, math.min(math.floor(keep / 16), 3600000))
    put(add, gone, 'e', exp, emember)
  end
  redis.call(unpack(add))
  if #gone > 0 then redis.call('ZREM', key, unpack(gone)) end
  if exp then redis.call('PEXPIREAT', key, string.format('%d', exp)) end

  if legacy then
    -- The old layout, written as its own script wrote it.
    old(oldS, id, sold, sk, skeep)
    if cwin then old(oldC, id, cold, ck, ckeep) end
    for _, rt in ipairs({srt or false, crt or false}) do
      if rt then redis.call('SET', rt.old, string.format('%d', rt.tat), 'PX', string.format('%d', rt.tat - now + 1000)) end
    end
  end
  return reply
end

local out, ki = {}, 1
while ki <= #KEYS do
  local f = flagsOf(num(ARGV[a + 1]))
  local nr = (f[3] and 1 or 0) + (f[4] and 1 or 0)
  out[#out + 1] = decide(ki, a, f)
  a = a + 4 + 3 * f[2] + nr
  ki = ki + 1
  if f[7] then ki = ki + 2 + nr end
end
return out
