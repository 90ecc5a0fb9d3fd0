package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The producer's side of a run: the messages published to the gate's
// inbound stream, and that stream.

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
