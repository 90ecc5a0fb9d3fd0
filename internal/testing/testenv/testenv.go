package testenv

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Required reports whether missing services must fail tests.
func Required() bool { return os.Getenv("GATE_TEST_REQUIRE_SERVICES") == "1" }

func need(tb testing.TB, name, env string) string {
	tb.Helper()
	v := os.Getenv(env)
	if v == "" {
		msg := fmt.Sprintf("%s not configured: set %s (make test starts the service and sets it)", name, env)
		if Required() {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	return v
}

// RedisURL returns the URL of a real Redis for tests.
func RedisURL(tb testing.TB) string { return need(tb, "redis", "GATE_TEST_REDIS_URL") }

// RedisClusterURL returns the seed URL of a real Redis Cluster for tests,
// redis://host:7000?addr=host:7001&addr=host:7002 (scripts/redis-cluster.sh
// starts one).
func RedisClusterURL(tb testing.TB) string {
	return need(tb, "redis cluster", "GATE_TEST_REDIS_CLUSTER_URL")
}

// DatabaseURL returns the URL of a real PostgreSQL database for tests.
func DatabaseURL(tb testing.TB) string { return need(tb, "postgres", "GATE_TEST_DATABASE_URL") }

// NacosAddr returns the host:port of a real Nacos server for tests.
func NacosAddr(tb testing.TB) string { return need(tb, "nacos", "GATE_TEST_NACOS_ADDR") }

var seq atomic.Int64

// Unique returns a name no other test in this or any concurrent run uses,
// so tests can share one Redis or database without colliding.
func Unique(prefix string) string {
	return fmt.Sprintf("%s-%d-%d-%d", strings.TrimSuffix(prefix, "-"), os.Getpid(), time.Now().UnixNano()%1e9, seq.Add(1))
}
