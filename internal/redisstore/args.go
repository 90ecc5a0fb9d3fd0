package redisstore

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// call is one EVALSHA of admit.lua: the requests [lo, hi) of a batch, their
// KEYS and ARGV.
type call struct {
	lo, hi int
	keys   []string
	args   []any
}

// buildCalls turns a batch into script calls of up to perCall requests
// each, and returns the gate's time its calendar periods were computed from
// (zero when it has no calendar limits). It is on the hot path: the keys and
// arguments of the whole batch share one allocation each, and the gate's
// clock is read only when a request has calendar limits. A call sends each
// distinct limit set (limits and caps) of its requests once, first; a
// request names its set by number.
func (s *Store) buildCalls(reqs []gate.AdmitRequest, perCall int) (calls []call, now time.Time, err error) {
	nargs, nkeys, clock := 0, 0, false
	rts := make([]rates, len(reqs))
	for i := range reqs {
		if err := reqs[i].Validate(); err != nil {
			return nil, now, fmt.Errorf("admit: request %d (id %q): %w", i, reqs[i].ID, err)
		}
		_, nc := calendarsOf(&reqs[i])
		rts[i] = ratesOf(&reqs[i])
		nr := rts[i].n()
		// At most: its own limit set, and its member, flags, set number and scene.
		nargs += 2 + 2*(len(reqs[i].Limits)+len(reqs[i].Caps)) + 4 + 3*nc + nr
		nkeys += 3 + nr
		clock = clock || nc > 0
	}
	if clock {
		now = s.now()
	}
	perCall = max(perCall, 1)
	ncalls := (len(reqs) + perCall - 1) / perCall
	calls = make([]call, 0, ncalls)
	keys := make([]string, 0, nkeys)
	args := make([]any, 0, nargs+ncalls)
	set := make([]int, len(reqs)) // each request's limit set, from 1
	var firsts []int              // the request that brought each set of a call
	for lo := 0; lo < len(reqs); lo += perCall {
		hi := min(lo+perCall, len(reqs))
		start, kstart := len(args), len(keys)
		args = append(args, 0) // the number of limit sets, once known
		firsts = firsts[:0]
		for i := lo; i < hi; i++ {
			set[i] = 1 + slices.IndexFunc(firsts, func(j int) bool { return sameSet(&reqs[j], &reqs[i]) })
			if set[i] == 0 {
				firsts = append(firsts, i)
				set[i] = len(firsts)
				args = appendSet(args, &reqs[i])
			}
		}
		args[start] = len(firsts)
		for i := lo; i < hi; i++ {
			keys = s.appendKeys(keys, &reqs[i], rts[i])
			args = s.appendArgs(args, &reqs[i], rts[i], set[i], now)
		}
		calls = append(calls, call{lo: lo, hi: hi, keys: keys[kstart:len(keys):len(keys)], args: args[start:len(args):len(args)]})
	}
	return calls, now, nil
}

// appendKeys appends the KEYS of admit.lua (and forget.lua) for r, whose
// rate limits are rt: the recipient's key, then with LegacyKeys the old
// layout's scene window and cap window, and the TAT keys of its rate
// limits, only when it has them.
func (s *Store) appendKeys(keys []string, r *gate.AdmitRequest, rt rates) []string {
	escaped := escape(r.Recipient)
	if s.layout != layoutOld {
		keys = append(keys, s.prefix+":{"+escaped+"}")
	}
	if s.layout == layoutOne {
		return keys
	}
	keys = append(keys, s.key(escaped, kindScene, r.Scene), s.key(escaped, kindCap, ""))
	if rt.si >= 0 {
		keys = append(keys, s.key(escaped, kindSceneRate, r.Scene))
	}
	if rt.ci >= 0 {
		keys = append(keys, s.key(escaped, kindCapRate, ""))
	}
	return keys
}

// sceneTag is the member of the recipient's key that holds scene's tag.
func sceneTag(scene string) string { return "#" + scene }

// rates are a request's rate limits, found once: the scene's and the
// caps', each with its index, -1 when there is none (a valid request has
// one of each at most; see gate.AdmitRequest.Validate).
type rates struct {
	scene, caps gate.Limit
	si, ci      int
}

func ratesOf(r *gate.AdmitRequest) (rt rates) {
	rt.scene, rt.si = gate.RateLimit(r.Limits)
	rt.caps, rt.ci = gate.RateLimit(r.Caps)
	return rt
}

// n counts the rate limits.
func (rt rates) n() int {
	n := 0
	if rt.si >= 0 {
		n++
	}
	if rt.ci >= 0 {
		n++
	}
	return n
}

// Bits of admit.lua's flags above force (1) and the number of periods (2, 4).
const (
	flagSceneRate = 8
	flagCapRate   = 16
	flagDryRun    = 32
	flagTightest  = 64
	flagLegacy    = 128
)

// sameSet reports whether a and b have the same limits and caps, which
// admit.lua then reads from one limit set.
func sameSet(a, b *gate.AdmitRequest) bool {
	return slices.Equal(a.Limits, b.Limits) && slices.Equal(a.Caps, b.Caps)
}

// appendSet appends r's limit set to the ARGV of admit.lua: #limits, #caps,
// then (window, max) pairs, limits first.
func appendSet(args []any, r *gate.AdmitRequest) []any {
	cals, nc := calendarsOf(r)
	args = append(args, len(r.Limits), len(r.Caps))
	args = appendPairs(args, r.Limits, cals[:nc])
	return appendPairs(args, r.Caps, cals[:nc])
}

// appendArgs appends the ARGV of admit.lua for r: member, flags, its limit
// set's number (from 1), its scene's tag member, then a triple of period
// bounds per calendar the limits name, then the emission intervals of the
// rate limits (rt). now is the gate's clock, read when r has calendar
// limits. A request without calendar or rate limits, not a dry run and not
// asking for the tightest limit, sends only its member, flags 0 or 1, its
// set and its scene. The old script (layoutOld) takes no scene.
func (s *Store) appendArgs(args []any, r *gate.AdmitRequest, rt rates, set int, now time.Time) []any {
	cals, nc := calendarsOf(r)
	flags := 2 * nc
	if r.Force {
		flags++
	}
	if rt.si >= 0 {
		flags += flagSceneRate
	}
	if rt.ci >= 0 {
		flags += flagCapRate
	}
	if r.DryRun {
		flags += flagDryRun
	}
	if r.WantTightest {
		flags += flagTightest
	}
	switch s.layout {
	case layoutOld:
		args = append(args, member(r.ID), flags, set)
	case layoutLegacy:
		args = append(args, member(r.ID), flags+flagLegacy, set, sceneTag(r.Scene))
	default:
		args = append(args, member(r.ID), flags, set, sceneTag(r.Scene))
	}
	for _, c := range cals[:nc] {
		start, end, end2 := periods(c, now, r.Zone)
		args = append(args, start, end, end2)
	}
	if rt.si >= 0 {
		args = append(args, rt.scene.RateMillis())
	}
	if rt.ci >= 0 {
		args = append(args, rt.caps.RateMillis())
	}
	return args
}

// appendPairs appends the (window, max) pairs of limits: a calendar limit's
// window is -k, k naming its calendar's place in cals from 1; a rate
// limit's is 0, its max the burst.
func appendPairs(args []any, limits []gate.Limit, cals []gate.Calendar) []any {
	for _, l := range limits {
		switch {
		case l.Rate != 0:
			args = append(args, 0, l.Max)
		case l.Calendar == "":
			args = append(args, l.WindowMillis(), l.Max)
		default:
			args = append(args, -1-slices.Index(cals, l.Calendar), l.Max)
		}
	}
	return args
}

// calendarsOf lists the calendars r's limits and caps count in, in the
// order they first appear: the script's period triples. A valid request
// names day and week only.
func calendarsOf(r *gate.AdmitRequest) (cals [2]gate.Calendar, n int) {
	for _, set := range [2][]gate.Limit{r.Limits, r.Caps} {
		for _, l := range set {
			if l.Calendar != "" && slices.Index(cals[:n], l.Calendar) < 0 && n < len(cals) {
				cals[n] = l.Calendar
				n++
			}
		}
	}
	return cals, n
}

// storeLag is how far the store's clock may run behind the gate's for
// calendar limits: the periods sent start with the one holding the gate's
// clock less storeLag. The store's clock may also run ahead of the gate's
// by a period less storeLag (22 hours at least, on a 23-hour day) before
// the script finds now in neither period.
const storeLag = time.Hour

// periods returns, in Unix ms, the start and end of the period of c that
// holds now-storeLag in loc (nil is UTC), and the end of the period after
// it: the script counts in [start, end) or [end, end2), whichever holds the
// store's clock. Lua has no time zones, so the gate computes both.
func periods(c gate.Calendar, now time.Time, loc *time.Location) (start, end, end2 int64) {
	l := gate.Limit{Calendar: c}
	s, e := l.Period(now.Add(-storeLag), loc)
	_, e2 := l.Period(e, loc)
	return s.UnixMilli(), e.UnixMilli(), e2.UnixMilli()
}

// memberBytes is the length of a window member: the first bytes of the
// SHA-256 of the message id. Seven keep a window of three members and
// their millisecond scores in one 64-byte listpack allocation; 36-byte
// UUIDs took 160. The duplicate check stays sound: two ids of one window
// are taken for each other only if 56 bits of their hashes agree, about
// once in 10^16 decisions for a window of a few members.
const memberBytes = 7

// member is the window member, and idempotency record, of message id.
func member(id string) string {
	sum := sha256.Sum256([]byte(id))
	return string(sum[:memberBytes])
}
