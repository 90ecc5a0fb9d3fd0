package pipeline

import (
	"context"
	"errors"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// An id seen again with another scene or recipient than its first use is a
// reused id (gate.Reuses), never a duplicate: a message of another
// recipient must not take the first one's outcome unseen. Each place where
// a message's id meets an earlier use applies that one rule: a twin of the
// same batch (reusedTwins), a prior the ledger holds (Pipeline.priors), and
// a claim the commit finds taken (core.conflicts). A message that reuses an
// id is parked (reuse): the dead letter names the first use, and its record
// counts it as invalid and leaves an audit row for its recipient. A check
// that reuses an id answers 409 (Checker).

// reuse parks a message whose id e says was first used for another scene or
// recipient: it becomes invalid, keyed on its delivery (gate.ReusedKey,
// since the id is the first use's), with a verdict that names the first
// use. Its admission, if this batch counted one, is the caller's to take
// back.
func (it *item) reuse(e *gate.ReusedError) {
	it.park(e.Reused())
	it.key = gate.ReusedKey(it.d.Seq, it.msg.ID)
}

// reusedError is the *gate.ReusedError it was parked with, or nil.
func (it *item) reusedError() *gate.ReusedError {
	var e *gate.ReusedError
	if it.state == invalid && errors.As(it.err, &e) {
		return e
	}
	return nil
}

// invalidRecord is the ledger record of an invalid item: a message parked
// for a reused id is counted with an audit row for its recipient
// (gate.ReusedRecord); any other is counted alone.
func invalidRecord(it *item, rules *gate.RuleSet, now time.Time) gate.Record {
	if it.reusedError() != nil {
		return gate.ReusedRecord(it.msg, it.d.Seq, now, rules.Version)
	}
	return gate.Record{Key: it.key, Scene: it.msg.Scene, Outcome: gate.OutcomeInvalid, At: now}
}

// reusedTwins parks every twin whose message uses its first's id for
// another scene or recipient: a twin is a later delivery of the same key
// in the batch, decided by the first only when it is the same message. The
// first use is the first item's: what the ledger holds when it is a prior,
// or the use it was itself parked against. A twin of an item that failed
// follows it, to be retried with it.
func reusedTwins(items []item, now time.Time) {
	for i := range items {
		it := &items[i]
		if it.state != twin {
			continue
		}
		first := &items[it.twin]
		use := gate.UseOf(first.msg, now)
		switch first.state {
		case decided:
			if !first.dec.At.IsZero() {
				use.At = first.dec.At
			}
		case prior:
			use = first.prior.Use()
		case invalid:
			e := first.reusedError()
			if e == nil {
				continue
			}
			use = e.First
		default:
			continue
		}
		if e := gate.Reuses(use, it.msg); e != nil {
			it.reuse(e)
		}
	}
}

// reusedPriors parks each message whose conflict at the claim (prior, from
// the ledger) is a reused id, and commits its record: the claim that won
// was another scene's or recipient's. It returns the admissions those
// messages counted in this batch, to be taken out of their windows again:
// their first use holds the id.
func (c *core) reusedPriors(ctx context.Context, rules *gate.RuleSet, items []item, found map[string]gate.Prior) (forget []gate.AdmitRequest) {
	var recs []pending
	now := c.now()
	for i := range items {
		it := &items[i]
		pr, ok := found[it.key]
		if it.state != decided || !ok {
			continue
		}
		e := gate.Reuses(pr.Use(), it.msg)
		if e == nil {
			continue
		}
		if it.slot == counted {
			forget = append(forget, *it.plan.Request)
		}
		it.reuse(e)
		recs = append(recs, pending{invalidRecord(it, rules, now), i})
	}
	if len(recs) == 0 {
		return forget
	}
	// A key found known was counted by an earlier delivery of the message;
	// a transient failure fails the message, to be retried.
	_, refused, _ := c.commitRecords(ctx, messages, items, recs)
	for _, r := range refused {
		c.log.Warn("a message that reuses an id is parked uncounted: the audit store refused its record",
			"seq", items[r.i].d.Seq, "err", r.why)
	}
	return forget
}

// reusedBy is the verdict on a check of m whose id the ledger holds as p: a
// *gate.ReusedError (409) when p was decided for another scene or
// recipient, else nil. A check that asks it has taken no slot yet, or
// takes back the one it took (Checker.answerFirst).
func reusedBy(p gate.Prior, m gate.Message) error {
	if e := gate.Reuses(p.Use(), m); e != nil {
		return e
	}
	return nil
}
