package prefcache_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/prefcache"
)

// countingStore is a fake store for the cache's own logic: it counts the
// lookups and the recipients they asked about.
type countingStore struct {
	mu      sync.Mutex
	prefs   map[string]gate.Preferences
	lookups [][]string
	clock   time.Time
	changes []gate.PreferenceChange // what write logged, oldest first
}

// write stores p (nil: deletes recipient) as another gate would, logging
// the change at the store's clock, which then moves on a second.
func (s *countingStore) write(recipient string, p *gate.Preferences) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p == nil {
		delete(s.prefs, recipient)
	} else {
		s.prefs[recipient] = *p
	}
	s.changes = append(s.changes, gate.PreferenceChange{Recipient: recipient, At: s.clock})
	s.clock = s.clock.Add(time.Second)
}

func (s *countingStore) Preferences(_ context.Context, rs []string) (map[string]gate.Preferences, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lookups = append(s.lookups, slices.Clone(rs))
	out := map[string]gate.Preferences{}
	for _, r := range rs {
		if p, ok := s.prefs[r]; ok {
			out[r] = p
		}
	}
	return out, nil
}

func (s *countingStore) PutPreferences(_ context.Context, p gate.Preferences) (gate.Preferences, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.prefs[p.Recipient] = p
	return p, nil
}

func (s *countingStore) DeletePreferences(_ context.Context, r string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.prefs, r)
	return nil
}

func (s *countingStore) PreferenceChanges(_ context.Context, since time.Time, limit int) ([]gate.PreferenceChange, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if since.IsZero() {
		return nil, s.clock, nil
	}
	var out []gate.PreferenceChange
	for _, c := range s.changes {
		if c.At.After(since) && len(out) < limit {
			out = append(out, c)
		}
	}
	return out, s.clock, nil
}

func TestCacheRemembersAndBounds(t *testing.T) {
	ctx := context.Background()
	store := &countingStore{prefs: map[string]gate.Preferences{"open_id:a": {Recipient: "open_id:a", MutedScenes: []string{"s"}}}, clock: time.Now()}
	// This test is about the LRU: the cache must not mirror the store.
	c := prefcache.New(store, prefcache.Options{Size: 3, Mirror: -1})
	// Before its first poll the cache cannot know of changes: it caches nothing.
	for range 2 {
		if _, err := c.Preferences(ctx, []string{"open_id:a"}); err != nil {
			t.Fatal(err)
		}
	}
	if c.Len() != 0 || len(store.lookups) != 2 {
		t.Fatalf("unsynced: %d cached, %d lookups; want 0 and 2", c.Len(), len(store.lookups))
	}
	if err := c.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	store.lookups = nil
	got, err := c.Preferences(ctx, []string{"open_id:a", "open_id:b", "open_id:c"})
	if a := got["open_id:a"]; err != nil || len(got) != 1 || !a.Mutes("s", time.Now()) {
		t.Fatalf("Preferences = %v, %v; want a's", got, err)
	}
	// Again: all three from memory, b and c as recipients without any.
	if got, _ := c.Preferences(ctx, []string{"open_id:c", "open_id:a", "open_id:b"}); len(got) != 1 || len(store.lookups) != 1 {
		t.Errorf("second batch: %v with %d lookups (%q), want a's from memory after one lookup", got, len(store.lookups), store.lookups)
	}
	if want := []string{"open_id:a", "open_id:b", "open_id:c"}; !slices.Equal(store.lookups[0], want) {
		t.Errorf("lookup asked %q, want %q in one call", store.lookups[0], want)
	}
	// d evicts the least recently used (c was used before a and b).
	c.Preferences(ctx, []string{"open_id:d"})
	c.Preferences(ctx, []string{"open_id:a", "open_id:b", "open_id:c"})
	if n := c.Len(); n != 3 {
		t.Errorf("Len = %d, want the bound 3", n)
	}
	if last := store.lookups[len(store.lookups)-1]; !slices.Equal(last, []string{"open_id:c"}) {
		t.Errorf("after d came, the lookup asked %q, want only the evicted c", last)
	}
	// A write through the cache drops its recipient at once.
	if _, err := c.PutPreferences(ctx, gate.Preferences{Recipient: "open_id:b", DigestScenes: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Preferences(ctx, []string{"open_id:b"}); !ptr(got["open_id:b"]).DigestOnly("s") {
		t.Errorf("after a put through the cache: %v, want b's new preferences", got)
	}
}

func ptr(p gate.Preferences) *gate.Preferences { return &p }

// TestCacheMirrors: a store with at most Mirror preferences is held whole,
// so recipients without preferences cost no lookup at all; other gates'
// changes reach the mirror by the next poll, which reads only the changed
// recipients; a store that outgrows Mirror turns the cache back into an
// LRU.
func TestCacheMirrors(t *testing.T) {
	ctx := context.Background()
	store := &countingStore{prefs: map[string]gate.Preferences{}, clock: time.Now()}
	store.write("open_id:a", &gate.Preferences{Recipient: "open_id:a", MutedScenes: []string{"s"}})
	store.write("open_id:gone", &gate.Preferences{Recipient: "open_id:gone"})
	store.write("open_id:gone", nil) // a tombstone: listed as a change, without preferences
	// The fake's clock moves a second a write: a margin of 1 ms re-reads
	// nothing a poll has seen.
	c := prefcache.New(store, prefcache.Options{Size: 10, Mirror: 3, Margin: time.Millisecond})
	if err := c.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"open_id:a", "open_id:gone", "open_id:gone"}}; !slices.EqualFunc(store.lookups, want, slices.Equal) {
		t.Fatalf("the mirror's read asked %q, want %q", store.lookups, want)
	}
	store.lookups = nil
	for range 3 {
		got, err := c.Preferences(ctx, []string{"open_id:a", "open_id:b", "open_id:gone"})
		if err != nil || len(got) != 1 || !ptr(got["open_id:a"]).Mutes("s", time.Now()) {
			t.Fatalf("Preferences = %v, %v; want a's alone", got, err)
		}
	}
	if len(store.lookups) != 0 {
		t.Fatalf("mirrored: %d lookups (%q), want none", len(store.lookups), store.lookups)
	}

	// Another gate mutes b and deletes a.
	store.write("open_id:b", &gate.Preferences{Recipient: "open_id:b", DigestScenes: []string{"s"}})
	store.write("open_id:a", nil)
	if got, _ := c.Preferences(ctx, []string{"open_id:a", "open_id:b"}); len(got) != 1 || got["open_id:a"].Recipient == "" {
		t.Fatalf("before the poll: %v, want a's preferences still", got)
	}
	if err := c.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"open_id:b", "open_id:a"}}; !slices.EqualFunc(store.lookups, want, slices.Equal) {
		t.Errorf("the poll asked %q, want only the changed %q", store.lookups, want)
	}
	if got, _ := c.Preferences(ctx, []string{"open_id:a", "open_id:b"}); len(got) != 1 || !ptr(got["open_id:b"]).DigestOnly("s") {
		t.Fatalf("after the poll: %v, want b's alone", got)
	}

	// A write through this cache is seen at once.
	if _, err := c.PutPreferences(ctx, gate.Preferences{Recipient: "open_id:c", MutedScenes: []string{"t"}}); err != nil {
		t.Fatal(err)
	}
	store.lookups = nil
	if got, _ := c.Preferences(ctx, []string{"open_id:c"}); !ptr(got["open_id:c"]).Mutes("t", time.Now()) || len(store.lookups) != 0 {
		t.Fatalf("after a put through the cache: %v with %d lookups, want c's from the mirror", got, len(store.lookups))
	}

	// Two more recipients with preferences: more than Mirror (3) hold any,
	// so the cache looks up what it has not seen, as an LRU.
	store.write("open_id:d", &gate.Preferences{Recipient: "open_id:d", MutedScenes: []string{"s"}})
	store.write("open_id:e", &gate.Preferences{Recipient: "open_id:e", MutedScenes: []string{"s"}})
	if err := c.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	store.lookups = nil
	got, err := c.Preferences(ctx, []string{"open_id:d", "open_id:z"})
	if err != nil || len(got) != 1 || !ptr(got["open_id:d"]).Mutes("s", time.Now()) {
		t.Fatalf("outgrown: %v, %v; want d's", got, err)
	}
	if want := [][]string{{"open_id:d", "open_id:z"}}; !slices.EqualFunc(store.lookups, want, slices.Equal) {
		t.Errorf("outgrown: lookups %q, want %q", store.lookups, want)
	}
}
