package pipeline

import (
	"context"

	"github.com/antifatigue/gate/internal/gate"
)

// forward is the core's one forward stage: it publishes fs, every message
// a front end lets out (decided now, replayed, released, digested), and
// waits for the stream to store them; errs[i] is fs[i]'s outcome. Every
// way out passes here, so what wraps the way out (pacing) wraps it once.
func (c *core) forward(ctx context.Context, fs []gate.Forward) []error {
	if len(fs) == 0 {
		return nil
	}
	return c.out.Forward(ctx, fs)
}

// forward publishes every message whose committed outcome is a forward and
// waits for the stream to store them: those this batch committed, and
// those decided before whose publish may have been lost in a crash between
// commit and publish: every redelivered one, and a first delivery decided
// within ReplayWithin. A forward is lost only if it is never published; one
// published twice more than GATE_OUT's duplicate window apart (all gates
// down that long) reaches downstream twice.
func (p *Pipeline) forward(ctx context.Context, rules *gate.RuleSet, items []item) {
	var fs []gate.Forward
	var idx []int
	replayAfter := p.o.Now().Add(-p.o.ReplayWithin)
	for i := range items {
		it := &items[i]
		var d gate.Decision
		switch it.state {
		case prior:
			// A replay: the ledger keeps the outcome, not how it was reached.
			if it.err != nil || it.prior.Outcome != gate.OutcomeForward || (it.d.NumDelivered <= 1 && it.prior.At.Before(replayAfter)) {
				continue
			}
		case committed:
			if it.dec.Outcome != gate.OutcomeForward {
				continue
			}
			d = it.dec
		default:
			continue
		}
		fs = append(fs, gate.ForwardOf(it.msg.ID, it.msg.Scene, rules.Version, d, it.msg.Raw))
		idx = append(idx, i)
	}
	for k, err := range p.core.forward(ctx, fs) {
		if err != nil {
			items[idx[k]].fail(messagePolicy.unavailable("nats", "forward", err))
		}
	}
}
