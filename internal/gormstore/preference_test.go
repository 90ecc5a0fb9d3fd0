package gormstore

import (
	"context"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

func TestPruneTombstonesSQLite(t *testing.T)   { testPruneTombstones(t, sqliteOptions) }
func TestPruneTombstonesPostgres(t *testing.T) { testPruneTombstones(t, postgresOptions) }

// testPruneTombstones: pruning takes every tombstone older than its bound,
// across batches, and nothing else: neither a younger tombstone, nor live
// preferences, nor a recipient whose preferences were put again after a
// delete.
func testPruneTombstones(t *testing.T, opts func(*testing.T) Options) {
	ctx := context.Background()
	s := MustOpen(t, opts(t))
	put := func(r string) {
		t.Helper()
		if _, err := s.PutPreferences(ctx, gate.Preferences{Recipient: r, MutedScenes: []string{"a"}}); err != nil {
			t.Fatalf("PutPreferences(%s): %v", r, err)
		}
	}
	del := func(r string) {
		t.Helper()
		if err := s.DeletePreferences(ctx, r); err != nil {
			t.Fatalf("DeletePreferences(%s): %v", r, err)
		}
	}
	gone := []string{"open_id:d1", "open_id:d2", "open_id:d3", "open_id:d4", "open_id:d5"}
	for _, r := range gone {
		put(r)
		del(r)
	}
	put("open_id:live")
	put("open_id:back")
	del("open_id:back")
	put("open_id:back")
	count := func() (tombstones, live int64) {
		t.Helper()
		if err := s.db.Raw(`SELECT COUNT(*) FROM recipient_preferences WHERE deleted = ?`, true).Row().Scan(&tombstones); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Raw(`SELECT COUNT(*) FROM recipient_preferences WHERE deleted = ?`, false).Row().Scan(&live); err != nil {
			t.Fatal(err)
		}
		return tombstones, live
	}
	if tomb, live := count(); tomb != 5 || live != 2 {
		t.Fatalf("before pruning: %d tombstones and %d live rows, want 5 and 2", tomb, live)
	}
	_, now, err := s.PreferenceChanges(ctx, time.Time{}, 0)
	if err != nil {
		t.Fatal(err)
	}

	// Bounded an hour before the writes: every tombstone is younger.
	if n, err := s.pruneTombstones(ctx, now.Add(-time.Hour), 2); err != nil || n != 0 {
		t.Fatalf("prune before the writes = %d, %v; want 0, nil", n, err)
	}
	if tomb, _ := count(); tomb != 5 {
		t.Fatalf("after pruning none: %d tombstones, want 5", tomb)
	}
	// Bounded after them, in batches of 2: all five, in three statements.
	n, err := s.pruneTombstones(ctx, now.Add(time.Hour), 2)
	if err != nil || n != 5 {
		t.Fatalf("prune after the writes = %d, %v; want 5, nil", n, err)
	}
	if tomb, live := count(); tomb != 0 || live != 2 {
		t.Errorf("after pruning: %d tombstones and %d live rows, want 0 and 2", tomb, live)
	}
	got, err := s.Preferences(ctx, append([]string{"open_id:live", "open_id:back"}, gone...))
	if err != nil {
		t.Fatal(err)
	}
	live, back := got["open_id:live"], got["open_id:back"]
	if len(got) != 2 || !live.Mutes("a", now) || !back.Mutes("a", now) {
		t.Errorf("after pruning, preferences %+v; want open_id:live and open_id:back muting a", got)
	}
	if n, err := s.PruneTombstones(ctx, now.Add(time.Hour)); err != nil || n != 0 {
		t.Errorf("PruneTombstones again = %d, %v; want 0, nil", n, err)
	}
}
