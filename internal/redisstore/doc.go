// Package redisstore is the gate.WindowStore over Redis, shared by every gate
// process so that together they never admit more than a limit allows.
//
// Each decision is one Lua script (admit.lua) run on the Redis clock (TIME),
// so check and record are atomic and hosts with skewed clocks agree. A batch
// is one pipelined round trip of EVALSHA calls; the script is loaded lazily
// and again whenever Redis answers NOSCRIPT (restart, failover, SCRIPT FLUSH).
//
// Key layout, hash-tagged by recipient so every key of a decision shares a
// Redis Cluster slot:
//
//	<prefix>:{<recipient>}:s:<scene>   sorted set: the scene window
//	<prefix>:{<recipient>}:c           sorted set: the recipient cap window
//	<prefix>:{<recipient>}:g:<scene>   integer: the TAT (Unix ms) of the scene's rate limit
//	<prefix>:{<recipient>}:gc          integer: the TAT of the recipient caps' rate limit
//
// Members are the first 7 bytes of the SHA-256 of message ids (short members
// keep a (recipient, scene) of {1/h, 3/day} under 250 bytes; see member),
// scores the admission time in Unix milliseconds. A '}' or '%' in a recipient
// is percent-escaped so that no two recipients share a key. A set holds at
// most the largest Max of its limits and expires one second after its longest
// window, or after the end of its latest calendar period; members older than
// every window and period are not removed one by one but pushed out by newer
// ones or dropped with the key, and never counted.
//
// A rate limit ({rate: 1/10m, burst: 3}) is a GCRA decided in the same
// script call as the message's windows: its TAT key is read, and written
// only when every limit admits the message. Its key exists only for a
// message that has one, so other messages pass the script the two keys, and
// make the calls, they did before; it expires one second after its TAT. A
// scene whose only limit is a rate keeps its ids for burst intervals, to
// know a duplicate. Forget runs forget.lua for a message with a rate limit,
// to give the slot back.
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
