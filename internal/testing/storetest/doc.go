// Package storetest is the conformance suite every gate.WindowStore must
// pass, so that the in-process store and the Redis store keep one meaning:
// sliding windows, calendar limits (day and week, in a zone, across
// daylight-saving days), rate (GCRA) limits atomic with the others, dry
// runs, the tightest limit of an admission, several limits, recipient caps,
// Force, duplicates, Forget, batch order, expiry, bounded memory,
// concurrency and the store's own clock.
//
// A store's own test calls Run with a Harness that opens a fresh store per
// test and moves its clock (a real sleep for Redis, a fake clock in
// process). On a real clock its tests sleep about eight seconds in all, but
// they run in parallel, so a run takes under three. A calendar case that
// cannot set the store's clock computes what it expects from the store's
// replies, and runs again if its decisions straddle a period boundary.
//
// It imports the standard library, internal/gate and
// internal/testing/testenv, and is imported only by tests.
package storetest
