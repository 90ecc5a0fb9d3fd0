package redisstore

import (
	"context"
	"strings"
	"sync/atomic"
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
// three masters. Every decision's script touches a scene key and the
// recipient's cap key: were they in different slots, Redis would answer
// CROSSSLOT and every case would fail.
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
			ctx := context.Background()
			other := func(t *testing.T) gate.WindowStore { return newStore(t, newClusterClient(t), prefix) }
			// The nodes share this machine's clock, so backend's TIME may
			// ask any of them.
			return backend(s, raw, other, func(t *testing.T, recipient string) int {
				// Every key of a recipient shares its cap key's slot.
				tagged := strings.TrimSuffix(s.CapKey(recipient), "c")
				slot, err := raw.ClusterKeySlot(ctx, s.CapKey(recipient)).Result()
				if err != nil {
					t.Fatalf("CLUSTER KEYSLOT: %v", err)
				}
				var n atomic.Int64
				err = raw.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
					keys, err := node.ClusterGetKeysInSlot(ctx, int(slot), 10000).Result()
					for _, k := range keys {
						// EXISTS expires a key whose time has come, as any read would.
						if strings.HasPrefix(k, tagged) {
							n.Add(node.Exists(ctx, k).Val())
						}
					}
					return err
				})
				if err != nil {
					t.Fatalf("CLUSTER GETKEYSINSLOT %d: %v", slot, err)
				}
				return int(n.Load())
			})
		},
	})
}
