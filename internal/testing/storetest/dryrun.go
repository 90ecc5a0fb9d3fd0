package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// A dry run is decided as a real request would be, and records nothing:
// no id, no member, no TAT, no key.
func testDryRunRecordsNothing(t *testing.T, b Backend) {
	r := newRecipient()
	w, g, capw, capg := lim(time.Hour, 2), rate(time.Hour, 3), lim(time.Hour, 5), rate(time.Hour, 4)
	q := func(dry bool) gate.AdmitRequest {
		x := tightReq(r, "s", newID(), w, g)
		x.Caps, x.DryRun = limits(capw, capg), dry
		return x
	}
	want := gate.Exceeded{Scope: gate.ScopeScene, Limit: w, Count: 1}
	d := q(true)
	for i := range 3 {
		got := admitOne(t, b.Store, d)
		wantAdmitted(t, fmt.Sprintf("dry run %d", i+1), got)
		wantTightest(t, fmt.Sprintf("dry run %d", i+1), got, want)
	}
	if b.Keys != nil {
		wantKeys(t, b, r, 0)
	}
	real := d
	real.DryRun = false
	got := admitOne(t, b.Store, real)
	wantAdmitted(t, "the same id for real", got)
	wantTightest(t, "the same id for real", got, want)
	wantDuplicate(t, "a dry run of an admitted id", admitOne(t, b.Store, d))
	var members, keys int
	if b.Keys != nil {
		members, keys = b.Members(t, r, "s"), b.Keys(t, r)
	}
	after := admitOne(t, b.Store, q(true))
	wantTightest(t, "a second dry run", after, gate.Exceeded{Scope: gate.ScopeScene, Limit: w, Count: 2})
	wantTightest(t, "a second dry run, again", admitOne(t, b.Store, q(true)), gate.Exceeded{Scope: gate.ScopeScene, Limit: w, Count: 2})
	if b.Keys != nil {
		wantMembers(t, b, r, "s", members)
		wantKeys(t, b, r, keys)
	}
}

// A dry run over a full limit is rejected exactly as the real request.
func testDryRunDecidesAsReal(t *testing.T, b Backend) {
	for _, tc := range []struct {
		name   string
		limits []gate.Limit
		caps   []gate.Limit
	}{
		{"window", limits(lim(time.Hour, 1)), nil},
		{"rate", limits(rate(time.Hour, 1)), nil},
		{"cap window", nil, limits(lim(time.Hour, 1))},
		{"cap rate", limits(lim(time.Hour, 5)), limits(rate(time.Hour, 1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecipient()
			q := func(dry bool) gate.AdmitRequest {
				return gate.AdmitRequest{ID: newID(), Recipient: r, Scene: "s", Limits: tc.limits, Caps: tc.caps, DryRun: dry}
			}
			wantAdmitted(t, "a", admitOne(t, b.Store, q(false)))
			dry := admitOne(t, b.Store, q(true))
			real := admitOne(t, b.Store, q(false))
			if dry.Exceeded == nil || real.Exceeded == nil {
				t.Fatalf("dry %s, real %s: want both rejected", show(dry), show(real))
			}
			wantRejected(t, "dry run", dry, *real.Exceeded, real.NextAllowedAt)
		})
	}
}

// Tightest names the limit with the fewest slots left once the message is
// admitted (the first of equals, scene limits before caps), with its count
// including the message; forced admissions report it too, over the max.
func testTightest(t *testing.T, b Backend) {
	r := newRecipient()
	w, g, capw := lim(time.Hour, 3), rate(time.Hour, 2), lim(time.Hour, 5)
	q := func(force bool) gate.AdmitRequest {
		x := tightReq(r, "s", newID(), w, g)
		x.Caps, x.Force = limits(capw), force
		return x
	}
	// Left after a: window 2, rate 1, cap 4.
	wantTightest(t, "a", admitOne(t, b.Store, q(false)), gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 1})
	// Left after b: window 1, rate 0, cap 3.
	wantTightest(t, "b", admitOne(t, b.Store, q(false)), gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 2})
	// Forced c: window 0, rate -1 (its TAT stays a burst ahead), cap 2.
	wantTightest(t, "forced c", admitOne(t, b.Store, q(true)), gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 3})

	// Equal slots left: the first limit wins.
	r2 := newRecipient()
	x := tightReq(r2, "s", newID(), lim(time.Hour, 2), lim(24*time.Hour, 2))
	x.Caps = limits(lim(time.Hour, 2))
	wantTightest(t, "equals", admitOne(t, b.Store, x), gate.Exceeded{Scope: gate.ScopeScene, Limit: lim(time.Hour, 2), Count: 1})
	// The cap tighter than the scene.
	y := tightReq(r2, "t", newID(), lim(time.Hour, 5))
	y.Caps = limits(lim(time.Hour, 2))
	wantTightest(t, "cap", admitOne(t, b.Store, y), gate.Exceeded{Scope: gate.ScopeRecipient, Limit: lim(time.Hour, 2), Count: 2})

	if got := admitOne(t, b.Store, tightReq(newRecipient(), "s", newID())); got.Tightest != nil {
		t.Fatalf("no limits: Tightest = %+v, want nil", got.Tightest)
	}
}

// Without WantTightest an admission reports no tightest limit, real or
// dry run, forced or not, in the scene and in the caps.
func testTightestOnlyWhenAsked(t *testing.T, b Backend) {
	r := newRecipient()
	w, g, capw := lim(time.Hour, 3), rate(time.Hour, 2), lim(time.Hour, 5)
	for i, mode := range []string{"real", "dry run", "forced"} {
		x := req(r, "s", newID(), w, g)
		x.Caps, x.DryRun, x.Force = limits(capw), i == 1, i == 2
		got := admitOne(t, b.Store, x)
		wantAdmitted(t, mode, got)
		if got.Tightest != nil {
			t.Fatalf("%s without WantTightest: Tightest = %+v, want nil", mode, got.Tightest)
		}
	}
}
