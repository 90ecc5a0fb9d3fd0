package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

var cases = []testCase{
	{"FirstAdmittedSecondRejected", testFirstAdmittedSecondRejected},
	{"MaxAdmitsExactlyMax", testMaxAdmitsExactlyMax},
	{"OnlyAdmittedMessagesCount", testOnlyAdmittedMessagesCount},
	{"WindowSlides", testWindowSlides},
	{"SeveralLimits", testSeveralLimits},
	{"RecipientCapsAcrossScenes", testRecipientCapsAcrossScenes},
	{"NoCapsLeavesCapWindowAlone", testNoCapsLeavesCapWindowAlone},
	{"SceneWithoutLimitsUnderCaps", testSceneWithoutLimitsUnderCaps},
	{"NoLimitsKeepsNothing", testNoLimitsKeepsNothing},
	{"ForceAdmitsAndCounts", testForceAdmitsAndCounts},
	{"Duplicates", testDuplicates},
	{"Forget", testForget},
	{"RejectedIDNotRemembered", testRejectedIDNotRemembered},
	{"SameMillisecond", testSameMillisecond},
	{"BatchDecidedInOrder", testBatchDecidedInOrder},
	{"BatchOfMixedLimits", testBatchOfMixedLimits},
	{"KeysExpire", testKeysExpire},
	{"MemoryBounded", testMemoryBounded},
	{"Concurrent", testConcurrent},
	{"NowIsStoreClock", testNowIsStoreClock},
	{"InvalidRequests", testInvalidRequests},
	{"EmptyBatch", testEmptyBatch},
	{"ContextDone", testContextDone},
}

func testFirstAdmittedSecondRejected(t *testing.T, b Backend) {
	r, l := newRecipient(), lim(time.Hour, 1)
	first := admitOne(t, b.Store, req(r, "s", newID(), l))
	wantAdmitted(t, "first", first)
	second := admitOne(t, b.Store, req(r, "s", newID(), l))
	wantRejected(t, "second", second, gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 1}, first.Now.Add(time.Hour))
	wantAdmitted(t, "other scene", admitOne(t, b.Store, req(r, "other", newID(), l)))
	wantAdmitted(t, "other recipient", admitOne(t, b.Store, req(newRecipient(), "s", newID(), l)))
}

func testMaxAdmitsExactlyMax(t *testing.T, b Backend) {
	for _, max := range []int{1, 2, 5} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			r, l := newRecipient(), lim(time.Hour, max)
			var first gate.AdmitResult
			for i := range max + 2 {
				got := admitOne(t, b.Store, req(r, "s", newID(), l))
				what := fmt.Sprintf("message %d of max %d", i+1, max)
				switch {
				case i == 0:
					first = got
					wantAdmitted(t, what, got)
				case i < max:
					wantAdmitted(t, what, got)
				default:
					// The oldest of the max admitted must leave first.
					wantRejected(t, what, got, gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: max}, first.Now.Add(time.Hour))
				}
			}
		})
	}
}

// A producer retrying rejected messages for longer than the window cannot
// lock the recipient out: the first attempt after the window is admitted.
func testOnlyAdmittedMessagesCount(t *testing.T, b Backend) {
	r, l := newRecipient(), lim(time.Second, 1)
	first := admitOne(t, b.Store, req(r, "s", newID(), l))
	wantAdmitted(t, "first", first)
	reopen := first.Now.Add(time.Second)
	for i := 0; ; i++ {
		if i == 30 {
			t.Fatal("no retry was admitted within 3s of a 1s window")
		}
		b.Sleep(100 * ms)
		got := admitOne(t, b.Store, req(r, "s", newID(), l))
		what := fmt.Sprintf("retry %d", i+1)
		if got.Now.Before(reopen) {
			wantRejected(t, what, got, gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 1}, reopen)
			continue
		}
		wantAdmitted(t, what+" after the window", got)
		return
	}
}

// The window is the trailing W before each decision, not a fixed interval:
// it reopens exactly W after the admission that blocks it.
func testWindowSlides(t *testing.T, b Backend) {
	r, l := newRecipient(), lim(time.Second, 2)
	a := admitOne(t, b.Store, req(r, "s", newID(), l))
	wantAdmitted(t, "a", a)
	b.Sleep(300 * ms)
	bb := admitOne(t, b.Store, req(r, "s", newID(), l))
	wantAdmitted(t, "b, 300ms later", bb)
	sleepUntil(t, b, a.Now.Add(time.Second))
	c := admitOne(t, b.Store, req(r, "s", newID(), l))
	wantAdmitted(t, "c, once a left the window", c)
	d := admitOne(t, b.Store, req(r, "s", newID(), l))
	if !d.Now.Before(bb.Now.Add(time.Second)) {
		t.Fatalf("d decided at %s, after b left the window at %s: the machine is too slow for this test", stamp(d.Now), stamp(bb.Now.Add(time.Second)))
	}
	wantRejected(t, "d, with b and c in the window", d, gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 2}, bb.Now.Add(time.Second))
}

// With 2/3s and 1/1s, the tighter limit rejects first; when both are
// exceeded the one that reopens last is reported.
func testSeveralLimits(t *testing.T, b Backend) {
	r := newRecipient()
	slow, fast := lim(3*time.Second, 2), lim(time.Second, 1)
	ls := limits(slow, fast)
	a := admitOne(t, b.Store, req(r, "s", newID(), ls...))
	wantAdmitted(t, "a", a)
	x := admitOne(t, b.Store, req(r, "s", newID(), ls...))
	wantRejected(t, "x, right after a", x, gate.Exceeded{Scope: gate.ScopeScene, Limit: fast, Count: 1}, a.Now.Add(time.Second))
	sleepUntil(t, b, a.Now.Add(time.Second))
	c := admitOne(t, b.Store, req(r, "s", newID(), ls...))
	wantAdmitted(t, "c, 1s after a", c)
	// fast reopens at c+1s, slow at a+3s: slow is the one to report.
	y := admitOne(t, b.Store, req(r, "s", newID(), ls...))
	wantRejected(t, "y, right after c", y, gate.Exceeded{Scope: gate.ScopeScene, Limit: slow, Count: 2}, a.Now.Add(3*time.Second))
}

func testRecipientCapsAcrossScenes(t *testing.T, b Backend) {
	r, scene, capl := newRecipient(), lim(time.Hour, 5), lim(time.Hour, 2)
	withCaps := func(recipient, s string) gate.AdmitRequest {
		q := req(recipient, s, newID(), scene)
		q.Caps = limits(capl)
		return q
	}
	first := admitOne(t, b.Store, withCaps(r, "s1"))
	wantAdmitted(t, "s1", first)
	wantAdmitted(t, "s2", admitOne(t, b.Store, withCaps(r, "s2")))
	got := admitOne(t, b.Store, withCaps(r, "s3"))
	wantRejected(t, "s3 over the cap", got, gate.Exceeded{Scope: gate.ScopeRecipient, Limit: capl, Count: 2}, first.Now.Add(time.Hour))
	wantAdmitted(t, "another recipient", admitOne(t, b.Store, withCaps(newRecipient(), "s3")))
	if b.Members != nil {
		wantMembers(t, b, r, "", 2)
		wantMembers(t, b, r, "s3", 0) // a rejection writes nothing
	}
}

// A request without caps neither reads nor fills the recipient cap window.
func testNoCapsLeavesCapWindowAlone(t *testing.T, b Backend) {
	r, capl := newRecipient(), lim(time.Hour, 1)
	capped := req(r, "s1", newID(), lim(time.Hour, 5))
	capped.Caps = limits(capl)
	first := admitOne(t, b.Store, capped)
	wantAdmitted(t, "capped", first)
	wantAdmitted(t, "uncapped, with the cap full", admitOne(t, b.Store, req(r, "s2", newID(), lim(time.Hour, 5))))
	again := req(r, "s3", newID(), lim(time.Hour, 5))
	again.Caps = limits(capl)
	wantRejected(t, "capped again", admitOne(t, b.Store, again), gate.Exceeded{Scope: gate.ScopeRecipient, Limit: capl, Count: 1}, first.Now.Add(time.Hour))
	if b.Members != nil {
		wantMembers(t, b, r, "", 1)
	}
	r2 := newRecipient()
	wantAdmitted(t, "uncapped only", admitOne(t, b.Store, req(r2, "s", newID(), lim(time.Hour, 1))))
	if b.Members != nil {
		wantMembers(t, b, r2, "", 0)
		wantKeys(t, b, r2, 1)
	}
}

// A scene with no limits of its own is still held by the caps, and still
// recognises its duplicates.
func testSceneWithoutLimitsUnderCaps(t *testing.T, b Backend) {
	r, capl := newRecipient(), lim(time.Hour, 2)
	a := gate.AdmitRequest{ID: newID(), Recipient: r, Scene: "s", Caps: limits(capl)}
	first := admitOne(t, b.Store, a)
	wantAdmitted(t, "a", first)
	wantDuplicate(t, "a again", admitOne(t, b.Store, a))
	a.ID = newID()
	wantAdmitted(t, "b", admitOne(t, b.Store, a))
	a.ID = newID()
	wantRejected(t, "c", admitOne(t, b.Store, a), gate.Exceeded{Scope: gate.ScopeRecipient, Limit: capl, Count: 2}, first.Now.Add(time.Hour))
}

// A request with neither limits nor caps is admitted and leaves no trace.
func testNoLimitsKeepsNothing(t *testing.T, b Backend) {
	r := newRecipient()
	a := req(r, "s", newID())
	wantAdmitted(t, "a", admitOne(t, b.Store, a))
	wantAdmitted(t, "a again", admitOne(t, b.Store, a))
	if b.Keys != nil {
		wantKeys(t, b, r, 0)
	}
}

func testForceAdmitsAndCounts(t *testing.T, b Backend) {
	r, l, capl := newRecipient(), lim(time.Hour, 1), lim(time.Hour, 2)
	q := func(force bool) gate.AdmitRequest {
		x := req(r, "s", newID(), l)
		x.Caps, x.Force = limits(capl), force
		return x
	}
	a := admitOne(t, b.Store, q(false))
	wantAdmitted(t, "a", a)
	forced := admitOne(t, b.Store, q(true))
	wantAdmitted(t, "forced over the limit", forced)
	// Both limits are now exceeded. The scene window keeps only its newest
	// member (its largest max), so it counts 1, and it reopens when forced
	// leaves, no earlier than the cap, which reopens when a leaves.
	wantRejected(t, "after the forced one", admitOne(t, b.Store, q(false)), gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 1}, forced.Now.Add(time.Hour))
	other := req(r, "other", newID(), lim(time.Hour, 5))
	other.Caps = limits(capl)
	// The cap's 2nd newest member is a, so the cap reopens when a leaves.
	wantRejected(t, "other scene", admitOne(t, b.Store, other), gate.Exceeded{Scope: gate.ScopeRecipient, Limit: capl, Count: 2}, a.Now.Add(time.Hour))
}

func testDuplicates(t *testing.T, b Backend) {
	r, l := newRecipient(), lim(time.Hour, 2)
	a := req(r, "s", newID(), l)
	first := admitOne(t, b.Store, a)
	wantAdmitted(t, "a", first)
	wantDuplicate(t, "a again", admitOne(t, b.Store, a))
	wantDuplicate(t, "a from a second client", admitOne(t, b.Client(t), a))
	forced := a
	forced.Force = true
	wantDuplicate(t, "a forced", admitOne(t, b.Store, forced))
	wantAdmitted(t, "b, so a counted once", admitOne(t, b.Store, req(r, "s", newID(), l)))
	// A duplicate is recognised even while the window is full.
	wantDuplicate(t, "a, window full", admitOne(t, b.Store, a))
	wantRejected(t, "c", admitOne(t, b.Store, req(r, "s", newID(), l)), gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 2}, first.Now.Add(time.Hour))
	if b.Members != nil {
		wantMembers(t, b, r, "s", 2)
	}
}

// Forget undoes an admission in the scene and cap windows alike; ids it
// does not hold, and an empty batch, change nothing.
func testForget(t *testing.T, b Backend) {
	r, l, capl := newRecipient(), lim(time.Hour, 1), lim(time.Hour, 1)
	q := func(scene string) gate.AdmitRequest {
		x := req(r, scene, newID(), l)
		x.Caps = limits(capl)
		return x
	}
	a := q("s")
	wantAdmitted(t, "a", admitOne(t, b.Store, a))
	if err := b.Store.Forget(context.Background(), []gate.AdmitRequest{a, q("s"), q("never")}); err != nil {
		t.Fatalf("Forget: %v", err)
	}
	if err := b.Client(t).Forget(context.Background(), nil); err != nil {
		t.Fatalf("Forget(nil): %v", err)
	}
	if b.Members != nil {
		wantMembers(t, b, r, "s", 0)
		wantMembers(t, b, r, "", 0)
	}
	// Both windows have room again, and a is new to them.
	wantAdmitted(t, "b in another scene, under the cap", admitOne(t, b.Store, q("t")))
	if err := b.Store.Forget(context.Background(), []gate.AdmitRequest{a}); err != nil {
		t.Fatalf("Forget again: %v", err)
	}
	c := a
	c.Caps = nil
	wantAdmitted(t, "a once forgotten", admitOne(t, b.Client(t), c))
}

func testRejectedIDNotRemembered(t *testing.T, b Backend) {
	r, l := newRecipient(), lim(time.Second, 1)
	first := admitOne(t, b.Store, req(r, "s", newID(), l))
	wantAdmitted(t, "a", first)
	x := req(r, "s", newID(), l)
	got := admitOne(t, b.Store, x)
	wantRejected(t, "x", got, gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 1}, first.Now.Add(time.Second))
	sleepUntil(t, b, got.NextAllowedAt)
	wantAdmitted(t, "x once the window reopened", admitOne(t, b.Store, x))
}

// Ids, not times, are the members: two admissions in one millisecond both count.
func testSameMillisecond(t *testing.T, b Backend) {
	r, l := newRecipient(), lim(time.Hour, 3)
	got := admit(t, b.Store, req(r, "s", newID(), l), req(r, "s", newID(), l), req(r, "s", newID(), l), req(r, "s", newID(), l))
	for i := range 3 {
		wantAdmitted(t, fmt.Sprintf("message %d", i+1), got[i])
	}
	wantRejected(t, "message 4", got[3], gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: 3}, got[0].Now.Add(time.Hour))
	if !got[0].Now.Equal(got[1].Now) {
		t.Logf("the batch spanned %v, so this run did not put two admissions in one millisecond", got[3].Now.Sub(got[0].Now))
	}
}

func testBatchDecidedInOrder(t *testing.T, b Backend) {
	r1, r2 := newRecipient(), newRecipient()
	l1, l2 := lim(time.Hour, 2), lim(time.Hour, 1)
	a := req(r1, "s", newID(), l1)
	got := admit(t, b.Store,
		a,
		req(r2, "s", newID(), l2),
		req(r1, "s", newID(), l1),
		a,
		req(r2, "s", newID(), l2),
		req(r1, "s", newID(), l1),
	)
	wantAdmitted(t, "r1 a", got[0])
	wantAdmitted(t, "r2 first", got[1])
	wantAdmitted(t, "r1 b", got[2])
	wantDuplicate(t, "r1 a again", got[3])
	wantRejected(t, "r2 second", got[4], gate.Exceeded{Scope: gate.ScopeScene, Limit: l2, Count: 1}, got[1].Now.Add(time.Hour))
	wantRejected(t, "r1 c", got[5], gate.Exceeded{Scope: gate.ScopeScene, Limit: l1, Count: 2}, got[0].Now.Add(time.Hour))
}

// One batch may mix requests of several limit sets (scenes, caps, a rule
// change between two messages of one window): each is decided by its own
// limits and caps, whatever the requests around it carry.
func testBatchOfMixedLimits(t *testing.T, b Backend) {
	r1, r2, r3 := newRecipient(), newRecipient(), newRecipient()
	one, two := lim(time.Hour, 1), lim(time.Hour, 2)
	capped := func(q gate.AdmitRequest) gate.AdmitRequest { q.Caps = limits(two); return q }
	got := admit(t, b.Store,
		req(r1, "s", newID(), one),
		capped(req(r2, "s", newID(), two)),
		capped(req(r3, "s", newID(), one)),
		req(r1, "s", newID(), one),
		capped(req(r2, "s", newID(), two)),
		capped(req(r3, "t", newID(), one)),
		capped(req(r2, "t", newID(), two)),
		req(r1, "s", newID(), two), // the scene's rule now allows two
		capped(req(r3, "u", newID())),
	)
	wantAdmitted(t, "r1 s", got[0])
	wantAdmitted(t, "r2 s", got[1])
	wantAdmitted(t, "r3 s", got[2])
	wantRejected(t, "r1 s again", got[3], gate.Exceeded{Scope: gate.ScopeScene, Limit: one, Count: 1}, got[0].Now.Add(time.Hour))
	wantAdmitted(t, "r2 s again", got[4])
	wantAdmitted(t, "r3 t", got[5])
	wantRejected(t, "r2 t", got[6], gate.Exceeded{Scope: gate.ScopeRecipient, Limit: two, Count: 2}, got[1].Now.Add(time.Hour))
	wantAdmitted(t, "r1 s under two", got[7])
	wantRejected(t, "r3 u", got[8], gate.Exceeded{Scope: gate.ScopeRecipient, Limit: two, Count: 2}, got[2].Now.Add(time.Hour))
}

// A recipient's windows vanish one second after their longest limit.
func testKeysExpire(t *testing.T, b Backend) {
	needKeys(t, b)
	r := newRecipient()
	q := req(r, "s", newID(), lim(200*ms, 1), lim(500*ms, 2))
	q.Caps = limits(lim(400*ms, 3))
	first := admitOne(t, b.Store, q)
	wantAdmitted(t, "a", first)
	wantKeys(t, b, r, 2)
	sleepUntil(t, b, first.Now.Add(500*ms+time.Second))
	wantKeys(t, b, r, 0)
}

// Forced admissions cannot grow a window past the largest max of its limits.
func testMemoryBounded(t *testing.T, b Backend) {
	needKeys(t, b)
	r := newRecipient()
	l := limits(lim(time.Hour, 2), lim(24*time.Hour, 3))
	reqs := make([]gate.AdmitRequest, 100)
	base := newID()
	for i := range reqs {
		// Ids ascend, so that "newest" is the same whether or not the
		// batch shares one millisecond (equal scores sort by member).
		reqs[i] = req(r, "s", fmt.Sprintf("%s-%03d", base, i), l...)
		reqs[i].Caps, reqs[i].Force = limits(lim(time.Hour, 5)), true
	}
	got := admit(t, b.Store, reqs...)
	for i := range got {
		wantAdmitted(t, fmt.Sprintf("forced %d", i+1), got[i])
	}
	wantMembers(t, b, r, "s", 3)
	wantMembers(t, b, r, "", 5)
	wantDuplicate(t, "the newest again", admitOne(t, b.Store, reqs[99]))
	// The count is of the members kept: at least every max, never all 100.
	res := admitOne(t, b.Store, req(r, "s", newID(), l...))
	wantRejected(t, "unforced", res, gate.Exceeded{Scope: gate.ScopeScene, Limit: l[1], Count: 3}, got[97].Now.Add(24*time.Hour))
}

// Many clients hammering one recipient never admit more than the limits.
func testConcurrent(t *testing.T, b Backend) {
	concurrentTwoScenes(t, b, lim(time.Hour, 3), lim(time.Hour, 4), false)
}

func testNowIsStoreClock(t *testing.T, b Backend) {
	before := b.Now(t).Truncate(ms)
	got := admitOne(t, b.Store, req(newRecipient(), "s", newID(), lim(time.Hour, 1)))
	after := b.Now(t)
	if got.Now.Before(before) || got.Now.After(after) {
		t.Fatalf("Now = %s, want between %s and %s on the store's clock", stamp(got.Now), stamp(before), stamp(after))
	}
}

// A request no valid rule can produce fails the whole batch, and nothing of
// the batch is recorded.
func testInvalidRequests(t *testing.T, b Backend) {
	for _, tc := range []struct {
		name string
		edit func(*gate.AdmitRequest)
	}{
		{"empty id", func(q *gate.AdmitRequest) { q.ID = "" }},
		{"empty recipient", func(q *gate.AdmitRequest) { q.Recipient = "" }},
		{"empty scene", func(q *gate.AdmitRequest) { q.Scene = "" }},
		{"zero window", func(q *gate.AdmitRequest) { q.Limits = limits(lim(0, 1)) }},
		{"negative window", func(q *gate.AdmitRequest) { q.Limits = limits(lim(-time.Second, 1)) }},
		{"zero max", func(q *gate.AdmitRequest) { q.Limits = limits(lim(time.Hour, 0)) }},
		{"zero cap max", func(q *gate.AdmitRequest) { q.Caps = limits(lim(time.Hour, 0)) }},
	} {
		t.Run(tc.name, func(t *testing.T) { wantInvalid(t, b, tc.edit) })
	}
}

// wantInvalid checks that a batch of a good request and one changed by edit
// fails as a whole, with an error retrying cannot help.
func wantInvalid(t *testing.T, b Backend, edit func(*gate.AdmitRequest)) {
	t.Helper()
	r := newRecipient()
	good := req(r, "s", newID(), lim(time.Hour, 1))
	bad := req(r, "s", newID(), lim(time.Hour, 1))
	edit(&bad)
	res, err := b.Store.Admit(context.Background(), []gate.AdmitRequest{good, bad})
	if err == nil || errors.Is(err, gate.ErrUnavailable) || !errors.Is(err, gate.ErrInvalidRequest) {
		t.Fatalf("Admit = %v, %v; want an error that wraps ErrInvalidRequest, not ErrUnavailable (retrying cannot help)", res, err)
	}
	wantAdmitted(t, "the good request, alone", admitOne(t, b.Store, good))
}

func testEmptyBatch(t *testing.T, b Backend) {
	res, err := b.Store.Admit(context.Background(), nil)
	if err != nil || len(res) != 0 {
		t.Fatalf("Admit(nil) = %v, %v; want no results, no error", res, err)
	}
	if err := b.Store.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func testContextDone(t *testing.T, b Backend) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := b.Store.Admit(ctx, []gate.AdmitRequest{req(newRecipient(), "s", newID(), lim(time.Hour, 1))})
	wantUnavailable(t, "Admit with a cancelled context", err)
	wantUnavailable(t, "Ping with a cancelled context", b.Store.Ping(ctx))
}
