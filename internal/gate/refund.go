package gate

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RefundSource says how a refund reached the gate.
type RefundSource string

// The sources of a refund: POST /v1/refund, or the gate.refund subject.
const (
	RefundSourceAPI  RefundSource = "api"
	RefundSourceNATS RefundSource = "nats"
)

// Refund is the audit row of one refund: a forwarded message that its
// sender failed to deliver, taken out of the windows it counted in.
type Refund struct {
	MessageID string `json:"message_id"`
	Scene     string `json:"scene"`
	Recipient string `json:"recipient"`
	// ForwardedAt is when the gate forwarded the message: its ledger
	// entry's decision time, or, for a deferred message, when it was
	// released.
	ForwardedAt time.Time    `json:"forwarded_at"`
	RefundedAt  time.Time    `json:"refunded_at"`
	Source      RefundSource `json:"source"`
}

// RefundResult answers a refund request: the refund's audit row, the first
// one when the id had been refunded before (AlreadyRefunded), in which case
// nothing changed.
type RefundResult struct {
	Refund
	AlreadyRefunded bool `json:"already_refunded"`
}

// The refusals of a refund. Each is permanent: asking again gets the same
// answer, so the transport answers (or acks) it and never retries.
// ErrNeverDecided is ClassNotFound, the other two ClassConflict.
var (
	// ErrNeverDecided: the ledger does not know the id (never received, an
	// invalid message, or decided before the ledger's retention).
	ErrNeverDecided = errors.New("never decided by this gate")
	// ErrNotForwarded: the id was decided, but not forwarded (suppressed,
	// dropped, parked, or held and not released): it spent no window slot.
	ErrNotForwarded = errors.New("not forwarded")
	// ErrLedgerIncomplete: the id was forwarded before the ledger kept the
	// recipient of each decision (migration 0007), so its windows are
	// unknown.
	ErrLedgerIncomplete = errors.New("ledger entry without a recipient")
)

// RefundRefused reports whether err is one of the refusals above.
func RefundRefused(err error) bool {
	return errors.Is(err, ErrNeverDecided) || errors.Is(err, ErrNotForwarded) || errors.Is(err, ErrLedgerIncomplete)
}

// MaxRefundBytes bounds a refund request's body. {"id": …} needs a few
// hundred bytes; a sender may hand back the whole envelope it got from
// gate.out, which the gate's own message limit bounds far below this.
const MaxRefundBytes = 1 << 20

// refundFields is the one field of a refund body the scan captures.
var refundFields = []scanField{stringField("id")}

// ParseRefund reads a refund request's body, {"id": "…"}, and returns the
// id. Other fields are ignored, so a sender may hand back the envelope it
// received from gate.out. The body is held to what every body is (within
// MaxRefundBytes, valid UTF-8 without NUL bytes, no lone surrogate escape:
// an id that is not UTF-8 would otherwise be read as another one, with
// U+FFFD) and its keys to an envelope's (exact; none given twice; no
// "ID"). A body that is not such an object, or whose id is missing, empty
// or over MaxIDBytes, gives an *InvalidError.
func ParseRefund(body []byte) (string, error) {
	if err := checkBody(body, MaxRefundBytes, "UTF-8 JSON"); err != nil {
		return "", err
	}
	s := envScan{data: body, fields: refundFields}
	switch outcome, reason := s.run(); outcome {
	case scanBadText:
		return "", invalidf("refund body is not valid UTF-8 JSON: %s", reason)
	case scanAmbiguous:
		return "", invalidf("refund body is ambiguous: %s", reason)
	case scanSyntax, scanBadField:
		return "", invalidf("refund body must be a JSON object like {\"id\": \"msg-1\"}: %s", reason)
	}
	if s.vals[0].kind == valAbsent {
		return "", invalidf("refund body has no \"id\"")
	}
	id := s.text(0)
	if err := CheckName("id", id, MaxIDBytes); err != nil {
		return "", err
	}
	return id, nil
}

// RefundFilter selects refund rows, newest first, with the fields of a
// SuppressionFilter: Since and Until bound the refund's time.
type RefundFilter SuppressionFilter

// RefundPage is one page of refund rows.
type RefundPage struct {
	Items      []Refund `json:"items"`
	NextCursor string   `json:"next_cursor"`
}

// Ledger reads back what the audit store keeps of decided keys.
// LedgerEntries returns, of keys, those in the ledger; errors wrap
// ErrUnavailable.
type Ledger interface {
	LedgerEntries(ctx context.Context, keys []string) (map[string]LedgerEntry, error)
}

// RefundLog keeps the refunds.
//
// Refunded returns the refund row of id, if there is one. ReleasedAt
// returns when a deferred message was released (forwarded late), and false
// when it was not (yet). RecordRefund writes r's row and one increment of
// the refunded counter of r.Scene in the hour of r.RefundedAt, in one
// transaction, unless a row for r.MessageID exists: then it writes nothing
// and returns that row with recorded false, so it is idempotent and safe to
// retry. Refunds lists rows; a bad filter or cursor wraps ErrBadRequest.
// Other errors of every method wrap ErrUnavailable, after which nothing was
// written.
type RefundLog interface {
	Refunded(ctx context.Context, id string) (Refund, bool, error)
	ReleasedAt(ctx context.Context, id string) (time.Time, bool, error)
	RecordRefund(ctx context.Context, r Refund) (row Refund, recorded bool, err error)
	Refunds(ctx context.Context, f RefundFilter) (RefundPage, error)
}

// Refunder takes forwarded messages out of their windows on their sender's
// word that delivery failed. Refund reads body with ParseRefund (an
// *InvalidError when it cannot) and refunds the id it names. It is idempotent: the refund of an id
// refunded before changes nothing and returns the first refund with
// AlreadyRefunded. Its refusals are permanent (see RefundRefused); an
// *InvalidError marks a request no gate can read; other errors are
// transient (wrap ErrUnavailable) and the same call may succeed later.
type Refunder interface {
	Refund(ctx context.Context, body []byte, source RefundSource) (RefundResult, error)
}

// RefundRequestOf is the admit request of a ledger entry under the rules
// in force: the request whose admission Forget undoes. Forget needs only
// its id, recipient and scene, which name the windows, and the rate
// limits' intervals; the limits, caps and zone are filled as an admission
// would have them, so that a store that keys a window by them finds the
// same window. The zone is the message's own (entry.TZ) if it still loads,
// else the scene's. What the admission took (less than a plain one for a
// bypass past a full limit) is the store's to remember, not the request's:
// only the store saw whether the limit was full.
func RefundRequestOf(rs *RuleSet, e LedgerEntry) AdmitRequest {
	rule, _ := rs.Scene(e.Scene)
	return rs.AdmitRequestFor(rule, e.Key, e.Recipient, e.Scene, rule.Bypasses(e.Priority), rule.ZoneNamed(e.TZ))
}

// CheckRefundable refuses a refund of the ledger entry e (ok false: it is
// not in the ledger): it must be a forward, or a deferred message released
// since (released), and name its recipient.
func CheckRefundable(id string, e LedgerEntry, ok, released bool) error {
	switch {
	case !ok:
		return fmt.Errorf("refund %q: %w: the id %q was never decided by this gate (or its ledger entry is older than the ledger's retention)",
			id, ErrNeverDecided, id)
	case e.Outcome == OutcomeDefer && released:
	case e.Outcome != OutcomeForward:
		return fmt.Errorf("refund %q: %w: the message was %s, not forwarded (outcome %q): it spent no window slot",
			id, ErrNotForwarded, outcomeWords(e.Outcome), e.Outcome)
	}
	if e.Recipient == "" || e.Scene == "" {
		return fmt.Errorf("refund %q: %w: it was decided before the gate's ledger kept recipients, so the windows it counted in are unknown",
			id, ErrLedgerIncomplete)
	}
	return nil
}

// outcomeWords says what became of a message of outcome o.
func outcomeWords(o Outcome) string {
	switch o {
	case OutcomeSuppress:
		return "suppressed"
	case OutcomeDrop:
		return "dropped"
	case OutcomeInvalid:
		return "invalid"
	case OutcomeParked:
		return "parked"
	case OutcomeDefer:
		return "deferred and not released"
	case OutcomeDigest:
		return "collected for a digest"
	}
	return string(o)
}
