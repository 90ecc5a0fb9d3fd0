package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/rules"
	"github.com/antifatigue/gate/internal/testing/procstat"
	"github.com/antifatigue/gate/internal/testing/testenv"
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

// workloadRules is bench/gatebench's rule set (workload.go): five scenes of
// two rolling windows each under the caps {1h/4, 24h/20}; marketing.promo
// lets urgent messages through, which the store sees as forced admissions.
const workloadRules = `unknown_scene: forward
recipient_caps:
  - {window: 1h, max: 4}
  - {window: 24h, max: 20}
scenes:
  alert.disk_full:
    limits: [{window: 1h, max: 1}, {window: 24h, max: 3}]
  alert.cpu_high:
    limits: [{window: 10m, max: 1}, {window: 24h, max: 6}]
  reminder.approval:
    limits: [{window: 1h, max: 2}, {window: 24h, max: 5}]
  marketing.promo:
    limits: [{window: 24h, max: 1}, {window: 7d, max: 3}]
    bypass_priorities: [urgent]
  digest.weekly:
    limits: [{window: 24h, max: 1}, {window: 7d, max: 2}]
    on_exceed: drop
`

// workloadRequests returns the admit requests of n messages of gatebench's
// workload (bench/gatebench/workload.go, same generator and seed): scenes by
// weight, 12 % repeating one of the 512 most recent (recipient, scene)
// pairs, 2 % urgent, over recipients recipients. Run 200,000 of them
// against fresh keys, as a gatebench run does, and about 30 % are held back.
func workloadRequests(tb testing.TB, n, recipients int) []gate.AdmitRequest {
	tb.Helper()
	rs, err := rules.Parse("gatebench", []byte(workloadRules))
	if err != nil {
		tb.Fatal(err)
	}
	scenes := []struct {
		name   string
		weight int
	}{{"alert.disk_full", 30}, {"alert.cpu_high", 25}, {"reminder.approval", 20}, {"marketing.promo", 15}, {"digest.weekly", 10}}
	const seed = 1
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	type pair struct{ recipient, scene int }
	recent, next := make([]pair, 0, 512), 0
	pick := func() int {
		x := rnd.IntN(100)
		for i, s := range scenes {
			if x < s.weight {
				return i
			}
			x -= s.weight
		}
		return len(scenes) - 1
	}
	reqs := make([]gate.AdmitRequest, 0, n)
	now := time.Now()
	for range n {
		var p pair
		if len(recent) > 0 && rnd.Float64() < 0.12 {
			p = recent[rnd.IntN(len(recent))]
		} else {
			p = pair{recipient: rnd.IntN(recipients), scene: pick()}
		}
		if len(recent) < cap(recent) {
			recent = append(recent, p)
		} else {
			recent[next], next = p, (next+1)%len(recent)
		}
		prio := gate.PriorityNormal
		switch x := rnd.IntN(100); {
		case x < 2:
			prio = gate.PriorityUrgent
		case x < 12:
			prio = gate.PriorityHigh
		}
		id := fmt.Sprintf("%016x%016x", rnd.Uint64(), rnd.Uint64())
		m := gate.Message{
			ID: id[0:8] + "-" + id[8:12] + "-" + id[12:16] + "-" + id[16:20] + "-" + id[20:32], Scene: scenes[p.scene].name,
			ReceiveIDType: "open_id", ReceiveID: fmt.Sprintf("ou_bench%024x", p.recipient), Priority: prio,
		}
		if plan := gate.PlanMessage(rs, m, now); plan.Request != nil {
			reqs = append(reqs, *plan.Request)
		}
	}
	return reqs
}

// oldSource is admit.lua as it was before the recipient's key: the old
// gate's script, run beside the new one by BenchmarkAdmitWorkload and
// TestUpgradeUnderTraffic.
//
//go:embed testdata/admit_before.lua
var oldSource string

// BenchmarkAdmitWorkload runs gatebench's workload (workloadRequests:
// 300,000 messages to 100,000 recipients on fresh keys, then again on
// others) through Store.Admit in batches of 256, one pipeline each, as the
// gate and gatebench's Redis ceiling send them, once per layout: the
// recipient's key (new), the layout before it with its own script (old,
// testdata/admit_before.lua), and both at once (legacy, LegacyKeys). Each
// iteration decides 16 batches with one arm, then 16 with the next, so the
// arms meet the same load on the machine. It reports what Redis spends per
// admission request: its process's CPU time (procstat; INFO cpu when Redis
// is not on this machine) per request, redis-µs/req, and the ratio
// new/old. Other clients of the same Redis count too: run it on a Redis of
// its own. Wall time mostly measures the client and the machine's other
// load.
//
// It then reports the bytes per (recipient, scene) of each layout, as
// gatebench measures them: the steady state of a scene {1h/1, 24h/3} (three
// admissions kept) for 2,000 recipients of 43 bytes under the default
// prefix, MEMORY USAGE of their keys over their number, bytes/pair.
//
//	redis-server --port 6390 --save '' --appendonly no &
//	GATE_TEST_REDIS_URL=redis://127.0.0.1:6390/0 go test -run '^$' \
//	  -bench AdmitWorkload -benchtime 40x -count 3 ./internal/redisstore/
//
// GATE_BENCH_NEW_ONLY=1 runs the new arm alone, for CONFIG RESETSTAT and
// INFO commandstats to profile its calls. GATE_BENCH_BASE_SCRIPT naming a file (an earlier admit.lua of the one-key
// layout, say from git show) adds an arm, base, running it.
func BenchmarkAdmitWorkload(b *testing.B) {
	raw := newClient(b)
	ctx := context.Background()
	const (
		batch, chunk = 256, 16 // a request batch; batches per turn of an arm
		runN         = 300_000 // a gatebench run's messages (full and half speed), on fresh keys
		recipients   = 100_000
	)
	reqs := workloadRequests(b, runN, recipients)
	cpu := redisCPUFunc(b, raw)

	// An arm is one script deciding the workload on keys of its own.
	type arm struct {
		name   string
		s      *Store
		prefix string
		at, n  int
		held   int
		spent  time.Duration
		script *redis.Script
		source string
		layout layout
	}
	arms := []*arm{
		{name: "new", script: admitScript, source: admitSource, layout: layoutOne},
		{name: "old", script: redis.NewScript(oldSource), source: oldSource, layout: layoutOld},
		{name: "legacy", script: admitScript, source: admitSource, layout: layoutLegacy},
	}
	if path := os.Getenv("GATE_BENCH_BASE_SCRIPT"); path != "" {
		src, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		arms = append(arms, &arm{name: "base", script: redis.NewScript(string(src)), source: string(src)})
	}
	if os.Getenv("GATE_BENCH_NEW_ONLY") != "" {
		// One arm alone, so that INFO commandstats profiles its calls.
		arms = arms[:1]
	}
	// fresh points an arm at new keys, deleting those of its previous run
	// (outside the measured turns).
	fresh := func(a *arm) {
		if a.prefix != "" {
			if keys := scanKeys(b, raw, a.prefix+":*"); len(keys) > 0 {
				for lo := 0; lo < len(keys); lo += 1000 {
					raw.Del(ctx, keys[lo:min(lo+1000, len(keys))]...)
				}
			}
		}
		a.prefix = newPrefix(b, raw)
		// gatebench's timeout: other load on the machine must not fail a run.
		s, err := New(raw, Options{KeyPrefix: a.prefix, Timeout: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		a.s = s
		a.s.script, a.s.source, a.s.layout, a.at = a.script, a.source, a.layout, 0
	}
	for _, a := range arms {
		fresh(a)
	}
	for b.Loop() {
		for _, a := range arms {
			if a.at+chunk*batch > len(reqs) {
				fresh(a)
			}
			before := cpu()
			for range chunk {
				res, err := a.s.Admit(ctx, reqs[a.at:a.at+batch])
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range res {
					if !r.Admitted {
						a.held++
					}
				}
				a.at += batch
				a.n += batch
			}
			a.spent += cpu() - before
		}
	}
	per := func(a *arm) float64 { return a.spent.Seconds() * 1e6 / float64(a.n) }
	for _, a := range arms {
		name := "redis-µs/req"
		if a.name != "new" {
			name = a.name + "-" + name
		}
		b.ReportMetric(per(a), name)
		if a.name != "base" && a.held != arms[0].held {
			b.Errorf("%s held back %d of %d, new %d: the layouts must decide alike", a.name, a.held, a.n, arms[0].held)
		}
	}
	b.ReportMetric(100*float64(arms[0].held)/float64(arms[0].n), "%held")
	if len(arms) == 1 {
		return
	}
	b.ReportMetric(per(arms[0])/per(arms[1]), "new/old")
	b.StopTimer()
	for _, a := range arms[:2] {
		unit := "bytes/pair"
		if a.name != "new" {
			unit = a.name + "-" + unit
		}
		b.ReportMetric(bytesPerPair(b, raw, a.script, a.source, a.layout), unit)
	}
}

// bytesPerPair fills the steady state of a scene {1h/1, 24h/3} at one
// message per recipient per hour (3 admissions kept, each a 36-character
// id) for 2,000 recipients of 43 bytes under the default prefix, with
// script and layout, and returns the MEMORY USAGE of their keys over their
// number: gatebench's "Redis bytes per (recipient, scene)".
func bytesPerPair(b *testing.B, raw *redis.Client, script *redis.Script, source string, lay layout) float64 {
	const pairs = 2000
	ctx := context.Background()
	s, err := New(raw, Options{Timeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	s.script, s.source, s.layout = script, source, lay
	tag := testenv.Unique("m")
	b.Cleanup(func() {
		if keys := scanKeys(b, raw, "gate:{open_id:ou_"+tag+"*"); len(keys) > 0 {
			raw.Del(context.Background(), keys...)
		}
	})
	limits := []gate.Limit{{Window: time.Hour, Max: 1}, {Window: 24 * time.Hour, Max: 3}}
	var reqs []gate.AdmitRequest
	for i := range pairs {
		r := fmt.Sprintf("open_id:ou_%s%0*d", tag, 32-len(tag), i)
		for j := range 3 {
			reqs = append(reqs, gate.AdmitRequest{
				ID: fmt.Sprintf("%08x-4c5d-9e8f-%04x-%012x", i, j, time.Now().UnixNano()), Recipient: r,
				Scene: "alert.disk_full", Limits: limits, Force: true,
			})
		}
	}
	for lo := 0; lo < len(reqs); lo += 256 {
		if _, err := s.Admit(ctx, reqs[lo:min(lo+256, len(reqs))]); err != nil {
			b.Fatal(err)
		}
	}
	var total int64
	for _, k := range scanKeys(b, raw, "gate:{open_id:ou_"+tag+"*") {
		n, err := raw.MemoryUsage(ctx, k, 0).Result()
		if err != nil {
			b.Fatalf("MEMORY USAGE %s: %v", k, err)
		}
		total += n
	}
	return float64(total) / pairs
}

// redisCPUFunc returns a reader of the test Redis's CPU time: its
// process's, from /proc, when it runs on this machine; INFO cpu otherwise.
func redisCPUFunc(tb testing.TB, c *redis.Client) func() time.Duration {
	tb.Helper()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		tb.Fatalf("INFO server: %v", err)
	}
	pid := 0
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	if pid > 0 && procstat.CPU(pid) > 0 {
		return func() time.Duration { return procstat.CPU(pid) }
	}
	return func() time.Duration { return redisCPU(tb, c) }
}
