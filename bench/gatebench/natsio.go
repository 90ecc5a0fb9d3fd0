package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
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
