package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/antifatigue/gate/internal/gate"
)

// pending is a record on its way to the audit log, with the index of the
// item it is for.
type pending struct {
	rec gate.Record
	i   int
}

// commit writes the audit rows and counters of every message whose effect
// is done, in one transaction. Should the audit log refuse the batch for
// good (gate.ErrPermanent: data it cannot hold), it commits the halves of
// the batch in turn, down to the records refused on their own, and parks
// their messages: one message the store cannot hold must neither hold back
// the rest of its batch nor be retried forever.
func (p *Pipeline) commit(ctx context.Context, rules *gate.RuleSet, items []item) {
	var batch []pending
	for i := range items {
		it := &items[i]
		switch {
		case it.err != nil || it.twin >= 0 || it.known():
		case it.invalid != nil:
			batch = append(batch, pending{gate.Record{Key: it.key, Scene: it.msg.Scene, Outcome: gate.OutcomeInvalid, At: p.o.Now()}, i})
		case it.decided:
			batch = append(batch, pending{gate.RecordOf(it.key, it.msg, it.dec, it.d.Seq, rules.Version), i})
		}
	}
	if len(batch) == 0 {
		return
	}
	known, refused := p.commitRecords(ctx, items, batch)
	var forget []gate.AdmitRequest
	if len(known) > 0 {
		forget = p.decidedBefore(ctx, items, known)
	}
	if len(refused) > 0 {
		forget = append(forget, p.park(ctx, items, refused)...)
	}
	p.forget(ctx, forget)
}

// refusal is a record the audit log refused on its own, and why.
type refusal struct {
	pending
	why error
}

// commitRecords commits batch, in halves while the audit log refuses a part
// for good. It returns the keys it found decided before and the records
// refused on their own; a part that meets a transient error fails its items
// with it, to be retried.
func (p *Pipeline) commitRecords(ctx context.Context, items []item, batch []pending) (known []string, refused []refusal) {
	bisect(batch, func(part []pending) error {
		recs := make([]gate.Record, len(part))
		for k, r := range part {
			recs[k] = r.rec
		}
		done := p.timer("audit", "commit")
		k, err := p.o.Audit.Commit(ctx, recs)
		done()
		switch {
		case err == nil:
			known = append(known, k...)
		case errors.Is(err, gate.ErrPermanent):
			p.failedCall("audit", "commit")
			return err
		default:
			err = p.transient("audit", "commit", err)
			for _, r := range part {
				items[r.i].err = err
			}
		}
		return nil
	}, func(r pending, why error) { refused = append(refused, refusal{r, why}) })
	return known, refused
}

// bisect calls try on s and, while try refuses a part of s for good (a
// non-nil error), on each half of that part in turn, down to single
// elements, which it hands to refused with try's error; try handles every
// other outcome itself and returns nil. With k elements refused among n,
// that is at most 2k·log2(n)+1 calls; one when none is.
func bisect[T any](s []T, try func([]T) error, refused func(T, error)) {
	if len(s) == 0 {
		return
	}
	err := try(s)
	switch {
	case err == nil:
	case len(s) == 1:
		refused(s[0], err)
	default:
		bisect(s[:len(s)/2], try, refused)
		bisect(s[len(s)/2:], try, refused)
	}
}

// decided looks keys up in the ledger. A key the audit log refuses for good
// is one it could never have committed: taken as never decided, its message
// is decided, and the commit refuses it again and parks it. Any other error
// fails the lookup.
func (p *Pipeline) decided(ctx context.Context, keys []string) (map[string]gate.Prior, error) {
	known := make(map[string]gate.Prior, len(keys))
	err := isolate(p, "audit", "decided", gate.ErrPermanent, keys, func(part []string) error {
		m, err := p.o.Audit.Decided(ctx, part)
		maps.Copy(known, m)
		return err
	}, func(string, error) {})
	return known, err
}

// isolate times and calls call on s, in halves while it fails with an error
// wrapping refusal (see bisect), and hands the elements refused on their
// own to refused. It stops at the first other error and returns it: the
// store is down, and the calls left would fail the same way.
func isolate[T any](p *Pipeline, store, op string, refusal error, s []T, call func([]T) error, refused func(T, error)) error {
	var failed error
	bisect(s, func(part []T) error {
		if failed != nil {
			return nil
		}
		done := p.timer(store, op)
		err := call(part)
		done()
		switch {
		case err == nil:
		case errors.Is(err, refusal):
			p.failedCall(store, op)
			return err
		default:
			failed = err
		}
		return nil
	}, refused)
	return failed
}

// park gives the message of each record the audit log refused on its own a
// verdict the transport makes terminal: an *gate.InvalidError, which sends
// it to the dead letter with the store's reason. Retried, it would be
// refused again, forever. It is still counted once, as invalid, under its
// stream sequence (the key the store refused may be the very reason), when
// the store takes that and the transport gave a sequence; should that fail
// transiently, the message is retried, to be refused and counted then (the
// sequence key counts it once). park returns the
// admissions of those messages that this batch counted, to be taken out of
// their windows again.
func (p *Pipeline) park(ctx context.Context, items []item, refused []refusal) (forget []gate.AdmitRequest) {
	var counts []pending
	now := p.o.Now()
	for _, r := range refused {
		it := &items[r.i]
		if it.counted {
			forget = append(forget, *it.plan.Request)
		}
		if it.invalid == nil {
			it.invalid = refusedBy("audit", r.why)
			it.decided, it.dec = false, gate.Decision{}
		}
		it.err = it.invalid
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
	_, again := p.commitRecords(ctx, items, counts)
	for _, r := range again {
		p.o.Log.Warn("a message the audit store refused is parked uncounted: it refused its count too",
			"seq", items[r.i].d.Seq, "err", r.why)
	}
	return forget
}

// decidedBefore handles the ids the commit found in the ledger already: a
// producer published them again. Each takes its first outcome back, and an
// admission this batch counted is returned, to be taken out of the window.
// Should the lookup fail, the message is retried (its redelivery is looked
// up first).
func (p *Pipeline) decidedBefore(ctx context.Context, items []item, known []string) (forget []gate.AdmitRequest) {
	prior, err := p.o.Audit.Decided(ctx, known)
	if err != nil {
		err = p.transient("audit", "decided", err)
	}
	byKey := make(map[string]bool, len(known))
	for _, k := range known {
		byKey[k] = true
	}
	for i := range items {
		it := &items[i]
		if it.err != nil || it.twin >= 0 || !byKey[it.key] {
			continue
		}
		pr, ok := prior[it.key]
		switch {
		case err != nil:
			it.err = err
			continue
		case !ok: // committed by a transaction this one did not see, and gone again
			it.err = p.transient("audit", "decided", fmt.Errorf("id %q: ledger row not found after the claim conflicted", it.key))
			continue
		}
		if it.counted && !sharesSlot(pr, it.dec) {
			forget = append(forget, *it.plan.Request)
		}
		it.prior, it.decided = pr, false
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
// admission of an id decided before.
func sharesSlot(prior gate.Prior, d gate.Decision) bool {
	return prior.Outcome == gate.OutcomeForward && !d.At.IsZero() && !prior.At.Before(d.At)
}

// forget takes admissions this batch counted out of their windows again;
// a failure is logged. A retry would not help: the message either keeps
// the outcome the ledger holds, which its redelivery finds before reaching
// the window, or is parked. The id then fills a place in its window until
// it slides out, which holds back more, never less.
func (p *Pipeline) forget(ctx context.Context, reqs []gate.AdmitRequest) {
	forget(ctx, p.o.Store, p.o.Metrics, p.o.Log, reqs, "admissions taken back stay counted in their windows")
}

// maxReasonBytes bounds the store's words quoted in a refusal's reason.
const maxReasonBytes = 400

// refusedBy is the verdict on a message the store named refused for good
// with why. The reason becomes the dead letter's Gate-Error header: one line
// of valid UTF-8, as a header needs, however the store phrased it.
func refusedBy(store string, why error) *gate.InvalidError {
	return &gate.InvalidError{Reason: "the " + store + " store refused it: " + gate.OneLine(why.Error(), maxReasonBytes)}
}
