package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
	"github.com/redis/go-redis/v9"
)

func loadZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load zone %s: %v", name, err)
	}
	return loc
}

// The periods the adapter hands the script, on the days Europe/Berlin
// changes its clocks (23- and 25-hour days, a 167-hour week), and in the
// first hour of a period, which still sends the period before so that a
// Redis clock up to storeLag behind the gate's is decided.
func TestPeriods(t *testing.T) {
	berlin, sh := loadZone(t, "Europe/Berlin"), loadZone(t, "Asia/Shanghai")
	at := func(loc *time.Location, y int, m time.Month, d, h, mi int) time.Time {
		return time.Date(y, m, d, h, mi, 0, 0, loc)
	}
	for _, tc := range []struct {
		name             string
		c                gate.Calendar
		now              time.Time
		loc              *time.Location
		start, end, end2 time.Time
	}{
		{"spring day", gate.CalendarDay, at(berlin, 2031, 3, 30, 12, 0), berlin,
			at(berlin, 2031, 3, 30, 0, 0), at(berlin, 2031, 3, 31, 0, 0), at(berlin, 2031, 4, 1, 0, 0)},
		{"spring day, first hour", gate.CalendarDay, at(berlin, 2031, 3, 30, 0, 30), berlin,
			at(berlin, 2031, 3, 29, 0, 0), at(berlin, 2031, 3, 30, 0, 0), at(berlin, 2031, 3, 31, 0, 0)},
		{"autumn day", gate.CalendarDay, at(berlin, 2031, 10, 26, 23, 30), berlin,
			at(berlin, 2031, 10, 26, 0, 0), at(berlin, 2031, 10, 27, 0, 0), at(berlin, 2031, 10, 28, 0, 0)},
		{"spring week", gate.CalendarWeek, at(berlin, 2032, 3, 28, 23, 30), berlin,
			at(berlin, 2032, 3, 22, 0, 0), at(berlin, 2032, 3, 29, 0, 0), at(berlin, 2032, 4, 5, 0, 0)},
		{"week, first hour of Monday", gate.CalendarWeek, at(sh, 2031, 3, 10, 0, 59), sh,
			at(sh, 2031, 3, 3, 0, 0), at(sh, 2031, 3, 10, 0, 0), at(sh, 2031, 3, 17, 0, 0)},
		{"day, no zone is UTC", gate.CalendarDay, at(sh, 2031, 3, 10, 7, 0), nil,
			at(time.UTC, 2031, 3, 9, 0, 0), at(time.UTC, 2031, 3, 10, 0, 0), at(time.UTC, 2031, 3, 11, 0, 0)},
	} {
		start, end, end2 := periods(tc.c, tc.now, tc.loc)
		if start != tc.start.UnixMilli() || end != tc.end.UnixMilli() || end2 != tc.end2.UnixMilli() {
			t.Errorf("%s: periods(%s, %s) = [%s, %s, %s), want [%s, %s, %s)", tc.name, tc.c, tc.now,
				time.UnixMilli(start).UTC(), time.UnixMilli(end).UTC(), time.UnixMilli(end2).UTC(), tc.start.UTC(), tc.end.UTC(), tc.end2.UTC())
		}
	}
	// The test's own data: the spring and autumn days are 23 and 25 hours.
	if d := at(berlin, 2031, 3, 31, 0, 0).Sub(at(berlin, 2031, 3, 30, 0, 0)); d != 23*time.Hour {
		t.Fatalf("spring day lasts %v", d)
	}
	if d := at(berlin, 2031, 10, 27, 0, 0).Sub(at(berlin, 2031, 10, 26, 0, 0)); d != 25*time.Hour {
		t.Fatalf("autumn day lasts %v", d)
	}
}

// A calendar limit sends its periods once per calendar, named by -k in its
// pair; a rolling-only request sends no periods and its batch does not read
// the gate's clock.
func TestBuildCallsCalendar(t *testing.T) {
	s, err := New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), Options{KeyPrefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	sh := loadZone(t, "Asia/Shanghai")
	clock := time.Date(2031, 3, 5, 12, 0, 0, 0, sh) // a Wednesday
	s.now = func() time.Time { return clock }
	ms := func(y int, m time.Month, d int) int64 { return time.Date(y, m, d, 0, 0, 0, 0, sh).UnixMilli() }
	reqs := []gate.AdmitRequest{
		{ID: "a", Recipient: "open_id:x", Scene: "s", Zone: sh, Force: true,
			Limits: []gate.Limit{{Calendar: gate.CalendarWeek, Max: 10}, {Window: time.Hour, Max: 1}, {Calendar: gate.CalendarDay, Max: 3}},
			Caps:   []gate.Limit{{Calendar: gate.CalendarDay, Max: 20}}},
		{ID: "b", Recipient: "open_id:y", Scene: "t", Limits: []gate.Limit{{Window: time.Second, Max: 2}}},
	}
	calls, got, err := s.buildCalls(reqs, perCallSingle)
	if err != nil {
		t.Fatal(err)
	}
	want := concat(
		[]any{2, 3, 1, -1, 10, int64(3600000), 1, -2, 3, -2, 20}, // the limit sets
		[]any{1, 0, int64(1000), 2},
		[]any{member("a"), 1 + 2*2, 1, "#s",
			ms(2031, 3, 3), ms(2031, 3, 10), ms(2031, 3, 17), // week
			ms(2031, 3, 5), ms(2031, 3, 6), ms(2031, 3, 7)}, // day
		[]any{member("b"), 0, 2, "#t"},
	)
	if len(calls) != 1 || !equalCall(calls[0], call{lo: 0, hi: 2, keys: calls[0].keys, args: want}) {
		t.Fatalf("calls = %#v, want args %#v", calls, want)
	}
	if !got.Equal(clock) {
		t.Fatalf("buildCalls clock = %s, want the gate's %s", got, clock)
	}
	s.now = func() time.Time {
		t.Fatal("a rolling-only batch read the gate's clock")
		return clock
	}
	if _, got, err := s.buildCalls(reqs[1:], perCallSingle); err != nil || !got.IsZero() {
		t.Fatalf("rolling-only buildCalls: clock %s, %v; want none", got, err)
	}
}

// The script counts in whichever of the two periods holds the Redis clock:
// a gate clock that puts Redis in the first period or in the next decides
// alike. A gate clock days away fails the request as transient, and counts
// nothing.
func TestCalendarGateClock(t *testing.T) {
	raw := newClient(t)
	s := newStore(t, raw, newPrefix(t, raw))
	ctx := context.Background()
	sh := loadZone(t, "Asia/Shanghai")
	day := gate.Limit{Calendar: gate.CalendarDay, Max: 1}
	redisNow := func() time.Time {
		now, err := raw.Time(ctx).Result()
		if err != nil {
			t.Fatalf("TIME: %v", err)
		}
		return now
	}
	// Keep clear of midnight, when the day under test would change.
	now := redisNow()
	y, m, d := now.In(sh).Date()
	start, end := time.Date(y, m, d, 0, 0, 0, 0, sh), time.Date(y, m, d+1, 0, 0, 0, 0, sh)
	if left := end.Sub(now); left < 5*time.Second {
		time.Sleep(left + time.Second)
		y, m, d = redisNow().In(sh).Date()
		start, end = time.Date(y, m, d, 0, 0, 0, 0, sh), time.Date(y, m, d+1, 0, 0, 0, 0, sh)
	}
	q := func(r string) gate.AdmitRequest {
		return gate.AdmitRequest{ID: testenv.Unique("m"), Recipient: r, Scene: "s", Limits: []gate.Limit{day}, Zone: sh}
	}
	for _, tc := range []struct {
		name string
		gate time.Time
	}{
		// The gate's clock less storeLag falls in today: Redis is in the first period.
		{"first period", start.Add(storeLag)},
		// It falls in yesterday's last millisecond: Redis is in the next period.
		{"next period", start.Add(storeLag - time.Millisecond)},
	} {
		s.now = func() time.Time { return tc.gate }
		r := "open_id:" + testenv.Unique("r")
		res, err := s.Admit(ctx, []gate.AdmitRequest{q(r), q(r)})
		if err != nil {
			t.Fatalf("%s: Admit: %v", tc.name, err)
		}
		if !res[0].Admitted || res[1].Admitted || res[1].Exceeded == nil || res[1].Exceeded.Limit != day || !res[1].NextAllowedAt.Equal(end) {
			t.Fatalf("%s: got %+v, %+v; want admitted, then rejected by %+v until %s", tc.name, res[0], res[1], day, end)
		}
	}
	for _, skew := range []time.Duration{-72 * time.Hour, 72 * time.Hour} {
		s.now = func() time.Time { return time.Now().Add(skew) }
		r := "open_id:" + testenv.Unique("r")
		res, err := s.Admit(ctx, []gate.AdmitRequest{q(r)})
		if !errors.Is(err, gate.ErrUnavailable) || !errors.Is(err, errClockSkew) {
			t.Fatalf("gate clock %v off: Admit = %v, %v; want a transient clock-skew error", skew, res, err)
		}
		s.now = time.Now
		if res, err := s.Admit(ctx, []gate.AdmitRequest{q(r)}); err != nil || !res[0].Admitted || res[0].Duplicate {
			t.Fatalf("gate clock %v off counted something: the next request got %+v, %v", skew, res, err)
		}
	}
}
