package main

import (
	"log/slog"
	"time"
)

// gateClock is the clock of everything gate serve decides on: the pipeline,
// the releaser, and the window store's calendar periods (the in-process
// store's whole clock). It is the real clock unless GATE_TEST_CLOCK is set;
// then it starts at that instant now and runs on in real time, so that the
// tests can put a gate on a day the real clock will not reach soon (a DST
// change, say). Redis decides on its own TIME: a gate on Redis with a
// shifted clock needs a Redis shifted alike (the tests run one under
// libfaketime), or the store refuses its calendar requests as clock skew.
func gateClock(c *config, log *slog.Logger) func() time.Time {
	if c.TestClock.IsZero() {
		return time.Now
	}
	start, began := c.TestClock, time.Now()
	log.Warn("for tests: the gate's clock is shifted (GATE_TEST_CLOCK); never set it in production",
		"starts_at", start.Format(time.RFC3339Nano), "shift", start.Sub(began).Round(time.Second).String())
	return func() time.Time { return start.Add(time.Since(began)) }
}
