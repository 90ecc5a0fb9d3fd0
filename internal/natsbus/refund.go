package natsbus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The refund stream and its consumer: part of the public contract. The
// subject is Options.RefundSubject, DefaultRefundSubject by default.
const (
	StreamRefund         = "GATE_REFUND"
	RefundConsumerName   = "gate-refund"
	DefaultRefundSubject = "gate.refund"
)

// RefundOptions tune ConsumeRefunds. Zero values take the defaults shown.
// The subject and the stream's age bound are the bus's (Options).
type RefundOptions struct {
	// RetryMin and RetryMax bound the delay before a refund that met a
	// transient failure is redelivered; it doubles with each delivery
	// (500ms, 30s).
	RetryMin, RetryMax time.Duration
	Metrics            *metrics.Metrics // optional: counts invalid bodies and retries
}

func (o *RefundOptions) setDefaults() {
	if o.RetryMin <= 0 {
		o.RetryMin = 500 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 30 * time.Second
	}
}

// refundStream is GATE_REFUND as the gate creates it: a work queue (a
// refund leaves it once handled) on the refund subject.
func (b *Bus) refundStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: StreamRefund, Subjects: []string{b.opts.RefundSubject}, Storage: jetstream.FileStorage,
		Retention: jetstream.WorkQueuePolicy, MaxAge: b.opts.RefundMaxAge, MaxMsgSize: b.opts.MaxMsgBytes,
		Duplicates:  2 * time.Minute,
		Description: "refunds: forwarded messages their sender failed to deliver, to take out of their windows",
	}
}

// ensureRefunds creates GATE_REFUND when missing (New did, but it may
// have been deleted since) and the durable consumer every gate shares.
func (b *Bus) ensureRefunds(ctx context.Context) (jetstream.Consumer, error) {
	if err := b.ensureStream(ctx, b.refundStream()); err != nil {
		return nil, err
	}
	c, err := b.js.CreateOrUpdateConsumer(ctx, StreamRefund, jetstream.ConsumerConfig{
		Durable:       RefundConsumerName,
		Description:   "the anti-fatigue gate's refunds; shared by every gate process",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       b.opts.AckWait,
		MaxAckPending: b.opts.MaxAckPending,
		FilterSubject: b.opts.RefundSubject,
		// A refund is retried while its stores are down, never given up:
		// a lost refund spends a recipient's budget for nothing.
		MaxDeliver: -1,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s on %s: %w", RefundConsumerName, StreamRefund, err)
	}
	return c, nil
}

// ConsumeRefunds hands every refund published on the refund subject
// (Options.RefundSubject) to
// refunder, one at a time, until ctx is cancelled; then it stops pulling,
// finishes the refund in hand and returns nil. The transport alone settles
// each refund from refunder's verdict: done or already done, ack; refused
// (gate.RefundRefused: never decided, not forwarded), logged and acked,
// since asking again gets the same answer; a body no gate can read, parked
// on the dead letter with its reason and terminated, like a malformed
// message; anything else (a store down), a delayed redelivery, so that no
// refund is lost.
func (b *Bus) ConsumeRefunds(ctx context.Context, refunder gate.Refunder, o RefundOptions) error {
	o.setDefaults()
	for {
		cons, err := b.ensureRefunds(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			b.log.Error("refund consumer unavailable, retrying", "err", err)
			if !sleep(ctx, 2*time.Second) {
				return nil
			}
			continue
		}
		if !b.consumeRefunds(ctx, cons, refunder, o) {
			return nil
		}
		b.log.Warn("refund consumer lost, recreating it")
	}
}

// consumeRefunds runs one message iterator; it reports whether the
// consumer vanished and must be recreated.
func (b *Bus) consumeRefunds(ctx context.Context, cons jetstream.Consumer, refunder gate.Refunder, o RefundOptions) (restart bool) {
	it, err := cons.Messages(jetstream.PullMaxMessages(16), jetstream.PullHeartbeat(5*time.Second))
	if err != nil {
		return true
	}
	stop := context.AfterFunc(ctx, it.Drain)
	defer stop()
	for {
		m, err := it.Next()
		switch {
		case err == nil:
			b.settleRefund(m, refunder, o)
		case errors.Is(err, jetstream.ErrMsgIteratorClosed):
			return false
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
			it.Stop()
			return ctx.Err() == nil
		default:
			b.log.Debug("refund pull", "err", err)
		}
	}
}

// settleRefund handles one refund and settles it; see ConsumeRefunds.
// Handling never uses the consume context: a shutdown lets the refund in
// hand finish, bounded by AckWait.
func (b *Bus) settleRefund(m jetstream.Msg, refunder gate.Refunder, o RefundOptions) {
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.AckWait)
	defer cancel()
	var seq, delivered uint64 = 0, 1
	if md, err := m.Metadata(); err == nil {
		seq, delivered = md.Sequence.Stream, md.NumDelivered
	}
	res, err := refunder.Refund(ctx, m.Data(), gate.RefundSourceNATS)
	switch {
	case err == nil:
		b.log.Debug("refund handled", "seq", seq, "id", res.MessageID, "already_refunded", res.AlreadyRefunded)
		if aerr := m.Ack(); aerr != nil {
			b.log.Warn("refund ack failed; it will be redelivered and found refunded", "seq", seq, "err", aerr)
		}
	case gate.RefundRefused(err):
		b.log.Warn("refund refused", "seq", seq, "err", err)
		if aerr := m.Ack(); aerr != nil {
			b.log.Warn("refund ack failed; it will be redelivered and refused again", "seq", seq, "err", aerr)
		}
	case gate.IsInvalid(err):
		reason := gate.InvalidReason(err)
		if derr := b.DeadLetter(ctx, m.Data(), refundParkHeader(m.Headers(), seq), seq, reason); derr != nil {
			b.log.Error("dead letter of a refund failed; will retry", "seq", seq, "err", derr)
			b.nakRefund(m, seq, delivered, o)
			return
		}
		b.log.Warn("refund parked on dead letter", "seq", seq, "subject", b.opts.DeadSubject, "reason", reason)
		if terr := m.Term(); terr != nil {
			b.log.Warn("term failed; the refund will be redelivered and parked again (deduplicated)", "seq", seq, "err", terr)
		}
	default:
		b.log.Warn("refund not handled, will retry", "seq", seq, "delivery", delivered, "err", err)
		b.nakRefund(m, seq, delivered, o)
	}
}

// refundParkHeader is a refund's headers as DeadLetter must see them: its
// Nats-Msg-Id, which names the dead letter (deduplicated by GATE_DEAD), made
// "refund:" and the sender's id, or the refund's stream sequence. Without
// it the dead letter would be named by GATE_REFUND's sequence as if it were
// GATE_IN's, and a message of GATE_IN parked under the same number would
// make GATE_DEAD drop it as a duplicate.
func refundParkHeader(h nats.Header, seq uint64) nats.Header {
	out := make(nats.Header, len(h)+1)
	for k, vs := range h {
		out[k] = vs
	}
	id := "refund:seq:" + strconv.FormatUint(seq, 10)
	if sent := h.Get(jetstream.MsgIDHeader); sent != "" {
		id = "refund:id:" + sent
	}
	out.Set(jetstream.MsgIDHeader, id)
	return out
}

func (b *Bus) nakRefund(m jetstream.Msg, seq, delivered uint64, o RefundOptions) {
	if o.Metrics != nil {
		o.Metrics.Redeliveries.Inc()
	}
	if err := m.NakWithDelay(Backoff(delivered, o.RetryMin, o.RetryMax)); err != nil {
		b.log.Warn("nak failed; the refund will be redelivered after AckWait", "seq", seq, "err", err)
	}
}
