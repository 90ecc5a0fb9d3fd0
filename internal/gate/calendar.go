package gate

import (
	"errors"
	"time"
)

// Period returns the calendar period of l holding t in loc (nil is UTC):
// [start, end). A day runs from local midnight to the next, 23 or 25 hours
// long on a daylight-saving change; a week is an ISO week, from Monday
// 00:00. For a rolling limit it returns (t-Window, t].
func (l Limit) Period(t time.Time, loc *time.Location) (start, end time.Time) {
	panic("TODO(rules helper)")
}

// Active reports whether t falls within q in loc (nil is UTC) and, if so,
// when the quiet span ends: the next local To after t.
func (q QuietHours) Active(t time.Time, loc *time.Location) (until time.Time, quiet bool) {
	panic("TODO(rules helper)")
}

// ErrUnknownZone is returned by LoadZone for a name that is not an IANA
// time zone.
var ErrUnknownZone = errors.New("unknown time zone")

// LoadZone loads an IANA time zone by name ("" is UTC), from a bounded
// cache: every message naming a zone asks for it.
func LoadZone(name string) (*time.Location, error) {
	panic("TODO(rules helper)")
}
