package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The soak's verdict (gatebench -soak; make soak), as pure functions of the
// minutes it sampled, so that a test can hold it to its definition without
// any service.

// soakMinute is what the soak saw in one minute, and the state at its end.
type soakMinute struct {
	msgLat, checkLat []time.Duration // publish (or due time) to outcome, of what was decided in the minute
	checkErrors      int
	rss              map[string]int64 // process -> resident bytes at the minute's end
	tables           map[string]tableStat
	held             int64 // rows of held at the minute's end
	pgBackends       int   // the gate's PostgreSQL backends at the minute's end
}

// tableStat is one table's size and live rows, summed over its partitions.
type tableStat struct {
	bytes, rows int64
}

// soakWindows are the spans, in whole minutes [from, to), the verdict
// compares. For the 30-minute soak: warm-up 5, early minutes 5-10, last
// minutes 25-30, trend over minutes 10-30. A shorter soak scales each
// span with its length, each at least a minute.
type soakWindows struct {
	warmup                 int
	early, last, trend     [2]int
	trendFirst, trendLater [2]int // the trend span's two halves
}

func soakWindowsFor(minutes int) soakWindows {
	scaled := func(m int) int { return max(1, int(math.Round(float64(m)*float64(minutes)/30))) }
	w := soakWindows{warmup: scaled(5)}
	w.early = [2]int{w.warmup, min(w.warmup+scaled(5), minutes)}
	w.last = [2]int{max(minutes-scaled(5), w.warmup), minutes}
	w.trend = [2]int{max(minutes-scaled(20), w.warmup), minutes}
	mid := (w.trend[0] + w.trend[1] + 1) / 2
	w.trendFirst, w.trendLater = [2]int{w.trend[0], mid}, [2]int{mid, w.trend[1]}
	return w
}

// The verdict's bounds.
const (
	soakP99Growth  = 1.2  // last minutes' p99 over the early minutes'
	soakRSSGrowth  = 1.10 // RSS at the end over RSS at the warm-up's end
	soakPeakGrowth = 1.10 // a size's peak in the trend's later half over its first half's
	// Slack for small figures, where a page or a few rows are a large share.
	soakSizeSlack = 1 << 20
	soakHeldSlack = 100
)

// soakCheck is one line of the verdict.
type soakCheck struct {
	what   string
	ok     bool
	detail string
}

// pooledP99 is the p99 of every latency of minutes [from, to).
func pooledP99(ms []soakMinute, span [2]int, lat func(soakMinute) []time.Duration) time.Duration {
	var all []time.Duration
	for _, m := range ms[span[0]:span[1]] {
		all = append(all, lat(m)...)
	}
	return percentile(all, 0.99)
}

// peak is the highest value of minutes [from, to).
func peak(v []float64, span [2]int) float64 {
	return slices.Max(v[span[0]:span[1]])
}

// trendShare is the least-squares slope of v over span times the span's
// length, as a share of its mean: how much it rose over the span. It is
// printed, not judged: a table whose partitions are dropped every ten
// minutes is a saw-tooth, bounded, whose slope over twenty minutes
// depends on where the teeth fall (between -0.2 and +0.4 of the mean for a
// bounded one; +0.8 to +1.0 for one that only grows). The verdict compares
// the peaks of the two halves instead.
func trendShare(v []float64, span [2]int) float64 {
	ys := v[span[0]:span[1]]
	n := float64(len(ys))
	if n < 2 {
		return 0
	}
	var mx, my float64
	for i, y := range ys {
		mx += float64(i)
		my += y
	}
	mx, my = mx/n, my/n
	var sxy, sxx float64
	for i, y := range ys {
		sxy += (float64(i) - mx) * (y - my)
		sxx += (float64(i) - mx) * (float64(i) - mx)
	}
	if my == 0 {
		return 0
	}
	return sxy / sxx * n / my
}

// soakVerdict judges the minutes: every check, and whether all hold. Too
// few minutes for the windows is a failure of its own.
func soakVerdict(ms []soakMinute) ([]soakCheck, bool) {
	n := len(ms)
	if n < 3 {
		return []soakCheck{{what: "duration", detail: fmt.Sprintf("%d minutes sampled; the verdict needs at least 3", n)}}, false
	}
	w := soakWindowsFor(n)
	var checks []soakCheck
	for _, kind := range []struct {
		name string
		lat  func(soakMinute) []time.Duration
	}{{"messages", func(m soakMinute) []time.Duration { return m.msgLat }}, {"checks", func(m soakMinute) []time.Duration { return m.checkLat }}} {
		early, last := pooledP99(ms, w.early, kind.lat), pooledP99(ms, w.last, kind.lat)
		ok := early > 0 && float64(last) <= soakP99Growth*float64(early)
		checks = append(checks, soakCheck{what: "p99 of " + kind.name, ok: ok,
			detail: fmt.Sprintf("minutes %d-%d: %.1f ms; minutes %d-%d: %.1f ms (bound %.1f × the first)", w.last[0], w.last[1], ms2(last), w.early[0], w.early[1], ms2(early), soakP99Growth)})
	}
	errs := 0
	for _, m := range ms[w.warmup:] {
		errs += m.checkErrors
	}
	checks = append(checks, soakCheck{what: "check errors", ok: errs == 0, detail: fmt.Sprintf("%d after the warm-up", errs)})
	for _, p := range sortedKeys(ms[n-1].rss) {
		from, to := ms[w.warmup-1].rss[p], ms[n-1].rss[p]
		ok := from > 0 && float64(to) <= soakRSSGrowth*float64(from)
		checks = append(checks, soakCheck{what: "RSS of " + p, ok: ok,
			detail: fmt.Sprintf("%.1f MiB at minute %d, %.1f MiB at minute %d (%+.0f %%; bound %+.0f %%)", mib(from), w.warmup, mib(to), n, growthPct(from, to), 100*(soakRSSGrowth-1))})
	}
	bounded := func(what string, v []float64, slack float64, unit func(float64) string) {
		first, later := peak(v, w.trendFirst), peak(v, w.trendLater)
		ok := later <= soakPeakGrowth*first+slack
		checks = append(checks, soakCheck{what: what, ok: ok,
			detail: fmt.Sprintf("peak %s in minutes %d-%d, %s in minutes %d-%d (bound %.2f × + %s); trend over minutes %d-%d: %+.0f %% of the mean",
				unit(later), w.trendLater[0], w.trendLater[1], unit(first), w.trendFirst[0], w.trendFirst[1], soakPeakGrowth, unit(slack),
				w.trend[0], w.trend[1], 100*trendShare(v, w.trend))})
	}
	held := make([]float64, n)
	for i, m := range ms {
		held[i] = float64(m.held)
	}
	bounded("held rows", held, soakHeldSlack, func(f float64) string { return fmt.Sprintf("%.0f", f) })
	for _, t := range sortedKeys(ms[n-1].tables) {
		sizes := make([]float64, n)
		for i, m := range ms {
			sizes[i] = float64(m.tables[t].bytes)
		}
		bounded("size of "+t, sizes, soakSizeSlack, func(f float64) string { return fmt.Sprintf("%.1f MiB", f/(1<<20)) })
	}
	all := true
	for _, c := range checks {
		all = all && c.ok
	}
	return checks, all
}

func ms2(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func growthPct(from, to int64) float64 {
	if from == 0 {
		return 0
	}
	return 100 * (float64(to)/float64(from) - 1)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// soakVerdictText renders the checks, one a line, FAIL first in each.
func soakVerdictText(checks []soakCheck) string {
	var b strings.Builder
	for _, c := range checks {
		mark := "ok  "
		if !c.ok {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "  %s %s: %s\n", mark, c.what, c.detail)
	}
	return b.String()
}
