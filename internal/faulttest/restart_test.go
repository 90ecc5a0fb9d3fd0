package faulttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// dependency is a service a scenario takes down mid-stream and brings back.
type dependency struct {
	name  string // as /readyz names it
	down  func()
	up    func()
	pause time.Duration // how long it stays down
}

// outagesMidStream publishes msgs in the background and, at random points,
// takes dep down and up again. While it is down the gate must stay alive,
// /readyz must say which dependency is down, and after each return the
// gate must decide again. It reports the time from the return to deciding
// again and, after the last one, to an empty GATE_IN.
func (s *stack) outagesMidStream(g *gateProc, msgs []message, rng *rand.Rand, times int, dep dependency) timing {
	s.t.Helper()
	wait := s.publishInBackground(msgs)
	var tm timing
	for k, at := range killPoints(rng, times, len(msgs)) {
		waitUntil(s.t, 3*time.Minute, fmt.Sprintf("%d messages decided before outage %d", at, k+1), func() bool { return g.received() >= at })
		dep.down()
		time.Sleep(dep.pause / 2)
		o := outage{s: s, g: g}
		o.readyzDown(dep.name)
		if dep.name == "nats" {
			time.Sleep(dep.pause / 2)
		} else {
			// Nothing is acked while its effect cannot be made durable.
			n, err := s.bus.inFlight(context.Background())
			if err != nil {
				s.t.Fatal(err)
			}
			o.holds(n, dep.pause/2)
		}
		if !g.alive() {
			s.t.Fatalf("the gate died while %s was down:\n%s", dep.name, g.Tail(30))
		}
		base := g.received()
		t0 := time.Now()
		dep.up()
		up := time.Since(t0)
		waitUntil(s.t, 2*time.Minute, "deciding again after "+dep.name+" returned", func() bool { return g.received() > base })
		tm.add(fmt.Sprintf("%s down %d at %d decided: up in %s, deciding again in", dep.name, k+1, at, up.Round(10*time.Millisecond)), time.Since(t0))
	}
	if err := wait(); err != nil {
		s.t.Fatal(err)
	}
	tm.add("drained after the last outage in", s.awaitDrained(3*time.Minute))
	return tm
}

// TestPostgresCrashMidStream crashes the audit database (immediate
// shutdown, recovery from the WAL at restart) while messages flow. Forwards
// made before a failed commit are repeated on retry, and GATE_OUT's
// Nats-Msg-Id de-duplication keeps them single.
func TestPostgresCrashMidStream(t *testing.T) {
	pg := startPostgres(t)
	s, msgs, sc, rng := standardRun(t, 6000, 600, 2, stackOptions{DatabaseURL: pg.url()})
	g := s.startGate(nil)
	tm := s.outagesMidStream(g, msgs, rng, sc.Kills, dependency{name: "audit_store", down: pg.crash, up: pg.start, pause: 2 * time.Second})
	report(t, "postgres crash", s.check(msgs, standardModel, g), tm)
}

// TestNATSServerKilledMidStream kills the nats-server with SIGKILL while
// messages flow and starts it again on the same store. The gate and the
// producers reconnect; acks lost with the server mean redeliveries, which
// the decision ledger and GATE_OUT's de-duplication absorb.
func TestNATSServerKilledMidStream(t *testing.T) {
	s, msgs, sc, rng := standardRun(t, 6000, 600, 2, stackOptions{})
	g := s.startGate(nil)
	tm := s.outagesMidStream(g, msgs, rng, sc.Kills, dependency{name: "nats", down: s.nats.Kill, up: s.nats.start, pause: 2 * time.Second})
	report(t, "nats-server kill -9", s.check(msgs, standardModel, g), tm)
}
