package main

import (
	"bytes"
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
// each message, the time since the stream stored it. It counts distinct
// stream sequences, not ack messages: an ack seen twice for one sequence (a
// redelivery acked again, say) is one outcome, and its latency is the first
// ack's.
type ackWatch struct {
	stream, consumer string
	sub              *nats.Subscription

	mu       sync.Mutex
	seqs     seqTally // for the watcher's life, so a late repeat of an earlier phase counts nowhere
	lat      []time.Duration
	outcomes int // distinct sequences acked or terminated: messages whose outcome is durable
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

// ackSubject is what the subject of an acknowledgement says.
type ackSubject struct {
	stream, consumer string
	seq              uint64 // the message's stream sequence
	stored           int64  // when the stream stored it, Unix ns
}

// parseAckSubject reads
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>, or
// the v2 form with domain and account hash after ACK (and a token at the
// end).
func parseAckSubject(subject string) (ackSubject, bool) {
	var tok [14]string
	n, rest := 0, subject
	for n < len(tok) {
		t, r, more := strings.Cut(rest, ".")
		tok[n], rest = t, r
		n++
		if !more {
			break
		}
	}
	if n < 2 || tok[0] != "$JS" || tok[1] != "ACK" {
		return ackSubject{}, false
	}
	var a ackSubject
	var seq, ts string
	switch {
	case n == 9:
		a.stream, a.consumer, seq, ts = tok[2], tok[3], tok[5], tok[7]
	case n >= 11:
		a.stream, a.consumer, seq, ts = tok[4], tok[5], tok[7], tok[9]
	default:
		return ackSubject{}, false
	}
	var err1, err2 error
	a.seq, err1 = strconv.ParseUint(seq, 10, 64)
	a.stored, err2 = strconv.ParseInt(ts, 10, 64)
	return a, err1 == nil && err2 == nil
}

// ackKind is what an acknowledgement's body does to its message.
type ackKind int

const (
	ackOther   ackKind = iota // +WPI (in progress) and anything unknown
	ackOutcome                // +ACK (or empty), +NXT, +TERM: the message is done
	ackNak                    // -NAK: handed back for redelivery
)

func kindOfAck(body []byte) ackKind {
	switch {
	case len(body) == 0 || bytes.HasPrefix(body, []byte("+ACK")) || bytes.HasPrefix(body, []byte("+TERM")) || bytes.HasPrefix(body, []byte("+NXT")):
		return ackOutcome
	case bytes.HasPrefix(body, []byte("-NAK")):
		return ackNak
	}
	return ackOther
}

// seqTally counts distinct stream sequences.
type seqTally struct {
	seen    map[uint64]struct{}
	repeats int // sequences added again
}

// add records seq and reports whether it is new.
func (t *seqTally) add(seq uint64) bool {
	if t.seen == nil {
		t.seen = map[uint64]struct{}{}
	}
	if _, ok := t.seen[seq]; ok {
		t.repeats++
		return false
	}
	t.seen[seq] = struct{}{}
	return true
}

func (w *ackWatch) onAck(m *nats.Msg) {
	now := time.Now()
	a, ok := parseAckSubject(m.Subject)
	if !ok || a.stream != w.stream || a.consumer != w.consumer {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch kindOfAck(m.Data) {
	case ackOutcome:
		if !w.seqs.add(a.seq) {
			return
		}
		w.outcomes++
		w.lat = append(w.lat, now.Sub(time.Unix(0, a.stored)))
		w.last = now
		if w.outcomes == w.target {
			close(w.reached)
		}
	case ackNak:
		w.naks++
	}
}

// expect starts a phase: it forgets what the last phase saw (but not which
// sequences were acked) and returns a channel closed once n more distinct
// sequences have been acked.
func (w *ackWatch) expect(n int) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lat = make([]time.Duration, 0, n)
	w.outcomes, w.naks, w.target, w.seqs.repeats = 0, 0, n, 0
	w.reached = make(chan struct{})
	return w.reached
}

// seen returns what the phase saw.
func (w *ackWatch) seen() (lat []time.Duration, outcomes, naks, repeats int, last time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lat, w.outcomes, w.naks, w.seqs.repeats, w.last
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
