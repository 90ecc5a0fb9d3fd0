package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// calendarCases check calendar limits. A store's clock may be the real one
// (Redis TIME), so every expectation is computed from the Now of the
// store's replies, and a case whose decisions straddle a period boundary
// runs again. Crossing a boundary on purpose, and the daylight-saving days,
// need Backend.Travel.
var calendarCases = []testCase{
	{"CalendarDay", testCalendarDay},
	{"CalendarWeek", testCalendarWeek},
	{"CalendarWithRolling", testCalendarWithRolling},
	{"CalendarCapAcrossScenes", testCalendarCapAcrossScenes},
	{"CalendarDuplicates", testCalendarDuplicates},
	{"CalendarMemoryBounded", testCalendarMemoryBounded},
	{"CalendarLargeMax", testCalendarLargeMax},
	{"CalendarDaylightSaving", testCalendarDaylightSaving},
	{"CalendarInvalid", testCalendarInvalid},
}

func cal(c gate.Calendar, max int) gate.Limit { return gate.Limit{Calendar: c, Max: max} }

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load zone %s: %v", name, err)
	}
	return loc
}

// inZone returns r with every limit counted in loc.
func inZone(r gate.AdmitRequest, loc *time.Location) gate.AdmitRequest {
	r.Zone = loc
	return r
}

// periodEnd is when the period of c holding t in loc (nil is UTC) ends:
// the next local midnight, or the next Monday's, found by the calendar
// rather than by adding hours, so that it is independent of the stores'
// arithmetic (gate.Limit.Period).
func periodEnd(c gate.Calendar, t time.Time, loc *time.Location) time.Time {
	if loc == nil {
		loc = time.UTC
	}
	local := t.In(loc)
	days := 1
	if c == gate.CalendarWeek {
		days = 7 - (int(local.Weekday())+6)%7 // Monday is day 0 of an ISO week
	}
	y, m, d := local.Date()
	return time.Date(y, m, d+days, 0, 0, 0, 0, loc)
}

// samePeriod reports whether every t lies in one period of c in loc.
func samePeriod(c gate.Calendar, loc *time.Location, ts ...time.Time) bool {
	for _, t := range ts[1:] {
		if !periodEnd(c, t, loc).Equal(periodEnd(c, ts[0], loc)) {
			return false
		}
	}
	return true
}

// oncePeriod runs attempt, which returns false when its decisions straddled
// a period boundary of the real clock before it asserted anything; it is
// then run again with fresh recipients. Three straddles in a row mean the
// store's clock is not what the suite thinks it is.
func oncePeriod(t *testing.T, attempt func() bool) {
	t.Helper()
	for range 3 {
		if attempt() {
			return
		}
		t.Log("the decisions straddled a period boundary; once more")
	}
	t.Fatal("three attempts straddled a period boundary")
}

// travel moves the store's clock to at, when the backend can.
func travel(t *testing.T, b Backend, at time.Time) bool {
	t.Helper()
	if b.Travel == nil {
		return false
	}
	b.Travel(t, at)
	if now := b.Now(t); !now.Equal(at) {
		t.Fatalf("Travel(%s): the store's clock reads %s", at.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	return true
}

// A day limit in Asia/Shanghai admits Max, then rejects until the next
// Shanghai midnight, and admits again from that very millisecond.
func testCalendarDay(t *testing.T, b Backend) {
	sh, l := zone(t, "Asia/Shanghai"), cal(gate.CalendarDay, 3)
	oncePeriod(t, func() bool {
		r := newRecipient()
		var got []gate.AdmitResult
		for range 4 {
			got = append(got, admitOne(t, b.Store, inZone(req(r, "s", newID(), l), sh)))
		}
		if !samePeriod(gate.CalendarDay, sh, got[0].Now, got[3].Now) {
			return false
		}
		for i := range 3 {
			wantAdmitted(t, fmt.Sprintf("message %d", i+1), got[i])
		}
		next := periodEnd(gate.CalendarDay, got[3].Now, sh)
		wantRejected(t, "message 4", got[3], gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 3}, next)
		if travel(t, b, next.Add(-ms)) {
			wantRejected(t, "a millisecond before midnight", admitOne(t, b.Store, inZone(req(r, "s", newID(), l), sh)),
				gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 3}, next)
			travel(t, b, next)
			wantAdmitted(t, "at midnight", admitOne(t, b.Store, inZone(req(r, "s", newID(), l), sh)))
		}
		return true
	})
}

// A week limit with no zone counts the ISO week in UTC and reopens on
// Monday 00:00 UTC.
func testCalendarWeek(t *testing.T, b Backend) {
	l := cal(gate.CalendarWeek, 2)
	oncePeriod(t, func() bool {
		r := newRecipient()
		got := admit(t, b.Store, req(r, "s", newID(), l), req(r, "s", newID(), l), req(r, "s", newID(), l))
		if !samePeriod(gate.CalendarWeek, nil, got[0].Now, got[2].Now) {
			return false
		}
		wantAdmitted(t, "a", got[0])
		wantAdmitted(t, "b", got[1])
		next := periodEnd(gate.CalendarWeek, got[2].Now, nil)
		if next.Weekday() != time.Monday || next.Sub(got[2].Now) > 7*24*time.Hour {
			t.Fatalf("the suite's week ends %s, after %s: not the next Monday", next, got[2].Now)
		}
		wantRejected(t, "c", got[2], gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 2}, next)
		if travel(t, b, next.Add(-ms)) {
			wantRejected(t, "on Sunday, a millisecond before Monday", admitOne(t, b.Store, req(r, "s", newID(), l)),
				gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 2}, next)
			travel(t, b, next)
			wantAdmitted(t, "on Monday 00:00", admitOne(t, b.Store, req(r, "s", newID(), l)))
		}
		return true
	})
}

// Beside rolling limits (scene and cap) a calendar limit is one more limit:
// when several are exceeded, the one that reopens last is reported.
func testCalendarWithRolling(t *testing.T, b Backend) {
	sh := zone(t, "Asia/Shanghai")
	day, long, short := cal(gate.CalendarDay, 1), lim(49*time.Hour, 1), lim(time.Second, 1)
	oncePeriod(t, func() bool {
		r := newRecipient()
		got := admit(t, b.Store,
			inZone(req(r, "long", newID(), day, long), sh),
			inZone(req(r, "long", newID(), day, long), sh),
			inZone(req(r, "short", newID(), short, day), sh),
			inZone(req(r, "short", newID(), short, day), sh),
		)
		if !samePeriod(gate.CalendarDay, sh, got[0].Now, got[3].Now) {
			return false
		}
		wantAdmitted(t, "long a", got[0])
		// 49 h always outlasts the day.
		wantRejected(t, "long b", got[1], gate.Exceeded{Scope: gate.ScopeScene, Limit: long, Count: 1}, got[0].Now.Add(49*time.Hour))
		wantAdmitted(t, "short a", got[2])
		// The day outlasts 1 s, but for a second before midnight; on a tie
		// the limit listed first is reported.
		want, next := gate.Exceeded{Scope: gate.ScopeScene, Limit: day, Count: 1}, periodEnd(gate.CalendarDay, got[3].Now, sh)
		if reopen := got[2].Now.Add(time.Second); !reopen.Before(next) {
			want, next = gate.Exceeded{Scope: gate.ScopeScene, Limit: short, Count: 1}, reopen
		}
		wantRejected(t, "short b", got[3], want, next)

		// A scene's rolling limit against a calendar cap: the cap reopens
		// at midnight, the scene's 49 h later than its admission.
		capped := func(scene string, force bool, l ...gate.Limit) gate.AdmitRequest {
			q := inZone(req(r, scene, newID(), l...), sh)
			q.Caps, q.Force = limits(cal(gate.CalendarDay, 2)), force
			return q
		}
		got = admit(t, b.Store, capped("c1", false, short), capped("c2", true, long), capped("c2", false, long), capped("c3", false, short))
		if !samePeriod(gate.CalendarDay, sh, got[0].Now, got[3].Now) {
			return false
		}
		wantAdmitted(t, "c1", got[0])
		wantAdmitted(t, "c2 forced", got[1])
		wantRejected(t, "c2 over both", got[2], gate.Exceeded{Scope: gate.ScopeScene, Limit: long, Count: 1}, got[1].Now.Add(49*time.Hour))
		wantRejected(t, "c3 over the cap", got[3], gate.Exceeded{Scope: gate.ScopeRecipient, Limit: cal(gate.CalendarDay, 2), Count: 2},
			periodEnd(gate.CalendarDay, got[3].Now, sh))
		return true
	})
}

// A calendar cap counts a recipient's admissions of every capped scene in
// the day of the request's zone.
func testCalendarCapAcrossScenes(t *testing.T, b Backend) {
	sh, capl, scene := zone(t, "Asia/Shanghai"), cal(gate.CalendarDay, 2), lim(time.Hour, 5)
	oncePeriod(t, func() bool {
		r := newRecipient()
		q := func(s string) gate.AdmitRequest {
			x := inZone(req(r, s, newID(), scene), sh)
			x.Caps = limits(capl)
			return x
		}
		got := admit(t, b.Store, q("s1"), q("s2"), q("s3"), req(r, "s4", newID(), scene), q("s1"))
		if !samePeriod(gate.CalendarDay, sh, got[0].Now, got[4].Now) {
			return false
		}
		next := periodEnd(gate.CalendarDay, got[4].Now, sh)
		wantAdmitted(t, "s1", got[0])
		wantAdmitted(t, "s2", got[1])
		wantRejected(t, "s3 over the cap", got[2], gate.Exceeded{Scope: gate.ScopeRecipient, Limit: capl, Count: 2}, next)
		wantAdmitted(t, "s4, not capped", got[3])
		wantRejected(t, "s1 again, over the cap", got[4], gate.Exceeded{Scope: gate.ScopeRecipient, Limit: capl, Count: 2}, next)
		if b.Members != nil {
			wantMembers(t, b, r, "", 2)
		}
		if travel(t, b, next) {
			wantAdmitted(t, "s3 the next day", admitOne(t, b.Store, q("s3")))
		}
		return true
	})
}

// An id admitted earlier in the period is a duplicate for as long as the
// period lasts, although the rolling limit beside the calendar one is much
// shorter: the window is kept to the period's end, not to the rolling
// window's.
func testCalendarDuplicates(t *testing.T, b Backend) {
	sh := zone(t, "Asia/Shanghai")
	short, day := lim(time.Second, 1), cal(gate.CalendarDay, 2)
	oncePeriod(t, func() bool {
		r := newRecipient()
		a := inZone(req(r, "s", newID(), short, day), sh)
		first := admitOne(t, b.Store, a)
		wantAdmitted(t, "a", first)
		wantDuplicate(t, "a again", admitOne(t, b.Store, a))
		wantDuplicate(t, "a from a second client", admitOne(t, b.Client(t), a))
		// Past the rolling window and the second a rolling-only window is
		// kept beyond it.
		sleepUntil(t, b, first.Now.Add(2*time.Second))
		again := admitOne(t, b.Store, a)
		if !samePeriod(gate.CalendarDay, sh, first.Now, again.Now) {
			return false
		}
		if b.Keys != nil {
			wantKeys(t, b, r, 1)
		}
		wantDuplicate(t, "a, 2s later in the same day", again)
		got := admit(t, b.Store, inZone(req(r, "s", newID(), short, day), sh), a, inZone(req(r, "s", newID(), day), sh))
		if !samePeriod(gate.CalendarDay, sh, first.Now, got[2].Now) {
			return false
		}
		wantAdmitted(t, "b", got[0])
		wantDuplicate(t, "a, the day full", got[1])
		wantRejected(t, "c", got[2], gate.Exceeded{Scope: gate.ScopeScene, Limit: day, Count: 2}, periodEnd(gate.CalendarDay, got[2].Now, sh))
		if b.Members != nil {
			wantMembers(t, b, r, "s", 2)
		}
		return true
	})
}

// Forced admissions cannot grow a calendar window past its largest max.
func testCalendarMemoryBounded(t *testing.T, b Backend) {
	needKeys(t, b)
	l := cal(gate.CalendarDay, 3)
	oncePeriod(t, func() bool {
		r, base := newRecipient(), newID()
		reqs := make([]gate.AdmitRequest, 20)
		for i := range reqs {
			reqs[i] = req(r, "s", fmt.Sprintf("%s-%03d", base, i), l)
			reqs[i].Caps, reqs[i].Force = limits(cal(gate.CalendarWeek, 4)), true
		}
		got := admit(t, b.Store, reqs...)
		res := admitOne(t, b.Store, req(r, "s", newID(), l))
		if !samePeriod(gate.CalendarDay, nil, got[0].Now, res.Now) {
			return false
		}
		for i := range got {
			wantAdmitted(t, fmt.Sprintf("forced %d", i+1), got[i])
		}
		wantMembers(t, b, r, "s", 3)
		wantMembers(t, b, r, "", 4)
		wantDuplicate(t, "the newest again", admitOne(t, b.Store, reqs[19]))
		wantRejected(t, "unforced", res, gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 3}, periodEnd(gate.CalendarDay, res.Now, nil))
		return true
	})
}

// A calendar window of more members than a store reads at once (Redis reads
// the newest 16) counts and finds duplicates among all of them.
func testCalendarLargeMax(t *testing.T, b Backend) {
	const max = 40
	l, capl := cal(gate.CalendarWeek, max), cal(gate.CalendarDay, max)
	oncePeriod(t, func() bool {
		r := newRecipient()
		reqs := make([]gate.AdmitRequest, max+1)
		for i := range reqs {
			reqs[i] = req(r, "s", newID(), l)
			reqs[i].Caps = limits(capl)
		}
		got := admit(t, b.Store, reqs...)
		again := admit(t, b.Store, reqs[:max]...)
		other := req(r, "t", newID(), lim(time.Hour, 1))
		other.Caps = limits(capl)
		capped := admitOne(t, b.Store, other)
		if !samePeriod(gate.CalendarDay, nil, got[0].Now, capped.Now) || !samePeriod(gate.CalendarWeek, nil, got[0].Now, capped.Now) {
			return false
		}
		for i := range max {
			wantAdmitted(t, fmt.Sprintf("message %d", i+1), got[i])
		}
		// Both are full: the week reopens after the day, or with it.
		wantRejected(t, "one over", got[max], gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: max}, periodEnd(gate.CalendarWeek, got[max].Now, nil))
		for i := range again {
			wantDuplicate(t, fmt.Sprintf("message %d again", i+1), again[i])
		}
		wantRejected(t, "another scene under the cap", capped, gate.Exceeded{Scope: gate.ScopeRecipient, Limit: capl, Count: max}, periodEnd(gate.CalendarDay, capped.Now, nil))
		return true
	})
}

// On the days Europe/Berlin changes its clocks a day lasts 23 or 25 hours:
// an admission at 00:30 still holds the limit at 23:30, and the limit
// reopens at the next local midnight. A week holding the spring change
// lasts 167 hours. Only a settable clock reaches these dates; the Redis
// store's adapter has a test of its own for the periods it computes.
func testCalendarDaylightSaving(t *testing.T, b Backend) {
	if b.Travel == nil {
		t.Skip("the store's clock cannot be set")
	}
	berlin, day, week := zone(t, "Europe/Berlin"), cal(gate.CalendarDay, 1), cal(gate.CalendarWeek, 1)
	at := func(y int, month time.Month, d, h, m int) time.Time {
		return time.Date(y, month, d, h, m, 0, 0, berlin)
	}
	// In time order: the clock only moves forward.
	for _, tc := range []struct {
		name              string
		l                 gate.Limit
		first, later, end time.Time
		hours             time.Duration
	}{
		{"spring day", day, at(2031, time.March, 30, 0, 30), at(2031, time.March, 30, 23, 30), at(2031, time.March, 31, 0, 0), 23},
		{"autumn day", day, at(2031, time.October, 26, 0, 30), at(2031, time.October, 26, 23, 30), at(2031, time.October, 27, 0, 0), 25},
		{"spring week", week, at(2032, time.March, 22, 0, 30), at(2032, time.March, 28, 23, 30), at(2032, time.March, 29, 0, 0), 167},
	} {
		// An hour before first lies in the period before: its end is the
		// start of this one.
		if got := tc.end.Sub(periodEnd(tc.l.Calendar, tc.first.Add(-time.Hour), berlin)); got != tc.hours*time.Hour {
			t.Fatalf("%s: the test's period lasts %v, want %dh", tc.name, got, tc.hours)
		}
		r := newRecipient()
		q := func() gate.AdmitRequest { return inZone(req(r, "s", newID(), tc.l), berlin) }
		held := gate.Exceeded{Scope: gate.ScopeScene, Limit: tc.l, Count: 1}
		travel(t, b, tc.first)
		wantAdmitted(t, tc.name+": first", admitOne(t, b.Store, q()))
		travel(t, b, tc.later)
		wantRejected(t, tc.name+": later that period", admitOne(t, b.Store, q()), held, tc.end)
		travel(t, b, tc.end.Add(-ms))
		wantRejected(t, tc.name+": a millisecond before midnight", admitOne(t, b.Store, q()), held, tc.end)
		travel(t, b, tc.end)
		wantAdmitted(t, tc.name+": at midnight", admitOne(t, b.Store, q()))
	}
}

// A calendar limit must name a known calendar, have no window and a max of
// at least 1.
func testCalendarInvalid(t *testing.T, b Backend) {
	for _, tc := range []struct {
		name string
		edit func(*gate.AdmitRequest)
	}{
		{"window and calendar", func(q *gate.AdmitRequest) {
			q.Limits = limits(gate.Limit{Window: time.Hour, Calendar: gate.CalendarDay, Max: 1})
		}},
		{"unknown calendar", func(q *gate.AdmitRequest) { q.Limits = limits(cal("month", 1)) }},
		{"calendar max 0", func(q *gate.AdmitRequest) { q.Limits = limits(cal(gate.CalendarDay, 0)) }},
		{"cap of unknown calendar", func(q *gate.AdmitRequest) { q.Caps = limits(cal("Day", 1)) }},
		{"cap with window and calendar", func(q *gate.AdmitRequest) {
			q.Caps = limits(gate.Limit{Window: -time.Hour, Calendar: gate.CalendarWeek, Max: 1})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantInvalid(t, b, tc.edit) })
	}
}
