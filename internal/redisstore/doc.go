// Package redisstore is the gate.WindowStore over Redis, shared by every gate
// process so that together they never admit more than a limit allows.
//
// Each decision is one Lua script (admit.lua) run on the Redis clock (TIME),
// so check and record are atomic and hosts with skewed clocks agree. A batch
// is one pipelined round trip of EVALSHA calls; the script is loaded lazily
// and again whenever Redis answers NOSCRIPT (restart, failover, SCRIPT FLUSH).
//
// Key layout: every window, cap, rate limit and scene tag of a recipient is
// one sorted set, <prefix>:{<recipient>} (admit.lua lists its members), so a
// decision reads one key in one call and an admission writes it in one
// ZADD. A scene's entries carry a tag the key gives the scene (never a hash
// of its name, which two scenes could share). Entries hold the admission
// time in Unix milliseconds (6 bytes), then the first 7 bytes of the SHA-256
// of the message id; every score is 0, so a decision reads the key without
// WITHSCORES. A '}' or '%' in a recipient is percent-escaped so that no two
// recipients share a key. A window keeps at most the largest Max of its
// limits; the key expires after its longest window, calendar period or TAT,
// plus a margin (1 s to 1 h) that lets most admissions skip PEXPIREAT.
//
// The layout before it kept a key per window, all with the same hash tag:
//
//	<prefix>:{<recipient>}:s:<scene>   sorted set: the scene window
//	<prefix>:{<recipient>}:c           sorted set: the recipient cap window
//	<prefix>:{<recipient>}:g:<scene>   integer: the TAT (Unix ms) of the scene's rate limit
//	<prefix>:{<recipient>}:gc          integer: the TAT of the recipient caps' rate limit
//
// With Options.LegacyKeys the script decides on the union of both layouts
// and writes both, for a rolling upgrade (testdata/admit_before.lua is the
// old gates' script, which TestUpgradeUnderTraffic runs beside it).
//
// A rate limit ({rate: 1/10m, burst: 3}) is a GCRA decided in the same
// script call as the message's windows: its TAT is a member of the
// recipient's key, written only when every limit admits the message. A
// scene whose only limit is a rate keeps its ids for burst intervals, to
// know a duplicate. Forget runs forget.lua, which also gives the slot back.
//
// Calendar limits (a day or an ISO week in the request's zone) are decided on
// the Redis clock too. Lua has no time zones, so the adapter computes two
// consecutive periods from the gate's clock (the one holding it less an
// hour, and the next) and the script counts in whichever holds TIME. Clocks
// that disagree by about a period fail the request as unavailable.
//
// It imports the standard library, internal/gate and go-redis only; it never
// imports another adapter.
package redisstore
