package pipeline

import (
	"errors"
	"fmt"

	"github.com/antifatigue/gate/internal/gate"
)

// policy is what a front end asks of the core where front ends differ.
// The stages ask the policy of the batch in hand, never which front end
// called them: a new front end (an explanation) or a new stage (warnings,
// cancel) brings a value or a field, not a branch in every stage.
type policy struct {
	// name names the front end in logs.
	name string
	// answered: a caller waits for each item's answer (a check). A store's
	// refusal for good fails the item alone with the store's words (a bad
	// request; nothing recorded), where otherwise the item is parked
	// (recorded as invalid, to the dead letter); an admission whose record
	// did not become durable is taken back, as no answer stands on it; and
	// a claim found in the ledger at commit is left in state conflict, for
	// the front end to answer with the first claim's answer. Store failures
	// wrap ErrCheckStore too.
	answered bool
	// tightest: the window store reports the tightest limit, for the
	// answer.
	tightest bool
	// failsOpen: an item the window store could not answer takes its
	// scene's on_store_error (gate.FailOpen). Without it the item fails: a
	// held message stays held.
	failsOpen bool
	// ordered: the batch's order must hold, so a hold store that cannot say
	// which queues hold messages fails the whole batch, deciding nothing.
	// Without it only the items that waited fail.
	ordered bool
	// record is the audit record of a decided item that is no dry run.
	// Nil for a front end that commits nothing through the core.
	record func(it *item, rules *gate.RuleSet) gate.Record
}

var (
	// messagePolicy is gate.in's: a message a store refuses for good is
	// parked, one a store fails is retried in order.
	messagePolicy = &policy{name: "message", failsOpen: true, ordered: true, record: messageRecord}
	// checkPolicy is the check API's (POST /v1/check, gate.check).
	checkPolicy = &policy{name: "check", answered: true, tightest: true, failsOpen: true, record: checkRecord}
	// releasePolicy is a Releaser round's, for the held messages (and
	// digests) whose windows it asks: a store that fails fails the round,
	// which is rolled back, and the messages stay held, as they were.
	releasePolicy = &policy{name: "release"}
)

// messageRecord is the audit record of a decided message.
func messageRecord(it *item, rules *gate.RuleSet) gate.Record {
	rec := gate.RecordOf(it.key, it.msg, it.dec, it.d.Seq, rules.Version)
	rec.BodyHash = gate.BodyHash(it.msg.Raw)
	return rec
}

// checkRecord is the audit record of a decided check, with its answer when
// the audit log keeps answers (gate.AnswersWithClaims).
func checkRecord(it *item, rules *gate.RuleSet) gate.Record {
	rec := gate.CheckRecord(it.msg, it.dec, rules.Version)
	rec.Answer = it.answer
	return rec
}

// unavailable is the verdict of an item on a store that failed it (a retry
// may succeed): it wraps gate.ErrUnavailable, and for an answered item
// ErrCheckStore too. For an answered item, a store's refusal for good (an
// id it cannot hold) is an *gate.InvalidError instead: asked again, it
// fails again.
func (p *policy) unavailable(store, op string, err error) error {
	if !p.answered {
		if errors.Is(err, gate.ErrUnavailable) {
			return err
		}
		return fmt.Errorf("%s %s: %w: %w", store, op, gate.ErrUnavailable, err)
	}
	if refusedForGood(err) {
		return refusedBy(store, err)
	}
	if !errors.Is(err, gate.ErrUnavailable) {
		err = fmt.Errorf("%w: %w", gate.ErrUnavailable, err)
	}
	return fmt.Errorf("%s %s: %w: %w", store, op, ErrCheckStore, err)
}

// refused is how an item takes a store's refusal for good of it alone: an
// answered one fails alone with the store's reason, any other is parked
// (recorded as invalid, to the dead letter).
func (p *policy) refused(it *item, store string, why error) {
	if p.answered {
		it.fail(refusedBy(store, why))
		return
	}
	it.park(refusedBy(store, why))
}

// refusedForGood reports whether a store refused a call for good: data it
// cannot hold (gate.ErrPermanent) or a request no store can decide
// (gate.ErrInvalidRequest). Asked again, it refuses again.
func refusedForGood(err error) bool {
	return errors.Is(err, gate.ErrPermanent) || errors.Is(err, gate.ErrInvalidRequest)
}

// maxReasonBytes bounds the store's words quoted in a refusal's reason.
const maxReasonBytes = 400

// refusedBy is the verdict on a message the store named refused for good
// with why. The reason becomes the dead letter's Gate-Error header: one line
// of valid UTF-8, as a header needs, however the store phrased it.
func refusedBy(store string, why error) *gate.InvalidError {
	return &gate.InvalidError{Reason: "the " + store + " store refused it: " + gate.OneLine(why.Error(), maxReasonBytes)}
}
