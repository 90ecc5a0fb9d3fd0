package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/httpapi"
)

// received is how many messages the gates have decided so far (the
// summary's received counter, shared by every gate), or -1 when g does not
// answer.
func (g *gateProc) received() int64 {
	code, body, err := g.get("/v1/reports/summary")
	if err != nil || code != 200 {
		return -1
	}
	var sum httpapi.Summary
	if err := json.Unmarshal(body, &sum); err != nil {
		return -1
	}
	return sum.Total.Received
}

// killPoints draws n points at random from the middle of n+1 equal bands of
// total, so that every kill lands mid-stream and the last gate still has
// work to finish.
func killPoints(rng *rand.Rand, n, total int) []int64 {
	band := total / (n + 1)
	out := make([]int64, n)
	for k := range out {
		out[k] = int64(k*band + band/10 + rng.IntN(max(1, band*8/10)))
	}
	return out
}

// publishInBackground publishes msgs while the scenario goes on; wait
// returns the publisher's error.
func (s *stack) publishInBackground(msgs []message) (wait func() error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	done := make(chan error, 1)
	go func() { done <- s.bus.publish(ctx, msgs, nil) }()
	s.t.Cleanup(cancel)
	return func() error { defer cancel(); return <-done }
}

// killAndRestart kills g with SIGKILL once kill says so, waits a moment,
// starts it again, and records how long it took to be ready and to decide
// again.
func (s *stack) killAndRestart(g *gateProc, at int64, watch *gateProc, rng *rand.Rand, tm *timing, label string) {
	s.t.Helper()
	waitUntil(s.t, 3*time.Minute, fmt.Sprintf("%d messages decided before %s", at, label), func() bool { return watch.received() >= at })
	g.kill()
	time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
	t0 := time.Now()
	g.start()
	ready := time.Since(t0)
	base := g.received()
	waitUntil(s.t, time.Minute, "deciding again after "+label, func() bool { return g.received() > base })
	tm.add(fmt.Sprintf("%s at %d decided: ready in %s, deciding again in", label, at, ready.Round(10*time.Millisecond)), time.Since(t0))
}

// TestGateKilledMidStream publishes 20,000 messages to 2,000 recipients over
// four scenes and kills the gate with SIGKILL at random points (3 times by
// default), restarting it each time. Every message ends with exactly one
// outcome, and no recipient gets more than the rules allow.
func TestGateKilledMidStream(t *testing.T) {
	sc := scaleFor(t, 20000, 2000, 3)
	rng := sc.rng()
	redis := startRedis(t)
	s := newStack(t, stackOptions{RedisURL: redis.url(), Rules: standardModel})
	g := s.startGate(nil)
	msgs := workload(rng, sc.Messages, sc.Recipients, standardMix, 97)
	wait := s.publishInBackground(msgs)
	var tm timing
	for k, at := range killPoints(rng, sc.Kills, len(msgs)) {
		s.killAndRestart(g, at, g, rng, &tm, fmt.Sprintf("kill %d", k+1))
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	tm.add("drained after the last restart in", s.awaitDrained(3*time.Minute))
	r := s.check(msgs, standardModel, g)
	report(t, "gate kill -9", r, tm)
}
