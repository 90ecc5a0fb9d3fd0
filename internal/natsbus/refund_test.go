package natsbus

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/nats-io/nats.go/jetstream"
)

// scriptedRefunder answers refunds by id: "ok" is refunded, "refused"
// never decided, "flaky" fails transiently on its first try, "boom" panics;
// a body that is not {"id": …} is invalid. It records every id it is asked.
type scriptedRefunder struct {
	mu    sync.Mutex
	asked []string
	flaky int // tries of "flaky"
}

func (s *scriptedRefunder) Refund(_ context.Context, body []byte, src gate.RefundSource) (gate.RefundResult, error) {
	id, err := gate.ParseRefund(body)
	if err != nil {
		return gate.RefundResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, id+"/"+string(src))
	if id == "flaky" {
		s.flaky++
	}
	switch {
	case id == "boom":
		panic("refund of boom")
	case id == "refused":
		return gate.RefundResult{}, fmt.Errorf("refund: %w", gate.ErrNeverDecided)
	case id == "flaky" && s.flaky == 1:
		return gate.RefundResult{}, fmt.Errorf("refund: %w", gate.ErrUnavailable)
	}
	return gate.RefundResult{Refund: gate.Refund{MessageID: id}}, nil
}

func (s *scriptedRefunder) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.asked...)
}

// runRefunds runs ConsumeRefunds until the test ends.
func runRefunds(t *testing.T, b *Bus, ref gate.Refunder, o RefundOptions) {
	t.Helper()
	runUntilEnd(t, "ConsumeRefunds", func(ctx context.Context) error { return b.ConsumeRefunds(ctx, ref, o) })
}

// TestConsumeRefunds: refunds on gate.refund are handed over with source
// nats and settled by their verdict: done and refused ones acked, a
// transient failure retried until it succeeds, a malformed body parked on
// the dead letter with its reason, under a name of its own.
func TestConsumeRefunds(t *testing.T) {
	nc := startServer(t)
	b, err := New(t.Context(), nc, Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ref := &scriptedRefunder{}
	runRefunds(t, b, ref, RefundOptions{RetryMin: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond})

	js := b.JetStream()
	// The consumer creates the stream: wait for it, as a sender would
	// find it created by a gate.
	var stream jetstream.Stream
	for deadline := time.Now().Add(10 * time.Second); ; {
		if stream, err = js.Stream(t.Context(), StreamRefund); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream %s not created: %v", StreamRefund, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, body := range []string{`{"id":"ok"}`, `{"id":"refused"}`, `{"id":"flaky"}`, `not json`} {
		if _, err := js.Publish(t.Context(), DefaultRefundSubject, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	// A work queue: empty once every refund is acked or terminated.
	for deadline := time.Now().Add(20 * time.Second); ; {
		info, err := stream.Info(t.Context())
		if err == nil && info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GATE_REFUND still holds refunds: %+v, %v; asked %v", info, err, ref.calls())
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := []string{"ok/nats", "refused/nats", "flaky/nats", "flaky/nats"}
	if got := ref.calls(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("refunds asked %v, want %v (the flaky one twice)", got, want)
	}
	dead, err := js.Stream(t.Context(), StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	m, err := dead.GetLastMsgForSubject(t.Context(), "gate.dead")
	if err != nil {
		t.Fatalf("no dead letter for the malformed refund: %v", err)
	}
	if string(m.Data) != "not json" || m.Header.Get(HeaderError) == "" || m.Header.Get(jetstream.MsgIDHeader) != DeadLetterID(StreamRefund, 4, []byte("not json")) {
		t.Errorf("dead letter %q, headers %v; want the body, a Gate-Error and a Nats-Msg-Id naming refund 4", m.Data, m.Header)
	}
}

// TestRefundThatPanicsIsParked: a refund whose handling panics does not
// end the process (the work loop of gate.in recovers it): asked again alone,
// it panics again and is parked on the dead letter with the panic as its
// reason, and the refunds after it are handled.
func TestRefundThatPanicsIsParked(t *testing.T) {
	b, err := New(t.Context(), startServer(t), Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	js := b.JetStream()
	for _, body := range []string{`{"id":"boom"}`, `{"id":"ok"}`} {
		if _, err := js.Publish(t.Context(), DefaultRefundSubject, []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	ref := &scriptedRefunder{}
	runRefunds(t, b, ref, RefundOptions{})
	for deadline := time.Now().Add(20 * time.Second); len(ref.calls()) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("refunds asked %v, want boom twice and ok", ref.calls())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, want := fmt.Sprint(ref.calls()), "[boom/nats boom/nats ok/nats]"; got != want {
		t.Errorf("refunds asked %s, want %s", got, want)
	}
	dead := waitDead(t, js, 1)
	if string(dead[0].Data) != `{"id":"boom"}` || dead[0].Header.Get(HeaderError) != PanicReason("refund of boom") ||
		dead[0].Header.Get(jetstream.MsgIDHeader) != DeadLetterID(StreamRefund, 1, dead[0].Data) {
		t.Errorf("dead letter %q, headers %v; want the refund that panicked, parked with its panic", dead[0].Data, dead[0].Header)
	}
}

// TestRefundSubject: New creates GATE_REFUND on the bus's refund subject,
// and ConsumeRefunds reads refunds there.
func TestRefundSubject(t *testing.T) {
	b, err := New(t.Context(), startServer(t), Options{RefundSubject: "ops.refund"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	js := b.JetStream()
	stream, err := js.Stream(t.Context(), StreamRefund)
	if err != nil {
		t.Fatalf("New did not create %s: %v", StreamRefund, err)
	}
	if subj := stream.CachedInfo().Config.Subjects; len(subj) != 1 || subj[0] != "ops.refund" {
		t.Fatalf("%s captures %v, want [ops.refund]", StreamRefund, subj)
	}
	ref := &scriptedRefunder{}
	runRefunds(t, b, ref, RefundOptions{})
	if _, err := js.Publish(t.Context(), "ops.refund", []byte(`{"id":"ok"}`)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); len(ref.calls()) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the refund on ops.refund was not handed over within 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := ref.calls(); fmt.Sprint(got) != "[ok/nats]" {
		t.Errorf("refunds asked %v, want [ok/nats]", got)
	}
}

// TestNewRejectsARefundStreamWithoutItsSubject: an existing GATE_REFUND
// that does not capture the refund subject stops New, as GATE_IN's does,
// rather than leaving refunds published where no stream keeps them.
func TestNewRejectsARefundStreamWithoutItsSubject(t *testing.T) {
	nc := startServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: StreamRefund, Subjects: []string{"other.refund"}}); err != nil {
		t.Fatal(err)
	}
	_, err = New(t.Context(), nc, Options{}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "GATE_REFUND exists but does not capture subject gate.refund") {
		t.Fatalf("err = %v, want a clear misconfiguration error", err)
	}
	if _, err := New(t.Context(), nc, Options{RefundSubject: "other.refund"}, slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("New with the stream's subject: %v", err)
	}
}
