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
)

// Limit admits at most Max messages in any window of length Window: a
// message decided at t passes if fewer than Max admitted messages fall in
// (t-Window, t].
type Limit struct {
	Window time.Duration `json:"window"`
	Max    int           `json:"max"`
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
}

// Bypasses reports whether a message of priority p skips the limits.
func (r SceneRule) Bypasses(p Priority) bool { return slices.Contains(r.BypassPriorities, p) }

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

// MarshalJSON writes a limit as a rule document does: {"window":"1h","max":1}.
func (l Limit) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Window Duration `json:"window"`
		Max    int      `json:"max"`
	}{Duration(l.Window), l.Max})
}

// UnmarshalJSON reads the form MarshalJSON writes.
func (l *Limit) UnmarshalJSON(b []byte) error {
	var v struct {
		Window Duration `json:"window"`
		Max    int      `json:"max"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*l = Limit{Window: time.Duration(v.Window), Max: v.Max}
	return nil
}
