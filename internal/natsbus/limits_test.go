package natsbus

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// limitedBus is a Bus on a fresh embedded server whose streams have the
// byte limits maxBytes names, with its metrics.
func limitedBus(t *testing.T, maxBytes map[string]int64) (*Bus, *metrics.Metrics) {
	t.Helper()
	m := metrics.New(prometheus.NewRegistry())
	b, err := New(t.Context(), startServer(t), Options{AckWait: shortAckWait, MaxBytes: maxBytes, Metrics: m}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return b, m
}

// fillStream publishes messages of size bytes to subject until the stream
// behind it refuses one, and returns that refusal; it fails the test if the
// stream takes 100.
func fillStream(t *testing.T, js jetstream.JetStream, subject string, size int) error {
	t.Helper()
	body := bytes.Repeat([]byte("x"), size)
	for range 100 {
		if _, err := js.Publish(t.Context(), subject, body); err != nil {
			return err
		}
	}
	t.Fatalf("%s took 100 messages of %d bytes: it has no byte limit", subject, size)
	return nil
}

// fullCount is gate_stream_full_total of stream.
func fullCount(t *testing.T, m *metrics.Metrics, stream string) float64 {
	t.Helper()
	var c dto.Metric
	if err := m.StreamFull.WithLabelValues(stream).Write(&c); err != nil {
		t.Fatal(err)
	}
	return c.GetCounter().GetValue()
}

// heldBy is stream's state: its messages and first sequence.
func heldBy(t *testing.T, js jetstream.JetStream, stream string) jetstream.StreamState {
	t.Helper()
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().State
}

// A producer publishing into a full GATE_IN gets an error in its publish
// ack that names the limit, and GATE_IN keeps everything it took: discard
// policy new, where old would have dropped the oldest undecided message to
// make room. The producer is a client with no credentials, as every
// producer of the embedded server is.
func TestFullGateInRefusesTheProducer(t *testing.T) {
	b, _ := limitedBus(t, map[string]int64{StreamIn: MinMaxBytes})
	producer, err := nats.Connect(b.nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(producer.Close)
	pjs, err := jetstream.New(producer)
	if err != nil {
		t.Fatal(err)
	}
	err = fillStream(t, pjs, DefaultInSubject, 256<<10)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jsStreamStoreFailed || !strings.Contains(err.Error(), "maximum bytes exceeded") {
		t.Fatalf("publish to a full GATE_IN: %v, want an API error (code 10077) saying maximum bytes exceeded", err)
	}
	st := heldBy(t, b.js, StreamIn)
	if st.FirstSeq != 1 || st.Msgs != st.LastSeq || st.Bytes > uint64(MinMaxBytes) {
		t.Errorf("full GATE_IN: first seq %d, %d messages up to seq %d, %d bytes; want all it took kept, within %d bytes",
			st.FirstSeq, st.Msgs, st.LastSeq, st.Bytes, MinMaxBytes)
	}
}

// forwardEach is a handler that forwards every message of its batch, as
// the pipeline does, and hands back each forward's error.
func forwardEach(b *Bus) func(context.Context, []gate.Delivery) []error {
	return func(ctx context.Context, batch []gate.Delivery) []error {
		fs := make([]gate.Forward, len(batch))
		for i, d := range batch {
			fs[i] = gate.Forward{MessageID: d.HeaderID, Scene: "s", Data: d.Data}
		}
		return b.Forward(ctx, fs)
	}
}

// quickRetries keeps a refused message's retries close together, so that
// the tests see several.
var quickRetries = ConsumeOptions{InFlight: 1, RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}

// A forward that a full GATE_OUT refuses is retried, counted in
// gate_stream_full_total{stream="GATE_OUT"}, and never dropped: once
// GATE_OUT has room again, it is forwarded and acked.
func TestFullGateOutRetriesTheForward(t *testing.T) {
	b, m := limitedBus(t, map[string]int64{StreamOut: MinMaxBytes})
	if err := fillStream(t, b.js, DefaultOutSubject, 512<<10); err == nil || !isFull(err) {
		t.Fatalf("publish to a full GATE_OUT: %v, want a refusal for want of room", err)
	}
	msg := nats.NewMsg(DefaultInSubject)
	msg.Data = bytes.Repeat([]byte("f"), 600<<10)
	msg.Header.Set(jetstream.MsgIDHeader, "m-1")
	if _, err := b.js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	runStaged(t, b, oneStep(forwardEach(b)), quickRetries)

	waitFor(t, "the forward refused twice", func() bool { return fullCount(t, m, StreamOut) >= 2 })
	if got := heldBy(t, b.js, StreamIn).Msgs; got != 1 {
		t.Fatalf("GATE_IN holds %d messages while GATE_OUT is full, want the 1 being retried", got)
	}
	if err := b.js.DeleteStream(t.Context(), StreamOut); err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.CreateStream(t.Context(), b.limited(b.outStream())); err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, b.js)
	out, err := b.js.Stream(t.Context(), StreamOut)
	if err != nil {
		t.Fatal(err)
	}
	got, err := out.GetMsg(t.Context(), 1)
	if err != nil || got.Header.Get(jetstream.MsgIDHeader) != "m-1" || !bytes.Equal(got.Data, msg.Data) {
		t.Errorf("GATE_OUT's first message once it had room: %v (err %v), want m-1's forward", got, err)
	}
}

// A message whose dead letter a full GATE_DEAD refuses stays in GATE_IN
// and is retried, counted in gate_stream_full_total{stream="GATE_DEAD"}:
// once GATE_DEAD has room, it is parked there.
func TestFullGateDeadRetriesTheDeadLetter(t *testing.T) {
	b, m := limitedBus(t, map[string]int64{StreamDead: MinMaxBytes})
	if err := fillStream(t, b.js, DefaultDeadSubject, 512<<10); err == nil || !isFull(err) {
		t.Fatalf("publish to a full GATE_DEAD: %v, want a refusal for want of room", err)
	}
	poison := bytes.Repeat([]byte("p"), 600<<10)
	if _, err := b.js.Publish(t.Context(), DefaultInSubject, poison); err != nil {
		t.Fatal(err)
	}
	runStaged(t, b, oneStep(parkEvery), quickRetries)

	waitFor(t, "the dead letter refused twice", func() bool { return fullCount(t, m, StreamDead) >= 2 })
	if got := heldBy(t, b.js, StreamIn).Msgs; got != 1 {
		t.Fatalf("GATE_IN holds %d messages while GATE_DEAD is full, want the 1 being retried", got)
	}
	dead, err := b.js.Stream(t.Context(), StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.Purge(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, b.js)
	got, err := dead.GetLastMsgForSubject(t.Context(), DefaultDeadSubject)
	if err != nil || !bytes.Equal(got.Data, poison) || got.Header.Get(HeaderError) != "not JSON" {
		t.Errorf("GATE_DEAD's last message once it had room: err %v, want the poison message's dead letter", err)
	}
}

// Streams an earlier gate made, without a byte limit, get their default at
// start, with discard policy new, and keep their messages; a limit the
// operator set stays unless GATE_STREAM_MAX_BYTES names the stream; a
// named limit below what a stream holds stops the start, naming the
// setting, rather than leave the stream refusing every publish.
func TestNewLimitsExistingStreams(t *testing.T) {
	ctx := t.Context()
	nc := startServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []jetstream.StreamConfig{
		{Name: StreamOut, Subjects: []string{DefaultOutSubject}, Storage: jetstream.FileStorage},
		{Name: StreamDead, Subjects: []string{DefaultDeadSubject}, Storage: jetstream.FileStorage, MaxBytes: 3 << 20},
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	// 2.4 MiB, more than the least limit a stream may be given.
	kept := bytes.Repeat([]byte("k"), 600<<10)
	for range 4 {
		if _, err := js.Publish(ctx, DefaultOutSubject, kept); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int64{StreamIn: DefaultInMaxBytes, StreamOut: DefaultOutMaxBytes, StreamDead: 3 << 20, StreamRefund: DefaultRefundMaxBytes}
	check := func(when string) {
		t.Helper()
		got := map[string]int64{}
		for _, name := range streamNames {
			s, err := js.Stream(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if cfg := s.CachedInfo().Config; cfg.Discard == jetstream.DiscardNew {
				got[name] = cfg.MaxBytes
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: byte limits with discard new %v, want %v", when, got, want)
		}
		if st := heldBy(t, js, StreamOut); st.Msgs != 4 {
			t.Errorf("%s: GATE_OUT holds %d messages, want the 4 kept", when, st.Msgs)
		}
	}
	if _, err := New(ctx, nc, Options{}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	check("after New")

	if _, err := New(ctx, nc, Options{MaxBytes: map[string]int64{StreamDead: 4 << 20}}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	want[StreamDead] = 4 << 20
	check("after New naming GATE_DEAD")

	_, err = New(ctx, nc, Options{MaxBytes: map[string]int64{StreamOut: MinMaxBytes}}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "GATE_STREAM_MAX_BYTES") {
		t.Errorf("New with GATE_OUT's limit below what it holds: %v, want an error naming GATE_STREAM_MAX_BYTES", err)
	}
	check("after the refused New")
}

func TestParseMaxBytes(t *testing.T) {
	all := func(n int64) map[string]int64 {
		return map[string]int64{StreamIn: n, StreamOut: n, StreamDead: n, StreamRefund: n}
	}
	for _, tc := range []struct {
		in   string
		want map[string]int64
	}{
		{"", map[string]int64{}},
		{"8GiB", all(8 << 30)},
		{"3145728", all(3 << 20)},
		{" GATE_OUT = 20GiB , GATE_IN=512MiB", map[string]int64{StreamOut: 20 << 30, StreamIn: 512 << 20}},
		{"GATE_DEAD=1TiB", map[string]int64{StreamDead: 1 << 40}},
		{"GATE_REFUND=4096KiB", map[string]int64{StreamRefund: 4 << 20}},
	} {
		got, err := ParseMaxBytes(tc.in)
		if err != nil || !maps.Equal(got, tc.want) {
			t.Errorf("ParseMaxBytes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"1MiB", "GATE_OUT=1KiB", "GATE_OUT", "GATE_TOO=1GiB", "GATE_OUT=1GiB,GATE_OUT=2GiB", "1GB", "-5GiB", "9999999TiB", "GATE_OUT=1GiB,"} {
		if got, err := ParseMaxBytes(bad); err == nil {
			t.Errorf("ParseMaxBytes(%q) = %v, want an error", bad, got)
		}
	}
}
