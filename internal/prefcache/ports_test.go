package prefcache_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/gormstore"
	"github.com/antifatigue/gate/internal/prefcache"
	"github.com/antifatigue/gate/internal/testing/porttest"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// The cache in front of a store is a preference store too: writes through
// it read back at once, in both of its modes, over either database.
func TestPreferenceStoreSQLite(t *testing.T) {
	runPreferenceStore(t, func(t *testing.T) gormstore.Options {
		return gormstore.Options{SQLitePath: filepath.Join(t.TempDir(), "gate.db")}
	})
}

func TestPreferenceStorePostgres(t *testing.T) {
	runPreferenceStore(t, func(t *testing.T) gormstore.Options {
		return gormstore.Options{DatabaseURL: testenv.PostgresSchemaURL(t)}
	})
}

func runPreferenceStore(t *testing.T, opts func(t *testing.T) gormstore.Options) {
	for name, mirror := range map[string]int{"mirror": 0, "lru": -1} {
		t.Run(name, func(t *testing.T) {
			porttest.RunPreferenceStore(t, porttest.PreferenceHarness{Open: func(t *testing.T) gate.PreferenceStore {
				c := prefcache.New(mustOpen(t, opts(t)), prefcache.Options{Mirror: mirror})
				// The first poll fills a mirror; an LRU starts remembering.
				if err := c.Poll(context.Background()); err != nil {
					t.Fatal(err)
				}
				return c
			}})
		})
	}
}
