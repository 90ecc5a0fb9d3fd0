package natsbus

import (
	"context"
	"fmt"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of ConsumeOptions, besides DefaultBatch (defaults.go), and of
// RefundOptions' retries.
const (
	// DefaultInFlight is how many batches ConsumeStaged keeps in flight.
	DefaultInFlight = 2
	// DefaultRetryMin and DefaultRetryMax bound the delay before a message
	// that met a transient failure is redelivered.
	DefaultRetryMin = 500 * time.Millisecond
	DefaultRetryMax = 30 * time.Second
)

// ConsumeOptions tune the consume loop. Zero values take the defaults
// shown (DefaultBatch, DefaultInFlight, DefaultRetryMin, DefaultRetryMax).
type ConsumeOptions struct {
	// Batch is the most messages decided together (256).
	Batch int
	// BatchWait is how long a batch that is not full waits for more
	// messages before it is decided (0: a batch is what has arrived, and
	// waits for nothing). Fewer, fuller batches share each store call's
	// fixed cost; each message waits up to BatchWait longer.
	BatchWait time.Duration
	// HandleTimeout bounds one batch's handling (3×AckWait). While a
	// batch is in hand its messages are kept from redelivery by a
	// heartbeat (InProgress) every AckWait/3, up to HandleTimeout: a batch
	// slowed by its stores keeps its messages, a hung one cannot keep them
	// for more than HandleTimeout+AckWait (one that panicked, decided again
	// one message at a time, HandleTimeout more), and those of a gate that
	// died come back after AckWait.
	HandleTimeout time.Duration
	// RetryMin and RetryMax bound the delay before a message that met a
	// transient failure is redelivered; it doubles with each delivery
	// (500ms, 30s).
	RetryMin, RetryMax time.Duration
	// InFlight is how many batches ConsumeStaged keeps in flight (2): while
	// one is forwarded and committed, the next is decided.
	InFlight int
	Metrics  *metrics.Metrics
}

// setDefaults fills the zero values; a batch's handling is bounded by
// three times ackWait unless set.
func (o *ConsumeOptions) setDefaults(ackWait time.Duration) {
	if o.InFlight <= 0 {
		o.InFlight = DefaultInFlight
	}
	if o.Batch <= 0 {
		o.Batch = DefaultBatch
	}
	if o.HandleTimeout <= 0 {
		o.HandleTimeout = 3 * ackWait
	}
	if o.RetryMin <= 0 {
		o.RetryMin = DefaultRetryMin
	}
	if o.RetryMax <= 0 {
		o.RetryMax = DefaultRetryMax
	}
}

// EnsureConsumer creates or updates the durable pull consumer that every
// gate process shares, and GATE_IN when missing (New created it, but it may
// have been deleted since, taking the consumer with it).
func (b *Bus) EnsureConsumer(ctx context.Context) (jetstream.Consumer, error) {
	if err := b.ensureStream(ctx, b.inStream()); err != nil {
		return nil, err
	}
	c, err := b.js.CreateOrUpdateConsumer(ctx, StreamIn, jetstream.ConsumerConfig{
		Durable:       ConsumerName,
		Description:   "the anti-fatigue gate; shared by every gate process",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       b.opts.AckWait,
		MaxAckPending: b.opts.MaxAckPending,
		FilterSubject: b.opts.InSubject,
		// Transient failures are retried by NakWithDelay; by default
		// without limit, so a message is never given up while its
		// dependencies are down. With a limit, ParkExhausted parks what
		// exhausts it.
		MaxDeliver: b.opts.MaxDeliver,
	})
	if err != nil {
		return nil, fmt.Errorf("create consumer %s on %s: %w", ConsumerName, StreamIn, err)
	}
	return c, nil
}

// ConsumeStaged reads GATE_IN until ctx is cancelled and hands it to start
// in batches: it starts each batch with start, one at a time in arrival
// order, and settles it once its finish returns, with up to InFlight
// batches started and not yet settled. Each message is settled from its
// error's class (see gate.BatchStarter): acked, parked on the dead letter
// and terminated, or redelivered after a delay. On cancellation it stops
// pulling, finishes the batches already received and in flight (with a
// fresh context bounded by HandleTimeout) and returns nil.
//
// A panic of start or finish does not end the process: the batch's messages
// are then decided again one at a time, each as a redelivery, and only one
// that makes the handler panic on its own is parked on the dead letter
// ("the gate failed on this message: ...") and terminated.
func (b *Bus) ConsumeStaged(ctx context.Context, start gate.BatchStarter, o ConsumeOptions) error {
	o.setDefaults(b.opts.AckWait)
	w := &work{b: b, consumer: ConsumerName, stream: StreamIn, noun: "message", ensure: b.EnsureConsumer, start: start,
		pull: 2 * o.Batch, lag: true, o: o}
	w.run(ctx)
	return nil
}

// watchLag reports the consumer's pending and unacknowledged counts every
// 5 s, until ctx ends.
func (b *Bus) watchLag(ctx context.Context, cons jetstream.Consumer, m *metrics.Metrics) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		info, err := cons.Info(ictx)
		cancel()
		if err == nil {
			m.ConsumerPending.Set(float64(info.NumPending))
			m.ConsumerAckPend.Set(float64(info.NumAckPending))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
