package rules

import (
	"time"

	"gopkg.in/yaml.v3"

	"github.com/antifatigue/gate/internal/gate"
)

// This file reads rate limits, {rate: 1/10m, burst: 3}: a GCRA that admits
// burst messages at once, then one per emission interval (10m here).

// DefaultBurst is a rate limit's burst when the document leaves it out: one
// message per interval, none saved up.
const DefaultBurst = 1

// rateExample is how messages show a rate limit.
const rateExample = "{rate: 1/10m, burst: 3}"

// isRate reports whether a limit's fields make it a rate limit.
func isRate(fields []field) bool {
	for _, f := range fields {
		if f.name == "rate" {
			return true
		}
	}
	return false
}

// rateLimit reads one {rate, burst}; rn is the rate's node, for messages.
// A rate limit counts in no window or calendar period, and its burst is
// named burst, not max, so that a reader never takes "max: 3" for "3 per
// interval".
func (p *docParser) rateLimit(path string, fields []field) (l gate.Limit, rn *yaml.Node, ok bool) {
	ok = true
	l.Max = DefaultBurst
	for _, f := range fields {
		switch f.name {
		case "window", "calendar":
			p.failf(f.key, path, "has both rate and %s: a rate limit %s counts in no window or period (write two limits for both)", f.name, rateExample)
			ok = false
		case "max":
			p.failf(f.key, path, `a rate limit takes "burst", not "max": %s admits 3 at once, then one per 10m`, rateExample)
			ok = false
		}
	}
	okR, okB := false, true
	for _, f := range fields {
		switch f.name {
		case "rate":
			rn = f.val
			l.Rate, okR = p.rate(f.val, path+".rate")
		case "burst":
			l.Max, okB = p.max(f.val, path+".burst")
		}
	}
	if ok && okR && okB && time.Duration(l.Max) > MaxWindow/l.Rate {
		p.failf(rn, path, "burst %d at one per %s takes over %s to refill: a rate limit remembers at most %s",
			l.Max, gate.FormatDuration(l.Rate), gate.FormatDuration(MaxWindow), gate.FormatDuration(MaxWindow))
		ok = false
	}
	return l, rn, ok && okR && okB
}

// rate reads "N/duration" and returns its emission interval.
func (p *docParser) rate(n *yaml.Node, path string) (time.Duration, bool) {
	if !p.scalar(n, path, "a rate such as 1/10m (N per duration)") {
		return 0, false
	}
	every, err := gate.ParseRate(n.Value)
	switch {
	case err != nil:
		p.fail(n, path, err)
	case every > MaxWindow:
		p.failf(n, path, "must be at least one per %s, got %q", gate.FormatDuration(MaxWindow), n.Value)
	default:
		return every, true
	}
	return 0, false
}

// burstWithoutRate reports a burst on a limit that is not a rate limit.
func (p *docParser) burstWithoutRate(path string, fields []field) bool {
	for _, f := range fields {
		if f.name == "burst" {
			p.failf(f.key, path, `"burst" belongs to a rate limit such as %s; a window or calendar limit takes max`, rateExample)
			return true
		}
	}
	return false
}
