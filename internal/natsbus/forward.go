package natsbus

import (
	"context"
	"fmt"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var _ gate.Forwarder = (*Bus)(nil)

// Forward publishes fs to the outbound subject without waiting between
// messages, then waits for every publish ack. Nats-Msg-Id makes a repeat
// publish of the same message id a no-op within GATE_OUT's duplicate window.
func (b *Bus) Forward(ctx context.Context, fs []gate.Forward) []error {
	errs := make([]error, len(fs))
	futs := make([]jetstream.PubAckFuture, len(fs))
	for i, f := range fs {
		msg := nats.NewMsg(b.opts.OutSubject)
		msg.Data = f.Data
		msg.Header.Set(jetstream.MsgIDHeader, f.MessageID)
		msg.Header.Set(HeaderScene, f.Scene)
		msg.Header.Set(HeaderDecision, string(gate.OutcomeForward))
		if f.RulesVersion != "" {
			msg.Header.Set(HeaderRulesVersion, f.RulesVersion)
		}
		if f.ShadowOf != "" {
			msg.Header.Set(HeaderShadow, string(f.ShadowOf))
		}
		if f.Bypass {
			msg.Header.Set(HeaderBypass, "true")
		}
		if f.Unchecked {
			msg.Header.Set(HeaderUnchecked, "store_error")
		}
		fut, err := b.js.PublishMsgAsync(msg)
		if err != nil {
			errs[i] = fmt.Errorf("forward %s: %w: %w", f.MessageID, gate.ErrUnavailable, err)
			continue
		}
		futs[i] = fut
	}
	for i, fut := range futs {
		if fut == nil {
			continue
		}
		select {
		case <-fut.Ok():
		case err := <-fut.Err():
			errs[i] = fmt.Errorf("forward %s: %w: %w", fs[i].MessageID, gate.ErrUnavailable, err)
		case <-ctx.Done():
			errs[i] = fmt.Errorf("forward %s: %w: %w", fs[i].MessageID, gate.ErrUnavailable, ctx.Err())
		}
	}
	return errs
}

// DeadLetter parks a message that can never be decided on the dead-letter
// subject, with the reason in the Gate-Error header, and waits for the
// stream to store it. It is idempotent per GATE_IN sequence.
func (b *Bus) DeadLetter(ctx context.Context, data []byte, hdr nats.Header, streamSeq uint64, reason string) error {
	msg := nats.NewMsg(b.opts.DeadSubject)
	msg.Data = data
	for k, vs := range hdr {
		if k == jetstream.MsgIDHeader {
			continue
		}
		for _, v := range vs {
			msg.Header.Add(k, v)
		}
	}
	msg.Header.Set(HeaderError, reason)
	msg.Header.Set(HeaderStreamSeq, fmt.Sprint(streamSeq))
	msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s:%d", StreamIn, streamSeq))
	if _, err := b.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("dead-letter seq %d: %w: %w", streamSeq, gate.ErrUnavailable, err)
	}
	return nil
}
