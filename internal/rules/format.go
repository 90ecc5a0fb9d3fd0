package rules

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/antifatigue/gate/internal/gate"
)

// Format writes rs as a rule document in one canonical layout: scenes sorted
// by name, limits in flow style, defaults written out, optional keys only when
// set. Parse reads it back to rules of the same Version, so two rule sets can
// be compared (`gate rules diff`) by diffing their Format output, whatever
// files or source they came from. Format expects a set from Parse, Merge or
// LoadPath; an empty Action is left out so that Parse fills in its default.
func Format(rs *gate.RuleSet) []byte {
	if rs == nil {
		return nil
	}
	var b bytes.Buffer
	if rs.UnknownScene != "" {
		fmt.Fprintf(&b, "unknown_scene: %s\n", rs.UnknownScene)
	}
	if len(rs.RecipientCaps) > 0 {
		b.WriteString("recipient_caps:\n")
		writeLimits(&b, "  ", rs.RecipientCaps)
	}
	if len(rs.Scenes) == 0 {
		b.WriteString("scenes: {}\n")
		return b.Bytes()
	}
	b.WriteString("scenes:\n")
	for _, name := range slices.Sorted(maps.Keys(rs.Scenes)) {
		r := rs.Scenes[name]
		fmt.Fprintf(&b, "  %s:\n", yamlKey(name))
		b.WriteString("    limits:\n")
		writeLimits(&b, "      ", r.Limits)
		if r.OnExceed != "" {
			fmt.Fprintf(&b, "    on_exceed: %s\n", r.OnExceed)
		}
		if len(r.BypassPriorities) > 0 {
			ps := make([]string, len(r.BypassPriorities))
			for i, p := range r.BypassPriorities {
				ps[i] = string(p)
			}
			fmt.Fprintf(&b, "    bypass_priorities: [%s]\n", strings.Join(ps, ", "))
		}
		if r.Shadow {
			b.WriteString("    shadow: true\n")
		}
		if r.OnStoreError != "" && r.OnStoreError != gate.ActionRetry {
			fmt.Fprintf(&b, "    on_store_error: %s\n", r.OnStoreError)
		}
		writeHold(&b, r)
	}
	return b.Bytes()
}

func writeLimits(b *bytes.Buffer, indent string, ls []gate.Limit) {
	for _, l := range ls {
		if l.Rate != 0 {
			fmt.Fprintf(b, "%s- {rate: %s, burst: %d}\n", indent, gate.FormatRate(l.Rate), l.Max)
			continue
		}
		if l.Calendar != "" {
			fmt.Fprintf(b, "%s- {calendar: %s, max: %d}\n", indent, l.Calendar, l.Max)
			continue
		}
		fmt.Fprintf(b, "%s- {window: %s, max: %d}\n", indent, gate.FormatDuration(l.Window), l.Max)
	}
}

// writeHold writes the keys of held messages, quiet hours and the zone,
// each only when set: Parse fills in max_defer and defer_fallback on a
// scene that defers, so they are written out there, as defaults are.
func writeHold(b *bytes.Buffer, r gate.SceneRule) {
	if r.MaxDefer != 0 {
		fmt.Fprintf(b, "    max_defer: %s\n", gate.FormatDuration(r.MaxDefer))
	}
	if r.DeferFallback != "" {
		fmt.Fprintf(b, "    defer_fallback: %s\n", r.DeferFallback)
	}
	if r.DigestGroup != "" {
		fmt.Fprintf(b, "    digest_group: %s\n", yamlKey(r.DigestGroup))
	}
	if r.TZ != "" {
		fmt.Fprintf(b, "    tz: %s\n", yamlKey(r.TZ))
	}
	if q := r.QuietHours; q != nil {
		fmt.Fprintf(b, "    quiet_hours: {from: %q, to: %q, action: %s}\n", gate.FormatClock(q.From), gate.FormatClock(q.To), q.Action)
	}
}

// yamlKey writes a scene name as a YAML key, or a group or zone name as a
// value: plain when that is unambiguous, else double-quoted. Go's quoting is valid YAML double-quoted syntax
// (\", \\, \n, \xXX, \uXXXX, \UXXXXXXXX are all YAML escapes too).
func yamlKey(name string) string {
	if plainName(name) {
		return name
	}
	return strconv.Quote(name)
}
