package gormstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/testing/testenv"
)

// benchRows is GATE_BENCH_PARTITION_ROWS (the ledger rows a partition
// benchmark loads; the audit gets 3 for every 10), or small by default so
// that make bench stays quick. The figure is 10,000,000.
func benchRows(b *testing.B) int {
	v := os.Getenv("GATE_BENCH_PARTITION_ROWS")
	if v == "" {
		return 100_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		b.Fatalf("GATE_BENCH_PARTITION_ROWS=%q: want a whole number", v)
	}
	return n
}

// benchDays is how many daily audit partitions the benchmarks spread rows
// over: 90 days of retention.
const benchDays = 90

// openDays opens a store whose tables are cut as a gate keeping 90 days
// would cut them (24h audit partitions; the ledger's in spans of 90 days),
// with the partitions of the last 90 days made, and the rows
// of the benchmark loaded into them: rows ledger rows spread evenly over
// those days, and 3 audit rows for 10 of them. app names its connections
// for pgMeter.
func openDays(b testing.TB, rows int, app string) *Store {
	u, err := url.Parse(testenv.PostgresSchemaURL(b))
	if err != nil {
		b.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	s := MustOpen(b, Options{DatabaseURL: u.String(), LedgerRetention: benchDays * 24 * time.Hour})
	ctx := context.Background()
	now := time.Now()
	for _, t := range partTables {
		// A new schema's legacy partitions are empty: make way for the past.
		if err := s.ddl(ctx, fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s_legacy; DROP TABLE %s_legacy`, t.name, t.name, t.name)); err != nil {
			b.Fatal(err)
		}
		span := s.span(t)
		for lo := floorTo(now, span).Add(-span); lo.After(now.Add(-benchDays * 24 * time.Hour).Add(-span)); lo = lo.Add(-span) {
			if err := s.addPartition(ctx, t, lo, lo.Add(span)); err != nil {
				b.Fatal(err)
			}
		}
	}
	from := floorTo(now, 24*time.Hour).Add(-benchDays * 24 * time.Hour)
	began := time.Now()
	for _, q := range []string{
		`INSERT INTO decisions ("key", outcome, decided_at, scene, recipient, priority, tz)
SELECT md5(i::text), 'forward', $1::timestamptz + i * ($3::interval / $2::int), 'alert.disk_full', 'open_id:ou_' || (i % 50000), 'normal', ''
FROM generate_series(1, $2::int) i`,
		`INSERT INTO suppressions (message_id, scene, recipient, priority, limit_scope, limit_window_ms, limit_max, count_seen,
	reason, rules_version, decided_at, next_allowed_at, payload)
SELECT md5(i::text), 'alert.disk_full', 'open_id:ou_' || (i % 50000), 'normal', 'scene', 3600000, 1, 1, 'limit', 'v1',
	$1::timestamptz + i * ($3::interval / $2::int), $1::timestamptz + i * ($3::interval / $2::int) + interval '1 hour', repeat('x', 200)
FROM generate_series(1, $2::int * 3 / 10) i`,
	} {
		if rows == 0 {
			break
		}
		if _, err := s.sqlDB.ExecContext(ctx, q, from, rows, fmt.Sprintf("%d days", benchDays)); err != nil {
			b.Fatal(err)
		}
	}
	for _, t := range partTables {
		if _, err := s.sqlDB.ExecContext(ctx, `VACUUM ANALYZE `+t.name); err != nil {
			b.Fatal(err)
		}
	}
	if rows > 0 {
		b.Logf("loaded %d ledger and %d audit rows over %d days in %s", rows, rows*3/10, benchDays, time.Since(began).Round(time.Millisecond))
	}
	return s
}

// BenchmarkCommitPartitions is the hot path's PostgreSQL work for a batch
// of 500 (Decided, then Commit), decided now, with the tables of a gate that
// keeps 90 days: empty, and holding GATE_BENCH_PARTITION_ROWS ledger rows
// (plus 3 audit rows for 10) over 90 daily partitions. The target:
// pg-µs/record of loaded at most 1.1 times empty's, at 10M rows.
func BenchmarkCommitPartitions(b *testing.B) {
	for _, c := range []struct {
		name string
		rows int
	}{{"empty", 0}, {"loaded", benchRows(b)}} {
		b.Run(c.name, func(b *testing.B) {
			app := fmt.Sprintf("partbench%d", rand.Uint64())
			s := openDays(b, c.rows, app)
			ctx := context.Background()
			meter := &pgMeter{db: s.sqlDB, app: app}
			w := benchWorkload{rnd: rand.New(rand.NewPCG(1, 2)), at: time.Now()}
			if err := meter.start(ctx); err != nil {
				b.Fatal(err)
			}
			n := 0
			b.ResetTimer()
			for b.Loop() {
				batch := w.batch(500)
				keys := make([]string, len(batch))
				for i, r := range batch {
					keys[i] = r.Key
				}
				if _, err := s.Decided(ctx, keys); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Commit(ctx, batch); err != nil {
					b.Fatal(err)
				}
				n += len(batch)
			}
			b.StopTimer()
			cost, err := meter.stop(ctx, n)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(cost.allMicros, "pg-µs/record")
			b.ReportMetric(cost.ownMicros, "backend-µs/record")
		})
	}
}

// BenchmarkDropPartition drops a day of the audit rows and the ledger (the
// oldest of 90 holding GATE_BENCH_PARTITION_ROWS) while a writer commits a
// batch of 50 every 2 ms, and reports the longest commit while the drop ran
// (target: at most 50 ms), against the longest before it, and how long the
// detach and the drop took.
func BenchmarkDropPartition(b *testing.B) {
	rows := benchRows(b)
	for range b.N {
		b.StopTimer()
		s := openDays(b, rows, fmt.Sprintf("dropbench%d", rand.Uint64()))
		ctx := context.Background()
		var (
			mu                 sync.Mutex
			during, before     time.Duration
			dropping, finished bool
			werr               error
		)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			w := benchWorkload{rnd: rand.New(rand.NewPCG(3, 4)), at: time.Now()}
			for {
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
				began := time.Now()
				if _, err := s.Commit(ctx, w.batch(50)); err != nil {
					werr = err
					return
				}
				d := time.Since(began)
				mu.Lock()
				if dropping && !finished {
					during = max(during, d)
				} else if !dropping {
					before = max(before, d)
				}
				mu.Unlock()
			}
		})
		time.Sleep(time.Second)
		oldest := floorTo(time.Now(), 24*time.Hour).Add(-(benchDays - 1) * 24 * time.Hour)
		mu.Lock()
		dropping = true
		mu.Unlock()
		b.StartTimer()
		// The oldest day of audit rows, and the ledger's oldest span, each
		// detached in its own transaction, then dropped, as prunePartitions
		// does.
		var detach, drop time.Duration
		for _, t := range []partTable{suppressionsTable, decisionsTable} {
			p := partName(t, floorTo(oldest, s.span(t)))
			began := time.Now()
			if err := s.ddl(ctx, fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s`, t.name, p)); err != nil {
				b.Fatal(err)
			}
			detach = max(detach, time.Since(began))
			began = time.Now()
			if err := s.ddl(ctx, `DROP TABLE `+p); err != nil {
				b.Fatal(err)
			}
			drop = max(drop, time.Since(began))
		}
		b.StopTimer()
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		finished = true
		mu.Unlock()
		close(stop)
		wg.Wait()
		if werr != nil {
			b.Fatal(werr)
		}
		b.ReportMetric(float64(during)/float64(time.Millisecond), "max-write-ms-during-drop")
		b.ReportMetric(float64(before)/float64(time.Millisecond), "max-write-ms-before")
		b.ReportMetric(float64(detach)/float64(time.Millisecond), "max-detach-ms")
		b.ReportMetric(float64(drop)/float64(time.Millisecond), "max-drop-ms")
	}
}
