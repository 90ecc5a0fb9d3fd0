package gate

import "time"

// Plan is what a message needs before its outcome is known: a window check
// (Request set), or a fixed outcome when its scene has no rule.
type Plan struct {
	Rule    SceneRule
	Known   bool          // the scene has a rule
	Request *AdmitRequest // nil when no window applies
	Bypass  bool          // the message's priority bypasses the limits
}

// PlanMessage works out what deciding m under rs takes. A message of an
// unknown scene touches no window: it neither counts toward the recipient
// caps nor is held by them.
func PlanMessage(rs *RuleSet, m Message) Plan {
	rule, ok := rs.Scene(m.Scene)
	if !ok {
		return Plan{}
	}
	bypass := rule.Bypasses(m.Priority)
	return Plan{
		Rule:   rule,
		Known:  true,
		Bypass: bypass,
		Request: &AdmitRequest{
			ID:        m.ID,
			Recipient: m.Recipient(),
			Scene:     m.Scene,
			Limits:    rule.Limits,
			Caps:      rs.RecipientCaps,
			Force:     bypass,
		},
	}
}

// Decision is the outcome of one message, with what explains it.
type Decision struct {
	Outcome Outcome
	// Shadow is set on a forward that enforcement would have turned into
	// ShadowOf (suppress or drop).
	Shadow   bool
	ShadowOf Action
	Bypass   bool
	// Duplicate is set when the window store had already admitted this id.
	Duplicate bool
	// Unchecked is set on a forward that no window checked: the store was
	// unavailable and the scene fails open (on_store_error: forward).
	Unchecked     bool
	Reason        string // "limit", "unknown_scene", or "" for a plain forward
	Exceeded      *Exceeded
	NextAllowedAt time.Time
	At            time.Time
}

// Resolve turns a plan and, when the plan asked for one, the window store's
// verdict into the outcome. now is used when no store was asked.
func Resolve(rs *RuleSet, p Plan, res AdmitResult, now time.Time) Decision {
	if !p.Known {
		d := Decision{Outcome: actionOutcome(rs.UnknownScene), At: now}
		if d.Outcome != OutcomeForward {
			d.Reason = "unknown_scene"
		}
		return d
	}
	d := Decision{At: res.Now, Bypass: p.Bypass, Duplicate: res.Duplicate}
	if d.At.IsZero() {
		d.At = now
	}
	if res.Admitted {
		d.Outcome = OutcomeForward
		return d
	}
	d.Reason = "limit"
	d.Exceeded = res.Exceeded
	d.NextAllowedAt = res.NextAllowedAt
	if p.Rule.Shadow {
		d.Outcome = OutcomeForward
		d.Shadow = true
		d.ShadowOf = p.Rule.OnExceed
		return d
	}
	d.Outcome = actionOutcome(p.Rule.OnExceed)
	return d
}

func actionOutcome(a Action) Outcome {
	switch a {
	case ActionSuppress:
		return OutcomeSuppress
	case ActionDrop:
		return OutcomeDrop
	default:
		return OutcomeForward
	}
}

// FailOpen decides a message whose window store could not answer, for a
// scene with on_store_error: forward. It reports false when the scene holds
// and retries instead (the default).
func FailOpen(p Plan, now time.Time) (Decision, bool) {
	if !p.Known || p.Rule.OnStoreError != ActionForward {
		return Decision{}, false
	}
	return Decision{Outcome: OutcomeForward, Unchecked: true, Bypass: p.Bypass, Reason: "store_error", At: now}, true
}
