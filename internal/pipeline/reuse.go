package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	_, refused, _ := c.commitRecords(ctx, messagePolicy, items, recs)
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

// An id seen again for the same scene and recipient is a duplicate, and
// keeps its first outcome: a producer's retry, the same body, or a second
// message under a known id, another body, which takes the first's outcome
// and is never forwarded as itself. JetStream drops the second unseen when
// it comes within GATE_IN's duplicate window; past it the gate meets it,
// cannot tell which body was meant, and says so: bodyMismatch counts it
// and logs both. Each place a duplicate is found compares: a twin of the
// same batch (twinBodies), a prior the ledger holds, by the body's hash it
// keeps (priorBody, from Pipeline.priors and core.conflicts).

// twinBodies reports each twin of items, a later message of a key in the
// batch for the same scene and recipient as its first, whose body differs
// from its first's.
func (c *core) twinBodies(items []item) {
	for i := range items {
		it := &items[i]
		if it.state != twin || it.err != nil {
			continue
		}
		first := &items[it.twin]
		if first.state == invalid || bytes.Equal(first.msg.Raw, it.msg.Raw) {
			continue
		}
		c.bodyMismatch(it, first.d.Seq, gate.BodyHash(first.msg.Raw))
	}
}

// priorBody reports message it, found decided before as pr for its scene
// and recipient, when the ledger's hash of the first body is not its own.
func (c *core) priorBody(it *item, pr gate.Prior) {
	if gate.BodyDiffers(pr, it.msg) {
		c.bodyMismatch(it, 0, pr.BodyHash)
	}
}

// bodyMismatch counts message it, a duplicate of an id whose first message
// had another body (its stream sequence firstSeq when known, else 0, and
// its BodyHash firstHash), in gate_duplicate_body_mismatch_total, and logs
// both: the first of them at once, then one a minute, as a producer that
// reuses ids for new content would flood the log.
func (c *core) bodyMismatch(it *item, firstSeq uint64, firstHash int64) {
	if c.m != nil {
		c.m.DuplicateBodyMismatch.Inc()
	}
	if log, _ := c.bodyMismatches.Failed(time.Now()); !log {
		return
	}
	attrs := []any{"id", it.msg.ID, "seq", it.d.Seq, "body_hash", hashText(gate.BodyHash(it.msg.Raw)), "first_body_hash", hashText(firstHash)}
	if firstSeq != 0 {
		attrs = append(attrs, "first_seq", firstSeq)
	}
	c.log.Warn("a message reuses a decided id with another body: it takes the first's outcome, not its own "+
		"(logged once a minute; each is counted in gate_duplicate_body_mismatch_total)", attrs...)
}

// hashText is a BodyHash as 16 hex digits.
func hashText(h int64) string { return fmt.Sprintf("%016x", uint64(h)) }
