package testenv

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// ClusterKeys lists the keys that start with prefix on every master of c,
// so a test can clean up after itself on the shared test cluster. prefix
// must hold no glob character.
func ClusterKeys(ctx context.Context, c *redis.ClusterClient, prefix string) ([]string, error) {
	var mu sync.Mutex // ForEachMaster visits the masters in parallel
	var keys []string
	err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	})
	if err != nil {
		return keys, fmt.Errorf("scan %s* on the cluster: %w", prefix, err)
	}
	return keys, nil
}
