package natsbus

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/nats-io/nats.go/jetstream"
)

// scriptedRefunder answers refunds by id: "ok" is refunded, "refused"
// never decided, "flaky" fails transiently on its first try; a body that
// is not {"id": …} is invalid. It records every id it is asked.
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- b.ConsumeRefunds(ctx, ref, RefundOptions{RetryMin: 10 * time.Millisecond, RetryMax: 20 * time.Millisecond})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ConsumeRefunds: %v", err)
		}
	}()

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
	if string(m.Data) != "not json" || m.Header.Get(HeaderError) == "" || m.Header.Get(jetstream.MsgIDHeader) != StreamIn+":id:refund:seq:4" {
		t.Errorf("dead letter %q, headers %v; want the body, a Gate-Error and a Nats-Msg-Id naming refund 4", m.Data, m.Header)
	}
}
