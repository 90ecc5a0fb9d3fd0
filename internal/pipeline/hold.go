package pipeline

import (
	"context"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// plan works out what deciding each message of this batch takes, on the
// rules in force, its recipient's preferences (prefs, by recipient) and
// the gate's clock (preferences' mutes, quiet hours).
func (p *Pipeline) plan(rules *gate.RuleSet, items []item, prefs map[string]gate.Preferences, now time.Time) {
	for i := range items {
		if it := &items[i]; it.undecided() {
			var pr *gate.Preferences
			if p, ok := prefs[it.msg.Recipient()]; ok {
				pr = &p
			}
			it.plan = gate.PlanWithPreferences(rules, it.msg, pr, now)
		}
	}
}

// holdBehind holds every message whose queue holds messages already behind
// them (gate.Queued), before any window is asked: a new message never
// overtakes a held one of its queue. A queue holds messages when the hold
// store says so, or when a batch still in flight held one in it (not yet
// committed, so the store does not know it). A message held by quiet hours
// needs no check: it is held (or suppressed) whatever its queue holds. One
// call to the store serves the whole batch; a transient error fails the
// batch, to be retried.
func (p *Pipeline) holdBehind(ctx context.Context, items []item, now time.Time) error {
	if p.o.Holds == nil {
		return nil
	}
	var ask []gate.Queue
	waiting := map[gate.Queue]bool{}
	p.mu.Lock()
	for i := range items {
		it := &items[i]
		if !it.undecided() || it.plan.Quiet {
			continue
		}
		for _, hq := range it.plan.Queues {
			if _, seen := waiting[hq.Queue]; !seen {
				waiting[hq.Queue] = p.held[hq.Queue] > 0
				if !waiting[hq.Queue] {
					ask = append(ask, hq.Queue)
				}
			}
		}
	}
	p.mu.Unlock()
	// A queue the store refuses for good (text it cannot hold) can hold
	// nothing: it is taken as empty, and the commit refuses the message's
	// record too and parks it.
	err := isolate(p, "audit", "waiting", gate.ErrPermanent, ask, func(part []gate.Queue) error {
		found, err := p.o.Holds.Waiting(ctx, part)
		for q, w := range found {
			if w {
				waiting[q] = true
			}
		}
		return err
	}, func(gate.Queue, error) {})
	if err != nil {
		return err
	}
	for i := range items {
		it := &items[i]
		if !it.undecided() || it.plan.Quiet {
			continue
		}
		for _, hq := range it.plan.Queues {
			if waiting[hq.Queue] {
				it.dec, it.decided = gate.Queued(it.plan, hq, now), true
				break
			}
		}
	}
	return nil
}

// keepOrder keeps the messages of a queue in order within the batch: once
// one is held, a later one of its queue that would be forwarded (its
// window had room, as another scene's in a digest group may have; or its
// own zone is out of quiet hours while the earlier one's was in them) is
// held behind it. Its admission is returned, to be taken out of the windows
// again. A bypass priority is never held. Without a hold store, what would
// be held is suppressed instead.
func (p *Pipeline) keepOrder(items []item, now time.Time) (unadmit []gate.AdmitRequest) {
	held := map[gate.Queue]bool{}
	for i := range items {
		it := &items[i]
		switch {
		case !it.decided:
		case p.o.Holds == nil:
			it.dec = it.dec.WithoutHold()
		case it.dec.Holds():
			held[it.dec.Queue] = true
		case it.dec.Outcome == gate.OutcomeForward && !it.plan.Bypass:
			for _, hq := range it.plan.Queues {
				if !held[hq.Queue] {
					continue
				}
				if it.admitted {
					unadmit = append(unadmit, *it.plan.Request)
				}
				it.dec, it.counted, it.admitted = gate.Queued(it.plan, hq, now), false, false
				break
			}
		}
	}
	return unadmit
}

// heldQueues are the queues this batch holds messages in.
func heldQueues(items []item) []gate.Queue {
	var qs []gate.Queue
	seen := map[gate.Queue]bool{}
	for i := range items {
		if it := &items[i]; it.decided && it.dec.Holds() && !seen[it.dec.Queue] {
			seen[it.dec.Queue] = true
			qs = append(qs, it.dec.Queue)
		}
	}
	return qs
}
