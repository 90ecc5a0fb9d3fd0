package pipeline

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/gate"
)

// decide runs one batch of the checks of bodies, as the drain goroutine
// would take them, and returns each one's answer and error.
func (f *checkFixture) decide(t *testing.T, bodies ...[]byte) ([]gate.CheckAnswer, []error) {
	t.Helper()
	batch := make([]*checkItem, len(bodies))
	for i, b := range bodies {
		req, err := gate.ParseCheck(b)
		if err != nil {
			t.Fatal(err)
		}
		batch[i] = &checkItem{req: req, done: make(chan struct{})}
	}
	f.c.decideBatch(batch)
	answers, errs := make([]gate.CheckAnswer, len(batch)), make([]error, len(batch))
	for i, it := range batch {
		<-it.done
		answers[i], errs[i] = it.a, it.err
	}
	return answers, errs
}

// TestCheckBatchTwins: two asks of one id in one batch take one slot and
// one ledger row; the second gets the first's answer, marked duplicate.
func TestCheckBatchTwins(t *testing.T) {
	f := newCheckFixture(t)
	a, errs := f.decide(t, checkBody("c1", "s", ""), checkBody("c1", "s", ""))
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if !a[0].Admitted || a[0].Duplicate || a[0].Count != 1 {
		t.Errorf("first: got %+v, want admitted, 1 of 2", a[0])
	}
	if !a[1].Duplicate || a[1].Count != 1 || !a[1].DecidedAt.Equal(a[0].DecidedAt) || !a[1].Admitted {
		t.Errorf("twin: got %+v, want the first answer marked duplicate", a[1])
	}
	if len(f.store.calls) != 1 || f.store.taken("s") != 1 || f.ledger.commits["c1"] != 1 || f.answers.saved != 1 {
		t.Errorf("got %d admit requests, %d slots, %d commits, %d saves; want one of each",
			len(f.store.calls), f.store.taken("s"), f.ledger.commits["c1"], f.answers.saved)
	}
}

// TestCheckBatchMixesDryAndReal: dry runs ride in the batch's one Admit call
// with DryRun set, and record nothing; the real checks are committed in one
// call.
func TestCheckBatchMixesDryAndReal(t *testing.T) {
	f := newCheckFixture(t)
	a, errs := f.decide(t, checkBody("a", "s", ""), checkBody("b", "s", `,"dry_run":true`), checkBody("c", "s", ""))
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if !a[0].Admitted || a[0].Count != 1 || a[0].DryRun {
		t.Errorf("a: got %+v, want admitted, 1 of 2", a[0])
	}
	if !a[1].Admitted || !a[1].DryRun || a[1].Count != 2 {
		t.Errorf("b: got %+v, want an admitted dry run, 2 of 2", a[1])
	}
	if !a[2].Admitted || a[2].DryRun || a[2].Count != 2 {
		t.Errorf("c: got %+v, want admitted, 2 of 2 (the dry run took no slot)", a[2])
	}
	if dry := []bool{f.store.calls[0].DryRun, f.store.calls[1].DryRun, f.store.calls[2].DryRun}; len(f.store.calls) != 3 || !slices.Equal(dry, []bool{false, true, false}) {
		t.Errorf("admit requests: got %+v, want a, b dry, c", f.store.calls)
	}
	if _, ok := f.ledger.recs["b"]; ok || len(f.ledger.recs) != 2 || f.ledger.calls != 1 {
		t.Errorf("ledger: %d commits of %v; want one, of a and c", f.ledger.calls, f.ledger.recs)
	}
	if _, ok := f.answers.answers["b"]; ok || f.answers.saved != 2 {
		t.Errorf("saved %d answers (%v), want a's and c's", f.answers.saved, f.answers.answers)
	}
}

// TestCheckBatchCommitFails: a commit that fails fails every real check of
// the batch and takes their admissions back; a dry run in it is answered.
func TestCheckBatchCommitFails(t *testing.T) {
	f := newCheckFixture(t)
	f.ledger.fail = func([]gate.Record) error { return fmt.Errorf("pg: %w", gate.ErrUnavailable) }
	a, errs := f.decide(t, checkBody("a", "s", ""), checkBody("b", "s", ""), checkBody("c", "open", `,"dry_run":true`))
	for i := range 2 {
		if c := gate.Classify(errs[i]); c != gate.ClassUnavailable || !errors.Is(errs[i], ErrCheckStore) {
			t.Errorf("check %d: got %v (class %d), want ClassUnavailable (503)", i, errs[i], c)
		}
	}
	if errs[2] != nil || !a[2].DryRun || !a[2].Admitted {
		t.Errorf("dry run: got %+v, %v; want answered", a[2], errs[2])
	}
	if slices.Sort(f.store.forgot); !slices.Equal(f.store.forgot, []string{"a", "b"}) || f.store.taken("s") != 0 {
		t.Errorf("forgot %v, %d slots taken; want a and b taken back", f.store.forgot, f.store.taken("s"))
	}
	if f.answers.saved != 0 {
		t.Errorf("%d answers saved after a failed commit", f.answers.saved)
	}
}

// TestCheckBatchRefusedRecord: a record the ledger refuses for good fails its
// check alone, as invalid, and takes its admission back; the others of the
// batch are committed.
func TestCheckBatchRefusedRecord(t *testing.T) {
	f := newCheckFixture(t)
	f.ledger.refuse = func(key string) bool { return key == "bad" }
	f.ledger.mayCommitAgain("a", "b")
	a, errs := f.decide(t, checkBody("a", "s", ""), checkBody("bad", "s", ""), checkBody("b", "open", ""))
	if !gate.IsInvalid(errs[1]) {
		t.Errorf("bad: got %v, want an invalid check", errs[1])
	}
	if errs[0] != nil || errs[2] != nil || !a[0].Admitted || !a[2].Admitted {
		t.Errorf("a and b: got %+v, %+v (%v, %v); want both admitted", a[0], a[2], errs[0], errs[2])
	}
	if !slices.Equal(f.store.forgot, []string{"bad"}) || f.ledger.commits["a"] != 1 || f.ledger.commits["b"] != 1 {
		t.Errorf("forgot %v, commits %v; want bad taken back, a and b committed", f.store.forgot, f.ledger.commits)
	}
}

// heldSlots holds its first Admit call until release is closed, telling
// entered when it arrives; later calls go through meanwhile.
type heldSlots struct {
	*slots
	held    atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (h *heldSlots) Admit(ctx context.Context, reqs []gate.AdmitRequest) ([]gate.AdmitResult, error) {
	if h.held.CompareAndSwap(false, true) {
		close(h.entered)
		<-h.release
	}
	return h.slots.Admit(ctx, reqs)
}

// pending is how many checks wait for a batch.
func (c *Checker) pending() int {
	c.q.mu.Lock()
	defer c.q.mu.Unlock()
	return len(c.q.pending)
}

// TestCheckBatchCallerGone: checks queued behind a running batch form the
// next one; one caller that gives up gets a 503 at once, and is left out,
// while the others of its batch are answered.
func TestCheckBatchCallerGone(t *testing.T) {
	f := newCheckFixture(t)
	held := &heldSlots{slots: f.store, entered: make(chan struct{}), release: make(chan struct{})}
	f.c.core.store = held
	type result struct {
		a   gate.CheckAnswer
		err error
	}
	first := make(chan result, 1)
	go func() {
		a, err := f.c.Check(context.Background(), checkBody("x", "s", ""))
		first <- result{a, err}
	}()
	<-held.entered // x's batch runs, and holds the queue's drain
	ctx, cancel := context.WithCancel(context.Background())
	gone, other := make(chan result, 1), make(chan result, 1)
	go func() {
		a, err := f.c.Check(ctx, checkBody("y", "s", ""))
		gone <- result{a, err}
	}()
	go func() {
		a, err := f.c.Check(context.Background(), checkBody("z", "open", ""))
		other <- result{a, err}
	}()
	for f.c.pending() < 2 {
		runtime.Gosched()
	}
	cancel()
	y := <-gone
	if gate.Classify(y.err) != gate.ClassUnavailable || !errors.Is(y.err, context.Canceled) {
		t.Errorf("the caller that gave up: got %+v, %v; want a 503 for its cancellation", y.a, y.err)
	}
	close(held.release)
	for name, ch := range map[string]chan result{"x": first, "z": other} {
		if r := <-ch; r.err != nil || !r.a.Admitted {
			t.Errorf("%s: got %+v, %v; want admitted", name, r.a, r.err)
		}
	}
	if _, ok := f.ledger.recs["y"]; ok || f.ledger.recs["z"].Outcome != gate.OutcomeForward {
		t.Errorf("ledger: %v; want z, and not y, whose caller was gone before its batch", f.ledger.recs)
	}
	if len(f.store.calls) != 2 || f.store.calls[1].ID != "z" {
		t.Errorf("admit requests: %+v; want x's, then z's alone", f.store.calls)
	}
}

// batchAnswers is an answerBox that looks up and saves many answers in one
// call, counting the calls.
type batchAnswers struct {
	*answerBox
	lookups, saves int
}

func (b *batchAnswers) Answers(ctx context.Context, ids []string) (map[string]gate.StoredAnswer, error) {
	b.lookups++
	out := map[string]gate.StoredAnswer{}
	for _, id := range ids {
		a, found, prior, _ := b.Answer(ctx, id)
		out[id] = gate.StoredAnswer{Answer: a, Found: found, Prior: prior}
	}
	return out, nil
}

func (b *batchAnswers) SaveAll(ctx context.Context, answers map[string]gate.CheckAnswer) error {
	b.saves++
	for id, a := range answers {
		if err := b.Save(ctx, id, a); err != nil {
			return err
		}
	}
	return nil
}

// TestCheckBatchLooksUpOnce: with a store that can, a batch looks its ids
// up in one call and saves its answers in one: an id answered before gets
// that answer, an id the ledger holds gets its outcome, a new one is
// decided.
func TestCheckBatchLooksUpOnce(t *testing.T) {
	f := newCheckFixture(t)
	ba := &batchAnswers{answerBox: f.answers}
	f.c.o.Answers = ba
	old := gate.CheckAnswer{Decision: gate.OutcomeSuppress, Count: 2, RulesVersion: "v6", DecidedAt: f.now.Add(-time.Hour)}
	f.answers.answers["old"] = old
	f.ledger.priors["old"] = gate.Prior{Outcome: gate.OutcomeSuppress, At: old.DecidedAt}
	f.ledger.priors["m1"] = gate.Prior{Outcome: gate.OutcomeDrop, At: f.now.Add(-time.Minute)}
	a, errs := f.decide(t, checkBody("old", "s", ""), checkBody("m1", "s", `,"dry_run":true`), checkBody("new", "s", ""), checkBody("new2", "s", ""))
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if !a[0].Duplicate || a[0].RulesVersion != "v6" || a[0].Count != 2 {
		t.Errorf("old: got %+v, want its stored answer as a duplicate", a[0])
	}
	if !a[1].Duplicate || a[1].DryRun || a[1].Decision != gate.OutcomeDrop || !a[1].DecidedAt.Equal(f.now.Add(-time.Minute)) {
		t.Errorf("m1: got %+v, want the ledger's drop as a duplicate", a[1])
	}
	if !a[2].Admitted || a[3].Count != 2 || a[2].Duplicate {
		t.Errorf("new, new2: got %+v, %+v; want both admitted", a[2], a[3])
	}
	if ba.lookups != 1 || ba.saves != 1 || len(f.store.calls) != 2 {
		t.Errorf("%d lookups, %d saves, %d admit requests; want 1, 1 and 2 (new and new2)", ba.lookups, ba.saves, len(f.store.calls))
	}
	if again := f.check(t, checkBody("new", "s", "")); !again.Duplicate || !again.DecidedAt.Equal(a[2].DecidedAt) {
		t.Errorf("new asked again: got %+v, want its first answer", again)
	}
}

// TestCheckBatchesOverlapUnderLoad: once overlapAt checks wait behind a
// batch held on the window store, a second batch decides them meanwhile;
// fewer keep waiting for it (TestCheckBatchCallerGone).
func TestCheckBatchesOverlapUnderLoad(t *testing.T) {
	f := newCheckFixture(t)
	held := &heldSlots{slots: f.store, entered: make(chan struct{}), release: make(chan struct{})}
	f.c.core.store = held
	first := make(chan error, 1)
	go func() {
		_, err := f.c.Check(context.Background(), checkBody("x", "open", ""))
		first <- err
	}()
	<-held.entered // x's batch runs, held
	queued := make(chan error, overlapAt)
	ask := func(id string) {
		_, err := f.c.Check(context.Background(), checkBody(id, "open", ""))
		queued <- err
	}
	for i := range overlapAt - 1 {
		go ask(fmt.Sprintf("q%d", i))
	}
	for f.c.pending() < overlapAt-1 {
		runtime.Gosched()
	}
	f.c.q.mu.Lock()
	drains := f.c.q.draining
	f.c.q.mu.Unlock()
	if drains != 1 {
		t.Fatalf("%d drains with %d checks waiting; want 1 below overlapAt", drains, overlapAt-1)
	}
	go ask("last")
	timeout := time.After(30 * time.Second)
	for range overlapAt {
		select {
		case err := <-queued:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatal("the queued checks still wait for the held batch: no second batch started")
		}
	}
	select {
	case err := <-first:
		t.Fatalf("x answered (%v) while its batch was held", err)
	default:
	}
	close(held.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}
