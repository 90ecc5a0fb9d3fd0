package gate

import (
	"context"
	"time"
)

// Outcome is the decision taken for a message, as counted in reports.
type Outcome string

// Outcomes. OutcomeInvalid is a message that could not be decided and went
// to the dead letter.
const (
	OutcomeForward  Outcome = "forward"
	OutcomeSuppress Outcome = "suppress"
	OutcomeDrop     Outcome = "drop"
	OutcomeInvalid  Outcome = "invalid"
	// OutcomeParked is a message that exhausted its deliveries (the gate
	// consumer's MaxDeliver) undecided and was parked on the dead letter.
	OutcomeParked Outcome = "parked"
	// OutcomeDefer is a message held to be forwarded later (on_exceed:
	// defer, or quiet hours with action defer); OutcomeDigest one collected
	// for a digest. Both are held in the HoldStore until settled.
	OutcomeDefer  Outcome = "defer"
	OutcomeDigest Outcome = "digest"
)

// Suppression is one audit row: a message held back, or, in shadow mode,
// one that would have been.
type Suppression struct {
	ID            int64     `json:"id"`
	MessageID     string    `json:"message_id"`
	Scene         string    `json:"scene"`
	Recipient     string    `json:"recipient"`
	Priority      Priority  `json:"priority"`
	Scope         Scope     `json:"limit_scope"`
	LimitWindow   Duration  `json:"limit_window"`
	LimitMax      int       `json:"limit_max"`
	LimitCalendar Calendar  `json:"limit_calendar,omitempty"` // "day" | "week" for a calendar limit, whose LimitWindow is 0
	LimitRate     Duration  `json:"limit_rate,omitempty"`     // a rate limit's emission interval (LimitMax is its burst, LimitWindow 0)
	CountSeen     int       `json:"count_seen"`
	Shadow        bool      `json:"shadow"`
	Reason        string    `json:"reason"` // "limit" | "unknown_scene" | "quiet_hours" | "queued" | "preference" | "reused_id"
	RulesVersion  string    `json:"rules_version"`
	DecidedAt     time.Time `json:"decided_at"`
	NextAllowedAt time.Time `json:"next_allowed_at,omitzero"`
	Payload       string    `json:"payload,omitempty"`
	// HeldAs is set on the row of a held message: "defer" or "digest".
	HeldAs HoldKind `json:"held_as,omitempty"`
	// Settled says what became of a held message, once it is settled:
	// "released", "fell_back" (then Fallback says how), "digested" (then
	// DigestID names the digest that carried it), or "cancelled".
	Settled   SettleKind `json:"settled,omitempty"`
	SettledAt time.Time  `json:"settled_at,omitzero"`
	Fallback  Action     `json:"fallback,omitempty"`
	DigestID  string     `json:"digest_id,omitempty"`
}

// Record is the durable trace of one decided (or invalid) message.
type Record struct {
	// Key is the idempotency key: the message id; for an invalid message
	// "invalid:<Nats-Msg-Id>", or "seq:<stream sequence>" without one.
	Key   string
	Scene string
	// Recipient, Priority and TZ are the message's (empty for an invalid
	// one): with Scene and At, what the ledger keeps of every decision, so
	// that a refund finds the windows a forward counted in and a rule
	// preview can replay the decisions of a period.
	Recipient string
	Priority  Priority
	TZ        string
	Outcome   Outcome
	// Shadow marks a forward that enforcement would have suppressed or
	// dropped; ShadowOf says which.
	Shadow   bool
	ShadowOf Action
	// Unchecked marks a forward no window checked (the store was down and
	// the scene fails open).
	Unchecked bool
	At        time.Time
	// BodyHash is the message's BodyHash, kept with its key; 0 for a check
	// or an invalid message, whose bodies a later message is not compared
	// with.
	BodyHash int64
	// Suppression is the audit row to write, for suppress, defer and digest
	// outcomes and shadow suppressions.
	Suppression *Suppression
	// Hold is the message to hold, for defer and digest outcomes.
	Hold *Held
	// Answer is a check's answer, for an audit log that keeps the answers
	// of its checks (AnswersWithClaims): stored with the claim, in its
	// transaction, when the claim is new and no answer to the id is stored.
	Answer *CheckAnswer
}

// RecordOf is the record of decision d on message m, delivered as the
// inbound stream's message seq, under the rules of rulesVersion: with its
// audit row when d suppresses or holds it, or would in shadow mode, and
// with the message to hold when d holds it.
func RecordOf(key string, m Message, d Decision, seq uint64, rulesVersion string) Record {
	rec := Record{Key: key, Scene: m.Scene, Recipient: m.Recipient(), Priority: m.Priority, TZ: m.TZ,
		Outcome: d.Outcome, Shadow: d.Shadow, ShadowOf: d.ShadowOf, Unchecked: d.Unchecked, At: d.At}
	held := d.Holds()
	if d.Outcome == OutcomeSuppress || held || (d.Shadow && d.ShadowOf != ActionDrop && d.ShadowOf != "") {
		s := &Suppression{
			MessageID:     m.ID,
			Scene:         m.Scene,
			Recipient:     m.Recipient(),
			Priority:      m.Priority,
			Shadow:        d.Shadow,
			Reason:        d.Reason,
			RulesVersion:  rulesVersion,
			DecidedAt:     d.At,
			NextAllowedAt: d.NextAllowedAt,
			Payload:       string(m.Raw),
		}
		if e := d.Exceeded; e != nil {
			s.Scope, s.LimitWindow, s.LimitMax, s.CountSeen = e.Scope, Duration(e.Limit.Window), e.Limit.Max, e.Count
			s.LimitCalendar, s.LimitRate = e.Limit.Calendar, Duration(e.Limit.Rate)
		}
		rec.Suppression = s
	}
	if held {
		kind := HoldDefer
		if d.Outcome == OutcomeDigest {
			kind = HoldDigest
		}
		rec.Suppression.HeldAs = kind
		rec.Hold = &Held{
			MessageID: m.ID,
			Kind:      kind,
			Queue:     d.Queue,
			Scene:     m.Scene,
			Priority:  m.Priority,
			TZ:        m.TZ,
			Seq:       seq,
			HeldAt:    d.At,
			DueAt:     d.HoldUntil,
			Expires:   d.Expires,
			Fallback:  d.Fallback,
			Reason:    d.Reason,
			CancelKey: m.CancelKey,
			Payload:   m.Raw,
		}
	}
	return rec
}

// Prior is what the ledger holds of a key committed before: the outcome
// then decided and when, and the scene and recipient it was decided for
// (empty for an invalid message, and for rows written before the ledger
// kept them), which tell a duplicate from a reused id (Reuses), and its
// body's BodyHash (0 when none was kept), which tells a producer's retry
// from another message under the same id (BodyDiffers).
type Prior struct {
	Outcome   Outcome
	At        time.Time
	Scene     string
	Recipient string
	BodyHash  int64
}

// AuditLog makes decisions durable.
//
// Commit writes a batch in one transaction: for each record whose Key was
// never committed before, its audit row (if any) and one increment of its
// scene's hourly counters. Records whose Key is already known change
// nothing, so Commit is idempotent and safe to retry; it returns their keys
// (nil when every key was new). Decided returns, of keys, those committed
// before with what was decided, when, and for which scene and recipient.
//
// A failed Commit wrote nothing. Its error wraps one of:
//   - ErrUnavailable: transient (the database unreachable, a timeout, a
//     conflict with another transaction); the same call may succeed later.
//   - ErrPermanent: the store refused the data of at least one record (text
//     it cannot hold, such as invalid UTF-8 or a NUL byte; a constraint or
//     one of its limits violated; a record with no key, no time or an
//     unknown outcome, which also wraps ErrBadRequest). The same records
//     fail again however often they are retried, but a subset without the
//     offending ones can succeed: the caller commits the rest and parks the
//     messages of the records refused on their own.
//
// Decided's errors are the same two: ErrPermanent when a key is one the
// store could never have committed (a key Commit would refuse), so it was
// never decided.
type AuditLog interface {
	Decided(ctx context.Context, keys []string) (map[string]Prior, error)
	Commit(ctx context.Context, recs []Record) (known []string, err error)
	Ping(ctx context.Context) error
}

// SuppressionFilter selects suppression rows, newest first.
type SuppressionFilter struct {
	Scene     string
	Recipient string
	// Reason, when set, keeps the suppressions of that reason only
	// (Suppression.Reason, such as ReasonPreference); the refund listing
	// ignores it.
	Reason string
	Since  time.Time // inclusive; zero means unbounded
	Until  time.Time // exclusive; zero means unbounded
	Limit  int
	Cursor string // opaque, from a previous page
}

// SuppressionPage is one page of suppression rows.
type SuppressionPage struct {
	Items      []Suppression `json:"items"`
	NextCursor string        `json:"next_cursor"`
}

// SceneSummary counts one scene's outcomes over a time range.
type SceneSummary struct {
	Scene            string `json:"scene"`
	Received         int64  `json:"received"`
	Forwarded        int64  `json:"forwarded"`
	Suppressed       int64  `json:"suppressed"`
	Dropped          int64  `json:"dropped"`
	Invalid          int64  `json:"invalid"`
	ShadowSuppressed int64  `json:"shadow_suppressed"`
	ShadowDropped    int64  `json:"shadow_dropped"`
	// ForwardedUnchecked counts forwards made without a window check while
	// the window store was unavailable (on_store_error: forward).
	ForwardedUnchecked int64 `json:"forwarded_unchecked"`
	// Parked counts messages that exhausted GATE_MAX_DELIVER deliveries
	// undecided (say, a retry scene while the window store stayed down) and
	// were parked on the dead letter.
	Parked int64 `json:"parked"`
	// Deferred and Digested count messages held when decided: to be forwarded
	// later, or collected for a digest. Received is the sum of forwarded,
	// suppressed, dropped, invalid, parked, deferred and digested.
	Deferred int64 `json:"deferred"`
	Digested int64 `json:"digested"`
	// Released and FellBack count deferred messages settled later, in the
	// hour they were: forwarded, or past max_defer given defer_fallback.
	Released int64 `json:"released"`
	FellBack int64 `json:"fell_back"`
	// Refunded counts forwarded messages refunded by their sender (delivery
	// failed, so they were taken out of their windows), in the hour of the
	// refund. Not part of Received: the message was counted when decided.
	Refunded int64 `json:"refunded"`
	// Cancelled counts held messages taken back by a cancel of their
	// cancel_key (or a message that resolves it), in the hour of the
	// cancel. Not part of Received either.
	Cancelled int64 `json:"cancelled"`
}

// NumCounters is how many counters a SceneSummary holds.
const NumCounters = 15

// Counters are s's counters in the order of its fields, which is also the
// order of the audit store's counter columns.
func (s *SceneSummary) Counters() [NumCounters]*int64 {
	return [NumCounters]*int64{&s.Received, &s.Forwarded, &s.Suppressed, &s.Dropped, &s.Invalid,
		&s.ShadowSuppressed, &s.ShadowDropped, &s.ForwardedUnchecked, &s.Parked,
		&s.Deferred, &s.Digested, &s.Released, &s.FellBack, &s.Refunded, &s.Cancelled}
}

// Reports answers report queries. Bad filters or cursors wrap ErrBadRequest.
type Reports interface {
	Suppressions(ctx context.Context, f SuppressionFilter) (SuppressionPage, error)
	Summary(ctx context.Context, since, until time.Time) ([]SceneSummary, error)
}

// LedgerEntry is what the ledger keeps of one decided key: the message's
// scene, recipient, priority and time zone, what was decided and when.
// The first four are empty for an invalid message, and for rows written
// before the ledger kept them.
type LedgerEntry struct {
	Key       string    `json:"key"`
	Scene     string    `json:"scene"`
	Recipient string    `json:"recipient"`
	Priority  Priority  `json:"priority"`
	TZ        string    `json:"tz,omitempty"`
	Outcome   Outcome   `json:"outcome"`
	At        time.Time `json:"decided_at"`
}
