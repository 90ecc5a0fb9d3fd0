package gate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Period returns the calendar period of l holding t in loc (nil is UTC):
// [start, end). A day runs from local midnight to the next, 23 or 25 hours
// long on a daylight-saving change; a week is an ISO week, from Monday
// 00:00. For a rolling limit it returns (t-Window, t].
//
// Midnight is the first instant at which loc's wall clock reads the day's
// 00:00 or later: in a zone whose clocks jump over midnight (America/Santiago
// in spring) the day starts at the jump, and in one whose clocks go back
// through midnight it starts at the first 00:00. Whatever the zone,
// start <= t < end, and the end of one period is the start of the next.
func (l Limit) Period(t time.Time, loc *time.Location) (start, end time.Time) {
	if loc == nil {
		loc = time.UTC
	}
	lt := t.In(loc)
	y, m, d := lt.Date()
	switch l.Calendar {
	case CalendarDay:
	case CalendarWeek:
		d -= (int(lt.Weekday()) + 6) % 7 // days since Monday
	default:
		return t.Add(-l.Window), t
	}
	days := 1
	if l.Calendar == CalendarWeek {
		days = 7
	}
	start, _ = atWall(y, m, d, 0, loc)
	end, second := atWall(y, m, d+days, 0, loc)
	if !t.Before(end) {
		// Only where clocks go back across midnight, to before it: t is in
		// the repeated stretch that reads as this period again.
		end = second
	}
	return start, end
}

// Active reports whether t falls within q in loc (nil is UTC) and, if so,
// when the quiet span ends: the next local To after t.
//
// The span is [From, To) on the wall clock, crossing midnight when To is
// before From. From == To is never quiet: an empty span, which is also what
// the zero QuietHours means (rule documents reject from == to). Wall-clock
// times are compared, so on a daylight-saving change the span is as long as
// the clocks say: an hour shorter or longer. A To skipped by the change ends
// the span at the change; a To that the change repeats ends it at its first
// occurrence, and the repeated stretch before the second occurrence is
// quiet again (as a wall clock reads it).
func (q QuietHours) Active(t time.Time, loc *time.Location) (until time.Time, quiet bool) {
	if q.From == q.To {
		return time.Time{}, false
	}
	if loc == nil {
		loc = time.UTC
	}
	lt := t.In(loc)
	h, mi, s := lt.Clock()
	tod := time.Duration(h)*time.Hour + time.Duration(mi)*time.Minute + time.Duration(s)*time.Second + time.Duration(lt.Nanosecond())
	if q.From < q.To {
		quiet = q.From <= tod && tod < q.To
	} else {
		quiet = tod >= q.From || tod < q.To
	}
	if !quiet {
		return time.Time{}, false
	}
	y, m, d := lt.Date()
	// The next To is today's or tomorrow's; a third day covers a zone whose
	// clocks go back past To after it was read.
	for i := range 3 {
		first, second := atWall(y, m, d+i, q.To, loc)
		switch {
		case first.After(t):
			return first, true
		case second.After(t):
			return second, true
		}
	}
	return lt.Add(24 * time.Hour), true // unreachable for any zone in tzdata
}

// atWall returns the instants at which loc's wall clock reads day y-m-d
// (normalized as time.Date does) plus tod. Normally there is one, returned
// twice. When a daylight-saving change repeats that wall time, first and
// second are its two occurrences. When a change skips it, both are the
// instant of the change: the first at which the clock reads that time or
// later. time.Date alone gives either side of a change, unspecified which.
func atWall(y int, m time.Month, d int, tod time.Duration, loc *time.Location) (first, second time.Time) {
	r := time.Date(y, m, d, 0, 0, 0, int(tod), loc)
	want := time.Date(y, m, d, 0, 0, 0, int(tod), time.UTC)
	switch got := wallOf(r); {
	case got.Before(want): // skipped; r is before the change, with the old offset
		_, end := r.ZoneBounds()
		return end, end
	case got.After(want): // skipped; r is after the change, with the new offset
		start, _ := r.ZoneBounds()
		return start, start
	}
	first, second = r, r
	_, off := r.Zone()
	start, end := r.ZoneBounds()
	if !start.IsZero() {
		_, prev := start.Add(-time.Nanosecond).Zone()
		if c := r.Add(time.Duration(off-prev) * time.Second); c.Before(start) && wallOf(c).Equal(want) {
			first = c
		}
	}
	if !end.IsZero() {
		_, next := end.Zone()
		if c := r.Add(time.Duration(off-next) * time.Second); !c.Before(end) && wallOf(c).Equal(want) {
			second = c
		}
	}
	return first, second
}

// wallOf is t's wall clock in its own location, as a UTC time, so that wall
// readings compare as instants.
func wallOf(t time.Time) time.Time {
	y, m, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, m, d, h, mi, s, t.Nanosecond(), time.UTC)
}

// ParseClock reads a time of day written HH:MM, 00:00 to 23:59, as rule
// documents write quiet hours, as the offset from midnight.
func ParseClock(s string) (time.Duration, error) {
	hh, mm, ok := strings.Cut(s, ":")
	if ok && len(hh) == 2 && len(mm) == 2 {
		h, herr := strconv.Atoi(hh)
		m, merr := strconv.Atoi(mm)
		if herr == nil && merr == nil && h >= 0 && h <= 23 && m >= 0 && m <= 59 && hh[0] != '+' && mm[0] != '+' {
			return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute, nil
		}
	}
	return 0, fmt.Errorf("invalid time of day %q: want HH:MM from 00:00 to 23:59, such as 08:00 or 22:30", clip(s))
}

// FormatClock writes an offset from midnight as ParseClock reads it: HH:MM.
func FormatClock(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// ErrUnknownZone is returned by LoadZone for a name that is not an IANA
// time zone. Its callers turn it into their own refusal (a message's
// *InvalidError, a rule document's error at its line), so it reaches no
// transport and has no class of its own (ClassInternal).
var ErrUnknownZone = errors.New("unknown time zone")

// Bounds on zone names and on the cache of loaded zones.
const (
	// MaxZoneBytes bounds a zone name. The longest IANA name is 32 bytes
	// (America/Argentina/ComodRivadavia).
	MaxZoneBytes = 64
	// maxCachedZones bounds the zones kept loaded. tzdata has about 600
	// names; a producer cycling through every one of them, and the aliases
	// a host may add, still finds them cached.
	maxCachedZones = 1024
	// maxUnknownZones bounds the names remembered as unknown, so that a
	// producer sending a new bad name in every message costs no memory and
	// one sending the same bad name reads no file for each.
	maxUnknownZones = 256
)

// zones caches LoadZone: every message naming a zone asks for it, and
// time.LoadLocation reads and parses a file each time.
var zones = struct {
	sync.RWMutex
	known   map[string]*time.Location
	unknown map[string]struct{}
}{known: map[string]*time.Location{}, unknown: map[string]struct{}{}}

// LoadZone loads an IANA time zone by name ("" is UTC), from a bounded
// cache: every message naming a zone asks for it. A name is looked up only
// if it is at most MaxZoneBytes of ASCII letters, digits and _ + - /, not
// starting with '/', and not "Local" (the host's zone, which would make a
// decision depend on where the gate runs); anything else, and any name the
// zone database lacks, is ErrUnknownZone. A hit in the cache does not
// allocate.
func LoadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	zones.RLock()
	loc, ok := zones.known[name]
	_, bad := zones.unknown[name]
	zones.RUnlock()
	switch {
	case ok:
		return loc, nil
	case bad || !zoneName(name):
		return nil, fmt.Errorf("%w %q", ErrUnknownZone, clip(name))
	}
	loc, err := time.LoadLocation(name)
	zones.Lock()
	defer zones.Unlock()
	if err != nil {
		if len(zones.unknown) >= maxUnknownZones {
			clear(zones.unknown)
		}
		zones.unknown[name] = struct{}{}
		return nil, fmt.Errorf("%w %q", ErrUnknownZone, name)
	}
	if len(zones.known) < maxCachedZones {
		zones.known[name] = loc
	}
	return loc, nil
}

// zoneName reports whether name may be given to time.LoadLocation: the
// characters of IANA names only, so that no name reaches the file system
// as a path of its own making.
func zoneName(name string) bool {
	if len(name) > MaxZoneBytes || name[0] == '/' || name == "Local" {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '_', c == '+', c == '-', c == '/':
		default:
			return false
		}
	}
	return true
}
