package natsbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ConsumeOptions tune the consume loop.
type ConsumeOptions struct {
	// Batch is the most messages decided together (256).
	Batch int
	// HandleTimeout bounds one batch's handling, so a hung dependency
	// cannot hold messages past AckWait (AckWait/2).
	HandleTimeout time.Duration
	// RetryMin and RetryMax bound the delay before a message that met a
	// transient failure is redelivered; it doubles with each delivery
	// (500ms, 30s).
	RetryMin, RetryMax time.Duration
	// InFlight is how many batches ConsumeStaged keeps in flight (2): while
	// one is forwarded and committed, the next is decided. Consume keeps
	// one.
	InFlight int
	Metrics  *metrics.Metrics
}

// EnsureConsumer creates or updates the durable pull consumer that every
// gate process shares.
func (b *Bus) EnsureConsumer(ctx context.Context) (jetstream.Consumer, error) {
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

// Consume reads GATE_IN until ctx is cancelled, handing batches to h, one
// at a time. On cancellation it stops pulling, finishes the messages already
// received (with a fresh context bounded by HandleTimeout) and returns nil.
func (b *Bus) Consume(ctx context.Context, h gate.BatchHandler, o ConsumeOptions) error {
	o.InFlight = 1
	return b.ConsumeStaged(ctx, func(ctx context.Context, batch []gate.Delivery) func() []error {
		errs := h(ctx, batch)
		return func() []error { return errs }
	}, o)
}

// ConsumeStaged is Consume for a handler in two steps: it starts each batch
// with start, one at a time in arrival order, and settles it once its finish
// returns, with up to InFlight batches started and not yet settled. On
// cancellation it also waits for the batches in flight.
func (b *Bus) ConsumeStaged(ctx context.Context, start gate.BatchStarter, o ConsumeOptions) error {
	if o.InFlight <= 0 {
		o.InFlight = 2
	}
	if o.Batch <= 0 {
		o.Batch = 256
	}
	if o.HandleTimeout <= 0 {
		o.HandleTimeout = b.opts.AckWait / 2
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 500 * time.Millisecond
	}
	if o.RetryMax <= 0 {
		o.RetryMax = 30 * time.Second
	}
	for {
		cons, err := b.EnsureConsumer(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			b.log.Error("consumer unavailable, retrying", "err", err)
			if !sleep(ctx, 2*time.Second) {
				return nil
			}
			continue
		}
		lagCtx, stopLag := context.WithCancel(ctx)
		if o.Metrics != nil {
			go b.watchLag(lagCtx, cons, o.Metrics)
		}
		restart, err := b.consume(ctx, cons, start, o)
		stopLag()
		if err != nil {
			return err
		}
		if !restart {
			return nil
		}
		b.log.Warn("consumer lost, recreating it")
	}
}

// consume runs one message iterator. It returns restart=true when the
// consumer vanished and must be recreated.
func (b *Bus) consume(ctx context.Context, cons jetstream.Consumer, start gate.BatchStarter, o ConsumeOptions) (restart bool, err error) {
	it, err := cons.Messages(jetstream.PullMaxMessages(2*o.Batch), jetstream.PullHeartbeat(5*time.Second))
	if err != nil {
		return true, nil
	}
	msgs := make(chan jetstream.Msg, o.Batch)
	lost := make(chan struct{})
	go func() {
		defer close(msgs)
		for {
			m, err := it.Next()
			switch {
			case err == nil:
				msgs <- m
			case errors.Is(err, jetstream.ErrMsgIteratorClosed):
				return
			case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
				close(lost)
				it.Stop()
				return
			default:
				// Missed heartbeats and the like: the iterator keeps
				// trying on its own; say so and go on.
				b.log.Debug("pull", "err", err)
			}
		}
	}()
	stop := context.AfterFunc(ctx, it.Drain)
	defer stop()

	slots := make(chan struct{}, o.InFlight)
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	for {
		// A slot first, then the batch: it takes whatever arrived while
		// the batches in flight held every slot.
		slots <- struct{}{}
		m, ok := <-msgs
		if !ok {
			select {
			case <-lost:
				return ctx.Err() == nil, nil
			default:
				return false, nil
			}
		}
		batch := make([]jetstream.Msg, 1, o.Batch)
		batch[0] = m
	fill:
		for len(batch) < o.Batch {
			select {
			case m, ok := <-msgs:
				if !ok {
					break fill
				}
				batch = append(batch, m)
			default:
				break fill
			}
		}
		b.handle(batch, start, o, &inFlight, slots)
	}
}

// handle starts a batch and settles it once finished: at once with one
// batch in flight, else from a goroutine, which frees its slot when done.
func (b *Bus) handle(batch []jetstream.Msg, start gate.BatchStarter, o ConsumeOptions, inFlight *sync.WaitGroup, slots chan struct{}) {
	// Handling never uses the consume context: a shutdown lets the batches
	// in hand finish, bounded by HandleTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), o.HandleTimeout)
	now := time.Now()
	ds := make([]gate.Delivery, len(batch))
	for i, m := range batch {
		d := deliveryOf(m.Data(), m.Headers(), now)
		if md, err := m.Metadata(); err == nil {
			d.Seq, d.NumDelivered = md.Sequence.Stream, md.NumDelivered
		}
		ds[i] = d
	}
	finish := start(ctx, ds)
	settle := func() {
		defer func() { cancel(); <-slots }()
		errs := finish()
		for i, m := range batch {
			var err error
			if i < len(errs) {
				err = errs[i]
			}
			b.settle(ctx, m, ds[i], err, o)
		}
	}
	if o.InFlight == 1 {
		settle()
		return
	}
	inFlight.Go(settle)
}

// deliveryOf is a message's data and headers as the handler sees them,
// with the producer's headers the gate reads (for the header fast path,
// gate.ParseDelivery). A message without headers has a nil header map,
// which costs nothing to read.
func deliveryOf(data []byte, h nats.Header, now time.Time) gate.Delivery {
	d := gate.Delivery{Data: data, NumDelivered: 1, ReceivedAt: now}
	if len(h) > 0 {
		d.HeaderID = h.Get(gate.MsgIDHeader)
		d.HeaderScene = h.Get(gate.SceneHeader)
		d.HeaderRecipient = h.Get(gate.RecipientHeader)
		d.HeaderPriority = h.Get(gate.PriorityHeader)
	}
	return d
}

// settle maps a handler's verdict on one message to JetStream: ack, dead
// letter then term, or a delayed redelivery.
func (b *Bus) settle(ctx context.Context, m jetstream.Msg, d gate.Delivery, err error, o ConsumeOptions) {
	switch {
	case err == nil:
		if aerr := m.Ack(); aerr != nil {
			// The effect is durable and idempotent: a redelivery after a
			// lost ack is recognised and acked then.
			b.log.Warn("ack failed; the message will be redelivered and recognised as decided", "seq", d.Seq, "err", aerr)
		}
	case gate.IsInvalid(err):
		reason := gate.InvalidReason(err)
		if derr := b.DeadLetter(ctx, d.Data, m.Headers(), d.Seq, reason); derr != nil {
			b.log.Error("dead letter failed; will retry", "seq", d.Seq, "err", derr)
			b.nak(m, d, o)
			return
		}
		b.log.Warn("message parked on dead letter", "seq", d.Seq, "subject", b.opts.DeadSubject, "reason", reason)
		if terr := m.Term(); terr != nil {
			b.log.Warn("term failed; the message will be redelivered and parked again (deduplicated)", "seq", d.Seq, "err", terr)
		}
	default:
		b.log.Warn("message not decided, will retry", "seq", d.Seq, "delivery", d.NumDelivered, "err", err)
		b.nak(m, d, o)
	}
}

func (b *Bus) nak(m jetstream.Msg, d gate.Delivery, o ConsumeOptions) {
	if o.Metrics != nil {
		o.Metrics.Redeliveries.Inc()
	}
	if err := m.NakWithDelay(Backoff(d.NumDelivered, o.RetryMin, o.RetryMax)); err != nil {
		b.log.Warn("nak failed; the message will be redelivered after AckWait", "seq", d.Seq, "err", err)
	}
}

// Backoff is the delay before the next delivery of a message delivered n
// times: lo doubled per delivery, capped at hi.
func Backoff(n uint64, lo, hi time.Duration) time.Duration {
	d := lo
	for i := uint64(1); i < n && d < hi; i++ {
		d *= 2
	}
	return min(d, hi)
}

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

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
