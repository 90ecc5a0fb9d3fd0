package gormstore

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
)

// sqliteOptions names a new SQLite file in the test's temporary folder.
func sqliteOptions(t *testing.T) Options {
	return Options{SQLitePath: filepath.Join(t.TempDir(), "data", "gate.db")}
}

func TestSQLite(t *testing.T) { runConformance(t, sqliteOptions) }

func TestSQLitePragmas(t *testing.T) {
	s := MustOpen(t, sqliteOptions(t))
	for pragma, want := range map[string]string{"journal_mode": "wal", "foreign_keys": "1", "busy_timeout": "5000"} {
		var got string
		if err := s.db.Raw("PRAGMA " + pragma).Scan(&got).Error; err != nil {
			t.Fatalf("PRAGMA %s: %v", pragma, err)
		}
		if got != want {
			t.Errorf("PRAGMA %s: got %q, want %q", pragma, got, want)
		}
	}
}

// TestSQLiteTimeText pins the stored format: the schema's CHECKs and every
// comparison depend on it.
func TestSQLiteTimeText(t *testing.T) {
	s := MustOpen(t, sqliteOptions(t))
	MustCommit(t, s, record("k", "x", gate.OutcomeForward, t0.Add(5_000_000_123)))
	var decided, hour string
	if err := s.db.Raw(`SELECT decided_at FROM decisions`).Scan(&decided).Error; err != nil {
		t.Fatal(err)
	}
	if err := s.db.Raw(`SELECT hour FROM scene_counters`).Scan(&hour).Error; err != nil {
		t.Fatal(err)
	}
	if want := "2024-05-01T10:00:05.000000Z"; decided != want {
		t.Errorf("decided_at text: got %q, want %q", decided, want)
	}
	if want := "2024-05-01T10:00:00.000000Z"; hour != want {
		t.Errorf("hour text: got %q, want %q", hour, want)
	}
	err := s.db.Exec(`INSERT INTO decisions ("key", outcome, decided_at) VALUES ('bad', 'forward', '2024-05-01 10:00:05')`).Error
	if err == nil {
		t.Error("inserting a time in another format: got nil error, want the CHECK to refuse it")
	}
}

func TestOpenBadOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
	}{
		{"nothing", Options{}},
		{"not postgres", Options{DatabaseURL: "mysql://u:secret@localhost/db"}},
		{"unparsable postgres URL", Options{DatabaseURL: "postgres://u:secret@localhost:notaport/db"}},
		{"question mark in path", Options{SQLitePath: filepath.Join(t.TempDir(), "a?b.db")}},
		{"negative retention", Options{SQLitePath: filepath.Join(t.TempDir(), "gate.db"), LedgerRetention: -1}},
	}
	for _, tt := range tests {
		s, err := Open(context.Background(), tt.opts)
		if !errors.Is(err, gate.ErrBadRequest) {
			t.Errorf("%s: got %v, want an error wrapping ErrBadRequest", tt.name, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error %q repeats the password", tt.name, err)
		}
		if s != nil {
			s.Close()
		}
	}
}
