package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/antifatigue/gate/internal/pipeline"
)

// TestCheckOnStores runs checks on the real stores of both stacks (Redis
// and PostgreSQL; the in-process store and SQLite), through two Checkers
// that share them as two gates do: one id asked 16 times at once, on both,
// gets one answer and takes one slot; a dry run takes none and leaves no
// ledger row; the limit of 3 admits exactly two more.
func TestCheckOnStores(t *testing.T) {
	for name, open := range stacks(t) {
		t.Run(name, func(t *testing.T) {
			st := open(t)
			rs := &gate.RuleSet{UnknownScene: gate.ActionDrop, Version: "v1", Scenes: map[string]gate.SceneRule{
				"s": {Limits: []gate.Limit{{Window: time.Hour, Max: 3}}, OnExceed: gate.ActionSuppress},
			}}
			var checkers [2]*pipeline.Checker
			for i := range checkers {
				c, err := pipeline.NewChecker(pipeline.CheckOptions{Rules: fixedRules{rs}, Store: st.store, Audit: st.audit, Answers: st.audit,
					Holds: st.audit, Metrics: metrics.New(prometheus.NewRegistry())})
				if err != nil {
					t.Fatal(err)
				}
				checkers[i] = c
			}
			ctx := context.Background()
			to := fmt.Sprintf("u%d", time.Now().UnixNano())
			body := func(id string, dry bool) []byte {
				return fmt.Appendf(nil, `{"id":%q,"scene":"s","receive_id":%q,"dry_run":%v}`, to+"-"+id, to, dry)
			}

			var wg sync.WaitGroup
			answers := make([]gate.CheckAnswer, 16)
			for i := range answers {
				wg.Go(func() {
					a, err := checkers[i%2].Check(ctx, body("x", false))
					if err != nil {
						t.Error(err)
					}
					answers[i] = a
				})
			}
			wg.Wait()
			for i, a := range answers {
				if a.Decision != gate.OutcomeForward || !a.Admitted || !a.DecidedAt.Equal(answers[0].DecidedAt) {
					t.Errorf("ask %d: got %+v, want the one first answer %+v", i, a, answers[0])
				}
			}

			if a, err := checkers[0].Check(ctx, body("dry", true)); err != nil || !a.Admitted || !a.DryRun || a.Count != 2 {
				t.Errorf("dry run: got %+v, %v; want admitted as the second of 3", a, err)
			}
			for i, id := range []string{"a", "b", "c"} {
				a, err := checkers[i%2].Check(ctx, body(id, false))
				if err != nil {
					t.Fatal(err)
				}
				if want := id != "c"; a.Admitted != want {
					t.Errorf("%s: got %+v, want admitted %v (x holds one slot of 3, the dry run none)", id, a, want)
				}
			}
			known, err := st.audit.Decided(ctx, []string{to + "-x", to + "-dry", to + "-a", to + "-b", to + "-c"})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := known[to+"-dry"]; ok || len(known) != 4 {
				t.Errorf("ledger holds %v, want x, a, b and c, not the dry run", known)
			}
			if known[to+"-c"].Outcome != gate.OutcomeSuppress {
				t.Errorf("c in the ledger: %+v, want suppress", known[to+"-c"])
			}
		})
	}
}
