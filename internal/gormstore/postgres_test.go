package gormstore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testenv"
)

// postgresOptions gives the test a schema of its own in the test database:
// tests of other packages may use the same database at the same time.
func postgresOptions(t *testing.T) Options {
	return Options{DatabaseURL: testenv.PostgresSchemaURL(t)}
}

func TestPostgres(t *testing.T) { runConformance(t, postgresOptions) }

func TestPostgresUnreachable(t *testing.T) {
	start := time.Now()
	_, err := Open(context.Background(), Options{
		DatabaseURL: "postgres://gate_test:s3cret@127.0.0.1:1/gate_test?sslmode=disable&connect_timeout=2",
	})
	if !errors.Is(err, gate.ErrUnavailable) {
		t.Errorf("Open of 127.0.0.1:1: got %v, want an error wrapping ErrUnavailable", err)
	}
	if err != nil && strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Open error %q repeats the password", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Open of 127.0.0.1:1 took %v, want it to fail fast", d)
	}
}

// TestPostgresGoesAway opens a store through a proxy, then stops the
// proxy: the database has become unreachable under an open store.
func TestPostgresGoesAway(t *testing.T) {
	u, err := url.Parse(testenv.PostgresSchemaURL(t))
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, u.Host)
	u.Host = p.addr()
	q := u.Query()
	q.Set("connect_timeout", "2")
	u.RawQuery = q.Encode()
	s := MustOpen(t, Options{DatabaseURL: u.String()})
	ctx := context.Background()
	MustCommit(t, s, record("before", "x", gate.OutcomeForward, t0))

	p.stop()
	if err := s.Ping(ctx); !errors.Is(err, gate.ErrUnavailable) {
		t.Errorf("Ping: got %v, want an error wrapping ErrUnavailable", err)
	}
	if _, err := s.Commit(ctx, []gate.Record{record("after", "x", gate.OutcomeForward, t0)}); !errors.Is(err, gate.ErrUnavailable) {
		t.Errorf("Commit: got %v, want an error wrapping ErrUnavailable", err)
	}
	if _, err := s.Decided(ctx, []string{"before"}); !errors.Is(err, gate.ErrUnavailable) {
		t.Errorf("Decided: got %v, want an error wrapping ErrUnavailable", err)
	}
}

// BenchmarkCommit500 commits batches of 500 new records (60% forwarded,
// 30% suppressed with an audit row, 10% dropped, over 20 scenes) and
// reports records per second.
func BenchmarkCommit500(b *testing.B) {
	for _, d := range []struct {
		name string
		opts func(b *testing.B) Options
	}{
		{"postgres", func(b *testing.B) Options { return Options{DatabaseURL: testenv.PostgresSchemaURL(b)} }},
		{"sqlite", func(b *testing.B) Options { return Options{SQLitePath: b.TempDir() + "/gate.db"} }},
	} {
		b.Run(d.name, func(b *testing.B) {
			s := MustOpen(b, d.opts(b))
			ctx := context.Background()
			n := 0
			cpu0 := postgresCPU()
			b.ResetTimer()
			for b.Loop() {
				batch := make([]gate.Record, 500)
				for i := range batch {
					n++
					key, scene, at := fmt.Sprintf("b%09d", n), fmt.Sprintf("scene%02d", n%20), t0.Add(time.Duration(n)*time.Millisecond)
					switch {
					case i%10 < 6:
						batch[i] = record(key, scene, gate.OutcomeForward, at)
					case i%10 < 9:
						batch[i] = suppressed(key, scene, "open_id:ou_1", at)
					default:
						batch[i] = record(key, scene, gate.OutcomeDrop, at)
					}
				}
				if _, err := s.Commit(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
			if d.name == "postgres" {
				b.ReportMetric(float64(postgresCPU()-cpu0)/float64(time.Microsecond)/float64(n), "pg-µs/record")
			}
		})
	}
}

// BenchmarkDecided looks up batches of 256 keys, half of them committed,
// in a ledger of 100,000: the lookup of redelivered messages, and of those
// a commit found decided before.
func BenchmarkDecided(b *testing.B) {
	s := MustOpen(b, Options{DatabaseURL: testenv.PostgresSchemaURL(b)})
	ctx := context.Background()
	const ledger, batch = 100_000, 256
	for lo := 0; lo < ledger; lo += 1000 {
		recs := make([]gate.Record, 1000)
		for i := range recs {
			recs[i] = record(fmt.Sprintf("7f1c4d8e-2b3a-4c5d-9e8f-%012d", lo+i), "s", gate.OutcomeForward, t0)
		}
		if _, err := s.Commit(ctx, recs); err != nil {
			b.Fatal(err)
		}
	}
	n := 0
	cpu0 := postgresCPU()
	b.ResetTimer()
	for b.Loop() {
		keys := make([]string, batch)
		for i := range keys {
			if i%2 == 0 {
				keys[i] = fmt.Sprintf("7f1c4d8e-2b3a-4c5d-9e8f-%012d", (n*7919+i)%ledger)
			} else {
				keys[i] = fmt.Sprintf("new-%d-%d", n, i)
			}
		}
		known, err := s.Decided(ctx, keys)
		if err != nil {
			b.Fatal(err)
		}
		if len(known) != batch/2 {
			b.Fatalf("%d keys known, want %d", len(known), batch/2)
		}
		n++
	}
	b.ReportMetric(float64(postgresCPU()-cpu0)/float64(time.Microsecond)/float64(n*batch), "pg-µs/key")
}
