package gate

import (
	"fmt"
	"time"
)

// Complete fills what e says of a decision: Decision, NextAt, Why,
// Preferences and QuietHours, from the dry-run decision d of message m
// planned as p under rs at now (the gate's clock). e's Limits and
// HeldQueues are read first: the next time and the sentence use them.
func (e *Explanation) Complete(rs *RuleSet, p Plan, d Decision, m Message, now time.Time) {
	e.KnownScene = p.Known
	e.At = d.At.UTC()
	e.Decision = ExplainDecision{Outcome: d.Outcome, Reason: d.Reason, Bypass: d.Bypass, Queue: d.Queue.Name}
	if d.Shadow {
		e.Decision.ShadowOf = d.ShadowOf
	}
	if d.Exceeded != nil {
		e.Decision.Exceeded = &ExceededLimit{CheckLimit: *limitOf(*d.Exceeded), Count: d.Exceeded.Count}
	}
	if d.Outcome != OutcomeForward && !d.NextAllowedAt.IsZero() {
		e.Decision.NextAllowedAt = utcPtr(d.NextAllowedAt)
	}
	switch p.Preference {
	case ActionSuppress:
		e.Preferences.Muted = true
		if !p.PreferenceUntil.IsZero() {
			e.Preferences.MutedUntil = utcPtr(p.PreferenceUntil)
		}
	case ActionDigest:
		e.Preferences.DigestOnly = true
	}
	if p.Known && p.Rule.QuietHours != nil {
		e.QuietHours.Action = p.Rule.QuietHours.Action
		if until, quiet := p.Rule.QuietFor(m.Priority, now, p.Zone); quiet {
			e.QuietHours.InForce, e.QuietHours.Until = true, utcPtr(until)
		}
	}
	e.NextAt = e.nextAt(d)
	e.Why = e.why(rs, p, d)
}

// nextAt is when the next message would go out after d: now for a
// forward; else the latest of the decision's next allowed time, the free
// time of every full limit and, for a message queued behind held ones, the
// queue's next due time; nil when none would go out unless something
// changes (a mute until changed, an unknown scene that is not forwarded).
func (e *Explanation) nextAt(d Decision) *time.Time {
	switch {
	case d.Outcome == OutcomeForward:
		return utcPtr(d.At)
	case d.Reason == "unknown_scene":
		return nil
	case d.Reason == ReasonPreference && d.Outcome == OutcomeDigest:
		return utcPtr(d.NextAllowedAt) // the digest goes out then
	case d.Reason == ReasonPreference && d.NextAllowedAt.IsZero():
		return nil
	}
	t := d.NextAllowedAt
	for _, l := range e.Limits {
		if l.Left == 0 && l.FreeAt.After(t) {
			t = l.FreeAt
		}
	}
	if d.Reason == ReasonQueued {
		for _, q := range e.HeldQueues {
			if q.Queue == d.Queue.Name && q.NextDueAt.After(t) {
				t = q.NextDueAt
			}
		}
	}
	if t.Before(d.At) {
		t = d.At
	}
	return utcPtr(t)
}

// why says d in one sentence.
func (e *Explanation) why(rs *RuleSet, p Plan, d Decision) string {
	would := "a message sent now would be " + fateOf(d.Outcome)
	switch {
	case !p.Known:
		return fmt.Sprintf("Scene %q has no rule, so the rules' unknown_scene action (%s) applies: %s.", e.Scene, rs.UnknownScene, would)
	case d.Reason == ReasonPreference && d.Outcome == OutcomeDigest:
		return fmt.Sprintf("The recipient takes scene %q as a digest only: %s into queue %q, which goes out at %s.",
			e.Scene, would, d.Queue.Name, stamp(d.NextAllowedAt))
	case d.Reason == ReasonPreference:
		until := "until they change it"
		if !d.NextAllowedAt.IsZero() {
			until = "until " + stamp(d.NextAllowedAt)
		}
		return fmt.Sprintf("The recipient muted scene %q %s: %s.", e.Scene, until, shadowed(would, d, e.Scene))
	case d.Reason == ReasonQuietHours:
		return fmt.Sprintf("Scene %q is in its quiet hours until %s: %s.", e.Scene, stamp(d.NextAllowedAt), shadowed(would, d, e.Scene))
	case d.Reason == ReasonQueued:
		n := 0
		for _, q := range e.HeldQueues {
			if q.Queue == d.Queue.Name {
				n = q.Count
			}
		}
		return fmt.Sprintf("The recipient has messages held in queue %q (%d) and a new one never overtakes them: %s behind them.",
			d.Queue.Name, n, would)
	case d.Reason == ReasonLimit && d.Exceeded != nil:
		l := limitOf(*d.Exceeded)
		return fmt.Sprintf("The %s is full (%d of %d used): %s; a slot frees at %s.",
			describe(*l), d.Exceeded.Count, l.Max, shadowed(would, d, e.Scene), stamp(d.NextAllowedAt))
	case d.Bypass:
		return fmt.Sprintf("Priority %q bypasses scene %q's limits and quiet hours: %s (it still counts in its windows).",
			e.Priority, e.Scene, would)
	}
	var tight *LimitState
	for i := range e.Limits {
		if l := &e.Limits[i]; tight == nil || l.Left < tight.Left {
			tight = l
		}
	}
	if tight == nil {
		return fmt.Sprintf("Scene %q has no limit: %s.", e.Scene, would)
	}
	return fmt.Sprintf("Every limit has room: %s (the tightest, the %s, has %d of %d left).", would, describe(tight.CheckLimit), tight.Left, tight.Max)
}

// shadowed is would, said of a shadow scene's forward.
func shadowed(would string, d Decision, scene string) string {
	if !d.Shadow {
		return would
	}
	return fmt.Sprintf("scene %q is in shadow mode, so %s, marked as what enforcement would do (%s)", scene, would, d.ShadowOf)
}

// fateOf says what becomes of a message with outcome o.
func fateOf(o Outcome) string {
	switch o {
	case OutcomeForward:
		return "forwarded now"
	case OutcomeSuppress:
		return "suppressed (audited, not sent)"
	case OutcomeDrop:
		return "dropped"
	case OutcomeDefer:
		return "held, to be sent later"
	case OutcomeDigest:
		return "collected into a digest"
	}
	return string(o)
}

// describe names a limit in words: "scene limit of 3 per 1h".
func describe(l CheckLimit) string {
	scope := "scene limit"
	if l.Scope == ScopeRecipient {
		scope = "recipient cap"
	}
	switch {
	case l.Window != nil:
		return fmt.Sprintf("%s of %d per %s", scope, l.Max, FormatDuration(time.Duration(*l.Window)))
	case l.Calendar != "":
		return fmt.Sprintf("%s of %d per calendar %s", scope, l.Max, l.Calendar)
	case l.Rate != nil:
		return fmt.Sprintf("%s at rate %s (burst %d)", scope, FormatRate(time.Duration(*l.Rate)), l.Max)
	}
	return string(l.Scope)
}

// stamp writes t for a sentence: RFC 3339 in UTC.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// utcPtr is t in UTC, by pointer.
func utcPtr(t time.Time) *time.Time {
	t = t.UTC()
	return &t
}
