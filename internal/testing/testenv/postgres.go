package testenv

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/testing/pgschema"
)

// PostgresSchemaURL creates a fresh schema in the test database and returns
// a URL whose search_path points at it, so tests running at the same time
// never see each other's tables. The schema is dropped when the test ends.
func PostgresSchemaURL(tb testing.TB) string {
	tb.Helper()
	base := DatabaseURL(tb)
	schema := strings.NewReplacer("-", "_").Replace(Unique("t"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, drop, err := pgschema.Create(ctx, base, schema)
	if err != nil {
		tb.Fatalf("%v (database %s)", err, redact(base))
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := drop(ctx); err != nil {
			tb.Log(err)
		}
	})
	return u
}

func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable url)"
	}
	return u.Redacted()
}
