package pipeline

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// The tests of this file guard where a failed window store may and may not
// fail open, and what a shadow scene does to a held message (issue 19's
// gaps). They drive the core through its front ends only.

// failOpenScene is a scene that forwards, unchecked, what its window store
// cannot answer (on_store_error: forward).
func failOpenScene(onExceed gate.Action) gate.SceneRule {
	return gate.SceneRule{Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, OnExceed: onExceed,
		MaxDefer: 6 * time.Hour, OnStoreError: gate.ActionForward}
}

// A held message never fails open, even in a scene whose on_store_error is
// forward: a Releaser round whose window store fails is an error, forwards
// nothing and settles nothing, and the message stays held, to be released
// by a later round once the store is back. Failing open here would let a
// deferred message out unchecked, ahead of the window it is waiting for.
func TestReleaseHeldNeverFailsOpen(t *testing.T) {
	e := newReleaseEnv(t)
	e.rules.Scenes["fo"] = failOpenScene(gate.ActionDefer)
	e.hold(gate.HoldDefer, "fo", "fo", "held")
	e.store.fail = fmt.Errorf("fake: %w", gate.ErrUnavailable)
	if _, err := e.r.Round(t.Context()); err == nil {
		t.Errorf("round with the window store down: got no error, want one (a held message does not fail open)")
	}
	if got := e.out.forwarded(); len(got) != 0 {
		t.Errorf("forwarded %v with the window store down, want nothing", got)
	}
	if h, ok := e.box.row("held"); !ok || !h.DueAt.Equal(noon) {
		t.Errorf("held: in the hold box %v, due at %v; want still held, due at %v", ok, h.DueAt, noon)
	}
	if _, got := e.box.state(); len(got) != 0 {
		t.Errorf("settled %v, want nothing", got)
	}

	e.store.fail = nil
	e.round(t)
	if got := e.out.forwarded(); !slices.Equal(got, []string{"held"}) {
		t.Fatalf("forwarded %v once the store is back, want [held]", got)
	}
	if f := e.out.fs[0]; f.Unchecked {
		t.Errorf("held forwarded with Unchecked %v, want false (a checked release)", f.Unchecked)
	}
	e.settled(t, map[string]gate.SettleKind{"held": gate.SettleReleased})
}

// scriptedWindow is a window store that answers its calls in turn, as the
// script says: the nth call gets script[n] (the last one repeats). A step
// with an error fails the call with it; without one, it admits every
// request but those of the ids in over, which it finds over the limit.
// calls records the ids of each call.
type scriptedWindow struct {
	admitAll
	mu     sync.Mutex
	script []windowStep
	calls  [][]string
}

type windowStep struct {
	err  error
	over []string
}

func (s *scriptedWindow) Admit(_ context.Context, reqs []gate.AdmitRequest) ([]gate.AdmitResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.ID
	}
	step := s.script[min(len(s.calls), len(s.script)-1)]
	s.calls = append(s.calls, ids)
	if step.err != nil {
		return nil, step.err
	}
	res := make([]gate.AdmitResult, len(reqs))
	for i, r := range reqs {
		if slices.Contains(step.over, r.ID) {
			res[i] = gate.AdmitResult{Exceeded: &gate.Exceeded{Scope: gate.ScopeScene, Limit: r.Limits[0], Count: r.Limits[0].Max},
				NextAllowedAt: noon.Add(time.Hour), Now: noon}
			continue
		}
		res[i] = gate.AdmitResult{Admitted: true, Now: noon}
	}
	return res, nil
}

// An answer the window store gave stands when a later call of the same
// batch fails: here the store refuses the whole batch for a request it can
// never decide, so it is asked in halves; it answers the first half (a is
// admitted, b is over the limit) and then fails on the second. Only c and
// d, which it never answered, fail open (forwarded unchecked, as their
// scene's on_store_error says); b stays suppressed and a is a checked
// forward. Failing b open would forward a message its window refused.
func TestFailOpenKeepsAnswersGivenBeforeTheFailure(t *testing.T) {
	rs := &gate.RuleSet{UnknownScene: gate.ActionForward, Version: "v1", Scenes: map[string]gate.SceneRule{
		"s": failOpenScene(gate.ActionSuppress),
	}}
	win := &scriptedWindow{script: []windowStep{
		{err: fmt.Errorf("fake: %w: one request of the batch", gate.ErrInvalidRequest)},
		{over: []string{"b"}},
		{err: fmt.Errorf("fake: %w", gate.ErrUnavailable)},
	}}
	led, out := newLedger(t), newOutbox(t)
	p, err := New(Options{Rules: staticRules{rs}, Store: win, Audit: led, Forwarder: out, Now: func() time.Time { return noon }})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "c", "d"}
	errs := handle(p, t.Context(), sequenced(ids...))
	for i, err := range errs {
		if err != nil {
			t.Errorf("%s: got %v, want it decided", ids[i], err)
		}
	}
	if want := [][]string{{"a", "b", "c", "d"}, {"a", "b"}, {"c", "d"}}; fmt.Sprint(win.calls) != fmt.Sprint(want) {
		t.Fatalf("window store calls %v, want %v (the batch, then its halves)", win.calls, want)
	}
	if got, want := out.forwarded(), []string{"a", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("forwarded %v, want %v (b was over its limit)", got, want)
	}
	if got := led.priors["b"].Outcome; got != gate.OutcomeSuppress {
		t.Errorf("b: ledger says %q, want %q: the store's answer stands", got, gate.OutcomeSuppress)
	}
	for _, f := range out.fs {
		if want := f.MessageID != "a"; f.Unchecked != want {
			t.Errorf("%s: forwarded with Unchecked %v, want %v", f.MessageID, f.Unchecked, want)
		}
	}
}

// A message held (deferred) in a scene later switched to shadow mode is
// let out by the next Releaser round even while its window is still full:
// a shadow scene forwards what it would have held, so the release says what
// enforcement would have done (Gate-Shadow: defer). Keeping it held, or
// giving it its fallback, would enforce a scene the rules say only to
// observe.
func TestReleaseShadowSceneLetsHeldOut(t *testing.T) {
	e := newReleaseEnv(t)
	e.hold(gate.HoldDefer, "d", "d", "first")
	e.hold(gate.HoldDefer, "d", "d", "x")
	e.round(t) // first takes the window's one place an hour; x stays held
	if h, ok := e.box.row("x"); !ok || !h.DueAt.Equal(noon.Add(time.Hour)) {
		t.Fatalf("x: held %v, due at %v; want held until %v", ok, h.DueAt, noon.Add(time.Hour))
	}

	rule := e.rules.Scenes["d"]
	rule.Shadow = true
	e.rules.Scenes["d"] = rule
	e.now = noon.Add(time.Hour)
	e.store.reject["x"] = noon.Add(2 * time.Hour) // its window is still full
	e.round(t)
	if got := e.out.forwarded(); !slices.Equal(got, []string{"first", "x"}) {
		t.Fatalf("forwarded %v, want [first x]: a shadow scene lets out what its full window holds", got)
	}
	if f := e.out.fs[1]; f.ShadowOf != gate.ActionDefer || f.Bypass || f.Unchecked || !f.DeferredFrom.Equal(noon) {
		t.Errorf("x forwarded with ShadowOf %q, Bypass %v, Unchecked %v, deferred from %v; want ShadowOf %q, neither flag, deferred from %v",
			f.ShadowOf, f.Bypass, f.Unchecked, f.DeferredFrom, gate.ActionDefer, noon)
	}
	e.settled(t, map[string]gate.SettleKind{"x": gate.SettleReleased})
}
