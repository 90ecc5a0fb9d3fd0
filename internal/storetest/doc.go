// Package storetest is the conformance suite every gate.WindowStore must
// pass, so that the in-process store and the Redis store keep one meaning:
// sliding windows, several limits, recipient caps, Force, duplicates, batch
// order, expiry, bounded memory, concurrency and the store's own clock.
//
// A store's own test calls Run with a Harness that opens a fresh store per
// test and moves its clock (a real sleep for Redis, a fake clock in
// process). Run's tests are parallel and, on a real clock, sleep a little
// under two seconds in all.
//
// It imports the standard library, internal/gate and internal/testenv, and
// is imported only by tests.
package storetest
