package natsbus

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ensureRetry is how long a work loop waits before it tries again to
// create a consumer it could not.
const ensureRetry = 2 * time.Second

// work is one durable consumer's work loop. GATE_IN's (ConsumeStaged) and
// GATE_REFUND's (ConsumeRefunds) are this one loop with their own consumer,
// handler and words: the handler decides, and the loop alone settles each
// message from the handler's error (settle), as watermill's Router does.
type work struct {
	b *Bus
	// consumer names the durable consumer in the logs.
	consumer string
	// noun is what one message is in the logs: "message", "refund".
	noun string
	// ensure creates or updates the consumer, and what it needs.
	ensure func(ctx context.Context) (jetstream.Consumer, error)
	start  gate.BatchStarter
	// pull is how many messages the iterator asks for ahead of the
	// batches in hand.
	pull int
	// stream is the consumer's stream, which names its dead letters
	// (DeadLetterID).
	stream string
	// lag reports the consumer's pending counts to o.Metrics.
	lag bool
	o   ConsumeOptions // defaults applied
	// starting keeps starts one at a time: the loop's, and a panicked
	// batch's retries.
	starting sync.Mutex
}

// run works until ctx is cancelled, (re)creating the consumer whenever it
// is missing: a NATS outage or a deleted consumer pauses the work instead
// of ending it.
//
// While a JetStream cluster elects a leader (clusterPending), it asks again
// sooner (250ms, doubling up to ensureRetry) and says that it waits, on the
// first attempt and every tenth, rather than logging each as an error.
func (w *work) run(ctx context.Context) {
	failed := 0
	for {
		cons, err := w.ensure(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failed++
			delay := ensureRetry
			switch {
			case !clusterPending(err):
				w.b.log.Error("consumer unavailable, retrying", "consumer", w.consumer, "err", err)
			default:
				delay = min(ensureRetry, 250*time.Millisecond<<min(failed-1, 4))
				if failed == 1 || failed%10 == 0 {
					w.b.log.Warn("waiting for the nats cluster (leader elections)", "for", "consumer "+w.consumer, "attempt", failed, "err", err)
				}
			}
			if !sleep(ctx, delay) {
				return
			}
			continue
		}
		if failed > 0 {
			w.b.log.Info("consumer ready", "consumer", w.consumer, "attempts", failed+1)
			failed = 0
		}
		lagCtx, stopLag := context.WithCancel(ctx)
		if w.lag && w.o.Metrics != nil {
			go w.b.watchLag(lagCtx, cons, w.o.Metrics)
		}
		restart := w.consume(ctx, cons)
		stopLag()
		if !restart {
			return
		}
		w.b.log.Warn("consumer lost, recreating it", "consumer", w.consumer)
	}
}

// consume runs one message iterator. It reports whether the consumer
// vanished and must be recreated.
func (w *work) consume(ctx context.Context, cons jetstream.Consumer) (restart bool) {
	it, err := cons.Messages(jetstream.PullMaxMessages(w.pull), jetstream.PullHeartbeat(5*time.Second))
	if err != nil {
		return true
	}
	msgs := make(chan jetstream.Msg, w.o.Batch)
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
				w.b.log.Debug("pull", "consumer", w.consumer, "err", err)
			}
		}
	}()
	stop := context.AfterFunc(ctx, it.Drain)
	defer stop()

	slots := make(chan struct{}, w.o.InFlight)
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
				return ctx.Err() == nil
			default:
				return false
			}
		}
		batch := fill(m, msgs, w.o.Batch, w.o.BatchWait)
		w.handle(batch, &inFlight, slots)
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
func (w *work) handle(batch []jetstream.Msg, inFlight *sync.WaitGroup, slots chan struct{}) {
	// Handling never uses the consume context: a shutdown lets the batches
	// in hand finish, bounded by HandleTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), w.o.HandleTimeout)
	now := time.Now()
	beat := w.b.heartbeat(batch, now.Add(w.o.HandleTimeout))
	ds := make([]gate.Delivery, len(batch))
	for i, m := range batch {
		d := deliveryOf(m.Data(), m.Headers(), now)
		if md, err := m.Metadata(); err == nil {
			d.Seq, d.NumDelivered = md.Sequence.Stream, md.NumDelivered
		}
		ds[i] = d
	}
	finish, panicked := w.startGuarded(ctx, ds)
	settle := func() {
		defer func() { beat.stop(); cancel(); <-slots }()
		var errs []error
		if panicked == nil {
			errs, panicked = guard(finish)
		}
		if panicked != nil {
			w.b.log.Error("the gate panicked on a batch; deciding its messages one at a time",
				"consumer", w.consumer, "first_seq", ds[0].Seq, "messages", len(batch), "panic", panicked.value)
			w.decideEach(batch, ds, beat)
			return
		}
		beat.stop()
		for i, m := range batch {
			var err error
			if i < len(errs) {
				err = errs[i]
			}
			w.settle(ctx, m, ds[i], err)
		}
	}
	if w.o.InFlight == 1 {
		settle()
		return
	}
	inFlight.Go(settle)
}

// HeaderTZ is the inbound header naming the recipient's IANA time zone
// (gate.TZHeader), read into gate.Delivery.HeaderTZ; it overrides the
// scene's tz. Unlike the Header constants in bus.go, the gate reads it and
// never sets it.
const HeaderTZ = gate.TZHeader

// deliveryOf is a message's data and headers as the handler sees them,
// with the producer's headers the gate reads (for the header fast path,
// gate.ParseDelivery), and the first of them given twice, which the gate
// refuses (gate.Delivery.ReadHeaders). A message without headers has a nil
// header map, which costs nothing to read.
func deliveryOf(data []byte, h nats.Header, now time.Time) gate.Delivery {
	d := gate.Delivery{Data: data, NumDelivered: 1, ReceivedAt: now}
	d.ReadHeaders(h)
	return d
}

// decideEach decides the messages of a batch whose handler panicked one at
// a time, within a handling of their own (bounded by HandleTimeout, the
// batch's heartbeat extended to it), and parks each that makes the handler
// panic alone. Each is handed over as a redelivery, which it is to the
// handler: one that the batch decided before the panic is looked up, not
// decided twice.
func (w *work) decideEach(batch []jetstream.Msg, ds []gate.Delivery, beat *heartbeat) {
	ctx, cancel := context.WithTimeout(context.Background(), w.o.HandleTimeout)
	defer cancel()
	beat.extend(time.Now().Add(w.o.HandleTimeout))
	for i, m := range batch {
		again := ds[i]
		again.NumDelivered = max(again.NumDelivered, 1) + 1
		finish, panicked := w.startGuarded(ctx, []gate.Delivery{again})
		var errs []error
		if panicked == nil {
			errs, panicked = guard(finish)
		}
		var err error
		switch {
		case panicked != nil:
			w.b.log.Error("the gate panicked on a "+w.noun+"; parking it", "seq", ds[i].Seq, "panic", panicked.value, "stack", string(panicked.stack))
			if w.o.Metrics != nil {
				w.o.Metrics.Panicked.Inc()
			}
			err = &gate.InvalidError{Reason: PanicReason(panicked.value)}
		case len(errs) > 0:
			err = errs[0]
		}
		beat.settling(1)
		w.settle(ctx, m, ds[i], err)
	}
}

// startGuarded starts a batch, one start at a time.
func (w *work) startGuarded(ctx context.Context, ds []gate.Delivery) (func() []error, *panicked) {
	w.starting.Lock()
	defer w.starting.Unlock()
	return guard(func() func() []error { return w.start(ctx, ds) })
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

// settle is the one place where a handler's outcome for one message becomes
// JetStream's acknowledgement, by the error's class (gate.Classify):
//   - none: Ack. The effect is durable and idempotent, so a redelivery
//     after a lost ack is recognised as decided.
//   - not found, conflict: a refusal, which asking again gets again:
//     logged, and acked.
//   - park: the message can never be decided: onto the dead letter with
//     its reason (Gate-Error), then Term.
//   - any other (unavailable, invalid, internal): NakWithDelay, the delay
//     doubling with each delivery (Backoff), so that nothing is lost while
//     a dependency is down. An invalid request or an error nothing
//     classifies is a fault of the gate (the stores' own refusals of a
//     message's data come as park), which a fix and a restart may cure.
//     A forward that a full GATE_OUT refused (*FullError) is one of these:
//     retried, with the stream's own log line (once a minute) rather than
//     one per message.
func (w *work) settle(ctx context.Context, m jetstream.Msg, d gate.Delivery, err error) {
	switch gate.Classify(err) {
	case gate.ClassNone:
		w.ack(m, d, "recognised as decided")
	case gate.ClassNotFound, gate.ClassConflict:
		w.b.log.Warn(w.noun+" refused", "seq", d.Seq, "err", err)
		w.ack(m, d, "refused again")
	case gate.ClassPark:
		w.park(ctx, m, d, gate.InvalidReason(err))
	default:
		if !isFullError(err) {
			w.b.log.Warn(w.noun+" not decided, will retry", "seq", d.Seq, "delivery", d.NumDelivered, "err", err)
		}
		w.nak(m, d)
	}
}

// isFullError reports whether err wraps a *FullError, which Bus.full has
// logged already.
func isFullError(err error) bool {
	var full *FullError
	return errors.As(err, &full)
}

// ack acks m; if the ack is lost, the redelivery is then what says.
func (w *work) ack(m jetstream.Msg, d gate.Delivery, then string) {
	if err := m.Ack(); err != nil {
		w.b.log.Warn("ack failed; the "+w.noun+" will be redelivered and "+then, "seq", d.Seq, "err", err)
	}
}

// park puts m on the dead letter with reason and terminates it; if the
// dead letter cannot be written (GATE_DEAD down, or full), m is retried
// instead, so that it is never dropped unseen.
func (w *work) park(ctx context.Context, m jetstream.Msg, d gate.Delivery, reason string) {
	if err := w.b.DeadLetter(ctx, w.stream, d.Data, m.Headers(), d.Seq, reason); err != nil {
		if !isFullError(err) {
			w.b.log.Error("dead letter of a "+w.noun+" failed; will retry", "seq", d.Seq, "err", err)
		}
		w.nak(m, d)
		return
	}
	w.b.log.Warn(w.noun+" parked on dead letter", "seq", d.Seq, "subject", w.b.opts.DeadSubject, "reason", reason)
	if err := m.Term(); err != nil {
		w.b.log.Warn("term failed; the "+w.noun+" will be redelivered and parked again (deduplicated)", "seq", d.Seq, "err", err)
	}
}

// nak hands m back for a redelivery after Backoff.
func (w *work) nak(m jetstream.Msg, d gate.Delivery) {
	if w.o.Metrics != nil {
		w.o.Metrics.Redeliveries.Inc()
	}
	if err := m.NakWithDelay(Backoff(d.NumDelivered, w.o.RetryMin, w.o.RetryMax)); err != nil {
		w.b.log.Warn("nak failed; the "+w.noun+" will be redelivered after AckWait", "seq", d.Seq, "err", err)
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
