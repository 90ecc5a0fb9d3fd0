package natsbus

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/antifatigue/gate/internal/gate"
)

// parkEvery is a handler that finds every message of its batch invalid, so
// the work loop parks each on the dead letter.
func parkEvery(_ context.Context, batch []gate.Delivery) []error {
	errs := make([]error, len(batch))
	for i := range errs {
		errs[i] = &gate.InvalidError{Reason: "not JSON"}
	}
	return errs
}

// Two different messages with one Nats-Msg-Id, published further apart
// than GATE_IN's duplicate window, are two messages to the gate: both are
// parked, and GATE_DEAD, whose own window is far longer (2h), keeps both.
// Before, both dead letters were named GATE_IN:id:<id>, and GATE_DEAD
// dropped the second, body and all. GATE_IN's window is shortened from 2m
// to JetStream's least (100ms) so that the test need not wait it out.
func TestDeadLettersOfOneIdAfterItsWindow(t *testing.T) {
	ctx := t.Context()
	b := newBus(ctx, t)
	js := b.JetStream()
	in, err := js.Stream(ctx, StreamIn)
	if err != nil {
		t.Fatal(err)
	}
	cfg := in.CachedInfo().Config
	cfg.Duplicates = 100 * time.Millisecond
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	runStaged(t, b, oneStep(parkEvery), ConsumeOptions{InFlight: 1})

	publish := func(body string) *jetstream.PubAck {
		t.Helper()
		m := nats.NewMsg(DefaultInSubject)
		m.Data = []byte(body)
		m.Header.Set(jetstream.MsgIDHeader, "order-42")
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	inEmpty := func() bool {
		s, err := js.Stream(ctx, StreamIn)
		return err == nil && s.CachedInfo().State.Msgs == 0
	}
	if ack := publish("first, not JSON"); ack.Duplicate {
		t.Fatal("the first message was taken for a duplicate")
	}
	waitFor(t, "the first message parked", inEmpty)
	// Each publish inside GATE_IN's window is dropped as a duplicate; the
	// first one past it is stored.
	waitFor(t, "GATE_IN to take order-42 again", func() bool { return !publish("second, not JSON either").Duplicate })
	waitFor(t, "the second message parked", inEmpty)

	dead, err := js.Stream(ctx, StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	var bodies, names []string
	for seq := uint64(1); seq <= dead.CachedInfo().State.LastSeq; seq++ {
		m, err := dead.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, string(m.Data))
		names = append(names, m.Header.Get(jetstream.MsgIDHeader))
	}
	if want := []string{"first, not JSON", "second, not JSON either"}; !slices.Equal(bodies, want) {
		t.Errorf("GATE_DEAD holds %q (Nats-Msg-Id %q), want both messages' dead letters %q", bodies, names, want)
	}
}
