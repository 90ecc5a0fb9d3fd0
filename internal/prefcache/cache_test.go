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

func (s *countingStore) PreferenceChanges(context.Context, time.Time, int) ([]gate.PreferenceChange, time.Time, error) {
	return nil, s.clock, nil
}

func TestCacheRemembersAndBounds(t *testing.T) {
	ctx := context.Background()
	store := &countingStore{prefs: map[string]gate.Preferences{"open_id:a": {Recipient: "open_id:a", MutedScenes: []string{"s"}}}, clock: time.Now()}
	c := prefcache.New(store, prefcache.Options{Size: 3})
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
