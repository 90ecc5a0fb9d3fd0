package gate

import (
	"encoding/json"
	"slices"
	"time"
)

// Action is what happens to a message: forward it, or, when a limit is
// exceeded or a scene is unknown, suppress (audit) or drop it.
type Action string

// The actions a rule document may name.
const (
	ActionForward  Action = "forward"
	ActionSuppress Action = "suppress"
	ActionDrop     Action = "drop"
	// ActionRetry is only for on_store_error: hold the message and retry
	// until the window store answers.
	ActionRetry Action = "retry"
	// ActionDefer holds an over-limit message durably and forwards it when
	// every limit that held it reopens (or at the end of quiet hours).
	ActionDefer Action = "defer"
	// ActionDigest collects over-limit messages of a recipient and forwards
	// one summary of them when the window reopens.
	ActionDigest Action = "digest"
)

// Calendar names a calendar period a limit counts in, in the time zone of
// the scene or the message.
type Calendar string

// The calendar periods of a limit.
const (
	CalendarDay  Calendar = "day"  // from local midnight to the next
	CalendarWeek Calendar = "week" // ISO week, from Monday 00:00
)

// Default and greatest max_defer.
const (
	DefaultMaxDefer = 24 * time.Hour
	MaxMaxDefer     = 7 * 24 * time.Hour
)

// QuietHours is a daily span, in the scene's (or message's) time zone,
// during which messages get Action instead of being forwarded. From and To
// are offsets from local midnight; To before From spans midnight.
type QuietHours struct {
	From   time.Duration `json:"-"`
	To     time.Duration `json:"-"`
	Action Action        `json:"action"` // defer | suppress | drop
}

// Limit admits at most Max messages in any window of length Window: a
// message decided at t passes if fewer than Max admitted messages fall in
// (t-Window, t]. A calendar limit (Calendar set, Window zero) admits at most
// Max in the calendar period holding t instead. A rate limit (Rate set,
// Window zero, Calendar empty) is a GCRA: Max (the burst) at once, then one
// per Rate, the emission interval; its state is the theoretical arrival
// time, on the store's clock.
type Limit struct {
	Window   time.Duration `json:"window"`
	Calendar Calendar      `json:"calendar,omitempty"`
	Rate     time.Duration `json:"rate,omitempty"`
	Max      int           `json:"max"`
}

// SceneRule is the rule of one scene.
type SceneRule struct {
	Limits           []Limit    `json:"limits"`
	OnExceed         Action     `json:"on_exceed"`
	BypassPriorities []Priority `json:"bypass_priorities,omitempty"`
	Shadow           bool       `json:"shadow,omitempty"`
	// OnStoreError is what happens when the window store cannot answer:
	// ActionRetry (hold and retry; the default) or ActionForward (fail open:
	// forward unchecked, and say so in the counters, metrics and headers).
	OnStoreError Action `json:"on_store_error,omitempty"`

	// MaxDefer is the longest a deferred message is held (on_exceed: defer,
	// or quiet hours with action defer); past it, it gets DeferFallback
	// (suppress, drop or digest).
	MaxDefer      time.Duration `json:"-"`
	DeferFallback Action        `json:"defer_fallback,omitempty"`
	// DigestGroup: scenes naming one group share one digest per recipient;
	// empty means the scene's own digest.
	DigestGroup string `json:"digest_group,omitempty"`
	// TZ is the scene's IANA time zone for calendar limits and quiet hours
	// ("" is UTC); Zone is it loaded. A message's own zone overrides it.
	TZ         string         `json:"tz,omitempty"`
	Zone       *time.Location `json:"-"`
	QuietHours *QuietHours    `json:"quiet_hours,omitempty"`
}

// DigestQueue is the name of the held-message queue that collects this
// scene's digest: "digest:" and the digest group, or the scene.
func (r SceneRule) DigestQueue(scene string) string {
	if r.DigestGroup != "" {
		return "digest:" + r.DigestGroup
	}
	return "digest:" + scene
}

// Bypasses reports whether a message of priority p skips the limits.
func (r SceneRule) Bypasses(p Priority) bool { return slices.Contains(r.BypassPriorities, p) }

// ZoneFor is the zone a message of the scene is decided in: the message's
// own (own, nil when it names none), else the scene's (nil is UTC).
func (r SceneRule) ZoneFor(own *time.Location) *time.Location {
	if own != nil {
		return own
	}
	return r.Zone
}

// ZoneNamed is ZoneFor of the zone a message recorded when it was decided
// (tz, "" when it named none): tz's if it still loads, else the scene's;
// were tz gone from the zone database since, the scene's applies.
func (r SceneRule) ZoneNamed(tz string) *time.Location {
	var own *time.Location
	if tz != "" {
		own, _ = LoadZone(tz)
	}
	return r.ZoneFor(own)
}

// QuietFor reports whether the scene's quiet hours hold a message of
// priority p at t in zone, and when they end. A bypass priority is never
// held by them.
func (r SceneRule) QuietFor(p Priority, t time.Time, zone *time.Location) (until time.Time, quiet bool) {
	if r.QuietHours == nil || r.Bypasses(p) {
		return time.Time{}, false
	}
	return r.QuietHours.Active(t, zone)
}

// RuleSet is one validated rule document. It is immutable once published:
// readers take one snapshot per message (or batch) and never see a mix.
type RuleSet struct {
	UnknownScene  Action               `json:"unknown_scene"`
	RecipientCaps []Limit              `json:"recipient_caps,omitempty"`
	Scenes        map[string]SceneRule `json:"scenes"`

	// Version is a content hash of the rules above; equal rules have equal
	// versions whatever their source or formatting.
	Version string `json:"version"`
}

// Scene returns the rule of a scene, if it has one.
func (rs *RuleSet) Scene(name string) (SceneRule, bool) {
	r, ok := rs.Scenes[name]
	return r, ok
}

// AdmitRequestFor is the request that admits message id of recipient in
// scene, ruled by rule (the scene's rule in rs): the scene's limits, the
// recipient caps of rs, forced (force, a bypass priority) or not, with
// calendar windows in zone.
func (rs *RuleSet) AdmitRequestFor(rule SceneRule, id, recipient, scene string, force bool, zone *time.Location) AdmitRequest {
	return AdmitRequest{
		ID:        id,
		Recipient: recipient,
		Scene:     scene,
		Limits:    rule.Limits,
		Caps:      rs.RecipientCaps,
		Force:     force,
		Zone:      zone,
	}
}

// RuleStatus describes the rules in force, for /v1/rules and /readyz.
type RuleStatus struct {
	Rules       *RuleSet  `json:"rules"`
	Version     string    `json:"version"`
	Source      string    `json:"source"`
	LoadedAt    time.Time `json:"loaded_at"`
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
}

// RuleSource hands out the rules in force. Current never blocks and never
// returns nil once the source has started.
type RuleSource interface {
	Current() *RuleSet
	Status() RuleStatus
}

// MarshalJSON writes a limit as a rule document does: {"window":"1h","max":1},
// {"calendar":"day","max":3} for a calendar limit, or {"rate":"1/10m","burst":3}
// for a rate limit. Limits without a rate write what they always wrote, so
// the Version of a document without rate limits does not change.
func (l Limit) MarshalJSON() ([]byte, error) {
	if l.Rate != 0 {
		return json.Marshal(struct {
			Rate  string `json:"rate"`
			Burst int    `json:"burst"`
		}{FormatRate(l.Rate), l.Max})
	}
	if l.Calendar != "" {
		return json.Marshal(struct {
			Calendar Calendar `json:"calendar"`
			Max      int      `json:"max"`
		}{l.Calendar, l.Max})
	}
	return json.Marshal(struct {
		Window Duration `json:"window"`
		Max    int      `json:"max"`
	}{Duration(l.Window), l.Max})
}

// UnmarshalJSON reads any form MarshalJSON writes.
func (l *Limit) UnmarshalJSON(b []byte) error {
	var v struct {
		Window   Duration `json:"window"`
		Calendar Calendar `json:"calendar"`
		Rate     string   `json:"rate"`
		Burst    int      `json:"burst"`
		Max      int      `json:"max"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if v.Rate != "" {
		every, err := ParseRate(v.Rate)
		if err != nil {
			return err
		}
		*l = Limit{Rate: every, Max: v.Burst}
		return nil
	}
	*l = Limit{Window: time.Duration(v.Window), Calendar: v.Calendar, Max: v.Max}
	return nil
}

// MarshalJSON writes quiet hours as a rule document does:
// {"from":"22:00","to":"08:00","action":"defer"}.
func (q QuietHours) MarshalJSON() ([]byte, error) {
	return json.Marshal(quietHoursJSON{FormatClock(q.From), FormatClock(q.To), q.Action})
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (q *QuietHours) UnmarshalJSON(b []byte) error {
	var v quietHoursJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	from, err := ParseClock(v.From)
	if err != nil {
		return err
	}
	to, err := ParseClock(v.To)
	if err != nil {
		return err
	}
	*q = QuietHours{From: from, To: to, Action: v.Action}
	return nil
}

type quietHoursJSON struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Action Action `json:"action"`
}

// sceneRuleFields is SceneRule without its methods, for its JSON methods to
// embed.
type sceneRuleFields SceneRule

// MarshalJSON writes the rule's fields, and max_defer as rule-document text
// when it is set. Rule documents set MaxDefer only on a scene that defers,
// so the JSON, and the Version hashed from it, of every scene that does not
// is what it was before max_defer existed; a change of max_defer changes
// the Version.
func (r SceneRule) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		sceneRuleFields
		MaxDefer Duration `json:"max_defer,omitempty"`
	}{sceneRuleFields(r), Duration(r.MaxDefer)})
}

// UnmarshalJSON reads the form MarshalJSON writes, and loads Zone from TZ.
func (r *SceneRule) UnmarshalJSON(b []byte) error {
	var v struct {
		sceneRuleFields
		MaxDefer Duration `json:"max_defer"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = SceneRule(v.sceneRuleFields)
	r.MaxDefer = time.Duration(v.MaxDefer)
	if r.TZ != "" {
		zone, err := LoadZone(r.TZ)
		if err != nil {
			return err
		}
		r.Zone = zone
	}
	return nil
}
