package main

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// benchFields parses a BENCH line into its key=value pairs.
func benchFields(t *testing.T, line string) map[string]string {
	t.Helper()
	rest, ok := strings.CutPrefix(line, "BENCH ")
	if !ok {
		t.Fatalf("line does not start with BENCH: %q", line)
	}
	fields := map[string]string{}
	for _, kv := range strings.Fields(rest) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("field %q is not key=value", kv)
		}
		if _, dup := fields[k]; dup {
			t.Fatalf("field %s twice", k)
		}
		fields[k] = v
	}
	return fields
}

// phaseOf is a phase of n messages at rate whose processes spent perMsg
// each (µs per message, by component).
func phaseOf(n int, rate float64, perMsg map[string]int) phase {
	p := phase{n: n, rate: rate, cpu: cpuUse{used: map[string]time.Duration{}}}
	for c, us := range perMsg {
		p.cpu.used[c] = time.Duration(n*us) * time.Microsecond
	}
	return p
}

// The BENCH line's CPU per message is every process of the gate's full
// speed phase together (not the rest of the machine), and its JetStream
// ratio the gate's rate over the ceiling of the same run; with several
// runs, each is the median of the runs' own figures.
func TestBenchLine(t *testing.T) {
	run := func(gateRate, jsRate float64, gateUS int) runResult {
		var r runResult
		r.gate.max = phaseOf(1000, gateRate, map[string]int{"gate": gateUS, "nats": 20, "redis": 5, "postgres": 5, "bench": 2, "other": 100})
		r.gate.half = phaseOf(500, gateRate/2, nil)
		r.ceil.jetstream = phaseOf(1000, jsRate, map[string]int{"nats": 15})
		r.ceil.redis, r.ceil.audit = phaseOf(1000, 90_000, nil), phaseOf(1000, 80_000, nil)
		r.seed = seedResult{phase: phaseOf(100, 2000, map[string]int{"nats": 100, "redis": 40, "postgres": 30, "bench": 60, "other": 7})}
		r.gate.counted = outcomes{forward: 10}
		r.gate.expected = r.gate.counted
		return r
	}
	// Gate µs 10, 14, 30: totals 42, 46, 62; ratios 0.40, 0.25, 0.50.
	results := []runResult{run(20_000, 50_000, 10), run(10_000, 40_000, 14), run(30_000, 60_000, 30)}
	fs := make([]figures, len(results))
	for i, r := range results {
		fs[i] = r.figures()
	}
	got := benchFields(t, benchLine(medians(fs), len(fs), 1000, false))
	want := map[string]string{
		"cpu_us_per_msg": "46.0", "jetstream_ratio": "0.40", "gate_msgs_per_s": "20000", "jetstream_ceiling": "50000",
		"seed_cpu_us_per_msg": "230.0", "baseline_ratio": "10.0", "counts_agree": "true", "seed_agrees": "true",
		"naks": "0", "runs": "3", "n": "1000",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	// The fields older readers parse are all still there.
	for _, k := range []string{"ceiling_ratio", "p99_ms_half_load", "redis_bytes_per_recipient_scene", "p50_ms_half_load",
		"p50_ms_max", "p99_ms_max", "redis_ceiling", "audit_ceiling", "seed_msgs_per_s", "smallest_ceiling", "headers"} {
		if _, ok := got[k]; !ok {
			t.Errorf("no %s", k)
		}
	}
	if _, err := strconv.ParseFloat(got["ceiling_ratio"], 64); err != nil {
		t.Errorf("ceiling_ratio: %v", err)
	}
}

// gatebench fails when any run's gate counters disagree with the
// simulation, the gate sent a nak, or the seed decided otherwise than the
// simulation; the error names the run.
func TestVerdict(t *testing.T) {
	good := figures{countsAgree: true, seedAgrees: true}
	for _, tt := range []struct {
		name string
		bad  func(*figures)
		want string // in the error; "" for none
	}{
		{"all good", func(*figures) {}, ""},
		{"counts disagree", func(f *figures) { f.countsAgree = false }, "run 2: the gate's counters disagree"},
		{"naks", func(f *figures) { f.naks = 3 }, "run 2: the gate sent 3 naks"},
		{"seed disagrees", func(f *figures) { f.seedAgrees = false }, "run 2: the seed baseline's outcomes disagree"},
		{"repeated acks are no failure", func(f *figures) { f.repeats = 5 }, ""},
	} {
		second := good
		tt.bad(&second)
		err := verdict([]figures{good, second, good})
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want no error", tt.name, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.want)
		}
	}
	// A run's verdict follows from its own results.
	var r runResult
	r.gate.counted, r.gate.expected = outcomes{forward: 3}, outcomes{forward: 2, suppress: 1}
	r.seed.counted, r.seed.expected = outcomes{drop: 1}, outcomes{drop: 1}
	r.gate.half.naks = 1
	err := verdict([]figures{r.figures()})
	if err == nil || !strings.Contains(err.Error(), "run 1: the gate's counters disagree") || !strings.Contains(err.Error(), "1 naks") || strings.Contains(err.Error(), "seed") {
		t.Errorf("got %v", err)
	}
}

// The fixed-rate phases (1,000 and 4,000 msgs/s) give their own rows, and
// the BENCH line their p50 and p99: each the median of the runs' own.
func TestFixedRateFigures(t *testing.T) {
	run := func(p99At1k, p99At4k time.Duration) runResult {
		var r runResult
		r.gate.max = phaseOf(1000, 20_000, map[string]int{"gate": 10})
		r.ceil.jetstream = phaseOf(1000, 50_000, nil)
		r.seed = seedResult{phase: phaseOf(100, 2000, nil)}
		r.gate.fixed[0] = phaseOf(10_000, 1000, map[string]int{"gate": 40, "nats": 30})
		r.gate.fixed[0].p50, r.gate.fixed[0].p99 = time.Millisecond, p99At1k
		r.gate.fixed[1] = phaseOf(10_000, 4000, map[string]int{"gate": 20})
		r.gate.fixed[1].p50, r.gate.fixed[1].p99 = 2*time.Millisecond, p99At4k
		return r
	}
	results := []runResult{run(3*time.Millisecond, 9*time.Millisecond), run(7*time.Millisecond, 5*time.Millisecond), run(5*time.Millisecond, 4*time.Millisecond)}
	fs := make([]figures, len(results))
	for i, r := range results {
		fs[i] = r.figures()
	}
	m := medians(fs)
	if got := m.rows[rowAt1k].cpuTotal(); got != 70 {
		t.Errorf("CPU per message at 1,000/s: %v µs, want 70", got)
	}
	got := benchFields(t, benchLine(m, len(fs), 1000, false))
	for k, v := range map[string]string{"p50_ms_1k": "1.00", "p99_ms_1k": "5.00", "p50_ms_4k": "2.00", "p99_ms_4k": "5.00"} {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	var out strings.Builder
	printTargets(&out, m)
	for _, want := range []string{"at a fixed 1000 msgs/s (open loop): p50 1.00 ms, p99 5.00 ms (target p99 ≤ 4 ms: NOT met)", "0.40 of the jetstream ceiling (target ≥ 0.5: NOT met)", "-profile"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("targets: no %q in\n%s", want, out.String())
		}
	}
}
