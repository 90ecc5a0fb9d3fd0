package inmem

import (
	"slices"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// How the store counts a message against limits: the members of a window
// or a calendar period, the slots of a rate limit, and how long each needs
// its members kept; step for step as admit.lua does.

// windowFrom returns the earliest admission time (ms) that a window of
// limits (not a rate limit, which counts no members) counts at now, or
// now+1 when none does.
func windowFrom(limits []gate.Limit, now int64, zone *time.Location) int64 {
	from := now + 1
	for _, l := range limits {
		if l.Rate == 0 {
			f, _ := bound(l, now, zone)
			from = min(from, f)
		}
	}
	return from
}

// counted reports whether limits count in a window (of members) rather
// than at a rate only: a cap window is kept only for those.
func counted(limits []gate.Limit) bool {
	return slices.ContainsFunc(limits, func(l gate.Limit) bool { return l.Rate == 0 })
}

// verdict collects the exceeded limit that reopens last, and when track
// is set the limit with the fewest slots left once the message is admitted.
type verdict struct {
	exceeded *gate.Exceeded
	reopen   int64 // ms
	tightest *gate.Exceeded
	track    bool // whether to keep tightest (AdmitRequest.WantTightest)
}

// check counts each of limits: a window's (or period's) members in w, a
// rate limit's slots in use at its theoretical arrival time tat.
func (v *verdict) check(w *window, tat, now int64, zone *time.Location, scope gate.Scope, limits []gate.Limit) {
	for _, l := range limits {
		var c int
		var reopen int64
		if l.Rate != 0 {
			// Slots in use: the intervals between now and the TAT, rounded
			// up. The GCRA admits while fewer than the burst are, and
			// reopens when the TAT is (burst - 1) intervals away.
			every := l.RateMillis()
			c = int((tat - now + every - 1) / every)
			reopen = tat - int64(l.Max-1)*every
		} else {
			from, end := bound(l, now, zone)
			c = w.count(from)
			// A rolling window reopens when the Max-th newest member leaves
			// it; a calendar limit when its period ends.
			reopen = end
			if l.Calendar == "" && c >= l.Max {
				reopen = w.entries[len(w.entries)-l.Max].at + l.WindowMillis()
			}
		}
		if v.track && (v.tightest == nil || l.Max-c-1 < v.tightest.Limit.Max-v.tightest.Count) {
			v.tightest = &gate.Exceeded{Scope: scope, Limit: l, Count: c + 1}
		}
		if c < l.Max {
			continue
		}
		if v.exceeded == nil || reopen > v.reopen {
			v.exceeded = &gate.Exceeded{Scope: scope, Limit: l, Count: c}
			v.reopen = reopen
		}
	}
}

// bound returns the earliest admission time (ms) that l counts at now, and
// how long that admission must be kept: to the end of l's window, or of its
// calendar period in zone. A rate limit counts no members, but the scene
// window keeps the ids it admitted for burst intervals, to know them again.
func bound(l gate.Limit, now int64, zone *time.Location) (from, until int64) {
	if l.Rate != 0 {
		keep := int64(l.Max) * l.RateMillis()
		return now - keep + 1, now + keep
	}
	if l.Calendar == "" {
		w := l.WindowMillis()
		return now - w + 1, now + w
	}
	start, end := l.Period(time.UnixMilli(now), zone)
	return start.UnixMilli(), end.UnixMilli()
}

// span returns, over limits at now, the earliest admission time any of them
// counts (ms), the latest time one of them still needs its members, and
// the largest max.
func span(limits []gate.Limit, now int64, zone *time.Location) (from, until int64, most int) {
	from, until = now+1, now
	for _, l := range limits {
		f, u := bound(l, now, zone)
		from, until = min(from, f), max(until, u)
		most = max(most, l.Max)
	}
	return from, until, most
}
