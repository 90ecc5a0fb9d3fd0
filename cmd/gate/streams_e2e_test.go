package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/nats-io/nats.go/jetstream"
)

// A stream the gate needs that disappears is recreated: after GATE_DEAD is
// deleted, a message that cannot be decided still reaches it. While one is
// missing, /readyz answers 503 naming the check "streams" (a stream of
// someone else's on gate.dead keeps GATE_DEAD from being recreated here, so
// that the test sees it), and ready again once it is back.
func TestLostStreamIsRecreated(t *testing.T) {
	e := newEnv(t, stackEmbedded, contractRules)
	g := e.start(nil)
	c := e.client()
	ctx := t.Context()

	if err := c.js.DeleteStream(ctx, natsbus.StreamDead); err != nil {
		t.Fatal(err)
	}
	c.publish([]byte("not json")) // returns once the gate has parked it
	if dead := c.stored(natsbus.StreamDead); len(dead) != 1 || string(dead[0].Data) != "not json" {
		t.Fatalf("GATE_DEAD holds %d messages, want the one that is not JSON", len(dead))
	}

	if err := c.js.DeleteStream(ctx, natsbus.StreamDead); err != nil {
		t.Fatal(err)
	}
	const squatter = "SQUATTER"
	if _, err := c.js.CreateStream(ctx, jetstream.StreamConfig{Name: squatter, Subjects: []string{natsbus.DefaultDeadSubject}}); err != nil {
		t.Fatal(err)
	}
	g.waitReadyz(http.StatusServiceUnavailable, "GATE_DEAD is missing")
	if err := c.js.DeleteStream(ctx, squatter); err != nil {
		t.Fatal(err)
	}
	g.waitReadyz(http.StatusOK, "ok")

	to := testenv.Unique("streams")
	c.send(msg{ID: to, Scene: "t.cap_a", To: to})
	if ids, _ := c.forwarded(to); len(ids) != 1 {
		t.Errorf("forwarded %v after the recreation, want [%s]", ids, to)
	}
}

// waitReadyz polls /readyz until it answers code, its check "streams"
// saying want.
func (g *gateProc) waitReadyz(code int, want string) {
	g.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, body := g.get("/readyz", nil, "")
		var answer struct{ Checks map[string]string }
		if got == code && json.Unmarshal(body, &answer) == nil && answer.Checks["streams"] == want {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("/readyz answers %d %s after 30s, want %d with streams: %s", got, body, code, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
