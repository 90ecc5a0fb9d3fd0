package gate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Scope says which limit a message exceeded: its scene's, or its
// recipient's cap across all scenes.
type Scope string

// The scopes of a limit.
const (
	ScopeScene     Scope = "scene"
	ScopeRecipient Scope = "recipient"
)

// AdmitRequest asks the window store to admit one message.
type AdmitRequest struct {
	ID        string // message id; the window's member and idempotency key
	Recipient string // Message.Recipient()
	Scene     string
	Limits    []Limit // the scene's limits (may be empty)
	Caps      []Limit // the recipient caps (may be empty)
	// Force admits the message whatever the counts (a bypass priority); it
	// still counts in every window. Past a full limit it takes no free slot
	// of it, as there is none: a rate limit's theoretical arrival time
	// moves no more than a burst ahead of now, and in a full window its
	// entry takes the place of the oldest. The store keeps what it took
	// with the id, for Forget.
	Force bool
	// Zone is the time zone of calendar limits (nil is UTC).
	Zone *time.Location
	// DryRun decides the request as a real one would be decided now, and
	// records nothing: the verdict of a check that only asks.
	DryRun bool
	// WantTightest asks for AdmitResult.Tightest. Only the check API asks;
	// without it Tightest stays nil, and the message path spares its cost.
	WantTightest bool
}

// Exceeded names the limit that held a message back.
type Exceeded struct {
	Scope Scope `json:"scope"`
	Limit Limit `json:"limit"`
	// Count is how many admitted messages were in the window at decision
	// time; for a rate limit, how many of its burst slots were in use: the
	// emission intervals between the store's now and the theoretical
	// arrival time, rounded up (the burst, when it rejects).
	Count int `json:"count"`
}

// AdmitResult is the store's verdict on one request.
type AdmitResult struct {
	// Admitted is true when the message passed every limit (or was forced)
	// and is now counted.
	Admitted bool
	// Duplicate is true when the id had already been admitted: nothing was
	// counted again and Admitted is true.
	Duplicate bool
	// Exceeded is set when Admitted is false: the limit that was hit (the one
	// that reopens last, when several are). Its Count stops at the largest
	// Max of the key's limits, since a window keeps no more members than that.
	Exceeded *Exceeded
	// NextAllowedAt is when the window reopens for this (recipient, scene),
	// set when Admitted is false: exactly the first instant of the store's
	// clock at which the limit that reopens last admits again (for a rate
	// limit, its theoretical arrival time less burst-1 intervals).
	NextAllowedAt time.Time
	// Now is the store's clock at the decision.
	Now time.Time
	// Tightest is set when the request's WantTightest is, Admitted is true
	// (and not Duplicate) and a limit applies: the limit with the fewest slots left after this admission,
	// and its Count including this message. A dry run reports what an
	// admission would leave. Of limits with as few slots left, the first
	// wins, scene limits before caps. A forced admission over a limit
	// reports a Count above its Max.
	Tightest *Exceeded
}

// WindowStore keeps the sliding windows.
//
// Admit decides a batch in order; requests of one recipient are decided in
// the order given. Each decision is one atomic check-and-record step on the
// store's own clock: any number of gate processes sharing one store never
// admit more than a limit's Max in any window. Only admitted messages are
// recorded; a rejected request changes nothing. Admitting an id that was
// already admitted returns Duplicate and counts nothing, so Admit is safe
// to retry after a partial failure.
//
// An admitted id is remembered while it is inside its scene's longest
// window, or its calendar period, or burst intervals of its rate limit;
// the audit log's ledger remembers decided ids for longer. A dry run
// (DryRun) is decided as the request would be and records nothing.
//
// Errors are transient (wrap ErrUnavailable) and the caller retries the
// batch, except ErrInvalidRequest, which fails the whole batch before
// anything is recorded. On a transient error, some requests of the batch
// may have been recorded; retrying them returns Duplicate.
//
// Forget gives back what the admissions of reqs' ids took, and nothing
// else: the undo of an admission the ledger shows was a second decision of
// an id decided before, or of a refunded one. A plain admission took its
// entries in the scene's window and the recipient caps', and one interval
// of each rate limit of reqs' Limits and Caps (the rules' intervals in
// force now); a forced one (AdmitRequest.Force) may have taken less, which
// the store remembers with the id: a rate limit gets back only what its
// admission moved it, and an entry that took the place of one it pushed
// out of a full window stays, since that one still counted. So a bypass
// message's refund never frees a slot another message holds. Rate limits
// get anything back only when the scene window still holds the id; an id
// that is not there (never admitted, forgotten before, or pushed out by
// newer ones) changes nothing, so Forget is idempotent.
type WindowStore interface {
	Admit(ctx context.Context, reqs []AdmitRequest) ([]AdmitResult, error)
	Forget(ctx context.Context, reqs []AdmitRequest) error
	Ping(ctx context.Context) error
}

// ErrInvalidRequest marks an admit request no store can decide (an empty
// id, recipient or scene, a limit with neither a positive window, nor a
// known calendar, nor a positive rate, or with two of them, a max under 1,
// two rate limits in one set).
// It is permanent: retrying cannot help. A store's batch that meets it is
// split to find the request it refuses, whose message is then parked (an
// *InvalidError); alone it is ClassInternal: the gate built the request.
var ErrInvalidRequest = errors.New("invalid admit request")

// Validate checks what every window store needs of a request.
func (r *AdmitRequest) Validate() error {
	switch {
	case r.ID == "":
		return fmt.Errorf("%w: empty id", ErrInvalidRequest)
	case r.Recipient == "":
		return fmt.Errorf("%w: empty recipient", ErrInvalidRequest)
	case r.Scene == "":
		return fmt.Errorf("%w: empty scene", ErrInvalidRequest)
	}
	for _, set := range [...]struct {
		scope  Scope
		limits []Limit
	}{{ScopeScene, r.Limits}, {ScopeRecipient, r.Caps}} {
		rates := 0
		for j, l := range set.limits {
			if l.Rate != 0 {
				rates++
			}
			switch {
			case l.Rate < 0 || (l.Rate > 0 && (l.Window != 0 || l.Calendar != "")):
				return fmt.Errorf("%w: %s limit %d {rate %v, window %v, calendar %q}: a rate limit has a positive rate and neither window nor calendar",
					ErrInvalidRequest, set.scope, j, l.Rate, l.Window, l.Calendar)
			case rates > 1:
				// A store keeps one theoretical arrival time per window.
				return fmt.Errorf("%w: %s limit %d: a second rate limit; the %s limits may have one",
					ErrInvalidRequest, set.scope, j, set.scope)
			case l.Rate == 0 && l.Calendar == "" && l.Window <= 0:
				return fmt.Errorf("%w: %s limit %d {window %v, max %d}: window must be positive, or calendar or rate set",
					ErrInvalidRequest, set.scope, j, l.Window, l.Max)
			case l.Calendar != "" && l.Window != 0:
				return fmt.Errorf("%w: %s limit %d {window %v, calendar %q}: a limit has a window or a calendar, not both",
					ErrInvalidRequest, set.scope, j, l.Window, l.Calendar)
			case l.Calendar != "" && l.Calendar != CalendarDay && l.Calendar != CalendarWeek:
				return fmt.Errorf("%w: %s limit %d: unknown calendar %q (day or week)",
					ErrInvalidRequest, set.scope, j, l.Calendar)
			case l.Max < 1:
				return fmt.Errorf("%w: %s limit %d {max %d}: max must be at least 1",
					ErrInvalidRequest, set.scope, j, l.Max)
			}
		}
	}
	return nil
}

// WindowMillis is a limit's window rounded up to whole milliseconds, the
// resolution of every window store.
func (l Limit) WindowMillis() int64 {
	return int64((l.Window + time.Millisecond - 1) / time.Millisecond)
}

// RateMillis is a rate limit's emission interval rounded up to whole
// milliseconds (rule documents allow whole milliseconds only).
func (l Limit) RateMillis() int64 {
	return int64((l.Rate + time.Millisecond - 1) / time.Millisecond)
}

// RateLimit returns the rate limit of limits and its place, or -1: a valid
// request has at most one per set.
func RateLimit(limits []Limit) (Limit, int) {
	for i, l := range limits {
		if l.Rate != 0 {
			return l, i
		}
	}
	return Limit{}, -1
}

// ParseRate reads a rate as rule documents write it, "N/duration" (N
// messages per duration: "1/10m", "6/1h", "100/1d"), and returns its
// emission interval, duration/N. The interval must be a whole number of
// milliseconds, the stores' resolution, and at least one: "3/1s" is
// refused rather than rounded, so that what a document says is what the
// stores enforce.
func ParseRate(s string) (time.Duration, error) {
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, fmt.Errorf("rate %q is not N/duration, such as 1/10m", s)
	}
	count, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
	if err != nil || count < 1 {
		return 0, fmt.Errorf("rate %q: %q before the / must be a whole number of at least 1", s, n)
	}
	d, err := ParseDuration(per)
	if err != nil {
		return 0, fmt.Errorf("rate %q: %w", s, err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("rate %q: the duration must be positive", s)
	}
	every := d / time.Duration(count)
	switch {
	case every < time.Millisecond:
		return 0, fmt.Errorf("rate %q is faster than one per millisecond, the stores' resolution", s)
	case d%time.Duration(count) != 0 || every%time.Millisecond != 0:
		return 0, fmt.Errorf("rate %q is one per %v, not a whole number of milliseconds: write one such as 1/%s",
			s, every, FormatDuration(every.Truncate(time.Millisecond)))
	}
	return every, nil
}

// FormatRate writes an emission interval as a rule-document rate:
// "1/10m". Rates that name the same interval ("6/1h", "1/10m") format
// alike, so they hash to one Version.
func FormatRate(every time.Duration) string { return "1/" + FormatDuration(every) }
