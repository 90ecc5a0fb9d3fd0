package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// rateCases check rate (GCRA) limits, dry runs and the tightest limit of
// an admission. Intervals of an hour make every expectation exact on a
// real clock too: no interval passes while a case runs, so the theoretical
// arrival time only moves by the admissions the case makes.
var rateCases = []testCase{
	{"RateBurstThenInterval", testRateBurstThenInterval},
	{"RateRefills", testRateRefills},
	{"RateNextAllowedExact", testRateNextAllowedExact},
	{"RateAtomicWithWindows", testRateAtomicWithWindows},
	{"RateCapsAcrossScenes", testRateCapsAcrossScenes},
	{"RateDuplicates", testRateDuplicates},
	{"RateForget", testRateForget},
	{"RateForced", testRateForced},
	{"RateInBatch", testRateInBatch},
	{"RateKeysExpire", testRateKeysExpire},
	{"RateConcurrent", testRateConcurrent},
	{"RateConcurrentRefill", testRateConcurrentRefill},
	{"RateInvalid", testRateInvalid},
	{"DryRunRecordsNothing", testDryRunRecordsNothing},
	{"DryRunDecidesAsReal", testDryRunDecidesAsReal},
	{"Tightest", testTightest},
	{"TightestOnlyWhenAsked", testTightestOnlyWhenAsked},
}

func rate(every time.Duration, burst int) gate.Limit { return gate.Limit{Rate: every, Max: burst} }

// tightReq is req asking for the tightest limit, which the rate cases
// check (see gate.AdmitRequest.WantTightest).
func tightReq(recipient, scene, id string, l ...gate.Limit) gate.AdmitRequest {
	x := req(recipient, scene, id, l...)
	x.WantTightest = true
	return x
}

// wantTightest checks the tightest limit an admission reports.
func wantTightest(t *testing.T, what string, got gate.AdmitResult, want gate.Exceeded) {
	t.Helper()
	if got.Tightest == nil || *got.Tightest != want {
		t.Fatalf("%s: Tightest = %+v, want %+v", what, got.Tightest, want)
	}
}

// A burst of B passes at once, the next is held until one interval after
// the first; the count of a rate limit is the burst slots in use.
func testRateBurstThenInterval(t *testing.T, b Backend) {
	for _, burst := range []int{1, 3} {
		t.Run(fmt.Sprint(burst), func(t *testing.T) {
			r, l := newRecipient(), rate(time.Hour, burst)
			var first gate.AdmitResult
			for i := range burst + 2 {
				got := admitOne(t, b.Store, tightReq(r, "s", newID(), l))
				what := fmt.Sprintf("message %d of burst %d", i+1, burst)
				if i == 0 {
					first = got
				}
				if i < burst {
					wantAdmitted(t, what, got)
					wantTightest(t, what, got, gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: i + 1})
					continue
				}
				// TAT = first + burst hours: it admits again at TAT - (burst-1) h.
				wantRejected(t, what, got, gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: burst}, first.Now.Add(time.Hour))
			}
			wantAdmitted(t, "another scene", admitOne(t, b.Store, tightReq(r, "other", newID(), l)))
			wantAdmitted(t, "another recipient", admitOne(t, b.Store, tightReq(newRecipient(), "s", newID(), l)))
		})
	}
}

// gcra is the reference the stores are held to: interval and TAT in ms.
type gcra struct {
	every, burst, tat int64
}

// decide returns what the GCRA says at now (ms) and records an admission.
func (g *gcra) decide(now int64) (admitted bool, count int, next int64) {
	tat := max(g.tat, now)
	used := int((tat - now + g.every - 1) / g.every)
	if tat-now > (g.burst-1)*g.every {
		return false, used, tat - (g.burst-1)*g.every
	}
	g.tat = tat + g.every
	return true, used + 1, 0
}

// After the burst, one message per interval: checked against the
// reference GCRA at the store's own decision times.
func testRateRefills(t *testing.T, b Backend) {
	const every = 200 * ms
	r, l := newRecipient(), rate(every, 2)
	model := gcra{every: every.Milliseconds(), burst: 2}
	admitted := 0
	for i := 0; admitted < 5; i++ {
		if i == 40 {
			t.Fatalf("only %d admitted in 40 tries over %v", admitted, 40*70*ms)
		}
		got := admitOne(t, b.Store, tightReq(r, "s", newID(), l))
		what := fmt.Sprintf("try %d at %s", i+1, stamp(got.Now))
		ok, count, next := model.decide(got.Now.UnixMilli())
		if ok {
			admitted++
			wantAdmitted(t, what, got)
			wantTightest(t, what, got, gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: count})
		} else {
			wantRejected(t, what, got, gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: count}, time.UnixMilli(next))
		}
		b.Sleep(70 * ms)
	}
}

// NextAllowedAt is the first instant the limit admits: a retry then passes.
// With a settable clock, a millisecond earlier does not.
func testRateNextAllowedExact(t *testing.T, b Backend) {
	r, l := newRecipient(), rate(300*ms, 2)
	a := admitOne(t, b.Store, tightReq(r, "s", newID(), l))
	wantAdmitted(t, "a", a)
	wantAdmitted(t, "b", admitOne(t, b.Store, tightReq(r, "s", newID(), l)))
	x := tightReq(r, "s", newID(), l)
	got := admitOne(t, b.Store, x)
	if !got.Now.Before(a.Now.Add(300 * ms)) {
		t.Skipf("x decided %v after a: the machine is too slow for this test", got.Now.Sub(a.Now))
	}
	// TAT = a + 600ms (if b shared a's millisecond, else b + 300ms).
	if got.Admitted || got.Exceeded == nil || got.NextAllowedAt.Before(a.Now.Add(300*ms)) || got.NextAllowedAt.After(a.Now.Add(600*ms)) {
		t.Fatalf("x: got %s, want rejected until between a+300ms and a+600ms", show(got))
	}
	if b.Travel != nil {
		b.Travel(t, got.NextAllowedAt.Add(-ms))
		early := admitOne(t, b.Store, x)
		wantRejected(t, "x 1ms early", early, *got.Exceeded, got.NextAllowedAt)
		b.Travel(t, got.NextAllowedAt)
		on := admitOne(t, b.Store, x)
		wantAdmitted(t, "x at next_allowed_at", on)
		if !on.Now.Equal(got.NextAllowedAt) {
			t.Fatalf("x decided at %s, want %s", stamp(on.Now), stamp(got.NextAllowedAt))
		}
		return
	}
	sleepUntil(t, b, got.NextAllowedAt)
	wantAdmitted(t, "x once next_allowed_at passed", admitOne(t, b.Store, x))
}

// A message is admitted only if every limit admits it, and only then is
// anything recorded: a window rejecting it leaves the TAT alone, a rate
// limit rejecting it leaves the windows alone, in the scene and the caps.
func testRateAtomicWithWindows(t *testing.T, b Backend) {
	t.Run("window rejects", func(t *testing.T) {
		w, g := lim(time.Hour, 1), rate(time.Hour, 3)
		// The rate limit counts a alone: b took no slot.
		sceneRejects(t, b, w, g, w, g, "c, rate only")
	})
	t.Run("rate rejects", func(t *testing.T) {
		w, g := lim(time.Hour, 5), rate(time.Hour, 1)
		r := sceneRejects(t, b, w, g, g, w, "c, window only")
		if b.Members != nil {
			wantMembers(t, b, r, "s", 2)
		}
	})
	t.Run("cap rate rejects", func(t *testing.T) {
		w, g := lim(time.Hour, 5), rate(time.Hour, 1)
		capRejects(t, b, w, g, "s1", "s2", "c, in s2 without caps", gate.Exceeded{Scope: gate.ScopeScene, Limit: w, Count: 1})
	})
	t.Run("cap window rejects", func(t *testing.T) {
		g, capw := rate(time.Hour, 2), lim(time.Hour, 1)
		capRejects(t, b, g, capw, "s", "s", "c, without caps", gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 2})
	})
}

// sceneRejects admits a under the window w and the rate g, has the
// rejecting one of them refuse b, and has c, under the kept one alone, find
// a's slot there and nothing of b: it returns the recipient.
func sceneRejects(t *testing.T, b Backend, w, g, rejecting, kept gate.Limit, what string) string {
	t.Helper()
	r := newRecipient()
	a := admitOne(t, b.Store, tightReq(r, "s", newID(), w, g))
	wantAdmitted(t, "a", a)
	wantRejected(t, "b", admitOne(t, b.Store, tightReq(r, "s", newID(), w, g)), gate.Exceeded{Scope: gate.ScopeScene, Limit: rejecting, Count: 1}, a.Now.Add(time.Hour))
	c := admitOne(t, b.Store, tightReq(r, "s", newID(), kept))
	wantAdmitted(t, what, c)
	wantTightest(t, "c", c, gate.Exceeded{Scope: gate.ScopeScene, Limit: kept, Count: 2})
	return r
}

// capRejects admits a in scene first under the scene limit scene and the
// cap capl, has the cap reject b in scene then, and has c, in then without
// caps, report want as its tightest limit: the cap's refusal recorded
// nothing in the scene.
func capRejects(t *testing.T, b Backend, scene, capl gate.Limit, first, then, what string, want gate.Exceeded) {
	t.Helper()
	r := newRecipient()
	q := func(s string) gate.AdmitRequest {
		x := tightReq(r, s, newID(), scene)
		x.Caps = limits(capl)
		return x
	}
	a := admitOne(t, b.Store, q(first))
	wantAdmitted(t, "a", a)
	wantRejected(t, "b", admitOne(t, b.Store, q(then)), gate.Exceeded{Scope: gate.ScopeRecipient, Limit: capl, Count: 1}, a.Now.Add(time.Hour))
	c := admitOne(t, b.Store, tightReq(r, then, newID(), scene))
	wantTightest(t, what, c, want)
}

// A cap's rate limit is shared by the recipient's scenes, and a cap of a
// rate alone keeps no cap window.
func testRateCapsAcrossScenes(t *testing.T, b Backend) {
	r, g := newRecipient(), rate(time.Hour, 2)
	q := func(recipient, scene string) gate.AdmitRequest {
		return gate.AdmitRequest{ID: newID(), Recipient: recipient, Scene: scene, Caps: limits(g), WantTightest: true}
	}
	a := admitOne(t, b.Store, q(r, "s1"))
	wantAdmitted(t, "s1", a)
	wantTightest(t, "s1", a, gate.Exceeded{Scope: gate.ScopeRecipient, Limit: g, Count: 1})
	wantAdmitted(t, "s2", admitOne(t, b.Store, q(r, "s2")))
	wantRejected(t, "s3", admitOne(t, b.Store, q(r, "s3")), gate.Exceeded{Scope: gate.ScopeRecipient, Limit: g, Count: 2}, a.Now.Add(time.Hour))
	wantAdmitted(t, "another recipient", admitOne(t, b.Store, q(newRecipient(), "s3")))
	if b.Members != nil {
		wantMembers(t, b, r, "", 0)
		wantMembers(t, b, r, "s1", 1) // its ids, for duplicates
		wantMembers(t, b, r, "s3", 0)
		wantKeys(t, b, r, 3) // s1's and s2's ids, the caps' TAT
	}
}

// A scene whose only limit is a rate limit knows its ids again.
func testRateDuplicates(t *testing.T, b Backend) {
	r, g := newRecipient(), rate(time.Hour, 2)
	a := tightReq(r, "s", newID(), g)
	first := admitOne(t, b.Store, a)
	wantAdmitted(t, "a", first)
	wantDuplicate(t, "a again", admitOne(t, b.Store, a))
	if got := admitOne(t, b.Store, a); got.Tightest != nil {
		t.Fatalf("a duplicate: Tightest = %+v, want nil", got.Tightest)
	}
	wantDuplicate(t, "a from a second client", admitOne(t, b.Client(t), a))
	forced, dry := a, a
	forced.Force, dry.DryRun = true, true
	wantDuplicate(t, "a forced", admitOne(t, b.Store, forced))
	wantDuplicate(t, "a dry run", admitOne(t, b.Store, dry))
	bb := admitOne(t, b.Store, tightReq(r, "s", newID(), g))
	wantAdmitted(t, "b, so a counted once", bb)
	wantTightest(t, "b", bb, gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 2})
	wantDuplicate(t, "a, limit full", admitOne(t, b.Store, a))
	wantRejected(t, "c", admitOne(t, b.Store, tightReq(r, "s", newID(), g)), gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 2}, first.Now.Add(time.Hour))
}

// Forget gives back the slot an admission took from the scene's and the
// caps' rate limits, once, and only for an id that was admitted.
func testRateForget(t *testing.T, b Backend) {
	r, g, capg := newRecipient(), rate(time.Hour, 1), rate(time.Hour, 2)
	q := func(scene string) gate.AdmitRequest {
		x := tightReq(r, scene, newID(), g)
		x.Caps = limits(capg)
		return x
	}
	forget := func(what string, reqs ...gate.AdmitRequest) {
		t.Helper()
		if err := b.Store.Forget(context.Background(), reqs); err != nil {
			t.Fatalf("Forget %s: %v", what, err)
		}
	}
	a := q("s")
	first := admitOne(t, b.Store, a)
	wantAdmitted(t, "a", first)
	x := q("s")
	wantRejected(t, "x", admitOne(t, b.Store, x), gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 1}, first.Now.Add(time.Hour))
	forget("x, never admitted", x)
	wantRejected(t, "x after forgetting x", admitOne(t, b.Store, x), gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 1}, first.Now.Add(time.Hour))
	forget("a", a)
	got := admitOne(t, b.Store, x)
	wantAdmitted(t, "x once a is forgotten", got)
	// The cap counts x alone: a gave its slot back there too.
	wantTightest(t, "x", got, gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 1})
	forget("a again", a)
	y := q("t")
	yr := admitOne(t, b.Store, y)
	wantAdmitted(t, "y in another scene", yr)
	wantTightest(t, "y", yr, gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 1})
	// The cap's TAT is x + 2h: it reopens at x + 1h.
	wantRejected(t, "z, the cap full (a's second Forget gave nothing back)", admitOne(t, b.Store, q("u")),
		gate.Exceeded{Scope: gate.ScopeRecipient, Limit: capg, Count: 2}, got.Now.Add(time.Hour))
}

// A forced admission counts in a rate limit, and holds it shut for one
// interval at most, however many are forced: the TAT stays within a burst
// of now, as a window keeps no more members than its largest max.
func testRateForced(t *testing.T, b Backend) {
	r, g := newRecipient(), rate(time.Hour, 2)
	var last gate.AdmitResult
	for i := range 5 {
		q := tightReq(r, "s", newID(), g)
		q.Force = true
		last = admitOne(t, b.Store, q)
		wantAdmitted(t, fmt.Sprintf("forced %d", i+1), last)
		// Slots in use before: min(i, 2); the tightest counts this one too.
		wantTightest(t, fmt.Sprintf("forced %d", i+1), last, gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: min(i, 2) + 1})
	}
	got := admitOne(t, b.Store, tightReq(r, "s", newID(), g))
	if got.Admitted || got.Exceeded == nil || got.Exceeded.Count != 2 {
		t.Fatalf("after 5 forced: got %s, want rejected with 2 slots in use", show(got))
	}
	if reopen := got.NextAllowedAt.Sub(got.Now); reopen > time.Hour || reopen <= 0 {
		t.Fatalf("after 5 forced: reopens in %v, want within the interval (1h)", reopen)
	}
}

// Requests with and without rate limits share a batch (and on one Redis a
// script call): each is decided on its own keys, in order.
func testRateInBatch(t *testing.T, b Backend) {
	r1, r2, r3 := newRecipient(), newRecipient(), newRecipient()
	g, w, capg := rate(time.Hour, 2), lim(time.Hour, 1), rate(time.Hour, 1)
	c1 := tightReq(r3, "s1", newID(), w)
	c1.Caps = limits(capg)
	c2 := tightReq(r3, "s2", newID(), w)
	c2.Caps = limits(capg)
	dry := tightReq(r1, "s", newID(), g)
	dry.DryRun = true
	a := tightReq(r1, "s", newID(), g)
	got := admit(t, b.Store,
		a,
		tightReq(r2, "s", newID(), w),
		dry,
		c1,
		tightReq(r1, "s", newID(), g),
		a,
		tightReq(r2, "s", newID(), w),
		c2,
		tightReq(r1, "s", newID(), g),
	)
	wantAdmitted(t, "r1 a", got[0])
	wantTightest(t, "r1 a", got[0], gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 1})
	wantAdmitted(t, "r2 first", got[1])
	wantTightest(t, "r2 first", got[1], gate.Exceeded{Scope: gate.ScopeScene, Limit: w, Count: 1})
	wantAdmitted(t, "r1 dry run", got[2])
	wantTightest(t, "r1 dry run", got[2], gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 2})
	wantAdmitted(t, "r3 s1", got[3])
	wantAdmitted(t, "r1 b", got[4])
	wantTightest(t, "r1 b", got[4], gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 2})
	wantDuplicate(t, "r1 a again", got[5])
	wantRejected(t, "r2 second", got[6], gate.Exceeded{Scope: gate.ScopeScene, Limit: w, Count: 1}, got[1].Now.Add(time.Hour))
	wantRejected(t, "r3 s2", got[7], gate.Exceeded{Scope: gate.ScopeRecipient, Limit: capg, Count: 1}, got[3].Now.Add(time.Hour))
	wantRejected(t, "r1 c", got[8], gate.Exceeded{Scope: gate.ScopeScene, Limit: g, Count: 2}, got[0].Now.Add(time.Hour))
}

// A rate limit's keys vanish one second after they are last needed: the
// TAT once it has passed, the scene's ids after burst intervals.
func testRateKeysExpire(t *testing.T, b Backend) {
	needKeys(t, b)
	r := newRecipient()
	q := gate.AdmitRequest{ID: newID(), Recipient: r, Scene: "s", Limits: limits(rate(200*ms, 2)), Caps: limits(rate(300*ms, 1))}
	first := admitOne(t, b.Store, q)
	wantAdmitted(t, "a", first)
	wantKeys(t, b, r, 3) // the scene's ids, its TAT, the caps' TAT; no cap window
	sleepUntil(t, b, first.Now.Add(400*ms+time.Second))
	wantKeys(t, b, r, 0)
}

// Many clients hammering one recipient never admit more than the bursts.
func testRateConcurrent(t *testing.T, b Backend) {
	concurrentTwoScenes(t, b, rate(time.Hour, 3), rate(time.Hour, 4), true)
}

// Under concurrent load while the limit refills, the admissions between
// the first and the last never exceed the burst plus one per interval
// elapsed between them, on the store's clock.
func testRateConcurrentRefill(t *testing.T, b Backend) {
	const workers, perWorker, every = 8, 10, 100 * ms
	r, g := newRecipient(), rate(every, 3)
	admitted, errs := hammer(t, b, workers, perWorker, func(w, i int) gate.AdmitRequest {
		if i > 0 {
			b.Sleep(25 * ms)
		}
		return tightReq(r, "s", newID(), g)
	})
	if len(errs) > 0 {
		t.Fatalf("%d of %d calls failed, first: %v", len(errs), workers*perWorker, errs[0])
	}
	if len(admitted) < g.Max {
		t.Fatalf("admitted %d, want at least the burst %d", len(admitted), g.Max)
	}
	first, last := admitted[0].at, admitted[0].at
	for _, a := range admitted {
		first, last = min(first, a.at), max(last, a.at)
	}
	if bound := int64(g.Max) + (last-first)/every.Milliseconds(); int64(len(admitted)) > bound {
		t.Fatalf("admitted %d in %dms, want at most %d (burst %d + one per %v)", len(admitted), last-first, bound, g.Max, every)
	}
}

func testRateInvalid(t *testing.T, b Backend) {
	for _, tc := range []struct {
		name string
		edit func(*gate.AdmitRequest)
	}{
		{"two rate limits", func(q *gate.AdmitRequest) { q.Limits = limits(rate(time.Hour, 1), rate(time.Minute, 1)) }},
		{"two cap rate limits", func(q *gate.AdmitRequest) { q.Caps = limits(rate(time.Hour, 1), rate(time.Minute, 1)) }},
		{"rate and window", func(q *gate.AdmitRequest) { q.Limits = limits(gate.Limit{Rate: time.Hour, Window: time.Hour, Max: 1}) }},
		{"rate and calendar", func(q *gate.AdmitRequest) {
			q.Limits = limits(gate.Limit{Rate: time.Hour, Calendar: gate.CalendarDay, Max: 1})
		}},
		{"negative rate", func(q *gate.AdmitRequest) { q.Limits = limits(rate(-time.Hour, 1)) }},
		{"zero burst", func(q *gate.AdmitRequest) { q.Caps = limits(rate(time.Hour, 0)) }},
	} {
		t.Run(tc.name, func(t *testing.T) { wantInvalid(t, b, tc.edit) })
	}
}
