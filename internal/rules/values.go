package rules

import (
	"fmt"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/antifatigue/gate/internal/gate"
)

// The readers of a rule document's values: limits, durations, counts,
// actions, priorities and booleans, each checked against its bounds.

// limits reads a list of {window, max}, {calendar, max} and {rate, burst}.
// Two limits on one window or calendar period would be redundant at best
// and contradictory at worst, so they are rejected; so is a second rate
// limit, since a store keeps one theoretical arrival time per window.
func (p *docParser) limits(n *yaml.Node, path string) []gate.Limit {
	items := p.sequence(n, path, "[{window: 1h, max: 1}]")
	out := make([]gate.Limit, 0, len(items))
	first := map[gate.Limit]int{} // by window and calendar; Max is zero
	rate := -1
	for i, item := range items {
		ip := fmt.Sprintf("%s[%d]", path, i)
		l, wn, ok := p.limit(item, ip)
		if !ok {
			continue
		}
		if l.Rate != 0 {
			if rate >= 0 {
				p.failf(wn, ip+".rate", "%s[%d] at line %d is already a rate limit: give a list one rate limit (add window limits for longer spans)",
					path, rate, items[rate].Line)
				continue
			}
			rate = i
			out = append(out, l)
			continue
		}
		key := gate.Limit{Window: l.Window, Calendar: l.Calendar}
		if j, dup := first[key]; dup {
			what, sub, each := gate.FormatDuration(l.Window), ".window", "window"
			if l.Calendar != "" {
				what, sub, each = string(l.Calendar), ".calendar", "calendar period"
			}
			p.failf(wn, ip+sub, "%s is already limited by %s[%d] at line %d: give each %s one limit",
				what, path, j, items[j].Line, each)
			continue
		}
		first[key] = i
		out = append(out, l)
	}
	return out
}

// limit reads one {window, max}, {calendar, max} or {rate, burst}; wn is
// the window's, calendar's or rate's node, for messages.
func (p *docParser) limit(n *yaml.Node, path string) (l gate.Limit, wn *yaml.Node, ok bool) {
	fields, ok := p.mapping(n, path, limitKeys)
	if !ok {
		return l, nil, false
	}
	if isRate(fields) {
		return p.rateLimit(path, fields)
	}
	if p.burstWithoutRate(path, fields) {
		return l, nil, false
	}
	if okP, okR := p.period(n, path, fields), p.require(n, path, fields, "max"); !okP || !okR {
		return l, nil, false
	}
	okW, okM := false, false
	for _, f := range fields {
		switch f.name {
		case "window":
			wn = f.val
			l.Window, okW = p.window(f.val, path+".window")
		case "calendar":
			wn = f.val
			l.Calendar, okW = p.calendar(f.val, path+".calendar")
		case "max":
			l.Max, okM = p.max(f.val, path+".max")
		}
	}
	return l, wn, okW && okM
}

func (p *docParser) window(n *yaml.Node, path string) (time.Duration, bool) {
	return p.duration(n, path, "a duration such as 90s, 1h or 7d", MinWindow, MaxWindow)
}

// duration reads a positive duration from lo to hi; want is an example for
// the message when the value is not text.
func (p *docParser) duration(n *yaml.Node, path, want string, lo, hi time.Duration) (time.Duration, bool) {
	if !p.scalar(n, path, want) {
		return 0, false
	}
	d, err := gate.ParseDuration(n.Value)
	switch {
	case err != nil:
		p.fail(n, path, err)
	case d <= 0:
		p.failf(n, path, "must be positive, got %q", n.Value)
	case d < lo:
		p.failf(n, path, "must be at least %s, got %q", gate.FormatDuration(lo), n.Value)
	case d > hi:
		p.failf(n, path, "must be at most %s, got %q", gate.FormatDuration(hi), n.Value)
	default:
		return d, true
	}
	return 0, false
}

func (p *docParser) max(n *yaml.Node, path string) (int, bool) {
	want := fmt.Sprintf("a whole number from 1 to %d", MaxLimit)
	if !p.scalar(n, path, want) {
		return 0, false
	}
	var v int64
	if n.ShortTag() != "!!int" || n.Decode(&v) != nil || v < 1 || v > MaxLimit {
		p.failf(n, path, "must be %s, got %s", want, describe(n))
		return 0, false
	}
	return int(v), true
}

func (p *docParser) action(n *yaml.Node, path string, allowed ...gate.Action) gate.Action {
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	want := orList(names)
	if !p.scalar(n, path, want) {
		return ""
	}
	a := gate.Action(n.Value)
	if !slices.Contains(allowed, a) {
		p.failf(n, path, "must be %s, got %s%s", want, describe(n), suggest(n.Value, names))
	}
	return a
}

func (p *docParser) priorities(n *yaml.Node, path string) []gate.Priority {
	const want = "low, normal, high or urgent"
	items := p.sequence(n, path, "[urgent]")
	out := make([]gate.Priority, 0, len(items))
	for i, item := range items {
		ip := fmt.Sprintf("%s[%d]", path, i)
		if !p.scalar(item, ip, want) {
			continue
		}
		pr := gate.Priority(item.Value)
		switch j := slices.Index(out, pr); {
		case !gate.ValidPriority(pr):
			p.failf(item, ip, "must be %s, got %s", want, describe(item))
		case j >= 0:
			p.failf(item, ip, "%s is listed twice", pr)
		default:
			out = append(out, pr)
		}
	}
	return out
}

func (p *docParser) boolean(n *yaml.Node, path string) bool {
	const want = "true or false"
	if !p.scalar(n, path, want) {
		return false
	}
	var b bool
	if n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		p.failf(n, path, "must be %s, got %s", want, describe(n))
	}
	return b
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }
