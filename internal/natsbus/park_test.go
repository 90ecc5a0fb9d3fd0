package natsbus

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Parking is idempotent per Nats-Msg-Id when the message had one, even
// under two GATE_IN sequences, and per sequence when it had none.
func TestDeadLetterOncePerMessage(t *testing.T) {
	b := newBus(t.Context(), t)
	withID := nats.Header{jetstream.MsgIDHeader: []string{"m-1"}}
	for _, p := range []struct {
		hdr nats.Header
		seq uint64
	}{{withID, 10}, {withID, 42}, {nil, 7}, {nil, 7}, {nil, 8}} {
		if err := b.DeadLetter(t.Context(), []byte("not json"), p.hdr, p.seq, "not JSON"); err != nil {
			t.Fatal(err)
		}
	}
	s, err := b.JetStream().Stream(t.Context(), StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().State.Msgs; got != 3 {
		t.Fatalf("GATE_DEAD holds %d messages, want 3 (m-1 once, sequences 7 and 8)", got)
	}
}
