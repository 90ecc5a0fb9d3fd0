package rules

import (
	"cmp"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/antifatigue/gate/internal/gate"
)

// This file reads what a scene says about time beyond its rolling windows:
// calendar limits, held messages (defer and digest), quiet hours and the
// scene's time zone.

// calendarOrder is the order calendar limits are normalized to, after the
// rolling ones: shortest period first, as rolling limits are.
var calendarOrder = []gate.Calendar{gate.CalendarDay, gate.CalendarWeek}

// limitOrder puts equal lists of limits in equal order: rolling limits by
// window, then calendar limits by period, then the rate limit. Documents
// without calendar or rate limits keep the order, and so the Version, they
// always had.
func limitOrder(a, b gate.Limit) int {
	return cmp.Or(
		cmp.Compare(a.Rate, b.Rate),
		cmp.Compare(slices.Index(calendarOrder, a.Calendar), slices.Index(calendarOrder, b.Calendar)),
		cmp.Compare(a.Window, b.Window))
}

// period reports whether a limit's fields name exactly one of window and
// calendar, reporting it otherwise: a limit counts either in a rolling
// window or in a calendar period, and which of two it would use is not a
// guess to make.
func (p *docParser) period(n *yaml.Node, path string, fields []field) bool {
	var window, calendar *yaml.Node
	for _, f := range fields {
		switch f.name {
		case "window":
			window = f.key
		case "calendar":
			calendar = f.key
		}
	}
	switch {
	case window == nil && calendar == nil:
		p.failf(n, path, `missing key "window", "calendar" or "rate": a limit counts in a rolling window ({window: 1h, max: 1}), a calendar period ({calendar: day, max: 3}) or at a rate ({rate: 1/10m, burst: 3})`)
		return false
	case window != nil && calendar != nil:
		p.failf(calendar, path, "has both window and calendar: give one, a rolling window or a calendar period (write two limits for both)")
		return false
	}
	return true
}

func (p *docParser) calendar(n *yaml.Node, path string) (gate.Calendar, bool) {
	names := make([]string, len(calendarOrder))
	for i, c := range calendarOrder {
		names[i] = string(c)
	}
	want := orList(names)
	if !p.scalar(n, path, want) {
		return "", false
	}
	c := gate.Calendar(n.Value)
	if !slices.Contains(calendarOrder, c) {
		p.failf(n, path, "must be %s, got %s%s", want, describe(n), suggest(n.Value, names))
		return "", false
	}
	return c, true
}

// holdKey reads a scene key of this file into r.
func (p *docParser) holdKey(f field, path string, r *gate.SceneRule) {
	switch f.name {
	case "max_defer":
		r.MaxDefer = p.maxDefer(f.val, path)
	case "defer_fallback":
		r.DeferFallback = p.action(f.val, path, gate.ActionSuppress, gate.ActionDrop, gate.ActionDigest)
	case "digest_group":
		r.DigestGroup = p.digestGroup(f.val, path)
	case "tz":
		r.TZ, r.Zone = p.zone(f.val, path)
	case "quiet_hours":
		r.QuietHours = p.quietHours(f.val, path)
	}
}

// holdDefaults fills in max_defer and defer_fallback for a scene that
// defers, and rejects the keys of held messages on a scene that never holds
// one: a max_defer that nothing reads is a mistake a person should hear of
// (most likely on_exceed was changed and the rest left behind), not a
// setting silently ignored. A scene that does not defer keeps MaxDefer and
// DeferFallback empty, so its JSON and Version stay what they were.
func (p *docParser) holdDefaults(path string, fields []field, r *gate.SceneRule) {
	quiet := gate.Action("")
	if r.QuietHours != nil {
		quiet = r.QuietHours.Action
	}
	// When on_exceed or the quiet action is itself wrong, that is the
	// problem to report; which keys would apply is not known.
	known := slices.Contains([]gate.Action{gate.ActionSuppress, gate.ActionDrop, gate.ActionDefer, gate.ActionDigest}, r.OnExceed) &&
		slices.Contains([]gate.Action{"", gate.ActionSuppress, gate.ActionDrop, gate.ActionDefer}, quiet)
	defers := r.OnExceed == gate.ActionDefer || quiet == gate.ActionDefer
	if defers {
		if r.MaxDefer == 0 {
			r.MaxDefer = gate.DefaultMaxDefer
		}
		if r.DeferFallback == "" {
			r.DeferFallback = gate.ActionSuppress
		}
	}
	digests := r.OnExceed == gate.ActionDigest || (defers && r.DeferFallback == gate.ActionDigest)
	for _, f := range fields {
		switch {
		case !known:
		case !defers && (f.name == "max_defer" || f.name == "defer_fallback"):
			p.failf(f.key, path+"."+f.name, "applies only to a scene that defers: set on_exceed: defer or quiet_hours action: defer, or remove %s", f.name)
		case !digests && f.name == "digest_group":
			p.failf(f.key, path+"."+f.name, "applies only to a scene that sends digests: set on_exceed: digest or defer_fallback: digest, or remove digest_group")
		}
	}
	if !defers {
		r.MaxDefer, r.DeferFallback = 0, ""
	}
}

func (p *docParser) maxDefer(n *yaml.Node, path string) time.Duration {
	d, _ := p.duration(n, path, "a duration such as 6h or 2d", time.Nanosecond, gate.MaxMaxDefer)
	return d
}

// digestGroup reads a group name, held to the checks of a scene name: it is
// part of a queue's name as a scene is, and a person must be able to tell
// two groups apart.
func (p *docParser) digestGroup(n *yaml.Node, path string) string {
	if !p.scalar(n, path, "a group name such as ci") {
		return ""
	}
	if reason := nameProblem("digest_group", n.Value); reason != "" {
		p.failf(n, path, "%s", reason)
		return ""
	}
	return n.Value
}

// zone reads an IANA time zone name. A zone the gate cannot load makes the
// document invalid: counting a calendar day or quiet hours in UTC instead
// would be wrong all day, and no log line would say why.
func (p *docParser) zone(n *yaml.Node, path string) (string, *time.Location) {
	const want = "an IANA time zone such as Asia/Shanghai, Europe/Berlin or UTC"
	if !p.scalar(n, path, want) {
		return "", nil
	}
	if n.Value == "" {
		p.failf(n, path, "must be %s, got %s (leave tz out for UTC)", want, describe(n))
		return "", nil
	}
	loc, err := gate.LoadZone(n.Value)
	if err != nil {
		p.failf(n, path, "unknown time zone %s: want %s", describe(n), want)
		return "", nil
	}
	return n.Value, loc
}

var quietKeys = []string{"from", "to", "action"}

// quietHours reads {from: "22:00", to: "08:00", action: defer}. Every key
// is required: the action in particular is what the whole span does, too
// important to leave to a default.
func (p *docParser) quietHours(n *yaml.Node, path string) *gate.QuietHours {
	fields, ok := p.mapping(n, path, quietKeys)
	if !ok || !p.require(n, path, fields, quietKeys...) {
		return nil
	}
	q := &gate.QuietHours{}
	var to *yaml.Node
	okFrom, okTo := false, false
	for _, f := range fields {
		fp := path + "." + f.name
		switch f.name {
		case "from":
			q.From, okFrom = p.clock(f.val, fp)
		case "to":
			to = f.val
			q.To, okTo = p.clock(f.val, fp)
		case "action":
			q.Action = p.action(f.val, fp, gate.ActionDefer, gate.ActionSuppress, gate.ActionDrop)
		}
	}
	if okFrom && okTo && q.From == q.To {
		p.failf(to, path+".to", "is the same time as from (%s): quiet hours need a span from one time of day to another", gate.FormatClock(q.From))
	}
	return q
}

// clock reads a time of day HH:MM. YAML reads an unquoted 22:00 as text,
// so only text is taken: a number such as 2200 is a mistake.
func (p *docParser) clock(n *yaml.Node, path string) (time.Duration, bool) {
	const want = `a time of day HH:MM such as "22:00"`
	if !p.scalar(n, path, want) {
		return 0, false
	}
	if n.ShortTag() != "!!str" {
		p.failf(n, path, "must be %s, got %s", want, describe(n))
		return 0, false
	}
	d, err := gate.ParseClock(n.Value)
	if err != nil {
		p.fail(n, path, err)
		return 0, false
	}
	return d, true
}
