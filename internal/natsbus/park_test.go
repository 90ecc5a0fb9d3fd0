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

// Parking is idempotent per Nats-Msg-Id when the message had one, even
// under two GATE_IN sequences, and per sequence when it had none.
func TestDeadLetterOncePerMessage(t *testing.T) {
	b := newBus(t.Context(), t)
	withID := nats.Header{jetstream.MsgIDHeader: []string{"m-1"}}
	for _, p := range []struct {
		hdr nats.Header
		seq uint64
	}{{withID, 10}, {withID, 42}, {nil, 7}, {nil, 7}, {nil, 8}} {
		if err := b.DeadLetter(t.Context(), StreamIn, []byte("not json"), p.hdr, p.seq, "not JSON"); err != nil {
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
		"GATE_REFUND:11":           "GATE_REFUND 11",
		"GATE_REFUND:id:r-7":       "GATE_REFUND 12",
		"GATE_IN:id:refund:seq:11": "GATE_IN 1",
		"GATE_IN:id:refund:id:r-7": "GATE_IN 2",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("GATE_DEAD holds %v (Nats-Msg-Id: Gate-Stream Gate-Stream-Seq), want %v", got, want)
	}
}

// DeadLetterID gives every (stream, id, sequence) a name of its own, ids
// holding colons or looking like another's name included.
func TestDeadLetterIDsAreDistinct(t *testing.T) {
	for _, s := range []string{StreamIn, StreamRefund} {
		if strings.Contains(s, ":") {
			t.Fatalf("stream name %q holds a colon: DeadLetterID's names would be ambiguous", s)
		}
	}
	type key struct {
		stream, id string
		seq        uint64
	}
	seen := map[string]key{}
	for _, stream := range []string{StreamIn, StreamRefund} {
		for _, id := range []string{"", "11", "id:11", ":11", "GATE_REFUND:11", "refund:seq:11", "GATE_IN:id:x", "a:b:c"} {
			for _, seq := range []uint64{0, 11} {
				if id != "" && seq == 11 {
					continue // an id names the dead letter whatever the sequence
				}
				k := key{stream, id, seq}
				name := DeadLetterID(stream, id, seq)
				if other, ok := seen[name]; ok {
					t.Errorf("%+v and %+v share the dead-letter name %q", k, other, name)
				}
				seen[name] = k
			}
		}
	}
	if got := DeadLetterID(StreamIn, "m-1", 3); got != "GATE_IN:id:m-1" {
		t.Errorf("DeadLetterID(GATE_IN, m-1) = %q, want the name earlier versions gave", got)
	}
	if got := DeadLetterID(StreamIn, "", 3); got != "GATE_IN:3" {
		t.Errorf("DeadLetterID(GATE_IN, seq 3) = %q, want the name earlier versions gave", got)
	}
}
