package natsbus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var _ gate.Forwarder = (*Bus)(nil)

// Headers of a held message forwarded later, and of a digest.
const (
	// HeaderDeferredFrom is when a released message was first held, in RFC
	// 3339 (UTC, milliseconds).
	HeaderDeferredFrom = "Gate-Deferred-From"
	// HeaderDigestCount is how many held messages a digest summarises; its
	// Gate-Decision is DecisionDigest.
	HeaderDigestCount = "Gate-Digest-Count"
	// DecisionDigest is the Gate-Decision of a digest.
	DecisionDigest = "digest"
)

// deferredFromLayout is RFC 3339 with milliseconds, as a downstream reads it
// with any RFC 3339 parser.
const deferredFromLayout = "2006-01-02T15:04:05.000Z07:00"

// Forward publishes fs to the outbound subject without waiting between
// messages, then waits for every publish ack. Nats-Msg-Id makes a repeat
// publish of the same message id a no-op within GATE_OUT's duplicate window.
// A GATE_OUT that is full (its MaxBytes) refuses a forward: its error then
// wraps a *FullError as well as gate.ErrUnavailable, so the message is
// retried, never dropped.
// A released message carries Gate-Deferred-From; a digest carries
// Gate-Decision: digest and Gate-Digest-Count.
func (b *Bus) Forward(ctx context.Context, fs []gate.Forward) []error {
	errs := make([]error, len(fs))
	futs := make([]jetstream.PubAckFuture, len(fs))
	for i, f := range fs {
		msg := nats.NewMsg(b.opts.OutSubject)
		msg.Data = f.Data
		msg.Header.Set(jetstream.MsgIDHeader, f.MessageID)
		msg.Header.Set(HeaderScene, f.Scene)
		msg.Header.Set(HeaderDecision, string(gate.OutcomeForward))
		if f.DigestCount > 0 {
			msg.Header.Set(HeaderDecision, DecisionDigest)
			msg.Header.Set(HeaderDigestCount, strconv.Itoa(f.DigestCount))
		}
		if !f.DeferredFrom.IsZero() {
			msg.Header.Set(HeaderDeferredFrom, f.DeferredFrom.UTC().Format(deferredFromLayout))
		}
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
	stored := false
	for i, fut := range futs {
		if fut == nil {
			continue
		}
		select {
		case <-fut.Ok():
			stored = true
		case err := <-fut.Err():
			errs[i] = fmt.Errorf("forward %s: %w: %w", fs[i].MessageID, gate.ErrUnavailable, b.full(StreamOut, err))
		case <-ctx.Done():
			errs[i] = fmt.Errorf("forward %s: %w: %w", fs[i].MessageID, gate.ErrUnavailable, ctx.Err())
		}
	}
	if stored {
		b.roomAgain(StreamOut)
	}
	return errs
}

// MaxReasonBytes bounds the reason a dead letter's Gate-Error carries.
const MaxReasonBytes = 4096

// DeadLetterID is the Nats-Msg-Id of the dead letter of the message stored
// as seq in the stream named stream (StreamIn, StreamRefund), whose body is
// data: "<stream>:<seq>:<digest>", digest being the first 16 hex digits of
// the body's SHA-256. GATE_DEAD de-duplicates dead letters by it, for its
// own duplicate window (2h), so it names one stored message and nothing
// else: the same message parked twice (a lost Term, the advisory and the
// work loop both parking it, two gates) gets one dead letter, and two
// messages never share one. The producer's Nats-Msg-Id is no part of it:
// GATE_IN forgets an id after 2 minutes, so two different messages with one
// id both reach the gate, and both must be parked. The digest keeps apart
// two messages of one sequence: a stream deleted and recreated (by
// WatchStreams, or by hand) counts from 1 again. Stream names hold no
// colon, so the name up to the first colon is the stream.
func DeadLetterID(stream string, seq uint64, data []byte) string {
	sum := sha256.Sum256(data)
	return stream + ":" + strconv.FormatUint(seq, 10) + ":" + hex.EncodeToString(sum[:8])
}

// DeadLetter parks a message of stream (StreamIn, StreamRefund) that can
// never be decided on the dead-letter subject, with the reason in the
// Gate-Error header, its stream in Gate-Stream and its place there in
// Gate-Stream-Seq, and waits for the stream to store it. It is idempotent
// per stored message (DeadLetterID). A producer's retry that reached
// GATE_IN twice, under two sequences (after its duplicate window, or after
// a nats-server restart, which forgets the ids of messages removed), is
// parked twice: two dead letters of one message rather than one of two.
//
// A message that reached GATE_IN within NATS's max payload may no longer
// fit once the gate's headers are added; it is parked cut to fit, with
// Gate-Truncated saying its original size, rather than retried forever.
//
// Whatever reason says, Gate-Error holds it as one header line of valid
// UTF-8 (gate.OneLine), at most MaxReasonBytes: a reason may quote a store,
// a library or the message itself.
//
// A GATE_DEAD that is full (its MaxBytes) refuses the dead letter: the
// error then wraps a *FullError, and the message is retried, never dropped.
func (b *Bus) DeadLetter(ctx context.Context, stream string, data []byte, hdr nats.Header, streamSeq uint64, reason string) error {
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
	msg.Header.Set(HeaderError, gate.OneLine(reason, MaxReasonBytes))
	msg.Header.Set(HeaderStream, stream)
	msg.Header.Set(HeaderStreamSeq, fmt.Sprint(streamSeq))
	msg.Header.Set(jetstream.MsgIDHeader, DeadLetterID(stream, streamSeq, data))
	if limit := int(b.nc.MaxPayload()); limit > 0 && len(data)+headerSize(msg.Header) > limit {
		msg.Header.Set(HeaderTruncated, strconv.Itoa(len(data)))
		msg.Data = data[:max(0, limit-headerSize(msg.Header))]
	}
	if _, err := b.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("dead-letter %s seq %d: %w: %w", stream, streamSeq, gate.ErrUnavailable, b.full(StreamDead, err))
	}
	b.roomAgain(StreamDead)
	return nil
}

// headerSize is an upper bound of h's size on the wire, as nats.go counts it
// against the max payload ("NATS/1.0\r\n", "Key: value\r\n" per value, then
// "\r\n"), with room to spare.
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n") + 64
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}
