package prefcache_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/gormstore"
	"github.com/antifatigue/gate/internal/prefcache"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// TestCacheSeesOtherGates writes through one store handle (another gate)
// and polls until the cache in front of a second handle sees it: one
// poll's work, asserted with a generous deadline, never a timing.
// Each runs the cache mirroring the store whole (the default, for a store
// of few preferences) and as an LRU.
func TestCacheSeesOtherGatesSQLite(t *testing.T) {
	for name, mirror := range map[string]int{"mirror": 0, "lru": -1} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gate.db")
			testSeesOtherGates(t, gormstore.Options{SQLitePath: path}, gormstore.Options{SQLitePath: path}, mirror)
		})
	}
}

func TestCacheSeesOtherGatesPostgres(t *testing.T) {
	for name, mirror := range map[string]int{"mirror": 0, "lru": -1} {
		t.Run(name, func(t *testing.T) {
			url := testenv.PostgresSchemaURL(t)
			testSeesOtherGates(t, gormstore.Options{DatabaseURL: url}, gormstore.Options{DatabaseURL: url}, mirror)
		})
	}
}

func testSeesOtherGates(t *testing.T, one, two gormstore.Options, mirror int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writer := mustOpen(t, one)
	reader := mustOpen(t, two)
	// A recipient with preferences before the cache starts: a mirror reads
	// it with the rest.
	const early = "open_id:ou_early"
	if _, err := writer.PutPreferences(ctx, gate.Preferences{Recipient: early, DigestScenes: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	c := prefcache.New(reader, prefcache.Options{Poll: 50 * time.Millisecond, Mirror: mirror})
	if err := c.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	const r = "open_id:ou_other"
	if got, err := c.Preferences(ctx, []string{r, early}); err != nil || len(got) != 1 || !ptr(got[early]).DigestOnly("s") {
		t.Fatalf("before: %v, %v; want the early recipient's alone (the other cached as none)", got, err)
	}
	if _, err := writer.PutPreferences(ctx, gate.Preferences{Recipient: r, MutedScenes: []string{gate.MuteAll}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the other gate's put", func() bool {
		got, err := c.Preferences(ctx, []string{r})
		return err == nil && ptr(got[r]).Mutes("x", time.Now())
	})
	if err := writer.DeletePreferences(ctx, r); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the other gate's delete", func() bool {
		got, err := c.Preferences(ctx, []string{r})
		return err == nil && len(got) == 0
	})
}

func mustOpen(t *testing.T, o gormstore.Options) *gormstore.Store {
	t.Helper()
	s, err := gormstore.Open(context.Background(), o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitFor polls ok until it holds, failing the test when it has not within
// a deadline far beyond the poll interval.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not seen within 30 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
