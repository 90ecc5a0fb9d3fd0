package faulttest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/httpapi"
	"github.com/nats-io/nats.go/jetstream"
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
	_, wait = s.publishAsync(msgs)
	return wait
}

// publishAsync is publishInBackground that also says when the publisher is
// done: done is closed then.
func (s *stack) publishAsync(msgs []message) (done <-chan struct{}, wait func() error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	finished := make(chan struct{})
	var err error
	go func() {
		defer close(finished)
		err = s.bus.publish(ctx, msgs, nil)
	}()
	s.t.Cleanup(cancel)
	return finished, func() error { defer cancel(); <-finished; return err }
}

// killAndRestart kills g with SIGKILL once watch has seen at messages
// decided, waits a moment, starts it again, and records how long g took to
// be ready and to decide again. It returns a wait for the messages held at
// the kill to be decided (by the other gates, or by g once restarted),
// which records how long that took: the scenario goes on meanwhile, so the
// next kill can come before.
func (s *stack) killAndRestart(g *gateProc, at int64, watch *gateProc, published <-chan struct{}, rng *rand.Rand, tm *timing, label string) (recovery func()) {
	s.t.Helper()
	waitUntil(s.t, 3*time.Minute, fmt.Sprintf("%d messages decided before %s", at, label), func() bool { return watch.received() >= at })
	g.Kill()
	recovered := s.watchRecovery(label)
	time.Sleep(time.Duration(rng.IntN(500)) * time.Millisecond)
	t0 := time.Now()
	g.start()
	ready := time.Since(t0)
	// Deciding again: g itself decides (its counters start at zero), unless
	// the other gates left it nothing to decide. (The summary's counter is
	// shared by every gate and stops once all is decided: waiting for it to
	// move failed when the others finished while g restarted.)
	waitUntil(s.t, time.Minute, "deciding again after "+label, func() bool {
		return g.metric("gate_decisions_total") > 0 || closed(published) && s.drained()
	})
	tm.add(fmt.Sprintf("%s at %d decided: ready in %s, deciding again in", label, at, ready.Round(10*time.Millisecond)), time.Since(t0))
	return func() {
		s.t.Helper()
		d, held := recovered()
		s.t.Logf("recovery after kill: %s (%s; %d messages unacknowledged at the kill)", d.Round(100*time.Millisecond), label, held)
		tm.add(fmt.Sprintf("%s: the %d messages unacknowledged at the kill decided in", label, held), d)
	}
}

// watchRecovery starts, right after a kill, to wait for every message
// delivered by then to be settled: the consumer's ack floor reaching the
// last sequence it had delivered. Those include the killed gate's, which
// only a redelivery after GATE_ACK_WAIT can settle. recovered returns the
// time from the kill to then, and how many messages were unacknowledged at
// the kill (held by every gate).
func (s *stack) watchRecovery(label string) (recovered func() (time.Duration, int)) {
	killed := time.Now()
	info := s.consumerInfo()
	last, held := info.Delivered.Stream, info.NumAckPending
	done := make(chan time.Duration, 1)
	go func() {
		defer close(done)
		for time.Since(killed) < 3*time.Minute {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			info, err := s.bus.consumer(ctx)
			cancel()
			if err == nil && info.AckFloor.Stream >= last {
				done <- time.Since(killed)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() (time.Duration, int) {
		s.t.Helper()
		d, ok := <-done
		if !ok {
			s.t.Fatalf("%s: the %d messages unacknowledged at the kill (up to seq %d) were not all decided within 3m", label, held, last)
		}
		return d, held
	}
}

// consumerInfo reads the gate consumer's state, asking again while NATS
// is slow to answer.
func (s *stack) consumerInfo() *jetstream.ConsumerInfo {
	s.t.Helper()
	var info *jetstream.ConsumerInfo
	waitUntil(s.t, time.Minute, "the gate consumer's state", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		info, err = s.bus.consumer(ctx)
		return err == nil
	})
	return info
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// killsMidStream publishes msgs in the background and, at each kill point,
// kills one of gates at random with SIGKILL and restarts it. It reports the
// recoveries and, after the last, the time to an empty GATE_IN.
func (s *stack) killsMidStream(gates []*gateProc, msgs []message, rng *rand.Rand, kills int) timing {
	s.t.Helper()
	published, wait := s.publishAsync(msgs)
	var tm timing
	var recoveries []func()
	for k, at := range killPoints(rng, kills, len(msgs)) {
		i := rng.IntN(len(gates))
		watch := gates[(i+1)%len(gates)]
		recoveries = append(recoveries, s.killAndRestart(gates[i], at, watch, published, rng, &tm, fmt.Sprintf("kill %d (%s)", k+1, gates[i].name)))
	}
	if err := wait(); err != nil {
		s.t.Fatal(err)
	}
	for _, r := range recoveries {
		r()
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
