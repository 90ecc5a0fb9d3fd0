// Package inmem is the gate.WindowStore that lives in the gate process: the
// embedded default when no Redis is configured, and the fast twin that the
// Redis store is checked against (both pass internal/testing/storetest).
//
// Its semantics are those of internal/redisstore to the millisecond: the same
// sliding windows and calendar periods, duplicates, trimming to the largest
// Max, expiry one second after the longest window or the end of the calendar
// period, rate (GCRA) limits with their theoretical arrival times, dry runs
// and the tightest limit of an admission, and no write on rejection. Its clock is injectable, so tests move
// time instead of sleeping (and reach daylight-saving days). Calendar periods
// are those of gate.Limit.Period on that clock, in AdmitRequest.Zone. It counts only what
// this process admitted: several gate processes need the Redis store.
//
// It imports the standard library and internal/gate only.
package inmem
