package natsbus

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// poisonHandler acks every message but "poison", which always meets a
// transient failure.
func poisonHandler(_ context.Context, batch []gate.Delivery) []error {
	errs := make([]error, len(batch))
	for i, d := range batch {
		if string(d.Data) == "poison" {
			errs[i] = gate.ErrUnavailable
		}
	}
	return errs
}

// newLimitedBus returns a bus on a fresh server whose consumer delivers a
// message at most maxDeliver times.
func newLimitedBus(t *testing.T, maxDeliver int) (*Bus, jetstream.JetStream) {
	t.Helper()
	b, err := New(t.Context(), startServer(t), Options{AckWait: 2 * time.Second, MaxDeliver: maxDeliver}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return b, b.JetStream()
}

// startConsume runs ConsumeStaged with the one-step handler h, one batch in
// flight, until the test ends or stop is called.
func startConsume(t *testing.T, b *Bus, h func(context.Context, []gate.Delivery) []error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- b.ConsumeStaged(ctx, oneStep(h), ConsumeOptions{InFlight: 1, RetryMin: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ConsumeStaged returned %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// startPark runs ParkExhausted until the test ends.
func startPark(t *testing.T, b *Bus, o ParkOptions) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.ParkExhausted(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ParkExhausted returned %v", err)
		}
	})
}

// waitDead waits until GATE_DEAD holds want messages and returns them.
func waitDead(t *testing.T, js jetstream.JetStream, want int) []*jetstream.RawStreamMsg {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := js.Stream(t.Context(), StreamDead)
		if err != nil {
			t.Fatal(err)
		}
		if n := int(s.CachedInfo().State.Msgs); n >= want {
			var out []*jetstream.RawStreamMsg
			for seq := uint64(1); len(out) < n && seq <= s.CachedInfo().State.LastSeq; seq++ {
				m, err := s.GetMsg(t.Context(), seq)
				if err == nil {
					out = append(out, m)
				}
			}
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("GATE_DEAD holds %d messages after 10s, want %d", s.CachedInfo().State.Msgs, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func checkParked(t *testing.T, dead []*jetstream.RawStreamMsg, poisonSeq uint64) {
	t.Helper()
	if len(dead) != 1 {
		t.Fatalf("got %d dead letters, want 1", len(dead))
	}
	d := dead[0]
	if got := d.Header.Get(HeaderError); got != ReasonMaxDeliveries {
		t.Errorf("Gate-Error = %q, want %q", got, ReasonMaxDeliveries)
	}
	if got, want := d.Header.Get(HeaderStreamSeq), strconv.FormatUint(poisonSeq, 10); got != want {
		t.Errorf("Gate-Stream-Seq = %q, want %q", got, want)
	}
	if string(d.Data) != "poison" {
		t.Errorf("dead letter data = %q, want the original bytes", d.Data)
	}
}

// A message that exhausts GATE_MAX_DELIVER is parked on gate.dead with its
// reason as soon as JetStream's advisory arrives, handed to OnParked, and
// deleted from GATE_IN, so the consumer's ack floor moves past it and later
// messages flow.
func TestExhaustedMessageIsParkedFromTheAdvisory(t *testing.T) {
	b, js := newLimitedBus(t, 3)
	m := metrics.New(prometheus.NewRegistry())
	onParked := make(chan gate.Delivery, 4)
	// A sweep period longer than the test: only the advisory can park.
	startPark(t, b, ParkOptions{SweepEvery: time.Hour, Metrics: m, OnParked: func(_ context.Context, d gate.Delivery) error {
		onParked <- d
		return nil
	}})
	startConsume(t, b, poisonHandler)
	var poisonSeq uint64
	for _, body := range []string{"ok-1", "poison", "ok-2"} {
		ack, err := js.Publish(t.Context(), "gate.in", []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		if body == "poison" {
			poisonSeq = ack.Sequence
		}
	}
	checkParked(t, waitDead(t, js, 1), poisonSeq)
	waitEmpty(t, js)
	if d := <-onParked; string(d.Data) != "poison" || d.Seq != poisonSeq {
		t.Errorf("OnParked got %q seq %d, want poison seq %d", d.Data, d.Seq, poisonSeq)
	}
	// The counter moves once the message is gone from GATE_IN, a moment
	// after the stream reads empty.
	var parked dto.Metric
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := m.Parked.Write(&parked)
		if err == nil && parked.GetCounter().GetValue() == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate_parked_messages_total = %v (err %v) after 10s, want 1", parked.GetCounter().GetValue(), err)
		}
	}
	// The consumer goes on: a later message is decided.
	if _, err := js.Publish(t.Context(), "gate.in", []byte("ok-3")); err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, js)
	cons, err := js.Consumer(t.Context(), StreamIn, ConsumerName)
	if err != nil {
		t.Fatal(err)
	}
	if info := cons.CachedInfo(); info.NumAckPending != 0 || info.AckFloor.Stream != info.Delivered.Stream {
		t.Errorf("consumer ack floor %d, delivered %d, ack pending %d; want the floor past the parked message",
			info.AckFloor.Stream, info.Delivered.Stream, info.NumAckPending)
	}
}

// When no gate listened as the advisory went out, the sweep at start finds
// the exhausted message and parks it.
func TestMissedAdvisoryIsParkedBySweep(t *testing.T) {
	b, js := newLimitedBus(t, 2)
	// The consumer exists before ConsumeStaged runs, so the wait below can read it.
	if _, err := b.EnsureConsumer(t.Context()); err != nil {
		t.Fatal(err)
	}
	stop := startConsume(t, b, poisonHandler)
	ack, err := js.Publish(t.Context(), "gate.in", []byte("poison"))
	if err != nil {
		t.Fatal(err)
	}
	// Wait until JetStream gave up on it: delivered twice, nothing pending.
	deadline := time.Now().Add(10 * time.Second)
	for {
		cons, err := js.Consumer(t.Context(), StreamIn, ConsumerName)
		if err != nil {
			t.Fatal(err)
		}
		if info := cons.CachedInfo(); info.Delivered.Stream == ack.Sequence && info.Delivered.Consumer >= 2 && info.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the poison message was not exhausted within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	s, err := js.Stream(t.Context(), StreamIn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetMsg(t.Context(), ack.Sequence); err != nil {
		t.Fatalf("the exhausted message should still be in GATE_IN before the sweep: %v", err)
	}
	startPark(t, b, ParkOptions{SweepEvery: time.Hour})
	checkParked(t, waitDead(t, js, 1), ack.Sequence)
	waitEmpty(t, js)
}

// A sweep parks nothing while messages are pending: it cannot tell an
// exhausted message from one waiting for its next delivery.
func TestSweepLeavesPendingMessagesAlone(t *testing.T) {
	b, js := newLimitedBus(t, 5)
	cons, err := b.EnsureConsumer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "gate.in", []byte("poison")); err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for msg := range batch.Messages() {
		if err := msg.NakWithDelay(time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	n, err := b.sweep(t.Context(), ParkOptions{SweepMax: 10})
	if err != nil || n != 0 {
		t.Fatalf("sweep parked %d (err %v) while a message waits for redelivery, want 0", n, err)
	}
	dead, err := js.Stream(t.Context(), StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	if got := dead.CachedInfo().State.Msgs; got != 0 {
		t.Errorf("GATE_DEAD holds %d messages, want 0", got)
	}
}

// When OnParked fails (the audit store is down), the message stays in
// GATE_IN, already on gate.dead, and is handed over again by the next
// attempt: a parked message is counted before it leaves GATE_IN.
func TestParkedMessageStaysUntilOnParkedSucceeds(t *testing.T) {
	b, js := newLimitedBus(t, 2)
	var calls atomic.Int32
	startPark(t, b, ParkOptions{SweepEvery: 300 * time.Millisecond, OnParked: func(context.Context, gate.Delivery) error {
		if calls.Add(1) == 1 {
			return gate.ErrUnavailable
		}
		return nil
	}})
	startConsume(t, b, poisonHandler)
	ack, err := js.Publish(t.Context(), "gate.in", []byte("poison"))
	if err != nil {
		t.Fatal(err)
	}
	checkParked(t, waitDead(t, js, 1), ack.Sequence)
	waitEmpty(t, js)
	if n := calls.Load(); n < 2 {
		t.Errorf("OnParked called %d times, want a failure then a success", n)
	}
	if dead := waitDead(t, js, 1); len(dead) != 1 {
		t.Errorf("%d dead letters after a retried park, want 1", len(dead))
	}
}
