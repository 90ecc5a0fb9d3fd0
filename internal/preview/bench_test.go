package preview

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// synthLedger hands out n synthetic decisions over a week, oldest first,
// made a page at a time so that only the replay's own memory grows: the
// recipients spread over recipients, four scenes in turn, a zone on one
// in ten. It samples the heap every few pages for the peak.
type synthLedger struct {
	start         time.Time
	n, recipients int
	peak          uint64
}

func (l *synthLedger) LedgerRange(_ context.Context, _, _ time.Time, fn func([]gate.LedgerEntry) error) error {
	const pageSize = 1000
	step := 7 * 24 * time.Hour / time.Duration(l.n)
	scenes := []string{"alert", "digest", "calendar", "quiet"}
	names := make([]string, l.recipients)
	for i := range names {
		names[i] = fmt.Sprintf("open_id:ou_%08d", i)
	}
	page := make([]gate.LedgerEntry, 0, pageSize)
	var ms runtime.MemStats
	for i := range l.n {
		e := gate.LedgerEntry{Key: fmt.Sprintf("m-%d", i), Scene: scenes[i%len(scenes)],
			Recipient: names[(i*7919)%l.recipients], Priority: gate.PriorityNormal,
			Outcome: gate.OutcomeForward, At: l.start.Add(time.Duration(i) * step)}
		if i%10 == 0 {
			e.TZ = "Asia/Shanghai"
		}
		page = append(page, e)
		if len(page) < pageSize && i != l.n-1 {
			continue
		}
		if err := fn(page); err != nil {
			return err
		}
		page = page[:0]
		if (i/pageSize)%50 == 0 {
			runtime.ReadMemStats(&ms)
			l.peak = max(l.peak, ms.HeapAlloc)
		}
	}
	return nil
}

const benchRules = `
recipient_caps: [{window: 24h, max: 20}]
scenes:
  alert:
    limits: [{window: 1h, max: 1}, {window: 24h, max: 3}]
  digest:
    limits: [{window: 30m, max: 1}]
    on_exceed: digest
  calendar:
    limits: [{calendar: day, max: 2}, {calendar: week, max: 5}]
    tz: Europe/Berlin
  quiet:
    limits: [{window: 24h, max: 2}]
    quiet_hours: {from: "22:00", to: "08:00", action: defer}
    tz: Asia/Shanghai
`

// BenchmarkReplay replays a week of 1,000,000 synthetic decisions of
// 100,000 recipients against a document with rolling, calendar and cap
// limits, a digest and quiet hours, and reports the peak heap of the
// replay (windows included) and its rate.
func BenchmarkReplay(b *testing.B) {
	since := time.Date(2026, 11, 16, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		runtime.GC()
		var base runtime.MemStats
		runtime.ReadMemStats(&base)
		l := &synthLedger{start: since, n: 1_000_000, recipients: 100_000}
		start := time.Now()
		p, err := New(l, Options{}).Preview(context.Background(), []byte(benchRules), since, since.Add(8*24*time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(start)
		if p.Replayed != int64(l.n) {
			b.Fatalf("replayed %d, want %d", p.Replayed, l.n)
		}
		b.ReportMetric(float64(l.peak-min(l.peak, base.HeapAlloc))/(1<<20), "peak-heap-MiB")
		b.ReportMetric(float64(l.n)/elapsed.Seconds(), "decisions/s")
	}
}
