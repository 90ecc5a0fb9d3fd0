package pipeline

import (
	"context"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// preferenceTimeout bounds a batch's preference lookup: preferences are a
// courtesy, and a slow lookup must not hold back every message of the
// batch for long.
const preferenceTimeout = 2 * time.Second

// plan works out what deciding each item still to decide takes, on the
// rules in force, its recipient's preferences and the gate's clock
// (preferences' mutes, quiet hours): gate.PlanWithPreferences, the one
// place a preference rule is decided.
func (c *core) plan(ctx context.Context, rules *gate.RuleSet, items []item, now time.Time) {
	prefs := c.preferences(ctx, items)
	for i := range items {
		if it := &items[i]; it.state == toDecide {
			var pr *gate.Preferences
			if prefs != nil {
				if p, ok := prefs[it.msg.Recipient()]; ok {
					pr = &p
				}
			}
			it.plan = gate.PlanWithPreferences(rules, it.msg, pr, now)
		}
	}
}

// preferences looks up the preferences of the recipients of the items
// still to decide, each asked once, in one call bounded by
// preferenceTimeout (the cache in front of the store answers what it holds
// from memory and asks the store once for the rest). It fails open: should
// the lookup fail, the batch is decided as if no recipient had
// preferences, and the failure is logged (once a minute while it lasts)
// and counted. A muted recipient may then get a message: the lesser harm
// than holding every message back while the audit store is slow, since the
// commit that follows needs that store anyway.
func (c *core) preferences(ctx context.Context, items []item) map[string]gate.Preferences {
	if c.prefs == nil {
		return nil
	}
	var recipients []string
	seen := make(map[string]bool, len(items))
	for i := range items {
		if it := &items[i]; it.state == toDecide {
			if r := it.msg.Recipient(); !seen[r] {
				seen[r] = true
				recipients = append(recipients, r)
			}
		}
	}
	if len(recipients) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, preferenceTimeout)
	defer cancel()
	found, err := c.prefs.Preferences(ctx, recipients)
	if err != nil {
		if log, _ := c.prefsFailing.Failed(time.Now()); log {
			c.log.Warn("reading recipient preferences failed; this batch is decided without them", "recipients", len(recipients), "err", err)
		}
		return nil
	}
	c.prefsFailing.Ended()
	return found
}
