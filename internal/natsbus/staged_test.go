package natsbus

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// ConsumeStaged starts batches one at a time in stream order, keeps up to
// InFlight of them unfinished, and acks a batch only once it has finished.
func TestConsumeStagedKeepsBatchesInFlight(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	b := newBus(ctx, t)
	js := b.JetStream()
	const n = 6
	for i := range n {
		if _, err := js.Publish(ctx, "gate.in", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	started := make(chan []gate.Delivery, n)
	release := make(chan struct{})
	start := func(_ context.Context, batch []gate.Delivery) func() []error {
		started <- batch
		return func() []error {
			<-release
			return make([]error, len(batch))
		}
	}
	done := make(chan error, 1)
	go func() { done <- b.ConsumeStaged(ctx, start, ConsumeOptions{Batch: 2, InFlight: 2}) }()

	var batches [][]gate.Delivery
	for range 2 {
		select {
		case batch := <-started:
			batches = append(batches, batch)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d batches started, want 2 in flight", len(batches))
		}
	}
	select {
	case <-started:
		t.Fatal("a third batch started while two were unfinished")
	case <-time.After(300 * time.Millisecond):
	}
	s, err := js.Stream(ctx, StreamIn)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().State.Msgs; got != n {
		t.Fatalf("GATE_IN holds %d messages before any batch finished, want all %d, unacked", got, n)
	}

	close(release)
	waitEmpty(t, js)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ConsumeStaged: %v", err)
	}
	close(started)
	for batch := range started {
		batches = append(batches, batch)
	}
	var last uint64
	for _, batch := range batches {
		for _, d := range batch {
			if d.Seq <= last {
				t.Fatalf("batches started out of stream order: seq %d after %d", d.Seq, last)
			}
			last = d.Seq
		}
	}
	if last != n {
		t.Fatalf("last sequence started is %d, want %d", last, n)
	}
}
