package main

import (
	"reflect"
	"testing"

	"github.com/antifatigue/gate/internal/gate"
)

// The workload is what the benchmark's figures stand on: envelopes of the
// stated size that the gate accepts, and about 30 % held back.
func TestWorkload(t *testing.T) {
	rs, err := benchRules()
	if err != nil {
		t.Fatal(err)
	}
	// A whole run's messages (warm-up, N, N/2) at the default recipients,
	// N/2: the share depends on messages per recipient, not on N.
	for _, c := range []struct{ n, recipients int }{{31_000, 10_000}} {
		msgs := newWorkload(1, "0a1b2c3d", c.recipients).batchOf(c.n)
		data := msgs.data
		for i, d := range data[:100] {
			if len(d) != msgSize {
				t.Fatalf("message %d is %d bytes, want %d", i, len(d), msgSize)
			}
			fromBody, err := gate.ParseMessage(d, "", 0)
			if err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			// With its headers, the gate takes the header fast path to
			// the same message, so the simulation, which reads bodies,
			// holds for both modes.
			h := msgs.envs[i].header()
			d := gate.Delivery{Data: d, HeaderID: h.Get(gate.MsgIDHeader), HeaderScene: h.Get(gate.SceneHeader),
				HeaderRecipient: h.Get(gate.RecipientHeader), HeaderPriority: h.Get(gate.PriorityHeader)}
			fromHeaders, err := gate.ParseDelivery(d, 0)
			if err != nil {
				t.Fatalf("message %d with headers: %v", i, err)
			}
			if !reflect.DeepEqual(fromHeaders, fromBody) {
				t.Fatalf("message %d: from headers %+v, from the body %+v", i, fromHeaders, fromBody)
			}
		}
		sim := newSimulator(rs)
		if _, err := sim.decide(data, false); err != nil {
			t.Fatal(err)
		}
		t.Logf("n=%d recipients=%d: %+v, held back %.1f %%", c.n, c.recipients, sim.got, 100*sim.got.heldShare())
		if s := sim.got.heldShare(); s < 0.25 || s > 0.35 {
			t.Errorf("n=%d recipients=%d: held back %.1f %%, want about 30 %%", c.n, c.recipients, 100*s)
		}
	}
}
