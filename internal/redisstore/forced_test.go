package redisstore

import (
	"testing"

	"github.com/antifatigue/gate/internal/testing/storetest"
)

// TestForgetForced holds Forget after forced admissions to what they took
// (see storetest.RunForcedForget), on one Redis and on a Redis Cluster,
// with and without the old layout's keys: admit.lua writes what a forced
// admission took beside its entry, and forget.lua gives back that alone.
func TestForgetForced(t *testing.T) {
	t.Run("single", func(t *testing.T) { storetest.RunForcedForget(t, harness(Options{})) })
	t.Run("legacy", func(t *testing.T) { storetest.RunForcedForget(t, harness(Options{LegacyKeys: true})) })
	t.Run("cluster", func(t *testing.T) { storetest.RunForcedForget(t, clusterHarness(false)) })
	t.Run("cluster legacy", func(t *testing.T) { storetest.RunForcedForget(t, clusterHarness(true)) })
}
