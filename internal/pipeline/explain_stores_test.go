package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/inmem"
	"github.com/antifatigue/gate/internal/pipeline"
)

// explainRules: scene s counts 3 an hour, 4 a calendar day and a rate of
// 1/10m with a burst of 2, and defers; scene w counts 2 an hour and
// suppresses; every recipient is capped at 10 an hour.
func explainRules() *gate.RuleSet {
	return &gate.RuleSet{UnknownScene: gate.ActionDrop, Version: "v-explain",
		RecipientCaps: []gate.Limit{{Window: time.Hour, Max: 10}},
		Scenes: map[string]gate.SceneRule{
			"s": {Limits: []gate.Limit{{Window: time.Hour, Max: 3}, {Calendar: gate.CalendarDay, Max: 4}, {Rate: 10 * time.Minute, Max: 2}},
				OnExceed: gate.ActionDefer},
			"w": {Limits: []gate.Limit{{Window: time.Hour, Max: 2}}, OnExceed: gate.ActionSuppress},
		}}
}

// admitOne records a message of scene to r as the gate would, and returns
// the store's verdict.
func admitOne(t *testing.T, st gate.WindowStore, rs *gate.RuleSet, scene, r, id string) gate.AdmitResult {
	t.Helper()
	rule := rs.Scenes[scene]
	res, err := st.Admit(context.Background(), []gate.AdmitRequest{rs.AdmitRequestFor(rule, id, r, scene, false, nil)})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// TestExplainOnStores reads per-limit state through the Explainer on both
// stacks: counts, slots left and free times of a window, a calendar
// period, a rate limit and a recipient cap; asking takes no slot.
func TestExplainOnStores(t *testing.T) {
	for name, open := range stacks(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			rs := explainRules()
			x, err := pipeline.NewExplainer(pipeline.ExplainOptions{Rules: fixedRules{rs}, Store: st.store, Holds: st.audit, Held: st.audit, Preferences: st.audit})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			id := fmt.Sprintf("u%d", time.Now().UnixNano())
			r := "open_id:" + id
			first := admitOne(t, st.store, rs, "s", r, id+"-1")
			if !first.Admitted {
				t.Fatalf("first message: %+v", first)
			}
			e, err := x.Explain(ctx, r, "s", "", "")
			if err != nil {
				t.Fatal(err)
			}
			if e.Decision.Outcome != gate.OutcomeForward || e.NextAt == nil || !e.NextAt.Equal(e.At) || e.RulesVersion != "v-explain" {
				t.Errorf("decision %+v next %v at %v, want forward now", e.Decision, e.NextAt, e.At)
			}
			want := []struct {
				scope       gate.Scope
				count, left int
			}{{gate.ScopeScene, 1, 2}, {gate.ScopeScene, 1, 3}, {gate.ScopeScene, 1, 1}, {gate.ScopeRecipient, 1, 9}}
			if len(e.Limits) != len(want) {
				t.Fatalf("limits %+v, want %d", e.Limits, len(want))
			}
			for i, w := range want {
				l := e.Limits[i]
				if l.Scope != w.scope || l.Count != w.count || l.Left != w.left || !l.FreeAt.Equal(e.At.Truncate(time.Millisecond)) && l.FreeAt.Sub(e.At).Abs() > time.Second {
					t.Errorf("limit %d: %+v, want scope %s count %d left %d free now (%v)", i, l, w.scope, w.count, w.left, e.At)
				}
			}
			if !e.HeldQueuesKnown || len(e.HeldQueues) != 2 || e.HeldQueues[0].Count != 0 || e.HeldQueues[1].Queue != "digest:s" {
				t.Errorf("held queues %+v (known %v), want s and digest:s, empty", e.HeldQueues, e.HeldQueuesKnown)
			}

			// The rate limit's burst of 2 is used up by a second message:
			// explained as full, a token free one interval after the first.
			second := admitOne(t, st.store, rs, "s", r, id+"-2")
			if !second.Admitted {
				t.Fatalf("second message: %+v", second)
			}
			e, err = x.Explain(ctx, r, "s", "", "")
			if err != nil {
				t.Fatal(err)
			}
			rate := e.Limits[2]
			if rate.Rate == nil || rate.Count != 2 || rate.Left != 0 || !rate.FreeAt.Equal(first.Now.Add(10*time.Minute)) {
				t.Errorf("rate limit %+v, want 2 used, 0 left, free at %v", rate, first.Now.Add(10*time.Minute))
			}
			if e.Decision.Outcome != gate.OutcomeDefer || e.Decision.Reason != gate.ReasonLimit || e.NextAt == nil || !e.NextAt.Equal(rate.FreeAt) {
				t.Errorf("decision %+v next %v, want defer by the limit, next at %v", e.Decision, e.NextAt, rate.FreeAt)
			}
			if e.Why == "" {
				t.Error("no why")
			}

			// Scene w: a full window frees a slot when its oldest slides out.
			w1 := admitOne(t, st.store, rs, "w", r, id+"-w1")
			for range 30 {
				if _, err := x.Explain(ctx, r, "w", "", ""); err != nil {
					t.Fatal(err)
				}
			}
			if res := admitOne(t, st.store, rs, "w", r, id+"-w2"); !res.Admitted {
				t.Fatalf("after 30 explanations the second message of 2 is refused: %+v", res)
			}
			e, err = x.Explain(ctx, r, "w", "", "")
			if err != nil {
				t.Fatal(err)
			}
			if l := e.Limits[0]; l.Count != 2 || l.Left != 0 || !l.FreeAt.Equal(w1.Now.Add(time.Hour)) {
				t.Errorf("full window %+v, want 2 used, 0 left, free at %v", l, w1.Now.Add(time.Hour))
			}
			if c := e.Limits[1]; c.Scope != gate.ScopeRecipient || c.Count != 4 || c.Left != 6 {
				t.Errorf("cap %+v, want 4 of 10 used", c)
			}
			if e.Decision.Outcome != gate.OutcomeSuppress || e.NextAt == nil || !e.NextAt.Equal(w1.Now.Add(time.Hour)) {
				t.Errorf("decision %+v next %v, want suppress, next when the oldest slides out", e.Decision, e.NextAt)
			}
			if res := admitOne(t, st.store, rs, "w", r, id+"-w3"); res.Admitted {
				t.Errorf("third message of 2 admitted: %+v", res)
			}

			// An unknown scene is explained by unknown_scene.
			e, err = x.Explain(ctx, r, "nope", "", "")
			if err != nil || e.KnownScene || e.Decision.Outcome != gate.OutcomeDrop || e.NextAt != nil || len(e.Limits) != 0 {
				t.Errorf("unknown scene: %+v, %v; want drop, no next, no limits", e, err)
			}
		})
	}
}

// TestExplainKeepsLongerWindows: explaining, on the in-process store, a
// scene whose short window has let an admission go leaves it counted by
// the longer one (a probe carries the scene's whole limit set).
func TestExplainKeepsLongerWindows(t *testing.T) {
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	st := inmem.New(inmem.Options{Now: func() time.Time { return now }})
	rs := &gate.RuleSet{UnknownScene: gate.ActionDrop, Version: "v", Scenes: map[string]gate.SceneRule{
		"t": {Limits: []gate.Limit{{Window: time.Minute, Max: 5}, {Window: time.Hour, Max: 2}}, OnExceed: gate.ActionSuppress},
	}}
	x, err := pipeline.NewExplainer(pipeline.ExplainOptions{Rules: fixedRules{rs}, Store: st, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	admitOne(t, st, rs, "t", "open_id:u", "a")
	now = now.Add(2 * time.Minute)
	for range 3 {
		e, err := x.Explain(context.Background(), "open_id:u", "t", "", "")
		if err != nil {
			t.Fatal(err)
		}
		if e.Limits[0].Count != 0 || e.Limits[1].Count != 1 || e.Limits[1].Left != 1 || e.HeldQueuesKnown {
			t.Fatalf("limits %+v (held known %v), want the 1m window empty, the 1h one 1 of 2, held unknown", e.Limits, e.HeldQueuesKnown)
		}
	}
	admitOne(t, st, rs, "t", "open_id:u", "b")
	if res := admitOne(t, st, rs, "t", "open_id:u", "c"); res.Admitted {
		t.Errorf("a third message in the hour admitted: explaining dropped a counted one")
	}
}
