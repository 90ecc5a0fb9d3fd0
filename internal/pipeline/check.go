package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// Checker answers synchronous checks (POST /v1/check, gate.check): the
// check front end of the core. It decides a message that is not sent, as
// the pipeline would decide it now, and records an admission in the
// windows and the ledger the pipeline uses, so that checks and messages on
// gate.in share every limit. It is safe for concurrent use.
type Checker struct {
	o    CheckOptions
	core core
	q    checkQueue
	// withClaims: the audit log stores each answer with its claim
	// (gate.AnswersWithClaims), so no save follows the commit.
	withClaims bool
}

// ErrCheckStore marks a check the gate could not answer because a store did
// not (the window store, for a scene that does not fail open, or the audit
// store): the caller may ask again with the same id. It always comes with
// gate.ErrUnavailable.
var ErrCheckStore = errors.New("check could not be answered")

// Check answers the check whose JSON is body. Its errors are an
// *gate.InvalidError for a body that is not a valid check (the caller must
// correct it), a *gate.ReusedError (ClassConflict, 409) for an id first
// used for another scene or recipient, whose check takes no slot, or wrap
// gate.ErrUnavailable when a store could not answer
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
		if prev, ok, err := c.storedAnswer(ctx, req.Message); err != nil || ok {
			return prev, err
		}
	}
	return c.await(ctx, c.enqueue(ctx, req))
}

// storedAnswer looks m's id up among the stored answers and in the ledger: a
// check of an id decided before gets that decision back, or 409 when it was
// decided for another scene or recipient. An id in the ledger without an
// answer is a message decided on gate.in, or a check storing its answer
// now, which first waits for a moment.
func (c *Checker) storedAnswer(ctx context.Context, m gate.Message) (gate.CheckAnswer, bool, error) {
	a, found, prior, err := c.o.Answers.Answer(ctx, m.ID)
	reused := reusedBy(prior, m)
	switch {
	case err != nil:
		return gate.CheckAnswer{}, false, checkPolicy.unavailable("audit", "check_answer", err)
	case reused != nil:
		return gate.CheckAnswer{}, true, reused
	case found:
		return a.AsDuplicate(), true, nil
	case prior.Outcome != "":
		// A check that claimed the id a moment ago stores its answer
		// right after: waited for, before the ledger's outcome stands in.
		a, err := c.first(ctx, m, 1)
		return a, true, err
	}
	return gate.CheckAnswer{}, false, nil
}

// firstTries bounds the wait for the answer of a check that claimed an id in
// the ledger a moment before this one: it stores its answer right after its
// commit.
const firstTries = 5

// first is the answer of the check (or message) that claimed m's id in the
// ledger first, or a *gate.ReusedError when that claim was for another
// scene or recipient. The answer of a concurrent check is stored just after its
// claim, so it is looked for a few times (firstTries in all) before the
// ledger's outcome stands in for it. tried is how many of those looks the
// caller has just made (0 or 1): one that has just looked starts by
// waiting.
func (c *Checker) first(ctx context.Context, m gate.Message, tried int) (gate.CheckAnswer, error) {
	for try := tried + 1; ; try++ {
		if try > 1 {
			t := time.NewTimer(time.Duration(try-1) * 10 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				c.core.failedCall("audit", "check_answer")
				return gate.CheckAnswer{}, checkPolicy.unavailable("audit", "check_answer", ctx.Err())
			case <-t.C:
			}
		}
		a, found, prior, err := c.o.Answers.Answer(ctx, m.ID)
		reused := reusedBy(prior, m)
		switch {
		case err != nil:
			return gate.CheckAnswer{}, checkPolicy.unavailable("audit", "check_answer", err)
		case reused != nil:
			return gate.CheckAnswer{}, reused
		case found:
			return a.AsDuplicate(), nil
		case try >= firstTries && prior.Outcome != "":
			return gate.PriorAnswer(prior), nil
		case try >= firstTries:
			c.core.failedCall("audit", "check_answer")
			return gate.CheckAnswer{}, checkPolicy.unavailable("audit", "check_answer",
				fmt.Errorf("id %q: the ledger refused it as known, and has no row for it", m.ID))
		}
	}
}

// count counts an answered check by decision, or a failed one as "error",
// "invalid" or "reused" (a reused id, also counted in gate_reused_ids_total).
func (c *Checker) count(a gate.CheckAnswer, err error) {
	if c.o.Metrics == nil {
		return
	}
	decision := string(a.Decision)
	switch {
	case gate.IsInvalid(err):
		decision = "invalid"
	case errors.Is(err, gate.ErrReusedID):
		decision = "reused"
		c.o.Metrics.ReusedIDs.WithLabelValues("check").Inc()
	case err != nil:
		decision = "error"
	}
	dry := "false"
	if a.DryRun {
		dry = "true"
	}
	c.o.Metrics.Checks.WithLabelValues(decision, dry).Inc()
}
