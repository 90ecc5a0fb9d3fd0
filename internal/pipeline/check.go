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
// Store, Audit and Answers are required. Answers that implement
// gate.CheckAnswersBatch are looked up and saved a batch at a time.
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
	// Now is the clock of quiet hours and of decisions no window store
	// takes; time.Now by default.
	Now func() time.Time
}

// Checker answers synchronous checks (POST /v1/check, gate.check): it
// decides a message that is not sent, as the pipeline would decide it now,
// and records an admission in the windows and the ledger the pipeline uses,
// so that checks and messages on gate.in share every limit. It is safe for
// concurrent use.
type Checker struct {
	o CheckOptions
	q checkQueue
}

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
//
// Checks asked at once are decided together, in batches (see checkBatch):
// a check waits for the batch that takes it, and returns early, with an
// error wrapping gate.ErrUnavailable and ctx's error, when ctx ends first;
// the batch then still decides it, and a second ask of its id gets that
// answer.
func (c *Checker) Check(ctx context.Context, body []byte) (a gate.CheckAnswer, err error) {
	defer func() { c.count(a, err) }()
	req, err := gate.ParseCheck(body)
	if err != nil {
		return gate.CheckAnswer{}, err
	}
	if _, batched := c.o.Answers.(gate.CheckAnswersBatch); !batched {
		if prev, ok, err := c.answered(ctx, req.Message.ID); err != nil || ok {
			return prev, err
		}
	}
	return c.wait(ctx, c.enqueue(ctx, req))
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
		return a.AsDuplicate(), true, nil
	case prior.Outcome != "":
		// A check that claimed the id a moment ago stores its answer
		// right after: waited for, before the ledger's outcome stands in.
		a, err := c.first(ctx, id, 1)
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
// claim, so it is looked for a few times (firstTries in all) before the
// ledger's outcome stands in for it. tried is how many of those looks the
// caller has just made (0 or 1): one that has just looked starts by
// waiting.
func (c *Checker) first(ctx context.Context, id string, tried int) (gate.CheckAnswer, error) {
	for try := tried + 1; ; try++ {
		if try > 1 {
			t := time.NewTimer(time.Duration(try-1) * 10 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return gate.CheckAnswer{}, c.failed("audit", "check_answer", ctx.Err())
			case <-t.C:
			}
		}
		a, found, prior, err := c.o.Answers.Answer(ctx, id)
		switch {
		case err != nil:
			return gate.CheckAnswer{}, c.failed("audit", "check_answer", err)
		case found:
			return a.AsDuplicate(), nil
		case try >= firstTries && prior.Outcome != "":
			return gate.PriorAnswer(prior), nil
		case try >= firstTries:
			return gate.CheckAnswer{}, c.failed("audit", "check_answer",
				fmt.Errorf("id %q: the ledger refused it as known, and has no row for it", id))
		}
	}
}

// preferences looks up the preferences of the batch's recipients in one
// call, and fails open as the pipeline does (preferences are a courtesy):
// should the lookup fail, the checks are decided without them, and the
// failure is counted and logged.
func (c *Checker) preferences(ctx context.Context, items []*checkItem) map[string]gate.Preferences {
	if c.o.Preferences == nil || len(items) == 0 {
		return nil
	}
	recipients := make([]string, len(items))
	for i, it := range items {
		recipients[i] = it.req.Message.Recipient()
	}
	found, err := lookupPreferences(ctx, c.o.Preferences, c.o.Metrics, recipients)
	if err != nil {
		c.o.Log.Warn("reading recipients' preferences failed; the checks are decided without them", "checks", len(items), "err", err)
		return nil
	}
	return found
}

// queued decides the checks whose plan has a queue that holds messages now,
// which a message sent now would overtake, with one look at the batch's
// queues. Quiet hours hold the message whatever its queues hold.
func (c *Checker) queued(ctx context.Context, items []*checkItem, now time.Time) {
	if c.o.Holds == nil {
		return
	}
	var (
		qs   []gate.Queue
		seen = map[gate.Queue]bool{}
		who  []*checkItem
	)
	for _, it := range items {
		if it.plan.Quiet || len(it.plan.Queues) == 0 {
			continue
		}
		who = append(who, it)
		for _, hq := range it.plan.Queues {
			if !seen[hq.Queue] {
				seen[hq.Queue] = true
				qs = append(qs, hq.Queue)
			}
		}
	}
	if len(qs) == 0 {
		return
	}
	done := startTimer(c.o.Metrics, "audit", "waiting")
	waiting, err := c.o.Holds.Waiting(ctx, qs)
	done()
	if err != nil {
		err = c.failed("audit", "waiting", err)
	}
	for _, it := range who {
		if err != nil {
			it.fail(err)
			continue
		}
		for _, hq := range it.plan.Queues {
			if waiting[hq.Queue] {
				it.d, it.decided = gate.Queued(it.plan, hq, now), true
				break
			}
		}
	}
}

// admitAll asks the window store about the batch's checks that need it, in
// one call; with the store down, each check of a scene that says so fails
// open, and the others fail.
func (c *Checker) admitAll(ctx context.Context, items []*checkItem) {
	var (
		reqs []gate.AdmitRequest
		who  []*checkItem
	)
	for _, it := range items {
		if it.out || it.decided || it.plan.Request == nil {
			continue
		}
		r := *it.plan.Request
		r.DryRun, r.WantTightest = it.req.DryRun, true // only the check API reads Tightest
		reqs, who = append(reqs, r), append(who, it)
	}
	if len(reqs) == 0 {
		return
	}
	done := startTimer(c.o.Metrics, "window", "admit")
	rs, errs := c.admitEach(ctx, reqs)
	done()
	now := c.o.Now()
	for i, it := range who {
		if err := errs[i]; err != nil {
			if !errors.Is(err, gate.ErrInvalidRequest) {
				if d, ok := gate.FailOpen(it.plan, now); ok {
					countFailure(c.o.Metrics, "window", "admit")
					it.d, it.decided = d, true
					continue
				}
			}
			it.fail(c.failed("window", "admit", err))
			continue
		}
		it.res = rs[i]
		it.counted = it.res.Admitted && !it.res.Duplicate && !it.req.DryRun
	}
}

// admitEach is admit with an error for each request: the call's, or, when
// the store refuses the call as invalid, each request's own, the call
// split in halves down to the requests it refuses (bisect), so that one
// request the store cannot take does not fail its batch.
func (c *Checker) admitEach(ctx context.Context, reqs []gate.AdmitRequest) ([]gate.AdmitResult, []error) {
	rs := make([]gate.AdmitResult, len(reqs))
	errs := make([]error, len(reqs))
	at := make([]int, len(reqs))
	for i := range at {
		at[i] = i
	}
	// bisect's parts are runs of at: part holds reqs[part[0]:][:len(part)].
	bisect(at, func(part []int) error {
		got, err := admit(ctx, c.o.Store, reqs[part[0]:][:len(part)])
		switch {
		case errors.Is(err, gate.ErrInvalidRequest):
			return err
		case err != nil:
			for _, i := range part {
				errs[i] = err
			}
		default:
			copy(rs[part[0]:], got)
		}
		return nil
	}, func(i int, err error) { errs[i] = err })
	return rs, errs
}

// failed counts a failed call and returns its error, wrapping
// gate.ErrUnavailable and ErrCheckStore; a store's permanent refusal (an
// id it cannot hold) is an *gate.InvalidError instead: asked again, the
// check fails again.
func (c *Checker) failed(store, op string, err error) error {
	countFailure(c.o.Metrics, store, op)
	if refusedForGood(err) {
		return refusedBy(store, err)
	}
	if !errors.Is(err, gate.ErrUnavailable) {
		err = fmt.Errorf("%w: %w", gate.ErrUnavailable, err)
	}
	return fmt.Errorf("%s %s: %w: %w", store, op, ErrCheckStore, err)
}

// refusedForGood reports whether a store refused a call for good: data it
// cannot hold (gate.ErrPermanent) or a request no store can decide
// (gate.ErrInvalidRequest). Asked again, it refuses again.
func refusedForGood(err error) bool {
	return errors.Is(err, gate.ErrPermanent) || errors.Is(err, gate.ErrInvalidRequest)
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
