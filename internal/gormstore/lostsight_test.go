package gormstore

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestLostSight: a commit error leaves its outcome unknown only when the
// statements may have reached PostgreSQL and no answer came back.
func TestLostSight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, connErr := pgconn.Connect(ctx, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if connErr == nil {
		t.Fatal("a connection to port 1 succeeded")
	}
	for _, tc := range []struct {
		name string
		err  error
		lost bool
	}{
		{"refused by PostgreSQL", &pgconn.PgError{Code: "40001"}, false},
		{"no connection made", connErr, false},
		{"a bare context error, which says not how far the commit went", fmt.Errorf("commit: %w", context.Canceled), true},
		{"connection lost while committing", fmt.Errorf("commit: %w", io.ErrUnexpectedEOF), true},
		{"SQLite's own error", sqliteCoded(5), false},
	} {
		if got := lostSight(tc.err); got != tc.lost {
			t.Errorf("%s (%v): lostSight %v, want %v", tc.name, tc.err, got, tc.lost)
		}
	}
}

// sqliteCoded is an error with SQLite's Code method.
type sqliteCoded int

func (c sqliteCoded) Error() string { return fmt.Sprintf("sqlite: code %d", int(c)) }
func (c sqliteCoded) Code() int     { return int(c) }
