package pipeline

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
	"github.com/antifatigue/gate/internal/inmem"
	"github.com/antifatigue/gate/internal/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The fakes below stand for the adapters: the pipeline sees them only
// through the gate interfaces.

type staticRules struct{ rs *gate.RuleSet }

func (r staticRules) Current() *gate.RuleSet  { return r.rs }
func (r staticRules) Status() gate.RuleStatus { return gate.RuleStatus{Rules: r.rs} }

// admitAll admits every request, as a store with room to spare would.
type admitAll struct{}

func (admitAll) Admit(_ context.Context, reqs []gate.AdmitRequest) ([]gate.AdmitResult, error) {
	res := make([]gate.AdmitResult, len(reqs))
	for i := range res {
		res[i] = gate.AdmitResult{Admitted: true, Now: time.Now()}
	}
	return res, nil
}

func (admitAll) Ping(context.Context) error { return nil }

func (admitAll) Forget(context.Context, []gate.AdmitRequest) error { return nil }

// ledger is an audit log in memory: it claims each key once, as the real
// one does; commits counts the claims of each key (at most one).
//
// A key in a successful Commit call is a commit of it, claimed or found
// known: a test fails at once when one key is committed twice, unless it
// said so (again), since each commit means the pipeline decided the id
// again instead of finding it decided. refuse, when set, makes Commit and
// Decided refuse a batch holding a key it matches, as PostgreSQL refuses
// text that is not UTF-8; fail, when set, can fail a Commit transiently.
type ledger struct {
	tb      testing.TB
	mu      sync.Mutex
	commits map[string]int
	priors  map[string]gate.Prior
	offered map[string]int
	again   map[string]bool
	refuse  func(key string) bool
	fail    func(recs []gate.Record) error
	calls   int // Commit calls
	// recs holds the records claimed; holds, when set, takes their held
	// messages, as the audit store's held table does.
	recs  map[string]gate.Record
	holds *holdBox
}

func newLedger(tb testing.TB) *ledger {
	return &ledger{tb: tb, commits: map[string]int{}, priors: map[string]gate.Prior{}, offered: map[string]int{}, again: map[string]bool{},
		recs: map[string]gate.Record{}}
}

// mayCommitAgain allows keys to be committed more than once.
func (l *ledger) mayCommitAgain(keys ...string) {
	for _, k := range keys {
		l.again[k] = true
	}
}

func (l *ledger) refused(keys []string) error {
	for _, k := range keys {
		if l.refuse != nil && l.refuse(k) {
			return fmt.Errorf("fake store: %w: key %q", gate.ErrPermanent, k)
		}
	}
	return nil
}

func (l *ledger) Decided(_ context.Context, keys []string) (map[string]gate.Prior, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.refused(keys); err != nil {
		return nil, err
	}
	known := map[string]gate.Prior{}
	for _, k := range keys {
		if p, ok := l.priors[k]; ok {
			known[k] = p
		}
	}
	return known, nil
}

func (l *ledger) Commit(_ context.Context, recs []gate.Record) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls++
	keys := make([]string, len(recs))
	for i, r := range recs {
		keys[i] = r.Key
	}
	if err := l.refused(keys); err != nil {
		return nil, err
	}
	if l.fail != nil {
		if err := l.fail(recs); err != nil {
			return nil, err
		}
	}
	var known []string
	for _, r := range recs {
		l.offered[r.Key]++
		if n := l.offered[r.Key]; n > 1 && !l.again[r.Key] {
			l.tb.Errorf("%q committed %d times", r.Key, n)
		}
		if _, ok := l.priors[r.Key]; ok {
			known = append(known, r.Key)
			continue
		}
		l.commits[r.Key]++
		l.priors[r.Key] = gate.Prior{Outcome: r.Outcome, At: r.At, Scene: r.Scene, Recipient: r.Recipient}
		l.recs[r.Key] = r
		if l.holds != nil && r.Hold != nil {
			l.holds.add(*r.Hold)
		}
	}
	return known, nil
}

func (l *ledger) Ping(context.Context) error { return nil }

// outbox records the ids forwarded, in order, and like GATE_OUT's duplicate
// window it keeps one copy of each; publishes counts every attempt. A test
// fails at once when one id is published twice, unless it said so (again).
type outbox struct {
	tb        testing.TB
	mu        sync.Mutex
	ids       []string
	stored    map[string]bool
	publishes int
	perID     map[string]int
	again     map[string]bool
	// stored forwards, in order; fail, when set, can fail a publish.
	fs   []gate.Forward
	fail func(f gate.Forward) error
}

func newOutbox(tb testing.TB) *outbox {
	return &outbox{tb: tb, stored: map[string]bool{}, perID: map[string]int{}, again: map[string]bool{}}
}

func (o *outbox) Forward(_ context.Context, fs []gate.Forward) []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	errs := make([]error, len(fs))
	for i, f := range fs {
		if o.fail != nil {
			if errs[i] = o.fail(f); errs[i] != nil {
				continue
			}
		}
		o.publishes++
		o.perID[f.MessageID]++
		if n := o.perID[f.MessageID]; n > 1 && !o.again[f.MessageID] {
			o.tb.Errorf("%q published %d times", f.MessageID, n)
		}
		if !o.stored[f.MessageID] {
			o.stored[f.MessageID] = true
			o.ids = append(o.ids, f.MessageID)
			o.fs = append(o.fs, f)
		}
	}
	return errs
}

// mayPublishAgain allows ids to be published more than once.
func (o *outbox) mayPublishAgain(ids ...string) {
	for _, id := range ids {
		o.again[id] = true
	}
}

func (o *outbox) forwarded() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ids)
}

func newPipeline(t *testing.T) (*Pipeline, *ledger, *outbox) {
	t.Helper()
	rs := &gate.RuleSet{UnknownScene: gate.ActionForward, Scenes: map[string]gate.SceneRule{
		"s": {OnExceed: gate.ActionSuppress, Limits: []gate.Limit{{Window: time.Hour, Max: 100}}},
	}}
	l, o := newLedger(t), newOutbox(t)
	p, err := New(Options{Rules: staticRules{rs}, Store: admitAll{}, Audit: l, Forwarder: o})
	if err != nil {
		t.Fatal(err)
	}
	return p, l, o
}

func deliveries(ids ...string) []gate.Delivery {
	ds := make([]gate.Delivery, len(ids))
	for i, id := range ids {
		ds[i] = gate.Delivery{Data: fmt.Appendf(nil, `{"id":%q,"scene":"s","receive_id":"ou_1"}`, id), NumDelivered: 1}
	}
	return ds
}

// handle decides batch in one step: Start, then its finish.
func handle(p *Pipeline, ctx context.Context, batch []gate.Delivery) []error {
	return p.Start(ctx, batch)()
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
}

// A batch finished before the one started ahead of it still forwards after
// it: the outbound stream sees a recipient's messages in decision order.
func TestForwardsFollowStartOrder(t *testing.T) {
	p, _, out := newPipeline(t)
	ctx := t.Context()
	finishA := p.Start(ctx, deliveries("a1", "a2"))
	finishB := p.Start(ctx, deliveries("b1"))
	doneB := make(chan []error, 1)
	go func() { doneB <- finishB() }()
	time.Sleep(100 * time.Millisecond)
	if got := out.forwarded(); len(got) != 0 {
		t.Fatalf("forwarded %v before the batch started first finished", got)
	}
	noErrors(t, finishA())
	noErrors(t, <-doneB)
	if got, want := out.forwarded(), []string{"a1", "a2", "b1"}; !slices.Equal(got, want) {
		t.Fatalf("forwarded %v, want %v", got, want)
	}
}

// An id that a batch in flight holds is decided again only once that batch
// is durable: then the ledger knows it, and it is neither forwarded nor
// counted twice, though it is a first delivery, which is not looked up.
func TestIDInFlightWaitsForItsBatch(t *testing.T) {
	p, led, out := newPipeline(t)
	// The second x finds x decided by committing it, and, decided within
	// ReplayWithin, publishes its forward again, which GATE_OUT keeps once.
	led.mayCommitAgain("x")
	out.mayPublishAgain("x")
	ctx := t.Context()
	finishA := p.Start(ctx, deliveries("x", "y"))
	started := make(chan func() []error, 1)
	go func() { started <- p.Start(ctx, deliveries("z", "x")) }()
	select {
	case <-started:
		t.Fatal("a batch holding an id in flight started before that id's batch finished")
	case <-time.After(100 * time.Millisecond):
	}
	noErrors(t, finishA())
	noErrors(t, (<-started)())
	if got, want := out.forwarded(), []string{"x", "y", "z"}; !slices.Equal(got, want) {
		t.Fatalf("forwarded %v, want %v", got, want)
	}
	if n := led.commits["x"]; n != 1 {
		t.Fatalf("x committed %d times, want once", n)
	}
}

// An invalid message that reached GATE_IN twice under one Nats-Msg-Id (a
// producer's retry after a nats-server restart) is counted once, and both
// copies go to the dead letter, which keeps one; one without a header is
// known by its stream sequence.
func TestInvalidRetryCountsOnce(t *testing.T) {
	p, led, _ := newPipeline(t)
	// The second batch's first delivery of x is not looked up: its commit
	// finds x decided.
	led.mayCommitAgain("invalid:x")
	ctx := t.Context()
	bad := func(seq uint64, header string) gate.Delivery {
		return gate.Delivery{Data: []byte(`{"id":"x","receive_id":"ou_1"}`), HeaderID: header, Seq: seq, NumDelivered: 1}
	}
	for _, batch := range [][]gate.Delivery{
		{bad(1, "x"), bad(2, "x")},
		{bad(3, "x"), bad(4, "")},
	} {
		for i, err := range handle(p, ctx, batch) {
			if !gate.IsInvalid(err) {
				t.Fatalf("delivery %d: got %v, want an invalid error", i, err)
			}
		}
	}
	want := map[string]int{"invalid:x": 1, "seq:4": 1}
	if !maps.Equal(led.commits, want) {
		t.Fatalf("committed %v, want %v", led.commits, want)
	}
}

// A producer that publishes an id again, as a new message after GATE_IN's
// duplicate window, gets its first outcome: the first delivery is not looked
// up, so the window admits it once the window reopened, but the commit finds
// the id decided, and the admission is neither forwarded nor left counting.
func TestRepublishedIDKeepsFirstOutcome(t *testing.T) {
	now := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	rs := &gate.RuleSet{UnknownScene: gate.ActionForward, Scenes: map[string]gate.SceneRule{
		"s": {OnExceed: gate.ActionSuppress, Limits: []gate.Limit{{Window: time.Hour, Max: 1}}},
	}}
	led, out := newLedger(t), newOutbox(t)
	// b is decided again, by design: the commit is what finds it decided.
	led.mayCommitAgain("b")
	p, err := New(Options{Rules: staticRules{rs}, Store: inmem.New(inmem.Options{Now: clock}), Audit: led, Forwarder: out, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	noErrors(t, handle(p, ctx, deliveries("a")))
	noErrors(t, handle(p, ctx, deliveries("b"))) // suppressed: a fills the window
	now = now.Add(2 * time.Hour)
	noErrors(t, handle(p, ctx, deliveries("b"))) // admitted by the window, known to the ledger
	noErrors(t, handle(p, ctx, deliveries("c"))) // the window has room: b was taken out
	if got, want := out.forwarded(), []string{"a", "c"}; !slices.Equal(got, want) {
		t.Fatalf("forwarded %v, want %v", got, want)
	}
	if got := led.priors["b"].Outcome; got != gate.OutcomeSuppress {
		t.Fatalf("b: ledger says %q, want suppress", got)
	}
}

// A message that comes back after its forward was committed publishes the
// forward again (the outbound stream keeps one copy): the first publish may
// have been lost in a crash between commit and publish. A redelivered
// message always does, however old the decision: a lost forward is worse
// than a late copy. A first delivery of an id decided as a forward does
// within ReplayWithin (a nats-server restarted uncleanly can deliver a
// message again as if for the first time), and beyond it is a producer's
// second publish, which gets no second forward. Only forwards are replayed.
func TestCommittedForwardIsPublishedAgain(t *testing.T) {
	p, led, out := newPipeline(t)
	now := time.Now()
	old := now.Add(-2 * DefaultReplayWithin)
	led.priors = map[string]gate.Prior{
		"lost":       {Outcome: gate.OutcomeForward, At: now.Add(-time.Minute)},
		"suppressed": {Outcome: gate.OutcomeSuppress, At: now.Add(-time.Minute)},
		"old":        {Outcome: gate.OutcomeForward, At: old},
	}
	ds := deliveries("lost", "suppressed", "old", "new")
	for i := range ds {
		ds[i].NumDelivered = 2
	}
	noErrors(t, handle(p, t.Context(), ds))
	if got, want := out.forwarded(), []string{"lost", "old", "new"}; !slices.Equal(got, want) {
		t.Fatalf("redelivered: forwarded %v, want %v", got, want)
	}
	if got := led.commits; !maps.Equal(got, map[string]int{"new": 1}) {
		t.Fatalf("claims %v, want only new", got)
	}

	led.priors["recent"] = gate.Prior{Outcome: gate.OutcomeForward, At: now.Add(-time.Minute)}
	led.priors["republished"] = gate.Prior{Outcome: gate.OutcomeForward, At: old}
	noErrors(t, handle(p, t.Context(), deliveries("recent", "republished")))
	if got, want := out.forwarded(), []string{"lost", "old", "new", "recent"}; !slices.Equal(got, want) {
		t.Fatalf("first deliveries: forwarded %v, want %v", got, want)
	}
}

// A message that carries Nats-Msg-Id, Gate-Scene and Gate-Recipient is
// decided from them: its body is not decoded, so one that is not JSON is
// forwarded untouched, not sent to the dead letter.
func TestHeadersDecideWithoutTheBody(t *testing.T) {
	p, led, out := newPipeline(t)
	d := gate.Delivery{Data: []byte("plain text, not JSON"), HeaderID: "h1", HeaderScene: "s", HeaderRecipient: "open_id:ou_1", NumDelivered: 1}
	noErrors(t, handle(p, t.Context(), []gate.Delivery{d}))
	if got := out.forwarded(); !slices.Equal(got, []string{"h1"}) {
		t.Fatalf("forwarded %v, want [h1]", got)
	}
	if got := led.priors["h1"].Outcome; got != gate.OutcomeForward {
		t.Fatalf("ledger: %q, want forward", got)
	}
}

// Every call to a dependency is timed, by store and operation.
func TestCallsAreTimed(t *testing.T) {
	_, led, out := newPipeline(t)
	m := metrics.New(prometheus.NewRegistry())
	rs := &gate.RuleSet{UnknownScene: gate.ActionForward, Scenes: map[string]gate.SceneRule{
		"s": {OnExceed: gate.ActionSuppress, Limits: []gate.Limit{{Window: time.Hour, Max: 100}}},
	}}
	p, err := New(Options{Rules: staticRules{rs}, Store: admitAll{}, Audit: led, Forwarder: out, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	again := deliveries("b")
	again[0].NumDelivered = 2
	noErrors(t, handle(p, t.Context(), append(deliveries("a"), again...)))
	for _, c := range [][2]string{{"window", "admit"}, {"audit", "decided"}, {"audit", "commit"}, {"nats", "forward"}} {
		h := m.StoreLatency.WithLabelValues(c[0], c[1]).(prometheus.Histogram)
		var d dto.Metric
		if err := h.Write(&d); err != nil {
			t.Fatal(err)
		}
		if n := d.GetHistogram().GetSampleCount(); n != 1 {
			t.Errorf("gate_store_call_seconds{store=%q,op=%q}: %d calls, want 1", c[0], c[1], n)
		}
	}
}

// A batch whose commit panics still hands the turn to forward on to the
// batch started after it: that one forwards at once, not at its deadline.
func TestPanickedBatchPassesItsTurnOn(t *testing.T) {
	p, l, out := newPipeline(t)
	l.fail = func(recs []gate.Record) error {
		if recs[0].Key == "a1" {
			panic("a library failed on a1")
		}
		return nil
	}
	// b's deadline is far off: were the turn not passed on, it would wait
	// for it.
	finishA := p.Start(t.Context(), deliveries("a1"))
	finishB := p.Start(t.Context(), deliveries("b1"))
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Fatal("the commit of a1 did not panic")
			}
		}()
		finishA()
	}()
	done := make(chan []error, 1)
	go func() { done <- finishB() }()
	select {
	case errs := <-done:
		noErrors(t, errs)
	case <-time.After(time.Minute):
		t.Fatal("the batch after a panicked one did not finish: it never got its turn to forward")
	}
	if got, want := out.forwarded(), []string{"b1"}; !slices.Equal(got, want) {
		t.Fatalf("forwarded %v, want %v", got, want)
	}
}
