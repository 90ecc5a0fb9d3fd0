package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// maxCheckBatch bounds the checks one batch decides: enough to carry
// thousands of checks a second in a few round trips each, few enough that
// one batch's statements stay small.
const maxCheckBatch = 256

// checkBatchTimeout bounds a batch's store calls. A batch decides the checks
// of many callers, so it runs on a context of its own, cancelled by none of
// them: a caller that gives up does not fail the others.
const checkBatchTimeout = 10 * time.Second

// checkQueue holds the checks waiting for a batch. There is no timer: the
// first check to arrive while no batch runs starts a drain goroutine, which
// decides everything pending (at most maxCheckBatch at a time) and loops
// until nothing is, then exits. A batch is thus what queued up while the
// previous one ran: one check alone goes at once, and under load the
// batches grow with it.
type checkQueue struct {
	mu       sync.Mutex
	pending  []*checkItem
	draining int // drain goroutines running
}

// A second drain goroutine starts, so that two batches overlap (one waits
// on the window store while the other commits), once overlapAt checks wait
// behind the one running: under load, where a batch's three round trips
// bound how many checks a second one drain decides, not below, where
// batches of one or two would cost the database a transaction each. Two
// batches holding one id meet at the commit's claim, as two gates do.
const (
	checkBatchesInFlight = 2
	overlapAt            = 32
)

// checkItem is one check in the queue, then in a batch, until it is
// answered; in a batch, the core decides it as an item.
type checkItem struct {
	req gate.CheckRequest
	// gone is closed when the caller has stopped waiting: a batch that has
	// not started on the check yet leaves it out.
	gone <-chan struct{}
	done chan struct{}
	once sync.Once
	a    gate.CheckAnswer
	err  error
	// twins are the later non-dry checks of the same id, scene and
	// recipient in the same batch: they get this check's answer, marked
	// duplicate, and take no slot.
	twins []*checkItem
}

// resolve answers the check and its twins, once.
func (it *checkItem) resolve(a gate.CheckAnswer, err error) {
	it.once.Do(func() {
		it.a, it.err = a, err
		close(it.done)
		for _, t := range it.twins {
			ta := a
			if err == nil {
				ta = a.AsDuplicate()
			}
			t.resolve(ta, err)
		}
	})
}

// answered reports whether the check has its answer.
func (it *checkItem) answered() bool {
	select {
	case <-it.done:
		return true
	default:
		return false
	}
}

// enqueue queues req for a batch, starting the drain goroutine unless one
// runs.
func (c *Checker) enqueue(ctx context.Context, req gate.CheckRequest) *checkItem {
	it := &checkItem{req: req, gone: ctx.Done(), done: make(chan struct{})}
	c.q.mu.Lock()
	c.q.pending = append(c.q.pending, it)
	start := c.q.draining == 0 || c.q.draining < checkBatchesInFlight && len(c.q.pending) >= overlapAt
	if start {
		c.q.draining++
	}
	c.q.mu.Unlock()
	if start {
		go c.drain()
	}
	return it
}

// await waits for it's answer, or for ctx to end first.
func (c *Checker) await(ctx context.Context, it *checkItem) (gate.CheckAnswer, error) {
	select {
	case <-it.done:
		return it.a, it.err
	default:
	}
	select {
	case <-it.done:
		return it.a, it.err
	case <-ctx.Done():
		return gate.CheckAnswer{}, fmt.Errorf("check %q: %w: %w: %w", it.req.Message.ID, ErrCheckStore, gate.ErrUnavailable, ctx.Err())
	}
}

// drain decides the pending checks, a batch at a time, until none is left.
func (c *Checker) drain() {
	for {
		c.q.mu.Lock()
		n := min(len(c.q.pending), maxCheckBatch)
		if n == 0 {
			c.q.draining--
			c.q.mu.Unlock()
			return
		}
		batch := c.q.pending[:n:n]
		if c.q.pending = c.q.pending[n:]; len(c.q.pending) == 0 {
			c.q.pending = nil
		}
		c.q.mu.Unlock()
		c.decideBatch(batch)
	}
}

// decideBatch decides a batch of checks through the core, as Check decides
// one, with one call to each store: one preferences lookup, one look at
// the hold queues, one Admit (dry runs in it with DryRun set), one Commit
// of the non-dry checks' records, with their answers when the audit log
// keeps them (gate.AnswersWithClaims), else followed by one save of the
// answers. A panic (a bug) fails the batch's checks, not the gate.
func (c *Checker) decideBatch(batch []*checkItem) {
	ctx, cancel := context.WithTimeout(context.Background(), checkBatchTimeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			recovered(c.o.Log, c.o.Metrics, "check", "deciding a batch of checks panicked", v, "checks", len(batch))
			for _, it := range batch {
				it.resolve(gate.CheckAnswer{}, fmt.Errorf("check: panic: %v", v))
			}
		}
	}()
	lead, later := leaders(batch)
	c.requeue(later)
	left := c.storedAnswers(ctx, lead)
	rules := c.o.Rules.Current()
	items := make([]item, len(left))
	for i, ck := range left {
		items[i] = item{key: ck.req.Message.ID, msg: ck.req.Message, dryRun: ck.req.DryRun}
	}
	c.core.decide(ctx, checkPolicy, rules, items, nil)
	answers := make([]gate.CheckAnswer, len(items))
	for i := range items {
		if it := &items[i]; it.state == decided {
			answers[i] = gate.AnswerOf(it.dec, it.res, rules.Version)
			switch {
			case it.dryRun:
				answers[i].DryRun = true
				left[i].resolve(answers[i], nil)
			case c.withClaims:
				it.answer = &answers[i]
			}
		}
	}
	c.core.commit(ctx, checkPolicy, rules, items)
	var claimed []int
	for i := range items {
		switch it := &items[i]; it.state {
		case committed:
			claimed = append(claimed, i)
		case conflict:
			var taken []gate.AdmitRequest
			if it.slot == counted {
				taken = append(taken, *it.plan.Request)
			}
			go c.answerFirst(left[i], 0, taken)
		case failed:
			left[i].resolve(gate.CheckAnswer{}, it.err)
		}
	}
	c.save(ctx, left, answers, claimed)
}

// leaders is the batch without the checks whose callers are gone, and with
// each later non-dry check of an id folded into the first one's twins. A
// later check that uses the id for another scene or recipient is no twin:
// it is returned in later, for the next batch, where it meets the id's
// first use in the ledger (a reused id) or, should the first fail, decides
// the id itself.
func leaders(batch []*checkItem) (items, later []*checkItem) {
	items = make([]*checkItem, 0, len(batch))
	first := make(map[string]*checkItem, len(batch))
	for _, it := range batch {
		select {
		case <-it.gone:
			it.resolve(gate.CheckAnswer{}, fmt.Errorf("%w: %w: the caller stopped waiting", ErrCheckStore, gate.ErrUnavailable))
			continue
		default:
		}
		if !it.req.DryRun {
			if f, ok := first[it.req.Message.ID]; ok {
				if gate.Reuses(gate.UseOf(f.req.Message, time.Time{}), it.req.Message) != nil {
					later = append(later, it)
				} else {
					f.twins = append(f.twins, it)
				}
				continue
			}
			first[it.req.Message.ID] = it
		}
		items = append(items, it)
	}
	return items, later
}

// requeue puts checks back at the head of the queue, for the next batch,
// which the drain loop under way takes.
func (c *Checker) requeue(its []*checkItem) {
	if len(its) == 0 {
		return
	}
	c.q.mu.Lock()
	c.q.pending = append(its, c.q.pending...)
	c.q.mu.Unlock()
}

// storedAnswers looks the batch's ids up among the stored answers and in the
// ledger, in one call, when the store can (gate.CheckAnswersBatch; Check
// looked each up itself otherwise), as storedAnswer does for one: a check of an
// id decided before gets that decision back. An id the store refuses for
// good fails its check alone. It returns the checks left to decide.
func (c *Checker) storedAnswers(ctx context.Context, items []*checkItem) []*checkItem {
	b, ok := c.o.Answers.(gate.CheckAnswersBatch)
	if !ok || len(items) == 0 {
		return items
	}
	found := make(map[string]gate.StoredAnswer, len(items))
	bisect(items, func(part []*checkItem) error {
		ids := make([]string, len(part))
		for i, it := range part {
			ids[i] = it.req.Message.ID
		}
		m, err := b.Answers(ctx, ids)
		switch {
		case refusedForGood(err):
			return err
		case err != nil:
			err = checkPolicy.unavailable("audit", "check_answer", err)
			for _, it := range part {
				it.resolve(gate.CheckAnswer{}, err)
			}
		}
		maps.Copy(found, m)
		return nil
	}, func(it *checkItem, err error) {
		it.resolve(gate.CheckAnswer{}, checkPolicy.unavailable("audit", "check_answer", err))
	})
	left := items[:0]
	for _, it := range items {
		sa := found[it.req.Message.ID]
		reused := reusedBy(sa.Prior, it.req.Message)
		switch {
		case it.answered():
		case reused != nil:
			it.resolve(gate.CheckAnswer{}, reused)
		case sa.Found:
			it.resolve(sa.Answer.AsDuplicate(), nil)
		case sa.Prior.Outcome != "":
			// A check that claimed the id a moment ago stores its answer
			// right after: waited for, on its own.
			go c.answerFirst(it, 1, nil)
		default:
			left = append(left, it)
		}
	}
	return left
}

// answerFirst answers a check whose id was claimed first by another check (or a
// message): with the first claim's answer, or 409 when the first claim was
// for another scene or recipient. A window counts an id once,
// whichever ask recorded it: when the first was admitted, the slot this
// check recorded (taken) is its slot too, and stays; otherwise it is taken
// back (see sharesSlot). tried is as first's: 1 when the caller has just
// looked the answer up.
func (c *Checker) answerFirst(it *checkItem, tried int, taken []gate.AdmitRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), checkBatchTimeout)
	defer cancel()
	first, err := c.first(ctx, it.req.Message, tried)
	if err != nil || !first.Admitted {
		c.core.forgetLogged(ctx, taken, "a check's admission taken back stays counted in its windows")
	}
	it.resolve(first, err)
}

// save stores the answers of the checks that claimed their ids, in one call
// when the store can (gate.CheckAnswersBatch), then answers them; when the
// commit stored them with the claims (withClaims), it only answers. A
// failure to store leaves the ledger's outcome, which a second ask answers
// with (PriorAnswer): the decisions stand either way.
func (c *Checker) save(ctx context.Context, left []*checkItem, answers []gate.CheckAnswer, claimed []int) {
	if len(claimed) == 0 {
		return
	}
	if c.withClaims { // committed with the claims
		for _, i := range claimed {
			left[i].resolve(answers[i], nil)
		}
		return
	}
	byID := make(map[string]gate.CheckAnswer, len(claimed))
	for _, i := range claimed {
		byID[left[i].req.Message.ID] = answers[i]
	}
	var err error
	if s, ok := c.o.Answers.(gate.CheckAnswersBatch); ok {
		err = s.SaveAll(ctx, byID)
	} else {
		for id, a := range byID {
			err = errors.Join(err, c.o.Answers.Save(ctx, id, a))
		}
	}
	if err != nil {
		c.o.Log.Warn("storing checks' answers failed; a second ask of their ids gets the ledger's outcome", "checks", len(byID), "err", err)
	}
	for _, i := range claimed {
		left[i].resolve(answers[i], nil)
	}
}
