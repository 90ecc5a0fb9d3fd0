package gormstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/procstat"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// backendsCPU sums the CPU time of the PostgreSQL backends serving s's
// connections (application_name app): unlike postgresCPU, the load of other
// users of the server is not in it. A backend that closes takes its time
// away; the benchmark's pool keeps its connections.
func backendsCPU(tb testing.TB, s *Store, app string) time.Duration {
	tb.Helper()
	var pids []int
	if err := s.db.Raw(`SELECT pid FROM pg_stat_activity WHERE application_name = ?`, app).Scan(&pids).Error; err != nil {
		tb.Fatalf("read the store's backends: %v", err)
	}
	var total time.Duration
	for _, pid := range pids {
		total += procstat.CPU(pid)
	}
	return total
}

// BenchmarkCommitHeld is what deferring costs the audit store beside
// suppressing: batches of 256 records of 1 KB messages for distinct
// recipients, 30 % held back (suppressed, or deferred with a held row and
// its queue), the deferring batches preceded by the Waiting lookup the
// pipeline makes for every message of a deferring scene. It reports records
// per second and the PostgreSQL CPU per record; compare the two sub-benchmarks
// of one run.
func BenchmarkCommitHeld(b *testing.B) {
	payload := strings.Repeat("x", 1000)
	for _, held := range []bool{false, true} {
		name := "suppress"
		if held {
			name = "defer"
		}
		b.Run(name, func(b *testing.B) {
			app := "bench_" + name
			s := MustOpen(b, Options{DatabaseURL: testenv.PostgresSchemaURL(b) + "&application_name=" + app})
			ctx := context.Background()
			n := 0
			cpu0, own0 := postgresCPU(), backendsCPU(b, s, app)
			b.ResetTimer()
			for b.Loop() {
				batch := make([]gate.Record, 256)
				queues := make([]gate.Queue, 0, len(batch))
				for i := range batch {
					n++
					key, scene := fmt.Sprintf("b%09d", n), fmt.Sprintf("scene%02d", n%5)
					recipient := fmt.Sprintf("open_id:ou_%09d", n)
					at := t0.Add(time.Duration(n) * time.Millisecond)
					queues = append(queues, gate.Queue{Recipient: recipient, Name: scene})
					switch {
					case i%10 >= 3:
						batch[i] = record(key, scene, gate.OutcomeForward, at)
						continue
					case held:
						batch[i] = heldRec(key, scene, recipient, scene, gate.HoldDefer, uint64(n), at, at.Add(time.Hour))
						batch[i].Hold.Payload = []byte(payload)
					default:
						batch[i] = suppressed(key, scene, recipient, at)
					}
					batch[i].Suppression.Payload = payload
				}
				if held {
					if _, err := s.Waiting(ctx, queues); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := s.Commit(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(postgresCPU()-cpu0)/float64(time.Microsecond)/float64(n), "pg-µs/record")
			b.ReportMetric(float64(backendsCPU(b, s, app)-own0)/float64(time.Microsecond)/float64(n), "own-pg-µs/record")
		})
	}
}
