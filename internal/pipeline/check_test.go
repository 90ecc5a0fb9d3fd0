package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/metrics"
)

// slots is a window store in memory for the checker's logic: each
// (recipient, scene) admits the Max of the request's first limit, ever (no
// window slides); it honours DryRun and reports Tightest, as the real stores
// do.
type slots struct {
	mu     sync.Mutex
	ids    map[string][]string // recipient/scene -> ids admitted
	calls  []gate.AdmitRequest
	forgot []string
	fail   error
	now    time.Time
}

func newSlots(now time.Time) *slots { return &slots{ids: map[string][]string{}, now: now} }

func (s *slots) Admit(_ context.Context, reqs []gate.AdmitRequest) ([]gate.AdmitResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	res := make([]gate.AdmitResult, len(reqs))
	for i, r := range reqs {
		s.calls = append(s.calls, r)
		k := r.Recipient + "/" + r.Scene
		l := r.Limits[0]
		res[i].Now = s.now
		switch {
		case slices.Contains(s.ids[k], r.ID):
			res[i].Admitted, res[i].Duplicate = true, true
		case len(s.ids[k]) < l.Max || r.Force:
			res[i].Admitted = true
			res[i].Tightest = &gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: len(s.ids[k]) + 1}
			if !r.DryRun {
				s.ids[k] = append(s.ids[k], r.ID)
			}
		default:
			res[i].Exceeded = &gate.Exceeded{Scope: gate.ScopeScene, Limit: l, Count: len(s.ids[k])}
			res[i].NextAllowedAt = s.now.Add(l.Window)
		}
	}
	return res, nil
}

func (s *slots) Forget(_ context.Context, reqs []gate.AdmitRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range reqs {
		k := r.Recipient + "/" + r.Scene
		s.ids[k] = slices.DeleteFunc(s.ids[k], func(id string) bool { return id == r.ID })
		s.forgot = append(s.forgot, r.ID)
	}
	return nil
}

func (s *slots) Ping(context.Context) error { return nil }

// taken is how many slots of recipient open_id:u in scene are taken.
func (s *slots) taken(scene string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids["open_id:u/"+scene])
}

// answerBox stores check answers in memory, beside a ledger whose outcomes
// it reports as the real store does; saved counts the saves.
type answerBox struct {
	mu      sync.Mutex
	l       *ledger
	answers map[string]gate.CheckAnswer
	saved   int
	// hideUntil hides an answer from the first lookups of an id, as a
	// concurrent check's answer is not there yet while it commits.
	hide map[string]int
}

func (b *answerBox) Answer(_ context.Context, id string) (gate.CheckAnswer, bool, gate.Prior, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.l.mu.Lock()
	prior := b.l.priors[id]
	b.l.mu.Unlock()
	if b.hide[id] > 0 {
		b.hide[id]--
		return gate.CheckAnswer{}, false, prior, nil
	}
	a, ok := b.answers[id]
	return a, ok, prior, nil
}

func (b *answerBox) Save(_ context.Context, id string, a gate.CheckAnswer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.saved++
	if _, ok := b.answers[id]; !ok {
		b.answers[id] = a
	}
	return nil
}

// waitingBox reports the queues it holds as waiting.
type waitingBox struct {
	gate.HoldStore
	queues map[gate.Queue]bool
}

func (w waitingBox) Waiting(_ context.Context, qs []gate.Queue) (map[gate.Queue]bool, error) {
	out := map[gate.Queue]bool{}
	for _, q := range qs {
		out[q] = w.queues[q]
	}
	return out, nil
}

// checkRules: scenes that suppress, defer, digest, fail open and are quiet
// all day, each at 2 per window.
func checkRules() *gate.RuleSet {
	two := []gate.Limit{{Window: time.Hour, Max: 2}}
	return &gate.RuleSet{UnknownScene: gate.ActionDrop, Version: "v7", Scenes: map[string]gate.SceneRule{
		"s":      {Limits: two, OnExceed: gate.ActionSuppress, BypassPriorities: []gate.Priority{gate.PriorityUrgent}},
		"d":      {Limits: two, OnExceed: gate.ActionDefer},
		"g":      {Limits: two, OnExceed: gate.ActionDigest},
		"open":   {Limits: two, OnExceed: gate.ActionSuppress, OnStoreError: gate.ActionForward},
		"shadow": {Limits: two, OnExceed: gate.ActionSuppress, Shadow: true},
		"quiet": {Limits: two, OnExceed: gate.ActionSuppress,
			QuietHours: &gate.QuietHours{From: 0, To: 24*time.Hour - time.Minute, Action: gate.ActionDrop}},
	}}
}

type checkFixture struct {
	c       *Checker
	store   *slots
	ledger  *ledger
	answers *answerBox
	m       *metrics.Metrics
	now     time.Time
}

func newCheckFixture(t *testing.T) *checkFixture {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	f := &checkFixture{store: newSlots(now), ledger: newLedger(t), m: metrics.New(prometheus.NewRegistry()), now: now}
	f.answers = &answerBox{l: f.ledger, answers: map[string]gate.CheckAnswer{}, hide: map[string]int{}}
	var err error
	f.c, err = NewChecker(CheckOptions{Rules: staticRules{checkRules()}, Store: f.store, Audit: f.ledger, Answers: f.answers,
		Metrics: f.m, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func checkBody(id, scene string, extra string) []byte {
	return fmt.Appendf(nil, `{"id":%q,"scene":%q,"receive_id":"u"%s}`, id, scene, extra)
}

func (f *checkFixture) check(t *testing.T, body []byte) gate.CheckAnswer {
	t.Helper()
	a, err := f.c.Check(context.Background(), body)
	if err != nil {
		t.Fatalf("Check(%s): %v", body, err)
	}
	return a
}

func TestCheckAdmitsAndRecords(t *testing.T) {
	f := newCheckFixture(t)
	a := f.check(t, checkBody("c1", "s", ""))
	if a.Decision != gate.OutcomeForward || !a.Admitted || a.Count != 1 || a.Limit == nil || a.Limit.Max != 2 ||
		a.RulesVersion != "v7" || a.Duplicate || a.NextAllowedAt != nil {
		t.Fatalf("got %+v, want an admitted forward, 1 of 2", a)
	}
	if got := f.store.taken("s"); got != 1 {
		t.Errorf("slots taken: got %d, want 1", got)
	}
	if rec := f.ledger.recs["c1"]; rec.Outcome != gate.OutcomeForward || rec.Recipient != "open_id:u" || rec.Scene != "s" {
		t.Errorf("ledger: got %+v, want c1 forwarded", rec)
	}
	if f.answers.answers["c1"].Decision != gate.OutcomeForward {
		t.Errorf("stored answer: got %+v", f.answers.answers["c1"])
	}
	if v := counterValue(t, f.m.Checks.WithLabelValues("forward", "false")); v != 1 {
		t.Errorf("gate_checks_total{forward}: got %v, want 1", v)
	}
}

func TestCheckSameIDGetsFirstAnswer(t *testing.T) {
	f := newCheckFixture(t)
	first := f.check(t, checkBody("c1", "s", ""))
	again := f.check(t, checkBody("c1", "s", ""))
	if !again.Duplicate || again.Decision != first.Decision || again.Count != first.Count || !again.DecidedAt.Equal(first.DecidedAt) {
		t.Errorf("again: got %+v, want the first answer %+v marked duplicate", again, first)
	}
	if got := f.store.taken("s"); got != 1 {
		t.Errorf("slots taken: got %d, want 1", got)
	}
	if len(f.store.calls) != 1 {
		t.Errorf("window store asked %d times, want once", len(f.store.calls))
	}
	// A dry run of an id answered before gets that answer too.
	if dry := f.check(t, checkBody("c1", "s", `,"dry_run":true`)); !dry.Duplicate || dry.DryRun {
		t.Errorf("dry run of an answered id: got %+v", dry)
	}
}

func TestCheckDryRunRecordsNothing(t *testing.T) {
	f := newCheckFixture(t)
	a := f.check(t, checkBody("c1", "s", `,"dry_run":true`))
	if !a.DryRun || !a.Admitted || a.Count != 1 {
		t.Errorf("got %+v, want an admitted dry run, count 1", a)
	}
	if !f.store.calls[0].DryRun {
		t.Error("the window store was not asked for a dry run")
	}
	if f.store.taken("s") != 0 || len(f.ledger.recs) != 0 || f.answers.saved != 0 {
		t.Errorf("a dry run recorded: %d slots, %d ledger rows, %d answers", f.store.taken("s"), len(f.ledger.recs), f.answers.saved)
	}
	// Asked for real afterwards, the id is decided then.
	if a := f.check(t, checkBody("c1", "s", "")); a.Duplicate || a.DryRun || f.store.taken("s") != 1 {
		t.Errorf("real check after a dry run: got %+v, %d slots", a, f.store.taken("s"))
	}
}

func TestCheckRefusals(t *testing.T) {
	tests := []struct {
		scene, extra string
		decision     gate.Outcome
		admitted     bool
		reason       string
		recorded     gate.Outcome
	}{
		{"s", "", gate.OutcomeSuppress, false, gate.ReasonLimit, gate.OutcomeSuppress},
		{"s", `,"priority":"urgent"`, gate.OutcomeForward, true, "", gate.OutcomeForward},
		{"d", "", gate.OutcomeDefer, false, gate.ReasonLimit, gate.OutcomeSuppress},
		{"g", "", gate.OutcomeDigest, false, gate.ReasonLimit, gate.OutcomeSuppress},
		{"shadow", "", gate.OutcomeForward, false, gate.ReasonLimit, gate.OutcomeForward},
	}
	for _, tt := range tests {
		t.Run(tt.scene+tt.extra, func(t *testing.T) {
			f := newCheckFixture(t)
			f.check(t, checkBody("a", tt.scene, ""))
			f.check(t, checkBody("b", tt.scene, ""))
			a := f.check(t, checkBody("c", tt.scene, tt.extra))
			if a.Decision != tt.decision || a.Admitted != tt.admitted || a.Reason != tt.reason {
				t.Fatalf("third check: got %+v, want %s admitted %v reason %q", a, tt.decision, tt.admitted, tt.reason)
			}
			if !tt.admitted && (a.NextAllowedAt == nil || !a.NextAllowedAt.Equal(f.now.Add(time.Hour)) || a.Count != 2 || a.Limit.Max != 2) {
				t.Errorf("got %+v, want 2 of 2 and next_allowed_at in an hour", a)
			}
			rec := f.ledger.recs["c"]
			if rec.Outcome != tt.recorded || rec.Hold != nil {
				t.Errorf("ledger: got %+v, want %s and nothing held", rec, tt.recorded)
			}
			if refused := !tt.admitted; refused != (rec.Suppression != nil) {
				t.Errorf("audit row: got %+v, want one exactly when refused", rec.Suppression)
			}
		})
	}
}

func TestCheckWithoutWindow(t *testing.T) {
	f := newCheckFixture(t)
	if a := f.check(t, checkBody("q", "quiet", "")); a.Decision != gate.OutcomeDrop || a.Reason != gate.ReasonQuietHours ||
		a.Limit == nil || a.Limit.Scope != gate.ScopeQuietHours || a.NextAllowedAt == nil {
		t.Errorf("quiet hours: got %+v", a)
	}
	if a := f.check(t, checkBody("n", "nope", "")); a.Decision != gate.OutcomeDrop || a.Reason != "unknown_scene" || a.Limit != nil {
		t.Errorf("unknown scene: got %+v", a)
	}
	if len(f.store.calls) != 0 {
		t.Errorf("the window store was asked %d times, want never", len(f.store.calls))
	}
	if f.ledger.recs["q"].Outcome != gate.OutcomeDrop || f.ledger.recs["n"].Outcome != gate.OutcomeDrop {
		t.Errorf("ledger: got %+v", f.ledger.recs)
	}
}

func TestCheckQueuedBehindHeld(t *testing.T) {
	f := newCheckFixture(t)
	f.c.core.holds = waitingBox{queues: map[gate.Queue]bool{{Recipient: "open_id:u", Name: "d"}: true}}
	a := f.check(t, checkBody("c", "d", ""))
	if a.Decision != gate.OutcomeDefer || a.Reason != gate.ReasonQueued || a.Admitted {
		t.Errorf("got %+v, want defer, queued", a)
	}
	if len(f.store.calls) != 0 {
		t.Error("a check queued behind held messages asked the window store")
	}
}

func TestCheckIDDecidedOnGateIn(t *testing.T) {
	f := newCheckFixture(t)
	f.ledger.priors["m1"] = gate.Prior{Outcome: gate.OutcomeSuppress, At: f.now.Add(-time.Minute)}
	a := f.check(t, checkBody("m1", "s", ""))
	if a.Decision != gate.OutcomeSuppress || a.Admitted || !a.Duplicate || !a.DecidedAt.Equal(f.now.Add(-time.Minute)) {
		t.Errorf("got %+v, want the ledger's suppress as a duplicate", a)
	}
	if len(f.store.calls) != 0 {
		t.Error("the window store was asked about an id decided before")
	}
}

// TestCheckClaimedConcurrently: the ledger finds the id claimed by another
// check between this one's lookup and its commit, which refused it. This
// one takes its slot back and answers with the other's answer, once it is
// stored.
func TestCheckClaimedConcurrently(t *testing.T) {
	f := newCheckFixture(t)
	other := gate.CheckAnswer{Decision: gate.OutcomeSuppress, Count: 2, RulesVersion: "v7", DecidedAt: f.now}
	f.ledger.mayCommitAgain("c1")
	f.ledger.fail = func(recs []gate.Record) error {
		// The other check commits first, and stores its answer after this
		// one's first two lookups.
		f.ledger.priors["c1"] = gate.Prior{Outcome: gate.OutcomeSuppress, At: f.now}
		f.answers.mu.Lock()
		f.answers.answers["c1"] = other
		f.answers.hide["c1"] = 2
		f.answers.mu.Unlock()
		f.ledger.fail = nil
		return nil
	}
	a := f.check(t, checkBody("c1", "s", ""))
	if !a.Duplicate || a.Count != 2 || !a.DecidedAt.Equal(f.now) || a.Decision != gate.OutcomeSuppress {
		t.Errorf("got %+v, want the other check's answer, as a duplicate", a)
	}
	if !slices.Equal(f.store.forgot, []string{"c1"}) || f.store.taken("s") != 0 {
		t.Errorf("forgot %v, %d slots taken; want c1 taken back", f.store.forgot, f.store.taken("s"))
	}
	if f.answers.saved != 0 {
		t.Error("the check that lost the claim stored its answer")
	}
}

// TestCheckClaimedByAnAdmission: the check that claimed the id first was
// admitted; the window holds the id once, so the slot this check recorded
// is that one's, and stays.
func TestCheckClaimedByAnAdmission(t *testing.T) {
	f := newCheckFixture(t)
	other := gate.CheckAnswer{Decision: gate.OutcomeForward, Admitted: true, Count: 1, RulesVersion: "v7", DecidedAt: f.now}
	f.ledger.mayCommitAgain("c1")
	f.ledger.fail = func([]gate.Record) error {
		f.ledger.priors["c1"] = gate.Prior{Outcome: gate.OutcomeForward, At: f.now}
		f.answers.answers["c1"] = other
		f.ledger.fail = nil
		return nil
	}
	if a := f.check(t, checkBody("c1", "s", "")); !a.Duplicate || !a.Admitted {
		t.Errorf("got %+v, want the other check's admission", a)
	}
	if len(f.store.forgot) != 0 || f.store.taken("s") != 1 {
		t.Errorf("forgot %v, %d slots taken; want the one slot of c1 kept", f.store.forgot, f.store.taken("s"))
	}
}

// TestCheckConcurrentSameID: many checks of one id at once, over the fake
// ledger that claims a key once: one slot, one answer for all.
func TestCheckConcurrentSameID(t *testing.T) {
	f := newCheckFixture(t)
	f.ledger.mayCommitAgain("c1")
	var wg sync.WaitGroup
	answers := make([]gate.CheckAnswer, 16)
	for i := range answers {
		wg.Go(func() {
			a, err := f.c.Check(context.Background(), checkBody("c1", "s", ""))
			if err != nil {
				t.Error(err)
			}
			answers[i] = a
		})
	}
	wg.Wait()
	if got := f.store.taken("s"); got != 1 {
		t.Errorf("slots taken: got %d, want 1", got)
	}
	// The first claim may be an ask the window found a duplicate (no limit
	// named then): every ask gets that one answer.
	for _, a := range answers {
		if a.Decision != gate.OutcomeForward || !a.Admitted || !a.DecidedAt.Equal(answers[0].DecidedAt) || a.RulesVersion != "v7" {
			t.Errorf("got %+v, want the first answer, an admitted forward", a)
		}
	}
}

func TestCheckStoreDown(t *testing.T) {
	f := newCheckFixture(t)
	f.store.fail = fmt.Errorf("redis: %w", gate.ErrUnavailable)
	_, err := f.c.Check(context.Background(), checkBody("c1", "s", ""))
	if !errors.Is(err, gate.ErrUnavailable) || !errors.Is(err, ErrCheckStore) {
		t.Errorf("retry scene: got %v, want an unavailable store", err)
	}
	if c := gate.Classify(err); c != gate.ClassUnavailable {
		t.Errorf("class %d, want ClassUnavailable (503)", c)
	}
	if len(f.ledger.recs) != 0 {
		t.Error("a check the store did not answer was recorded")
	}
	a := f.check(t, checkBody("c2", "open", ""))
	if a.Decision != gate.OutcomeForward || !a.Admitted || !a.Unchecked {
		t.Errorf("fail-open scene: got %+v, want an unchecked forward", a)
	}
	if rec := f.ledger.recs["c2"]; !rec.Unchecked {
		t.Errorf("ledger: got %+v, want an unchecked forward", rec)
	}
	if v := counterValue(t, f.m.Checks.WithLabelValues("error", "false")); v != 1 {
		t.Errorf("gate_checks_total{error}: got %v, want 1", v)
	}
}

func TestCheckAuditDown(t *testing.T) {
	f := newCheckFixture(t)
	f.ledger.fail = func([]gate.Record) error { return fmt.Errorf("pg: %w", gate.ErrUnavailable) }
	_, err := f.c.Check(context.Background(), checkBody("c1", "s", ""))
	if !errors.Is(err, gate.ErrUnavailable) {
		t.Fatalf("got %v, want an unavailable store", err)
	}
	if f.store.taken("s") != 0 || !slices.Equal(f.store.forgot, []string{"c1"}) {
		t.Errorf("an answer that was not durable kept its slot: forgot %v", f.store.forgot)
	}
}

// TestCheckCommitLostSight: a commit whose outcome the store lost sight of
// (the connection broke as it committed) may stand, answer and slot: the
// check fails for the caller to ask again, and its slot stays.
func TestCheckCommitLostSight(t *testing.T) {
	f := newCheckFixture(t)
	f.ledger.fail = func([]gate.Record) error {
		return fmt.Errorf("pg: %w: %w", gate.ErrOutcomeUnknown, gate.ErrUnavailable)
	}
	_, err := f.c.Check(context.Background(), checkBody("c1", "s", ""))
	if !errors.Is(err, gate.ErrUnavailable) {
		t.Fatalf("got %v, want an unavailable store", err)
	}
	if f.store.taken("s") != 1 || len(f.store.forgot) != 0 {
		t.Errorf("the slot of a commit that may stand: %d taken, forgot %v; want it kept", f.store.taken("s"), f.store.forgot)
	}
	f.ledger.fail = nil
	if a := f.check(t, checkBody("c1", "s", "")); !a.Admitted || f.store.taken("s") != 1 {
		t.Errorf("asked again: got %+v, %d slots taken; want admitted on its one slot", a, f.store.taken("s"))
	}
}

func TestCheckInvalidTouchesNothing(t *testing.T) {
	f := newCheckFixture(t)
	for _, body := range []string{``, `{`, `{"id":"c","scene":"s"}`, `{"id":"c","scene":"s","receive_id":"u","x":1}`} {
		_, err := f.c.Check(context.Background(), []byte(body))
		if !gate.IsInvalid(err) {
			t.Errorf("%q: got %v, want an invalid check", body, err)
		}
	}
	if len(f.store.calls) != 0 || len(f.ledger.recs) != 0 {
		t.Error("an invalid check reached a store")
	}
	if v := counterValue(t, f.m.Checks.WithLabelValues("invalid", "false")); v != 4 {
		t.Errorf("gate_checks_total{invalid}: got %v, want 4", v)
	}
}

// checkPrefs holds the preferences of recipients, or fails.
type checkPrefs struct {
	gate.PreferenceStore
	prefs map[string]gate.Preferences
	fail  error
}

func (b checkPrefs) Preferences(_ context.Context, recipients []string) (map[string]gate.Preferences, error) {
	if b.fail != nil {
		return nil, b.fail
	}
	out := map[string]gate.Preferences{}
	for _, r := range recipients {
		if p, ok := b.prefs[r]; ok {
			out[r] = p
		}
	}
	return out, nil
}

func TestCheckHonoursPreferences(t *testing.T) {
	f := newCheckFixture(t)
	f.c.core.prefs = checkPrefs{prefs: map[string]gate.Preferences{"open_id:u": {Recipient: "open_id:u", MutedScenes: []string{"s"}}}}
	a := f.check(t, checkBody("c1", "s", ""))
	if a.Decision != gate.OutcomeSuppress || a.Admitted || a.Reason != gate.ReasonPreference || a.Limit == nil || a.Limit.Scope != gate.ScopePreference {
		t.Errorf("muted scene: got %+v, want suppress by preference", a)
	}
	if len(f.store.calls) != 0 {
		t.Error("a muted check asked the window store")
	}
	if a := f.check(t, checkBody("c2", "s", `,"priority":"urgent"`)); a.Decision != gate.OutcomeForward || !a.Admitted {
		t.Errorf("bypass priority: got %+v, want forward", a)
	}
	// A lookup that fails is decided without preferences.
	f.c.core.prefs = checkPrefs{fail: fmt.Errorf("pg: %w", gate.ErrUnavailable)}
	if a := f.check(t, checkBody("c3", "s", "")); a.Decision != gate.OutcomeForward {
		t.Errorf("preferences down: got %+v, want forward", a)
	}
}
