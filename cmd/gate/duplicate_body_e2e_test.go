package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/testing/testenv"
)

// envelope is a message for scene c.three to to under id, its text body.
func envelope(t *testing.T, id, to, text string) []byte {
	t.Helper()
	content, err := json.Marshal(map[string]string{"text": text})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{
		"id": id, "scene": "c.three", "receive_id_type": "open_id", "receive_id": to,
		"msg_type": "text", "content": string(content),
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDuplicateBodyMismatchE2E: a message under an id the gate has
// decided, for the same scene and recipient but with another body (one
// JetStream let through: no Nats-Msg-Id, or past GATE_IN's duplicate
// window), takes the first's outcome, as a duplicate does, and the gate
// says so: gate_duplicate_body_mismatch_total counts it and a log line
// names the id and both bodies' hashes. A producer's retry, the same body,
// counts nothing. Two such messages published back to back count once
// more, whether one batch holds both or not. On both stacks, so that both
// ledgers (SQLite, PostgreSQL) keep the first body's hash.
func TestDuplicateBodyMismatchE2E(t *testing.T) {
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, checkRules)
		g := e.start(nil)
		c := e.client()
		to := testenv.Unique("dupbody")
		first := envelope(t, to+"-order-1", to, "your order shipped")

		c.publish(first)
		c.publish(envelope(t, to+"-order-1", to, "your order was cancelled"))
		c.publish(first)
		if got := g.metric("gate_duplicate_body_mismatch_total"); got != 1 {
			t.Errorf("gate_duplicate_body_mismatch_total = %v after one other body and one retry, want 1", got)
		}
		if got := fwd(c, to); !slices.Equal(got, []string{to + "-order-1"}) {
			t.Errorf("forwarded to %s: %v, want the first message once", to, got)
		}
		if out := c.stored("GATE_OUT"); len(out) != 1 || !strings.Contains(string(out[0].Data), "shipped") {
			t.Errorf("GATE_OUT holds %d messages, want the first body only", len(out))
		}
		log := g.log.String()
		if !strings.Contains(log, "another body") || !strings.Contains(log, to+"-order-1") || !strings.Contains(log, "first_body_hash=") {
			t.Errorf("no log line naming %s-order-1 and both bodies' hashes:\n%s", to, log)
		}

		c.publish(envelope(t, to+"-order-2", to, "one"), envelope(t, to+"-order-2", to, "two"))
		if got := g.metric("gate_duplicate_body_mismatch_total"); got != 2 {
			t.Errorf("gate_duplicate_body_mismatch_total = %v after two bodies under one new id, want 2", got)
		}
	})
}
