package pipeline

import (
	"context"
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
	out   gate.Forwarder       // optional: the front end forwards nothing
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
func (c *core) decide(ctx context.Context, pol *policy, rules *gate.RuleSet, items []item, busy func(gate.Queue) bool) error {
	now := c.now()
	c.plan(ctx, rules, items, now)
	if err := c.wait(ctx, pol, items, now, busy); err != nil {
		if pol.ordered {
			return err
		}
		err = pol.unavailable("audit", "waiting", err)
		for i := range items {
			if it := &items[i]; it.waits() {
				it.fail(err)
			}
		}
	}
	c.admit(ctx, pol, items)
	c.resolve(rules, items)
	return nil
}
