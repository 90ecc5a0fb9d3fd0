package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// forgetCases are the cases of Forget in windows that hold more than one
// member: a refund, or a check taking its admission back, names one
// message of a window that counts others too, and only that one may leave.
var forgetCases = []testCase{
	{"ForgetOneOfSeveral", testForgetOneOfSeveral},
}

// testForgetOneOfSeveral forgets the middle one of three admissions in a
// scene window of 3 and a cap window of 4 (one-member windows cannot tell
// the forgotten member from the oldest). The oldest and the newest stay:
// asked again they are duplicates, and each window reopens when the oldest
// leaves it; the forgotten id is new to the scene again.
func testForgetOneOfSeveral(t *testing.T, b Backend) {
	r, l, capl := newRecipient(), lim(time.Hour, 3), lim(time.Hour, 4)
	q := func(scene string) gate.AdmitRequest { return withCaps(req(r, scene, newID(), l), capl) }
	// Apart by more than the clock's resolution, so that "oldest" is one
	// member on every store.
	oldest, middle, newest := q("s"), q("s"), q("s")
	first := admitOne(t, b.Store, oldest)
	wantAdmitted(t, "oldest", first)
	b.Sleep(5 * ms)
	second := admitOne(t, b.Store, middle)
	wantAdmitted(t, "middle", second)
	b.Sleep(5 * ms)
	wantAdmitted(t, "newest", admitOne(t, b.Store, newest))
	if !second.Now.After(first.Now) {
		t.Fatalf("middle admitted at %s, not after oldest at %s: the store's clock did not move", stamp(second.Now), stamp(first.Now))
	}

	if err := b.Store.Forget(context.Background(), []gate.AdmitRequest{middle}); err != nil {
		t.Fatalf("Forget(middle): %v", err)
	}
	if b.Members != nil {
		wantMembers(t, b, r, "s", 2)
		wantMembers(t, b, r, "", 2)
	}
	wantDuplicate(t, "oldest, still remembered", admitOne(t, b.Client(t), oldest))
	wantDuplicate(t, "newest, still remembered", admitOne(t, b.Store, newest))

	// The scene window has one place again; once it is taken, it reopens
	// when the oldest leaves, and the forgotten id is refused, not a
	// duplicate.
	wantAdmitted(t, "a fourth, in the place the middle one left", admitOne(t, b.Store, q("s")))
	reopen := first.Now.Add(time.Hour)
	wantRejected(t, "a fifth, scene window full", admitOne(t, b.Store, q("s")), gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 3}, reopen)
	wantRejected(t, "middle again, forgotten", admitOne(t, b.Store, middle), gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 3}, reopen)

	// The cap window holds oldest, newest and the fourth: one more place,
	// then it too reopens when the oldest leaves it.
	wantAdmitted(t, "another scene, under the cap", admitOne(t, b.Store, q("t")))
	wantRejected(t, "another scene, cap full", admitOne(t, b.Store, q("t")), gate.Exceeded{Scope: gate.ScopeRecipient, Limit: capl, Count: 4}, reopen)
}

// withCaps is q under the recipient caps caps.
func withCaps(q gate.AdmitRequest, caps ...gate.Limit) gate.AdmitRequest {
	q.Caps = caps
	return q
}
