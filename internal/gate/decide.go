package gate

import "time"

// HoldQueue is a queue a message may be held in, and as what.
type HoldQueue struct {
	Queue Queue
	Kind  HoldKind
}

// Plan is what a message needs before its outcome is known: a window check
// (Request set), or a fixed outcome when its scene has no rule or its quiet
// hours hold it.
type Plan struct {
	Rule    SceneRule
	Known   bool          // the scene has a rule
	Request *AdmitRequest // nil when no window applies
	Bypass  bool          // the message's priority bypasses the limits (and quiet hours)
	// Zone is the time zone the message is decided in: its own, else its
	// scene's (nil is UTC).
	Zone *time.Location
	// Quiet is set when the scene's quiet hours hold the message now; they
	// end at QuietUntil. Without shadow mode, no window is asked then.
	Quiet      bool
	QuietUntil time.Time
	// Preference is set when the recipient's preferences decide the
	// message (never one of a bypass priority): ActionSuppress when they
	// mute its scene (until PreferenceUntil, zero for good), ActionDigest
	// when they collect it into PreferenceQueue, its scene's digest queue.
	// They come before quiet hours and windows: without shadow mode, no
	// window is asked, so a muted message takes no slot.
	Preference      Action
	PreferenceUntil time.Time
	PreferenceQueue Queue
	// Queues are the queues of held messages that the message must not
	// overtake: when one holds messages already, it is held behind them in
	// the first such. Empty for a bypass, a shadow scene, an unknown scene,
	// and a scene that never holds.
	Queues []HoldQueue
}

// PlanMessage works out what deciding m under rs at now takes, for a
// recipient without preferences: PlanWithPreferences(rs, m, nil, now).
func PlanMessage(rs *RuleSet, m Message, now time.Time) Plan {
	return PlanWithPreferences(rs, m, nil, now)
}

// PlanWithPreferences works out what deciding m under rs at now takes,
// given prefs, the preferences of m's recipient (nil when it has none). A
// message of an unknown scene touches no window: it neither counts toward
// the recipient caps nor is held by them, and preferences do not apply to
// it (the scene's unknown_scene action does). The recipient's preferences
// come first, then quiet hours, both on the gate's clock (now), then the
// windows: a message either holds back is not counted.
func PlanWithPreferences(rs *RuleSet, m Message, prefs *Preferences, now time.Time) Plan {
	rule, ok := rs.Scene(m.Scene)
	if !ok {
		return Plan{}
	}
	bypass := rule.Bypasses(m.Priority)
	zone := rule.ZoneFor(m.Zone)
	recipient := m.Recipient()
	p := Plan{Rule: rule, Known: true, Bypass: bypass, Zone: zone}
	if !bypass {
		switch {
		case prefs.Mutes(m.Scene, now):
			p.Preference, p.PreferenceUntil = ActionSuppress, prefs.MutedUntil
		case prefs.DigestOnly(m.Scene):
			p.Preference = ActionDigest
			p.PreferenceQueue = Queue{recipient, rule.DigestQueue(m.Scene)}
		}
	}
	if p.Preference != "" && !rule.Shadow {
		// Decided whatever the windows or held queues say: a muted
		// message is suppressed, a digest_only one joins its digest.
		return p
	}
	p.QuietUntil, p.Quiet = rule.QuietFor(m.Priority, now, zone)
	if !bypass && !rule.Shadow {
		if rule.OnExceed == ActionDefer || (rule.QuietHours != nil && rule.QuietHours.Action == ActionDefer) {
			p.Queues = append(p.Queues, HoldQueue{Queue{recipient, m.Scene}, HoldDefer})
		}
		if rule.OnExceed == ActionDigest {
			p.Queues = append(p.Queues, HoldQueue{Queue{recipient, rule.DigestQueue(m.Scene)}, HoldDigest})
		}
	}
	if p.Quiet && !rule.Shadow {
		return p
	}
	req := rs.AdmitRequestFor(rule, m.ID, recipient, m.Scene, bypass, zone)
	p.Request = &req
	return p
}

// Decision is the outcome of one message, with what explains it.
type Decision struct {
	Outcome Outcome
	// Shadow is set on a forward that enforcement would have turned into
	// ShadowOf (suppress, drop, defer or digest).
	Shadow   bool
	ShadowOf Action
	Bypass   bool
	// Duplicate is set when the window store had already admitted this id.
	Duplicate bool
	// Unchecked is set on a forward that no window checked: the store was
	// unavailable and the scene fails open (on_store_error: forward).
	Unchecked bool
	// Reason is "limit", "unknown_scene", "quiet_hours", "queued",
	// "preference", "store_error", or "" for a plain forward.
	Reason        string
	Exceeded      *Exceeded
	NextAllowedAt time.Time
	At            time.Time

	// The hold of a defer or digest outcome: the queue the message joins,
	// when it is tried first (HoldUntil: when its window reopens, or its
	// quiet hours end, but no later than it expires), and for a deferred
	// message when it expires and what it gets then.
	Queue     Queue
	HoldUntil time.Time
	Expires   time.Time
	Fallback  Action
}

// Holds reports whether d holds its message for later.
func (d Decision) Holds() bool { return d.Outcome == OutcomeDefer || d.Outcome == OutcomeDigest }

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
	if d.At.IsZero() || p.Request == nil {
		d.At = now
	}
	if p.Preference != "" {
		return preference(p, d)
	}
	if p.Quiet {
		return quiet(p, d)
	}
	if res.Admitted {
		d.Outcome = OutcomeForward
		return d
	}
	d.Reason = ReasonLimit
	d.Exceeded = res.Exceeded
	d.NextAllowedAt = res.NextAllowedAt
	if p.Rule.Shadow {
		d.Outcome = OutcomeForward
		d.Shadow = true
		d.ShadowOf = p.Rule.OnExceed
		return d
	}
	d.Outcome = actionOutcome(p.Rule.OnExceed)
	if d.Holds() {
		hold(&d, p, d.Outcome, res.NextAllowedAt)
	}
	return d
}

// quiet decides a message its scene's quiet hours hold: their action, as if
// quiet_hours were the limit hit, and the end of quiet hours as the time to
// come back. A shadow scene forwards it and says what it would have done.
func quiet(p Plan, d Decision) Decision {
	a := p.Rule.QuietHours.Action
	d.Reason = ReasonQuietHours
	d.Exceeded = &Exceeded{Scope: ScopeQuietHours}
	d.NextAllowedAt = p.QuietUntil
	if p.Rule.Shadow {
		d.Outcome, d.Shadow, d.ShadowOf = OutcomeForward, true, a
		return d
	}
	d.Outcome = actionOutcome(a)
	if d.Outcome == OutcomeDefer {
		hold(&d, p, OutcomeDefer, p.QuietUntil)
	}
	return d
}

// preference decides a message its recipient's preferences hold back, as
// if they were the limit hit: suppressed when muted (NextAllowedAt the
// mute's end, when it has one), or held as a digest in the scene's digest
// queue, due one of the scene's shortest windows later so that the
// messages that come meanwhile join one digest. A shadow scene forwards it
// and says what it would have done.
func preference(p Plan, d Decision) Decision {
	d.Reason = ReasonPreference
	d.Exceeded = &Exceeded{Scope: ScopePreference}
	d.NextAllowedAt = p.PreferenceUntil
	if p.Rule.Shadow {
		d.Outcome, d.Shadow, d.ShadowOf = OutcomeForward, true, p.Preference
		return d
	}
	d.Outcome = actionOutcome(p.Preference)
	if d.Outcome == OutcomeDigest {
		d.Queue, d.HoldUntil = p.PreferenceQueue, d.At.Add(p.Rule.digestDelay())
		d.NextAllowedAt = d.HoldUntil
	}
	return d
}

// Queued decides a message held behind the held messages of q, which it
// must not overtake: held as q's kind, due at once (the hold store puts it
// after the queue's last), with the reason "queued".
func Queued(p Plan, q HoldQueue, now time.Time) Decision {
	d := Decision{Outcome: OutcomeDefer, Reason: ReasonQueued, At: now, Bypass: p.Bypass}
	if q.Kind == HoldDigest {
		d.Outcome = OutcomeDigest
	}
	hold(&d, p, d.Outcome, now)
	d.Queue = q.Queue
	return d
}

// hold fills the hold of d, a defer or digest outcome of a message planned
// as p, first tried at due.
func hold(d *Decision, p Plan, o Outcome, due time.Time) {
	if due.Before(d.At) {
		due = d.At
	}
	d.HoldUntil = due
	for _, q := range p.Queues {
		if (o == OutcomeDefer) == (q.Kind == HoldDefer) {
			d.Queue = q.Queue
			break
		}
	}
	if o != OutcomeDefer {
		return
	}
	maxDefer := p.Rule.MaxDefer
	if maxDefer <= 0 {
		maxDefer = DefaultMaxDefer
	}
	d.Expires = d.At.Add(maxDefer)
	// Due by its expiry at the latest, so that the releaser meets it then
	// and applies the fallback, not at a reopening after it.
	if d.Expires.Before(d.HoldUntil) {
		d.HoldUntil = d.Expires
	}
	d.Fallback = p.Rule.DeferFallback
	if d.Fallback == "" {
		d.Fallback = ActionSuppress
	}
}

// WithoutHold is d where no hold store can keep its message: a defer or
// digest outcome becomes a suppression (the audit row keeps the message).
func (d Decision) WithoutHold() Decision {
	if !d.Holds() {
		return d
	}
	d.Outcome = OutcomeSuppress
	d.Queue, d.HoldUntil, d.Expires, d.Fallback = Queue{}, time.Time{}, time.Time{}, ""
	return d
}

func actionOutcome(a Action) Outcome {
	switch a {
	case ActionSuppress:
		return OutcomeSuppress
	case ActionDrop:
		return OutcomeDrop
	case ActionDefer:
		return OutcomeDefer
	case ActionDigest:
		return OutcomeDigest
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
