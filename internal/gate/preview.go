package gate

import (
	"context"
	"time"
)

// PreviewCounts counts the outcomes of one scene (or of all) in a rule
// preview: the decisions as the ledger recorded them, or as a proposed rule
// document would decide them.
type PreviewCounts struct {
	Forwarded  int64 `json:"forwarded"`
	Suppressed int64 `json:"suppressed"`
	Dropped    int64 `json:"dropped"`
	// Deferred and Digested count messages held when decided. A preview
	// does not simulate their release: what a held message became later
	// (released, its fallback, a digest) is not part of either side.
	Deferred int64 `json:"deferred"`
	Digested int64 `json:"digested"`
	// Invalid and Parked are never replayed: they are counted on both sides
	// as the ledger recorded them.
	Invalid int64 `json:"invalid"`
	Parked  int64 `json:"parked"`
	// Shadow counts the forwards of shadow scenes that enforcement would
	// have held back (they are counted in Forwarded too). The ledger does
	// not say which of its forwards were shadow ones, so it is zero on the
	// side of what was decided.
	Shadow int64 `json:"shadow"`
}

// Add counts one outcome; shadow marks a forward a shadow scene would have
// held back.
func (c *PreviewCounts) Add(o Outcome, shadow bool) {
	switch o {
	case OutcomeForward:
		c.Forwarded++
		if shadow {
			c.Shadow++
		}
	case OutcomeSuppress:
		c.Suppressed++
	case OutcomeDrop:
		c.Dropped++
	case OutcomeDefer:
		c.Deferred++
	case OutcomeDigest:
		c.Digested++
	case OutcomeInvalid:
		c.Invalid++
	case OutcomeParked:
		c.Parked++
	}
}

// Merge adds o's counts to c.
func (c *PreviewCounts) Merge(o PreviewCounts) {
	c.Forwarded += o.Forwarded
	c.Suppressed += o.Suppressed
	c.Dropped += o.Dropped
	c.Deferred += o.Deferred
	c.Digested += o.Digested
	c.Invalid += o.Invalid
	c.Parked += o.Parked
	c.Shadow += o.Shadow
}

// ScenePreview is one scene's line of a rule preview: what was decided
// (Then) and what the proposed document would decide (Now), over the same
// decisions.
type ScenePreview struct {
	Scene string        `json:"scene"`
	Then  PreviewCounts `json:"then"`
	Now   PreviewCounts `json:"now"`
}

// RulePreview is the answer of a rule preview: the decisions of [Since,
// Until) replayed, oldest first, against a proposed rule document.
type RulePreview struct {
	// Version is the proposed document's.
	Version string    `json:"version"`
	Since   time.Time `json:"since"`
	Until   time.Time `json:"until"`
	// Decisions is how many ledger rows of the period were read; Replayed
	// how many of them were decided again (invalid and parked ones are not,
	// nor are NotReplayable ones: rows written before the ledger kept the
	// scene and recipient, which are left out of Scenes and Total). The
	// decisions of the longest limit's span before Since are replayed too,
	// to fill the windows as they were, and counted in neither.
	Decisions     int64 `json:"decisions"`
	Replayed      int64 `json:"replayed"`
	NotReplayable int64 `json:"not_replayable"`
	// Truncated is set when the preview stopped at its bound of rows
	// replayed (Limit, the warm-up before Since included) before Until: the
	// counts cover [Since, ReachedAt] only.
	Truncated bool      `json:"truncated"`
	Limit     int64     `json:"limit"`
	ReachedAt time.Time `json:"reached_at,omitzero"`
	// Scenes are sorted by name.
	Scenes []ScenePreview `json:"scenes"`
	Total  ScenePreview   `json:"total"`
	// Notes say what a preview cannot know (held messages' releases, the
	// queues they form, other gates' windows before Since).
	Notes []string `json:"notes"`
}

// Previewer replays the decisions recorded in [since, until) against a
// proposed rule document (YAML or JSON, as rule files and Nacos hold them).
// A document that does not parse, or that the replay cannot decide, is an
// error wrapping ErrBadRequest whose text is the reason; a ledger that
// cannot be read wraps ErrUnavailable. It writes nothing anywhere.
type Previewer interface {
	Preview(ctx context.Context, doc []byte, since, until time.Time) (*RulePreview, error)
}
