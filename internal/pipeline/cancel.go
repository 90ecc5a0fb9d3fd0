package pipeline

import (
	"context"
	"errors"
	"fmt"

	"github.com/antifatigue/gate/internal/gate"
)

// Canceller takes held messages back on request (POST /v1/cancel,
// gate.cancel); see gate.Canceller. The message path cancels through the
// same stage (core.cancel) for a message that resolves a cancel_key.
type Canceller struct {
	o    CancellerOptions
	core core
}

var _ gate.Canceller = (*Canceller)(nil)

// Cancel cancels the held messages body names: see gate.Canceller.
func (c *Canceller) Cancel(ctx context.Context, body []byte, source gate.CancelSource) (gate.CancelResult, error) {
	req, err := gate.ParseCancel(body)
	if err != nil {
		c.core.countCancel(source, 0, err)
		return gate.CancelResult{}, err
	}
	n, err := c.core.cancel(ctx, c.o.Rules.Current(), req, source)
	if err != nil {
		return gate.CancelResult{}, err
	}
	return gate.CancelResult{Count: n}, nil
}

// cancel is the core's cancel stage: it takes back the held messages of
// req through the hold store, and counts the cancel (gate_cancels_total)
// and each message cancelled (gate_held_settled_total). A failure wraps
// gate.ErrUnavailable: asked again, the cancel may succeed.
func (c *core) cancel(ctx context.Context, rules *gate.RuleSet, req gate.CancelRequest, source gate.CancelSource) (int, error) {
	out, err := c.holds.Cancel(ctx, req, c.now())
	if err != nil {
		if !errors.Is(err, gate.ErrUnavailable) {
			err = fmt.Errorf("%w: %w", gate.ErrUnavailable, err)
		}
		err = fmt.Errorf("cancel %q: %w", req.Key, err)
	}
	c.countCancel(source, len(out), err)
	if err != nil {
		return 0, err
	}
	if c.m != nil {
		for _, s := range out {
			c.m.Settled.WithLabelValues(sceneLabel(rules, s.Scene), string(gate.SettleCancelled)).Inc()
		}
	}
	if len(out) > 0 {
		c.log.Info("held messages cancelled", "cancel_key", req.Key, "recipient", req.Recipient, "count", len(out), "source", source)
	}
	return len(out), nil
}

// countCancel adds a cancel's result to gate_cancels_total.
func (c *core) countCancel(source gate.CancelSource, n int, err error) {
	if c.m == nil {
		return
	}
	result := "cancelled"
	switch {
	case gate.IsInvalid(err):
		result = "invalid"
	case err != nil:
		result = "failed"
	case n == 0:
		result = "none"
	}
	c.m.Cancels.WithLabelValues(string(source), result).Inc()
}

// resolve is the message path's cancel stage: every message committed now
// or before (a redelivery runs it again, which cancels nothing more) that
// resolves a cancel_key cancels its recipient's held messages with that
// key, after its own commit. A cancel that fails fails its messages, to be
// retried: the cancel is never lost.
func (p *Pipeline) resolve(ctx context.Context, rules *gate.RuleSet, items []item) {
	if p.core.holds == nil {
		return
	}
	byReq := map[gate.CancelRequest][]int{}
	var reqs []gate.CancelRequest
	for i := range items {
		it := &items[i]
		if it.msg.Resolves == "" || (it.state != committed && (it.state != prior || it.err != nil)) {
			continue
		}
		req := gate.CancelRequest{Key: it.msg.Resolves, Recipient: it.msg.Recipient()}
		if _, ok := byReq[req]; !ok {
			reqs = append(reqs, req)
		}
		byReq[req] = append(byReq[req], i)
	}
	for _, req := range reqs {
		if _, err := p.core.cancel(ctx, rules, req, gate.CancelSourceResolves); err != nil {
			for _, i := range byReq[req] {
				items[i].fail(messagePolicy.unavailable("audit", "cancel", err))
			}
		}
	}
}
