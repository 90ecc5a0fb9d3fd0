package pipeline

import (
	"context"

	"github.com/antifatigue/gate/internal/gate"
)

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
		f := gate.Forward{MessageID: it.msg.ID, Scene: it.msg.Scene, RulesVersion: rules.Version, Data: it.msg.Raw}
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
			f.Bypass, f.Unchecked = it.dec.Bypass, it.dec.Unchecked
			if it.dec.Shadow {
				f.ShadowOf = it.dec.ShadowOf
			}
		default:
			continue
		}
		fs = append(fs, f)
		idx = append(idx, i)
	}
	if len(fs) == 0 {
		return
	}
	errs := p.o.Forwarder.Forward(ctx, fs)
	for k, err := range errs {
		if err != nil {
			items[idx[k]].fail(messagePolicy.unavailable("nats", "forward", err))
		}
	}
}
