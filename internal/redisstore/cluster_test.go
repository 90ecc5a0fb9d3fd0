package redisstore

import (
	"context"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/storetest"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/redis/go-redis/v9"
)

// newClusterClient returns a client of the test Redis Cluster, closed when
// t ends.
func newClusterClient(t *testing.T) *redis.ClusterClient {
	t.Helper()
	opts, err := redis.ParseClusterURL(testenv.RedisClusterURL(t))
	if err != nil {
		t.Fatalf("parse GATE_TEST_REDIS_CLUSTER_URL: %v", err)
	}
	opts.ContextTimeoutEnabled = true
	c := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestConformanceOnCluster runs the window-store suite on a Redis Cluster of
// three masters.
func TestConformanceOnCluster(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Open: func(t *testing.T) storetest.Backend {
			raw := newClusterClient(t)
			prefix := testenv.Unique("gatetest")
			t.Cleanup(func() {
				keys, err := testenv.ClusterKeys(context.Background(), raw, prefix+":")
				if err != nil {
					t.Error(err)
				}
				for _, k := range keys {
					raw.Del(context.Background(), k)
				}
			})
			s := newStore(t, raw, prefix)
			other := func(t *testing.T) gate.WindowStore { return newStore(t, newClusterClient(t), prefix) }
			// The nodes share this machine's clock, so backend's TIME may
			// ask any of them.
			return backend(s, raw, other)
		},
	})
}
