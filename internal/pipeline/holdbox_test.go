package pipeline

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// holdBox is a hold store in memory, as the audit store's held table
// behaves: a held message joins its queue with its due time raised to the
// queue's last, Settle hands over the queues whose oldest message is due,
// oldest first, and applies the settlements only when settle succeeds.
// A test fails when a settlement names a message that was not handed over.
type holdBox struct {
	tb      testing.TB
	mu      sync.Mutex
	rows    []gate.Held
	settled map[string]gate.Settlement
	// waits records the queues of each Waiting call; failWaiting, when set,
	// fails them.
	waits       [][]gate.Queue
	failWaiting error
	// outbox holds the forwards settled and not yet Sent, with their
	// queues, in the order settled.
	outbox []boxed
	// failCancel, when set, fails Cancel; cancels records each Cancel.
	failCancel error
	cancels    []gate.CancelRequest
}

// boxed is a forward in holdBox's outbox, with the queue it leaves.
type boxed struct {
	f     gate.Forward
	queue gate.Queue
}

func newHoldBox(tb testing.TB) *holdBox {
	return &holdBox{tb: tb, settled: map[string]gate.Settlement{}}
}

var _ gate.HoldStore = (*holdBox)(nil)

func (b *holdBox) add(h gate.Held) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.rows = append(b.rows, h)
	b.normalize()
}

// normalize orders the rows by queue and sequence and keeps due times
// non-decreasing within a queue.
func (b *holdBox) normalize() {
	slices.SortStableFunc(b.rows, func(x, y gate.Held) int {
		return cmp.Or(cmp.Compare(x.Queue.Recipient, y.Queue.Recipient), cmp.Compare(x.Queue.Name, y.Queue.Name), cmp.Compare(x.Seq, y.Seq))
	})
	for i := 1; i < len(b.rows); i++ {
		if b.rows[i].Queue == b.rows[i-1].Queue && b.rows[i].DueAt.Before(b.rows[i-1].DueAt) {
			b.rows[i].DueAt = b.rows[i-1].DueAt
		}
	}
}

func (b *holdBox) Waiting(_ context.Context, qs []gate.Queue) (map[gate.Queue]bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waits = append(b.waits, slices.Clone(qs))
	if b.failWaiting != nil {
		return nil, b.failWaiting
	}
	w := map[gate.Queue]bool{}
	for _, q := range qs {
		w[q] = slices.ContainsFunc(b.rows, func(h gate.Held) bool { return h.Queue == q }) ||
			slices.ContainsFunc(b.outbox, func(o boxed) bool { return o.queue == q })
	}
	return w, nil
}

func (b *holdBox) Settle(ctx context.Context, now time.Time, maxQueues, perQueue int,
	settle func(ctx context.Context, due [][]gate.Held) ([]gate.Settlement, error)) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var due [][]gate.Held
	handed := map[string]bool{}
	for i := 0; i < len(b.rows) && len(due) < maxQueues; {
		j := i
		for j < len(b.rows) && b.rows[j].Queue == b.rows[i].Queue {
			j++
		}
		if !b.rows[i].DueAt.After(now) {
			q := slices.Clone(b.rows[i:min(j, i+perQueue)])
			for _, h := range q {
				handed[h.MessageID] = true
			}
			due = append(due, q)
		}
		i = j
	}
	if len(due) == 0 {
		return 0, nil
	}
	out, err := settle(ctx, due)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range out {
		if (s.Kind == gate.SettleReleased || s.Kind == gate.SettleDigested) != (s.Out != nil) {
			b.tb.Errorf("settlement %+v: a forward on the wrong kind, or none on a release", s)
			return 0, fmt.Errorf("settlement of %q: forward on kind %s", s.MessageID, s.Kind)
		}
		if !handed[s.MessageID] {
			b.tb.Errorf("settlement %+v of a message not handed over", s)
			return 0, fmt.Errorf("settlement of %q: not handed over", s.MessageID)
		}
		k := slices.IndexFunc(b.rows, func(h gate.Held) bool { return h.MessageID == s.MessageID })
		switch s.Kind {
		case gate.SettleReschedule:
			b.rows[k].DueAt = s.DueAt
			continue
		case gate.SettleMoved:
			b.rows[k].Queue, b.rows[k].Kind, b.rows[k].DueAt, b.rows[k].Expires = s.Queue, gate.HoldDigest, s.DueAt, time.Time{}
		default:
			if s.Out != nil && !slices.ContainsFunc(b.outbox, func(o boxed) bool { return o.f.MessageID == s.Out.MessageID }) {
				b.outbox = append(b.outbox, boxed{*s.Out, b.rows[k].Queue})
			}
			b.rows = slices.Delete(b.rows, k, k+1)
		}
		b.settled[s.MessageID] = s
		n++
	}
	b.normalize()
	return n, nil
}

func (b *holdBox) Cancel(_ context.Context, req gate.CancelRequest, now time.Time) ([]gate.Settlement, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cancels = append(b.cancels, req)
	if b.failCancel != nil {
		return nil, b.failCancel
	}
	var out []gate.Settlement
	b.rows = slices.DeleteFunc(b.rows, func(h gate.Held) bool {
		if h.CancelKey != req.Key || (req.Recipient != "" && h.Queue.Recipient != req.Recipient) {
			return false
		}
		s := gate.Settlement{MessageID: h.MessageID, Scene: h.Scene, Kind: gate.SettleCancelled, At: now}
		b.settled[h.MessageID] = s
		out = append(out, s)
		return true
	})
	return out, nil
}

func (b *holdBox) Outbox(_ context.Context, limit int) ([]gate.Forward, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var fs []gate.Forward
	for _, o := range b.outbox[:min(limit, len(b.outbox))] {
		fs = append(fs, o.f)
	}
	return fs, nil
}

func (b *holdBox) Sent(_ context.Context, ids []string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.outbox = slices.DeleteFunc(b.outbox, func(o boxed) bool { return slices.Contains(ids, o.f.MessageID) })
	return nil
}

// state returns the held messages' ids by queue name, and the settlements.
func (b *holdBox) state() (map[string][]string, map[string]gate.Settlement) {
	b.mu.Lock()
	defer b.mu.Unlock()
	held := map[string][]string{}
	for _, h := range b.rows {
		held[h.Queue.Name] = append(held[h.Queue.Name], h.MessageID)
	}
	settled := map[string]gate.Settlement{}
	for k, v := range b.settled {
		settled[k] = v
	}
	return held, settled
}

func (b *holdBox) row(id string) (gate.Held, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := slices.IndexFunc(b.rows, func(h gate.Held) bool { return h.MessageID == id })
	if k < 0 {
		return gate.Held{}, false
	}
	return b.rows[k], true
}
