package natsbus

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A stream deleted under a running gate fails CheckStreams, naming it, until
// WatchStreams has recreated it; then a dead letter lands again.
func TestLostStreamsAreRecreated(t *testing.T) {
	ctx := t.Context()
	b := newBus(ctx, t)
	if err := b.CheckStreams(ctx); err != nil {
		t.Fatalf("fresh bus: CheckStreams = %v, want nil", err)
	}
	for _, name := range []string{StreamDead, StreamOut, StreamRefund} {
		if err := b.js.DeleteStream(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	err := b.CheckStreams(ctx)
	for _, name := range []string{StreamDead, StreamOut, StreamRefund} {
		if err == nil || !strings.Contains(err.Error(), name+" is missing") {
			t.Errorf("CheckStreams = %v, want it to name %s", err, name)
		}
	}
	if err := b.DeadLetter(ctx, StreamIn, []byte("x"), nats.Header{}, 1, "bad"); err == nil {
		t.Fatal("dead letter without GATE_DEAD: no error, the test shows nothing")
	}

	go b.WatchStreams(ctx, 50*time.Millisecond)
	deadline := time.Now().Add(20 * time.Second)
	for err := b.CheckStreams(ctx); err != nil; err = b.CheckStreams(ctx) {
		if time.Now().After(deadline) {
			t.Fatalf("streams not recreated within 20s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := b.DeadLetter(ctx, StreamIn, []byte("x"), nats.Header{}, 1, "bad"); err != nil {
		t.Errorf("dead letter after the recreation: %v", err)
	}
	out, err := b.js.Stream(ctx, StreamOut)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := out.CachedInfo().Config.Duplicates, b.opts.OutDuplicates; got != want {
		t.Errorf("recreated GATE_OUT's duplicate window = %s, want %s", got, want)
	}
}

// GATE_IN deleted takes the gate consumer with it: EnsureConsumer, which
// the work loop calls to recreate a lost consumer, recreates both.
func TestEnsureConsumerRecreatesGateIn(t *testing.T) {
	ctx := t.Context()
	b := newBus(ctx, t)
	if err := b.js.DeleteStream(ctx, StreamIn); err != nil {
		t.Fatal(err)
	}
	if _, err := b.EnsureConsumer(ctx); err != nil {
		t.Fatalf("EnsureConsumer without GATE_IN: %v", err)
	}
	if err := b.CheckStreams(ctx); err != nil {
		t.Errorf("CheckStreams = %v, want nil", err)
	}
}

// A stream that no longer captures its subject is not ready either.
func TestCheckStreamsNamesAStreamWithoutItsSubject(t *testing.T) {
	ctx := t.Context()
	b := newBus(ctx, t)
	cfg := b.deadStream()
	cfg.Subjects = []string{"elsewhere"}
	if _, err := b.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := b.CheckStreams(ctx); err == nil || !strings.Contains(err.Error(), "does not capture subject "+DefaultDeadSubject) {
		t.Errorf("CheckStreams = %v, want it to say GATE_DEAD does not capture gate.dead", err)
	}
}
