package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/testing/testenv"
)

// Harness is what Run needs of a WindowStore implementation.
type Harness struct {
	// Open returns a fresh Backend for one test; Run calls it from parallel
	// tests. Clean up with t.Cleanup.
	Open func(t *testing.T) Backend
}

// Backend is one store under test and the hooks that let the suite move its
// clock and look inside it.
type Backend struct {
	// Store is the store under test.
	Store gate.WindowStore
	// Client returns another client of the same underlying store: for Redis
	// a Store over a second connection pool, in process the same Store.
	Client func(t *testing.T) gate.WindowStore
	// Sleep lets d pass on the store's clock: a real sleep, or a fake clock
	// moved forward.
	Sleep func(d time.Duration)
	// Now reads the store's clock.
	Now func(t *testing.T) time.Time
	// Keys counts the windows (keys) the store holds for recipient, after
	// the store's own expiry has had its chance to run. Optional: the tests
	// that need it skip without it.
	Keys func(t *testing.T, recipient string) int
	// Members counts the entries the store holds in one window: the scene
	// window of (recipient, scene), or with scene "", the recipient cap
	// window. Optional, like Keys.
	Members func(t *testing.T, recipient, scene string) int
	// Travel sets the store's clock to a later instant: only a fake clock
	// can, so it is optional. The calendar cases use it to cross period
	// boundaries and to decide on daylight-saving days; without it they
	// check what the real time allows.
	Travel func(t *testing.T, to time.Time)
}

// Run runs the conformance suite against the stores h opens.
func Run(t *testing.T, h Harness) {
	t.Helper()
	for _, tc := range slices.Concat(cases, forgetCases, calendarCases, rateCases) {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := h.Open(t)
			if b.Store == nil || b.Client == nil || b.Sleep == nil || b.Now == nil {
				t.Fatal("harness: Backend needs Store, Client, Sleep and Now")
			}
			tc.run(t, b)
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, b Backend)
}

// ms is the resolution of every store clock.
const ms = time.Millisecond

// slack is added to sleeps on a real clock so that a decision lands clearly
// after the instant it waits for.
const slack = 30 * ms

func lim(w time.Duration, max int) gate.Limit { return gate.Limit{Window: w, Max: max} }

func limits(l ...gate.Limit) []gate.Limit { return l }

func newRecipient() string { return "open_id:" + testenv.Unique("r") }

func newID() string { return testenv.Unique("m") }

func req(recipient, scene, id string, l ...gate.Limit) gate.AdmitRequest {
	return gate.AdmitRequest{ID: id, Recipient: recipient, Scene: scene, Limits: l}
}

// admit runs one batch and fails the test on an error or a short answer.
func admit(t *testing.T, s gate.WindowStore, reqs ...gate.AdmitRequest) []gate.AdmitResult {
	t.Helper()
	res, err := s.Admit(context.Background(), reqs)
	if err != nil {
		t.Fatalf("Admit(%d requests): %v", len(reqs), err)
	}
	if len(res) != len(reqs) {
		t.Fatalf("Admit(%d requests) returned %d results", len(reqs), len(res))
	}
	return res
}

func admitOne(t *testing.T, s gate.WindowStore, r gate.AdmitRequest) gate.AdmitResult {
	t.Helper()
	return admit(t, s, r)[0]
}

// wantAdmitted checks a fresh admission.
func wantAdmitted(t *testing.T, what string, got gate.AdmitResult) {
	t.Helper()
	if !got.Admitted || got.Duplicate || got.Exceeded != nil || !got.NextAllowedAt.IsZero() {
		t.Fatalf("%s: got %s, want admitted", what, show(got))
	}
	checkNow(t, what, got)
}

func wantDuplicate(t *testing.T, what string, got gate.AdmitResult) {
	t.Helper()
	if !got.Admitted || !got.Duplicate || got.Exceeded != nil || !got.NextAllowedAt.IsZero() {
		t.Fatalf("%s: got %s, want duplicate", what, show(got))
	}
	checkNow(t, what, got)
}

// wantRejected checks a rejection: which limit, the count, and when the
// window reopens (exactly: every time involved is the store's, in ms).
func wantRejected(t *testing.T, what string, got gate.AdmitResult, want gate.Exceeded, next time.Time) {
	t.Helper()
	if got.Admitted || got.Duplicate || got.Exceeded == nil || *got.Exceeded != want || !got.NextAllowedAt.Equal(next) {
		t.Fatalf("%s: got %s, want rejected by %+v, next allowed at %s", what, show(got), want, stamp(next))
	}
	checkNow(t, what, got)
}

func checkNow(t *testing.T, what string, got gate.AdmitResult) {
	t.Helper()
	if got.Now.IsZero() || !got.Now.Equal(got.Now.Truncate(ms)) {
		t.Fatalf("%s: Now %s is not a store time in whole milliseconds", what, stamp(got.Now))
	}
}

func show(r gate.AdmitResult) string {
	s := fmt.Sprintf("{Admitted:%v Duplicate:%v Now:%s", r.Admitted, r.Duplicate, stamp(r.Now))
	if r.Exceeded != nil {
		s += fmt.Sprintf(" Exceeded:%+v", *r.Exceeded)
	}
	if !r.NextAllowedAt.IsZero() {
		s += " NextAllowedAt:" + stamp(r.NextAllowedAt)
	}
	return s + "}"
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000Z") }

// sleepUntil lets the store's clock pass at, plus slack.
func sleepUntil(t *testing.T, b Backend, at time.Time) {
	t.Helper()
	if d := at.Sub(b.Now(t)) + slack; d > 0 {
		b.Sleep(d)
	}
}

func needKeys(t *testing.T, b Backend) {
	t.Helper()
	if b.Keys == nil || b.Members == nil {
		t.Skip("harness has no Keys or Members hook")
	}
}

func wantMembers(t *testing.T, b Backend, recipient, scene string, want int) {
	t.Helper()
	if got := b.Members(t, recipient, scene); got != want {
		t.Fatalf("Members(%q, %q) = %d, want %d", recipient, scene, got, want)
	}
}

func wantKeys(t *testing.T, b Backend, recipient string, want int) {
	t.Helper()
	if got := b.Keys(t, recipient); got != want {
		t.Fatalf("Keys(%q) = %d, want %d", recipient, got, want)
	}
}

func wantUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, gate.ErrUnavailable) {
		t.Fatalf("%s: got error %v, want one that wraps gate.ErrUnavailable", what, err)
	}
}
