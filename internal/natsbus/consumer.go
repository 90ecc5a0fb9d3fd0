package natsbus

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
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
//
// A panic of start or finish does not end the process: the batch's messages
// are then decided again one at a time, each as a redelivery, and only one
// that makes the handler panic on its own is parked on the dead letter
// ("the gate failed on this message: ...") and terminated.
func (b *Bus) ConsumeStaged(ctx context.Context, start gate.BatchStarter, o ConsumeOptions) error {
	if o.InFlight <= 0 {
		o.InFlight = 2
	}
	if o.Batch <= 0 {
		o.Batch = 256
	}
	if o.HandleTimeout <= 0 {
		o.HandleTimeout = 3 * b.opts.AckWait
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
	// Starts one at a time: the loop's, and a panicked batch's retries.
	var starting sync.Mutex
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
		batch := fill(m, msgs, o.Batch, o.BatchWait)
		b.handle(batch, start, &starting, o, &inFlight, slots)
	}
}

// fill makes a batch of first and what msgs holds, up to size: what has
// arrived, and with wait > 0 what arrives within wait of now too.
func fill(first jetstream.Msg, msgs <-chan jetstream.Msg, size int, wait time.Duration) []jetstream.Msg {
	batch := make([]jetstream.Msg, 1, size)
	batch[0] = first
	var linger <-chan time.Time
	for len(batch) < size {
		select {
		case m, ok := <-msgs:
			if !ok {
				return batch
			}
			batch = append(batch, m)
			continue
		default:
		}
		if wait <= 0 {
			return batch
		}
		if linger == nil {
			linger = time.After(wait)
		}
		select {
		case m, ok := <-msgs:
			if !ok {
				return batch
			}
			batch = append(batch, m)
		case <-linger:
			return batch
		}
	}
	return batch
}

// handle starts a batch and settles it once finished: at once with one
// batch in flight, else from a goroutine, which frees its slot when done.
func (b *Bus) handle(batch []jetstream.Msg, start gate.BatchStarter, starting *sync.Mutex, o ConsumeOptions, inFlight *sync.WaitGroup, slots chan struct{}) {
	// Handling never uses the consume context: a shutdown lets the batches
	// in hand finish, bounded by HandleTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), o.HandleTimeout)
	now := time.Now()
	beat := b.heartbeat(batch, now.Add(o.HandleTimeout))
	ds := make([]gate.Delivery, len(batch))
	for i, m := range batch {
		d := deliveryOf(m.Data(), m.Headers(), now)
		if md, err := m.Metadata(); err == nil {
			d.Seq, d.NumDelivered = md.Sequence.Stream, md.NumDelivered
		}
		ds[i] = d
	}
	finish, panicked := startGuarded(ctx, start, starting, ds)
	settle := func() {
		defer func() { beat.stop(); cancel(); <-slots }()
		var errs []error
		if panicked == nil {
			errs, panicked = guard(finish)
		}
		if panicked != nil {
			b.log.Error("the gate panicked on a batch; deciding its messages one at a time",
				"first_seq", ds[0].Seq, "messages", len(batch), "panic", panicked.value)
			b.decideEach(batch, ds, start, starting, beat, o)
			return
		}
		beat.stop()
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

// decideEach decides the messages of a batch whose handler panicked one at
// a time, within a handling of their own (bounded by HandleTimeout, the
// batch's heartbeat extended to it), and parks each that makes the handler
// panic alone. Each is handed over as a redelivery, which it is to the
// handler: one that the batch decided before the panic is looked up, not
// decided twice.
func (b *Bus) decideEach(batch []jetstream.Msg, ds []gate.Delivery, start gate.BatchStarter, starting *sync.Mutex, beat *heartbeat, o ConsumeOptions) {
	ctx, cancel := context.WithTimeout(context.Background(), o.HandleTimeout)
	defer cancel()
	beat.extend(time.Now().Add(o.HandleTimeout))
	for i, m := range batch {
		again := ds[i]
		again.NumDelivered = max(again.NumDelivered, 1) + 1
		finish, panicked := startGuarded(ctx, start, starting, []gate.Delivery{again})
		var errs []error
		if panicked == nil {
			errs, panicked = guard(finish)
		}
		var err error
		switch {
		case panicked != nil:
			b.log.Error("the gate panicked on a message; parking it", "seq", ds[i].Seq, "panic", panicked.value, "stack", string(panicked.stack))
			if o.Metrics != nil {
				o.Metrics.Panicked.Inc()
			}
			err = &gate.InvalidError{Reason: PanicReason(panicked.value)}
		case len(errs) > 0:
			err = errs[0]
		}
		beat.settling(1)
		b.settle(ctx, m, ds[i], err, o)
	}
}

// PanicReason is the Gate-Error of a message parked because deciding it
// made the gate panic with v: quoted, since a panic may echo the message's
// bytes (invalid UTF-8, line breaks) and a header must hold neither, and
// cut to a length a header can carry.
func PanicReason(v any) string {
	return fmt.Sprintf("the gate failed on this message: %.300q", fmt.Sprint(v))
}

// panicked is a recovered panic: its value and where it happened.
type panicked struct {
	value any
	stack []byte
}

// guard calls f and turns a panic into a *panicked.
func guard[T any](f func() T) (v T, p *panicked) {
	defer func() {
		if r := recover(); r != nil {
			p = &panicked{value: r, stack: debug.Stack()}
		}
	}()
	return f(), nil
}

// startGuarded starts a batch, one start at a time.
func startGuarded(ctx context.Context, start gate.BatchStarter, starting *sync.Mutex, ds []gate.Delivery) (func() []error, *panicked) {
	starting.Lock()
	defer starting.Unlock()
	return guard(func() func() []error { return start(ctx, ds) })
}

// heartbeat tells JetStream every AckWait/3 that the messages of a batch
// are still in hand (InProgress), so that it does not hand them to another
// gate while their batch is slow, until a deadline: HandleTimeout bounds
// how long a batch keeps its messages. A heartbeat that fails (the
// connection is gone) is not retried: the message comes back after
// AckWait, as it must when its gate is gone.
type heartbeat struct {
	mu    sync.Mutex
	msgs  []jetstream.Msg // the messages not yet settled
	until time.Time
	every time.Duration
	t     *time.Timer
}

// heartbeat starts the heartbeat of msgs, until the deadline.
func (b *Bus) heartbeat(msgs []jetstream.Msg, until time.Time) *heartbeat {
	h := &heartbeat{msgs: msgs, until: until, every: max(b.opts.AckWait/3, time.Millisecond)}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.t = time.AfterFunc(h.every, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.msgs) == 0 || time.Now().After(h.until) {
			return
		}
		b.log.Debug("batch still in hand; telling JetStream it is in progress", "first_seq", seqOf(h.msgs[0]), "messages", len(h.msgs))
		for _, m := range h.msgs {
			_ = m.InProgress()
		}
		h.t.Reset(h.every)
	})
	return h
}

// settling drops the first n messages, about to be settled: once it
// returns no heartbeat is sent for them, so none can follow an ack or a
// delayed nak (whose delay a heartbeat would cut short).
func (h *heartbeat) settling(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = h.msgs[min(n, len(h.msgs)):]
}

// extend moves the deadline, and starts the heartbeat again if it had
// passed.
func (h *heartbeat) extend(until time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.until = until
	h.t.Reset(h.every)
}

// stop ends the heartbeat: none is sent once it returns.
func (h *heartbeat) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.msgs = nil
	h.t.Stop()
}

func seqOf(m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}

// HeaderTZ is the inbound header naming the recipient's IANA time zone
// (gate.TZHeader), read into gate.Delivery.HeaderTZ; it overrides the
// scene's tz. Unlike the Header constants in bus.go, the gate reads it and
// never sets it.
const HeaderTZ = gate.TZHeader

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
		d.HeaderTZ = h.Get(HeaderTZ)
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
