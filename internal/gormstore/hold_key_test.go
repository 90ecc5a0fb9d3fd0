package gormstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

func TestSQLiteHeldKeyMigration(t *testing.T) { testHeldKeyMigration(t, sqliteOptions(t)) }

func TestPostgresHeldKeyMigration(t *testing.T) { testHeldKeyMigration(t, postgresOptions(t)) }

// testHeldKeyMigration holds messages, puts held back as migration 0005
// made it (keyed by message_id, with held_queue_seq_idx) with 0012
// unrecorded, and opens the store again: 0012 runs on the table with its
// rows, which keep their queues and are released in the order they arrived,
// a late commit of an older message first, as before.
func testHeldKeyMigration(t *testing.T, opts Options) {
	ctx := context.Background()
	old, err := Open(ctx, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	due := t0.Add(time.Minute)
	// Queue disk gets seq 30 first, then 10 and 20 (a message decided on one
	// gate committing after a later one decided on another).
	for _, batch := range [][]gate.Record{
		{heldRec("m30", "disk", ou1, "disk", gate.HoldDefer, 30, t0, due)},
		{heldRec("m10", "disk", ou1, "disk", gate.HoldDefer, 10, t0, due),
			heldRec("m20", "disk", ou1, "disk", gate.HoldDefer, 20, t0, due),
			heldRec("d15", "ci", ou1, "digest:ci", gate.HoldDigest, 15, t0, due),
			heldRec("o40", "disk", "open_id:ou_2", "disk", gate.HoldDefer, 40, t0, due)},
	} {
		if _, err := old.Commit(ctx, batch); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	pkey := `CREATE UNIQUE INDEX held_message_id_old ON held (message_id)`
	if old.dialect.name == "postgres" {
		pkey = `ALTER TABLE held ADD PRIMARY KEY (message_id)`
	}
	for _, stmt := range []string{
		`CREATE TABLE held_old AS SELECT * FROM held`,
		`DROP TABLE held`,
		// As 0015 found it too: no cancel_key, no cancelled counter.
		`ALTER TABLE held_old DROP COLUMN cancel_key`,
		`ALTER TABLE scene_counters DROP COLUMN cancelled`,
		`DELETE FROM schema_migrations WHERE version = 15`,
		`ALTER TABLE held_old RENAME TO held`,
		pkey,
		`CREATE INDEX held_queue_seq_idx ON held (recipient, queue, seq)`,
		`DELETE FROM schema_migrations WHERE version = 12`,
	} {
		if err := old.db.Exec(stmt).Error; err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s := MustOpen(t, opts) // migrates 0012 again, on the old table
	if n := countRows(t, s, "held"); n != 5 {
		t.Fatalf("held after the migration: %d rows, want 5", n)
	}
	if got, want := heldIndexes(t, s), []string{"(recipient, queue, seq, message_id)"}; !slices.Equal(got, want) {
		t.Errorf("held's indexes after the migration: %q, want only the primary key %q", got, want)
	}
	handed, n := settleAll(t, s, due, func(due [][]gate.Held) []gate.Settlement {
		var out []gate.Settlement
		for _, q := range due {
			for _, h := range q {
				out = append(out, gate.Settlement{MessageID: h.MessageID, Kind: gate.SettleReleased, At: due[0][0].DueAt, Out: &gate.Forward{MessageID: h.MessageID}})
			}
		}
		return out
	})
	got := fmt.Sprint(heldIDs(handed))
	if want := "[[m10 m20 m30] [d15] [o40]]"; n != 5 || got != want {
		t.Errorf("settled %d, handed %s; want 5, %s (each queue in seq order)", n, got, want)
	}
	if n := countRows(t, s, "held"); n != 0 {
		t.Errorf("held after releasing all: %d rows, want 0", n)
	}
	// New messages are held as before, and a retry writes nothing again.
	again := heldRec("m50", "disk", ou1, "disk", gate.HoldDefer, 50, t0, due)
	MustCommit(t, s, again)
	MustCommit(t, s, again)
	if n := countRows(t, s, "held"); n != 1 {
		t.Errorf("held after committing one message twice: %d rows, want 1", n)
	}
}

// heldIndexes lists the key columns of each index of held but 0015's
// (a partial index for Cancel), sorted.
func heldIndexes(t *testing.T, s *Store) []string {
	t.Helper()
	var out []string
	if s.dialect.name == "postgres" {
		var defs []string
		if err := s.db.Raw(`SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'held' AND indexname <> 'held_cancel_key_idx'`).
			Scan(&defs).Error; err != nil {
			t.Fatalf("read held's indexes: %v", err)
		}
		for _, d := range defs {
			out = append(out, d[strings.LastIndex(d, "("):])
		}
	} else {
		var names []string
		if err := s.db.Raw(`SELECT name FROM pragma_index_list('held')`).Scan(&names).Error; err != nil {
			t.Fatalf("read held's indexes: %v", err)
		}
		for _, name := range names {
			if name == "held_cancel_key_idx" { // 0015's, for Cancel
				continue
			}
			var cols []string
			if err := s.db.Raw(`SELECT name FROM pragma_index_info(?) ORDER BY seqno`, name).Scan(&cols).Error; err != nil {
				t.Fatalf("read index %s: %v", name, err)
			}
			out = append(out, "("+strings.Join(cols, ", ")+")")
		}
	}
	slices.Sort(out)
	return out
}

// TestPostgresWaitingAcrossGates is two gates on one database: a queue
// gate A holds a message in waits for gate B too (the set of queues that
// hold messages is held_queues, written in A's commit, not any process's
// memory), and once B settles the queue's last message neither sees it
// waiting, nor is its row left.
func TestPostgresWaitingAcrossGates(t *testing.T) {
	opts := postgresOptions(t)
	a, b := MustOpen(t, opts), MustOpen(t, opts)
	ctx := context.Background()
	q2 := gate.Queue{Recipient: "open_id:ou_2", Name: "disk"}
	for _, s := range []*Store{a, b} { // each has asked before: nothing waits
		if w, err := s.Waiting(ctx, []gate.Queue{qDisk, q2}); err != nil || len(w) != 0 {
			t.Fatalf("Waiting before any hold: %v, %v; want none", w, err)
		}
	}
	due := t0.Add(time.Minute)
	MustCommit(t, a, heldRec("m1", "disk", ou1, "disk", gate.HoldDefer, 1, t0, due))
	w, err := b.Waiting(ctx, []gate.Queue{qDisk, q2})
	if err != nil || !w[qDisk] || w[q2] || len(w) != 1 {
		t.Fatalf("gate B's Waiting after gate A held m1: %v, %v; want only %v", w, err, qDisk)
	}
	// B's message for the queue is held behind m1, and both leave in order.
	MustCommit(t, b, heldRec("m2", "disk", ou1, "disk", gate.HoldDefer, 2, t0, due))
	handed, n := settleAll(t, b, due, func(due [][]gate.Held) []gate.Settlement {
		return []gate.Settlement{{MessageID: due[0][0].MessageID, Kind: gate.SettleReleased, At: due[0][0].DueAt, Out: &gate.Forward{MessageID: due[0][0].MessageID}}}
	})
	if got := fmt.Sprint(heldIDs(handed)); n != 1 || got != "[[m1 m2]]" {
		t.Fatalf("gate B's first round: settled %d of %s; want 1 of [[m1 m2]]", n, got)
	}
	if w, err := a.Waiting(ctx, []gate.Queue{qDisk}); err != nil || !w[qDisk] {
		t.Fatalf("gate A's Waiting with m2 still held: %v, %v; want %v", w, err, qDisk)
	}
	handed, n = settleAll(t, b, due, func(due [][]gate.Held) []gate.Settlement {
		return []gate.Settlement{{MessageID: due[0][0].MessageID, Kind: gate.SettleReleased, At: due[0][0].DueAt, Out: &gate.Forward{MessageID: due[0][0].MessageID}}}
	})
	if got := fmt.Sprint(heldIDs(handed)); n != 1 || got != "[[m2]]" {
		t.Fatalf("gate B's second round: settled %d of %s; want 1 of [[m2]]", n, got)
	}
	// The queue waits until its forwards leave the outbox.
	if w, err := a.Waiting(ctx, []gate.Queue{qDisk}); err != nil || !w[qDisk] {
		t.Errorf("gate A's Waiting with m1 and m2 in the outbox: %v, %v; want %v", w, err, qDisk)
	}
	if err := a.Sent(ctx, []string{"m1", "m2"}); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]*Store{"A": a, "B": b} {
		if w, err := s.Waiting(ctx, []gate.Queue{qDisk, q2}); err != nil || len(w) != 0 {
			t.Errorf("gate %s's Waiting after the last message settled and was sent: %v, %v; want none", name, w, err)
		}
	}
	if n := countRows(t, a, "held_queues"); n != 0 {
		t.Errorf("held_queues after the last message settled: %d rows, want 0", n)
	}
}
