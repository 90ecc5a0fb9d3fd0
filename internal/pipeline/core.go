package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/antifatigue/gate/internal/ratelog"
)

// core is the one decision core every front end calls: decide (plan, wait
// behind held messages, admit, resolve), then commit (and forget on
// conflict). Its ports are wrapped at wiring time (instrument): the stages
// call them plainly.
type core struct {
	store gate.WindowStore
	audit gate.AuditLog
	holds gate.HoldStore       // optional: nothing waits behind held messages
	prefs gate.PreferenceStore // optional: no preferences apply
	m     *metrics.Metrics     // optional
	log   *slog.Logger
	now   func() time.Time
	// prefsFailing is the run of failed preference lookups under way.
	prefsFailing ratelog.Run
	// bodyMismatches is the run of messages logged by bodyMismatch.
	bodyMismatches ratelog.Run
}

// decide decides every item still to decide, on rules, the one core
// function the message path (Pipeline.Start) and the check path
// (Checker.decideBatch) both call: plan, wait behind held messages, admit,
// resolve. busy reports whether a queue holds messages the hold store does
// not know yet (a batch in flight); nil when none can.
//
// Should the hold store fail to say which queues hold messages, messages
// and checks part: decide returns the error for messages, deciding
// nothing (the front end fails the batch, to be retried: its order must
// hold), while the checks that waited fail with it and the others are
// decided.
func (c *core) decide(ctx context.Context, k kind, rules *gate.RuleSet, items []item, busy func(gate.Queue) bool) error {
	now := c.now()
	c.plan(ctx, rules, items, now)
	if err := c.wait(ctx, k, items, now, busy); err != nil {
		if k == messages {
			return err
		}
		err = k.unavailable("audit", "waiting", err)
		for i := range items {
			if it := &items[i]; it.waits() {
				it.fail(err)
			}
		}
	}
	c.admit(ctx, k, items)
	c.resolve(rules, items)
	return nil
}

// unavailable is the verdict of k's item on a store that failed it (a
// retry may succeed): it wraps gate.ErrUnavailable, and for a check
// ErrCheckStore too. For a check, a store's refusal for good (an id it
// cannot hold) is an *gate.InvalidError instead: asked again, the check
// fails again.
func (k kind) unavailable(store, op string, err error) error {
	if k != checks {
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

// refused is how k's item takes a store's refusal for good of it alone: a
// message is parked (recorded as invalid, to the dead letter), a check
// fails alone with the store's reason.
func (k kind) refused(it *item, store string, why error) {
	if k == checks {
		it.fail(refusedBy(store, why))
		return
	}
	it.park(refusedBy(store, why))
}
