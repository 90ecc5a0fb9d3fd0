package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// CheckOptions are a Checker's dependencies: the pipeline's rules, window
// store, audit log and hold store, and the store of check answers. Rules,
// Store, Audit and Answers are required.
type CheckOptions struct {
	Rules   gate.RuleSource
	Store   gate.WindowStore
	Audit   gate.AuditLog
	Answers gate.CheckAnswers
	// Holds, when set, lets a check of a scene that holds messages see the
	// queue it would join: with messages held there already, a message sent
	// now would overtake them, so the check answers defer (or digest) with
	// reason queued, as the pipeline decides such a message.
	Holds gate.HoldStore
	// Preferences, when set, are the recipients' preferences (the cache
	// the pipeline reads): a check of a muted scene is suppressed, one of a
	// digest_only scene answers digest, as a message would be.
	Preferences gate.PreferenceStore
	Metrics     *metrics.Metrics // optional
	Log         *slog.Logger     // optional
	// MaxBytes bounds a check's body; 0 means gate.MaxCheckBytes.
	MaxBytes int
	// Now is the clock of quiet hours and of decisions no window store
	// takes; time.Now by default.
	Now func() time.Time
}

// Checker answers synchronous checks (POST /v1/check, gate.check): it
// decides a message that is not sent, as the pipeline would decide it now,
// and records an admission in the windows and the ledger the pipeline uses,
// so that checks and messages on gate.in share every limit. It is safe for
// concurrent use.
type Checker struct{ o CheckOptions }

// NewChecker checks the options and returns a Checker.
func NewChecker(o CheckOptions) (*Checker, error) {
	if o.Rules == nil || o.Store == nil || o.Audit == nil || o.Answers == nil {
		return nil, errors.New("checker: rules, store, audit and answers are required")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Checker{o: o}, nil
}

// ErrCheckStore marks a check the gate could not answer because a store did
// not (the window store, for a scene that does not fail open, or the audit
// store): the caller may ask again with the same id. It always comes with
// gate.ErrUnavailable.
var ErrCheckStore = errors.New("check could not be answered")

// Check answers the check whose JSON is body. Its errors are an
// *gate.InvalidError for a body that is not a valid check (the caller must
// correct it), or wrap gate.ErrUnavailable when a store could not answer
// (the caller may retry, with the same id: nothing was recorded, or what
// was is found again). Any other error is a bug.
//
// A non-dry check is idempotent on its id: the first answer is stored, and
// every later check of the id gets it back, marked duplicate, with nothing
// counted again. An id the ledger holds without a stored answer (a message
// on gate.in decided under it) answers with that outcome. Two checks of one
// id at once both claim it in the ledger; the one the ledger refuses answers
// with the first one's answer, and takes an admission it recorded back out
// of the windows unless the first was admitted too: a window holds an id
// once, so that admission is the first one's slot.
func (c *Checker) Check(ctx context.Context, body []byte) (a gate.CheckAnswer, err error) {
	defer func() { c.count(a, err) }()
	req, err := gate.ParseCheck(body, c.o.MaxBytes)
	if err != nil {
		return gate.CheckAnswer{}, err
	}
	m := req.Message
	if prev, ok, err := c.answered(ctx, m.ID); err != nil || ok {
		return prev, err
	}
	rules := c.o.Rules.Current()
	now := c.o.Now()
	plan := gate.PlanWithPreferences(rules, m, c.preferences(ctx, m.Recipient()), now)
	d, res, counted, err := c.decide(ctx, rules, plan, req.DryRun, now)
	if err != nil {
		return gate.CheckAnswer{}, err
	}
	a = gate.AnswerOf(d, res, rules.Version)
	if req.DryRun {
		a.DryRun = true
		return a, nil
	}
	var forget []gate.AdmitRequest
	if counted {
		forget = []gate.AdmitRequest{*plan.Request}
	}
	done := startTimer(c.o.Metrics, "audit", "commit")
	known, err := c.o.Audit.Commit(ctx, []gate.Record{gate.CheckRecord(m, d, rules.Version)})
	done()
	if err != nil {
		// Not durable, so not an answer: the admission is taken back, and
		// the caller asks again.
		c.forget(ctx, forget)
		return gate.CheckAnswer{}, c.failed("audit", "commit", err)
	}
	if len(known) > 0 {
		// The id was claimed first by another check (or a message). A
		// window counts an id once, whichever ask recorded it: when the
		// first was admitted, the slot this check recorded is its slot
		// too, and stays; otherwise it is taken back.
		first, err := c.first(ctx, m.ID)
		if err != nil || !first.Admitted {
			c.forget(ctx, forget)
		}
		return first, err
	}
	// A failure to store the answer leaves the ledger's outcome, which a
	// second ask answers with (PriorAnswer): the decision stands either way.
	if err := c.o.Answers.Save(ctx, m.ID, a); err != nil {
		countFailure(c.o.Metrics, "audit", "save_check")
		c.o.Log.Warn("storing a check's answer failed; a second ask of its id gets the ledger's outcome", "id", m.ID, "err", err)
	}
	return a, nil
}

// answered looks id up among the stored answers and in the ledger: a check
// of an id decided before gets that decision back. An id in the ledger
// without an answer is a message decided on gate.in, or a check storing
// its answer now, which first waits for a moment.
func (c *Checker) answered(ctx context.Context, id string) (gate.CheckAnswer, bool, error) {
	done := startTimer(c.o.Metrics, "audit", "check_answer")
	a, found, prior, err := c.o.Answers.Answer(ctx, id)
	done()
	switch {
	case err != nil:
		return gate.CheckAnswer{}, false, c.failed("audit", "check_answer", err)
	case found:
		a.Duplicate, a.DryRun = true, false
		return a, true, nil
	case prior.Outcome != "":
		// A check that claimed the id a moment ago stores its answer
		// right after: waited for, before the ledger's outcome stands in.
		a, err := c.first(ctx, id)
		return a, true, err
	}
	return gate.CheckAnswer{}, false, nil
}

// firstTries bounds the wait for the answer of a check that claimed an id in
// the ledger a moment before this one: it stores its answer right after its
// commit.
const firstTries = 5

// first is the answer of the check (or message) that claimed id in the
// ledger first. The answer of a concurrent check is stored just after its
// claim, so it is looked for a few times before the ledger's outcome stands
// in for it.
func (c *Checker) first(ctx context.Context, id string) (gate.CheckAnswer, error) {
	for try := 1; ; try++ {
		a, found, prior, err := c.o.Answers.Answer(ctx, id)
		switch {
		case err != nil:
			return gate.CheckAnswer{}, c.failed("audit", "check_answer", err)
		case found:
			a.Duplicate, a.DryRun = true, false
			return a, nil
		case try >= firstTries && prior.Outcome != "":
			return gate.PriorAnswer(prior), nil
		case try >= firstTries:
			return gate.CheckAnswer{}, c.failed("audit", "check_answer",
				fmt.Errorf("id %q: the ledger refused it as known, and has no row for it", id))
		}
		t := time.NewTimer(time.Duration(try) * 10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return gate.CheckAnswer{}, c.failed("audit", "check_answer", ctx.Err())
		case <-t.C:
		}
	}
}

// decide decides the planned check as the pipeline decides a message:
// behind held messages of its queue, else by the window store (which
// records an admission unless dryRun), else, with the store down, failing
// open when the scene says so. counted reports an admission this check
// recorded.
func (c *Checker) decide(ctx context.Context, rules *gate.RuleSet, plan gate.Plan, dryRun bool, now time.Time) (d gate.Decision, res gate.AdmitResult, counted bool, err error) {
	if q, ok, err := c.queued(ctx, plan); err != nil {
		return d, res, false, err
	} else if ok {
		return gate.Queued(plan, q, now), res, false, nil
	}
	if plan.Request != nil {
		req := *plan.Request
		req.DryRun = dryRun
		done := startTimer(c.o.Metrics, "window", "admit")
		rs, err := admit(ctx, c.o.Store, []gate.AdmitRequest{req})
		done()
		if err != nil {
			if d, ok := gate.FailOpen(plan, c.o.Now()); ok && !errors.Is(err, gate.ErrInvalidRequest) {
				countFailure(c.o.Metrics, "window", "admit")
				return d, res, false, nil
			}
			return d, res, false, c.failed("window", "admit", err)
		}
		res = rs[0]
		counted = res.Admitted && !res.Duplicate && !dryRun
	}
	return gate.Resolve(rules, plan, res, now), res, counted, nil
}

// queued reports the first queue of the plan that holds messages now, which
// a message sent now would overtake. Quiet hours hold the message whatever
// its queues hold.
func (c *Checker) queued(ctx context.Context, plan gate.Plan) (gate.HoldQueue, bool, error) {
	if c.o.Holds == nil || plan.Quiet || len(plan.Queues) == 0 {
		return gate.HoldQueue{}, false, nil
	}
	qs := make([]gate.Queue, len(plan.Queues))
	for i, hq := range plan.Queues {
		qs[i] = hq.Queue
	}
	done := startTimer(c.o.Metrics, "audit", "waiting")
	waiting, err := c.o.Holds.Waiting(ctx, qs)
	done()
	if err != nil {
		return gate.HoldQueue{}, false, c.failed("audit", "waiting", err)
	}
	for _, hq := range plan.Queues {
		if waiting[hq.Queue] {
			return hq, true, nil
		}
	}
	return gate.HoldQueue{}, false, nil
}

// preferences looks up the preferences of recipient, and fails open as the
// pipeline does (preferences are a courtesy): should the lookup fail, the
// check is decided without them, and the failure is counted and logged.
func (c *Checker) preferences(ctx context.Context, recipient string) *gate.Preferences {
	if c.o.Preferences == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, preferenceTimeout)
	defer cancel()
	done := startTimer(c.o.Metrics, "audit", "preferences")
	found, err := c.o.Preferences.Preferences(ctx, []string{recipient})
	done()
	if err != nil {
		countFailure(c.o.Metrics, "audit", "preferences")
		c.o.Log.Warn("reading a recipient's preferences failed; the check is decided without them", "err", err)
		return nil
	}
	if pr, ok := found[recipient]; ok {
		return &pr
	}
	return nil
}

// failed counts a failed call and returns its error, wrapping
// gate.ErrUnavailable and ErrCheckStore; a store's permanent refusal (an
// id it cannot hold) is an *gate.InvalidError instead: asked again, the
// check fails again.
func (c *Checker) failed(store, op string, err error) error {
	countFailure(c.o.Metrics, store, op)
	if errors.Is(err, gate.ErrPermanent) || errors.Is(err, gate.ErrInvalidRequest) {
		return refusedBy(store, err)
	}
	if !errors.Is(err, gate.ErrUnavailable) {
		err = fmt.Errorf("%w: %w", gate.ErrUnavailable, err)
	}
	return fmt.Errorf("%s %s: %w: %w", store, op, ErrCheckStore, err)
}

// forget takes a check's admission back out of its windows.
func (c *Checker) forget(ctx context.Context, reqs []gate.AdmitRequest) {
	forget(ctx, c.o.Store, c.o.Metrics, c.o.Log, reqs, "a check's admission taken back stays counted in its windows")
}

// count counts an answered check by decision, or a failed one as "error"
// or "invalid".
func (c *Checker) count(a gate.CheckAnswer, err error) {
	if c.o.Metrics == nil {
		return
	}
	decision := string(a.Decision)
	switch {
	case gate.IsInvalid(err):
		decision = "invalid"
	case err != nil:
		decision = "error"
	}
	dry := "false"
	if a.DryRun {
		dry = "true"
	}
	c.o.Metrics.Checks.WithLabelValues(decision, dry).Inc()
}
