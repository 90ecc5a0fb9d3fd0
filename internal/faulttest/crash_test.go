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

// killsMidStream publishes msgs in the background and, at each kill point,
// kills one of gates at random with SIGKILL and restarts it. It reports the
// recoveries and, after the last, the time to an empty GATE_IN.
func (s *stack) killsMidStream(gates []*gateProc, msgs []message, rng *rand.Rand, kills int) timing {
	s.t.Helper()
	wait := s.publishInBackground(msgs)
	var tm timing
	for k, at := range killPoints(rng, kills, len(msgs)) {
		i := rng.IntN(len(gates))
		watch := gates[(i+1)%len(gates)]
		s.killAndRestart(gates[i], at, watch, rng, &tm, fmt.Sprintf("kill %d (%s)", k+1, gates[i].name))
	}
	if err := wait(); err != nil {
		s.t.Fatal(err)
	}
	tm.add("drained after the last restart in", s.awaitDrained(3*time.Minute))
	return tm
}

// TestGateKilledMidStream publishes 20,000 messages to 2,000 recipients over
// four scenes and kills the gate with SIGKILL at random points (3 times by
// default), restarting it each time. Every message ends with exactly one
// outcome, and no recipient gets more than the rules allow.
func TestGateKilledMidStream(t *testing.T) {
	s, msgs, sc, rng := standardRun(t, 20000, 2000, 3, stackOptions{})
	g := s.startGate(nil)
	tm := s.killsMidStream([]*gateProc{g}, msgs, rng, sc.Kills)
	report(t, "gate kill -9", s.check(msgs, standardModel, g), tm)
}

// TestThreeGatesKilled runs three gate processes on one consumer, one Redis
// and one database, and kills one of them at random (3 times by default)
// while messages flow. Together they still decide every message once and
// never admit more than a limit allows.
func TestThreeGatesKilled(t *testing.T) {
	s, msgs, sc, rng := standardRun(t, 9000, 900, 3, stackOptions{})
	gates := []*gateProc{s.startGate(nil), s.startGate(nil), s.startGate(nil)}
	tm := s.killsMidStream(gates, msgs, rng, sc.Kills)
	for _, g := range gates {
		if !g.alive() {
			t.Errorf("%s is not running", g.name)
		}
	}
	report(t, "three gates, kill -9", s.check(msgs, standardModel, gates[0]), tm)
}
