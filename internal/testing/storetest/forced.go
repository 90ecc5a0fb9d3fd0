package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// forcedForgetCases check that Forget gives back what a forced admission
// (a bypass priority) took, and nothing else (issue 28, hole 3). Past a
// full limit a forced admission takes less than a plain one: a rate
// limit's TAT moves only up to a burst ahead of now, and a full window's
// oldest entry leaves for it. Its refund must not free a slot that
// another message holds. Intervals and windows of an hour keep every
// expectation exact on a real clock.
var forcedForgetCases = []testCase{
	{"ForgetForcedPastFullRate", testForgetForcedPastFullRate},
	{"ForgetForcedWithRoom", testForgetForcedWithRoom},
	{"ForgetForcedPastFullWindow", testForgetForcedPastFullWindow},
	{"ForgetForcedPastOneWindowOfTwo", testForgetForcedPastOneWindowOfTwo},
}

// RunForcedForget runs the cases of Forget after forced admissions against
// the stores h opens, as Run runs the others.
func RunForcedForget(t *testing.T, h Harness) {
	t.Helper()
	for _, tc := range forcedForgetCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, h.Open(t))
		})
	}
}

// forgetAll forgets reqs, failing the test on an error.
func forgetAll(t *testing.T, s gate.WindowStore, what string, reqs ...gate.AdmitRequest) {
	t.Helper()
	if err := s.Forget(context.Background(), reqs); err != nil {
		t.Fatalf("Forget %s: %v", what, err)
	}
}

// forced is q as a bypass priority asks for it.
func forced(q gate.AdmitRequest) gate.AdmitRequest {
	q.Force = true
	return q
}

// A forced admission past a full rate limit moves its TAT only up to a
// burst ahead of now: its Forget gives back that much, not an interval.
// Both rate limits (the scene's and the caps') are full after a; three
// forced admissions later, forgotten (twice), a's slot is still taken, to
// the millisecond. (The scene's window, never full, keeps the forced ids:
// a scene with a rate limit alone keeps a burst of them, and Forget of an
// id no longer kept gives back nothing.)
func testForgetForcedPastFullRate(t *testing.T, b Backend) {
	r, g, l, capg := newRecipient(), rate(time.Hour, 1), lim(time.Hour, 5), rate(time.Hour, 1)
	q := func(scene string) gate.AdmitRequest { return withCaps(req(r, scene, newID(), g, l), capg) }
	a := admitOne(t, b.Store, q("s"))
	wantAdmitted(t, "a", a)
	reopen := a.Now.Add(time.Hour)
	var us []gate.AdmitRequest
	for range 3 {
		// Apart on the store's clock, so that each moves the TATs.
		b.Sleep(5 * ms)
		u := forced(q("s"))
		wantAdmitted(t, "a forced one past the full rate", admitOne(t, b.Store, u))
		us = append(us, u)
	}
	forgetAll(t, b.Store, "the forced ones", us...)
	forgetAll(t, b.Client(t), "the forced ones again", us...)
	if b.Members != nil {
		wantMembers(t, b, r, "s", 1)
	}
	wantRejected(t, "x, a's slot still taken", admitOne(t, b.Store, q("s")),
		gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 1}, reopen)
	wantRejected(t, "y in another scene, a's cap slot still taken", admitOne(t, b.Store, q("t")),
		gate.Exceeded{Scope: gate.ScopeRecipient, Limit: capg, Count: 1}, reopen)
}

// A forced admission with room takes a slot like any other, and its
// Forget gives the slot back whole.
func testForgetForcedWithRoom(t *testing.T, b Backend) {
	r, g, l := newRecipient(), rate(time.Hour, 2), lim(time.Hour, 2)
	q := func() gate.AdmitRequest { return req(r, "s", newID(), g, l) }
	a := admitOne(t, b.Store, q())
	wantAdmitted(t, "a", a)
	u := forced(q())
	wantAdmitted(t, "u, forced with room", admitOne(t, b.Store, u))
	forgetAll(t, b.Store, "u", u)
	if b.Members != nil {
		wantMembers(t, b, r, "s", 1)
	}
	wantAdmitted(t, "x, in the slot u gave back", admitOne(t, b.Store, q()))
	got := admitOne(t, b.Store, q())
	if got.Admitted || got.Exceeded == nil || got.Exceeded.Count != 2 {
		t.Fatalf("z: got %s, want rejected with a and x counted", show(got))
	}
}

// In a full window a forced admission's entry takes the place of the
// oldest, which still counted: the window keeps only its newest max
// members. Its Forget leaves it there, in the scene window and the cap
// window alike, so the windows stay full; asked again, it still gives
// nothing back.
func testForgetForcedPastFullWindow(t *testing.T, b Backend) {
	r, l, capl := newRecipient(), lim(time.Hour, 1), lim(time.Hour, 1)
	q := func(scene string) gate.AdmitRequest { return withCaps(req(r, scene, newID(), l), capl) }
	wantAdmitted(t, "a", admitOne(t, b.Store, q("s")))
	b.Sleep(5 * ms)
	u := forced(q("s"))
	got := admitOne(t, b.Store, u)
	wantAdmitted(t, "u, forced past the full window", got)
	reopen := got.Now.Add(time.Hour)
	for _, s := range []gate.WindowStore{b.Store, b.Client(t)} {
		forgetAll(t, s, "u", u)
		if b.Members != nil {
			wantMembers(t, b, r, "s", 1)
			wantMembers(t, b, r, "", 1)
		}
		wantRejected(t, "x, the window still full", admitOne(t, b.Store, q("s")),
			gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 1}, reopen)
		wantRejected(t, "y in another scene, the cap still full", admitOne(t, b.Store, q("t")),
			gate.Exceeded{Scope: gate.ScopeRecipient, Limit: capl, Count: 1}, reopen)
	}
}

// A forced admission past one full window of two, that pushed no entry
// out (the other window keeps more), took a place in both; its Forget
// gives both back: the day counts a alone again.
func testForgetForcedPastOneWindowOfTwo(t *testing.T, b Backend) {
	r, hour, day := newRecipient(), lim(time.Hour, 1), lim(24*time.Hour, 3)
	q := func() gate.AdmitRequest { return req(r, "s", newID(), hour, day) }
	a := admitOne(t, b.Store, q())
	wantAdmitted(t, "a", a)
	u := forced(q())
	wantAdmitted(t, "u, forced past the hour", admitOne(t, b.Store, u))
	forgetAll(t, b.Store, "u", u)
	if b.Members != nil {
		wantMembers(t, b, r, "s", 1)
	}
	wantRejected(t, "x, within a's hour", admitOne(t, b.Store, q()),
		gate.Exceeded{Scope: gate.ScopeScene, Limit: hour, Count: 1}, a.Now.Add(time.Hour))
}
