package redisstore

import (
	"context"
	"testing"
	"time"

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
func TestConformanceOnCluster(t *testing.T) { clusterConformance(t, false) }

// TestConformanceOnClusterLegacy runs it with LegacyKeys: the old keys share
// the recipient's slot, so one script call reads and writes both layouts.
func TestConformanceOnClusterLegacy(t *testing.T) { clusterConformance(t, true) }

func clusterConformance(t *testing.T, legacy bool) {
	storetest.Run(t, clusterHarness(legacy))
}

// clusterHarness opens stores on the test Redis Cluster, with LegacyKeys
// when legacy is set, each under a key prefix of its own.
func clusterHarness(legacy bool) storetest.Harness {
	return storetest.Harness{
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
			open := func(t *testing.T, c redis.UniversalClient) *Store {
				s, err := New(c, Options{KeyPrefix: prefix, Timeout: time.Second, LegacyKeys: legacy})
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return s
			}
			s := open(t, raw)
			other := func(t *testing.T) gate.WindowStore { return open(t, newClusterClient(t)) }
			// The nodes share this machine's clock, so backend's TIME may
			// ask any of them.
			return backend(s, raw, other)
		},
	}
}
