package gate

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Explanation answers "why, and when is the next one" for one recipient and
// scene (GET /v1/explain, gate explain): what the gate would decide of a
// message now, when the next one would go out, and the state of everything
// that decides it. Asking records nothing: no window slot, no ledger row,
// no audit row.
type Explanation struct {
	Recipient string   `json:"recipient"`
	Scene     string   `json:"scene"`
	Priority  Priority `json:"priority,omitempty"`
	TZ        string   `json:"tz,omitempty"`
	// KnownScene is false for a scene without a rule: the rules'
	// unknown_scene action decides it, and no limit applies.
	KnownScene bool            `json:"known_scene"`
	Decision   ExplainDecision `json:"decision"`
	// NextAt is when the next message would go out: now when one would
	// now; nil when none would (a mute until changed, an unknown scene
	// that is dropped or suppressed).
	NextAt *time.Time `json:"next_at"`
	// Why says it in one plain sentence.
	Why string `json:"why"`
	// Limits are the scene's windows, calendar periods and rate limit,
	// then the recipient caps, each as the window store counts it now.
	Limits []LimitState `json:"limits"`
	// HeldQueues are the recipient's queues of held messages for the
	// scene: its deferred queue and its digest queue. Nil when the gate
	// cannot read them (HeldQueuesKnown false).
	HeldQueues      []HeldQueueSummary `json:"held_queues"`
	HeldQueuesKnown bool               `json:"held_queues_known"`
	Preferences     ExplainPreferences `json:"preferences"`
	QuietHours      ExplainQuietHours  `json:"quiet_hours"`
	RulesVersion    string             `json:"rules_version"`
	// At is when the gate decided, on the window store's clock when it
	// was asked.
	At time.Time `json:"at"`
}

// ExplainDecision is the dry-run decision of an explanation: what a
// message sent now would get.
type ExplainDecision struct {
	Outcome Outcome `json:"outcome"`
	// Reason is as a check answer's: limit, unknown_scene, quiet_hours,
	// queued, preference, or "" for a plain forward.
	Reason        string         `json:"reason,omitempty"`
	Exceeded      *ExceededLimit `json:"exceeded"`
	NextAllowedAt *time.Time     `json:"next_allowed_at"`
	// ShadowOf is what enforcement would do, on a shadow scene's forward.
	ShadowOf Action `json:"shadow_of,omitempty"`
	Bypass   bool   `json:"bypass,omitempty"`
	// Queue is the queue a defer or digest outcome would hold it in.
	Queue string `json:"queue,omitempty"`
}

// ExceededLimit is the limit (or quiet hours, or preference) that holds a
// message back, with its count.
type ExceededLimit struct {
	CheckLimit
	Count int `json:"count"`
}

// LimitState is one limit as the window store counts it now: Count used,
// Left slots (or tokens, for a rate limit) left, and FreeAt, when a slot
// frees (now when one is free).
type LimitState struct {
	CheckLimit
	Count  int       `json:"count"`
	Left   int       `json:"left"`
	FreeAt time.Time `json:"free_at"`
}

// HeldQueueSummary is one queue of held messages: how many, the oldest's
// held time and the next due time. A queue holding nothing has Count 0 and
// zero times.
type HeldQueueSummary struct {
	Queue        string    `json:"queue"`
	Kind         HoldKind  `json:"kind"`
	Count        int       `json:"count"`
	OldestHeldAt time.Time `json:"oldest_held_at,omitzero"`
	NextDueAt    time.Time `json:"next_due_at,omitzero"`
}

// ExplainPreferences are the recipient's preferences in force for the
// scene (none for a bypass priority, which passes them).
type ExplainPreferences struct {
	Muted bool `json:"muted"`
	// MutedUntil ends the mute; nil mutes until changed.
	MutedUntil *time.Time `json:"muted_until"`
	DigestOnly bool       `json:"digest_only"`
}

// ExplainQuietHours are the scene's quiet hours, when in force now.
type ExplainQuietHours struct {
	InForce bool       `json:"in_force"`
	Until   *time.Time `json:"until"`
	Action  Action     `json:"action,omitempty"`
}

// HeldLister reads summaries of queues of held messages, read-only.
// HeldQueues returns one summary per queue of recipient among queues that
// holds messages (absent: it holds none), in one call. Errors wrap
// ErrUnavailable or ErrPermanent.
type HeldLister interface {
	HeldQueues(ctx context.Context, recipient string, queues []Queue) ([]HeldQueueSummary, error)
}

// ParseExplain checks the question of an explanation and returns the
// message it asks about, with id as its id: recipient is
// receive_id_type:receive_id (CheckRecipient), the others are checked as a
// check's fields are (ParseCheck). Every error wraps ErrBadRequest.
func ParseExplain(id, recipient, scene, priority, tz string) (Message, error) {
	if err := CheckRecipient(recipient); err != nil {
		return Message{}, err
	}
	typ, rid, _ := strings.Cut(recipient, ":")
	body, err := json.Marshal(map[string]string{"id": id, "scene": scene, "receive_id_type": typ,
		"receive_id": rid, "priority": priority, "tz": tz})
	if err != nil {
		return Message{}, fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	req, err := ParseCheck(body)
	if err != nil {
		return Message{}, fmt.Errorf("%w: %s", ErrBadRequest, InvalidReason(err))
	}
	return req.Message, nil
}

// probeMax is the max a probe gives the limits it does not probe: more
// than any window keeps, so that none of them is ever the tightest or
// exceeded, and the store reads and trims the windows as a real request
// of the scene would.
const probeMax = 1 << 24

// LimitProbe is a dry-run request that reads one limit's state.
type LimitProbe struct {
	Scope   Scope
	Limit   Limit
	Request AdmitRequest
}

// LimitProbes are the dry-run requests that read the state of each of the
// scene's limits, then each recipient cap, of recipient in scene under
// rule, for one Admit call. Each carries the scene's whole limit set (and
// for a cap, the caps' too), the probed limit as it is and the others
// raised to probeMax: so it reports on the probed limit alone, yet a store
// reads (and drops expired members of) exactly the windows a message of
// the scene reads. A request with one limit alone would let a store that
// drops members past that limit's window drop those a longer one counts.
// ids gives each probe a fresh id, never a duplicate.
func LimitProbes(rs *RuleSet, rule SceneRule, recipient, scene string, zone *time.Location, ids func() string) []LimitProbe {
	var probes []LimitProbe
	for i, l := range rule.Limits {
		r := AdmitRequest{ID: ids(), Recipient: recipient, Scene: scene, Limits: probing(rule.Limits, i),
			Zone: zone, DryRun: true, WantTightest: true}
		probes = append(probes, LimitProbe{ScopeScene, l, r})
	}
	for i, l := range rs.RecipientCaps {
		r := AdmitRequest{ID: ids(), Recipient: recipient, Scene: scene, Limits: probing(rule.Limits, -1),
			Caps: probing(rs.RecipientCaps, i), Zone: zone, DryRun: true, WantTightest: true}
		probes = append(probes, LimitProbe{ScopeRecipient, l, r})
	}
	return probes
}

// probing is limits with every one but the i-th raised to probeMax.
func probing(limits []Limit, i int) []Limit {
	out := make([]Limit, len(limits))
	for j, l := range limits {
		if j != i {
			l.Max = probeMax
		}
		out[j] = l
	}
	return out
}

// StateOf is the state of the probed limit from the store's dry-run
// verdict res: admitted, its count is Tightest's less the would-be
// message, and a slot is free now; refused, its count is Exceeded's and a
// slot frees at NextAllowedAt.
func (p LimitProbe) StateOf(res AdmitResult) LimitState {
	s := LimitState{CheckLimit: *limitOf(Exceeded{Scope: p.Scope, Limit: p.Limit})}
	switch {
	case res.Admitted:
		if res.Tightest != nil {
			s.Count = res.Tightest.Count - 1
		}
		s.FreeAt = res.Now
	case res.Exceeded != nil:
		s.Count, s.FreeAt = res.Exceeded.Count, res.NextAllowedAt
	}
	s.Left = max(0, p.Limit.Max-s.Count)
	return s
}
