package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// BenchmarkAdmit runs the script on the test Redis, 256 calls to a
// pipeline as the gate sends them, for a scene {1h/1, 24h/3} under caps
// {1h/4, 24h/20}. Besides wall time it reports Redis's own CPU time per call
// (INFO cpu), which other load on the machine disturbs less.
//
//   - fresh: every call is a new recipient, admitted (the most writes);
//   - steady: the scene's steady state at one message per recipient per
//     hour: 3 members in the day, every call rejected (reads only);
//   - calendar: as fresh, for {1h/1, day/3} under caps {1h/4, day/20} in
//     Asia/Shanghai: what calendar limits add (one period triple per
//     request);
//   - rate: as fresh, for {1h/1, rate 1/10m burst 3} under caps {1h/4,
//     rate 1/2m burst 10}: what rate limits add (two TAT keys, a GET and
//     a SET each).
func BenchmarkAdmit(b *testing.B) {
	raw := newClient(b)
	s := newStore(b, raw, newPrefix(b, raw))
	ctx := context.Background()
	limits := []gate.Limit{{Window: time.Hour, Max: 1}, {Window: 24 * time.Hour, Max: 3}}
	caps := []gate.Limit{{Window: time.Hour, Max: 4}, {Window: 24 * time.Hour, Max: 20}}
	const batch = 256
	run := 0
	sh, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		b.Fatal(err)
	}
	calLimits := []gate.Limit{{Window: time.Hour, Max: 1}, {Calendar: gate.CalendarDay, Max: 3}}
	calCaps := []gate.Limit{{Window: time.Hour, Max: 4}, {Calendar: gate.CalendarDay, Max: 20}}
	rateLimits := []gate.Limit{{Window: time.Hour, Max: 1}, {Rate: 10 * time.Minute, Max: 3}}
	rateCaps := []gate.Limit{{Window: time.Hour, Max: 4}, {Rate: 2 * time.Minute, Max: 10}}
	newBatch := func(recipient func(i int) string, kind string) []gate.AdmitRequest {
		run++
		reqs := make([]gate.AdmitRequest, batch)
		for i := range reqs {
			reqs[i] = gate.AdmitRequest{
				ID:        fmt.Sprintf("%08x-4c5d-9e8f-%04x-%012x", run, i, time.Now().UnixNano()),
				Recipient: recipient(i), Scene: "alert.disk_full", Limits: limits, Caps: caps,
			}
			switch kind {
			case "calendar":
				reqs[i].Limits, reqs[i].Caps, reqs[i].Zone = calLimits, calCaps, sh
			case "rate":
				reqs[i].Limits, reqs[i].Caps = rateLimits, rateCaps
			}
		}
		return reqs
	}
	admit := func(b *testing.B, reqs []gate.AdmitRequest) {
		if _, err := s.Admit(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
	full := func(i int) string { return fmt.Sprintf("open_id:ou_full_%05d", i) }
	// Fill the held and steady windows once.
	forced := newBatch(full, "")
	for i := range forced {
		forced[i].Force = true
	}
	for range 3 {
		admit(b, forced)
		for i := range forced {
			forced[i].ID += "x"
		}
	}
	for _, tc := range []struct {
		name      string
		recipient func(i int) string
		kind      string
	}{
		{"fresh", nil, ""},
		{"steady", full, ""},
		{"calendar", nil, "calendar"},
		{"rate", nil, "rate"},
	} {
		for _, perCall := range []int{1, perCallSingle} {
			b.Run(fmt.Sprintf("%s/per-call=%d", tc.name, perCall), func(b *testing.B) {
				s.perCall = perCall
				cpu0 := redisCPU(b, raw)
				calls := 0
				for b.Loop() {
					rcpt := tc.recipient
					if rcpt == nil {
						prefix := testenv.Unique("ou")
						rcpt = func(i int) string { return "open_id:" + prefix + strconv.Itoa(i) }
					}
					admit(b, newBatch(rcpt, tc.kind))
					calls += batch
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(calls), "ns/call")
				b.ReportMetric((redisCPU(b, raw)-cpu0).Seconds()*1e6/float64(calls), "redis-µs/call")
			})
		}
	}
}

// redisCPU is the CPU time Redis has used, from INFO cpu.
func redisCPU(tb testing.TB, c *redis.Client) time.Duration {
	tb.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatalf("INFO cpu: %v", err)
	}
	var total float64
	for line := range strings.SplitSeq(info, "\r\n") {
		for _, f := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, f); ok {
				x, err := strconv.ParseFloat(v, 64)
				if err != nil {
					tb.Fatalf("INFO cpu %s: %v", line, err)
				}
				total += x
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}
