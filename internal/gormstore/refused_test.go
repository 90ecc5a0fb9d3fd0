package gormstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/migrations"
)

// refusedCase is a record that reaches Commit straight, past every check
// of the message parser: what the database makes of it.
type refusedCase struct {
	name string
	bad  gate.Record
	// refusedBy names the dialects that refuse it; the others store it as
	// sent.
	refusedBy []string
	// lookup: Decided is asked about its key too (a key the gate's clock
	// gave a time no reader expects is not looked up).
	lookup bool
}

// incompressible is n bytes of text that PostgreSQL cannot compress below
// its btree's row limit (2,704 bytes).
func incompressible(n int) string {
	b := make([]byte, n*3/4)
	rand.Read(b)
	return base64.RawStdEncoding.EncodeToString(b)[:n]
}

func refusedCases() []refusedCase {
	pg, lite := migrations.Postgres, migrations.SQLite
	badRecipient := suppressed("bad-recipient", "disk", "open_id:ou_\xff", t0)
	return []refusedCase{
		{"NUL in key", record("nul\x00key", "disk", gate.OutcomeForward, t0), []string{pg}, true},
		{"invalid UTF-8 in key", record("bad\xffkey", "disk", gate.OutcomeForward, t0), []string{pg}, true},
		{"invalid UTF-8 in invalid key", record("invalid:\xc3\x28", "", gate.OutcomeInvalid, t0), []string{pg}, true},
		{"NUL in scene", record("nul-scene", "di\x00sk", gate.OutcomeDrop, t0), []string{pg}, true},
		{"invalid UTF-8 in recipient", badRecipient, []string{pg}, true},
		{"key over the index limit", record(incompressible(12000), "disk", gate.OutcomeForward, t0), []string{pg}, true},
		// SQLite's CHECK on the time's spelling: a five-digit year.
		{"time past year 9999", record("far-future", "disk", gate.OutcomeForward, time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC)), []string{lite}, false},
	}
}

// testRefusedRecords: a record the database refuses makes Commit fail with
// an error wrapping gate.ErrPermanent and never gate.ErrUnavailable (a retry
// would fail the same way, forever), writes nothing of its batch, and the
// rest of the batch commits without it. A record the database accepts is
// stored as sent and found again.
func testRefusedRecords(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	for _, tt := range refusedCases() {
		good := record(tt.name+" neighbour", "disk", gate.OutcomeForward, t0)
		_, err := s.Commit(ctx, []gate.Record{good, tt.bad})
		refused := false
		for _, d := range tt.refusedBy {
			refused = refused || d == s.dialect.name
		}
		switch {
		case refused && (!errors.Is(err, gate.ErrPermanent) || errors.Is(err, gate.ErrUnavailable)):
			t.Errorf("%s: Commit got %v, want an error wrapping ErrPermanent and not ErrUnavailable", tt.name, err)
			continue
		case !refused && err != nil:
			t.Errorf("%s: Commit got %v, want the record stored as sent", tt.name, err)
			continue
		}
		known, err := s.Decided(ctx, []string{good.Key})
		if err != nil {
			t.Fatalf("%s: Decided(neighbour): %v", tt.name, err)
		}
		if _, ok := known[good.Key]; ok == refused {
			t.Errorf("%s: neighbour committed = %v, want %v (a failed Commit writes nothing)", tt.name, ok, !refused)
		}
		if refused {
			if known := MustCommit(t, s, good); known != nil {
				t.Errorf("%s: neighbour alone: known %v, want none", tt.name, known)
			}
		}
		if !tt.lookup {
			continue
		}
		known, err = s.Decided(ctx, []string{tt.bad.Key})
		switch {
		case refused && !errors.Is(err, gate.ErrPermanent) && err != nil:
			t.Errorf("%s: Decided got %v, want nil or an error wrapping ErrPermanent", tt.name, err)
		case errors.Is(err, gate.ErrUnavailable):
			t.Errorf("%s: Decided got %v, an error wrapping ErrUnavailable", tt.name, err)
		case err == nil:
			if _, ok := known[tt.bad.Key]; ok == refused {
				t.Errorf("%s: Decided finds the key: %v, want %v", tt.name, ok, !refused)
			}
		}
	}
	// Every neighbour counted once, nothing of a refused record.
	n := int64(len(refusedCases()))
	for _, tt := range refusedCases() {
		for _, d := range tt.refusedBy {
			if d != s.dialect.name {
				n++ // stored as sent, beside its neighbour
			}
		}
	}
	if got := countRows(t, s, "decisions"); got != n {
		t.Errorf("decisions: %d rows, want %d", got, n)
	}
}

// testRefusedKeysLookedUp: Decided on keys the database cannot hold fails
// permanently (PostgreSQL) or finds nothing (SQLite), never transiently;
// the valid keys of the same call are found when asked alone.
func testRefusedKeysLookedUp(t *testing.T, fresh freshFunc) {
	s := MustOpen(t, fresh(t))
	ctx := context.Background()
	MustCommit(t, s, record("ok", "disk", gate.OutcomeForward, t0))
	for _, bad := range []string{"nul\x00", "\xff\xfe", "ok\x00"} {
		known, err := s.Decided(ctx, []string{"ok", bad})
		switch s.dialect.name {
		case migrations.Postgres:
			if !errors.Is(err, gate.ErrPermanent) || errors.Is(err, gate.ErrUnavailable) {
				t.Errorf("Decided(%q): got %v, want an error wrapping ErrPermanent and not ErrUnavailable", bad, err)
			}
		default:
			if err != nil || len(known) != 1 {
				t.Errorf("Decided(%q): got %v, %v; want ok alone", bad, known, err)
			}
		}
	}
}
