package natsbus

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/antifatigue/gate/internal/gate"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Parking is idempotent per stored message, its stream sequence and body:
// parked twice, it is one dead letter. One id under two sequences is two
// messages, and two dead letters (TestDeadLettersOfOneIdAfterItsWindow).
func TestDeadLetterOncePerMessage(t *testing.T) {
	b := newBus(t.Context(), t)
	withID := nats.Header{jetstream.MsgIDHeader: []string{"m-1"}}
	for _, p := range []struct {
		hdr nats.Header
		seq uint64
	}{{withID, 10}, {withID, 10}, {withID, 42}, {nil, 7}, {nil, 7}, {nil, 8}} {
		if err := b.DeadLetter(t.Context(), StreamIn, []byte("not json"), p.hdr, p.seq, "not JSON"); err != nil {
			t.Fatal(err)
		}
	}
	s, err := b.JetStream().Stream(t.Context(), StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().State.Msgs; got != 4 {
		t.Fatalf("GATE_DEAD holds %d messages, want 4 (sequences 10, 42, 7 and 8, each once)", got)
	}
}

// A refund and a gate.in message parked never share a dead letter's name,
// whatever ids their senders chose: before, a refund with sequence 11
// became GATE_IN:id:refund:seq:11, as a message with id refund:seq:11 did,
// and GATE_DEAD dropped the second as a duplicate. Each dead letter names
// its stream in Gate-Stream.
func TestRefundAndMessageDeadLettersDoNotCollide(t *testing.T) {
	b := newBus(t.Context(), t)
	js := b.JetStream()
	publish := func(subject, id, body string) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Data = []byte(body)
		if id != "" {
			m.Header.Set(jetstream.MsgIDHeader, id)
		}
		if _, err := js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		publish(DefaultRefundSubject, "", `{"id":"ok"}`)
	}
	publish(DefaultRefundSubject, "", "not json")        // GATE_REFUND sequence 11
	publish(DefaultRefundSubject, "r-7", "not json")     // sequence 12, with a sender's id
	publish(DefaultInSubject, "refund:seq:11", "poison") // the names refunds had
	publish(DefaultInSubject, "refund:id:r-7", "poison")

	runRefunds(t, b, &scriptedRefunder{}, RefundOptions{})
	parkAll := oneStep(func(_ context.Context, batch []gate.Delivery) []error {
		errs := make([]error, len(batch))
		for i := range errs {
			errs[i] = &gate.InvalidError{Reason: "poison"}
		}
		return errs
	})
	runStaged(t, b, parkAll, ConsumeOptions{InFlight: 1})

	// Both are work queues: empty once every message is acked or parked.
	for _, name := range []string{StreamRefund, StreamIn} {
		waitFor(t, name+" empty", func() bool {
			s, err := js.Stream(t.Context(), name)
			return err == nil && s.CachedInfo().State.Msgs == 0
		})
	}
	s, err := js.Stream(t.Context(), StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for seq := uint64(1); seq <= s.CachedInfo().State.LastSeq; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		got[m.Header.Get(jetstream.MsgIDHeader)] = m.Header.Get(HeaderStream) + " " + m.Header.Get(HeaderStreamSeq)
	}
	want := map[string]string{
		DeadLetterID(StreamRefund, 11, []byte("not json")): "GATE_REFUND 11",
		DeadLetterID(StreamRefund, 12, []byte("not json")): "GATE_REFUND 12",
		DeadLetterID(StreamIn, 1, []byte("poison")):        "GATE_IN 1",
		DeadLetterID(StreamIn, 2, []byte("poison")):        "GATE_IN 2",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("GATE_DEAD holds %v (Nats-Msg-Id: Gate-Stream Gate-Stream-Seq), want %v", got, want)
	}
}

// DeadLetterID gives every (stream, sequence, body) a name of its own, and
// one stored message the same name each time.
func TestDeadLetterIDsAreDistinct(t *testing.T) {
	for _, s := range []string{StreamIn, StreamRefund} {
		if strings.Contains(s, ":") {
			t.Fatalf("stream name %q holds a colon: DeadLetterID's names would be ambiguous", s)
		}
	}
	type key struct {
		stream, body string
		seq          uint64
	}
	seen := map[string]key{}
	for _, stream := range []string{StreamIn, StreamRefund} {
		for _, body := range []string{"", "x", "y", "not json"} {
			for _, seq := range []uint64{0, 1, 11, 111} {
				k := key{stream, body, seq}
				name := DeadLetterID(stream, seq, []byte(body))
				if other, ok := seen[name]; ok {
					t.Errorf("%+v and %+v share the dead-letter name %q", k, other, name)
				}
				seen[name] = k
				if again := DeadLetterID(stream, seq, []byte(body)); again != name {
					t.Errorf("%+v named %q, then %q", k, name, again)
				}
			}
		}
	}
	if got := DeadLetterID(StreamIn, 3, []byte("x")); !strings.HasPrefix(got, "GATE_IN:3:") {
		t.Errorf("DeadLetterID(GATE_IN, 3) = %q, want it to start with its stream and sequence", got)
	}
}
