package natsbus

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

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
