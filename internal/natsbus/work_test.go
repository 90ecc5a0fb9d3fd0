package natsbus

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// A refusal (ClassConflict, ClassNotFound) is acked, not nak'd: asked again
// it is refused again, so a redelivery would only loop forever on it. The
// retry delays are short, so a nak'd refusal would come back well within
// the window watched here.
func TestRefusalIsAckedNotRedelivered(t *testing.T) {
	b := newBusOn(t, startServer(t))
	js := b.JetStream()
	refusals := map[string]error{
		"conflict":  fmt.Errorf("refund: %w", gate.ErrNotForwarded),
		"not found": fmt.Errorf("refund: %w", gate.ErrNotFound),
	}
	for body, err := range refusals {
		if c := gate.Classify(err); c != gate.ClassConflict && c != gate.ClassNotFound {
			t.Fatalf("%s: class %v, want a refusal", body, c)
		}
		if _, err := js.Publish(t.Context(), "gate.in", []byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	runStaged(t, b, oneStep(func(_ context.Context, batch []gate.Delivery) []error {
		mu.Lock()
		defer mu.Unlock()
		errs := make([]error, len(batch))
		for i, d := range batch {
			seen[string(d.Data)]++
			errs[i] = refusals[string(d.Data)]
		}
		return errs
	}), ConsumeOptions{InFlight: 1, RetryMin: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond})

	// check fails on a second delivery of either, and reports whether both
	// were delivered once.
	check := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for body, n := range seen {
			if n > 1 {
				t.Fatalf("%q handled %d times, want once: a refusal was redelivered", body, n)
			}
		}
		return len(seen) == len(refusals)
	}
	waitFor(t, "both refusals handled and settled", func() bool {
		if !check() {
			return false
		}
		info := consumerInfo(t, js)
		return info.NumAckPending == 0 && info.NumPending == 0
	})
	// Twenty times RetryMax: a nak'd refusal would be back by now.
	time.Sleep(time.Second)
	check()
	if info := consumerInfo(t, js); info.NumAckPending != 0 || info.NumPending != 0 || info.NumRedelivered != 0 {
		t.Errorf("consumer: %d ack pending, %d pending, %d redelivered; want 0, 0, 0", info.NumAckPending, info.NumPending, info.NumRedelivered)
	}
	waitEmpty(t, js) // acked off the work queue
	dead, err := js.Stream(t.Context(), StreamDead)
	if err != nil {
		t.Fatal(err)
	}
	if n := dead.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("dead letters: got %d, want 0: a refusal is acked, not parked", n)
	}
}

// A durable consumer deleted under a running work loop (by an operator, or
// lost with its stream) is recreated: the loop pauses instead of ending,
// and a message published afterwards is still decided.
func TestDeletedConsumerIsRecreated(t *testing.T) {
	b := newBusOn(t, startServer(t))
	js := b.JetStream()
	handled := make(chan string, 16)
	runStaged(t, b, oneStep(func(_ context.Context, batch []gate.Delivery) []error {
		for _, d := range batch {
			handled <- string(d.Data)
		}
		return make([]error, len(batch))
	}), ConsumeOptions{InFlight: 1})
	// want waits for body to be handled.
	want := func(body string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case got := <-handled:
				if got == body {
					return
				}
			case <-deadline:
				t.Fatalf("%q not handled within 20s; want it handled by the recreated consumer", body)
			}
		}
	}
	if _, err := js.Publish(t.Context(), "gate.in", []byte("before")); err != nil {
		t.Fatal(err)
	}
	want("before") // the loop runs on its consumer

	if err := js.DeleteConsumer(t.Context(), StreamIn, ConsumerName); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(t.Context(), "gate.in", []byte("after")); err != nil {
		t.Fatal(err)
	}
	want("after")
	if _, err := js.Consumer(t.Context(), StreamIn, ConsumerName); err != nil {
		t.Errorf("consumer %s after the deletion: got %v, want it recreated", ConsumerName, err)
	}
}
