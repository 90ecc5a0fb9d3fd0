package faulttest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/natsbus"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// busClient is the producers' and the downstream readers' side of NATS.
// It reconnects without end, so it survives a nats-server restart.
type busClient struct {
	t  testing.TB
	nc *nats.Conn
	js jetstream.JetStream
}

func newBusClient(t testing.TB, url string) *busClient {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name("faulttest"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(512), jetstream.WithPublishAsyncTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return &busClient{t: t, nc: nc, js: js}
}

// publish sends every message to gate.in, with its id as Nats-Msg-Id, and
// retries those whose publish was not acknowledged (GATE_IN de-duplicates
// a retry) until all are stored or ctx ends. acked counts the stored ones.
func (b *busClient) publish(ctx context.Context, msgs []message, acked *atomic.Int64) error {
	pending := make([]int, len(msgs))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("publish: %d of %d messages not stored: %w", len(pending), len(msgs), err)
		}
		futs := make([]jetstream.PubAckFuture, len(pending))
		var failed []int
		for k, i := range pending {
			m := nats.NewMsg("gate.in")
			m.Data = msgs[i].body()
			if msgs[i].ID != "" {
				m.Header.Set(jetstream.MsgIDHeader, msgs[i].ID)
			}
			f, err := b.js.PublishMsgAsync(m)
			if err != nil {
				failed = append(failed, i)
				continue
			}
			futs[k] = f
		}
		for k, f := range futs {
			if f == nil {
				continue
			}
			select {
			case <-f.Ok():
				if acked != nil {
					acked.Add(1)
				}
			case <-f.Err():
				failed = append(failed, pending[k])
			case <-ctx.Done():
				return fmt.Errorf("publish: %w", ctx.Err())
			}
		}
		pending = failed
		if len(pending) > 0 {
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}

// inFlight is how many messages wait in GATE_IN, undecided.
func (b *busClient) inFlight(ctx context.Context) (uint64, error) {
	s, err := b.js.Stream(ctx, natsbus.StreamIn)
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().State.Msgs, nil
}

// consumer returns the gate consumer's state.
func (b *busClient) consumer(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	c, err := b.js.Consumer(ctx, natsbus.StreamIn, natsbus.ConsumerName)
	if err != nil {
		return nil, err
	}
	return c.CachedInfo(), nil
}

// storedMsg is one message read back from a stream. Data keeps at most
// the first 4 KiB; Size is the full length.
type storedMsg struct {
	Seq    uint64
	Data   []byte
	Size   int
	Header nats.Header
	Time   time.Time
}

const keepBytes = 4 << 10

// read returns every message a stream holds, in order.
func (b *busClient) read(stream string) []storedMsg { return b.readWith(stream, false) }

// readHeaders is read without the bodies: Size comes from the
// Nats-Msg-Size header, Data is empty.
func (b *busClient) readHeaders(stream string) []storedMsg { return b.readWith(stream, true) }

func (b *busClient) readWith(stream string, headersOnly bool) []storedMsg {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := b.js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		b.t.Fatalf("stream %s: %v", stream, err)
	}
	total := int(s.CachedInfo().State.Msgs)
	if total == 0 {
		return nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{HeadersOnly: headersOnly})
	if err != nil {
		b.t.Fatalf("read %s: %v", stream, err)
	}
	out := make([]storedMsg, 0, total)
	for idle := 0; len(out) < total; {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			b.t.Fatalf("read %s: %v", stream, err)
		}
		n := len(out)
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				b.t.Fatalf("read %s: metadata: %v", stream, err)
			}
			data, size := m.Data(), len(m.Data())
			if headersOnly {
				size, _ = strconv.Atoi(m.Headers().Get(nats.MsgSize))
			}
			out = append(out, storedMsg{Seq: md.Sequence.Stream, Data: append([]byte(nil), data[:min(len(data), keepBytes)]...),
				Size: size, Header: m.Headers(), Time: md.Timestamp})
		}
		if len(out) == n {
			if idle++; idle > 5 {
				b.t.Fatalf("read %s: %d of %d messages, then nothing", stream, len(out), total)
			}
		}
	}
	return out
}
