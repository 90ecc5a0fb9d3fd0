package gormstore

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// TestPostgresHeldPayloadShared: a held message whose audit row holds the
// same bytes keeps no copy of its own on PostgreSQL, is handed back whole by
// Settle, and keeps its bytes when its audit row is pruned while it is still
// held. One whose audit row says otherwise (written earlier for the same id)
// keeps its own copy.
func TestPostgresHeldPayloadShared(t *testing.T) {
	s := MustOpen(t, postgresOptions(t))
	ctx := context.Background()
	body := `{"id":"p-1","scene":"disk","receive_id":"ou_1","content":{"text":"磁盘 95%"}}`

	shared := heldRec("p-1", "disk", ou1, "disk", gate.HoldDefer, 1, t0, t0.Add(time.Minute))
	shared.Suppression.Payload, shared.Hold.Payload = body, []byte(body)
	// p-2's audit row already exists, with other bytes: its hold cannot share it.
	MustCommit(t, s, suppressed("p-2", "disk", ou1, t0))
	own := heldRec("p-2", "disk", ou1, "disk", gate.HoldDefer, 2, t0, t0.Add(time.Minute))
	own.Key = "p-2-again"
	own.Suppression.Payload, own.Hold.Payload = body, []byte(body)
	MustCommit(t, s, shared, own)

	stored := map[string]int{}
	rows, err := s.sqlDB.QueryContext(ctx, `SELECT message_id, length(payload) FROM held`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		stored[id] = n
	}
	rows.Close()
	if stored["p-1"] != 0 || stored["p-2"] != len(body) {
		t.Fatalf("held payload lengths %v: want p-1 sharing its audit row's (0) and p-2 its own (%d)", stored, len(body))
	}

	// The audit rows are pruned while both are held: the shared bytes come back first.
	if _, err := s.PruneSuppressions(ctx, t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, s, "suppressions"); n != 0 {
		t.Fatalf("%d audit rows left after pruning, want 0", n)
	}
	var got map[string][]byte
	_, err = s.Settle(ctx, t0.Add(time.Hour), 10, 10, func(_ context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
		got = map[string][]byte{}
		var out []gate.Settlement
		for _, q := range due {
			for _, h := range q {
				got[h.MessageID] = h.Payload
				out = append(out, gate.Settlement{MessageID: h.MessageID, Kind: gate.SettleReleased, At: t0.Add(time.Hour), Out: &gate.Forward{MessageID: h.MessageID}})
			}
		}
		return out, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"p-1", "p-2"} {
		if !bytes.Equal(got[id], []byte(body)) {
			t.Errorf("Settle handed %s back as %q, want %q", id, got[id], body)
		}
	}
}
