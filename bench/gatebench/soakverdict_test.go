package main

import (
	"strings"
	"testing"
	"time"
)

// The windows are those of issue 27 for 30 minutes, and scale with a
// shorter soak, each at least a minute.
func TestSoakWindows(t *testing.T) {
	for _, tt := range []struct {
		minutes                   int
		warmup                    int
		early, last, trend, later [2]int
	}{
		{30, 5, [2]int{5, 10}, [2]int{25, 30}, [2]int{10, 30}, [2]int{20, 30}},
		{6, 1, [2]int{1, 2}, [2]int{5, 6}, [2]int{2, 6}, [2]int{4, 6}},
		{4, 1, [2]int{1, 2}, [2]int{3, 4}, [2]int{1, 4}, [2]int{3, 4}},
		{60, 10, [2]int{10, 20}, [2]int{50, 60}, [2]int{20, 60}, [2]int{40, 60}},
	} {
		w := soakWindowsFor(tt.minutes)
		if w.warmup != tt.warmup || w.early != tt.early || w.last != tt.last || w.trend != tt.trend || w.trendLater != tt.later {
			t.Errorf("%d minutes: %+v, want warm-up %d, early %v, last %v, trend %v, later half %v", tt.minutes, w, tt.warmup, tt.early, tt.last, tt.trend, tt.later)
		}
	}
}

// steadyMinutes is a soak where nothing grows: latencies of 1-5 ms, RSS
// flat, a table that is a saw-tooth (a partition dropped every ten
// minutes), and held rows around 1,000.
func steadyMinutes(n int) []soakMinute {
	ms := make([]soakMinute, n)
	for i := range ms {
		lat := make([]time.Duration, 100)
		for j := range lat {
			lat[j] = time.Duration(1+j%5) * time.Millisecond
		}
		ms[i] = soakMinute{
			msgLat: lat, checkLat: lat,
			rss:    map[string]int64{"gate": 100 << 20, "nats-server": 50 << 20},
			tables: map[string]tableStat{"decisions": {bytes: int64(10+i%10) << 20}, "scene_counters": {bytes: 16 << 10}},
			held:   int64(1000 + 30*(i%3)),
		}
	}
	return ms
}

func TestSoakVerdict(t *testing.T) {
	for _, tt := range []struct {
		name    string
		minutes int
		change  func(ms []soakMinute)
		fails   string // the failing check; "" when all hold
	}{
		{"steady", 30, func([]soakMinute) {}, ""},
		{"steady, short", 6, func([]soakMinute) {}, ""},
		{"p99 grows", 30, func(ms []soakMinute) {
			for i := 25; i < 30; i++ {
				ms[i].msgLat = append(ms[i].msgLat, 50*time.Millisecond, 60*time.Millisecond, 70*time.Millisecond)
			}
		}, "p99 of messages"},
		{"checks fail", 30, func(ms []soakMinute) { ms[20].checkErrors = 1 }, "check errors"},
		{"an error in the warm-up is not judged", 30, func(ms []soakMinute) { ms[2].checkErrors = 4 }, ""},
		{"RSS grows by 15 %", 30, func(ms []soakMinute) { ms[29].rss["nats-server"] = 57 << 20 }, "RSS of nats-server"},
		{"RSS grows in the warm-up only", 30, func(ms []soakMinute) {
			for i := range 4 {
				ms[i].rss["gate"] = 20 << 20
			}
		}, ""},
		{"a table only grows", 30, func(ms []soakMinute) {
			for i := range ms {
				ms[i].tables["decisions"] = tableStat{bytes: int64(10+i) << 20}
			}
		}, "size of decisions"},
		{"held rows pile up", 30, func(ms []soakMinute) {
			for i := range ms {
				ms[i].held = int64(1000 + 200*i)
			}
		}, "held rows"},
		{"a small table moves by pages", 30, func(ms []soakMinute) { ms[29].tables["scene_counters"] = tableStat{bytes: 64 << 10} }, ""},
	} {
		ms := steadyMinutes(tt.minutes)
		tt.change(ms)
		checks, ok := soakVerdict(ms)
		var failed []string
		for _, c := range checks {
			if !c.ok {
				failed = append(failed, c.what)
			}
		}
		switch {
		case tt.fails == "" && !ok:
			t.Errorf("%s: failed %v, want every check to hold:\n%s", tt.name, failed, soakVerdictText(checks))
		case tt.fails != "" && (ok || len(failed) != 1 || failed[0] != tt.fails):
			t.Errorf("%s: failed %v, want only %q:\n%s", tt.name, failed, tt.fails, soakVerdictText(checks))
		}
	}
	if _, ok := soakVerdict(steadyMinutes(2)); ok {
		t.Error("two minutes: passed, want a failure (too short to judge)")
	}
}

// The printed trend is the least-squares rise over the span as a share of
// its mean: a line from 10 to 20 over ten points rises by its whole slope
// times ten.
func TestTrendShare(t *testing.T) {
	v := []float64{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}
	if got := trendShare(v, [2]int{0, 10}); got < 0.68 || got > 0.70 { // 1 × 10 / 14.5
		t.Errorf("trend of a line: %.3f, want 0.69", got)
	}
	if got := trendShare([]float64{5, 5, 5}, [2]int{0, 3}); got != 0 {
		t.Errorf("trend of a constant: %v", got)
	}
	if s := soakVerdictText([]soakCheck{{what: "x", ok: false, detail: "d"}}); !strings.Contains(s, "FAIL x: d") {
		t.Errorf("text: %q", s)
	}
}
