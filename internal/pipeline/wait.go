package pipeline

import (
	"context"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// wait holds every item whose queue holds messages already behind them
// (gate.Queued, the one place a hold reason is decided), before any window
// is asked: a new message never overtakes a held one of its queue, and a
// check answers as such a message would be decided (defer or digest, with
// reason queued). A queue holds messages when the hold store says so, or
// when busy does (a batch still in flight held one in it, not yet
// committed, so the store does not know it). A message held by quiet hours
// needs no look: it is held (or suppressed) whatever its queue holds.
//
// One call to the store serves the whole batch. A queue the store refuses
// for good (text it cannot hold) can hold nothing: for a message it is
// taken as empty, and the commit refuses the message's record too and
// parks it; a check of it fails alone, with the store's reason. A
// transient error is returned, and nothing is decided: the front end fails
// the batch (messages, to be retried) or the items that waited (checks).
func (c *core) wait(ctx context.Context, pol *policy, items []item, now time.Time, busy func(gate.Queue) bool) error {
	if c.holds == nil {
		return nil
	}
	var ask []gate.Queue
	waiting := map[gate.Queue]bool{}
	for i := range items {
		if it := &items[i]; it.waits() {
			for _, hq := range it.plan.Queues {
				if _, seen := waiting[hq.Queue]; !seen {
					waiting[hq.Queue] = busy != nil && busy(hq.Queue)
					if !waiting[hq.Queue] {
						ask = append(ask, hq.Queue)
					}
				}
			}
		}
	}
	var refused map[gate.Queue]error
	err := isolate(gate.ErrPermanent, ask, func(part []gate.Queue) error {
		found, err := c.holds.Waiting(ctx, part)
		for q, w := range found {
			if w {
				waiting[q] = true
			}
		}
		return err
	}, func(q gate.Queue, why error) {
		if pol.answered {
			if refused == nil {
				refused = map[gate.Queue]error{}
			}
			refused[q] = why
		}
	})
	if err != nil {
		return err
	}
	for i := range items {
		it := &items[i]
		if !it.waits() {
			continue
		}
		for _, hq := range it.plan.Queues {
			if why, ok := refused[hq.Queue]; ok {
				pol.refused(it, "audit", why)
				break
			}
			if waiting[hq.Queue] {
				it.decide(gate.Queued(it.plan, hq, now))
				break
			}
		}
	}
	return nil
}

// waits reports whether the item is to decide and its plan has queues that
// may hold messages it would overtake.
func (it *item) waits() bool {
	return it.state == toDecide && !it.plan.Quiet && len(it.plan.Queues) > 0
}

// keepOrder keeps the messages of a queue in order within the batch: once
// one is held, a later one of its queue that would be forwarded (its
// window had room, as another scene's in a digest group may have; or its
// own zone is out of quiet hours while the earlier one's was in them) is
// held behind it. Its admission is returned, to be taken out of the windows
// again. A bypass priority is never held. Without a hold store, what would
// be held is suppressed instead. Checks are never held, so only messages
// keep order.
func (c *core) keepOrder(items []item) (unadmit []gate.AdmitRequest) {
	held := map[gate.Queue]bool{}
	now := c.now()
	for i := range items {
		it := &items[i]
		switch {
		case it.state != decided:
		case c.holds == nil:
			it.dec = it.dec.WithoutHold()
		case it.dec.Holds():
			held[it.dec.Queue] = true
		case it.dec.Outcome == gate.OutcomeForward && !it.plan.Bypass:
			for _, hq := range it.plan.Queues {
				if !held[hq.Queue] {
					continue
				}
				if req := it.admission(); req != nil {
					unadmit = append(unadmit, *req)
				}
				it.dec, it.slot = gate.Queued(it.plan, hq, now), noSlot
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
		if it := &items[i]; it.state == decided && it.dec.Holds() && !seen[it.dec.Queue] {
			seen[it.dec.Queue] = true
			qs = append(qs, it.dec.Queue)
		}
	}
	return qs
}
