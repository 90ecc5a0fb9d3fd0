package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/antifatigue/gate/internal/gate"
)

// pending is a record on its way to the audit log, with the index of the
// item it is for.
type pending struct {
	rec gate.Record
	i   int
}

// refusal is a record the audit log refused on its own, and why.
type refusal struct {
	pending
	why error
}

// commit makes the decisions of the batch durable: the ledger rows, audit
// rows and counters of every item decided (or found invalid) in it, in one
// transaction, the other half of the core after decide. A decided item
// becomes committed. Should the audit log refuse the batch for good
// (gate.ErrPermanent: data it cannot hold), it commits the halves of the
// batch in turn, down to the records refused on their own, which take the
// refusal: a message is parked (park), a check fails alone. One the store
// cannot hold must neither hold back the rest of its batch nor be retried
// forever. An item whose key the ledger holds already meets a conflict
// (forget on conflict): a message takes its first outcome back at once
// (conflicts); a check is left in state conflict for its front end, which
// waits for the first claim's answer. Admissions taken back are forgotten
// before commit returns.
func (c *core) commit(ctx context.Context, pol *policy, rules *gate.RuleSet, items []item) {
	var batch []pending
	now := c.now()
	for i := range items {
		it := &items[i]
		switch {
		case it.state == invalid:
			batch = append(batch, pending{invalidRecord(it, rules, now), i})
		case it.state == decided && !it.dryRun:
			batch = append(batch, pending{pol.record(it, rules), i})
		}
	}
	if len(batch) == 0 {
		return
	}
	known, refused, forget := c.commitRecords(ctx, pol, items, batch)
	if pol.answered {
		for _, r := range refused {
			it := &items[r.i]
			if it.slot == counted {
				forget = append(forget, *it.plan.Request)
			}
			it.fail(refusedBy("audit", r.why))
		}
	} else if len(refused) > 0 {
		forget = append(forget, c.park(ctx, items, refused)...)
	}
	if len(known) > 0 {
		forget = append(forget, c.conflicts(ctx, pol, rules, items, known)...)
	}
	for _, p := range batch {
		if it := &items[p.i]; it.state == decided && !it.dryRun {
			it.to(committed)
		}
	}
	c.forgetLogged(ctx, forget, "admissions taken back stay counted in their windows")
}

// commitRecords commits batch, in halves while the audit log refuses a part
// for good. It returns the keys it found decided before and the records
// refused on their own; a part that meets a transient error fails its items
// with it, to be retried, and a check's admission is returned, to be taken
// back: not durable, so not an answer. Unless the store lost sight of the
// commit (gate.ErrOutcomeUnknown): it may stand, answer and slot, so the
// slot stays, and the check asked again finds one or the other.
func (c *core) commitRecords(ctx context.Context, pol *policy, items []item, batch []pending) (known []string, refused []refusal, forget []gate.AdmitRequest) {
	bisect(batch, func(part []pending) error {
		recs := make([]gate.Record, len(part))
		for j, r := range part {
			recs[j] = r.rec
		}
		got, err := c.audit.Commit(ctx, recs)
		switch {
		case err == nil:
			known = append(known, got...)
		case refusedForGood(err):
			return err
		default:
			err = pol.unavailable("audit", "commit", err)
			for _, r := range part {
				it := &items[r.i]
				if pol.answered && it.slot == counted && !errors.Is(err, gate.ErrOutcomeUnknown) {
					forget = append(forget, *it.plan.Request)
				}
				it.fail(err)
			}
		}
		return nil
	}, func(r pending, why error) { refused = append(refused, refusal{r, why}) })
	return known, refused, forget
}

// park gives the message of each record the audit log refused on its own a
// verdict the transport makes terminal: an *gate.InvalidError, which sends
// it to the dead letter with the store's reason. Retried, it would be
// refused again, forever. It is still counted once, as invalid, under its
// stream sequence (the key the store refused may be the very reason), when
// the store takes that and the transport gave a sequence; should that fail
// transiently, the message is retried, to be refused and counted then (the
// sequence key counts it once). park returns the admissions of those
// messages that this batch counted, to be taken out of their windows
// again.
func (c *core) park(ctx context.Context, items []item, refused []refusal) (forget []gate.AdmitRequest) {
	var counts []pending
	now := c.now()
	for _, r := range refused {
		it := &items[r.i]
		if it.slot == counted {
			forget = append(forget, *it.plan.Request)
		}
		if it.state != invalid {
			it.park(refusedBy("audit", r.why))
		}
		if it.d.Seq == 0 {
			continue
		}
		scene := it.msg.Scene
		if gate.CheckName("scene", scene, gate.MaxSceneBytes) != nil {
			scene = ""
		}
		counts = append(counts, pending{gate.Record{Key: seqKey(it.d.Seq), Scene: scene, Outcome: gate.OutcomeInvalid, At: now}, r.i})
	}
	// Keys found known were counted by an earlier delivery of the message.
	_, again, _ := c.commitRecords(ctx, messagePolicy, items, counts)
	for _, r := range again {
		c.log.Warn("a message the audit store refused is parked uncounted: it refused its count too",
			"seq", items[r.i].d.Seq, "err", r.why)
	}
	return forget
}

// conflicts handles the keys the commit found in the ledger already. A
// check's is left in state conflict, for its front end to answer with the
// first claim's answer (Checker.answerFirst), or 409 for a reused id. A
// message's id was published again: by its producer, for the same scene
// and recipient, when it takes its first outcome back (state prior), and
// an admission this batch counted is returned, to be taken out of the
// window, unless it is the first claim's slot too (sharesSlot); for
// another scene or recipient, when it is parked as a reused id
// (reusedPriors). Should the lookup fail, the message is retried (its
// redelivery is looked up first).
func (c *core) conflicts(ctx context.Context, pol *policy, rules *gate.RuleSet, items []item, known []string) (forget []gate.AdmitRequest) {
	byKey := make(map[string]bool, len(known))
	for _, key := range known {
		byKey[key] = true
	}
	if pol.answered {
		for i := range items {
			if it := &items[i]; it.state == decided && byKey[it.key] {
				it.to(conflict)
			}
		}
		return nil
	}
	priors, err := c.audit.Decided(ctx, known)
	if err != nil {
		err = pol.unavailable("audit", "decided", err)
	} else {
		forget = c.reusedPriors(ctx, rules, items, priors)
	}
	for i := range items {
		it := &items[i]
		if (it.state != decided && it.state != invalid) || !byKey[it.key] {
			continue
		}
		pr, ok := priors[it.key]
		switch {
		case err != nil:
			it.fail(err)
			continue
		case !ok: // committed by a transaction this one did not see, and gone again
			c.failedCall("audit", "decided")
			it.fail(pol.unavailable("audit", "decided", fmt.Errorf("id %q: ledger row not found after the claim conflicted", it.key)))
			continue
		}
		if it.slot == counted && !sharesSlot(pr, it.dec) {
			forget = append(forget, *it.plan.Request)
		}
		if it.state != invalid {
			it.err = nil
			c.priorBody(it, pr)
		}
		it.takePrior(pr)
	}
	return forget
}

// sharesSlot reports whether the admission this batch counted for an id is
// also the slot of the decision the ledger holds for it: a forward decided
// no earlier than this batch's admission. That is a check of the same id
// (POST /v1/check, gate.check) asked while this message was being decided:
// its admission found the id this batch had just recorded (Duplicate, so it
// counted nothing of its own) and its commit claimed the ledger first. A
// window holds an id once, so taking this admission out would take the
// check's slot too. An earlier forward's admission had left the windows, or
// this batch's would have been a duplicate: that one is taken out, as any
// admission of an id decided before. A check that meets a conflict keeps
// its slot by the same rule, read from the first claim's answer
// (Checker.answerFirst).
func sharesSlot(prior gate.Prior, d gate.Decision) bool {
	return prior.Outcome == gate.OutcomeForward && !d.At.IsZero() && !prior.At.Before(d.At)
}

// forget takes admissions back out of their windows, through the window
// store's port (which counts a failure): the one forget stage of the core,
// for every front end. It returns the store's error; forgetLogged is
// forget for a front end that cannot retry it.
func (c *core) forget(ctx context.Context, reqs []gate.AdmitRequest) error {
	if len(reqs) == 0 {
		return nil
	}
	return c.store.Forget(ctx, reqs)
}

// forgetLogged is forget, a failure logged as what. A retry would not
// help: the message either keeps the outcome the ledger holds, which its
// redelivery finds before reaching the window, or is parked (or, for the
// Releaser, stays held). The id then fills a place in its window until it
// slides out, which holds back more, never less.
func (c *core) forgetLogged(ctx context.Context, reqs []gate.AdmitRequest, what string) {
	if err := c.forget(ctx, reqs); err != nil {
		c.log.Warn(what, "ids", len(reqs), "err", err)
	}
}
