package gate

import (
	"context"
	"errors"
	"time"
)

// MaxCheckBytes bounds the body of one check: the envelope's fields at their
// longest, with room for JSON escapes, and nothing else (a check carries no
// content).
const MaxCheckBytes = 8 << 10

// CheckRequest is one synchronous check: may the message Message describes
// go now? Message has no Raw: a check carries no payload.
type CheckRequest struct {
	Message Message
	// DryRun decides without recording anything: no window slot, no ledger
	// row, no stored answer.
	DryRun bool
}

// ParseCheck decodes the body of a check. Its fields are held to the checks
// of a message envelope (ParseMessage): the same lengths, UTF-8, control
// characters, id types, priorities and zones. Unlike an envelope, a field
// the check does not know is refused: a check has no content to carry, and a
// misspelt dry_run would otherwise take a real slot. So is a field given
// twice or in other letter case ("drY_run"), as in an envelope. The body
// must be at most MaxCheckBytes. Every error is an *InvalidError.
func ParseCheck(data []byte) (CheckRequest, error) {
	if err := checkBody(data, MaxCheckBytes, "UTF-8 JSON"); err != nil {
		return CheckRequest{}, err
	}
	s := envScan{data: data, fields: checkFields, stream: true}
	switch outcome, reason := s.run(); outcome {
	case scanBadText:
		return CheckRequest{}, invalidf("check is not valid UTF-8 JSON: %s", reason)
	case scanAmbiguous:
		return CheckRequest{}, invalidf("check is ambiguous: %s", reason)
	case scanSyntax, scanBadField:
		return CheckRequest{}, invalidf("check is not a JSON object of its fields: %s", reason)
	case scanTrailing:
		return CheckRequest{}, invalidf("check has data after its JSON object")
	}
	env := envelope{ID: s.text(chkID), Scene: s.text(chkScene), ReceiveIDType: s.text(chkReceiveIDType),
		ReceiveID: s.text(chkReceiveID), Priority: s.text(chkPriority), TZ: s.text(chkTZ)}
	m, err := env.message(nil, "", "")
	if err != nil {
		return CheckRequest{}, err
	}
	return CheckRequest{Message: m, DryRun: s.vals[chkDryRun].kind == valTrue}, nil
}

// CheckLimit is the limit a check answer names: the one that refused it, or
// for an admitted check the one with the fewest slots left. Exactly one of
// Window, Calendar and Rate is set, except for quiet hours and the
// recipient's preferences (Scope ScopeQuietHours, ScopePreference), which
// set none and have Max 0.
type CheckLimit struct {
	Scope    Scope     `json:"scope"`
	Window   *Duration `json:"window,omitempty"`
	Calendar Calendar  `json:"calendar,omitempty"`
	Rate     *Duration `json:"rate,omitempty"`
	Max      int       `json:"max"`
}

// CheckAnswer is the gate's answer to a check, the same JSON on HTTP and
// NATS. It is stored for a non-dry check, so that the same id asked again
// gets it again.
type CheckAnswer struct {
	// Decision is the outcome a message would get now: forward, suppress,
	// drop, defer or digest. Nothing is held for defer or digest: a check
	// has no payload; NextAllowedAt says when to ask again.
	Decision Outcome `json:"decision"`
	// Admitted is true when the sender may send now under the limits: the
	// window store admitted it (or a bypass priority forced it), or no
	// window applies and the decision is forward, or the store was down
	// and the scene fails open (Unchecked). A shadow scene's check over a
	// limit is forward but not admitted.
	Admitted bool `json:"admitted"`
	// Limit and Count: for an admitted check, the limit with the fewest
	// slots left and its count including this check; for a refused one,
	// the limit that refused it and its count. Nil and 0 when none applies.
	Limit *CheckLimit `json:"limit"`
	Count int         `json:"count"`
	// NextAllowedAt is when the limit (or quiet hours) that refused the
	// check reopens; nil when admitted.
	NextAllowedAt *time.Time `json:"next_allowed_at"`
	// RulesVersion is the version of the rules that decided; empty for an
	// answer read back from the ledger of a message decided on gate.in.
	RulesVersion string `json:"rules_version"`
	// Reason is why the decision is not a plain forward: limit,
	// unknown_scene, quiet_hours, queued, preference, store_error; ""
	// otherwise.
	Reason string `json:"reason,omitempty"`
	// Duplicate is set when the id was decided before: this is the first
	// answer (or the outcome of the message decided under that id), and
	// nothing was counted again.
	Duplicate bool `json:"duplicate,omitempty"`
	// Unchecked is set on a forward no window checked: the window store
	// was down and the scene fails open (on_store_error: forward).
	Unchecked bool `json:"unchecked,omitempty"`
	// ShadowOf is what enforcement would have decided, on a shadow scene's
	// forward over a limit.
	ShadowOf Action `json:"shadow_of,omitempty"`
	Bypass   bool   `json:"bypass,omitempty"`
	DryRun   bool   `json:"dry_run,omitempty"`
	// DecidedAt is when the decision was taken, on the window store's clock
	// when it was asked.
	DecidedAt time.Time `json:"decided_at"`
}

// AnswerOf is the answer to a check of m decided as d, from the window
// store's verdict res (zero when no store was asked), under rulesVersion.
// A defer or digest decision holds nothing: it answers as such, not
// admitted, with when to ask again.
func AnswerOf(d Decision, res AdmitResult, rulesVersion string) CheckAnswer {
	a := CheckAnswer{Decision: d.Outcome, RulesVersion: rulesVersion, Reason: d.Reason, Duplicate: d.Duplicate,
		Unchecked: d.Unchecked, Bypass: d.Bypass, DecidedAt: d.At}
	if d.Shadow {
		a.ShadowOf = d.ShadowOf
	}
	a.Admitted = d.Outcome == OutcomeForward && !d.Shadow
	e := d.Exceeded
	if a.Admitted {
		e = res.Tightest
	}
	if e != nil {
		a.Limit, a.Count = limitOf(*e), e.Count
	}
	if !a.Admitted && !d.NextAllowedAt.IsZero() {
		t := d.NextAllowedAt
		a.NextAllowedAt = &t
	}
	return a
}

// limitOf is the check answer's view of an exceeded limit.
func limitOf(e Exceeded) *CheckLimit {
	l := &CheckLimit{Scope: e.Scope, Calendar: e.Limit.Calendar, Max: e.Limit.Max}
	switch {
	case e.Limit == (Limit{}), e.Limit.Calendar != "": // quiet hours, a preference; a calendar
	case e.Limit.Rate > 0:
		r := Duration(e.Limit.Rate)
		l.Rate = &r
	default:
		w := Duration(e.Limit.Window)
		l.Window = &w
	}
	return l
}

// PriorAnswer is the answer to a check of an id the ledger holds with no
// stored answer: a message decided under that id on gate.in (or a check
// whose answer was not stored). It says what was decided and when, as a
// duplicate; the limit and the rules that decided are not known.
func PriorAnswer(p Prior) CheckAnswer {
	return CheckAnswer{Decision: p.Outcome, Admitted: p.Outcome == OutcomeForward, Duplicate: true, DecidedAt: p.At}
}

// AsDuplicate is a, the first answer to an id, as a later check of that id
// gets it: marked duplicate, and not a dry run (the first check was not).
func (a CheckAnswer) AsDuplicate() CheckAnswer {
	a.Duplicate, a.DryRun = true, false
	return a
}

// CheckRecord is the ledger record of a non-dry check of m decided as d:
// RecordOf, except that a defer or digest decision holds nothing (a check
// has no payload) and is recorded as the suppression it amounts to now,
// with its reason.
func CheckRecord(m Message, d Decision, rulesVersion string) Record {
	return RecordOf(m.ID, m, d.WithoutHold(), 0, rulesVersion)
}

// AnswersWithClaims is an AuditLog that is also the CheckAnswers of its
// checks: Commit stores a record's Answer with its claim, in one
// transaction, so that a check's answer is durable exactly when its
// decision is, and saving it costs no call of its own.
type AnswersWithClaims interface {
	AuditLog
	CheckAnswers
	StoresAnswersWithClaims()
}

// CheckAnswers keeps the first answer to every checked id, beside the
// ledger, for as long as the ledger keeps the id.
//
// Answer returns the answer stored for id, and whether there is one; when
// there is none it returns what the ledger holds of id (a zero Prior when
// nothing). Save stores a for id unless an answer is stored already (the
// first stays); it is idempotent. Errors wrap ErrUnavailable or
// ErrPermanent, as AuditLog's do.
type CheckAnswers interface {
	Answer(ctx context.Context, id string) (a CheckAnswer, found bool, prior Prior, err error)
	Save(ctx context.Context, id string, a CheckAnswer) error
}

// CheckAnswersBatch is a CheckAnswers that also looks up and stores many
// answers at once, one statement each: the checks decided together in one
// batch share those calls. Answers returns what Answer returns for each of
// ids, in one map (an id found nowhere maps to a zero StoredAnswer); SaveAll
// stores answers (id to answer) as Save stores each: an id with an answer
// stored already keeps it. Their errors are Answer's and Save's; Answers
// fails as a whole for an id the store refuses. A CheckAnswers without it
// is asked one id at a time.
type CheckAnswersBatch interface {
	CheckAnswers
	Answers(ctx context.Context, ids []string) (map[string]StoredAnswer, error)
	SaveAll(ctx context.Context, answers map[string]CheckAnswer) error
}

// StoredAnswer is what CheckAnswersBatch.Answers holds of one id: the answer
// stored for it, if Found, and what the ledger holds of it (a zero Prior
// when nothing).
type StoredAnswer struct {
	Answer CheckAnswer
	Found  bool
	Prior  Prior
}

// CheckFailure is the message of the {"error": …} body that answers a
// check that failed with err, on POST /v1/check and gate.check alike; the
// status is the transport's, from Classify(err): 409 for an id first used
// for another scene or recipient, whose use the message names. A store's
// own words stay in the log: they may name hosts.
func CheckFailure(err error) string {
	var reused *ReusedError
	switch Classify(err) {
	case ClassPark:
		return "invalid check: " + InvalidReason(err)
	case ClassConflict:
		if errors.As(err, &reused) {
			return "reused id: " + OneLine(reused.Error(), 1024)
		}
	case ClassUnavailable:
		return "the window store or the audit store did not answer: ask again, with the same id"
	}
	return "internal error"
}
