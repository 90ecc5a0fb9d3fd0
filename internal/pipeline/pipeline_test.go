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

// ledger is an audit log in memory.
type ledger struct {
	mu      sync.Mutex
	commits map[string]int
}

func (l *ledger) Decided(_ context.Context, keys []string) (map[string]bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	known := map[string]bool{}
	for _, k := range keys {
		if l.commits[k] > 0 {
			known[k] = true
		}
	}
	return known, nil
}

func (l *ledger) Commit(_ context.Context, recs []gate.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range recs {
		l.commits[r.Key]++
	}
	return nil
}

func (l *ledger) Ping(context.Context) error { return nil }

// outbox records the ids forwarded, in order.
type outbox struct {
	mu  sync.Mutex
	ids []string
}

func (o *outbox) Forward(_ context.Context, fs []gate.Forward) []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, f := range fs {
		o.ids = append(o.ids, f.MessageID)
	}
	return make([]error, len(fs))
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
	l, o := &ledger{commits: map[string]int{}}, &outbox{}
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
// counted twice.
func TestIDInFlightWaitsForItsBatch(t *testing.T) {
	p, led, out := newPipeline(t)
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
	ctx := t.Context()
	bad := func(seq uint64, header string) gate.Delivery {
		return gate.Delivery{Data: []byte(`{"id":"x","receive_id":"ou_1"}`), HeaderID: header, Seq: seq, NumDelivered: 1}
	}
	for _, batch := range [][]gate.Delivery{
		{bad(1, "x"), bad(2, "x")},
		{bad(3, "x"), bad(4, "")},
	} {
		for i, err := range p.Handle(ctx, batch) {
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
