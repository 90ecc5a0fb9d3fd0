package main

import (
	"slices"
	"testing"

	"github.com/antifatigue/gate/internal/testing/testenv"
)

// refundBypassRules: one message an hour per recipient, by a rate limit in
// one scene and by a sliding window in the other, and urgent messages that
// bypass both. An hour never passes while the test runs, so a slot comes
// back only by a refund.
const refundBypassRules = `
unknown_scene: forward
scenes:
  rb.rate:
    limits: [{rate: 1/1h, burst: 1}]
    on_exceed: suppress
    bypass_priorities: [urgent]
  rb.window:
    limits: [{window: 1h, max: 1}]
    on_exceed: suppress
    bypass_priorities: [urgent]
`

// TestRefundOfBypassGivesBackOnlyItsOwn proves issue 28's hole 3 closed on
// both stacks: a bypass message forced past a full limit took no free slot
// of it, so its refund frees none. A is forwarded, B suppressed (the limit
// is full), urgent U1-U3 forwarded as bypass, then refunded on gate.refund;
// C must still be suppressed, as it would have been without U1-U3. Before
// the fix each refund moved the rate limit's clock back a whole interval
// (which the bypass never took), and the refund of the last bypass emptied
// the window whose one place it had taken over from A. A bypass message
// that found the slot free took it, and gets it back.
func TestRefundOfBypassGivesBackOnlyItsOwn(t *testing.T) {
	forEachStack(t, func(t *testing.T, kind stack) {
		e := newEnv(t, kind, refundBypassRules)
		e.start(nil)
		c := e.client()
		for _, scene := range []string{"rb.rate", "rb.window"} {
			t.Run(scene, func(t *testing.T) {
				to := testenv.Unique("refund-bypass")
				m := func(name, priority string) msg {
					return msg{ID: to + "-" + name, Scene: scene, To: to, Priority: priority}
				}
				urgent := []msg{m("U1", "urgent"), m("U2", "urgent"), m("U3", "urgent")}
				c.send(m("A", ""), m("B", ""))
				c.send(urgent...)
				want := []string{m("A", "").ID, urgent[0].ID, urgent[1].ID, urgent[2].ID}
				if got, _ := c.forwarded(to); !slices.Equal(got, want) {
					t.Fatalf("forwarded %v, want %v: A, then the bypass messages past the full limit", got, want)
				}
				for _, u := range urgent {
					c.refund(u.ID)
				}
				c.send(m("C", ""))
				if got, _ := c.forwarded(to); !slices.Equal(got, want) {
					t.Errorf("forwarded %v after refunding U1-U3, want still %v: C must be suppressed, since A still holds the one slot and the refunds gave back only what the bypass messages took", got, want)
				}
			})
			// A bypass message that found the slot free took it, and its
			// refund gives it back whole: D passes.
			t.Run(scene+" with room", func(t *testing.T) {
				to := testenv.Unique("refund-bypass-room")
				u := msg{ID: to + "-U", Scene: scene, To: to, Priority: "urgent"}
				d := msg{ID: to + "-D", Scene: scene, To: to}
				c.send(u)
				c.refund(u.ID)
				c.send(d)
				if got, _ := c.forwarded(to); !slices.Equal(got, []string{u.ID, d.ID}) {
					t.Errorf("forwarded %v, want U then D: U took the free slot, and its refund gave it back", got)
				}
			})
		}
	})
}
