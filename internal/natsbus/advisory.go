package natsbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ReasonMaxDeliveries is the Gate-Error of a message parked because it
// exhausted the consumer's MaxDeliver.
const ReasonMaxDeliveries = "max deliveries exhausted"

// MaxDeliveriesSubject is where JetStream announces that a message of
// GATE_IN exhausted the gate consumer's MaxDeliver. JetStream then stops
// delivering the message but keeps it in the stream, where nobody would see
// it again.
const MaxDeliveriesSubject = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + StreamIn + "." + ConsumerName

// ParkOptions tune ParkExhausted.
type ParkOptions struct {
	// SweepEvery is how often the stream is searched for exhausted messages
	// whose advisory was missed (1m). The first search runs at once.
	SweepEvery time.Duration
	// SweepMax bounds the messages one search looks at (1000).
	SweepMax int
	Metrics  *metrics.Metrics
	// OnParked, if set, is called with each message once it is on the dead
	// letter and before it leaves GATE_IN (Seq is its GATE_IN sequence); an
	// error leaves it in GATE_IN, to be parked again (idempotently) by the
	// next advisory or sweep. The gate counts parked messages with it.
	OnParked func(ctx context.Context, d gate.Delivery) error
}

// maxDeliveriesAdvisory is the part of JetStream's advisory the gate reads.
type maxDeliveriesAdvisory struct {
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// ParkExhausted moves every GATE_IN message that exhausts its deliveries to
// the dead-letter subject, with Gate-Error "max deliveries exhausted", and
// then deletes it from GATE_IN. It runs until ctx ends and returns nil then.
//
// It listens to MaxDeliveriesSubject in a queue group, so that of several
// gate processes one parks each message. An advisory is a plain NATS
// message, lost when no gate listens (every gate down, NATS reconnecting),
// so a sweep also looks for exhausted messages at start and every
// SweepEvery. Parking is idempotent: the dead letter is de-duplicated per
// GATE_IN sequence, and a message already gone is left alone.
func (b *Bus) ParkExhausted(ctx context.Context, o ParkOptions) error {
	if o.SweepEvery <= 0 {
		o.SweepEvery = time.Minute
	}
	if o.SweepMax <= 0 {
		o.SweepMax = 1000
	}
	// The callback must not block the connection's dispatcher; a full
	// queue loses nothing, as the sweep finds what it drops.
	seqs := make(chan uint64, 1024)
	sub, err := b.nc.QueueSubscribe(MaxDeliveriesSubject, "gate-park", func(msg *nats.Msg) {
		var a maxDeliveriesAdvisory
		if err := json.Unmarshal(msg.Data, &a); err != nil || a.StreamSeq == 0 {
			b.log.Warn("unreadable max-deliveries advisory", "err", err, "data", string(msg.Data))
			return
		}
		b.log.Debug("max-deliveries advisory", "seq", a.StreamSeq, "deliveries", a.Deliveries)
		select {
		case seqs <- a.StreamSeq:
		default:
			b.log.Warn("park queue full; the sweep will park the message", "seq", a.StreamSeq)
		}
	})
	if err != nil {
		return fmt.Errorf("subscribe to %s: %w", MaxDeliveriesSubject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	sweep := time.NewTimer(0)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case seq := <-seqs:
			if err := b.park(ctx, seq, o); err != nil {
				b.log.Error("parking an exhausted message failed; the sweep will retry", "seq", seq, "err", err)
			}
		case <-sweep.C:
			if n, err := b.sweep(ctx, o); err != nil {
				b.log.Warn("sweep for exhausted messages failed", "err", err)
			} else if n > 0 {
				b.log.Warn("sweep parked exhausted messages whose advisory was missed", "count", n)
			}
			sweep.Reset(o.SweepEvery)
		}
	}
}

// park copies message seq of GATE_IN to the dead letter and deletes it.
func (b *Bus) park(ctx context.Context, seq uint64, o ParkOptions) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := b.js.Stream(ctx, StreamIn)
	if err != nil {
		return fmt.Errorf("park seq %d: stream %s: %w", seq, StreamIn, err)
	}
	raw, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // acked at the last moment, or parked by another gate
	}
	if err != nil {
		return fmt.Errorf("park seq %d: get: %w", seq, err)
	}
	if err := b.DeadLetter(ctx, StreamIn, raw.Data, raw.Header, seq, ReasonMaxDeliveries); err != nil {
		return fmt.Errorf("park: %w", err)
	}
	if o.OnParked != nil {
		d := deliveryOf(raw.Data, raw.Header, time.Now())
		d.Seq = seq
		if err := o.OnParked(ctx, d); err != nil {
			return fmt.Errorf("park seq %d: %w", seq, err)
		}
	}
	if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("park seq %d: delete from %s: %w", seq, StreamIn, err)
	}
	if o.Metrics != nil {
		o.Metrics.Parked.Inc()
	}
	b.log.Warn("message parked on dead letter", "seq", seq, "subject", b.opts.DeadSubject, "reason", ReasonMaxDeliveries)
	return nil
}

// sweep parks the exhausted messages it can prove exhausted, and reports
// how many. The proof needs a moment when no message is pending
// acknowledgement: then every message still in GATE_IN at or below the
// consumer's last delivered sequence was delivered and will never be
// delivered again. (Pending counts naked and expired deliveries too.) A
// busy gate rarely has such a moment; the advisory covers it then.
func (b *Bus) sweep(ctx context.Context, o ParkOptions) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cons, err := b.js.Consumer(ctx, StreamIn, ConsumerName)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("consumer %s: %w", ConsumerName, err)
	}
	info := cons.CachedInfo()
	if info.NumAckPending > 0 || info.AckFloor.Stream >= info.Delivered.Stream {
		return 0, nil
	}
	s, err := b.js.Stream(ctx, StreamIn)
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", StreamIn, err)
	}
	parked := 0
	for seq, n := info.AckFloor.Stream+1, 0; seq <= info.Delivered.Stream && n < o.SweepMax; n++ {
		// The next message at or after seq, skipping acked ones.
		raw, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(b.opts.InSubject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return parked, fmt.Errorf("next message from seq %d: %w", seq, err)
		}
		if raw.Sequence > info.Delivered.Stream {
			break
		}
		if err := b.park(ctx, raw.Sequence, o); err != nil {
			return parked, err
		}
		parked++
		seq = raw.Sequence + 1
	}
	return parked, nil
}
