package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ackWatch sees every acknowledgement a consumer sends and measures, for
// each, the time since the stream stored the message.
type ackWatch struct {
	stream, consumer string
	sub              *nats.Subscription

	mu       sync.Mutex
	lat      []time.Duration
	outcomes int // acks and terms: messages whose outcome is durable
	naks     int
	last     time.Time
	target   int
	reached  chan struct{}
}

func watchAcks(nc *nats.Conn, stream, consumer string) (*ackWatch, error) {
	w := &ackWatch{stream: stream, consumer: consumer, reached: make(chan struct{})}
	sub, err := nc.Subscribe("$JS.ACK.>", w.onAck)
	if err != nil {
		return nil, fmt.Errorf("subscribe to acks: %w", err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, fmt.Errorf("ack subscription limits: %w", err)
	}
	w.sub = sub
	return w, nc.Flush()
}

// onAck parses $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>
// or the v2 form with domain and account hash after ACK.
func (w *ackWatch) onAck(m *nats.Msg) {
	now := time.Now()
	var tok [14]string
	n, rest := 0, m.Subject
	for n < len(tok) {
		t, r, more := strings.Cut(rest, ".")
		tok[n], rest = t, r
		n++
		if !more {
			break
		}
	}
	var stream, consumer, ts string
	switch {
	case n == 9:
		stream, consumer, ts = tok[2], tok[3], tok[7]
	case n >= 11:
		stream, consumer, ts = tok[4], tok[5], tok[9]
	default:
		return
	}
	if stream != w.stream || consumer != w.consumer {
		return
	}
	stored, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return
	}
	body := string(m.Data)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case body == "" || strings.HasPrefix(body, "+ACK") || strings.HasPrefix(body, "+TERM") || strings.HasPrefix(body, "+NXT"):
		w.outcomes++
		w.lat = append(w.lat, now.Sub(time.Unix(0, stored)))
		w.last = now
		if w.outcomes == w.target {
			close(w.reached)
		}
	case strings.HasPrefix(body, "-NAK"):
		w.naks++
	}
}

// expect starts a phase: it forgets what was seen and returns a channel
// closed once n outcomes have been seen.
func (w *ackWatch) expect(n int) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lat = make([]time.Duration, 0, n)
	w.outcomes, w.naks, w.target = 0, 0, n
	w.reached = make(chan struct{})
	return w.reached
}

// seen returns what the phase saw.
func (w *ackWatch) seen() (lat []time.Duration, outcomes, naks int, last time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lat, w.outcomes, w.naks, w.last
}

func (w *ackWatch) close() { _ = w.sub.Unsubscribe() }

// publisher publishes envelopes asynchronously, as fast as the server takes
// them or at a given rate. With headers set, each envelope goes with its
// producer headers (Nats-Msg-Id, Gate-Scene, Gate-Recipient, Gate-Priority),
// built per message as a producer does, and the gate takes its header fast
// path; else the body alone.
type publisher struct {
	js      jetstream.JetStream
	headers bool
	failed  atomic.Int64
}

func newPublisher(nc *nats.Conn, headers bool) (*publisher, error) {
	p := &publisher{headers: headers}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { p.failed.Add(1) }))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	p.js = js
	return p, nil
}

// publish sends msgs to subject, paced at rate messages per second (0: no
// pacing), and waits until the stream has stored all of it. It returns when
// the first message left. Messages without envelopes go without headers.
func (p *publisher) publish(ctx context.Context, subject string, msgs messages, rate float64) (time.Time, error) {
	start := time.Now()
	withHeaders := p.headers && msgs.envs != nil
	for i, d := range msgs.data {
		if rate > 0 && i%16 == 0 {
			due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			if wait := time.Until(due); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return start, ctx.Err()
				}
			}
		}
		m := &nats.Msg{Subject: subject, Data: d}
		if withHeaders {
			m.Header = msgs.envs[i].header()
		}
		if _, err := p.js.PublishMsgAsync(m, jetstream.WithStallWait(10*time.Second)); err != nil {
			return start, fmt.Errorf("publish %d: %w", i, err)
		}
	}
	select {
	case <-p.js.PublishAsyncComplete():
	case <-ctx.Done():
		return start, ctx.Err()
	}
	if n := p.failed.Swap(0); n > 0 {
		return start, fmt.Errorf("%d publishes failed", n)
	}
	return start, nil
}

// ensureWorkQueue creates a work-queue stream on subject, as GATE_IN is.
func ensureWorkQueue(ctx context.Context, js jetstream.JetStream, name, subject string) (jetstream.Stream, error) {
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage,
		Retention: jetstream.WorkQueuePolicy, Duplicates: 2 * time.Minute,
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil, fmt.Errorf("create stream %s: %w", name, err)
	}
	return s, nil
}
