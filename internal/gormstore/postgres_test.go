package gormstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
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

// BenchmarkCommit500 commits batches of 500 new records in make bench's
// mix (bench/gatebench): about 70 % forwarded and 30 % suppressed with an
// audit row carrying the 1 KB message, random UUID keys, 5 scenes, each
// record with its recipient and priority. It reports records per second
// and, on PostgreSQL, what the server spent per record: pg-µs/record is
// every postgres process (background writer, WAL writer, checkpointer and
// the autovacuum workers the postmaster reaped included; other users of
// the server add to it), backend-µs/record the benchmark's own connections
// alone, wal-B/record the WAL written and fpi/krecord the full-page images
// in it, per 1,000 records (both cluster-wide). postgres-deferred is make
// bench's deferring gate: the 30 % held back are deferred, each held in its
// (recipient, scene) queue besides its audit row.
func BenchmarkCommit500(b *testing.B) {
	for _, d := range []struct {
		name string
		opts func(b *testing.B) Options
	}{
		{"postgres", func(b *testing.B) Options { return Options{DatabaseURL: testenv.PostgresSchemaURL(b)} }},
		{"postgres-deferred", func(b *testing.B) Options { return Options{DatabaseURL: testenv.PostgresSchemaURL(b)} }},
		{"sqlite", func(b *testing.B) Options { return Options{SQLitePath: b.TempDir() + "/gate.db"} }},
	} {
		b.Run(d.name, func(b *testing.B) { benchCommit(b, d.opts(b), nil) })
	}
}

// benchCommit is BenchmarkCommit500 on a store opened with opts, after
// setup (when set) has run on it.
func benchCommit(b *testing.B, opts Options, setup func(*Store) error) {
	var meter *pgMeter
	if opts.DatabaseURL != "" {
		u, err := url.Parse(opts.DatabaseURL)
		if err != nil {
			b.Fatal(err)
		}
		q := u.Query()
		q.Set("application_name", fmt.Sprintf("commitbench%d", rand.Uint64()))
		u.RawQuery = q.Encode()
		opts.DatabaseURL = u.String()
		meter = &pgMeter{app: q.Get("application_name")}
	}
	s := MustOpen(b, opts)
	ctx := context.Background()
	if setup != nil {
		if err := setup(s); err != nil {
			b.Fatal(err)
		}
	}
	w := benchWorkload{rnd: rand.New(rand.NewPCG(1, 2)), at: t0, deferred: strings.HasSuffix(b.Name(), "-deferred")}
	if meter != nil {
		meter.db = s.sqlDB
		if err := meter.start(ctx); err != nil {
			b.Fatal(err)
		}
	}
	n := 0
	b.ResetTimer()
	for b.Loop() {
		batch := w.batch(500)
		n += len(batch)
		if _, err := s.Commit(ctx, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
	if meter != nil {
		c, err := meter.stop(ctx, n)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(c.allMicros, "pg-µs/record")
		b.ReportMetric(c.ownMicros, "backend-µs/record")
		b.ReportMetric(c.walBytes, "wal-B/record")
		b.ReportMetric(c.fpiPerK, "fpi/krecord")
	}
}

// benchWorkload generates records as bench/gatebench's workload decides them.
type benchWorkload struct {
	rnd      *rand.Rand
	at       time.Time
	deferred bool // defer what is held back, rather than suppress it
	seq      uint64
}

var benchScenes = []string{"alert.disk_full", "alert.cpu_high", "reminder.approval", "marketing.promo", "digest.weekly"}

// batch is n records decided 60 µs apart (the gate at about 16,000 a
// second).
func (w *benchWorkload) batch(n int) []gate.Record {
	recs := make([]gate.Record, n)
	for i := range recs {
		w.at = w.at.Add(60 * time.Microsecond)
		var id [16]byte
		for j := range id {
			id[j] = byte(w.rnd.Uint32())
		}
		h := hex.EncodeToString(id[:])
		key := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
		scene := benchScenes[w.rnd.IntN(len(benchScenes))]
		recipient := fmt.Sprintf("open_id:ou_%024x", w.rnd.IntN(50_000))
		prio := gate.PriorityNormal
		if x := w.rnd.IntN(100); x < 2 {
			prio = gate.PriorityUrgent
		} else if x < 12 {
			prio = gate.PriorityHigh
		}
		r := gate.Record{Key: key, Scene: scene, Recipient: recipient, Priority: prio, Outcome: gate.OutcomeForward, At: w.at}
		if w.rnd.IntN(100) < 30 {
			r.Outcome = gate.OutcomeSuppress
			r.Suppression = &gate.Suppression{
				MessageID: key, Scene: scene, Recipient: recipient, Priority: prio,
				Scope: gate.ScopeScene, LimitWindow: gate.Duration(time.Hour), LimitMax: 1, CountSeen: 1,
				Reason: "limit", RulesVersion: "3f9c2a7d41b0e6c8", DecidedAt: w.at, NextAllowedAt: w.at.Add(time.Hour),
				Payload: benchPayload(key, scene, recipient, prio),
			}
			if w.deferred {
				w.seq++
				r.Outcome, r.Suppression.HeldAs = gate.OutcomeDefer, gate.HoldDefer
				r.Hold = &gate.Held{MessageID: key, Kind: gate.HoldDefer, Queue: gate.Queue{Recipient: recipient, Name: scene},
					Scene: scene, Priority: prio, Seq: w.seq, HeldAt: w.at, DueAt: w.at.Add(time.Hour), Expires: w.at.Add(6 * time.Hour),
					Fallback: gate.ActionSuppress, Reason: gate.ReasonLimit, Payload: []byte(r.Suppression.Payload)}
			}
		}
		recs[i] = r
	}
	return recs
}

// benchPayload is a message of 1 KB, as bench/gatebench publishes them.
func benchPayload(id, scene, recipient string, prio gate.Priority) string {
	head := fmt.Sprintf(`{"id":%q,"scene":%q,"receive_id_type":"open_id","receive_id":%q,"msg_type":"text","priority":%q,"content":"{\"text\":\"`,
		id, scene, strings.TrimPrefix(recipient, "open_id:"), prio)
	const tail, text = `\"}"}`, "disk /data on host db-17 is 95% full; free space before the nightly backup. "
	pad := 1024 - len(head) - len(tail)
	return head + strings.Repeat(text, pad/len(text)+1)[:pad] + tail
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
