package natsbus

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startServer runs a real nats-server with JetStream in the test process,
// the embedded one, and connects to it as the gate does.
func startServer(t *testing.T) *nats.Conn {
	t.Helper()
	return startServerWith(t, EmbeddedOptions{})
}

// startServerWith is startServer with the subjects of o.
func startServerWith(t *testing.T, o EmbeddedOptions) *nats.Conn {
	t.Helper()
	o.Addr, o.StoreDir, o.GatePassword = "127.0.0.1:-1", t.TempDir(), testPassword
	ns, err := StartEmbedded(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := nats.Connect(ns.ClientURL(), EmbeddedGate(testPassword)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// oneStep is a handler that decides a batch in one step, as the tests of
// settling need, made the gate.BatchStarter ConsumeStaged takes: it decides
// at start, and its finish hands the outcomes over.
func oneStep(h func(context.Context, []gate.Delivery) []error) gate.BatchStarter {
	return func(ctx context.Context, batch []gate.Delivery) func() []error {
		errs := h(ctx, batch)
		return func() []error { return errs }
	}
}

// newBus is a Bus with the default options on a fresh embedded server.
func newBus(ctx context.Context, t *testing.T) *Bus {
	t.Helper()
	b, err := New(ctx, startServer(t), Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewCreatesStreams(t *testing.T) {
	nc := startServer(t)
	ctx := t.Context()
	b, err := New(ctx, nc, Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		stream, subject string
		retention       jetstream.RetentionPolicy
		dupes           time.Duration
	}{
		{StreamIn, "gate.in", jetstream.WorkQueuePolicy, 2 * time.Minute},
		{StreamOut, "gate.out", jetstream.LimitsPolicy, 2 * time.Hour},
		{StreamDead, "gate.dead", jetstream.LimitsPolicy, 2 * time.Hour},
	}
	for _, tt := range tests {
		s, err := b.JetStream().Stream(ctx, tt.stream)
		if err != nil {
			t.Fatalf("stream %s: %v", tt.stream, err)
		}
		cfg := s.CachedInfo().Config
		if cfg.Subjects[0] != tt.subject || cfg.Retention != tt.retention || cfg.Duplicates != tt.dupes {
			t.Errorf("%s: subjects %v retention %v duplicates %v; want %s %v %v", tt.stream, cfg.Subjects, cfg.Retention, cfg.Duplicates, tt.subject, tt.retention, tt.dupes)
		}
	}
	// A second process finds them and changes nothing.
	if _, err := New(ctx, nc, Options{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("second New: %v", err)
	}
}

// TestNewSetsOutDuplicates: a gate started with another duplicate window
// sets it on the existing GATE_OUT, whose messages stay.
func TestNewSetsOutDuplicates(t *testing.T) {
	nc := startServer(t)
	ctx := t.Context()
	b, err := New(ctx, nc, Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.JetStream().Publish(ctx, "gate.out", []byte("kept")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []time.Duration{10 * time.Minute, 3 * time.Hour} {
		b, err := New(ctx, nc, Options{OutDuplicates: want}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("New with a %s window: %v", want, err)
		}
		s, err := b.JetStream().Stream(ctx, StreamOut)
		if err != nil {
			t.Fatal(err)
		}
		info := s.CachedInfo()
		if info.Config.Duplicates != want || info.State.Msgs != 1 {
			t.Errorf("GATE_OUT after New with %s: duplicates %s, %d messages; want %s and the 1 kept", want, info.Config.Duplicates, info.State.Msgs, want)
		}
	}
}

func TestNewRejectsAStreamWithoutItsSubject(t *testing.T) {
	nc := startServer(t)
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: StreamIn, Subjects: []string{"other.in"}}); err != nil {
		t.Fatal(err)
	}
	_, err := New(t.Context(), nc, Options{}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "does not capture subject gate.in") {
		t.Fatalf("err = %v, want a clear misconfiguration error", err)
	}
}

func TestForwardIsIdempotentAndCarriesHeaders(t *testing.T) {
	ctx := t.Context()
	b := newBus(ctx, t)
	f := gate.Forward{MessageID: "m1", Scene: "s", RulesVersion: "v1", ShadowOf: gate.ActionSuppress, Data: []byte(`{"id":"m1"}`)}
	for range 2 {
		for i, err := range b.Forward(ctx, []gate.Forward{f}) {
			if err != nil {
				t.Fatalf("forward %d: %v", i, err)
			}
		}
	}
	s, _ := b.JetStream().Stream(ctx, StreamOut)
	if n := s.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("GATE_OUT holds %d messages after forwarding one id twice, want 1", n)
	}
	m, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{jetstream.MsgIDHeader: "m1", HeaderScene: "s", HeaderDecision: "forward", HeaderRulesVersion: "v1", HeaderShadow: "suppress"}
	for k, v := range want {
		if got := m.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if string(m.Data) != `{"id":"m1"}` {
		t.Errorf("data = %s, want the original bytes", m.Data)
	}
}

func TestForwardFailsWhenNATSIsGone(t *testing.T) {
	nc := startServer(t)
	b, err := New(t.Context(), nc, Options{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	errs := b.Forward(ctx, []gate.Forward{{MessageID: "m", Scene: "s", Data: []byte("{}")}})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), gate.ErrUnavailable.Error()) {
		t.Fatalf("err = %v, want a transient error", errs[0])
	}
}

func TestBackoff(t *testing.T) {
	lo, hi := 500*time.Millisecond, 30*time.Second
	for n, want := range map[uint64]time.Duration{0: lo, 1: lo, 2: time.Second, 3: 2 * time.Second, 7: 30 * time.Second, 100: 30 * time.Second} {
		if got := Backoff(n, lo, hi); got != want {
			t.Errorf("Backoff(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestConsumeSettlesEachMessage(t *testing.T) {
	nc := startServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	b, err := New(ctx, nc, Options{AckWait: 5 * time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	js := b.JetStream()
	for _, body := range []string{"ok", "bad", "retry"} {
		if _, err := js.Publish(ctx, "gate.in", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	seen := make(chan string, 16)
	handler := func(_ context.Context, batch []gate.Delivery) []error {
		errs := make([]error, len(batch))
		for i, d := range batch {
			seen <- string(d.Data)
			switch string(d.Data) {
			case "bad":
				errs[i] = &gate.InvalidError{Reason: "not a message"}
			case "retry":
				if d.NumDelivered == 1 {
					errs[i] = gate.ErrUnavailable
				}
			}
		}
		return errs
	}
	done := make(chan error, 1)
	go func() {
		done <- b.ConsumeStaged(ctx, oneStep(handler), ConsumeOptions{InFlight: 1, RetryMin: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	}()
	deadline := time.After(10 * time.Second)
	retries := 0
	for retries < 2 {
		select {
		case body := <-seen:
			if body == "retry" {
				retries++
			}
		case <-deadline:
			t.Fatal("the transient failure was not redelivered")
		}
	}
	waitEmpty(t, js)
	dead, _ := js.Stream(ctx, StreamDead)
	if n := dead.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("dead letters = %d, want 1", n)
	}
	m, _ := dead.GetMsg(ctx, 1)
	if m.Header.Get(HeaderError) != "not a message" || string(m.Data) != "bad" {
		t.Errorf("dead letter = %s %v", m.Data, m.Header)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ConsumeStaged returned %v on shutdown", err)
	}
}

// The producer's headers reach the handler, for the header fast path; a
// message without headers has none.
func TestConsumeReadsProducerHeaders(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	b := newBus(ctx, t)
	js := b.JetStream()
	with := nats.NewMsg("gate.in")
	with.Data = []byte("with")
	with.Header.Set(gate.MsgIDHeader, "m1")
	with.Header.Set(gate.SceneHeader, "alert.disk_full")
	with.Header.Set(gate.RecipientHeader, "open_id:ou_1")
	with.Header.Set(gate.PriorityHeader, "urgent")
	with.Header.Set(HeaderTZ, "Asia/Shanghai")
	if _, err := js.PublishMsg(ctx, with); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "gate.in", []byte("without")); err != nil {
		t.Fatal(err)
	}
	seen := make(chan gate.Delivery, 16)
	handler := func(_ context.Context, batch []gate.Delivery) []error {
		for _, d := range batch {
			seen <- d
		}
		return make([]error, len(batch))
	}
	done := make(chan error, 1)
	go func() { done <- b.ConsumeStaged(ctx, oneStep(handler), ConsumeOptions{InFlight: 1}) }()
	want := map[string]gate.Delivery{
		"with":    {HeaderID: "m1", HeaderScene: "alert.disk_full", HeaderRecipient: "open_id:ou_1", HeaderPriority: "urgent", HeaderTZ: "Asia/Shanghai"},
		"without": {},
	}
	deadline := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case d := <-seen:
			w, ok := want[string(d.Data)]
			if !ok {
				t.Fatalf("unexpected delivery %q", d.Data)
			}
			delete(want, string(d.Data))
			if d.HeaderTZ != w.HeaderTZ {
				t.Errorf("%s: Gate-TZ %q, want %q", d.Data, d.HeaderTZ, w.HeaderTZ)
			}
			if d.HeaderID != w.HeaderID || d.HeaderScene != w.HeaderScene || d.HeaderRecipient != w.HeaderRecipient || d.HeaderPriority != w.HeaderPriority {
				t.Errorf("%s: headers %q %q %q %q, want %q %q %q %q", d.Data, d.HeaderID, d.HeaderScene, d.HeaderRecipient, d.HeaderPriority,
					w.HeaderID, w.HeaderScene, w.HeaderRecipient, w.HeaderPriority)
			}
		case <-deadline:
			t.Fatalf("not delivered: %v", want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("ConsumeStaged returned %v on shutdown", err)
	}
}

func waitEmpty(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := js.Stream(t.Context(), StreamIn)
		if err == nil && s.CachedInfo().State.Msgs == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("GATE_IN did not empty")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
