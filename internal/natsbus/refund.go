package natsbus

import (
	"context"
	"fmt"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/nats-io/nats.go/jetstream"
)

// The refund stream and its consumer: part of the public contract. The
// subject is Options.RefundSubject, DefaultRefundSubject by default.
const (
	StreamRefund         = "GATE_REFUND"
	RefundConsumerName   = "gate-refund"
	DefaultRefundSubject = "gate.refund"
)

// RefundOptions tune ConsumeRefunds. Zero values take the defaults shown
// (DefaultRetryMin, DefaultRetryMax). The subject and the stream's age
// bound are the bus's (Options).
type RefundOptions struct {
	// RetryMin and RetryMax bound the delay before a refund that met a
	// transient failure is redelivered; it doubles with each delivery
	// (500ms, 30s).
	RetryMin, RetryMax time.Duration
	Metrics            *metrics.Metrics // optional: counts retries and panics
}

// refundPull is how many refunds the consumer asks for ahead of the one in
// hand.
const refundPull = 16

// refundStream is GATE_REFUND as the gate creates it: a work queue (a
// refund leaves it once handled) on the refund subject.
func (b *Bus) refundStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: StreamRefund, Subjects: []string{b.opts.RefundSubject}, Storage: jetstream.FileStorage, Replicas: b.newReplicas(),
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
// (Options.RefundSubject) to refunder, one at a time, until ctx is
// cancelled; then it stops pulling, finishes the refund in hand and returns
// nil. It is ConsumeStaged's work loop, with batches of one handled within
// AckWait, so each refund is settled from refunder's verdict by its class:
// done or already done, ack; refused (gate.RefundRefused: never decided,
// not forwarded), logged and acked, since asking again gets the same
// answer; a body no gate can read, parked on the dead letter with its
// reason and terminated, like a malformed message; anything else (a store
// down), a delayed redelivery, so that no refund is lost.
func (b *Bus) ConsumeRefunds(ctx context.Context, refunder gate.Refunder, ro RefundOptions) error {
	o := ConsumeOptions{Batch: 1, InFlight: 1, HandleTimeout: b.opts.AckWait, RetryMin: ro.RetryMin, RetryMax: ro.RetryMax, Metrics: ro.Metrics}
	o.setDefaults(b.opts.AckWait)
	w := &work{b: b, consumer: RefundConsumerName, stream: StreamRefund, noun: "refund", ensure: b.ensureRefunds,
		start: b.refunds(refunder), pull: refundPull, o: o}
	w.run(ctx)
	return nil
}

// refunds is refunder as a work loop's handler: each refund of a batch
// refunded in turn, with source nats.
func (b *Bus) refunds(refunder gate.Refunder) gate.BatchStarter {
	return func(ctx context.Context, batch []gate.Delivery) func() []error {
		errs := make([]error, len(batch))
		for i, d := range batch {
			res, err := refunder.Refund(ctx, d.Data, gate.RefundSourceNATS)
			if err == nil {
				b.log.Debug("refund handled", "seq", d.Seq, "id", res.MessageID, "already_refunded", res.AlreadyRefunded)
			}
			errs[i] = err
		}
		return func() []error { return errs }
	}
}
