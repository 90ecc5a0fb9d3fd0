package porttest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// PreferenceHarness opens the preference store under test.
type PreferenceHarness struct {
	// Open returns an empty preference store that only the calling test
	// uses.
	Open func(t *testing.T) gate.PreferenceStore
}

// RunPreferenceStore is the behaviour every gate.PreferenceStore must
// have: writes are canonical and whole, reads are batched, deletes are
// idempotent, every write and delete is a change reported on the store's
// clock, and bad input wraps gate.ErrBadRequest.
func RunPreferenceStore(t *testing.T, h PreferenceHarness) {
	t.Run("PutReadReplaceDeleteChanges", func(t *testing.T) { testPreferences(t, h) })
}

// testPreferences: put, read back in a batch, replace, delete
// idempotently, and report every write and delete as a change on the
// store's own clock. Times are kept to the microsecond, as PostgreSQL
// keeps them.
func testPreferences(t *testing.T, h PreferenceHarness) {
	ctx := context.Background()
	s := h.Open(t)
	_, start, err := s.PreferenceChanges(ctx, time.Time{}, 0)
	if err != nil || start.IsZero() {
		t.Fatalf("PreferenceChanges(zero) = %v, %v; want the store's clock", start, err)
	}
	until := time.Date(2026, 12, 1, 8, 0, 0, 123456789, time.FixedZone("x", 3600))
	put, err := s.PutPreferences(ctx, gate.Preferences{Recipient: "open_id:ou_a", MutedScenes: []string{"b", "a", "b"}, MutedUntil: until})
	if err != nil {
		t.Fatalf("PutPreferences: %v", err)
	}
	if put.UpdatedAt.Before(start) || !slices.Equal(put.MutedScenes, []string{"a", "b"}) || len(put.DigestScenes) != 0 {
		t.Errorf("put = %+v, want updated_at at or after %v and muted [a b]", put, start)
	}
	if _, err := s.PutPreferences(ctx, gate.Preferences{Recipient: "email:x@y", DigestScenes: []string{"d"}}); err != nil {
		t.Fatalf("PutPreferences: %v", err)
	}
	got, err := s.Preferences(ctx, []string{"open_id:ou_a", "email:x@y", "open_id:nobody"})
	if err != nil {
		t.Fatalf("Preferences: %v", err)
	}
	if len(got) != 2 {
		t.Fatalf("Preferences = %+v, want the two recipients that have some", got)
	}
	a := got["open_id:ou_a"]
	if !a.MutedUntil.Equal(until.Truncate(time.Microsecond)) || !slices.Equal(a.MutedScenes, []string{"a", "b"}) || !a.UpdatedAt.Equal(put.UpdatedAt) {
		t.Errorf("read back %+v, want %+v", a, put)
	}
	if d := got["email:x@y"]; !d.DigestOnly("d") || d.Mutes("d", until) {
		t.Errorf("read back %+v, want digest_only [d], nothing muted", d)
	}

	// A replacement is whole: fields not given are gone.
	again, err := s.PutPreferences(ctx, gate.Preferences{Recipient: "open_id:ou_a", DigestScenes: []string{"c"}})
	if err != nil {
		t.Fatalf("PutPreferences again: %v", err)
	}
	got, _ = s.Preferences(ctx, []string{"open_id:ou_a"})
	if a := got["open_id:ou_a"]; len(a.MutedScenes) != 0 || !a.MutedUntil.IsZero() || !a.DigestOnly("c") || a.UpdatedAt.Before(put.UpdatedAt) {
		t.Errorf("after a replacement: %+v, want only digest_only [c], updated at or after %v", a, put.UpdatedAt)
	}

	for range 2 { // idempotent
		if err := s.DeletePreferences(ctx, "open_id:ou_a"); err != nil {
			t.Fatalf("DeletePreferences: %v", err)
		}
	}
	if err := s.DeletePreferences(ctx, "open_id:never"); err != nil {
		t.Errorf("DeletePreferences of none: %v, want nil", err)
	}
	got, _ = s.Preferences(ctx, []string{"open_id:ou_a", "email:x@y"})
	if _, ok := got["open_id:ou_a"]; ok || len(got) != 1 {
		t.Errorf("after delete: %+v, want only email:x@y", got)
	}

	changes, now, err := s.PreferenceChanges(ctx, start.Add(-time.Second), 10)
	if err != nil {
		t.Fatalf("PreferenceChanges: %v", err)
	}
	var who []string
	for i, c := range changes {
		who = append(who, c.Recipient)
		if i > 0 && c.At.Before(changes[i-1].At) {
			t.Errorf("changes %+v are not oldest first", changes)
		}
		if c.At.After(now) {
			t.Errorf("change %+v after the clock %v read with them", c, now)
		}
	}
	slices.Sort(who)
	if !slices.Equal(who, []string{"email:x@y", "open_id:ou_a"}) {
		t.Errorf("changed recipients %q, want email:x@y and open_id:ou_a (its delete a tombstone)", who)
	}
	// SQLite's clock has milliseconds: a delete may share its replacement's
	// time, and another recipient's write may sort after it.
	if i := slices.IndexFunc(changes, func(c gate.PreferenceChange) bool { return c.Recipient == "open_id:ou_a" }); i < 0 || changes[i].At.Before(again.UpdatedAt) {
		t.Errorf("changes %+v: want open_id:ou_a's delete, not before %v", changes, again.UpdatedAt)
	}
	if cs, _, _ := s.PreferenceChanges(ctx, changes[len(changes)-1].At, 10); len(cs) != 0 {
		t.Errorf("changes after the last = %+v, want none", cs)
	}
	if cs, _, _ := s.PreferenceChanges(ctx, start.Add(-time.Second), 1); len(cs) != 1 {
		t.Errorf("changes with limit 1 = %+v, want one", cs)
	}

	for _, bad := range []gate.Preferences{{Recipient: "nope"}, {Recipient: "open_id:a", MutedScenes: []string{""}}} {
		if _, err := s.PutPreferences(ctx, bad); !errors.Is(err, gate.ErrBadRequest) {
			t.Errorf("PutPreferences(%+v) = %v, want ErrBadRequest", bad, err)
		}
	}
	if err := s.DeletePreferences(ctx, "phone:1"); !errors.Is(err, gate.ErrBadRequest) {
		t.Errorf("DeletePreferences(phone:1) = %v, want ErrBadRequest", err)
	}
}
