package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// The tests of this file close gaps an audit of the decision core found
// (single-line mutations no test caught): how a check takes a store's
// refusal for good, quiet hours against a queue that holds messages, and
// a message that finds the slot of a check of its id. They drive the core
// through its front ends only (Checker, Pipeline), on the fakes of
// check_test.go, hold_test.go and pipeline_test.go.

// reopen replaces f's Checker with one over f's stores, on f's clock, with
// the options edit makes.
func (f *checkFixture) reopen(t *testing.T, edit func(o *CheckOptions)) {
	t.Helper()
	o := CheckOptions{Rules: staticRules{checkRules()}, Store: f.store, Audit: f.ledger, Answers: f.answers,
		Now: func() time.Time { return f.now }}
	edit(&o)
	var err error
	if f.c, err = NewChecker(o); err != nil {
		t.Fatal(err)
	}
}

// refusingAnswers is an answerBox whose lookups fail with err.
type refusingAnswers struct {
	*answerBox
	err error
}

func (r refusingAnswers) Answer(context.Context, string) (gate.CheckAnswer, bool, gate.Prior, error) {
	return gate.CheckAnswer{}, false, gate.Prior{}, r.err
}

// TestCheckRefusedForGoodIsInvalid protects the 400 of a check that a store
// refuses for good (gate.ErrPermanent: data it cannot hold;
// gate.ErrInvalidRequest: a request it can never decide), on every store a
// check meets: the window store (admit), the hold store (Waiting, when the
// check's scene holds messages), the audit log (commit) and the answer
// lookup. Asked again, the check fails again: a 503 (gate.ErrUnavailable,
// ErrCheckStore) would have its caller retry it forever.
func TestCheckRefusedForGoodIsInvalid(t *testing.T) {
	stores := []struct {
		name, scene string
		refuse      func(t *testing.T, f *checkFixture, o *CheckOptions, err error)
	}{
		{"window store", "s", func(_ *testing.T, f *checkFixture, _ *CheckOptions, err error) { f.store.fail = err }},
		{"hold store", "d", func(t *testing.T, _ *checkFixture, o *CheckOptions, err error) {
			box := newHoldBox(t)
			box.failWaiting = err
			o.Holds = box
		}},
		{"audit commit", "s", func(_ *testing.T, f *checkFixture, _ *CheckOptions, err error) {
			f.ledger.fail = func([]gate.Record) error { return err }
		}},
		{"answer lookup", "s", func(_ *testing.T, f *checkFixture, o *CheckOptions, err error) {
			o.Answers = refusingAnswers{f.answers, err}
		}},
	}
	for _, st := range stores {
		for name, why := range map[string]error{"ErrPermanent": gate.ErrPermanent, "ErrInvalidRequest": gate.ErrInvalidRequest} {
			t.Run(st.name+"/"+name, func(t *testing.T) {
				f := newCheckFixture(t)
				f.reopen(t, func(o *CheckOptions) { st.refuse(t, f, o, fmt.Errorf("fake: %w", why)) })
				_, err := f.c.Check(context.Background(), checkBody("c1", st.scene, ""))
				var ie *gate.InvalidError
				if !errors.As(err, &ie) || errors.Is(err, gate.ErrUnavailable) || errors.Is(err, ErrCheckStore) {
					t.Fatalf("got %v (class %d), want an *gate.InvalidError (400) wrapping neither gate.ErrUnavailable nor ErrCheckStore (503)",
						err, gate.Classify(err))
				}
				if _, ok := f.ledger.recs["c1"]; ok || f.store.taken(st.scene) != 0 {
					t.Errorf("got a ledger row %v, %d slots taken; want nothing recorded for a refused check", ok, f.store.taken(st.scene))
				}
			})
		}
	}
}

// TestQuietHoursBeforeTheQueue protects the quiet action of a message its
// quiet hours hold while its queue holds messages: quiet hours decide it
// whatever its queue holds (suppress, drop), so it is not held behind the
// queue (defer or digest, reason queued), to be forwarded in the night
// once the queue drains. Its scene holds messages when over its limit
// (defer, digest), so it has a queue to wait in.
func TestQuietHoursBeforeTheQueue(t *testing.T) {
	e := newHoldEnv(t, true)
	rs := holdRules()
	night := func(a gate.Action) *gate.QuietHours {
		return &gate.QuietHours{From: 22 * time.Hour, To: 8 * time.Hour, Action: a}
	}
	rs.Scenes["ds"] = gate.SceneRule{Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, OnExceed: gate.ActionDefer, QuietHours: night(gate.ActionSuppress)}
	rs.Scenes["gd"] = gate.SceneRule{Limits: []gate.Limit{{Window: time.Hour, Max: 1}}, OnExceed: gate.ActionDigest, QuietHours: night(gate.ActionDrop)}
	p, err := New(Options{Rules: staticRules{rs}, Store: e.store, Audit: e.led, Holds: e.box, Forwarder: e.out, Now: func() time.Time { return e.now }})
	if err != nil {
		t.Fatal(err)
	}
	e.p, e.now = p, time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC)
	e.box.add(gate.Held{MessageID: "old-ds", Kind: gate.HoldDefer, Queue: gate.Queue{Recipient: "open_id:ou_1", Name: "ds"}, Scene: "ds", Seq: 1, DueAt: e.now})
	e.box.add(gate.Held{MessageID: "old-gd", Kind: gate.HoldDigest, Queue: gate.Queue{Recipient: "open_id:ou_1", Name: "digest:gd"}, Scene: "gd", Seq: 2, DueAt: e.now})
	e.seq = 2
	noErrors(t, handle(e.p, t.Context(), []gate.Delivery{e.msg("ds", "ds1", ""), e.msg("gd", "gd1", "")}))
	for id, want := range map[string]gate.Outcome{"ds1": gate.OutcomeSuppress, "gd1": gate.OutcomeDrop} {
		if r := e.record(t, id); r.Outcome != want || r.Hold != nil {
			held := "nothing"
			if r.Hold != nil {
				held = fmt.Sprintf("in %s for %s", r.Hold.Queue.Name, r.Hold.Reason)
			}
			t.Errorf("%s: got %s, held %s; want %s by quiet hours, not held behind its queue", id, r.Outcome, held, want)
		}
	}
	if r := e.record(t, "ds1"); r.Suppression == nil || r.Suppression.Reason != gate.ReasonQuietHours {
		reason := "no audit row"
		if r.Suppression != nil {
			reason = r.Suppression.Reason
		}
		t.Errorf("ds1: got reason %q, want %s", reason, gate.ReasonQuietHours)
	}

	// A check answers as the message would be decided.
	f := newCheckFixture(t)
	crs := checkRules()
	crs.Scenes["dq"] = gate.SceneRule{Limits: []gate.Limit{{Window: time.Hour, Max: 2}}, OnExceed: gate.ActionDefer,
		QuietHours: crs.Scenes["quiet"].QuietHours}
	f.reopen(t, func(o *CheckOptions) {
		o.Rules = staticRules{crs}
		o.Holds = waitingBox{queues: map[gate.Queue]bool{{Recipient: "open_id:u", Name: "dq"}: true}}
	})
	if a := f.check(t, checkBody("c1", "dq", "")); a.Decision != gate.OutcomeDrop || a.Reason != gate.ReasonQuietHours {
		t.Errorf("check: got %s, reason %q; want %s, reason %s", a.Decision, a.Reason, gate.OutcomeDrop, gate.ReasonQuietHours)
	}
}

// TestMessageOnACheckedIDKeepsTheCheckSlot protects the slot of a check
// whose id a message then uses: check X takes the one slot; message X,
// decided a minute later, finds X in the window (a duplicate, which
// counted nothing) and takes the check's outcome at its commit. Taken for
// an admission of its own, its forget on conflict would take X out of the
// window (its decision is later than the check's, so it shares no slot),
// and message Y would get the slot that X holds.
func TestMessageOnACheckedIDKeepsTheCheckSlot(t *testing.T) {
	f := newCheckFixture(t)
	rs := checkRules()
	s := rs.Scenes["s"]
	s.Limits = []gate.Limit{{Window: time.Hour, Max: 1}}
	rs.Scenes["s"] = s
	f.reopen(t, func(o *CheckOptions) { o.Rules = staticRules{rs} })
	if a := f.check(t, checkBody("x", "s", "")); !a.Admitted {
		t.Fatalf("check x: got %+v, want admitted", a)
	}

	later := f.now.Add(time.Minute)
	f.store.mu.Lock()
	f.store.now = later
	f.store.mu.Unlock()
	out := newOutbox(t)
	p, err := New(Options{Rules: staticRules{rs}, Store: f.store, Audit: f.ledger, Forwarder: out, Now: func() time.Time { return later }})
	if err != nil {
		t.Fatal(err)
	}
	f.ledger.mayCommitAgain("x")
	msg := func(id string, seq uint64) gate.Delivery {
		return gate.Delivery{Data: fmt.Appendf(nil, `{"id":%q,"scene":"s","receive_id":"u"}`, id), Seq: seq, NumDelivered: 1, ReceivedAt: later}
	}
	noErrors(t, handle(p, t.Context(), []gate.Delivery{msg("x", 1)}))
	noErrors(t, handle(p, t.Context(), []gate.Delivery{msg("y", 2)}))
	if f.ledger.commits["x"] != 1 || f.ledger.recs["x"].Outcome != gate.OutcomeForward {
		t.Errorf("x: %d claims, ledger %s; want the check's one claim, a forward, kept by the message", f.ledger.commits["x"], f.ledger.recs["x"].Outcome)
	}
	if slices.Contains(f.store.forgot, "x") || f.store.taken("s") != 1 {
		t.Errorf("forgot %v, %d slots taken; want x's one slot kept", f.store.forgot, f.store.taken("s"))
	}
	if r := f.ledger.recs["y"]; r.Outcome != gate.OutcomeSuppress {
		t.Errorf("y: got %s, want %s: the window holds x", r.Outcome, gate.OutcomeSuppress)
	}
	if got := out.forwarded(); slices.Contains(got, "y") {
		t.Errorf("forwarded %v, want y not among them", got)
	}
}
