package gate

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := LoadZone(name)
	if err != nil {
		t.Fatalf("LoadZone(%q): %v", name, err)
	}
	return loc
}

// at reads "2006-01-02 15:04" (or with seconds, or an RFC 3339 offset, to
// name one of two repeated wall times) in loc.
func at(t testing.TB, loc *time.Location, s string) time.Time {
	t.Helper()
	for _, layout := range []string{"2006-01-02 15:04", "2006-01-02 15:04:05.999999999", "2006-01-02 15:04Z07:00"} {
		if v, err := time.ParseInLocation(layout, s, loc); err == nil {
			return v
		}
	}
	t.Fatalf("bad time %q", s)
	return time.Time{}
}

func TestPeriod(t *testing.T) {
	day, week := Limit{Calendar: CalendarDay, Max: 3}, Limit{Calendar: CalendarWeek, Max: 10}
	tests := []struct {
		name       string
		zone       string
		l          Limit
		t          string
		start, end string // in the zone; an offset names one of two repeated times
		hours      float64
	}{
		{"Shanghai day", "Asia/Shanghai", day, "2026-03-10 15:04", "2026-03-10 00:00", "2026-03-11 00:00", 24},
		{"Shanghai day at midnight", "Asia/Shanghai", day, "2026-03-10 00:00", "2026-03-10 00:00", "2026-03-11 00:00", 24},
		{"Shanghai day just before midnight", "Asia/Shanghai", day, "2026-03-10 23:59:59.999999999", "2026-03-10 00:00", "2026-03-11 00:00", 24},
		// 2026-03-10 01:00 in Shanghai is still 2026-03-09 in UTC.
		{"Shanghai day is not the UTC day", "Asia/Shanghai", day, "2026-03-10 01:00", "2026-03-10 00:00", "2026-03-11 00:00", 24},
		{"Shanghai year end", "Asia/Shanghai", day, "2026-12-31 23:00", "2026-12-31 00:00", "2027-01-01 00:00", 24},
		{"Shanghai week midweek", "Asia/Shanghai", week, "2026-03-12 09:00", "2026-03-09 00:00", "2026-03-16 00:00", 168},
		{"Shanghai week on Monday 00:00", "Asia/Shanghai", week, "2026-03-09 00:00", "2026-03-09 00:00", "2026-03-16 00:00", 168},
		{"Shanghai week on Sunday night", "Asia/Shanghai", week, "2026-03-15 23:59", "2026-03-09 00:00", "2026-03-16 00:00", 168},
		{"Shanghai week across a year", "Asia/Shanghai", week, "2027-01-01 12:00", "2026-12-28 00:00", "2027-01-04 00:00", 168},
		{"Berlin spring day is 23 h", "Europe/Berlin", day, "2026-03-29 12:00", "2026-03-29 00:00", "2026-03-30 00:00", 23},
		{"Berlin spring day before the change", "Europe/Berlin", day, "2026-03-29 01:30", "2026-03-29 00:00", "2026-03-30 00:00", 23},
		{"Berlin autumn day is 25 h", "Europe/Berlin", day, "2026-10-25 12:00", "2026-10-25 00:00", "2026-10-26 00:00", 25},
		{"Berlin autumn day in the repeated hour", "Europe/Berlin", day, "2026-10-25 02:30+01:00", "2026-10-25 00:00", "2026-10-26 00:00", 25},
		{"Berlin week with the spring change", "Europe/Berlin", week, "2026-03-29 12:00", "2026-03-23 00:00", "2026-03-30 00:00", 167},
		{"Berlin week with the autumn change", "Europe/Berlin", week, "2026-10-20 12:00", "2026-10-19 00:00", "2026-10-26 00:00", 169},
		{"UTC by default", "", day, "2026-03-29 12:00", "2026-03-29 00:00", "2026-03-30 00:00", 24},
		// Clocks jump from 24:00 to 01:00: the day starts at the jump.
		{"Santiago day without a midnight", "America/Santiago", day, "2024-09-08 12:00", "2024-09-08 01:00", "2024-09-09 00:00", 23},
		{"Santiago day before it", "America/Santiago", day, "2024-09-07 23:30", "2024-09-07 00:00", "2024-09-08 01:00", 24},
		// Clocks go back from 24:00 to 23:00: the day ends at the second midnight.
		{"Santiago day with two 23:00", "America/Santiago", day, "2024-04-06 23:30-04:00", "2024-04-06 00:00", "2024-04-07 00:00", 25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc := mustZone(t, tt.zone)
			tm := at(t, loc, tt.t)
			var arg *time.Location
			if tt.zone != "" {
				arg = loc
			}
			start, end := tt.l.Period(tm, arg)
			if want := at(t, loc, tt.start); !start.Equal(want) {
				t.Errorf("start = %v, want %v", start.In(loc), want)
			}
			if want := at(t, loc, tt.end); !end.Equal(want) {
				t.Errorf("end = %v, want %v", end.In(loc), want)
			}
			if got := end.Sub(start).Hours(); got != tt.hours {
				t.Errorf("period is %v h, want %v", got, tt.hours)
			}
		})
	}
}

func TestPeriodRolling(t *testing.T) {
	tm := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)
	start, end := Limit{Window: time.Hour, Max: 1}.Period(tm, mustZone(t, "Europe/Berlin"))
	if !start.Equal(tm.Add(-time.Hour)) || !end.Equal(tm) {
		t.Errorf("rolling period = [%v, %v], want (t-1h, t]", start, end)
	}
}

// TestPeriodProperties checks every zone's calendar periods around its
// changes: t is inside its period, the period starts at a local midnight
// (or the jump that skipped it) of the right weekday, and the next period
// starts where it ends.
func TestPeriodProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	for _, name := range []string{"UTC", "Asia/Shanghai", "Europe/Berlin", "America/Santiago", "America/Havana", "Asia/Beirut",
		"Australia/Lord_Howe", "America/St_Johns", "Asia/Kathmandu", "Pacific/Apia", "Pacific/Chatham", "America/Godthab"} {
		loc := mustZone(t, name)
		base := time.Date(2010, 1, 1, 0, 0, 0, 0, time.UTC)
		for range 4000 {
			tm := base.Add(time.Duration(rng.Int64N(int64(20 * 365 * 24 * time.Hour))))
			for _, l := range []Limit{{Calendar: CalendarDay, Max: 1}, {Calendar: CalendarWeek, Max: 1}} {
				start, end := l.Period(tm, loc)
				if tm.Before(start) || !tm.Before(end) {
					t.Fatalf("%s %s: %v not in its period [%v, %v)", name, l.Calendar, tm.In(loc), start.In(loc), end.In(loc))
				}
				if next, _ := l.Period(end, loc); !next.Equal(end) {
					t.Fatalf("%s %s: the period after [%v, %v) starts at %v", name, l.Calendar, start.In(loc), end.In(loc), next.In(loc))
				}
				ls := start.In(loc)
				if h := ls.Hour(); h > 1 || (h == 1 && ls.Minute() != 0 && name != "Australia/Lord_Howe") {
					t.Fatalf("%s %s: period starts at %v, not a midnight", name, l.Calendar, ls)
				}
				if l.Calendar == CalendarWeek && ls.Weekday() != time.Monday {
					t.Fatalf("%s: week starts on %v", name, ls)
				}
				if span := end.Sub(start); span < 22*time.Hour || (l.Calendar == CalendarDay && span > 26*time.Hour) {
					t.Fatalf("%s %s: period [%v, %v) is %v", name, l.Calendar, ls, end.In(loc), span)
				}
			}
		}
	}
}

func TestQuietHoursActive(t *testing.T) {
	night := QuietHours{From: 22 * time.Hour, To: 8 * time.Hour, Action: ActionDefer}
	office := QuietHours{From: 9 * time.Hour, To: 17 * time.Hour, Action: ActionSuppress}
	tests := []struct {
		name  string
		q     QuietHours
		zone  string
		t     string
		until string // "" means not quiet
	}{
		{"night: evening before", night, "Asia/Shanghai", "2026-03-10 21:59", ""},
		{"night: exactly at from", night, "Asia/Shanghai", "2026-03-10 22:00", "2026-03-11 08:00"},
		{"night: before midnight", night, "Asia/Shanghai", "2026-03-10 23:59:59.999999999", "2026-03-11 08:00"},
		{"night: exactly at midnight", night, "Asia/Shanghai", "2026-03-11 00:00", "2026-03-11 08:00"},
		{"night: early morning", night, "Asia/Shanghai", "2026-03-11 07:59:59.999999999", "2026-03-11 08:00"},
		{"night: exactly at to", night, "Asia/Shanghai", "2026-03-11 08:00", ""},
		{"night: noon", night, "Asia/Shanghai", "2026-03-11 12:00", ""},
		{"office: before", office, "Asia/Shanghai", "2026-03-11 08:59", ""},
		{"office: exactly at from", office, "Asia/Shanghai", "2026-03-11 09:00", "2026-03-11 17:00"},
		{"office: midday", office, "Asia/Shanghai", "2026-03-11 12:30", "2026-03-11 17:00"},
		{"office: exactly at to", office, "Asia/Shanghai", "2026-03-11 17:00", ""},
		{"office: night", office, "Asia/Shanghai", "2026-03-11 23:00", ""},
		{"office: UTC by default", office, "", "2026-03-11 12:30", "2026-03-11 17:00"},
		// Spring forward at 02:00: the night is an hour shorter.
		{"night over the spring change", night, "Europe/Berlin", "2026-03-28 23:00", "2026-03-29 08:00"},
		{"night after the spring change", night, "Europe/Berlin", "2026-03-29 03:30", "2026-03-29 08:00"},
		{"night over the autumn change", night, "Europe/Berlin", "2026-10-24 23:00", "2026-10-25 08:00"},
		{"night in the repeated hour", night, "Europe/Berlin", "2026-10-25 02:30+01:00", "2026-10-25 08:00"},
		// A to the change skips ends the span at the change.
		{"to skipped by the spring change", QuietHours{From: 22 * time.Hour, To: 2*time.Hour + 30*time.Minute}, "Europe/Berlin",
			"2026-03-29 01:45", "2026-03-29 03:00"},
		// A to the change repeats: its first occurrence, then the second for
		// the repeated stretch before it.
		{"to repeated: first", QuietHours{From: 22 * time.Hour, To: 2*time.Hour + 30*time.Minute}, "Europe/Berlin",
			"2026-10-25 02:10+02:00", "2026-10-25 02:30+02:00"},
		{"to repeated: between", QuietHours{From: 22 * time.Hour, To: 2*time.Hour + 30*time.Minute}, "Europe/Berlin",
			"2026-10-25 02:40+02:00", ""},
		{"to repeated: second", QuietHours{From: 22 * time.Hour, To: 2*time.Hour + 30*time.Minute}, "Europe/Berlin",
			"2026-10-25 02:10+01:00", "2026-10-25 02:30+01:00"},
		// From == To is an empty span, as is the zero value.
		{"from equals to", QuietHours{From: 8 * time.Hour, To: 8 * time.Hour}, "Asia/Shanghai", "2026-03-11 08:00", ""},
		{"zero value", QuietHours{}, "", "2026-03-11 00:00", ""},
		// Midnight to midnight minus a minute.
		{"from midnight", QuietHours{From: 0, To: 6 * time.Hour}, "Asia/Shanghai", "2026-03-11 00:00", "2026-03-11 06:00"},
		{"to midnight", QuietHours{From: 20 * time.Hour, To: 0}, "Asia/Shanghai", "2026-03-11 23:59", "2026-03-12 00:00"},
		{"to midnight skipped", QuietHours{From: 20 * time.Hour, To: 0}, "America/Santiago", "2024-09-07 23:30", "2024-09-08 01:00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc := mustZone(t, tt.zone)
			var arg *time.Location
			if tt.zone != "" {
				arg = loc
			}
			until, quiet := tt.q.Active(at(t, loc, tt.t), arg)
			if quiet != (tt.until != "") {
				t.Fatalf("quiet = %v (until %v), want %v", quiet, until, tt.until != "")
			}
			if !quiet {
				if !until.IsZero() {
					t.Errorf("until = %v when not quiet, want zero", until)
				}
				return
			}
			if want := at(t, loc, tt.until); !until.Equal(want) {
				t.Errorf("until = %v, want %v", until.In(loc), want)
			}
		})
	}
}

// TestQuietHoursUntilEndsQuiet holds Active to its own answer: just before
// until it is quiet, at until it is not (unless from meets to again).
func TestQuietHoursUntilEndsQuiet(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	loc := mustZone(t, "Europe/Berlin")
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 20000 {
		q := QuietHours{From: time.Duration(rng.IntN(24*60)) * time.Minute, To: time.Duration(rng.IntN(24*60)) * time.Minute}
		tm := base.Add(time.Duration(rng.Int64N(int64(365 * 24 * time.Hour))))
		until, quiet := q.Active(tm, loc)
		if !quiet {
			continue
		}
		if !until.After(tm) || until.Sub(tm) > 25*time.Hour {
			t.Fatalf("%s-%s at %v: until %v", FormatClock(q.From), FormatClock(q.To), tm.In(loc), until.In(loc))
		}
		if _, q2 := q.Active(until.Add(-time.Nanosecond), loc); !q2 {
			t.Fatalf("%s-%s at %v: not quiet just before until %v", FormatClock(q.From), FormatClock(q.To), tm.In(loc), until.In(loc))
		}
		if _, q2 := q.Active(until, loc); q2 && q.To != q.From {
			h, m, _ := until.In(loc).Clock()
			if time.Duration(h)*time.Hour+time.Duration(m)*time.Minute != q.From {
				t.Fatalf("%s-%s at %v: still quiet at until %v", FormatClock(q.From), FormatClock(q.To), tm.In(loc), until.In(loc))
			}
		}
	}
}

func TestLoadZone(t *testing.T) {
	for _, name := range []string{"Asia/Shanghai", "Europe/Berlin", "UTC", "Etc/GMT+5", "America/Argentina/ComodRivadavia", "America/Port-au-Prince"} {
		loc, err := LoadZone(name)
		if err != nil || loc.String() != name {
			t.Errorf("LoadZone(%q) = %v, %v", name, loc, err)
		}
		again, _ := LoadZone(name)
		if again != loc {
			t.Errorf("LoadZone(%q) twice gives two locations: not cached", name)
		}
	}
	if loc, err := LoadZone(""); err != nil || loc != time.UTC {
		t.Errorf(`LoadZone("") = %v, %v; want UTC`, loc, err)
	}
	for _, name := range []string{"Mars/Base", "Local", "/etc/passwd", "../etc/passwd", "Asia/../Asia/Shanghai", "Asia/Shanghai ",
		"asia/shanghai", "Asia", "zone.tab", "Asia\\Shanghai", "Asia/Shanghai\x00", "北京", strings.Repeat("A", MaxZoneBytes+1), "Mars/Base"} {
		loc, err := LoadZone(name)
		if !errors.Is(err, ErrUnknownZone) || loc != nil {
			t.Errorf("LoadZone(%q) = %v, %v; want ErrUnknownZone", name, loc, err)
		}
	}
	_, err := LoadZone("Mars/Base")
	if want := `unknown time zone "Mars/Base"`; err == nil || err.Error() != want {
		t.Errorf("error %v, want %s", err, want)
	}
}

func TestLoadZoneCacheIsBounded(t *testing.T) {
	for i := range maxUnknownZones * 3 {
		_, _ = LoadZone("Nowhere/Z" + strings.Repeat("x", i%50) + string(rune('a'+i%26)))
	}
	zones.RLock()
	n, k := len(zones.unknown), len(zones.known)
	zones.RUnlock()
	if n > maxUnknownZones || k > maxCachedZones {
		t.Errorf("cache holds %d unknown and %d known names, over %d and %d", n, k, maxUnknownZones, maxCachedZones)
	}
	mustZone(t, "Asia/Shanghai")
	if n := testing.AllocsPerRun(100, func() { _, _ = LoadZone("Asia/Shanghai") }); n != 0 {
		t.Errorf("a cached zone costs %v allocations, want 0", n)
	}
}

func TestClock(t *testing.T) {
	for s, want := range map[string]time.Duration{"00:00": 0, "08:00": 8 * time.Hour, "22:30": 22*time.Hour + 30*time.Minute, "23:59": 23*time.Hour + 59*time.Minute} {
		got, err := ParseClock(s)
		if err != nil || got != want {
			t.Errorf("ParseClock(%q) = %v, %v; want %v", s, got, err, want)
		}
		if f := FormatClock(got); f != s {
			t.Errorf("FormatClock(%v) = %q, want %q", got, f, s)
		}
	}
	for _, s := range []string{"", "8:00", "24:00", "23:60", "-1:00", "+1:00", "12:+1", "12", "12:00:00", "ab:cd", "1200", " 12:00"} {
		if _, err := ParseClock(s); err == nil || !strings.Contains(err.Error(), "want HH:MM from 00:00 to 23:59") {
			t.Errorf("ParseClock(%q) = %v, want an error", s, err)
		}
	}
}

// TestRuleJSON pins the JSON of limits, quiet hours and scenes: it is what
// /v1/rules serves and what the rules' Version hashes, so a scene that uses
// none of the new fields must write exactly what it wrote before them.
func TestRuleJSON(t *testing.T) {
	shanghai := mustZone(t, "Asia/Shanghai")
	tests := []struct {
		name string
		v    any
		want string
	}{
		{"rolling limit", Limit{Window: time.Hour, Max: 1}, `{"window":"1h","max":1}`},
		{"calendar limit", Limit{Calendar: CalendarWeek, Max: 10}, `{"calendar":"week","max":10}`},
		{"quiet hours", QuietHours{From: 22 * time.Hour, To: 8*time.Hour + 30*time.Minute, Action: ActionDefer},
			`{"from":"22:00","to":"08:30","action":"defer"}`},
		{"old scene", SceneRule{Limits: []Limit{{Window: time.Hour, Max: 1}}, OnExceed: ActionSuppress, BypassPriorities: []Priority{PriorityUrgent}, OnStoreError: ActionRetry},
			`{"limits":[{"window":"1h","max":1}],"on_exceed":"suppress","bypass_priorities":["urgent"],"on_store_error":"retry"}`},
		{"deferring scene", SceneRule{Limits: []Limit{{Calendar: CalendarDay, Max: 3}}, OnExceed: ActionDefer, OnStoreError: ActionRetry,
			MaxDefer: 6 * time.Hour, DeferFallback: ActionDigest, DigestGroup: "ops", TZ: "Asia/Shanghai", Zone: shanghai,
			QuietHours: &QuietHours{From: 22 * time.Hour, To: 8 * time.Hour, Action: ActionDefer}},
			`{"limits":[{"calendar":"day","max":3}],"on_exceed":"defer","on_store_error":"retry","defer_fallback":"digest","digest_group":"ops",` +
				`"tz":"Asia/Shanghai","quiet_hours":{"from":"22:00","to":"08:00","action":"defer"},"max_defer":"6h"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(tt.v)
			if err != nil || string(b) != tt.want {
				t.Fatalf("json = %s, %v; want %s", b, err, tt.want)
			}
			back := reflect.New(reflect.TypeOf(tt.v))
			if err := json.Unmarshal(b, back.Interface()); err != nil {
				t.Fatalf("unmarshal %s: %v", b, err)
			}
			if got := back.Elem().Interface(); !reflect.DeepEqual(got, tt.v) {
				t.Errorf("after JSON: %+v, want %+v", got, tt.v)
			}
		})
	}
	var q QuietHours
	if err := json.Unmarshal([]byte(`{"from":"25:00","to":"08:00","action":"defer"}`), &q); err == nil {
		t.Errorf("quiet hours from 25:00 unmarshalled to %+v, want an error", q)
	}
	var r SceneRule
	if err := json.Unmarshal([]byte(`{"limits":[],"tz":"Mars/Base"}`), &r); !errors.Is(err, ErrUnknownZone) {
		t.Errorf("a scene in an unknown zone unmarshalled with %v, want ErrUnknownZone", err)
	}
}
