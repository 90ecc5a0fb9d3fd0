package gormstore

import (
	"context"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
)

// The ledger keeps each record's BodyHash with its key and Decided gives it
// back, on every way a batch is committed: alone, beside a key known
// already (on PostgreSQL one statement at a time), with an audit row; a
// record without one (a check's) reads back 0.
func TestDecidedKeepsBodyHash(t *testing.T) {
	for name, fresh := range map[string]freshFunc{"sqlite": sqliteOptions, "postgres": postgresOptions} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := MustOpen(t, fresh(t))
			withHash := func(r gate.Record, h int64) gate.Record {
				r.BodyHash = h
				return r
			}
			MustCommit(t, s, withHash(record("a", "x", gate.OutcomeForward, t0), gate.BodyHash([]byte("a's body"))))
			MustCommit(t, s,
				withHash(record("a", "x", gate.OutcomeForward, t0), gate.BodyHash([]byte("another body"))),
				withHash(record("b", "x", gate.OutcomeForward, t0), -42),
				withHash(suppressed("c", "x", "open_id:ou_1", t0), 7),
				record("d", "x", gate.OutcomeForward, t0))
			got, err := s.Decided(ctx, []string{"a", "b", "c", "d"})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int64{"a": gate.BodyHash([]byte("a's body")), "b": -42, "c": 7, "d": 0}
			for k, h := range want {
				if got[k].BodyHash != h {
					t.Errorf("Decided[%s].BodyHash = %d, want %d (the first commit's)", k, got[k].BodyHash, h)
				}
			}
		})
	}
}
