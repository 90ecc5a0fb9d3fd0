package preview

import (
	"context"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// TestWarmupDecidesEachMessage: the decisions before since fill the
// windows, and each message of the period is decided against them. A
// replay that skipped them would decide "after" forwarded and "later"
// suppressed (after still in the window): the same totals as the right
// answer, so each message is in a scene of its own, under one recipient
// cap, and each scene's counts are that message's outcome.
func TestWarmupDecidesEachMessage(t *testing.T) {
	since := t0
	es := []gate.LedgerEntry{
		{Key: "before", Scene: "w", Recipient: "open_id:u1", Outcome: gate.OutcomeForward, At: since.Add(-30 * time.Minute)},
		{Key: "after", Scene: "x", Recipient: "open_id:u1", Outcome: gate.OutcomeSuppress, At: since.Add(10 * time.Minute)},
		{Key: "later", Scene: "y", Recipient: "open_id:u1", Outcome: gate.OutcomeForward, At: since.Add(40 * time.Minute)},
	}
	p, err := New(&sliceLedger{entries: es, pageSize: 10}, Options{}).Preview(context.Background(), []byte(`
recipient_caps: [{window: 1h, max: 1}]
scenes:
  w: {limits: [{window: 1h, max: 100}]}
  x: {limits: [{window: 1h, max: 100}]}
  y: {limits: [{window: 1h, max: 100}]}
`), since, since.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// "before" (30 minutes before since) fills the cap until 30 minutes
	// after: "after" is suppressed, "later" forwarded once it left.
	wantCounts(t, "after, then", sceneOf(t, p, "x").Then, gate.PreviewCounts{Suppressed: 1})
	wantCounts(t, "after, now", sceneOf(t, p, "x").Now, gate.PreviewCounts{Suppressed: 1})
	wantCounts(t, "later, then", sceneOf(t, p, "y").Then, gate.PreviewCounts{Forwarded: 1})
	wantCounts(t, "later, now", sceneOf(t, p, "y").Now, gate.PreviewCounts{Forwarded: 1})
	for _, s := range p.Scenes {
		if s.Scene == "w" {
			t.Errorf("the warm-up's scene is counted: %+v", s)
		}
	}
	if p.Decisions != 2 || p.Replayed != 2 {
		t.Errorf("decisions %d replayed %d, want 2 2 (the warm-up uncounted)", p.Decisions, p.Replayed)
	}
}
