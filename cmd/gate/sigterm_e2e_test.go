package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gormstore"
	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// TestSIGTERMDuringBatchesLosesNothing: a gate that gets SIGTERM (a
// Kubernetes pod being stopped) while a stream of messages is being decided
// exits with code 0 within GATE_SHUTDOWN_TIMEOUT, and once a gate runs
// again every message has exactly one outcome: forwarded once on gate.out
// or suppressed once in the audit, none lost. The NATS server is the
// test's, so producers keep publishing while the gate stops, as they would
// against a cluster's NATS.
func TestSIGTERMDuringBatchesLosesNothing(t *testing.T) {
	t.Parallel()
	const (
		recipients = 40
		perTo      = 50 // 5 forwarded, 45 suppressed each
		shutdown   = 10 * time.Second
	)
	e := newEnv(t, stackReal, sigtermRules)
	// Small batches: the gate is always in the middle of one.
	g := e.startChild(map[string]string{"GATE_SHUTDOWN_TIMEOUT": shutdown.String(), "GATE_BATCH": "32"})
	c := e.client()
	tos := make([]string, recipients)
	for i := range tos {
		tos[i] = testenv.Unique("sigterm")
	}

	// Publish round-robin over the recipients, in the background.
	var wg sync.WaitGroup
	var pubErr error
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for n := range perTo {
			for _, to := range tos {
				m := msg{ID: fmt.Sprintf("%s-%d", to, n), Scene: "t.sigterm", To: to}
				if _, err := c.js.Publish(ctx, "gate.in", m.json()); err != nil {
					pubErr = err
					return
				}
			}
		}
	})

	// SIGTERM once the gate is deciding: some forwards are out, and
	// (checked after) messages were still waiting in GATE_IN.
	deadline := time.Now().Add(30 * time.Second)
	for streamMsgs(t, c, natsbus.StreamOut) < 20 {
		if time.Now().After(deadline) {
			t.Fatal("the gate forwarded fewer than 20 messages in 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	g.proc.Stop(3 * shutdown)
	took := time.Since(start)
	waiting := streamMsgs(t, c, natsbus.StreamIn)
	// The batch in hand was acked, not left to be redelivered after
	// GATE_ACK_WAIT: every message the gate decided is acknowledged.
	for _, id := range decidedUnacked(t, c, e.vars["GATE_DATABASE_URL"]) {
		t.Errorf("%s was decided by the stopped gate but not acknowledged", id)
	}
	if code := g.proc.ExitCode(); code != 0 {
		t.Errorf("gate exited with code %d after SIGTERM, want 0", code)
	}
	if took > shutdown {
		t.Errorf("gate took %s to exit after SIGTERM, want at most GATE_SHUTDOWN_TIMEOUT (%s)", took, shutdown)
	}
	if !g.proc.LogContains("gate stopped") || g.proc.LogContains("shutdown timed out") {
		t.Errorf("the gate did not finish its batches in hand before exiting")
	}
	wg.Wait()
	if pubErr != nil {
		t.Fatalf("publish: %v", pubErr)
	}
	t.Logf("SIGTERM: the gate exited in %s, %d messages waiting in GATE_IN", took.Round(time.Millisecond), waiting)
	if waiting == 0 {
		t.Log("every message was decided before SIGTERM: the stop did not cut into the stream")
	}

	g.start()
	c.waitIdle()
	out, err := c.readOut()
	if err != nil {
		t.Fatal(err)
	}
	forwarded := map[string]int{}
	for _, o := range out {
		forwarded[o.ID]++
	}
	for _, to := range tos {
		rows := g.rows(to)
		var fwd int
		for n := range perTo {
			id := fmt.Sprintf("%s-%d", to, n)
			_, suppressed := rows[id]
			switch {
			case forwarded[id] > 1:
				t.Errorf("%s forwarded %d times", id, forwarded[id])
			case forwarded[id] == 1 && suppressed:
				t.Errorf("%s both forwarded and suppressed", id)
			case forwarded[id] == 0 && !suppressed:
				t.Errorf("%s lost: neither forwarded nor suppressed", id)
			}
			fwd += forwarded[id]
		}
		if fwd != 5 || len(rows) != perTo-5 {
			t.Errorf("%s: %d forwarded and %d suppressed, want 5 and %d", to, fwd, len(rows), perTo-5)
		}
	}
}

// decidedUnacked are the ids of GATE_IN's messages that the consumer
// delivered and nobody acknowledged, which the ledger at databaseURL holds
// all the same. A message can reach a stopped gate that never sees it: the
// server may answer a pull request still open when the gate's inbox went
// away. It stays in GATE_IN and is redelivered after the ack wait, so only
// a decided one means a lost ack.
func decidedUnacked(t *testing.T, c *client, databaseURL string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := c.js.Consumer(ctx, natsbus.StreamIn, natsbus.ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	info := cons.CachedInfo()
	if info.NumAckPending == 0 {
		return nil
	}
	stream, err := c.js.Stream(ctx, natsbus.StreamIn)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for seq := info.AckFloor.Stream + 1; seq <= info.Delivered.Stream; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			continue // acknowledged, and so gone from the work queue
		}
		var env struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(m.Data, &env); err != nil {
			t.Fatalf("GATE_IN seq %d: %v", seq, err)
		}
		ids = append(ids, env.ID)
	}
	st, err := gormstore.Open(ctx, gormstore.Options{DatabaseURL: databaseURL})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	decided, err := st.Decided(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d messages delivered and not acknowledged after SIGTERM, %d of them decided", len(ids), len(decided))
	return slices.Sorted(maps.Keys(decided))
}

// streamMsgs is how many messages a stream holds now.
func streamMsgs(t *testing.T, c *client, stream string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	return s.CachedInfo().State.Msgs
}

const sigtermRules = `
scenes:
  t.sigterm:
    limits: [{window: 1h, max: 5}]
    on_exceed: suppress
`
