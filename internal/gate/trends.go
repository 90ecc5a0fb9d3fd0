package gate

import (
	"context"
	"time"
)

// HourSummary counts outcomes in one UTC hour. Scene is the scene asked
// for, or "*" when the counts add up every scene.
type HourSummary struct {
	Hour time.Time `json:"hour"`
	SceneSummary
}

// RecipientCount is how many suppression rows one recipient has in a time
// range, shadow suppressions included (Shadow says how many of them).
type RecipientCount struct {
	Recipient        string    `json:"recipient"`
	Suppressed       int64     `json:"suppressed"`
	Shadow           int64     `json:"shadow"`
	LastSuppressedAt time.Time `json:"last_suppressed_at"`
}

// Trends answers the report page's questions over time and recipients.
// Since is inclusive and until exclusive; a zero time leaves that end open.
// Until before since, or a limit out of range, wraps ErrBadRequest; other
// errors wrap ErrUnavailable.
type Trends interface {
	// Timeseries returns the hourly counters of scene (every scene when
	// empty) in [since, until), oldest first, one row per hour that has
	// counters: hours without any are left out.
	Timeseries(ctx context.Context, since, until time.Time, scene string) ([]HourSummary, error)
	// TopRecipients returns the limit recipients with the most suppression
	// rows decided in [since, until), most first, ties by recipient.
	TopRecipients(ctx context.Context, since, until time.Time, limit int) ([]RecipientCount, error)
}
