package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/antifatigue/gate/internal/pipeline"
)

// reuseEnv is a Pipeline and a Checker on one of the real stacks, under one
// limit: 1 message an hour per recipient in scene s.
type reuseEnv struct {
	t     *testing.T
	st    refundStack
	p     *pipeline.Pipeline
	c     *pipeline.Checker
	out   *sink
	m     *metrics.Metrics
	seq   uint64
	label string // makes the test's ids and recipients its own
}

func newReuseEnv(t *testing.T, st refundStack) *reuseEnv {
	rs := &gate.RuleSet{UnknownScene: gate.ActionDrop, Version: "v1", Scenes: map[string]gate.SceneRule{
		"s": {Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, OnExceed: gate.ActionSuppress},
		"t": {Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, OnExceed: gate.ActionSuppress},
	}}
	e := &reuseEnv{t: t, st: st, out: &sink{}, m: metrics.New(prometheus.NewRegistry()), label: fmt.Sprintf("r%d", time.Now().UnixNano())}
	var err error
	e.p, err = pipeline.New(pipeline.Options{Rules: fixedRules{rs}, Store: st.store, Audit: st.audit, Holds: st.audit, Forwarder: e.out, Metrics: e.m})
	if err != nil {
		t.Fatal(err)
	}
	e.c, err = pipeline.NewChecker(pipeline.CheckOptions{Rules: fixedRules{rs}, Store: st.store, Audit: st.audit, Answers: st.audit, Holds: st.audit, Metrics: e.m})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// who is the test's recipient named r, as the ledger spells it.
func (e *reuseEnv) who(r string) string { return "open_id:" + e.label + r }

// id is the test's message id named id.
func (e *reuseEnv) id(id string) string { return e.label + "-" + id }

// msg is a delivery of id for recipient r in scene; delivered says how
// often it was delivered (more than once: its id is looked up first).
func (e *reuseEnv) msg(id, scene, r string, delivered uint64) gate.Delivery {
	e.seq++
	return gate.Delivery{Data: fmt.Appendf(nil, `{"id":%q,"scene":%q,"receive_id":%q,"content":{"text":"hi"}}`, e.id(id), scene, e.label+r),
		Seq: e.seq, NumDelivered: delivered, ReceivedAt: time.Now()}
}

func (e *reuseEnv) deliver(ds ...gate.Delivery) []error {
	return e.p.Start(context.Background(), ds)()
}

func (e *reuseEnv) check(id, scene, r string) (gate.CheckAnswer, error) {
	return e.c.Check(context.Background(), fmt.Appendf(nil, `{"id":%q,"scene":%q,"receive_id":%q}`, e.id(id), scene, e.label+r))
}

// wantReused fails unless err parks a message as a reused id whose reason
// names the first use: scene and recipient r.
func (e *reuseEnv) wantReused(what string, err error, scene, r string) {
	e.t.Helper()
	if gate.Classify(err) != gate.ClassPark || !errors.Is(err, gate.ErrReusedID) {
		e.t.Fatalf("%s: got %v, want a dead letter for a reused id", what, err)
	}
	reason := gate.InvalidReason(err)
	if !strings.Contains(reason, fmt.Sprintf("scene %q", scene)) || !strings.Contains(reason, fmt.Sprintf("recipient %q", e.who(r))) {
		e.t.Errorf("%s: reason %q does not name the first use (scene %s, recipient %s)", what, reason, scene, e.who(r))
	}
}

// reusedRows returns the audit rows of recipient r with reason reused_id.
func (e *reuseEnv) reusedRows(r string) []gate.Suppression {
	e.t.Helper()
	page, err := e.st.audit.Suppressions(context.Background(), gate.SuppressionFilter{Recipient: e.who(r), Reason: gate.ReasonReusedID, Limit: 100})
	if err != nil {
		e.t.Fatal(err)
	}
	return page.Items
}

// invalid is scene's invalid count in the summary.
func (e *reuseEnv) invalid(scene string) int64 {
	e.t.Helper()
	sums, err := e.st.audit.Summary(context.Background(), time.Time{}, time.Time{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range sums {
		if s.Scene == scene {
			return s.Invalid
		}
	}
	return 0
}

// wantSlotFree fails unless recipient r's one slot in scene is free: a
// check of a fresh id is admitted as the first.
func (e *reuseEnv) wantSlotFree(scene, r string) {
	e.t.Helper()
	a, err := e.check("probe-"+r, scene, r)
	if err != nil || !a.Admitted || a.Count != 1 {
		e.t.Errorf("a fresh check for %s in %s: got %+v, %v; want admitted as the first (the reused id took no slot)", r, scene, a, err)
	}
}

// reusedCount reads gate_reused_ids_total{source}.
func (e *reuseEnv) reusedCount(source string) float64 {
	e.t.Helper()
	var d dto.Metric
	if err := e.m.ReusedIDs.WithLabelValues(source).Write(&d); err != nil {
		e.t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// TestReusedIDAtTheClaim: a check for A takes an id; a message for B with
// that id, delivered once (so not looked up before deciding), meets A's
// claim at its commit. It is parked with a reason naming A's use, counted
// invalid once, leaves an audit row for B with reason reused_id, takes B's
// slot back, and counts in gate_reused_ids_total; nothing is forwarded.
// Redelivered, it is parked again and counted no more. A true duplicate
// (the same id, scene and recipient) still takes the first outcome.
func TestReusedIDAtTheClaim(t *testing.T) {
	for name, open := range stacks(t) {
		t.Run(name, func(t *testing.T) {
			e := newReuseEnv(t, open(t))
			if _, err := e.check("fill", "s", "A"); err != nil {
				t.Fatal(err)
			}
			if a, err := e.check("order-42", "s", "A"); err != nil || a.Admitted {
				t.Fatalf("check of order-42 for A: %+v, %v; want suppressed (A's one slot is taken)", a, err)
			}

			d := e.msg("order-42", "s", "B", 1)
			e.wantReused("message for B", e.deliver(d)[0], "s", "A")
			if got := e.out.forwarded(); len(got) != 0 {
				t.Errorf("forwarded %v, want nothing", got)
			}
			rows := e.reusedRows("B")
			if len(rows) != 1 || rows[0].Scene != "s" || !strings.Contains(rows[0].MessageID, e.id("order-42")) {
				t.Errorf("B's reused_id rows: %+v, want one for order-42 in s", rows)
			}
			if got := e.invalid("s"); got != 1 {
				t.Errorf("summary invalid in s = %d, want 1", got)
			}
			if got := e.reusedCount("message"); got != 1 {
				t.Errorf("gate_reused_ids_total{source=message} = %v, want 1", got)
			}
			e.wantSlotFree("s", "B")

			d.NumDelivered = 2 // the dead letter failed: JetStream delivers it again
			e.wantReused("redelivered", e.deliver(d)[0], "s", "A")
			if rows, got := e.reusedRows("B"), e.invalid("s"); len(rows) != 1 || got != 1 {
				t.Errorf("after a redelivery: %d rows, invalid %d; want 1 and 1 (counted once)", len(rows), got)
			}

			dup := e.deliver(e.msg("order-42", "s", "A", 1))[0]
			if dup != nil {
				t.Errorf("message for A, the first use's own: %v, want the first outcome kept (acked)", dup)
			}
		})
	}
}

// TestReusedIDPrior: a message redelivered (looked up in the ledger before
// it is decided) whose id the ledger holds for another scene is parked
// without asking the window store; one for the same scene and recipient
// keeps the outcome the ledger holds.
func TestReusedIDPrior(t *testing.T) {
	for name, open := range stacks(t) {
		t.Run(name, func(t *testing.T) {
			e := newReuseEnv(t, open(t))
			if errs := e.deliver(e.msg("x", "s", "A", 1)); errs[0] != nil {
				t.Fatal(errs[0])
			}
			e.wantReused("x in scene t", e.deliver(e.msg("x", "t", "A", 2))[0], "s", "A")
			e.wantSlotFree("t", "A")
			if rows := e.reusedRows("A"); len(rows) != 1 || rows[0].Scene != "t" {
				t.Errorf("A's reused_id rows: %+v, want one in t", rows)
			}
			if err := e.deliver(e.msg("x", "s", "A", 2))[0]; err != nil {
				t.Errorf("x redelivered as it was: %v, want its first outcome (acked)", err)
			}
			if got := e.out.forwarded(); len(got) != 2 || got[0] != e.id("x") || got[1] != e.id("x") {
				t.Errorf("forwarded %v, want x, then x replayed", got)
			}
		})
	}
}

// TestReusedIDTwins: one batch holding an id twice, for two recipients:
// the first decides, the second is parked naming it. Twins of one message
// are still one message.
func TestReusedIDTwins(t *testing.T) {
	for name, open := range stacks(t) {
		t.Run(name, func(t *testing.T) {
			e := newReuseEnv(t, open(t))
			errs := e.deliver(e.msg("x", "s", "A", 1), e.msg("x", "s", "B", 1), e.msg("y", "s", "C", 1), e.msg("y", "s", "C", 1))
			if errs[0] != nil || errs[2] != nil || errs[3] != nil {
				t.Fatalf("verdicts %v, want x for A and both y decided", errs)
			}
			e.wantReused("x for B", errs[1], "s", "A")
			if got := e.out.forwarded(); len(got) != 2 || got[0] != e.id("x") || got[1] != e.id("y") {
				t.Errorf("forwarded %v, want x (for A) and y once", got)
			}
			if rows := e.reusedRows("B"); len(rows) != 1 {
				t.Errorf("B's reused_id rows: %+v, want one", rows)
			}
			e.wantSlotFree("s", "B")
		})
	}
}

// TestReusedIDChecks: a check reusing an id for another recipient or scene
// answers 409 (a *gate.ReusedError) and takes no slot, whether the id was a
// message's or a check's, and whether it meets the first use before
// deciding or at its claim (two gates asking at once); a check repeating an
// id as it was gets the first answer.
func TestReusedIDChecks(t *testing.T) {
	for name, open := range stacks(t) {
		t.Run(name, func(t *testing.T) {
			e := newReuseEnv(t, open(t))
			if errs := e.deliver(e.msg("m", "s", "A", 1)); errs[0] != nil {
				t.Fatal(errs[0])
			}
			wantConflict := func(what string, a gate.CheckAnswer, err error) {
				t.Helper()
				var re *gate.ReusedError
				if !errors.As(err, &re) || gate.Classify(err) != gate.ClassConflict || re.First.Recipient != e.who("A") {
					t.Errorf("%s: got %+v, %v; want a conflict naming A's use", what, a, err)
				}
			}
			a, err := e.check("m", "s", "B")
			wantConflict("check of a message's id for B", a, err)
			a, err = e.check("m", "t", "A")
			wantConflict("check of a message's id in another scene", a, err)
			if a, err := e.check("m", "s", "A"); err != nil || !a.Duplicate || !a.Admitted {
				t.Errorf("check of the message's id as it was: %+v, %v; want its outcome, as a duplicate", a, err)
			}
			e.wantSlotFree("s", "B")
			e.wantSlotFree("t", "A")

			// Two gates, one id, two recipients at once: one recipient's
			// checks win the claim, the other's answer 409 and keep no slot.
			other, err := pipeline.NewChecker(pipeline.CheckOptions{Rules: fixedRules{&gate.RuleSet{UnknownScene: gate.ActionDrop, Version: "v1",
				Scenes: map[string]gate.SceneRule{"s": {Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, OnExceed: gate.ActionSuppress}}}},
				Store: e.st.store, Audit: e.st.audit, Answers: e.st.audit})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				r := []string{"C", "D"}[i%2]
				wg.Go(func() {
					c := e.c
					if i%4 >= 2 {
						c = other
					}
					_, errs[i] = c.Check(context.Background(), fmt.Appendf(nil, `{"id":%q,"scene":"s","receive_id":%q}`, e.id("race"), e.label+r))
				})
			}
			wg.Wait()
			lost := map[string]int{}
			for i, err := range errs {
				r := []string{"C", "D"}[i%2]
				switch {
				case err == nil:
				case errors.Is(err, gate.ErrReusedID):
					lost[r]++
				default:
					t.Errorf("check %d for %s: %v", i, r, err)
				}
			}
			if len(lost) != 1 || (lost["C"] != 4 && lost["D"] != 4) {
				t.Fatalf("conflicts by recipient %v, want all 4 checks of one recipient", lost)
			}
			for r := range lost {
				e.wantSlotFree("s", r)
			}
			// The other gate counts its own: 2 here, and 2 of the race.
			if got := e.reusedCount("check"); got != 4 {
				t.Errorf("gate_reused_ids_total{source=check} = %v, want 4", got)
			}
		})
	}
}
