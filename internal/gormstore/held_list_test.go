package gormstore

import (
	"context"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

func TestPostgresHeldQueues(t *testing.T) { testHeldQueues(t, MustOpen(t, postgresOptions(t))) }

func TestSQLiteHeldQueues(t *testing.T) { testHeldQueues(t, MustOpen(t, sqliteOptions(t))) }

// testHeldQueues: a summary per queue asked that holds messages (count,
// oldest held_at, next due_at), none for an empty queue or another
// recipient's.
func testHeldQueues(t *testing.T, s *Store) {
	due := t0.Add(time.Hour)
	MustCommit(t, s,
		heldRec("d1", "disk", ou1, "disk", gate.HoldDefer, 1, t0, due),
		heldRec("d2", "disk", ou1, "disk", gate.HoldDefer, 2, t0.Add(time.Second), due.Add(time.Minute)),
		heldRec("c1", "ci.build", ou1, "digest:ci", gate.HoldDigest, 3, t0.Add(2*time.Second), due),
		heldRec("o1", "disk", "open_id:ou_2", "disk", gate.HoldDefer, 4, t0, due),
	)
	got, err := s.HeldQueues(context.Background(), ou1, []gate.Queue{qDisk, {Recipient: ou1, Name: "digest:disk"}, {Recipient: "open_id:ou_2", Name: "disk"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []gate.HeldQueueSummary{{Queue: "disk", Kind: gate.HoldDefer, Count: 2, OldestHeldAt: t0.UTC(), NextDueAt: due.UTC()}}
	if len(got) != 1 || got[0] != want[0] {
		t.Errorf("got %+v, want %+v", got, want)
	}
	got, err = s.HeldQueues(context.Background(), ou1, []gate.Queue{qDigest})
	if err != nil || len(got) != 1 || got[0].Count != 1 || got[0].Kind != gate.HoldDigest {
		t.Errorf("digest queue: %+v, %v; want one digest message", got, err)
	}
}
