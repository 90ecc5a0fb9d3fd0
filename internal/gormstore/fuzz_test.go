package gormstore

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// FuzzCommitParsed holds the edge (gate.ParseDelivery) to what the audit
// stores can hold: whatever headers and body a producer sends, a message
// that parses, by the header fast path or the body path, commits with its
// suppression row (ids, scene, recipient and the payload as sent) to SQLite
// and to PostgreSQL, and the report finds the row by its scene and
// recipient; a message that does not parse commits as invalid under the
// scene it kept. Either commit failing is what stalled the gate: a
// PostgreSQL text column refuses what SQLite stores.
//
// Every fuzzing process opens stores of its own (a SQLite file, a
// PostgreSQL schema), so the workers never meet.
func FuzzCommitParsed(f *testing.F) {
	stores := map[string]*Store{
		"sqlite":   MustOpen(f, Options{SQLitePath: filepath.Join(f.TempDir(), "gate.db")}),
		"postgres": MustOpen(f, Options{DatabaseURL: testenv.PostgresSchemaURL(f)}),
	}
	body := []byte(`{"id":"b1","scene":"s","receive_id":"ou_1"}`)
	// What crashed the gate or stalled its commits: header values that are
	// not UTF-8, C1 controls, bidirectional overrides, NUL as a JSON escape.
	f.Add(body, "h1", "sc\xffene", "open_id:ou_1", "")
	f.Add(body, "h\xff", "s", "open_id:ou_1", "")
	f.Add(body, "h1", "s", "open_id:ou\xff", "")
	f.Add(body, "h1", "s", "open\xff:ou_1", "high\xff")
	f.Add(body, "h1", "s\u0085", "open_id:ou_1", "")
	f.Add(body, "h1", "alert\u202eexe", "open_id:ou_1", "")
	f.Add([]byte(`{"id":"m\u0000","scene":"s","receive_id":"ou_1"}`), "", "", "", "")
	f.Add([]byte(`{"id":"m","scene":"s\u0000","receive_id":"ou_1"}`), "", "", "", "")
	f.Add([]byte(`{"scene":"s","receive_id":"ou_1"}`), "h\xff", "", "", "")
	f.Add([]byte("{\"id\":\"m\",\"scene\":\"s\",\"receive_id\":\"ou_1\"}\x00"), "h1", "s", "open_id:ou_1", "")
	// Valid messages with payloads a text column must keep as sent.
	f.Add([]byte(`{"id":"m","scene":"s","receive_id":"ou_1","content":"a\u0000b \ud800"}`), "", "", "", "")
	f.Add([]byte("plain text, not JSON: 用户✓ 👩\u200d💻"), "h1", "告警.磁盘", "user_id:用户✓", "urgent")
	f.Add(body, "h1", "s", "email:a:b@c", "low")

	ctx := context.Background()
	var n int
	f.Fuzz(func(t *testing.T, data []byte, id, scene, recipient, priority string) {
		for _, d := range []gate.Delivery{
			{Data: data, HeaderID: id, HeaderScene: scene, HeaderRecipient: recipient, HeaderPriority: priority},
			{Data: data, HeaderID: id}, // the body path, the header standing in for a missing id
		} {
			n++
			at := t0.Add(time.Duration(n) * time.Millisecond)
			m, err := gate.ParseDelivery(d, 0)
			if err != nil {
				// As the gate counts an invalid message: under the scene
				// it kept, if any.
				rec := gate.Record{Key: fmt.Sprintf("seq:%d", n), Scene: m.Scene, Outcome: gate.OutcomeInvalid, At: at}
				for name, s := range stores {
					if _, err := s.Commit(ctx, []gate.Record{rec}); err != nil {
						t.Fatalf("%s: commit of the invalid message of scene %q: %v", name, m.Scene, err)
					}
				}
				continue
			}
			// A fresh key on every call, so that each commit writes its
			// row: the fuzzer repeats ids across inputs, and a known key
			// writes nothing. The prefix is ASCII and keeps the id valid.
			m.ID = fmt.Sprintf("%d/%s", n, m.ID)
			rec := gate.RecordOf(m.ID, m, suppression(at), 0, "fuzz")
			for name, s := range stores {
				if _, err := s.Commit(ctx, []gate.Record{rec}); err != nil {
					t.Fatalf("%s: commit of id %q, scene %q, recipient %q, priority %q, payload %q: %v",
						name, m.ID, m.Scene, m.Recipient(), m.Priority, m.Raw, err)
				}
				findRow(t, name, s, rec.Suppression)
			}
			// Held, the message keeps its bytes and is handed back as
			// committed.
			held := deferredRecord(m, at, n)
			for name, s := range stores {
				if _, err := s.Commit(ctx, []gate.Record{held}); err != nil {
					t.Fatalf("%s: commit of held id %q, recipient %q, scene %q: %v", name, held.Key, m.Recipient(), m.Scene, err)
				}
				findHeld(t, name, s, held.Hold)
			}
		}
	})
}

// deferredRecord is the record of m deferred at at, as the gate makes it,
// under an id of its own (the suppression row of m has taken m's).
func deferredRecord(m gate.Message, at time.Time, n int) gate.Record {
	m.ID = "held/" + m.ID
	d := suppression(at)
	d.Outcome, d.Queue, d.HoldUntil = gate.OutcomeDefer, gate.Queue{Recipient: m.Recipient(), Name: m.Scene}, at
	d.Expires, d.Fallback = at.Add(time.Hour), gate.ActionSuppress
	return gate.RecordOf(m.ID, m, d, uint64(n), "fuzz")
}

// findHeld wants Settle to hand want back as committed, and settles it.
func findHeld(t *testing.T, name string, s *Store, want *gate.Held) {
	t.Helper()
	found := false
	_, err := s.Settle(context.Background(), want.DueAt, 1000, 1000, func(_ context.Context, due [][]gate.Held) ([]gate.Settlement, error) {
		var out []gate.Settlement
		for _, q := range due {
			for _, h := range q {
				if h.MessageID == want.MessageID {
					found = h.Queue == want.Queue && h.Scene == want.Scene && h.Priority == want.Priority &&
						h.TZ == want.TZ && bytes.Equal(h.Payload, want.Payload)
				}
				out = append(out, gate.Settlement{MessageID: h.MessageID, Kind: gate.SettleReleased, At: want.DueAt, Out: &gate.Forward{MessageID: h.MessageID}})
			}
		}
		return out, nil
	})
	if err != nil {
		t.Fatalf("%s: settle the held %q: %v", name, want.MessageID, err)
	}
	if !found {
		t.Fatalf("%s: held %q not handed back as committed (queue %q, payload %q)", name, want.MessageID, want.Queue, want.Payload)
	}
}

// suppression is a decision that suppresses a message at at, with the
// limit it exceeded.
func suppression(at time.Time) gate.Decision {
	return gate.Decision{Outcome: gate.OutcomeSuppress, Reason: "limit", At: at, NextAllowedAt: at.Add(time.Hour),
		Exceeded: &gate.Exceeded{Scope: gate.ScopeScene, Limit: gate.Limit{Window: time.Hour, Max: 1}, Count: 1}}
}

// findRow wants the report to find want by its scene, recipient and time,
// with its text as committed.
func findRow(t *testing.T, name string, s *Store, want *gate.Suppression) {
	t.Helper()
	page, err := s.Suppressions(context.Background(), gate.SuppressionFilter{
		Scene: want.Scene, Recipient: want.Recipient, Since: want.DecidedAt, Until: want.DecidedAt.Add(time.Microsecond)})
	if err != nil {
		t.Fatalf("%s: list the row of %q: %v", name, want.MessageID, err)
	}
	if len(page.Items) != 1 {
		t.Fatalf("%s: %d rows for scene %q, recipient %q at %v, want the one of %q", name, len(page.Items), want.Scene, want.Recipient, want.DecidedAt, want.MessageID)
	}
	got := page.Items[0]
	if got.MessageID != want.MessageID || got.Priority != want.Priority || got.Payload != want.Payload {
		t.Fatalf("%s: row %q %q %q, want %q %q %q", name, got.MessageID, got.Priority, got.Payload, want.MessageID, want.Priority, want.Payload)
	}
}
